"""The local backend: one fresh process per trial on this machine, watched until it is gone.

Why not a pool: the stdlib ``Pool`` hangs for ever when a worker is killed, and
``ProcessPoolExecutor`` fails every running task when one process dies. Here each trial
has its own process, a fork of the sweep's fork server (which imported the user's module
once; :mod:`sweeper.backends.forkserver`) or a ``spawn`` process; its death is seen
through a pidfd and judged alone, so one trial's segfault is that trial's ``crashed`` row
and nothing else. Processes are not daemonic (a trial may start its own workers), so this
backend kills whatever is left of each trial's process group, and of its descendants,
itself, on every way out.

Per slot (one trial's worth of a device, :mod:`sweeper.slots`)::

    start(spec) ─▶ a standby of the slot, a fork, or a spawn process ─▶ spec over its pipe
                   (while the fork server imports: the trial waits, its Began comes later)
    wait()      ◀─ pipe: messages     ◀─ pidfd: it exited   ◀─ standbys: ready / died
                ◀─ the fork server: imported (FIFO) / died (pidfd)
                ─▶ watchdog: a fork that has not reached train after FORK_WATCHDOG_S is
                   killed and its trial handed to a spawn process (Began again, with why)
    ahead(n)    ─▶ standbys for the next n trials: a fork per busy slot; spawn ones while
                   measured idle cores allow (:mod:`sweeper.headroom`), never more than n
    cancel()    ─▶ SIGTERM / SIGKILL to its process group, its descendants, and the
                   orphans it left with the sweep's tag (this process is a subreaper)

A *standby* is a slot's next process, started while the slot's trial runs: it has
``train`` imported (a fork has it from the server) when the trial comes.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from .. import contract, headroom, outcome, procs
from ..child import bootstrap
from ..engine import TERM_GRACE, log, no_main_guard
from ..gpus import MemorySampler
from ..protocol import Began, Broken, Event, Exited, LoadFailed, Ready, Result, TrainStarted
from ..slots import Slot, pick
from ..target import FileTarget, Target
from ..trial import TrialSpec
from .forkserver import ForkServer

#: Seconds between NVML reads of the trials' GPU memory, while trials run on GPUs.
SAMPLE_EVERY = 0.5
#: Seconds a forked trial may take from being handed its trial to calling ``train``: a fork
#: has everything imported, so it takes well under a second (a GPU's first ``cuInit`` a few).
#: Past this it is taken for deadlocked (a lock some thread held when the server forked):
#: killed, and its trial runs in a spawn process; the rest of the sweep uses spawn.
FORK_WATCHDOG_S = 30.0
#: Seconds trials wait for the fork server's import before they start as spawn processes.
SERVER_WAIT_S = 300.0
#: A fork not in train yet that used less CPU than this share of the watchdog's period
#: since its last look is taken for deadlocked.
STUCK_CPU = 0.05
#: The first words of the line a watchdog rescue writes into the trial's log.
WATCHDOG_MARK = "sweeper: fork watchdog:"
#: Standbys per slot at most (spawn ones, while cores are idle).
MAX_AHEAD = 3
#: Idle cores that must be measured, beyond what standbys started since took, for one more.
IDLE_FOR_ONE = 0.8


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
    forked: bool = False  #: a fork of the fork server (else a spawn process)
    ready: bool = False  #: it has imported train (sent Ready)
    born: float = field(default_factory=time.monotonic)

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
    forked: bool = False
    handed: float = field(default_factory=time.monotonic)  #: when it was sent its trial
    watch_at: float = 0.0  #: a fork: when the watchdog looks at it next (if not in train yet)
    cpu_s: float = 0.0  #: a fork: the CPU time it had used when the watchdog last looked
    fn_started: bool = False  #: its train() has begun (its imports are done)
    has_result: bool = False
    cancelled: bool = False


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
    with procs.environ(env), _sigint_ignored():  # Ctrl-C is the parent's to handle
        process.start()
    child_conn.close()
    return Spare(process, parent_conn, exit_fd(process), dict(env))


class LocalBackend:
    """Trials as processes of this machine, on its slots (see the module docstring)."""

    stop_word = "killed"
    answers = True

    def __init__(self, target: Target, slots: Sequence[Slot], *, workers: int | None = None,
                 prefetch: bool = True, start_method: str = "forkserver", spare: Spare | None = None,
                 timeout: float | None = None) -> None:
        self.target = target
        #: A fork that has not reached train is looked at this long after it was handed its
        #: trial: before the trial's timeout could pass, however short.
        self.watch_s = min(FORK_WATCHDOG_S, timeout / 2) if timeout else FORK_WATCHDOG_S
        self.slots = list(slots)
        self.capacity = min(workers or len(self.slots), len(self.slots))
        self.prefetch = prefetch
        self.spawn_ctx = multiprocessing.get_context("spawn")
        self.fork_ctx = multiprocessing.get_context("forkserver")
        #: Carried by every process of this sweep (and only this sweep), for :mod:`sweeper.procs`.
        self.tag = spare.tag if spare and spare.tag else new_tag()
        self.standbys: dict[int, list[Spare]] = {}  #: by slot index, oldest first
        self._standby_deaths = 0
        if spare is not None:
            self._adopt(spare)
        self._tags = {self.tag}
        self.running: dict[str, _Proc] = {}  #: by trial id
        self.pending: dict[str, tuple[TrialSpec, Slot]] = {}  #: waiting for the fork server
        self._events: list[tuple[str, Event]] = []  #: for the next wait()
        self.server: ForkServer | None = None
        self.no_forks = start_method != "forkserver"  #: spawn only (asked, or after a fallback)
        self.idle: headroom.IdleCpu | None = None  #: measured once spawn standbys are considered
        self._recheck_at: float | None = None  #: when to measure idle cores again
        self._import_s: list[float] = []  #: standbys' import times, newest last
        self._trial_s: list[float] = []  #: trials' run times, newest last
        self._standby_mb = 0.0  #: the largest resident memory of a ready standby
        self._adopted: set[int] = set()  #: orphans of trials, come back to this subreaper
        self._before: set[int] = set()
        self._subreaper: contextlib.ExitStack | None = None
        self.sampler: MemorySampler | None = None
        self._next_sample = 0.0

    def _adopt(self, spare: Spare) -> None:
        """The CLI's first process becomes the standby of the slot it was started for."""
        slot = next((s for s in self.slots[:self.capacity] if s.env == {k: v for k, v in spare.env.items()
                                                                        if k != contract.SWEEP}), None)
        # With prefetch off, every trial imports train after its seed is set: so does the first.
        if slot is None or not self.prefetch:
            spare.close()
        else:
            spare.ready = True
            self.standbys[slot.index] = [spare]

    # -- the Backend protocol ------------------------------------------------------------

    def open(self) -> None:
        self._before = set(procs.children(os.getpid()))  # the caller's own children: never ours
        self._subreaper = contextlib.ExitStack()
        self._subreaper.enter_context(procs.subreaper())  # until every trial's orphans are reaped
        if any(s.gpu is not None for s in self.slots):
            sampler = MemorySampler()
            self.sampler = sampler if sampler.start() else None

    def start(self, spec: TrialSpec) -> Began | None:
        if not self.no_forks and self.server is None:
            # now, not before: a sweep with nothing to run starts no server (its import)
            self.server = ForkServer(self.fork_ctx, preload_of(self.target), self.tag, _common_env(self.slots))
            if self.server.state == "failed":
                self._stop_forking(self.server.why)
        taken = {p.slot.index for p in self.running.values()} | {s.index for _, s in self.pending.values()}
        free = [s for s in self.slots if s.index not in taken]
        slot = pick(free, [p.slot for p in self.running.values()] + [s for _, s in self.pending.values()],
                    prefer={i for i, sbs in self.standbys.items() if sbs})
        queue = self.standbys.get(slot.index, [])
        if queue:
            process = next((sb for sb in queue if sb.ready), queue[0])
            queue.remove(process)
        elif self._server_starting():  # its import is under way: the trial waits for a fork
            self.pending[spec.trial_id] = (spec, slot)
            return None
        else:
            process = self._new_process(slot)
        return self._hand(spec, slot, process)

    def wait(self, timeout: float | None, wake: int) -> list[tuple[str, Event]]:
        waits: list[Any] = [wake]
        for sb in self._all_standbys():
            waits += [sb.exit_fd, sb.conn]
        for p in self.running.values():
            waits.append(p.exit_fd)
            if p.conn is not None:
                waits.append(p.conn)
        if self.server is not None:
            waits += self.server.waits()
        now = time.monotonic()
        due = [self._next_sample] if self.sampler and self.running else []
        due += [p.watch_at for p in self.running.values() if self._watched(p)]
        due += [self._recheck_at] if self._recheck_at is not None else []
        due += [self.server.started + SERVER_WAIT_S] if self.pending and self.server else []
        if self._events:
            due.append(now)
        if due:
            soon = max(0.0, min(due) - now)
            timeout = soon if timeout is None else min(timeout, soon)
        ready = set(multiprocessing.connection.wait(waits, timeout))
        events, self._events = self._events, []
        events += self._server_event(ready)
        for sb in self._all_standbys():
            events += self._standby_event(sb, ready)
        for tid, p in list(self.running.items()):
            if p.conn is not None and p.conn in ready:
                events += self._receive(p)
            if p.exit_fd in ready:
                events += self._exited(p)
        now = time.monotonic()
        for p in [p for p in self.running.values() if self._watched(p) and now >= p.watch_at]:
            if self._stuck(p, now):
                events += self._rescue(p)
        if self.sampler and now >= self._next_sample:
            self.sampler.sample({p.process.pid for p in self.running.values()})
            self._next_sample = now + SAMPLE_EVERY
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Event]]:
        p = self.running.get(trial_id)
        if p is None or p.conn is None or p.has_result:
            return []
        return self._receive(p)

    def tell(self, trial_id: str, message: Any) -> None:
        p = self.running.get(trial_id)
        if p is not None and p.conn is not None:
            with contextlib.suppress(OSError):  # it died meanwhile: its exit is judged as usual
                p.conn.send(message)

    def cancel(self, trial_id: str, hard: bool) -> None:
        if self.pending.pop(trial_id, None) is not None:  # it had no process yet
            self._events.append((trial_id, Exited(cancelled=True)))
            return
        p = self.running.get(trial_id)
        if p is not None:
            p.cancelled = True
            self._signal(p, signal.SIGKILL if hard else signal.SIGTERM)

    def ahead(self, queued: int) -> None:
        """Standbys for the next ``queued`` trials, never more: a fork per busy slot at once
        (it costs no import); spawn ones, which import, as measured idle cores allow."""
        standbys = self._all_standbys()
        for sb in sorted(standbys, key=lambda sb: (sb.ready, -sb.born))[:max(0, len(standbys) - queued)]:
            self._drop(sb)  # more standbys than trials left: those still importing go first
        self._recheck_at = None
        if not self.prefetch or self._server_starting():
            return
        forks = not self.no_forks
        for p in self.running.values():
            if len(self._all_standbys()) >= queued:
                return
            # A spawn standby only once the slot's trial has its imports behind it: two
            # processes importing TensorFlow at once on few cores slow each other.
            if not self.standbys.get(p.slot.index) and (forks or p.fn_started):
                self.standbys.setdefault(p.slot.index, []).append(self._new_process(p.slot, standby=True))
        if not forks:
            self._more_standbys(queued)

    def close(self) -> list[tuple[str, Event]]:
        """Last resort on any way out: nothing of a trial outlives the sweep."""
        events: list[tuple[str, Event]] = [(tid, Exited(cancelled=True)) for tid in self.pending]
        self.pending.clear()
        try:
            for sb in self._all_standbys():
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
            if self.server is not None:
                self.server.stop()
            self._reap_adopted(final=True)
        finally:
            if self._subreaper is not None:
                self._subreaper.close()
            if self.sampler:
                self.sampler.stop()
        return events

    # -- processes ----------------------------------------------------------------------

    def _new_process(self, slot: Slot, standby: bool = False) -> Spare:
        """Start a worker process for a slot, with the slot's GPU and cap in its environment:
        a fork of the fork server once it is ready, else a spawn process."""
        forked = not self.no_forks and self.server is not None and self.server.state == "ready"
        boot = bootstrap.Boot(os.getpid(), self.target, slot.env, standby, check_ppid=not forked)
        env = {**slot.env, contract.SWEEP: self.tag}
        sb = spawn(self.fork_ctx if forked else self.spawn_ctx, boot, env, f"sweeper-slot{slot.index}")
        sb.forked = forked
        return sb

    def _hand(self, spec: TrialSpec, slot: Slot, process: Spare) -> Began:
        """Give a trial to a process: its pipe gets the spec; the trial's clock starts."""
        process.closed = True  # a trial's process now: ended as one
        spec = replace(spec, device=slot.device)
        self.running[spec.trial_id] = _Proc(spec, slot, process.process, process.conn, process.exit_fd,
                                            forked=process.forked, watch_at=time.monotonic() + self.watch_s)
        try:
            process.conn.send(spec)
        except OSError:  # it died in its bootstrap; its exit is judged like any other
            pass
        fraction = slot.env.get(contract.MEMORY_FRACTION)
        return Began(process.process.pid, slot.device, slot.uuid, slot.cap_mb, fraction)

    def _all_standbys(self) -> list[Spare]:
        return [sb for queue in self.standbys.values() for sb in queue]

    def _drop(self, sb: Spare) -> None:
        for queue in self.standbys.values():
            if sb in queue:
                queue.remove(sb)
        sb.close()

    def _more_standbys(self, queued: int) -> None:
        """Spawn standbys beyond one per busy slot, each only while a whole idle core is
        measured for it (those started since the measurement count as busy), up to the
        depth that keeps a slot fed, and while memory allows another standby."""
        if self.idle is None:
            self.idle = headroom.IdleCpu()
        cores = self.idle.sample()
        busy = [p.slot for p in self.running.values() if p.fn_started]
        depth = self._depth()
        while len(self._all_standbys()) < queued:
            short = [s for s in busy if len(self.standbys.get(s.index, [])) < depth]
            if not short:
                return
            if cores is None:  # a window has not passed yet, or cannot be measured here
                self._recheck_at = time.monotonic() + headroom.WINDOW_S
                return
            since = sum(1 for sb in self._all_standbys() if sb.born > self.idle.measured_at - headroom.WINDOW_S)
            mem = headroom.available_mb()
            if cores - since < IDLE_FOR_ONE or (mem is not None and mem < 3 * max(self._standby_mb, 512.0)):
                self._recheck_at = time.monotonic() + headroom.WINDOW_S
                return
            slot = min(short, key=lambda s: (len(self.standbys.get(s.index, [])), s.index))
            self.standbys.setdefault(slot.index, []).append(self._new_process(slot, standby=True))

    def _depth(self) -> int:
        """Standbys a slot needs to be fed: one per trial that ends during one import, plus
        one; the most until a trial and an import have been timed."""
        if not self._import_s or not self._trial_s:
            return MAX_AHEAD
        ratio = statistics.median(self._import_s[-8:]) / max(0.1, statistics.median(self._trial_s[-8:]))
        return max(1, min(MAX_AHEAD, math.ceil(ratio) + 1))

    # -- the fork server --------------------------------------------------------------

    def _server_starting(self) -> bool:
        return not self.no_forks and self.server is not None and self.server.state == "starting"

    def _server_event(self, ready: set[Any]) -> list[tuple[str, Event]]:
        """The fork server's import ended (or it died, or is too slow): trials waiting for it start."""
        server = self.server
        if server is None:
            return []
        if server.check(ready) and server.state in ("failed", "dead"):
            self._stop_forking(server.why)  # also once spawning already: it was still seen
        elif self.no_forks:
            return []
        elif server.state == "starting" and self.pending and time.monotonic() - server.started >= SERVER_WAIT_S:
            self._stop_forking(f"the fork server has not imported train's module after {SERVER_WAIT_S:.0f} s")
        elif server.state == "starting":
            return []
        events: list[tuple[str, Event]] = []
        for tid, (spec, slot) in list(self.pending.items()):
            del self.pending[tid]
            events.append((tid, self._hand(spec, slot, self._new_process(slot))))
        return events

    def _stop_forking(self, why: str) -> None:
        """Spawn from now on: close forked standbys, end the server."""
        if not self.no_forks:  # slower from now on, never wrong: said once
            log.warning("sweeper: %s; trials start in fresh spawn processes", why)
        elif self.server is not None and self.server.state == "dead":
            log.warning("sweeper: %s", why)
        self.no_forks = True
        for sb in [sb for sb in self._all_standbys() if sb.forked]:
            self._drop(sb)
        # A fork's exit code comes through the server: while forks run, it stays (to close()).
        if self.server is not None and not any(p.forked for p in self.running.values()):
            self.server.stop()

    def _watched(self, p: _Proc) -> bool:
        return p.forked and not p.fn_started and not p.has_result and not p.cancelled

    def _stuck(self, p: _Proc, now: float) -> bool:
        """A fork not in train yet, looked at by the watchdog: stuck if it used almost no CPU
        since the last look (a deadlock sleeps on its lock); one still importing the user's
        module computes, and is looked at again later."""
        cpu = procs.cpu_seconds(p.process.pid)
        if cpu is None:  # cannot be read here: the time alone decides
            return True
        if cpu - p.cpu_s >= STUCK_CPU * self.watch_s:
            p.cpu_s, p.watch_at = cpu, now + self.watch_s
            return False
        return True

    def _rescue(self, p: _Proc) -> list[tuple[str, Event]]:
        """A forked trial has not reached train and stopped computing: take it for
        deadlocked, kill it, say why in its log, and give its trial to a spawn process
        (Began again)."""
        pid, spec = p.process.pid, p.spec
        why = (f"its forked process (pid {pid}) had not reached train {time.monotonic() - p.handed:.0f} s after "
               "it was handed the trial, and was not computing (a lock held when the fork server forked?); it "
               "was killed and the trial runs again in a fresh spawn process, as do the rest of the sweep's "
               "trials")
        procs.kill_group_and_tree(pid, signal.SIGKILL)
        join(p.process, p.exit_fd, TERM_GRACE)
        self._forget(p)
        try:
            os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
            with open(spec.log_path, "a") as f:
                f.write(f"{WATCHDOG_MARK} {why}\n")
        except OSError:
            pass
        self._stop_forking("the fork watchdog fired")
        began = self._hand(spec, p.slot, self._new_process(p.slot))
        return [(spec.trial_id, replace(began, moved=why))]

    # -- standbys and trials ----------------------------------------------------------

    def _standby_event(self, sb: Spare, ready: set[Any]) -> list[tuple[str, Event]]:
        events: list[tuple[str, Event]] = []
        if sb.conn in ready:
            try:
                while sb.conn.poll():
                    message = sb.conn.recv()  # Ready, or why it cannot import train
                    if isinstance(message, LoadFailed):
                        events.append(("", message))
                    elif isinstance(message, Ready) and not sb.ready:
                        sb.ready = True
                        if not sb.forked:
                            self._import_s = [*self._import_s[-15:], time.monotonic() - sb.born]
                            self._standby_mb = max(self._standby_mb, headroom.rss_mb(sb.process.pid) or 0.0)
            except (EOFError, OSError):
                pass
        if sb.exit_fd in ready:  # died before it had a trial: forget it; give up after a few
            if sb.process.exitcode == bootstrap.NO_MAIN_GUARD:
                events.append(("", Broken(str(no_main_guard()))))
            self._drop(sb)
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
        own = self._orphan_exit(p)
        join(p.process, p.exit_fd, TERM_GRACE)
        events = self._receive(p) if p.conn is not None else []
        peak = self.sampler.peaks.pop(p.process.pid, None) if self.sampler else None
        exitcode = p.process.exitcode if own is None else own
        if p.fn_started:  # how long trials run, for how many standbys keep a slot fed
            self._trial_s = [*self._trial_s[-15:], time.monotonic() - p.handed]
        self._forget(p)
        if exitcode == bootstrap.NO_MAIN_GUARD and not p.has_result and not p.fn_started:
            # the sweep's problem, not this trial's: no row (it runs next time)
            return events + [("", Broken(str(no_main_guard())))]
        return events + [(p.spec.trial_id, Exited(exitcode, peak_mb=peak))]

    def _orphan_exit(self, p: _Proc) -> int | None:
        """A fork's exit code comes through the fork server; once the server is dead, its
        forks are this subreaper's children, and their own exit code is read here (else
        multiprocessing would say 255)."""
        if not p.forked or self.server is None or self.server.state != "dead":
            return None
        if not multiprocessing.connection.wait([p.exit_fd], TERM_GRACE):
            return None
        try:
            done, status = os.waitpid(p.process.pid, os.WNOHANG)
        except ChildProcessError:  # not adopted (no subreaper here)
            return None
        return os.waitstatus_to_exitcode(status) if done else None

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
        known |= {sb.process.pid for sb in self._all_standbys()}
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


def preload_of(target: Target) -> list[str]:
    """What the fork server may import ahead for ``target`` (candidates; the server keeps
    the installed ones): the grid file's imports, noted where it was read, or the modules
    that ``train``'s module (imported here already) holds."""
    import sys

    from .. import modules

    if isinstance(target, FileTarget):
        return list(target.preload)
    return modules.needed_by(sys.modules.get(target.module)) if target.module else []


def new_tag() -> str:
    """A tag for one sweep's processes (``SWEEPER_SWEEP``), unique on this machine."""
    return f"{os.getpid()}-{os.urandom(4).hex()}"


def _common_env(slots: Sequence[Slot]) -> dict[str, str]:
    """What every slot's environment sets alike (thread counts, device order): the fork
    server starts with it, as variables a framework reads at import must be set by then.
    What differs per slot (the GPU, the cap, the slot's number) each fork sets itself."""
    envs = [s.env for s in slots]
    common = dict(envs[0]) if envs else {}
    for env in envs[1:]:
        common = {k: v for k, v in common.items() if env.get(k) == v}
    common.pop(contract.SLOT, None)
    return common


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
    its own process group) reaches only the parent, which then stops it properly.

    The parent's own SIGINT is blocked meanwhile, not lost: a signal sent to a blocked
    thread is kept pending even while ignored, and arrives when the handler is back. (A
    Ctrl-C in this window was lost: on a busy machine the child can import the grid file
    before ``start()`` returns. The child unblocks it first thing, in its bootstrap.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
