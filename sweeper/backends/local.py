"""The local backend: one fresh process per trial on this machine, watched until it is gone.

Why not a pool: the stdlib ``Pool`` hangs for ever when a worker is killed, and
``ProcessPoolExecutor`` fails every running task when one process dies. Here each trial
has its own ``Process`` (``spawn``, or a fork of a fork server that imported the user's
module once); its death is seen through a pidfd and judged alone, so one trial's
segfault is that trial's ``crashed`` row and nothing else. Processes are not daemonic (a
trial may start its own workers), so this backend kills whatever is left of each
trial's process group, and of its descendants, itself, on every way out.

Per slot (one trial's worth of a device, :mod:`sweeper.slots`)::

    start(spec) ─▶ standby of the slot, or a fresh process ─▶ spec over its pipe
    wait()      ◀─ pipe: messages     ◀─ pidfd: it exited   ◀─ standbys: ready / died
    cancel()    ─▶ SIGTERM / SIGKILL to its process group, its descendants, and the
                   orphans it left with the sweep's tag (this process is a subreaper)

A *standby* is the next process of a busy slot, started once that slot's trial has its
imports behind it, importing ``train`` while the trial runs; the slot's next trial then
starts without waiting for TensorFlow to import.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

from .. import outcome, procs
from ..child import bootstrap
from ..engine import TERM_GRACE, no_main_guard
from ..gpus import MemorySampler
from ..protocol import Began, Broken, Event, Exited, LoadFailed, Result, TrainStarted
from ..slots import Slot, pick
from ..target import FileTarget, Target
from ..trial import TrialSpec

#: Seconds between NVML reads of the trials' GPU memory, while trials run on GPUs.
SAMPLE_EVERY = 0.5


@dataclass
class Spare:
    """A worker process started before its trial: a standby, or the CLI's first process,
    which read the grid file and then stands by (:func:`sweeper.gridfile.read`)."""

    process: Any  # multiprocessing.context.SpawnProcess
    conn: multiprocessing.connection.Connection
    exit_fd: int  #: readable once the process has exited (a pidfd)
    env: dict[str, str]  #: what it was started with: only a slot with the same may use it
    tag: str = ""  #: the sweep tag in its environment
    closed: bool = False

    def close(self) -> None:
        """It is not needed: end it and everything it started."""
        if self.closed:
            return
        self.closed = True
        if self.process.exitcode is None:  # once reaped, its pid may name a stranger
            procs.kill_group_and_tree(self.process.pid)
        join(self.process, self.exit_fd, TERM_GRACE)
        self.conn.close()
        if self.exit_fd != self.process.sentinel:
            os.close(self.exit_fd)


@dataclass
class _Proc:
    """A trial's process."""

    spec: TrialSpec
    slot: Slot
    process: Any
    conn: multiprocessing.connection.Connection | None
    exit_fd: int
    fn_started: bool = False  #: its train() has begun (its imports are done)
    has_result: bool = False


_TRACKER_STARTED: list[bool] = []


def spawn(ctx: Any, boot: bootstrap.Boot, env: dict[str, str], name: str) -> Spare:
    """Start a worker process with ``env`` set in it from its first instruction."""
    if ctx.get_start_method() == "spawn" and not _TRACKER_STARTED:
        # started now, outside the slot's environment: never taken for a stray of it
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        _TRACKER_STARTED.append(True)
    parent_conn, child_conn = ctx.Pipe()
    process = ctx.Process(target=bootstrap.main, args=(child_conn, boot), name=name, daemon=False)
    with environ(env), _sigint_ignored():  # Ctrl-C is the parent's to handle
        process.start()
    child_conn.close()
    return Spare(process, parent_conn, exit_fd(process), dict(env))


class LocalBackend:
    """Trials as processes of this machine, on its slots (see the module docstring)."""

    stop_word = "killed"

    def __init__(self, target: Target, slots: Sequence[Slot], *, workers: int | None = None,
                 prefetch: bool = True, start_method: str = "spawn", spare: Spare | None = None) -> None:
        self.target = target
        self.slots = list(slots)
        self.capacity = min(workers or len(self.slots), len(self.slots))
        self.prefetch = prefetch
        self.start_method = start_method
        self.ctx = multiprocessing.get_context(start_method)
        #: Carried by every process of this sweep (and only this sweep), for :mod:`sweeper.procs`.
        self.tag = spare.tag if spare and spare.tag else new_tag()
        self.standbys: dict[int, Spare] = {}
        self._standby_deaths = 0
        if spare is not None:
            self._adopt(spare)
        self._tags = {self.tag}
        self.running: dict[str, _Proc] = {}  #: by trial id
        self._adopted: set[int] = set()  #: orphans of trials, come back to this subreaper
        self._before: set[int] = set()
        self._subreaper: contextlib.ExitStack | None = None
        self.sampler: MemorySampler | None = None
        self._next_sample = 0.0

    def _adopt(self, spare: Spare) -> None:
        """The CLI's first process becomes the standby of the slot it was started for."""
        slot = next((s for s in self.slots[:self.capacity] if s.env == {k: v for k, v in spare.env.items()
                                                                        if k != procs.SWEEP_VAR}), None)
        # With prefetch off, every trial imports train after its seed is set: so does the first.
        if slot is None or self.start_method != "spawn" or not self.prefetch:
            spare.close()
        else:
            self.standbys[slot.index] = spare

    # -- the Backend protocol ------------------------------------------------------------

    def open(self) -> None:
        self._before = set(procs.children(os.getpid()))  # the caller's own children: never ours
        self._subreaper = contextlib.ExitStack()
        self._subreaper.enter_context(procs.subreaper())  # until every trial's orphans are reaped
        if any(s.gpu is not None for s in self.slots):
            sampler = MemorySampler()
            self.sampler = sampler if sampler.start() else None

    def start(self, spec: TrialSpec) -> Began:
        if self.start_method == "forkserver" and _FORKSERVER_TAG[0] not in self._tags:
            # now, not before: a sweep with nothing to run starts no server (its import)
            _start_forkserver(self.ctx, self.target, f"{os.getpid()}-forkserver")
            self._tags.add(_FORKSERVER_TAG[0])
        busy = {p.slot.index for p in self.running.values()}
        free = [s for s in self.slots if s.index not in busy]
        slot = pick(free, (p.slot for p in self.running.values()), prefer=set(self.standbys))
        process = self.standbys.pop(slot.index, None) or self._spawn(slot)
        process.closed = True  # a trial's process now: ended as one
        spec = replace(spec, device=slot.device)
        self.running[spec.trial_id] = _Proc(spec, slot, process.process, process.conn, process.exit_fd)
        try:
            process.conn.send(spec)
        except OSError:  # it died in its bootstrap; its exit is judged like any other
            pass
        fraction = slot.env.get("SWEEPER_MEMORY_FRACTION")
        return Began(process.process.pid, slot.device, slot.uuid, slot.cap_mb, fraction)

    def wait(self, timeout: float | None, wake: int) -> list[tuple[str, Event]]:
        waits: list[Any] = [wake]
        for sb in self.standbys.values():
            waits += [sb.exit_fd, sb.conn]
        for p in self.running.values():
            waits.append(p.exit_fd)
            if p.conn is not None:
                waits.append(p.conn)
        if self.sampler and self.running:
            due = max(0.0, self._next_sample - time.monotonic())
            timeout = due if timeout is None else min(timeout, due)
        ready = set(multiprocessing.connection.wait(waits, timeout))
        events: list[tuple[str, Event]] = []
        for index, sb in list(self.standbys.items()):
            events += self._standby_event(index, sb, ready)
        for tid, p in list(self.running.items()):
            if p.conn is not None and p.conn in ready:
                events += self._receive(p)
            if p.exit_fd in ready:
                events += self._exited(p)
        now = time.monotonic()
        if self.sampler and now >= self._next_sample:
            self.sampler.sample({p.process.pid for p in self.running.values()})
            self._next_sample = now + SAMPLE_EVERY
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Event]]:
        p = self.running.get(trial_id)
        if p is None or p.conn is None or p.has_result:
            return []
        return self._receive(p)

    def cancel(self, trial_id: str, hard: bool) -> None:
        p = self.running.get(trial_id)
        if p is not None:
            self._signal(p, signal.SIGKILL if hard else signal.SIGTERM)

    def ahead(self, queued: int) -> None:
        """One standby per busy slot, as long as queued trials will need them."""
        for index in list(self.standbys)[max(0, queued):]:  # more standbys than trials left
            self.standbys.pop(index).close()
        if not self.prefetch:
            return
        for p in self.running.values():
            if len(self.standbys) >= queued:
                break
            # Only once the slot's trial has its imports behind it: two processes importing
            # TensorFlow at once on few cores slow each other, and the first wave most.
            if p.slot.index not in self.standbys and p.fn_started:
                self.standbys[p.slot.index] = self._spawn(p.slot, standby=True)

    def close(self) -> list[tuple[str, Event]]:
        """Last resort on any way out: nothing of a trial outlives the sweep."""
        events: list[tuple[str, Event]] = []
        try:
            for sb in self.standbys.values():
                sb.close()
            self.standbys.clear()
            for p in self.running.values():
                self._signal(p, signal.SIGKILL)
            deadline = time.monotonic() + TERM_GRACE
            for p in list(self.running.values()):
                if join(p.process, p.exit_fd, max(0.0, deadline - time.monotonic())):
                    events += self._exited(p)
                else:
                    self._forget(p)
            self._reap_adopted(final=True)
        finally:
            if self._subreaper is not None:
                self._subreaper.close()
            if self.sampler:
                self.sampler.stop()
        return events

    # -- processes ----------------------------------------------------------------------

    def _spawn(self, slot: Slot, standby: bool = False) -> Spare:
        """Start a worker process for a slot, with the slot's GPU and cap in its environment."""
        boot = bootstrap.Boot(os.getpid(), self.target, slot.env, standby, self.start_method != "forkserver")
        env = {**slot.env, procs.SWEEP_VAR: self.tag}
        return spawn(self.ctx, boot, env, f"sweeper-slot{slot.index}")

    def _standby_event(self, index: int, sb: Spare, ready: set[Any]) -> list[tuple[str, Event]]:
        events: list[tuple[str, Event]] = []
        if sb.conn in ready:
            try:
                while sb.conn.poll():
                    message = sb.conn.recv()  # Ready, or why it cannot import train
                    if isinstance(message, LoadFailed):
                        events.append(("", message))
            except (EOFError, OSError):
                pass
        if sb.exit_fd in ready:  # died before it had a trial: forget it; give up after a few
            if sb.process.exitcode == bootstrap.NO_MAIN_GUARD:
                events.append(("", Broken(str(no_main_guard()))))
            self.standbys.pop(index, None)
            sb.close()
            self._standby_deaths += 1
            if self._standby_deaths >= 3:
                self.prefetch = False
        return events

    def _receive(self, p: _Proc) -> list[tuple[str, Event]]:
        """Every message waiting in a trial's pipe."""
        assert p.conn is not None
        tid = p.spec.trial_id
        events: list[tuple[str, Event]] = []
        try:
            while p.conn.poll():
                try:
                    message = p.conn.recv()
                except (EOFError, OSError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a message the parent cannot read back
                    message = outcome.unreadable(exc)
                if isinstance(message, TrainStarted):
                    p.fn_started = True
                elif isinstance(message, Result):
                    if p.has_result:
                        continue
                    p.has_result = True
                events.append((tid, message))
        except (EOFError, OSError):
            p.conn.close()
            p.conn = None
        return events

    def _exited(self, p: _Proc) -> list[tuple[str, Event]]:
        """The process has exited: end what it left, read what it sent, free the slot."""
        # Unreaped, the process keeps its pid and group id, so neither can name a stranger yet.
        self._signal(p, signal.SIGKILL)  # anything it left in its group, or left as a daemon
        self._reap_adopted()
        join(p.process, p.exit_fd, TERM_GRACE)
        events = self._receive(p) if p.conn is not None else []
        peak = self.sampler.peaks.pop(p.process.pid, None) if self.sampler else None
        exitcode = p.process.exitcode
        self._forget(p)
        if exitcode == bootstrap.NO_MAIN_GUARD and not p.has_result and not p.fn_started:
            # the sweep's problem, not this trial's: no row (it runs next time)
            return events + [("", Broken(str(no_main_guard())))]
        return events + [(p.spec.trial_id, Exited(exitcode, peak_mb=peak))]

    def _forget(self, p: _Proc) -> None:
        self.running.pop(p.spec.trial_id, None)
        if p.conn is not None:
            p.conn.close()
            p.conn = None
        if p.exit_fd != p.process.sentinel:
            os.close(p.exit_fd)
        if p.process.exitcode is not None:
            p.process.close()

    def _signal(self, p: _Proc, sig: int) -> None:
        """Signal a trial's process group, everything below it, and its slot's adopted orphans."""
        procs.kill_group_and_tree(p.process.pid, sig)
        strays = procs.strays(self._tags, p.slot.index, self._known())
        self._adopted.update(strays)
        procs.signal_all(strays, sig)

    def _known(self) -> set[int]:
        """This process's own children that are sweeper's workers or helpers, never strays."""
        known = {p.process.pid for p in self.running.values()}
        known |= {sb.process.pid for sb in self.standbys.values()}
        return known | _mp_helpers()

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


def new_tag() -> str:
    """A tag for one sweep's processes (``SWEEPER_SWEEP``), unique on this machine."""
    return f"{os.getpid()}-{os.urandom(4).hex()}"


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
        preload = ["sweeper.child.bootstrap", "sweeper._preload"]
        env["SWEEPER_PRELOAD_FILE"] = target.path
    else:
        module = target.module
        preload = ["sweeper.child.bootstrap"] + ([module] if module and module != "__main__" else [])
    ctx.set_forkserver_preload(preload)
    with environ(env):
        multiprocessing.forkserver.ensure_running()


def join(process: Any, exit_fd: int, timeout: float) -> bool:
    """Reap a process once its exit descriptor says it has exited (at most ``timeout`` s).

    ``Process.join(timeout)`` would wait on the sentinel, which a daemon the trial left
    behind may hold open: seconds lost per trial. A pidfd says the truth; then ``join()``
    only collects the exit status.
    """
    if process.exitcode is None and not multiprocessing.connection.wait([exit_fd], timeout):
        return False
    process.join()
    return True


def exit_fd(process: Any) -> int:
    """A descriptor readable once the process has exited.

    A pidfd, not the process's sentinel: the sentinel stays open in any grandchild
    that inherited it (``os.fork``), so it would say nothing while one of those lives.
    """
    try:
        return os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3
        fd: int = process.sentinel
        return fd


def _mp_helpers() -> set[int]:
    """multiprocessing's resource tracker and fork server: children of this process."""
    from multiprocessing import forkserver, resource_tracker

    pids = {getattr(resource_tracker._resource_tracker, "_pid", None),
            getattr(forkserver._forkserver, "_forkserver_pid", None)}
    return {pid for pid in pids if pid}


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
