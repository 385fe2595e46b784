"""The Ray backend (``backend="ray"``): one Ray task per trial, on a cluster.

Ray places the trials (``num_gpus = 1 / per_gpu`` sets ``CUDA_VISIBLE_DEVICES``,
``num_cpus`` from ``cpus_per_trial``) and runs each in a fresh worker process
(``max_calls=1``), so its GPU memory is released as in the local backend. The trial's
bootstrap is :func:`sweeper.child.channel.channel_main`; the ledger, CSVs, resume,
retries, timeouts and statuses are the engine's, on the driver, as for local trials.

Data flow::

    driver (this process)                          Ray worker (one per trial, any node)
    start: submit channel_main(spec, train, env) ▶ env, cap, seeds, log → train(params)
    wait: ray.wait(refs) ◀── result + log ──────── return {result, log, pid, device}
          writes result.json, appends log.txt (sweeper.backends.channel)
          channel.get_nowait_batch() ◀── Placed, Reports, Exiting ── channel.put(...)
    cancel: ray.cancel(force=True) (timeout, Ctrl-C)
    close: where a killed task had a temporary folder, a task on its node removes it

The trial's folder is the sweep's own where the node sees it (this machine, or a shared
filesystem at the same path); elsewhere a temporary folder on the node, removed when the
task ends (see :mod:`sweeper.child.channel`). Either way the driver writes
``result.json`` and ``log.txt`` into the sweep's folder, as a local trial does.

User code travels: when sweeper opens the connection it ships the grid file's folder as
the job's ``working_dir``; when the caller already ran ``ray.init``, the module defining
``train`` is pickled by value (``cloudpickle.register_pickle_by_value``), since a task's
own ``runtime_env`` cannot upload local files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import sys
from dataclasses import dataclass
from typing import Any

from sweeper.backends.channel import Relay, finished
from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.protocol import Event, Exited, Traits
from sweeper.model.target import FileTarget, FunctionTarget, Target
from sweeper.model.trial import TrialSpec
from sweeper.model.devices import MemoryPolicy

#: Seconds between looks at the report queue while tasks run.
POLL = 0.2
#: Seconds a node's clean-up waits for a killed trial's process to be gone, at the end.
CLEAN_WAIT = 5.0


def connect(address: str | None, target: Target) -> tuple[Any, Any]:
    """A Ray connection (the caller's, or one sweeper opens) and ``train`` in a form that travels."""
    try:
        import ray
    except ImportError:
        raise SweepError('--backend ray needs Ray: pip install "sweeper[ray]"') from None
    if ray.is_initialized():
        return ray, _by_value(target)
    runtime_env: dict[str, Any] = {}
    travels: Any
    if isinstance(target, FileTarget):
        folder = os.path.dirname(target.path)
        runtime_env = {"working_dir": folder, "excludes": ["results/", ".git/", "*.sqlite*", "__pycache__/"]}
        travels = FileTarget(os.path.basename(target.path), target.attr, target.shell)
    else:
        travels = _by_value(target)
    try:
        ray.init(address=address, runtime_env=runtime_env or None, include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise SweepError(f"cannot reach a Ray cluster at {address!r} ({exc}); start one with "
                         "ray start --head, or leave out --address for a local one") from None
    return ray, travels


def _by_value(target: Target) -> Any:
    """Make ``train``'s module travel inside the pickle unless it is an installed package."""
    if not isinstance(target, FunctionTarget):
        return target
    import pickle

    from ray import cloudpickle  # Ray pickles task arguments with its own copy

    fn = pickle.loads(target.blob)
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    path = getattr(module, "__file__", "") or ""
    if module is not None and "site-packages" not in path and module.__name__ not in ("__main__",):
        if module.__name__.split(".")[0] != "sweeper":
            cloudpickle.register_pickle_by_value(module)
    return fn


@dataclass
class _Task:
    spec: TrialSpec
    ref: Any
    cancelled: bool = False


class RayBackend:
    """Trials as Ray tasks (see the module docstring)."""

    def __init__(self, target: Target, policy: MemoryPolicy, *, address: str | None = None,
                 gpus: bool = True, cpus_per_trial: float = 1.0, workers: int | None = None) -> None:
        self.ray, self.target = connect(address, target)
        from ray.util.queue import Queue

        from sweeper.child.channel import channel_main

        self.channel = Queue()
        #: Nodes where a task with a temporary folder was killed: they remove it at the end.
        self.litter: set[str] = set()
        # a fresh worker process per trial; retries are sweeper's (they follow --retries)
        self.remote = self.ray.remote(max_calls=1, max_retries=0)(channel_main)
        resources = self.ray.cluster_resources()
        self.num_gpus = (1.0 / policy.per_gpu) if gpus and resources.get("GPU", 0) > 0 else 0.0
        self.cpus = cpus_per_trial
        if self.num_gpus:
            capacity = int(resources["GPU"] * policy.per_gpu)
        else:
            capacity = int(resources.get("CPU", 1) // cpus_per_trial)
        # Ray's only stop is a forced cancel; a task has no way back from the driver: a
        # pruner's verdict cancels it (see ``cancel``)
        self.traits = Traits(max(1, min(workers or capacity, capacity)), stop_word="cancelled", answers=False)
        # Ray numbers a node's GPUs as nvidia-smi does; CUDA must too (else, on a node of
        # unlike cards, fastest first), so the id Ray gives, the cap's card and NVML agree.
        self.env = ({**policy.env(None), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if self.num_gpus
                    else {"CUDA_VISIBLE_DEVICES": "-1"})
        self.tasks: dict[str, _Task] = {}  #: by trial id
        self.relay = Relay(self.env.get(contract.MEMORY_FRACTION))  #: the channel's messages, made events

    def open(self) -> None:
        pass

    def start(self, spec: TrialSpec) -> None:
        from sweeper.child.channel import sweep_token

        ref = self.remote.options(num_cpus=self.cpus, num_gpus=self.num_gpus).remote(
            spec, self.target, self.env, self.channel, sweep_token(spec.dir))
        self.tasks[spec.trial_id] = _Task(spec, ref)
        self.relay.watch(spec.trial_id)
        return None  # Began comes when the task starts on its worker (Placed)

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Event]]:
        timeout = POLL if timeout is None else min(POLL, timeout)
        refs = [t.ref for t in self.tasks.values()]
        ready: list[Any] = []
        if refs:
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        elif timeout:
            select.select([wake], [], [], timeout)
        events = self._drain_channel()
        by_ref = {t.ref: t for t in self.tasks.values()}
        for ref in ready:
            events += self._finish(by_ref[ref])
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Event]]:
        """A task whose result is in already ends now, as it is."""
        task = self.tasks.get(trial_id)
        if task is None:
            return []
        done, _ = self.ray.wait([task.ref], timeout=0)
        return self._drain_channel() + (self._finish(task) if done else [])

    def cancel(self, trial_id: str, hard: bool) -> None:
        """Ray's only reliable stop is a forced one (it kills the worker process)."""
        task = self.tasks.get(trial_id)
        if task is not None and not task.cancelled:
            task.cancelled = True
            self.ray.cancel(task.ref, force=True)

    def tell(self, trial_id: str, message: Any) -> None:
        pass  # never called: ``answers`` is False

    def close(self) -> list[tuple[str, Event]]:
        with contextlib.suppress(Exception):  # (Ray may be what failed)
            self._drain_channel()  # which nodes the tasks still here keep folders on
        for task in list(self.tasks.values()):
            self.ray.cancel(task.ref, force=True)
            node = self.relay.forget(task.spec.trial_id).node
            if node is not None:
                self.litter.add(node)
        self.tasks.clear()
        self._clean(self.litter)
        return []

    def _clean(self, nodes: set[str]) -> None:
        """Have each node remove the temporary folders its killed tasks left (a SIGKILL
        gives them no chance to); best effort, bounded in time."""
        if not nodes:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from sweeper.child.channel import remove_leftovers

        with contextlib.suppress(Exception):
            alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
            clean = self.ray.remote(num_cpus=0, max_retries=0)(remove_leftovers)
            refs = [clean.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                    .remote(CLEAN_WAIT) for node in sorted(nodes & alive)]
            if not refs:
                return
            _, late = self.ray.wait(refs, num_returns=len(refs), timeout=CLEAN_WAIT + 10)
            for ref in late:
                self.ray.cancel(ref, force=True)

    # -- events ---------------------------------------------------------------------------

    def _drain_channel(self) -> list[tuple[str, Event]]:
        return self.relay.events(self.channel.get_nowait_batch(self.channel.qsize()))

    def _finish(self, task: _Task) -> list[tuple[str, Event]]:
        """The task is done: its result and log, or how it failed."""
        from ray.exceptions import RayError, TaskCancelledError

        self.tasks.pop(task.spec.trial_id, None)
        heard = self.relay.forget(task.spec.trial_id)
        tid = task.spec.trial_id
        try:
            out = self.ray.get(task.ref)
        except TaskCancelledError:
            if heard.node is not None:
                self.litter.add(heard.node)
            return [(tid, Exited(heard.exitcode, cancelled=True))]
        except RayError as exc:  # the worker or its node died: WorkerCrashedError, NodeDiedError...
            if heard.node is not None:
                self.litter.add(heard.node)
            kind = type(exc).__name__
            note = kind if heard.exitcode is not None else f"{kind}: {str(exc).strip().splitlines()[0]}"
            return [(tid, Exited(heard.exitcode, note=note))]
        return finished(task.spec, out, heard.exitcode)
