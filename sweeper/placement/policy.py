"""Placement: which queued trial may start now, and where, on this machine's slots.

The engine asks a placement policy (:class:`~sweeper.run.engine.Admission`) before it starts
a trial; the backend that runs it asks the same object which slots the trial may take and
on what terms. Two policies:

* :class:`Anywhere`: every trial may start, in the queue's order (a cluster's scheduler
  places them: Ray, a batch queue; also a local sweep that packs nothing);
* :class:`SlotPlacement`: this machine's slots, under per_gpu="auto" (memory packing,
  :mod:`sweeper.placement.packing`), workers="auto" or host_memory (host memory), and the
  breaker that closes a card where trials crash.

What :class:`SlotPlacement` keeps, by trial id: where an admitted trial is to go (``Spot``),
what a running one reserved (card and MB, host MB), and, after it ended, its reservation
until its card's memory is back (:mod:`sweeper.placement.leftovers`)::

    engine: admits(spec) ─▶ fits? (host room, free slots, a card with room) ─▶ kept: its spot
    backend: claim(spec)  ─▶ the spec with its own cap; the slots it may take
             first_epoch  ─▶ an unmeasured trial's shape measured; its reservation shrinks
             ended(tid)   ─▶ its reservation stands (tearing) until its card's memory is back,
                             or a while passed (said once, counted as used)
             release(tid) ─▶ its terms forgotten (it never ran, or it is gone)

What it needs to know of the backend's trials it reads through :class:`Occupancy`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from sweeper.model import contract
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.placement.neighbours import LOOK_EVERY, Neighbours
from sweeper.placement.crowd import Crowd
from sweeper.placement.hostroom import HostRoom
from sweeper.placement.leftovers import Leftovers, unlisted
from sweeper.placement.breaker import Breaker
from sweeper.placement.packing import MARGIN_MB, Card, Packer, Spot
from sweeper.placement.slots import Slot
from sweeper.system import capping, headroom
from sweeper.system.gpus import MemorySampler
from sweeper.system.hostmem import HostSampler

log = logging.getLogger("sweeper")

#: Seconds between NVML reads of the trials' GPU memory, while trials run on GPUs.
SAMPLE_EVERY = 0.5


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
                 breaker: Breaker | None = None, neighbours: Neighbours | None = None) -> None:
        self.slots = list(slots)
        #: this sweep's trials beside the machine's other sweeps and processes (room, share, crowded OOMs)
        self.crowd = Crowd(self.slots, neighbours)
        self._fixed: dict[str, str] = {}  #: by trial id: the card an admitted trial of a fixed per_gpu goes to
        self.next_look: float | None = None  #: when to look at the cards again, for a trial waiting on others
        self._blocked = False  #: this round, a trial waited on others
        #: on GPUs: the cards closed to new trials (where trials crash), under any per_gpu
        self.breaker = breaker if breaker is not None or packer is None else packer.breaker
        #: per_gpu="auto": where each trial goes, by the GPU memory it is predicted to need
        self.packer = packer
        if packer is not None:  # an OOM others caused teaches it nothing
            packer.excused = self.crowd.excused_row
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
        self._ours: set[int] = set()  #: the pids of this sweep's trials and standbys, at that look
        #: ended packed trials' reservations until their card's memory is back; leftovers, strangers
        self.leftovers = Leftovers()
        self.tearing = self.leftovers.tearing  #: by trial id: ended, its card's memory not verified back yet
        self.sampler: MemorySampler | None = None  #: GPU memory, where NVML sees cards
        self.host = HostSampler()  #: host memory, on every machine
        self.next_sample = 0.0

    def open(self, occupancy: Callable[[], Occupancy]) -> None:
        """Before the first trial: how to read what the backend's trials hold; NVML's sampler."""
        self.occupancy = occupancy
        if any(s.gpu is not None for s in self.slots):
            sampler = MemorySampler()
            self.sampler = sampler if sampler.start() else None
            if self.crowd.neighbours is not None:
                self.crowd.neighbours.open()

    def close(self) -> None:
        if self.sampler:
            self.sampler.stop()
        if self.crowd.neighbours is not None:
            self.crowd.neighbours.close()

    # -- what the engine asks -------------------------------------------------------------

    def admits(self, spec: TrialSpec) -> bool:
        """Whether the trial may start now: always, unless trials are packed by memory;
        then while it fits on a card (:mod:`sweeper.placement.packing`), where it is to go is kept;
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
        with self._deciding():
            if self.packer is not None:
                free = {s.gpu for s in self.free()}
                cards = [c for c in self.cards() if c.gpu in free]
                spot = self.packer.place(spec.params, cards)
                if spot is None:
                    self._waits(self.crowd.missed_packed(self.packer, spec.params, cards), held)
                    return False
                self._spots[spec.trial_id] = spot
                self.crowd.placed(spec.trial_id, spec.name, spot.gpu, spot.reserved_mb, spot.cap_mb)
            elif self.sampler is not None and not self._fit_fixed(spec, held):
                return False
        if host is not None and self.host_room is not None:
            self.host_room.commit(host[1])
            self._host_terms[spec.trial_id] = host[0]
        return True

    @contextlib.contextmanager
    def _deciding(self) -> Iterator[None]:
        """One decision on the cards, under the machine's lock where other sweeps may share them
        (:meth:`sweeper.placement.neighbours.Neighbours.deciding`): what it reserves is published
        before the lock is let go, and nothing else happens under it."""
        if self.crowd.neighbours is None or self.sampler is None:
            yield
            return
        with self.crowd.neighbours.deciding():
            yield

    def ranked(self, queued: Sequence[TrialSpec]) -> list[int] | None:
        """Packed: the trials whose shape is not measured yet first (see :mod:`sweeper.placement.packing`)."""
        if self.packer is None:
            return None
        return self.packer.ranked([spec.params for spec in queued])

    def _fit_fixed(self, spec: TrialSpec, held: Occupancy) -> bool:
        """A fixed per_gpu on GPUs: whether a free slot's card has room for the trial's cap
        beside what all sweeps reserved, within this sweep's share (:meth:`Crowd.fixed`); its card kept."""
        read = {c.gpu: (c.total_mb, c.free_mb) for c in self.cards()}
        assert self.sampler is not None
        pids = held.pids
        now = {tid: self.sampler.now.get(pids[tid], 0) for tid in self.crowd.where if tid in pids}
        self.crowd.measure(now)
        ours = {g: 0.0 for g in read}
        for tid, (g, mb) in self.crowd.where.items():
            ours[g] = ours.get(g, 0.0) + max(0.0, mb - now.get(tid, 0))
        load = {g: sum(1 for s in self.slots if s.index in held.taken and s.gpu == g) for g in read}
        mine = set(held.spares) | {q for pid in pids.values() for q in held.family(pid)}
        slot, missed = self.crowd.fixed(self.free(), load, read, ours, self.sampler.listed, mine)
        if slot is None:  # (a reservation here has its margin in it: the card's whole is its limit)
            self._waits([(s.gpu or "", mb) for s, mb in missed], held, margin=0)
            return False
        if slot.gpu is not None:
            self._fixed[spec.trial_id] = slot.gpu
            self.crowd.placed(spec.trial_id, spec.name, slot.gpu, self.crowd.nominal(slot, read.get(slot.gpu, (0,))[0]),
                              slot.cap_mb)
        return True

    def _waits(self, missed: list[tuple[str, int]], held: Occupancy, margin: int = MARGIN_MB) -> None:
        """A trial that could start waits: said, published and bounded where others hold or are owed the room."""
        if self.sampler is None or not missed:
            return
        read = {c.gpu: (c.total_mb, c.free_mb) for c in self.cards()}
        if self.crowd.blocked(missed, read, self.sampler.listed, self._ours, running=bool(held.taken), margin=margin):
            self._blocked = True

    @property
    def exhausted(self) -> str | None:
        """Why no trial can start any more (every card stopped taking them, or memory other
        processes hold kept every trial from starting for the longest wait), else None."""
        if self.crowd.neighbours is not None and self.crowd.neighbours.starved:
            return self.crowd.neighbours.starved
        return self.breaker.exhausted if self.breaker is not None else None

    def again(self, result: TrialResult) -> bool | None:
        """Whether this attempt runs again on other terms (an OOM others caused; an OOM of a
        packed trial), or never (one with the largest card to itself):
        :meth:`sweeper.placement.crowd.Crowd.excuse`, :meth:`sweeper.placement.packing.Packer.again`."""
        if self.crowd.excuse(result):
            return True
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
        card = self._fixed.pop(spec.trial_id, None)
        if card is not None:  # a fixed per_gpu: the card it was admitted to
            free = [s for s in free if s.gpu == card]
        spot = self._spots.pop(spec.trial_id, None)
        if spot is not None:  # packed: its card, and its own cap in its environment
            free = [s for s in free if s.gpu == spot.gpu]
            total = self._totals.get(spot.gpu, spot.reserved_mb)
            spec = replace(spec, env={**spec.env, **capping.trial_env(spot.cap_mb, total)})
            self.reserved[spec.trial_id] = (spot.gpu, spot.reserved_mb)
            if spot.need.source == "unmeasured":
                self.unmeasured[spec.trial_id] = spot
            before = unlisted(self._read, self.sampler.listed).get(spot.gpu) if self._read and self.sampler else None
            if before is not None:
                self.leftovers.before[spec.trial_id] = before
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
        self.leftovers.before.pop(trial_id, None)
        self.unmeasured.pop(trial_id, None)
        self.host_reserved.pop(trial_id, None)
        self._fixed.pop(trial_id, None)
        self.crowd.gone(trial_id)

    def ended(self, trial_id: str, name: str, pid: int) -> tuple[int | None, int | None]:
        """A trial's process is gone: its peaks (GPU MB, host MB); a packed trial's
        reservation stands until its card's memory is back."""
        if self.sampler is not None and trial_id in self.crowd.where:  # was its card crowded, at the last?
            self.sampler.sample(set(self.occupancy().pids.values()))
            self._watch()
        gpu_peak = self.sampler.peaks.pop(pid, None) if self.sampler else None
        self.crowd.ended(trial_id, gpu_peak)
        host_peak = self.host.peaks.pop(pid, None)
        if self.leftovers.ended(trial_id, name, self.reserved.get(trial_id)):  # freed once its card's memory is back
            self._read = None  # the next placement reads the card after this exit
        self.release(trial_id)
        return gpu_peak, host_peak

    def forget_pid(self, pid: int) -> None:
        """A process's samples dropped (a later process may get its pid)."""
        self.host.peaks.pop(pid, None)
        if self.sampler:
            self.sampler.peaks.pop(pid, None)

    def first_epoch(self, trial_id: str, params: dict, pid: int) -> None:
        """A trial placed unmeasured reported an epoch: what its tree holds now measures its
        shape (:meth:`sweeper.placement.packing.Packer.first_epoch`), and its reservation shrinks."""
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
            self.crowd.resize(trial_id, new)
            self._read = None  # the next placement sees its card's room anew

    def stale(self) -> None:
        """What NVML said holds until trials may have come and gone (the backend's next wait);
        the round of placements is over: what the sweep waits for, published."""
        self._read = None
        if self.crowd.neighbours is not None:
            self.crowd.neighbours.end_round()
        self.next_look = time.monotonic() + LOOK_EVERY if self._blocked else None  # (NVML has no event for it)
        self._blocked = False

    def _watch(self) -> None:
        """The running trials' cards, looked at for memory others took (:meth:`Crowd.watch`)."""
        assert self.sampler is not None
        held = self.occupancy()
        ours = set(held.spares) | {q for pid in held.pids.values() for q in held.family(pid)}
        if self.packer is None:  # a fixed per_gpu: what its trials hold beyond their cap
            self.crowd.measure({tid: self.sampler.now.get(pid, 0) for tid, pid in held.pids.items()})
        self.crowd.watch(self.sampler.listed, ours, self.sampler.cards(), held.pids)

    def sample(self, now: float) -> None:
        """Every SAMPLE_EVERY while trials run or reservations tear down: host and GPU
        memory of the running trials; the cards looked at again for teardowns."""
        if not ((self.occupancy().pids or self.tearing) and now >= self.next_sample):
            return
        pids = set(self.occupancy().pids.values())
        self.host.sample(pids)
        if self.sampler:
            self.sampler.sample(pids)
            self._watch()
        if self.tearing:  # looked at again now, not at the next placement only
            self._read = None
            self.cards()
            self._read = None
        self.next_sample = now + SAMPLE_EVERY

    def cards(self) -> list[Card]:
        """The sweep's cards now: NVML's free memory, what the other sweeps reserved there and
        do not hold yet, this sweep's share, and what our trials there reserved and hold (read
        once between waits, in a round of placements; the reservations as they are)."""
        if self.sampler is None:
            return []
        pids = self.occupancy().pids
        if self._read is None:
            if self.crowd.neighbours is not None:
                self.crowd.neighbours.read_round()
            self.crowd.fresh()
            held = self.occupancy()
            self._ours = set(held.spares) | {q for pid in pids.values() for q in held.family(pid)}
            self._read = self._read_cards(held, self._ours)
        listed, ours = self.sampler.listed, self._ours
        mine: dict[str, list[tuple[float, float]]] = {}
        for tid, (gpu, mb) in self.reserved.items():
            now = self.sampler.now.get(pids[tid], 0) if tid in pids else 0
            mine.setdefault(gpu, []).append((mb, now))
        for t in self.tearing.values():  # its reservation stands, less what is still used of it
            mine.setdefault(t.gpu, []).append((t.reserved_mb, t.residue_mb))
        out = []
        for c in self._read:  # others' reservations and the share as they are now (each placed trial counts at once)
            c = replace(c, ours=tuple(mine.get(c.gpu, ())), others_mb=self.crowd.unclaimed(c.gpu, listed),
                        alone_mb=self.crowd.alone(c.gpu, c.total_mb, listed, ours))
            out.append(replace(c, share_mb=self.crowd.share(c.gpu, c.total_mb, 1, c.physical,
                                                            self.crowd.drainable(c.gpu, c.free_mb, listed, ours))))
        return out

    def _read_cards(self, held: Occupancy, ours: set[int]) -> list[Card]:
        """NVML's cards now, between two samples of what each process holds: a process that
        maps memory between the sample and the card's free memory is counted as holding the
        least either sample saw, so its memory is counted once, as not held (its reservation's)."""
        assert self.sampler is not None
        pids = set(held.pids.values())
        self.sampler.sample(pids)
        theirs = self.crowd.neighbours.trial_pids() if self.crowd.neighbours is not None else set()
        self.leftovers.strangers(self.sampler.listed, ours, {str(i) for i in held.taken}, held.tag, theirs)
        before, before_now = self.sampler.listed, self.sampler.now
        read = self.sampler.cards()
        self.sampler.sample(pids)  # a process that came or went meanwhile: listed still
        after = self.sampler.listed
        self.sampler.listed = {pid: (card, _least(before.get(pid, (card, 0))[1], after.get(pid, (card, 0))[1]))
                               for pid, (card, _) in {**before, **after}.items()}
        self.sampler.now = {pid: min(mb, before_now.get(pid, 0)) for pid, mb in self.sampler.now.items()}
        self._totals.update({g: total for g, (total, _) in read.items()})
        cards = [Card(g, total, free) for g, (total, free) in read.items() if g in self.crowd.uuid]
        self.leftovers.check(cards, self.sampler.listed, self.reserved)
        return cards


def _least(a: int | None, b: int | None) -> int | None:
    """The lesser of two samples of what a process held (None where NVML could not tell either)."""
    return None if a is None or b is None else min(a, b)
