"""The local backend's class: the Backend protocol's methods (open, start, wait, drain,
tell, cancel, ahead, close), tying the parts together: the launcher and its fork server
(:mod:`.fork`, :mod:`.server`), the standbys (:mod:`.standby`), the reaper
(:mod:`.reaper`), and the trials' processes and pipes (:mod:`.process`).

Per slot (one trial's worth of a device, :mod:`sweeper.run.slots`)::

    start(spec) ─▶ a standby of the slot, a fork, or a spawn process ─▶ spec over its pipe
                   (while the fork server imports: the trial waits, its Began comes later)
    wait()      ◀─ pipe: messages     ◀─ pidfd: it exited   ◀─ standbys: ready / died
                ◀─ the fork server: imported (FIFO) / died (pidfd)
                ─▶ watchdog: a fork that has not reached train after FORK_WATCHDOG_S is
                   killed and its trial handed to a spawn process (Began again, with why)
    ahead(n)    ─▶ standbys for the next n trials: a fork per busy slot; spawn ones while
                   measured idle cores allow (:mod:`sweeper.system.headroom`), never more than n
    cancel()    ─▶ SIGTERM / SIGKILL to its process group, its descendants, and the
                   orphans it left with the sweep's tag (this process is a subreaper)
    exit        ─▶ per_gpu="auto": its reservation stands (``tearing``) until its card's
                   memory is back, or TEARDOWN_S passed (said once, counted as used)

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
from dataclasses import dataclass, replace
from typing import Any, Sequence

from sweeper.backends.local import fork
from sweeper.backends.local.fork import Launcher, rescue, watched
from sweeper.backends.local.process import REAP_WAIT_S, Proc, join, no_main_guard, receive
from sweeper.backends.local.reaper import Reaper, orphan_exit
from sweeper.backends.local.server import ForkServer
from sweeper.backends.local.standby import Spare, Standbys
from sweeper.child import bootstrap
from sweeper.model import contract
from sweeper.model.protocol import Began, Broken, Event, Exited, Reports
from sweeper.model.target import Target
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.run.packing import Breaker, Card, HostRoom, Packer, Spot
from sweeper.run.slots import Slot, pick
from sweeper.system import capping, headroom, hostmem, procs
from sweeper.system.gpus import MemorySampler
from sweeper.system.hostmem import HostSampler

log = logging.getLogger("sweeper")

#: Seconds between NVML reads of the trials' GPU memory, while trials run on GPUs.
SAMPLE_EVERY = 0.5
#: Teardown (per_gpu="auto"): a packed trial's reservation is freed once its card's memory
#: that no process NVML lists holds is within this many MB of what it was when the trial
#: started (and no leftover process of the sweep holds any there). The driver's own share
#: of a card moves by tens of MB as contexts come and go; a leaked context is hundreds.
TEARDOWN_TOLERANCE_MB = 256
#: Seconds a reservation waits for that; then what did not come back is said once (it is
#: counted as used anyway: room comes from NVML's free memory) and the reservation is freed.
#: The driver frees a context within a second of its process's exit.
TEARDOWN_S = 10.0


@dataclass
class Teardown:
    """A packed trial that ended, its reservation kept until its card's memory is back."""

    name: str  #: the trial's, for the line that says what did not come back
    gpu: str
    reserved_mb: int
    before_mb: int  #: MB of the card no listed process held when the trial started
    until: float  #: monotonic time after which it is said and freed
    residue_mb: int = 0  #: what has not come back, at the last look


class LocalBackend:
    """Trials as processes of this machine, on its slots (see the module docstring)."""

    stop_word = "killed"
    answers = True

    def __init__(self, target: Target, slots: Sequence[Slot], *, workers: int | None = None,
                 prefetch: bool = True, start_method: str = "forkserver", tag: str | None = None,
                 timeout: float | None = None, packer: Packer | None = None,
                 host: HostRoom | None = None, early: ForkServer | None = None, breaker: Breaker | None = None) -> None:
        self.target = target
        #: on GPUs: the cards closed to new trials (where trials crash), under any per_gpu
        self.breaker = breaker if breaker is not None or packer is None else packer.breaker
        #: per_gpu="auto": where each trial goes, by the GPU memory it is predicted to need
        self.packer = packer
        #: workers="auto" or host_memory: whether a trial starts, by the host memory it needs
        self.host_room = host
        self._spots: dict[str, Spot] = {}  #: by trial id: admitted, not started yet
        #: by trial id: running on a card to itself until its first epoch measures its shape
        self._unmeasured: dict[str, Spot] = {}
        self._host_terms: dict[str, int] = {}  #: by trial id: host MB to reserve, admitted
        self.host_reserved: dict[str, int] = {}  #: by trial id: host MB of a running trial
        self.reserved: dict[str, tuple[str, int]] = {}  #: by trial id: (card, MB) of a running trial
        self._totals: dict[str, int] = {}  #: card -> its total MB, as NVML said
        self._read: list[Card] | None = None  #: the cards as NVML told them since the last wait()
        self._told: set[int] = set()  #: pids on the cards that were not the sweep's trials, said once
        self._left: dict[int, str] = {}  #: pid -> card: leftovers of the sweep's trials, killed
        self._before: dict[str, int] = {}  #: by trial id: MB of its card no listed process held at its start
        self.tearing: dict[str, Teardown] = {}  #: by trial id: ended, its card's memory not verified back yet
        self.slots = list(slots)
        self.capacity = min(workers or len(self.slots), len(self.slots))
        #: Carried by every process of this sweep (and only this sweep), for :mod:`sweeper.system.procs`.
        self.tag = tag or procs.new_tag()
        self.launcher = Launcher(target, self.tag, start_method, timeout, early)
        self.pool = Standbys(prefetch)
        self.reaper = Reaper(self.tag, self._workers)
        self.running: dict[str, Proc] = {}  #: by trial id
        self.pending: dict[str, tuple[TrialSpec, Slot]] = {}  #: waiting for the fork server
        self._events: list[tuple[str, Event]] = []  #: for the next wait()
        self.sampler: MemorySampler | None = None  #: GPU memory, where NVML sees cards
        self.host = HostSampler()  #: host memory, on every machine
        self._next_sample = 0.0

    # -- the Backend protocol ------------------------------------------------------------

    def open(self) -> None:
        self.reaper.open()
        if any(s.gpu is not None for s in self.slots):
            sampler = MemorySampler()
            self.sampler = sampler if sampler.start() else None

    def admits(self, spec: TrialSpec) -> bool:
        """Whether the trial may start now: always, unless trials are packed by memory;
        then while it fits on a card (:mod:`sweeper.run.packing`), where it is to go is kept;
        never while every free slot is on a card the breaker closed."""
        if self.breaker is not None and not self._free():
            return False
        host = None
        if self.host_room is not None:
            ours = [(mb, self.host.now.get(self.running[tid].process.pid, 0) if tid in self.running else 0)
                    for tid, mb in self.host_reserved.items()]
            host = self.host_room.fits(spec.params, headroom.available_mb(), ours)
            if host is None:
                return False
        if self.packer is not None:
            free = {s.gpu for s in self._free()}
            spot = self.packer.place(spec.params, [c for c in self._cards() if c.gpu in free],
                                     busy=bool(self.running or self.pending))
            if spot is None:
                return False
            self._spots[spec.trial_id] = spot
        if host is not None and self.host_room is not None:
            self.host_room.commit(host[1])
            self._host_terms[spec.trial_id] = host[0]
        return True

    def ranked(self, queued: Sequence[TrialSpec]) -> list[int] | None:
        """Packed: the trials whose shape is not measured yet first (see :mod:`sweeper.run.packing`)."""
        if self.packer is None:
            return None
        return self.packer.ranked([spec.params for spec in queued])

    @property
    def exhausted(self) -> str | None:
        """Why no trial can start any more (every card stopped taking them), else None."""
        return self.breaker.exhausted if self.breaker is not None else None

    def again(self, result: TrialResult) -> bool | None:
        """Whether this attempt runs again on other terms (an OOM of a packed trial), or never
        (one with the largest card to itself): :meth:`sweeper.run.packing.Packer.again`."""
        return self.packer.again(result) if self.packer is not None else False

    def start(self, spec: TrialSpec) -> Began | None:
        self.launcher.open_server(self.slots, self.pool, self.running.values())
        free = self._free()
        if spec.trial_id in self._host_terms:
            self.host_reserved[spec.trial_id] = self._host_terms.pop(spec.trial_id)
        spot = self._spots.pop(spec.trial_id, None)
        if spot is not None:  # packed: its card, and its own cap in its environment
            free = [s for s in free if s.gpu == spot.gpu]
            total = self._totals.get(spot.gpu, spot.reserved_mb)
            spec = replace(spec, env={**spec.env, **capping.trial_env(spot.cap_mb, total)})
            self.reserved[spec.trial_id] = (spot.gpu, spot.reserved_mb)
            if spot.need.source == "unmeasured":
                self._unmeasured[spec.trial_id] = spot
            unlisted = self._unlisted().get(spot.gpu)
            if unlisted is not None:
                self._before[spec.trial_id] = unlisted
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

    def wait(self, timeout: float | None, wake: int) -> list[tuple[str, Event]]:
        self._read = None  # what NVML said holds until trials may have come and gone
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
        due = [self._next_sample] if self.running or self.tearing else []
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
                if tid in self._unmeasured and any(isinstance(e, Reports) and _an_epoch(e) for _, e in said):
                    self._first_epoch(p)
                events += said
            if p.exit_fd in ready:
                events += self._exited(p)
        now = time.monotonic()
        for p in [p for p in self.running.values() if watched(p) and now >= p.watch_at]:
            if self.launcher.stuck(p, now):
                events += self._rescue(p)
        if (self.running or self.tearing) and now >= self._next_sample:
            pids = {p.process.pid for p in self.running.values()}
            self.host.sample(pids)
            if self.sampler:
                self.sampler.sample(pids)
            if self.tearing:  # looked at again now, not at the next placement only
                self._read = None
                self._cards()
                self._read = None
            self._next_sample = now + SAMPLE_EVERY
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
            self.reserved.pop(trial_id, None)
            self._before.pop(trial_id, None)
            self._unmeasured.pop(trial_id, None)
            self.host_reserved.pop(trial_id, None)
            self._events.append((trial_id, Exited(cancelled=True)))
            return
        p = self.running.get(trial_id)
        if p is not None:
            p.cancelled = True
            self.reaper.signal(p, signal.SIGKILL if hard else signal.SIGTERM)

    def ahead(self, queued: int) -> None:
        """Standbys for the next ``queued`` trials, never more: a fork per busy slot at once
        (it costs no import); spawn ones, which import, as measured idle cores allow."""
        self.pool.trim(queued)
        if not self.pool.prefetch or self.launcher.starting():
            return
        forks = not self.launcher.no_forks
        closed = self.breaker.closed if self.breaker is not None else {}
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
            self.reserved.pop(tid, None)
            self._before.pop(tid, None)
            self._unmeasured.pop(tid, None)
            self.host_reserved.pop(tid, None)
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
            if self.sampler:
                self.sampler.stop()
        return events

    # -- processes ----------------------------------------------------------------------

    def _free(self) -> list[Slot]:
        """The slots no trial holds, on cards that take trials (not closed by the breaker)."""
        taken = {p.slot.index for p in self.running.values()} | {s.index for _, s in self.pending.values()}
        closed = self.breaker.closed if self.breaker is not None else {}
        return [s for s in self.slots if s.index not in taken and s.gpu not in closed]

    def _cards(self) -> list[Card]:
        """The sweep's cards now: NVML's free memory, and what our trials there reserved and
        hold (read once between waits; the reservations as they are)."""
        if self.sampler is None or self.packer is None:
            return []
        if self._read is None:
            self.sampler.sample({p.process.pid for p in self.running.values()})
            self._others()
            read = self.sampler.cards()
            self._totals.update({g: total for g, (total, _) in read.items()})
            self._read = [Card(g, total, free) for g, (total, free) in read.items() if g in self.packer.gpus]
            self._teardowns()
        ours: dict[str, list[tuple[float, float]]] = {}
        for tid, (gpu, mb) in self.reserved.items():
            p = self.running.get(tid)
            held = self.sampler.now.get(p.process.pid, 0) if p is not None else 0
            ours.setdefault(gpu, []).append((mb, held))
        for t in self.tearing.values():  # its reservation stands, less what is still used of it
            ours.setdefault(t.gpu, []).append((t.reserved_mb, t.residue_mb))
        return [replace(c, ours=tuple(ours.get(c.gpu, ()))) for c in self._read]

    def _first_epoch(self, p: Proc) -> None:
        """A trial placed unmeasured reported an epoch: what its tree holds now measures its
        shape (:meth:`sweeper.run.packing.Packer.first_epoch`), and its reservation shrinks."""
        assert self.packer is not None
        tid = p.spec.trial_id
        if self.sampler is not None:
            self.sampler.sample({q.process.pid for q in self.running.values()})
        held = self.sampler.peaks.get(p.process.pid) if self.sampler is not None else None
        if not held:  # NVML has not shown it yet: the next report
            return
        spot = self._unmeasured.pop(tid)
        new = self.packer.first_epoch(p.spec.params, spot, held)
        if new is not None and tid in self.reserved:
            self.reserved[tid] = (spot.gpu, new)
            self._read = None  # the next placement sees its card's room anew

    def _unlisted(self) -> dict[str, int]:
        """Per card, MB used that no process NVML listed holds (the driver's own share, and
        contexts whose process is gone), as last read; {} before a read. A card where NVML
        cannot tell some process's memory is left out: nothing there can be told apart."""
        if self.sampler is None or self._read is None:
            return {}
        listed: dict[str, int] = {}
        unknown: set[str] = set()
        for card, mb in self.sampler.listed.values():
            if mb is None:
                unknown.add(card)
            listed[card] = listed.get(card, 0) + (mb or 0)
        return {c.gpu: c.total_mb - c.free_mb - listed.get(c.gpu, 0) for c in self._read if c.gpu not in unknown}

    def _teardowns(self) -> None:
        """Ended packed trials whose card's memory is back (within ``TEARDOWN_TOLERANCE_MB``
        of what no listed process held at their start, no leftover of the sweep's there)
        have their reservation freed; one past ``TEARDOWN_S`` has it freed too, and what did
        not come back is said once: counted as used, through NVML's free memory."""
        if not self.tearing:
            return
        unlisted = self._unlisted()
        assert self.sampler is not None
        left: dict[str, int] = {}
        for pid, card in self._left.items():
            if pid in self.sampler.listed:
                left[card] = left.get(card, 0) + (self.sampler.listed[pid][1] or 0)
        self._left = {pid: card for pid, card in self._left.items() if pid in self.sampler.listed}
        now = time.monotonic()
        for tid, t in list(self.tearing.items()):
            if t.gpu not in unlisted:  # NVML cannot read the card, or tell what its processes hold
                if now >= t.until:
                    del self.tearing[tid]  # nothing to verify by: freed, unsaid
                continue
            t.residue_mb = max(0, unlisted[t.gpu] - t.before_mb) + left.get(t.gpu, 0)
            if t.residue_mb <= TEARDOWN_TOLERANCE_MB:
                del self.tearing[tid]
            elif now >= t.until:
                del self.tearing[tid]
                log.warning("sweeper: gpu:%s: %d MB did not come back %.0f s after trial %s ended (used by no "
                            "process NVML lists, or by a process it left); counted as used", t.gpu,
                            t.residue_mb, TEARDOWN_S, t.name)
                # said once, for this trial: the others on the card measure from it, not blamed for it
                for other in self.tearing.values():
                    if other.gpu == t.gpu:
                        other.before_mb += t.residue_mb
                for rid, (gpu, _) in self.reserved.items():
                    if gpu == t.gpu and rid in self._before:
                        self._before[rid] += t.residue_mb

    def _others(self) -> None:
        """Processes NVML lists on the sweep's cards that are no running trial's (nor below
        one, nor a standby): one of this sweep's from a slot no trial runs in (a trial's
        leftover) is killed, once said (one from a busy slot is its trial's, left alone);
        another user's is said once, and counts as used through NVML's free memory."""
        assert self.sampler is not None
        if not self.sampler.listed:
            return
        from sweeper.system import procs

        ours = {sb.process.pid for sb in self.pool.all()}
        for p in self.running.values():
            ours |= {p.process.pid, *procs.descendants(p.process.pid)}
        busy = {str(p.slot.index) for p in self.running.values()} | {str(s.index) for _, s in self.pending.values()}
        for pid, (card, mb) in self.sampler.listed.items():
            if pid in ours or pid in self._told or not os.path.exists(f"/proc/{pid}"):
                continue  # (not in /proc: gone, or NVML reports the host's pids to this container)
            tag = procs.tags(pid)
            if tag.get(contract.SWEEP) == self.tag and tag.get(contract.SLOT) == procs.SLOT_PLACEHOLDER:
                continue  # the fork server or its probe: the server's own check (ForkServer._held) judges it
            self._told.add(pid)
            if tag.get(contract.SWEEP) == self.tag:
                if tag.get(contract.SLOT) in busy:  # a running trial's detached helper: its trial's
                    self._told.discard(pid)
                    continue
                procs.signal_all([pid], signal.SIGKILL)
                self._left[pid] = card
                log.warning("sweeper: gpu:%s: pid %d, left by a trial of this sweep, held %s after its trial "
                            "ended; killed", card, pid, _amount(mb))
            else:
                log.warning("sweeper: gpu:%s: pid %d, not this sweep's, holds %s; counted as used", card, pid,
                            _amount(mb))

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
        packed = self.reserved.get(spec.trial_id)
        if packed is not None:  # its own cap, and what it reserved
            cap = int(spec.env[contract.MEMORY_LIMIT_MB])
            alone = self.packer is not None and self.packer.last_resort(spec.params)
            return Began(process.process.pid, slot.device, slot.uuid, cap, fraction, reserved_mb=packed[1],
                         packed=True, alone_mb=self._totals.get(packed[0]) if alone else None)
        return Began(process.process.pid, slot.device, slot.uuid, slot.cap_mb, fraction, reserved_mb=slot.cap_mb)

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
        packed, host = self.reserved.get(p.spec.trial_id), self.host_reserved.get(p.spec.trial_id)
        before, unmeasured = self._before.get(p.spec.trial_id), self._unmeasured.get(p.spec.trial_id)
        self._forget(p)
        if packed is not None:  # the same terms in the new process
            self.reserved[p.spec.trial_id] = packed
        if before is not None:
            self._before[p.spec.trial_id] = before
        if unmeasured is not None:
            self._unmeasured[p.spec.trial_id] = unmeasured
        if host is not None:
            self.host_reserved[p.spec.trial_id] = host
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
        peak = self.sampler.peaks.pop(p.process.pid, None) if self.sampler else None
        host = self.host.peaks.pop(p.process.pid, None)
        exitcode = p.process.exitcode if own is None else own
        if p.fn_started:  # how long trials run, for how many standbys keep a slot fed
            self.pool.trial_s = [*self.pool.trial_s[-15:], time.monotonic() - p.handed]
        packed, before = self.reserved.get(p.spec.trial_id), self._before.get(p.spec.trial_id)
        self._forget(p)
        if packed is not None and before is not None:  # freed once its card's memory is back
            self.tearing[p.spec.trial_id] = Teardown(p.spec.name, packed[0], packed[1], before,
                                                     time.monotonic() + TEARDOWN_S, residue_mb=0)
            self._read = None  # the next placement reads the card after this exit
        if exitcode == bootstrap.NO_MAIN_GUARD and not p.has_result and not p.fn_started:
            # the sweep's problem, not this trial's: no row (it runs next time)
            return events + [("", Broken(str(no_main_guard())))]
        return events + [(p.spec.trial_id, Exited(exitcode, peak_mb=peak, mem_peak_mb=host,
                                                  oom_killed=_oom_killed(p, exitcode)))]

    def _forget(self, p: Proc) -> None:
        self.running.pop(p.spec.trial_id, None)
        self.reserved.pop(p.spec.trial_id, None)
        self._before.pop(p.spec.trial_id, None)
        self._unmeasured.pop(p.spec.trial_id, None)
        self.host_reserved.pop(p.spec.trial_id, None)
        self.host.peaks.pop(p.process.pid, None)  # a later process may get its pid
        if self.sampler:
            self.sampler.peaks.pop(p.process.pid, None)
        if p.conn is not None:
            p.conn.close()
            p.conn = None
        if p.exit_fd != p.process.sentinel:
            os.close(p.exit_fd)
        if p.process.exitcode is not None:
            p.process.close()


def _amount(mb: int | None) -> str:
    return "an amount NVML cannot tell" if mb is None else f"{mb} MB"


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
