"""Placement: which queued trial may start now, and where, on this machine's slots.

The engine asks a placement policy (:class:`~sweeper.run.engine.Admission`) before it starts
a trial; the backend that runs it asks the same object which slots the trial may take and
on what terms. Two policies:

* :class:`Anywhere`: every trial may start, in the queue's order (a cluster's scheduler
  places them: Ray, a batch queue; also a local sweep that packs nothing);
* :class:`SlotPlacement`: this machine's slots, under per_gpu="auto" (memory packing,
  :mod:`sweeper.run.packing`), workers="auto" or host_memory (host memory), and the
  breaker that closes a card where trials crash.

What :class:`SlotPlacement` keeps, by trial id: where an admitted trial is to go (``Spot``),
what a running one reserved (card and MB, host MB), and, after it ended, its reservation
until its card's memory is back (``Teardown``)::

    engine: admits(spec) ─▶ fits? (host room, free slots, a card with room) ─▶ kept: its spot
    backend: claim(spec)  ─▶ the spec with its own cap; the slots it may take
             first_epoch  ─▶ an unmeasured trial's shape measured; its reservation shrinks
             ended(tid)   ─▶ its reservation stands (tearing) until its card's memory is back,
                             or TEARDOWN_S passed (said once, counted as used)
             release(tid) ─▶ its terms forgotten (it never ran, or it is gone)

What it needs to know of the backend's trials it reads through :class:`Occupancy`.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from sweeper.model import contract
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.run.hostroom import HostRoom
from sweeper.run.packing import Breaker, Card, Packer, Spot
from sweeper.run.slots import Slot
from sweeper.system import capping, headroom
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


class Anywhere:
    """Every queued trial may start, in the queue's order; nothing runs again on other
    terms; no place ever stops taking trials."""

    exhausted: str | None = None

    def admits(self, spec: TrialSpec) -> bool:
        return True

    def ranked(self, queued: Sequence[TrialSpec]) -> list[int] | None:
        return None

    def again(self, result: TrialResult) -> bool | None:
        return False


@dataclass(frozen=True)
class Occupancy:
    """What a backend's trials hold now, as the placement needs it."""

    pids: dict[str, int] = field(default_factory=dict)  #: by trial id: its process, for running trials
    taken: frozenset[int] = frozenset()  #: slot indices held (running, or waiting for a process)
    spares: frozenset[int] = frozenset()  #: pids of the backend's other processes (standbys)
    tag: str = ""  #: the sweep's mark on its processes (:mod:`sweeper.system.procs`)
    family: Callable[[int], set[int]] = lambda pid: set()  #: a trial's process and what it started


@dataclass
class Teardown:
    """A packed trial that ended, its reservation kept until its card's memory is back."""

    name: str  #: the trial's, for the line that says what did not come back
    gpu: str
    reserved_mb: int
    before_mb: int  #: MB of the card no listed process held when the trial started
    until: float  #: monotonic time after which it is said and freed
    residue_mb: int = 0  #: what has not come back, at the last look


@dataclass(frozen=True)
class Terms:
    """What a packed trial started with: its own cap, what it reserved, and (a last resort,
    alone on the largest card) that card's size."""

    cap_mb: int
    reserved_mb: int
    alone_mb: int | None = None


class SlotPlacement:
    """This machine's slots, and the memory trials need on them (see the module docstring)."""

    def __init__(self, slots: Sequence[Slot], *, packer: Packer | None = None, host: HostRoom | None = None,
                 breaker: Breaker | None = None) -> None:
        self.slots = list(slots)
        #: on GPUs: the cards closed to new trials (where trials crash), under any per_gpu
        self.breaker = breaker if breaker is not None or packer is None else packer.breaker
        #: per_gpu="auto": where each trial goes, by the GPU memory it is predicted to need
        self.packer = packer
        #: workers="auto" or host_memory: whether a trial starts, by the host memory it needs
        self.host_room = host
        self.occupancy: Callable[[], Occupancy] = Occupancy
        self._spots: dict[str, Spot] = {}  #: by trial id: admitted, not started yet
        #: by trial id: running on a card to itself until its first epoch measures its shape
        self.unmeasured: dict[str, Spot] = {}
        self._host_terms: dict[str, int] = {}  #: by trial id: host MB to reserve, admitted
        self.host_reserved: dict[str, int] = {}  #: by trial id: host MB of a running trial
        self.reserved: dict[str, tuple[str, int]] = {}  #: by trial id: (card, MB) of a running trial
        self._totals: dict[str, int] = {}  #: card -> its total MB, as NVML said
        self._read: list[Card] | None = None  #: the cards as NVML told them since the last look
        self._told: set[int] = set()  #: pids on the cards that were not the sweep's trials, said once
        self._left: dict[int, str] = {}  #: pid -> card: leftovers of the sweep's trials, killed
        self._before: dict[str, int] = {}  #: by trial id: MB of its card no listed process held at its start
        self.tearing: dict[str, Teardown] = {}  #: by trial id: ended, its card's memory not verified back yet
        self.sampler: MemorySampler | None = None  #: GPU memory, where NVML sees cards
        self.host = HostSampler()  #: host memory, on every machine
        self.next_sample = 0.0

    def open(self, occupancy: Callable[[], Occupancy]) -> None:
        """Before the first trial: how to read what the backend's trials hold; NVML's sampler."""
        self.occupancy = occupancy
        if any(s.gpu is not None for s in self.slots):
            sampler = MemorySampler()
            self.sampler = sampler if sampler.start() else None

    def close(self) -> None:
        if self.sampler:
            self.sampler.stop()

    # -- what the engine asks -------------------------------------------------------------

    def admits(self, spec: TrialSpec) -> bool:
        """Whether the trial may start now: always, unless trials are packed by memory;
        then while it fits on a card (:mod:`sweeper.run.packing`), where it is to go is kept;
        never while every free slot is on a card the breaker closed."""
        if self.breaker is not None and not self.free():
            return False
        held = self.occupancy()
        host = None
        if self.host_room is not None:
            ours = [(mb, self.host.now.get(held.pids[tid], 0) if tid in held.pids else 0)
                    for tid, mb in self.host_reserved.items()]
            host = self.host_room.fits(spec.params, headroom.available_mb(), ours)
            if host is None:
                return False
        if self.packer is not None:
            free = {s.gpu for s in self.free()}
            spot = self.packer.place(spec.params, [c for c in self.cards() if c.gpu in free],
                                     busy=bool(held.taken))
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

    # -- what the backend asks ------------------------------------------------------------

    def free(self) -> list[Slot]:
        """The slots no trial holds, on cards that take trials (not closed by the breaker)."""
        taken = self.occupancy().taken
        closed = self.closed()
        return [s for s in self.slots if s.index not in taken and s.gpu not in closed]

    def closed(self) -> dict[str, str]:
        """The cards the breaker closed to new trials (card -> why)."""
        return self.breaker.closed if self.breaker is not None else {}

    def claim(self, spec: TrialSpec) -> tuple[TrialSpec, list[Slot]]:
        """An admitted trial starts: its terms become its reservations; the spec it runs
        (packed: with its own cap) and the free slots it may take."""
        free = self.free()
        if spec.trial_id in self._host_terms:
            self.host_reserved[spec.trial_id] = self._host_terms.pop(spec.trial_id)
        spot = self._spots.pop(spec.trial_id, None)
        if spot is not None:  # packed: its card, and its own cap in its environment
            free = [s for s in free if s.gpu == spot.gpu]
            total = self._totals.get(spot.gpu, spot.reserved_mb)
            spec = replace(spec, env={**spec.env, **capping.trial_env(spot.cap_mb, total)})
            self.reserved[spec.trial_id] = (spot.gpu, spot.reserved_mb)
            if spot.need.source == "unmeasured":
                self.unmeasured[spec.trial_id] = spot
            unlisted = self._unlisted().get(spot.gpu)
            if unlisted is not None:
                self._before[spec.trial_id] = unlisted
        return spec, free

    def terms(self, spec: TrialSpec) -> Terms | None:
        """A packed trial's cap and reservation (its ``Began``), None for one that is not."""
        packed = self.reserved.get(spec.trial_id)
        if packed is None:
            return None
        alone = self.packer is not None and self.packer.last_resort(spec.params)
        return Terms(int(spec.env[contract.MEMORY_LIMIT_MB]), packed[1],
                     self._totals.get(packed[0]) if alone else None)

    def release(self, trial_id: str) -> None:
        """A trial's terms forgotten: it never got a process, or it is gone."""
        self.reserved.pop(trial_id, None)
        self._before.pop(trial_id, None)
        self.unmeasured.pop(trial_id, None)
        self.host_reserved.pop(trial_id, None)

    def ended(self, trial_id: str, name: str, pid: int) -> tuple[int | None, int | None]:
        """A trial's process is gone: its peaks (GPU MB, host MB); a packed trial's
        reservation stands until its card's memory is back."""
        gpu_peak = self.sampler.peaks.pop(pid, None) if self.sampler else None
        host_peak = self.host.peaks.pop(pid, None)
        packed, before = self.reserved.get(trial_id), self._before.get(trial_id)
        self.release(trial_id)
        if packed is not None and before is not None:  # freed once its card's memory is back
            self.tearing[trial_id] = Teardown(name, packed[0], packed[1], before, time.monotonic() + TEARDOWN_S)
            self._read = None  # the next placement reads the card after this exit
        return gpu_peak, host_peak

    def forget_pid(self, pid: int) -> None:
        """A process's samples dropped (a later process may get its pid)."""
        self.host.peaks.pop(pid, None)
        if self.sampler:
            self.sampler.peaks.pop(pid, None)

    def first_epoch(self, trial_id: str, params: dict, pid: int) -> None:
        """A trial placed unmeasured reported an epoch: what its tree holds now measures its
        shape (:meth:`sweeper.run.packing.Packer.first_epoch`), and its reservation shrinks."""
        assert self.packer is not None
        if self.sampler is not None:
            self.sampler.sample(set(self.occupancy().pids.values()))
        held = self.sampler.peaks.get(pid) if self.sampler is not None else None
        if not held:  # NVML has not shown it yet: the next report
            return
        spot = self.unmeasured.pop(trial_id)
        new = self.packer.first_epoch(params, spot, held)
        if new is not None and trial_id in self.reserved:
            self.reserved[trial_id] = (spot.gpu, new)
            self._read = None  # the next placement sees its card's room anew

    def stale(self) -> None:
        """What NVML said holds until trials may have come and gone (the backend's next wait)."""
        self._read = None

    def sample(self, now: float) -> None:
        """Every SAMPLE_EVERY while trials run or reservations tear down: host and GPU
        memory of the running trials; the cards looked at again for teardowns."""
        if not ((self.occupancy().pids or self.tearing) and now >= self.next_sample):
            return
        pids = set(self.occupancy().pids.values())
        self.host.sample(pids)
        if self.sampler:
            self.sampler.sample(pids)
        if self.tearing:  # looked at again now, not at the next placement only
            self._read = None
            self.cards()
            self._read = None
        self.next_sample = now + SAMPLE_EVERY

    def cards(self) -> list[Card]:
        """The sweep's cards now: NVML's free memory, and what our trials there reserved and
        hold (read once between waits; the reservations as they are)."""
        if self.sampler is None or self.packer is None:
            return []
        pids = self.occupancy().pids
        if self._read is None:
            self.sampler.sample(set(pids.values()))
            self._others()
            read = self.sampler.cards()
            self._totals.update({g: total for g, (total, _) in read.items()})
            self._read = [Card(g, total, free) for g, (total, free) in read.items() if g in self.packer.gpus]
            self._teardowns()
        ours: dict[str, list[tuple[float, float]]] = {}
        for tid, (gpu, mb) in self.reserved.items():
            held = self.sampler.now.get(pids[tid], 0) if tid in pids else 0
            ours.setdefault(gpu, []).append((mb, held))
        for t in self.tearing.values():  # its reservation stands, less what is still used of it
            ours.setdefault(t.gpu, []).append((t.reserved_mb, t.residue_mb))
        return [replace(c, ours=tuple(ours.get(c.gpu, ()))) for c in self._read]

    # -- the cards, read ------------------------------------------------------------------

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
                self._not_back(t)

    def _not_back(self, t: Teardown) -> None:
        """Said once, for this trial: the others on the card measure from it, not blamed for it."""
        log.warning("sweeper: gpu:%s: %d MB did not come back %.0f s after trial %s ended (used by no "
                    "process NVML lists, or by a process it left); counted as used", t.gpu,
                    t.residue_mb, TEARDOWN_S, t.name)
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

        held = self.occupancy()
        ours = set(held.spares)
        for pid in held.pids.values():
            ours |= held.family(pid)
        busy = {str(index) for index in held.taken}
        for pid, (card, mb) in self.sampler.listed.items():
            if pid in ours or pid in self._told or not os.path.exists(f"/proc/{pid}"):
                continue  # (not in /proc: gone, or NVML reports the host's pids to this container)
            tag = procs.tags(pid)
            if tag.get(contract.SWEEP) == held.tag and tag.get(contract.SLOT) == procs.SLOT_PLACEHOLDER:
                continue  # the fork server or its probe: the server's own check (ForkServer._held) judges it
            self._told.add(pid)
            if tag.get(contract.SWEEP) == held.tag:
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


def _amount(mb: int | None) -> str:
    return "an amount NVML cannot tell" if mb is None else f"{mb} MB"
