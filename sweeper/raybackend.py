"""The same sweep on a Ray cluster (``backend="ray"``): one Ray task per trial.

Ray places the trials (``num_gpus = 1 / per_gpu`` sets ``CUDA_VISIBLE_DEVICES``,
``num_cpus`` from ``cpus_per_trial``) and runs each in a fresh worker process
(``max_calls=1``), so its GPU memory is released as in the local backend. The trial's
bootstrap is :func:`sweeper.worker.ray_main`, the local one's twin; the ledger, CSVs,
resume, retries, timeouts and statuses are the local backend's, on the driver.

Data flow::

    driver (this process)                          Ray worker (one per trial, any node)
    queue ─▶ submit ray_main(spec, train, env) ──▶ env, cap, seeds, log → train(params)
    ray.wait(refs, deadline) ◀── result + log ──── return {message, log, pid, device}
    channel.get_nowait_batch() ◀── placed/report ── channel.put(...)
    ledger.record ─▶ results.csv, history.csv       (ray.cancel(force=True): timeout, Ctrl-C)

User code travels: when sweeper opens the connection it ships the grid file's folder as
the job's ``working_dir``; when the caller already ran ``ray.init``, the module defining
``train`` is pickled by value (``cloudpickle.register_pickle_by_value``), since a task's
own ``runtime_env`` cannot upload local files.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from .capping import MemoryPolicy
from .errors import SweepError
from .ledger import Ledger
from .metrics import printable
from .scheduler import Hooks, Loop, _catch, _load_error, _trial_env, now_iso, oom_hint
from .slots import Slot
from .target import FileTarget, FunctionTarget, Target
from .trial import Status, TrialResult, TrialSpec

#: Seconds between looks at the report queue and the deadlines while tasks run.
POLL = 0.2


def connect(address: str | None, target: Target) -> tuple[Any, Target]:
    """A Ray connection (the caller's, or one sweeper opens) and ``train`` in a form that travels."""
    try:
        import ray
    except ImportError:
        raise SweepError('--backend ray needs Ray: pip install "sweeper[ray]"') from None
    if ray.is_initialized():
        return ray, _by_value(target)
    runtime_env: dict[str, Any] = {}
    if isinstance(target, FileTarget):
        folder = os.path.dirname(target.path)
        runtime_env = {"working_dir": folder, "excludes": ["results/", ".git/", "*.sqlite*", "__pycache__/"]}
        target = FileTarget(os.path.basename(target.path), target.attr, target.shell)
    else:
        target = _by_value(target)
    try:
        ray.init(address=address, runtime_env=runtime_env or None, include_dashboard=False,
                 log_to_driver=False, logging_level="WARNING")
    except ConnectionError as exc:
        raise SweepError(f"cannot reach a Ray cluster at {address!r} ({exc}); start one with "
                         "ray start --head, or leave out --address for a local one") from None
    return ray, target


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
    submitted: float
    started_at: str
    t0: float | None = None  # when the task began on its worker
    deadline: float | None = None
    verdict: Status | None = None
    why: str = ""
    device: str = ""
    pid: int = 0
    reported: bool = False
    exitcode: int | None = None  #: told by the trial as it called os._exit (Ray does not say)


class RayScheduler(Loop):
    """The local Scheduler's contract, on Ray: every trial ends as one recorded result."""

    def __init__(
        self,
        target: Target,
        policy: MemoryPolicy,
        ledger: Ledger,
        *,
        address: str | None = None,
        gpus: bool = True,
        cpus_per_trial: float = 1.0,
        hooks: Hooks = Hooks(),
        workers: int | None = None,
        timeout: float | None = None,
        retries: int = 0,
    ) -> None:
        super().__init__(ledger, hooks, timeout, retries)
        self.ray, self.target = connect(address, target)
        from ray.util.queue import Queue

        self.channel = Queue()
        from .worker import ray_main

        # a fresh worker process per trial; retries are sweeper's (they follow --retries)
        self.remote = self.ray.remote(max_calls=1, max_retries=0)(ray_main)
        self.policy = policy
        resources = self.ray.cluster_resources()
        self.num_gpus = (1.0 / policy.per_gpu) if gpus and resources.get("GPU", 0) > 0 else 0.0
        self.cpus = cpus_per_trial
        if self.num_gpus:
            capacity = int(resources["GPU"] * policy.per_gpu)
        else:
            capacity = int(resources.get("CPU", 1) // cpus_per_trial)
        self.limit = max(1, min(workers or capacity, capacity))
        self.env = policy.env(None) if self.num_gpus else {"CUDA_VISIBLE_DEVICES": "-1"}
        self.slot = Slot(0, "ray" if self.num_gpus else None, self.env)
        self.tasks: dict[Any, _Task] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    def run(self, specs: Sequence[TrialSpec]) -> None:
        self.queue.extend(specs)
        try:
            with _catch(self.signals, self._wake_w):
                while self.tasks or (self.queue and self.taking_new):
                    self._submit()
                    self._step()
        finally:
            for task in list(self.tasks.values()):
                self.ray.cancel(task.ref, force=True)
            os.close(self._wake_r)
            os.close(self._wake_w)
        self.raise_stop()

    def _submit(self) -> None:
        while self.queue and len(self.tasks) < self.limit and self.taking_new:
            spec = self.queue.popleft()
            spec = replace(spec, env={**spec.env, **_trial_env(spec)})
            ref = self.remote.options(num_cpus=self.cpus, num_gpus=self.num_gpus).remote(
                spec, self.target, self.env, self.channel)
            self.tasks[ref] = _Task(spec, ref, time.monotonic(), now_iso())
            self.launched(spec)

    def _step(self) -> None:
        waits = [d for d in (t.deadline for t in self.tasks.values()) if d is not None]
        timeout = POLL if not waits else max(0.0, min(POLL, min(waits) - time.monotonic()))
        ready, _ = self.ray.wait(list(self.tasks), num_returns=1, timeout=timeout)
        self._drain()
        for ref in ready:
            self._finish(self.tasks.pop(ref))
        now = time.monotonic()
        for task in list(self.tasks.values()):
            if task.deadline is not None and now >= task.deadline and task.verdict is None:
                self._stop(task, Status.TIMEOUT, f"ran past the timeout of {self.timeout:g}s and was cancelled")
        if self.signals and any(t.verdict is None for t in self.tasks.values()):
            for task in list(self.tasks.values()):
                if task.verdict is None:
                    self._stop(task, Status.INTERRUPTED, f"stopped by {signal.Signals(self.signals[0]).name}")
        if self.hooks.tick:
            self.hooks.tick()

    def _drain(self) -> None:
        by_id = {t.spec.trial_id: t for t in self.tasks.values()}
        for tid, kind, payload in self.channel.get_nowait_batch(self.channel.qsize()):
            task = by_id.get(tid)
            if task is None:
                continue
            if kind == "placed":  # it began on its worker: its time starts now
                task.t0 = time.monotonic()
                task.device, task.pid = payload["device"], payload["pid"]
                if self.timeout:
                    task.deadline = task.t0 + self.timeout
                self.store(self.ledger.mark_running, replace(task.spec, device=task.device), task.pid,
                           task.started_at)
            elif kind == "report" and payload:
                task.reported = True
                self.history(task.spec, payload)
            elif kind == "exit":
                task.exitcode = payload

    def _stop(self, task: _Task, verdict: Status, why: str) -> None:
        """Cancel a task; a task whose result is already in stands as it is."""
        done, _ = self.ray.wait([task.ref], timeout=0)
        if done:
            return
        task.verdict, task.why = verdict, why
        self.ray.cancel(task.ref, force=True)

    def _finish(self, task: _Task) -> None:
        from ray.exceptions import RayError, TaskCancelledError

        spec, out, error, metrics = task.spec, None, "", {}
        duration = time.monotonic() - (task.t0 or task.submitted)
        try:
            out = self.ray.get(task.ref)
        except TaskCancelledError:
            status = task.verdict or Status.INTERRUPTED
            error = task.why or "cancelled"
        except RayError as exc:  # the worker or its node died: WorkerCrashedError, NodeDiedError...
            status = task.verdict or Status.CRASHED
            how = f"died with exit code {task.exitcode} before returning a result ({type(exc).__name__})"
            error = task.why or (how if task.exitcode is not None else
                                 f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")[:300]
        if out is not None:
            if "load_error" in out:
                raise _load_error(out["load_error"])
            message = out["message"]
            epochs = message.pop("history", None)
            if epochs and not task.reported:
                self.history(task.spec, epochs)
            metrics = message.get("metrics", {})
            if task.verdict is not None:  # asked to stop first: its late result is not ok
                status, error = task.verdict, task.why
            else:
                status, error = Status(message["status"]), message.get("error", "")
                duration = message.get("duration_s", duration)
            task.device, task.pid = out.get("device", task.device), out.get("pid", task.pid)
            os.makedirs(spec.dir, exist_ok=True)
            with open(spec.log_path, "a") as f:
                f.write(out.get("log", ""))
        if status is Status.OOM:
            error = f"{error} (hint: {oom_hint(replace(self.slot, gpu=task.device or None))})"
        result = TrialResult(
            trial_id=spec.trial_id, name=spec.name, index=spec.index, params=spec.params, status=status,
            metrics=metrics, seed=spec.seed, device=task.device or "?", started_at=task.started_at,
            duration_s=duration, error=printable(error), attempts=spec.attempt, pid=task.pid,
            exitcode=task.exitcode, log=spec.log_path, gpu_mem_cap_mb=(out or {}).get("cap_mb"),
        )
        self.conclude(spec, result)
