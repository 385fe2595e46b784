"""The parent's loop: one fresh ``spawn`` process per trial, watched until it is gone.

Data flow of one sweep::

     sweep() / CLI                      Scheduler (parent, one thread)              trial process (spawn)
    ┌──────────────┐  TrialSpecs   ┌────────────────────────────────┐            ┌──────────────────────┐
    │ grid → specs │─────────────▶ │ queue ──▶ pick free slot       │  start()   │ worker.main          │
    │ minus rows   │               │ (least-loaded device first)    │──(slot env)▶│  own process group   │
    │ already ok   │               │                                │──spec─────▶│  die with parent     │
    └──────────────┘               │ wait([pipes, pidfds,            │            │  fds 1,2 → log.txt   │
                                   │       signal pipe], deadline)  │◀─result────│  seed, train(params) │
                                   │  pipe: result message          │◀─pidfd─────│  result.json, exit   │
                                   │  pidfd: process exited         │            └──────────────────────┘
                                   │  deadline: SIGTERM, then       │
                                   │   SIGKILL to the process group │
                                   │  signal pipe: Ctrl-C, SIGTERM  │
                                   └───────────────┬────────────────┘
                                                   │ TrialResult, before the slot is reused
                                                   ▼
                            Ledger (SQLite WAL, fsync) ──▶ results.csv (tmp + rename) ──▶ listener

Why not a pool: the stdlib ``Pool`` hangs for ever when a worker is killed, and
``ProcessPoolExecutor`` fails every running task when one process dies. Here each trial
has its own ``Process``; its death is seen through a pidfd and judged alone, so one
trial's segfault is that trial's ``crashed`` row and nothing else. Processes are not
daemonic (a trial may start its own workers), so the loop kills whatever is left of
each trial's process group itself, on every way out.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Protocol, Sequence

from . import procs, worker
from .errors import SweepError
from .gpus import MemorySampler
from .ledger import Ledger, StorageError
from .metrics import printable, text_says_oom
from .slots import Slot, pick
from .target import FileTarget, Target
from .trial import Status, TrialResult, TrialSpec
from .worker import LOG_HEADER

log = logging.getLogger("sweeper")

#: Seconds between SIGTERM and SIGKILL when a trial's process group is stopped.
TERM_GRACE = 5.0
#: Seconds a process may take to exit after it sent its result.
EXIT_GRACE = 10.0
LOG_TAIL_LINES = 8
#: Seconds between NVML reads of the trials' GPU memory, while trials run on GPUs.
SAMPLE_EVERY = 0.5


class Listener(Protocol):
    def begin(self, to_run: int, total: int) -> None: ...
    def started(self, spec: TrialSpec) -> None: ...
    def reported(self, spec: TrialSpec, epoch: int, metrics: dict[str, Any]) -> None: ...
    def finished(self, result: TrialResult, retrying: bool) -> None: ...


@dataclass(frozen=True)
class Hooks:
    """What the rest of sweeper hears from a scheduler (both backends call the same ones)."""

    listener: Listener | None = None  #: the console view
    on_record: Callable[[TrialResult], None] | None = None  #: a trial's result is in the ledger
    on_history: Callable[[], None] | None = None  #: per-epoch reports are in the ledger
    tick: Callable[[], float | None] | None = None  #: periodic work; seconds until it is due


class Loop:
    """What both backends share: the queue, retries, and how an outcome is recorded."""

    def __init__(self, ledger: Ledger, hooks: Hooks, timeout: float | None, retries: int) -> None:
        self.ledger, self.hooks = ledger, hooks
        self.listener = hooks.listener
        self.timeout, self.retries = timeout, retries
        self.queue: deque[TrialSpec] = deque()
        self.started: set[str] = set()  #: ids of the trials started (retries count once)
        self.signals: list[int] = []
        #: The first failed ledger write: no new trial starts; running ones may finish.
        self.storage_error: StorageError | None = None

    @property
    def taking_new(self) -> bool:
        """Whether queued trials may still start (no stop signal, the ledger writable)."""
        return not self.signals and self.storage_error is None

    def raise_stop(self) -> None:
        """Once the loop is over: a stop signal or a failed ledger write ends the sweep."""
        if self.signals:
            raise Interrupted(self.signals[0])
        if self.storage_error is not None:
            raise self.storage_error

    def store(self, write: Callable[..., None], *args: Any, **kwargs: Any) -> bool:
        """A ledger write; on a full disk or a read-only folder the sweep stops taking new
        trials (running ones finish or stop as usual) and says so once, naming the file."""
        try:
            write(*args, **kwargs)
            return True
        except StorageError as exc:
            if self.storage_error is None:
                self.storage_error = exc
                log.warning("sweeper: %s; no new trials start", str(exc).split("; ")[0])
            return False

    def launched(self, spec: TrialSpec) -> None:
        self.started.add(spec.trial_id)
        self.store(self.ledger.clear_history, spec.trial_id)  # a new attempt's epochs replace the old ones
        if self.listener:
            self.listener.started(spec)

    def conclude(self, spec: TrialSpec, result: TrialResult, durable: bool = True) -> None:
        """Record a trial's outcome (before its slot is reused), queue a retry, tell the view."""
        retrying = result.status.retryable and spec.attempt <= self.retries and self.taking_new
        stored = self.store(self.ledger.record, result, durable=durable)
        if retrying:
            self.queue.append(replace(spec, attempt=spec.attempt + 1))
        if self.hooks.on_record and stored:  # the tables show what the ledger holds
            self.hooks.on_record(result)
        if self.listener:
            self.listener.finished(result, retrying)

    def history(self, spec: TrialSpec, items: list[dict[str, Any]]) -> None:
        self.store(self.ledger.add_history, spec.trial_id, items)
        if self.hooks.on_history:
            self.hooks.on_history()
        if self.listener and items:
            self.listener.reported(spec, items[-1]["epoch"], items[-1]["metrics"])


class Interrupted(Exception):
    """The sweep was stopped by a signal; running trials were recorded ``interrupted``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class _Running:
    spec: TrialSpec
    slot: Slot
    process: Any  # multiprocessing.context.SpawnProcess
    conn: multiprocessing.connection.Connection | None
    t0: float
    started_at: str
    deadline: float | None
    message: dict[str, Any] | None = None
    verdict: Status | None = None  # decided by the parent: timeout or interrupted
    why: str = ""
    kill_stage: int = 0  # 0: none, 1: SIGTERM sent, 2: SIGKILL sent
    ended: float | None = None
    exit_fd: int = -1  # readable once the process has exited (a pidfd)
    reported: bool = False  # sent per-epoch reports (then a returned History is not used)
    early: TrialResult | None = None  # recorded when its result arrived
    fn_started: bool = False  # its train() has begun (its imports are done)


@dataclass
class _Standby:
    """A process started ahead for a busy slot, importing ``train`` until the slot frees."""

    slot: Slot
    process: Any
    conn: multiprocessing.connection.Connection
    exit_fd: int
    ready: bool = False


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@contextlib.contextmanager
def environ(extra: dict[str, str]) -> Iterator[None]:
    """Set variables for a child about to be spawned (it copies them when it starts)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Scheduler(Loop):
    """Runs specs on slots; every trial ends as one :class:`TrialResult` in the ledger."""

    def __init__(
        self,
        target: Target,
        slots: Sequence[Slot],
        ledger: Ledger,
        *,
        hooks: Hooks = Hooks(),
        workers: int | None = None,
        timeout: float | None = None,
        retries: int = 0,
        prefetch: bool = True,
        start_method: str = "spawn",
        folder: str = ".",
    ) -> None:
        super().__init__(ledger, hooks, timeout, retries)
        self.start_method = start_method
        self.ctx = multiprocessing.get_context(start_method)
        if start_method == "spawn":  # started now, outside any slot's environment: never a stray
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        if start_method == "forkserver":
            _start_forkserver(self.ctx, target, f"{os.getpid()}-forkserver")
        self.prefetch = prefetch
        self.standbys: dict[int, _Standby] = {}
        self._standby_deaths = 0
        self.target = target
        self.slots = list(slots)
        self.limit = min(workers or len(self.slots), len(self.slots))
        self.running: dict[int, _Running] = {}
        self._adopted: set[int] = set()  #: orphans of trials, come back to this subreaper
        self._before: set[int] = set()
        #: Carried by every process of this sweep (and only this sweep), for :mod:`sweeper.procs`.
        self.tag = f"{os.getpid()}-{os.urandom(4).hex()}"
        self._tags = {self.tag, _FORKSERVER_TAG[0]} if start_method == "forkserver" else {self.tag}
        self.sampler: MemorySampler | None = None
        if any(s.gpu is not None for s in self.slots):
            sampler = MemorySampler()
            self.sampler = sampler if sampler.start() else None
        self._next_sample = 0.0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    # -- the loop ---------------------------------------------------------------------

    def run(self, specs: Sequence[TrialSpec]) -> None:
        """Run every spec (and its retries) to a recorded result; raise Interrupted on a signal."""
        self.queue.extend(specs)
        failed = True
        self._before = set(procs.children(os.getpid()))  # the caller's own children: never ours
        with procs.subreaper():  # until every trial's orphans are ended and reaped
            try:
                with self._catch_signals():
                    while self.running or (self.queue and self.taking_new):
                        if self.taking_new:
                            self._fill()
                        self._wait()
                failed = False
            finally:
                self._kill_all(record_unfinished=not failed)
                self._reap_adopted(final=True)
                os.close(self._wake_r)
                os.close(self._wake_w)
                if self.sampler:
                    self.sampler.stop()
        self.raise_stop()

    def _fill(self) -> None:
        while self.queue and len(self.running) < self.limit and self.taking_new:
            free = [s for s in self.slots if s.index not in self.running]
            slot = pick(free, (r.slot for r in self.running.values()), prefer=set(self.standbys))
            spec = self.queue.popleft()
            standby = self.standbys.pop(slot.index, None)
            if standby is not None:
                self._launch(spec, slot, standby.process, standby.conn, standby.exit_fd)
            else:
                self._launch(spec, slot, *self._spawn(slot))
        self._prefetch()

    def _spawn(self, slot: Slot, standby: bool = False) -> tuple[Any, Any, int]:
        """Start a worker process for a slot, with the slot's GPU and cap in its environment."""
        parent_conn, child_conn = self.ctx.Pipe()
        boot = worker.Boot(os.getpid(), self.target, slot.env, standby, self.start_method != "forkserver")
        process = self.ctx.Process(
            target=worker.main, args=(child_conn, boot), name=f"sweeper-slot{slot.index}", daemon=False
        )
        with environ({**slot.env, procs.SWEEP_VAR: self.tag}), _sigint_ignored():  # Ctrl-C: the parent's
            process.start()
        child_conn.close()
        return process, parent_conn, _exit_fd(process)

    def _launch(self, spec: TrialSpec, slot: Slot, process: Any, parent_conn: Any, exit_fd: int) -> None:
        """Give a worker process its trial."""
        spec = replace(spec, device=slot.device, env={**spec.env, **_trial_env(spec)})
        t0 = time.monotonic()
        deadline = t0 + self.timeout if self.timeout else None
        run = _Running(spec, slot, process, parent_conn, t0, now_iso(), deadline, exit_fd=exit_fd)
        self.running[slot.index] = run
        self.launched(spec)
        self.store(self.ledger.mark_running, spec, process.pid, run.started_at)
        try:
            parent_conn.send(spec)
        except OSError:  # it died in its bootstrap; its exit is judged like any other
            pass

    # -- standbys ----------------------------------------------------------------------

    def _prefetch(self) -> None:
        """One standby per busy slot, as long as queued trials will need them."""
        if not self.prefetch or not self.taking_new:
            return
        for slot_index in list(self.standbys)[len(self.queue):]:  # more standbys than trials left
            self._drop(self.standbys.pop(slot_index))
        for slot_index, r in self.running.items():
            if len(self.standbys) >= len(self.queue):
                break
            # Only once the slot's trial has its imports behind it: two processes importing
            # TensorFlow at once on few cores slow each other, and the first wave most.
            if slot_index not in self.standbys and r.fn_started:
                process, conn, exit_fd = self._spawn(r.slot, standby=True)
                self.standbys[slot_index] = _Standby(r.slot, process, conn, exit_fd)

    def _standby_event(self, sb: _Standby, ready: set[Any]) -> None:
        if sb.conn in ready:
            try:
                while sb.conn.poll():
                    kind, payload = sb.conn.recv()
                    if kind == "ready":
                        sb.ready = True
                    elif kind == "load_error":
                        raise _load_error(payload)
            except (EOFError, OSError):
                pass
        if sb.exit_fd in ready:  # died before it had a trial: forget it; give up after a few
            if sb.process.exitcode == worker.NO_MAIN_GUARD:
                raise _no_main_guard()
            self.standbys.pop(sb.slot.index, None)
            self._drop(sb)
            self._standby_deaths += 1
            if self._standby_deaths >= 3:
                self.prefetch = False

    def _drop(self, sb: _Standby) -> None:
        procs.kill_group_and_tree(sb.process.pid)
        _join(sb.process, sb.exit_fd, TERM_GRACE)
        sb.conn.close()
        if sb.exit_fd != sb.process.sentinel:
            os.close(sb.exit_fd)

    # -- waiting --------------------------------------------------------------------------

    def _wait(self) -> None:
        waits: list[Any] = [self._wake_r]
        for sb in self.standbys.values():
            waits += [sb.exit_fd, sb.conn]
        for r in self.running.values():
            waits.append(r.exit_fd)
            if r.conn is not None:
                waits.append(r.conn)
        ready = set(multiprocessing.connection.wait(waits, self._next_timeout()))
        if self._wake_r in ready:
            self._on_signal()
        for sb in list(self.standbys.values()):
            self._standby_event(sb, ready)
        for r in list(self.running.values()):
            if r.conn is not None and r.conn in ready:
                self._receive(r)
            if r.exit_fd in ready:
                self._finish(r)
        now = time.monotonic()
        for r in list(self.running.values()):
            if r.deadline is not None and now >= r.deadline:
                self._escalate(r, now)
        if self.sampler and now >= self._next_sample:
            self.sampler.sample({r.process.pid for r in self.running.values()})
            self._next_sample = now + SAMPLE_EVERY

    def _next_timeout(self) -> float | None:
        times = [r.deadline for r in self.running.values() if r.deadline is not None]
        if self.sampler and self.running:
            times.append(self._next_sample)
        soonest = min(times) - time.monotonic() if times else None
        if self.hooks.tick:
            due = self.hooks.tick()
            if due is not None:
                soonest = due if soonest is None else min(soonest, due)
        return None if soonest is None else max(0.0, soonest)

    # -- messages and endings ---------------------------------------------------------

    def _receive(self, r: _Running) -> None:
        assert r.conn is not None
        try:
            while r.conn.poll():
                try:
                    kind, payload = r.conn.recv()
                except (EOFError, OSError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a message the parent cannot read back
                    kind, payload = "result", {
                        "status": Status.ERROR.value, "metrics": {},
                        "error": f"its result could not be read back by the sweep: {type(exc).__name__}: {exc}"}
                if kind == "load_error":
                    raise _load_error(payload)
                if kind == "started":
                    r.fn_started = True
                    self._prefetch()
                if kind == "report":
                    r.reported = True
                    self.history(r.spec, payload)
                if kind == "result" and r.message is None:
                    epochs = payload.pop("history", None)
                    if epochs and not r.reported:  # train returned a Keras History
                        self.history(r.spec, epochs)
                    r.message = payload
                    if r.verdict is None:
                        r.ended = time.monotonic()
                    r.early = self._judge(r)
                    self.store(self.ledger.record, r.early)  # durable now, not when it has exited
                    if r.kill_stage == 0:
                        r.deadline = time.monotonic() + EXIT_GRACE  # it should exit now
        except (EOFError, OSError):
            r.conn.close()
            r.conn = None

    def _stop(self, r: _Running, verdict: Status, why: str, now: float) -> None:
        """The parent asks a trial to stop: whatever it returns afterwards, this is its status.
        A result already in the pipe was sent before the stop: it is read first, and stands."""
        if r.conn is not None and r.message is None:
            self._receive(r)
        if r.message is None and r.verdict is None:
            r.verdict, r.why, r.ended = verdict, why, now

    def _signal(self, r: _Running, sig: int) -> None:
        """Signal a trial's process group, everything below it, and its slot's adopted orphans."""
        procs.kill_group_and_tree(r.process.pid, sig)
        strays = procs.strays(self._tags, r.slot.index, self._known())
        self._adopted.update(strays)
        procs.signal_all(strays, sig)

    def _known(self) -> set[int]:
        """This process's own children that are sweeper's workers or helpers, never strays."""
        known = {r.process.pid for r in self.running.values()}
        known |= {sb.process.pid for sb in self.standbys.values()}
        return known | _mp_helpers()

    def _escalate(self, r: _Running, now: float) -> None:
        """A deadline passed: time the trial out, or push a lingering process harder."""
        self._stop(r, Status.TIMEOUT, f"ran past the timeout of {self.timeout:g}s and was killed", now)
        if r.kill_stage == 0:
            self._signal(r, signal.SIGTERM)
            r.kill_stage, r.deadline = 1, now + TERM_GRACE
        elif r.kill_stage == 1:
            self._signal(r, signal.SIGKILL)
            r.kill_stage, r.deadline = 2, None

    def _finish(self, r: _Running) -> None:
        """The process has exited: end what it left, judge the trial, record it, free the slot."""
        # Unreaped, the process keeps its pid and group id, so neither can name a stranger yet.
        self._signal(r, signal.SIGKILL)  # anything it left in its group, or left as a daemon
        self._reap_adopted()
        _join(r.process, r.exit_fd, TERM_GRACE)
        if r.process.exitcode == worker.NO_MAIN_GUARD and r.message is None and not r.fn_started:
            raise _no_main_guard()  # the sweep's problem, not this trial's
        if r.exit_fd != r.process.sentinel:
            os.close(r.exit_fd)
        if r.conn is not None:
            self._receive(r)
            if r.conn is not None:
                r.conn.close()
        result = self._judge(r)
        if self.sampler:
            self.sampler.peaks.pop(r.process.pid, None)
        del self.running[r.slot.index]
        r.process.close()
        self.conclude(r.spec, result, durable=r.early is None or r.early.status is not result.status)

    def _reap_adopted(self, final: bool = False) -> None:
        """Collect adopted orphans that have died, so none stays a zombie of the sweep: those
        it killed, and any other child that came to it while trials ran (an orphan that
        shed the sweep's tag) once it has exited."""
        if final:  # the sweep ends: nothing a trial started may outlive it
            strays = procs.strays(self._tags, None, self._known())
            self._adopted.update(strays)
            procs.signal_all(strays, signal.SIGKILL)
        came = set(procs.children(os.getpid())) - self._before - self._known()
        self._adopted |= set(procs.zombies(came))
        self._adopted = procs.reap(self._adopted, wait=TERM_GRACE if final else 0.0)

    def _judge(self, r: _Running) -> TrialResult:
        """What became of a trial. A stop the parent asked for (timeout, Ctrl-C) decides the
        status even when the trial then returned metrics (a SIGTERM handler that stops
        training and returns): partial metrics are kept, but never as ``ok``."""
        spec, end = r.spec, r.ended or time.monotonic()
        exitcode = r.process.exitcode
        duration = end - r.t0
        message = r.message or {}
        metrics = message.get("metrics", {})
        if r.verdict is not None:
            status, error = r.verdict, r.why
        elif r.message is not None:
            status, error = Status(message["status"]), message.get("error", "")
            duration = message.get("duration_s", duration)
        else:
            status, error, metrics = _crash_verdict(exitcode, spec.log_path, r.process.pid)
        if status is Status.OOM:
            error = f"{error} (hint: {oom_hint(r.slot)})"
        peak = self.sampler.peaks.get(r.process.pid) if self.sampler else None
        return TrialResult(
            trial_id=spec.trial_id, name=spec.name, index=spec.index, params=spec.params,
            status=status, metrics=metrics, seed=spec.seed, device=spec.device,
            started_at=r.started_at, duration_s=duration, error=printable(error), attempts=spec.attempt,
            pid=r.process.pid, exitcode=exitcode, log=spec.log_path,
            gpu_uuid=r.slot.uuid, gpu_mem_cap_mb=r.slot.cap_mb, gpu_mem_peak_mb=peak,
        )

    # -- signals and cleanup ----------------------------------------------------------

    def _catch_signals(self) -> Any:
        return _catch(self.signals, self._wake_w)

    def _on_signal(self) -> None:
        with contextlib.suppress(OSError):
            os.read(self._wake_r, 1024)
        hard = len(self.signals) > 1
        now = time.monotonic()
        for sb in list(self.standbys.values()):
            self._drop(sb)
        self.standbys.clear()
        for r in self.running.values():
            self._stop(r, Status.INTERRUPTED, f"stopped by {signal.Signals(self.signals[0]).name}", now)
            if hard:
                self._signal(r, signal.SIGKILL)
                r.kill_stage, r.deadline = 2, None
            elif r.kill_stage == 0:
                self._signal(r, signal.SIGTERM)
                r.kill_stage, r.deadline = 1, now + TERM_GRACE

    def _kill_all(self, record_unfinished: bool = True) -> None:
        """Last resort on any way out: nothing of a trial outlives the sweep."""
        for sb in list(self.standbys.values()):
            self._drop(sb)
        self.standbys.clear()
        for r in list(self.running.values()):
            self._signal(r, signal.SIGKILL)
        deadline = time.monotonic() + TERM_GRACE
        for r in list(self.running.values()):
            exited = _join(r.process, r.exit_fd, max(0.0, deadline - time.monotonic()))
            if r.verdict is None and r.message is None:
                if record_unfinished:
                    r.verdict, r.why = Status.INTERRUPTED, "the sweep stopped while it ran"
                else:  # the sweep itself failed: no trial is to blame; they run next time
                    self.running.pop(r.slot.index)
                    r.conn and r.conn.close()
                    if r.exit_fd != r.process.sentinel:
                        os.close(r.exit_fd)
                    continue
            if exited:
                self._finish(r)


def oom_hint(slot: Slot) -> str:
    """What to change after an out-of-memory, given where the trial ran."""
    if slot.gpu is None:
        return "host memory ran out; run fewer trials at once (--workers) or use a smaller batch size"
    fraction = slot.env.get("SWEEPER_MEMORY_FRACTION")
    if slot.cap_mb:
        cap = f"a cap of {slot.cap_mb} MB"
    elif fraction:
        cap = f"a cap of {fraction} of the card"
    else:
        cap = "memory growth"
    return (f"it ran under {cap} on {slot.device}; give each trial more with a lower --per-gpu "
            "or a higher --memory-fraction, or use a smaller batch size")


def _load_error(message: str) -> SweepError:
    if "Can't get attribute" in message and "__mp_main__" in message:
        return SweepError(
            f"a trial process cannot find train in the calling script ({message}): it is defined "
            "inside if __name__ == '__main__': (or another block a trial process does not run); "
            "move def train to the module's top level"
        )
    return SweepError(
        f"a trial process could not import train: {message}; fix it and run again "
        "(finished trials are kept)"
    )


def _no_main_guard() -> SweepError:
    main = getattr(sys.modules.get("__main__"), "__file__", None) or "the calling script"
    return SweepError(
        f"{main} calls sweep() at its top level, so every trial process, which re-imports it, "
        "calls it again; put the call under if __name__ == \"__main__\": (finished trials are kept)"
    )


#: The tag the fork server was started with (its forked trials carry it; one server per process).
_FORKSERVER_TAG = [""]


def _start_forkserver(ctx: Any, target: Target, tag: str) -> None:
    """Start the fork server with the user's module imported, and no GPU visible to it.

    Each trial is then a fork of that server: the import (TensorFlow's seconds) is paid
    once. The server never touches the GPU; a child pins its own before its framework
    does. The server is one per process: a later sweep with another module keeps the
    first preload, which is only slower, never wrong (each child imports what it lacks).
    """
    import multiprocessing.forkserver

    if not _FORKSERVER_TAG[0]:
        _FORKSERVER_TAG[0] = tag
    env = {"CUDA_VISIBLE_DEVICES": "-1", procs.SWEEP_VAR: _FORKSERVER_TAG[0]}
    if isinstance(target, FileTarget):
        preload = ["sweeper.worker", "sweeper._preload"]
        env["SWEEPER_PRELOAD_FILE"] = target.path
    else:
        module = target.module
        preload = ["sweeper.worker"] + ([module] if module and module != "__main__" else [])
    ctx.set_forkserver_preload(preload)
    with environ(env):
        multiprocessing.forkserver.ensure_running()


def _join(process: Any, exit_fd: int, timeout: float) -> bool:
    """Reap a process once its exit descriptor says it has exited (at most ``timeout`` s).

    ``Process.join(timeout)`` would wait on the sentinel, which a daemon the trial left
    behind may hold open: seconds lost per trial. A pidfd says the truth; then ``join()``
    only collects the exit status.
    """
    if process.exitcode is None and not multiprocessing.connection.wait([exit_fd], timeout):
        return False
    process.join()
    return True


def _mp_helpers() -> set[int]:
    """multiprocessing's resource tracker and fork server: children of this process."""
    from multiprocessing import forkserver, resource_tracker

    pids = {getattr(resource_tracker._resource_tracker, "_pid", None),
            getattr(forkserver._forkserver, "_forkserver_pid", None)}
    return {pid for pid in pids if pid}


def _exit_fd(process: Any) -> int:
    """A descriptor readable once the process has exited.

    A pidfd, not the process's sentinel: the sentinel stays open in any grandchild
    that inherited it (``os.fork``), so it would say nothing while one of those lives.
    """
    try:
        return os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3
        return process.sentinel


@contextlib.contextmanager
def _catch(signals: list[int], wake_fd: int) -> Iterator[None]:
    """While a sweep runs, Ctrl-C and SIGTERM are noted and wake its loop (a self-pipe);
    the loop, not the handler, stops the trials. Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signals.append(signum)
        with contextlib.suppress(OSError):
            os.write(wake_fd, b"!")

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Start a child with SIGINT ignored, so a Ctrl-C during its bootstrap (before it leads
    its own process group) reaches only the parent, which then stops it properly."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _trial_env(spec: TrialSpec) -> dict[str, str]:
    import json

    return {
        "SWEEPER_TRIAL_ID": spec.trial_id,
        "SWEEPER_TRIAL_NAME": spec.name,
        "SWEEPER_TRIAL_DIR": spec.dir,
        "SWEEPER_SEED": str(spec.seed),
        "SWEEPER_PARAMS": json.dumps(spec.params, sort_keys=True),
    }


def _crash_verdict(exitcode: int | None, log_path: str, pid: int) -> tuple[Status, str, dict[str, Any]]:
    """A process that died without a result: name how, and look for out-of-memory in its log."""
    if exitcode is not None and exitcode < 0:
        try:
            how = signal.Signals(-exitcode).name
        except ValueError:
            how = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            how += " (killed from outside: often the kernel's out-of-memory killer, see dmesg)"
    else:
        how = f"exit code {exitcode}"
    tail = log_tail(log_path, pid=pid)
    last = next((t.strip() for t in reversed(tail) if t.strip()), "")
    if text_says_oom("\n".join(tail)):
        return Status.OOM, f"ran out of memory and died ({how}): {last}"[:300], {}
    detail = f"; last log line: {last}" if last else ""
    return Status.CRASHED, f"died with {how} before returning a result{detail}"[:300], {}


def log_tail(path: str, lines: int = LOG_TAIL_LINES, pid: int | None = None) -> list[str]:
    """The last lines a trial's log got from one attempt (the last, or process ``pid``'s),
    with control characters escaped: they go to the console and the CSV as they are.

    The log gathers every attempt, each after a header line; only lines after the
    attempt's own header count, so an earlier attempt's words are never this one's.
    Cheap for big logs: reads the end only.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    all_lines = text.splitlines()
    heads = [i for i, t in enumerate(all_lines) if t.startswith(LOG_HEADER)]
    if pid is not None:
        heads = [i for i in heads if f" pid {pid}," in all_lines[i]]
        if not heads:  # died before its log was opened
            return []
    start = heads[-1] + 1 if heads else 0
    return [printable(line) for line in all_lines[start:][-lines:]]
