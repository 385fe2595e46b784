"""The local backend's class: the Backend protocol's methods (open, start, wait, drain,
tell, cancel, close), tying the parts together: the launcher and its fork server
(:mod:`.fork`, :mod:`.server`), the standbys (:mod:`.standby`), the reaper
(:mod:`.reaper`), and the trials' processes and pipes (:mod:`.process`). Which slot a trial
takes, and on what terms, it asks the sweep's placement (:mod:`sweeper.placement.policy`),
which the engine asked before whether the trial may start at all.

Per slot (one trial's worth of a device, :mod:`sweeper.placement.slots`)::

    start(spec) ─▶ a standby of the slot, a fork, or a spawn process ─▶ spec over its pipe
                   (while the fork server imports: the trial waits, its Began comes later)
    wait(n)     ◀─ pipe: messages     ◀─ pidfd: it exited   ◀─ standbys: ready / died
                ◀─ the fork server: imported (FIFO) / died (pidfd)
                ─▶ watchdog: a fork that has not reached train after FORK_WATCHDOG_S is
                   killed and its trial handed to a spawn process (Began again, with why)
                ─▶ standbys for the next n queued trials: a fork per busy slot; spawn ones
                   while measured idle cores allow (:mod:`sweeper.system.headroom`), never more than n
    cancel()    ─▶ SIGTERM / SIGKILL to its process group, its descendants, and the
                   orphans it left with the sweep's tag (this process is a subreaper)
    exit        ─▶ the placement frees its slot (per_gpu="auto": its reservation stands
                   until its card's memory is back)

A *standby* is a slot's next process, started while the slot's trial runs: it has
what ``train`` needs imported (a fork has it from the server) when the trial comes.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import signal
import time
from dataclasses import replace
from typing import Any, Sequence

from sweeper.backends.local import fork
from sweeper.backends.local.fork import Launcher, rescue, watched
from sweeper.backends.local.process import REAP_WAIT_S, Proc, join, no_main_guard, receive
from sweeper.backends.local.reaper import Reaper, orphan_exit
from sweeper.backends.local.server import ForkServer
from sweeper.backends.local.standby import Spare, Standbys
from sweeper.child import bootstrap
from sweeper.model import contract
from sweeper.model.protocol import Began, Broken, Event, Exited, Reports, Traits
from sweeper.model.target import Target
from sweeper.model.trial import TrialSpec
from sweeper.placement.policy import Occupancy, SlotPlacement
from sweeper.placement.slots import Slot, pick
from sweeper.system import hostmem, procs

log = logging.getLogger("sweeper")

class LocalBackend:
    """Trials as processes of this machine, on its slots (see the module docstring)."""

    def __init__(self, target: Target, slots: Sequence[Slot], *, workers: int | None = None,
                 prefetch: bool = True, start_method: str = "forkserver", tag: str | None = None,
                 timeout: float | None = None, placement: SlotPlacement | None = None,
                 early: ForkServer | None = None) -> None:
        self.target = target
        #: which slots a trial may take, on what terms (memory packing, host memory, the breaker);
        #: the engine asks the same object whether a trial may start
        self.placement = placement if placement is not None else SlotPlacement(slots)
        self.slots = list(slots)
        capacity = min(workers or len(self.slots), len(self.slots))
        self.traits = Traits(capacity, stop_word="killed", answers=True)
        #: Carried by every process of this sweep (and only this sweep), for :mod:`sweeper.system.procs`.
        self.tag = tag or procs.new_tag()
        self.launcher = Launcher(target, self.tag, start_method, timeout, early)
        self.pool = Standbys(prefetch)
        self.reaper = Reaper(self.tag, self._workers)
        self.running: dict[str, Proc] = {}  #: by trial id
        self.pending: dict[str, tuple[TrialSpec, Slot]] = {}  #: waiting for the fork server
        self._events: list[tuple[str, Event]] = []  #: for the next wait()

    # -- the Backend protocol ------------------------------------------------------------

    def open(self) -> None:
        self.reaper.open()
        self.placement.open(self.occupancy)

    def occupancy(self) -> Occupancy:
        """What this backend's trials hold now, for its placement."""
        return Occupancy({tid: p.process.pid for tid, p in self.running.items()},
                         frozenset({p.slot.index for p in self.running.values()}
                                   | {s.index for _, s in self.pending.values()}),
                         frozenset(sb.process.pid for sb in self.pool.all()), self.tag,
                         lambda pid: {pid, *procs.descendants(pid)})

    def start(self, spec: TrialSpec) -> Began | None:
        self.launcher.open_server(self.slots, self.pool, self.running.values())
        spec, free = self.placement.claim(spec)
        slot = pick(free, [p.slot for p in self.running.values()] + [s for _, s in self.pending.values()],
                    prefer={i for i, sbs in self.pool.by_slot.items() if sbs})
        queue = self.pool.by_slot.get(slot.index, [])
        if queue:
            process = next((sb for sb in queue if sb.ready), queue[0])
            queue.remove(process)
        elif self.launcher.starting():  # its import is under way: the trial waits for a fork
            self.pending[spec.trial_id] = (spec, slot)
            return None
        else:
            process = self.launcher.new_process(slot)
        return self._hand(spec, slot, process)

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Event]]:
        self._ahead(queued)
        self.placement.stale()  # what NVML said holds until trials may have come and gone
        waits: list[Any] = [wake]
        for sb in self.pool.all():
            waits += [sb.exit_fd, sb.conn]
        for p in self.running.values():
            waits.append(p.exit_fd)
            if p.conn is not None:
                waits.append(p.conn)
        if self.launcher.server is not None:
            waits += self.launcher.server.waits()
        now = time.monotonic()
        due = [self.placement.next_sample] if self.running or self.placement.tearing else []
        due += [self.placement.next_look] if self.placement.next_look is not None else []
        due += [p.watch_at for p in self.running.values() if watched(p)]
        due += [self.pool.recheck_at] if self.pool.recheck_at is not None else []
        due += [self.launcher.server.started + fork.SERVER_WAIT_S] if self.pending and self.launcher.server else []
        if self._events:
            due.append(now)
        if due:
            soon = max(0.0, min(due) - now)
            timeout = soon if timeout is None else min(timeout, soon)
        ready = set(multiprocessing.connection.wait(waits, timeout))
        events, self._events = self._events, []
        # Only what was waited on: a process started below may get the number of a descriptor
        # closed below (the fork server's, a dropped standby's) that is in ``ready``.
        waited, pooled = list(self.running.items()), self.pool.all()
        events += self._server_event(ready)
        for sb in [sb for sb in pooled if sb in self.pool.all()]:
            events += self.pool.event(sb, ready)
        for tid, p in [(tid, p) for tid, p in waited if self.running.get(tid) is p]:
            if p.conn is not None and p.conn in ready:
                said = receive(p)
                if tid in self.placement.unmeasured and any(isinstance(e, Reports) and _an_epoch(e) for _, e in said):
                    self.placement.first_epoch(tid, p.spec.params, p.process.pid)
                events += said
            if p.exit_fd in ready:
                events += self._exited(p)
        now = time.monotonic()
        for p in [p for p in self.running.values() if watched(p) and now >= p.watch_at]:
            if self.launcher.stuck(p, now):
                events += self._rescue(p)
        self.placement.sample(now)
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Event]]:
        p = self.running.get(trial_id)
        if p is None or p.conn is None or p.has_result:
            return []
        return receive(p)

    def tell(self, trial_id: str, message: Any) -> None:
        p = self.running.get(trial_id)
        if p is not None and p.conn is not None:
            with contextlib.suppress(OSError):  # it died meanwhile: its exit is judged as usual
                p.conn.send(message)

    def cancel(self, trial_id: str, hard: bool) -> None:
        if self.pending.pop(trial_id, None) is not None:  # it had no process yet
            self.placement.release(trial_id)
            self._events.append((trial_id, Exited(cancelled=True)))
            return
        p = self.running.get(trial_id)
        if p is not None:
            p.cancelled = True
            self.reaper.signal(p, signal.SIGKILL if hard else signal.SIGTERM)

    def _ahead(self, queued: int) -> None:
        """Standbys for the next ``queued`` trials, never more: a fork per busy slot at once
        (it costs no import); spawn ones, which import, as measured idle cores allow."""
        self.pool.trim(queued)
        if not self.pool.prefetch or self.launcher.starting():
            return
        forks = not self.launcher.no_forks
        closed = self.placement.closed()
        running = [p for p in self.running.values() if p.slot.gpu not in closed]  # a closed card's slots take none
        for p in running:
            if len(self.pool.all()) >= queued:
                return
            # A spawn standby only once the slot's trial has its imports behind it: two
            # processes importing TensorFlow at once on few cores slow each other.
            if not self.pool.by_slot.get(p.slot.index) and (forks or p.fn_started):
                self.pool.add(p.slot, self._standby(p.slot))
        if not forks:
            self.pool.more(queued, running, self._standby)

    def close(self) -> list[tuple[str, Event]]:
        """Last resort on any way out: nothing of a trial outlives the sweep."""
        events: list[tuple[str, Event]] = [(tid, Exited(cancelled=True)) for tid in self.pending]
        for tid in self.pending:
            self.placement.release(tid)
        self.pending.clear()
        try:
            for sb in self.pool.all():
                sb.close()
            self.pool.by_slot.clear()
            for p in self.running.values():
                self.reaper.signal(p, signal.SIGKILL)
            deadline = time.monotonic() + REAP_WAIT_S
            for p in list(self.running.values()):
                if join(p.process, p.exit_fd, max(0.0, deadline - time.monotonic())):
                    events += self._exited(p)
                else:
                    self._forget(p)
            self.launcher.close()
            self.reaper.reap(final=True)
        finally:
            self.reaper.close()
            self.placement.close()
        return events

    # -- processes ----------------------------------------------------------------------

    def _standby(self, slot: Slot) -> Spare:
        return self.launcher.new_process(slot, standby=True)

    def _workers(self) -> set[int]:
        """This process's own children that are the sweep's workers (for the reaper)."""
        return {p.process.pid for p in self.running.values()} | {sb.process.pid for sb in self.pool.all()}

    def _hand(self, spec: TrialSpec, slot: Slot, process: Spare) -> Began:
        """Give a trial to a process: its pipe gets the spec; the trial's clock starts."""
        process.closed = True  # a trial's process now: ended as one
        spec = replace(spec, device=slot.device)
        self.running[spec.trial_id] = Proc(spec, slot, process.process, process.conn, process.exit_fd,
                                           forked=process.forked, watch_at=time.monotonic() + self.launcher.watch_s,
                                           io=procs.io_chars(process.process.pid) if process.forked else None,
                                           oom_kills=hostmem.oom_kills())
        try:
            process.conn.send(spec)
        except OSError:  # it died in its bootstrap; its exit is judged like any other
            pass
        fraction = spec.env.get(contract.MEMORY_FRACTION, slot.env.get(contract.MEMORY_FRACTION))
        terms = self.placement.terms(spec)
        pid = process.process.pid
        self.placement.crowd.began(spec.trial_id, pid)  # its reservation, published with its process
        if terms is not None:  # packed: its own cap, and what it reserved
            return Began(pid, slot.device, slot.uuid, terms.cap_mb, fraction, reserved_mb=terms.reserved_mb,
                         packed=True, alone_mb=terms.alone_mb, where=f"pid {pid}")
        return Began(pid, slot.device, slot.uuid, slot.cap_mb, fraction, reserved_mb=slot.cap_mb, where=f"pid {pid}")

    def _server_event(self, ready: set[Any]) -> list[tuple[str, Event]]:
        """The fork server's import ended (or it died, or is too slow): trials waiting for it start."""
        if not self.launcher.settled(ready, bool(self.pending), self.pool, self.running.values()):
            return []
        events: list[tuple[str, Event]] = []
        for tid, (spec, slot) in list(self.pending.items()):
            del self.pending[tid]
            events.append((tid, self._hand(spec, slot, self.launcher.new_process(slot))))
        return events

    def _rescue(self, p: Proc) -> list[tuple[str, Event]]:
        """The watchdog took a fork for deadlocked (:func:`.fork.rescue` killed it and said
        why in its log): its trial goes to a spawn process (Began again), as do the rest."""
        why = rescue(p)
        self._forget(p, release=False)  # the same terms in the new process
        self.launcher.stop_forking("the fork watchdog fired", self.pool, self.running.values())
        began = self._hand(p.spec, p.slot, self.launcher.new_process(p.slot))
        return [(p.spec.trial_id, replace(began, moved=why))]

    def _exited(self, p: Proc) -> list[tuple[str, Event]]:
        """The process has exited: end what it left, read what it sent, free the slot."""
        # Unreaped, the process keeps its pid and group id, so neither can name a stranger yet.
        self.reaper.signal(p, signal.SIGKILL)  # anything it left in its group, or left as a daemon
        self.reaper.reap()
        server = self.launcher.server
        own = orphan_exit(p, server is not None and server.state == "dead")
        join(p.process, p.exit_fd, REAP_WAIT_S)
        events = receive(p) if p.conn is not None else []
        peak, host = self.placement.ended(p.spec.trial_id, p.spec.name, p.process.pid)
        exitcode = p.process.exitcode if own is None else own
        if p.fn_started:  # how long trials run, for how many standbys keep a slot fed
            self.pool.trial_s = [*self.pool.trial_s[-15:], time.monotonic() - p.handed]
        self._forget(p)
        if exitcode == bootstrap.NO_MAIN_GUARD and not p.has_result and not p.fn_started:
            # the sweep's problem, not this trial's: no row (it runs next time)
            return events + [("", Broken(str(no_main_guard())))]
        return events + [(p.spec.trial_id, Exited(exitcode, peak_mb=peak, mem_peak_mb=host,
                                                  oom_killed=_oom_killed(p, exitcode),
                                                  crowded=self.placement.crowd.crowded.get(p.spec.trial_id, "")))]

    def _forget(self, p: Proc, release: bool = True) -> None:
        """A process let go of: its pipe and pidfd closed; its trial's terms with it, unless
        the trial goes on in another process (``release=False``)."""
        self.running.pop(p.spec.trial_id, None)
        if release:
            self.placement.release(p.spec.trial_id)
        self.placement.forget_pid(p.process.pid)
        if p.conn is not None:
            p.conn.close()
            p.conn = None
        if p.exit_fd != p.process.sentinel:
            os.close(p.exit_fd)
        if p.process.exitcode is not None:
            p.process.close()


def _an_epoch(reports: Reports) -> bool:
    """Whether a batch of reports includes the end of an epoch of training (epoch >= 1; an
    epoch 0, such as an evaluation before training, has no gradients or optimiser state)."""
    for item in reports.items:
        try:
            if int(item.get("epoch", 0)) >= 1:
                return True
        except (TypeError, ValueError):
            continue
    return False


def _oom_killed(p: Proc, exitcode: int | None) -> str:
    """How the kernel's OOM killer is known to have ended this trial, or "": it died of a
    SIGKILL that was not the sweep's, while its memory cgroup's OOM-kill count rose (the
    count is the cgroup's: another process killed meanwhile would count too)."""
    if exitcode != -signal.SIGKILL or p.cancelled or p.oom_kills is None:
        return ""
    now = hostmem.oom_kills()
    if now is None or now <= p.oom_kills:
        return ""
    return f"the memory cgroup's oom_kill count went from {p.oom_kills} to {now} while it ran"
