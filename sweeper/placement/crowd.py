"""A sweep's trials beside the machine's other sweeps and processes, on its cards: what the
local backend's placement (:class:`sweeper.placement.policy.SlotPlacement`) asks of them.

* **Room**: a trial starts on a card only where its reservation (a fixed ``per_gpu``: its cap
  plus its CUDA context, which TensorFlow maps beside its cap; ``auto``: its predicted need
  plus headroom) fits in what NVML says is free, less what this sweep's and the other sweeps'
  trials there reserved and do not hold yet, and within this sweep's fair share
  (:mod:`sweeper.placement.share`); else it waits, or takes another card. The context is what
  this sweep's trials were seen holding beyond their cap, and until one was, the trial's part
  of the card's margin (:func:`default_context`). A card where nothing is (no process NVML
  lists, no sweep's reservation) takes a trial whose cap fits: waiting would give it no more.
* **Crowded**: a trial that ends ``oom`` while processes that are not this sweep's hold more
  of its card than this sweep's reservations leave (:func:`sweeper.placement.holders.crowded`,
  counted at what they hold, at the last sample: the one taken as its process ended) was
  not short of memory itself, unless it was seen holding all of its cap (its allocator had
  everything it may have, and ran out within it): its row names them, and it runs again once
  there is room, as an attempt that spends none of ``--retries`` and teaches the packer
  nothing; :data:`CROWDED_RERUNS` times at most, then it is judged as any ``oom``.
* **Waiting**: a trial that could start but waits for memory others hold, or a share they are
  owed, is what the sweep wants (published), said once per cause; with nothing of the sweep
  running, memory that no sweep's process holds bounds the wait
  (:class:`~sweeper.placement.neighbours.Neighbours`).

The machine-wide record it reads and writes is :mod:`sweeper.placement`'s.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Mapping, Sequence

from sweeper.model.trial import Status, TrialResult
from sweeper.placement.holders import Holder, crowded, holders, said
from sweeper.placement.neighbours import Neighbours
from sweeper.placement.record import Holding
from sweeper.placement.packing import CONTEXT_MB, HEADROOM, MARGIN_MB, Card, Packer, alone_min
from sweeper.placement.slots import Slot
from sweeper.model.devices import MARGIN

if TYPE_CHECKING:
    from sweeper.system.gpus import Gpu

#: Re-runs of one trial after OOMs others caused, at most; then its next OOM is its own.
CROWDED_RERUNS = 3

#: Share of its fair share of a card a trial not measured yet waits for, beside other sweeps
#: (its cap is what it gets: too little, and it runs out; the driver's own use leaves less than all).
ALONE_SHARE = 0.8

#: (card index, MB or None) per pid NVML lists, as the sampler read it.
Listed = Mapping[int, tuple[str, "int | None"]]


def default_context(cap_mb: int, total_mb: int, per_card: int = 1) -> int:
    """MB a trial capped at ``cap_mb`` is taken to hold beyond its cap before any was measured:
    its part of what ``per_card`` such caps leave of the card (the margin a fixed ``per_gpu``
    keeps), at most :data:`~sweeper.placement.packing.CONTEXT_MB`; so ``per_card`` of them fit on a
    card together, as asked."""
    return max(0, min(CONTEXT_MB, (total_mb - per_card * cap_mb) // max(1, per_card)))


class Crowd:
    """This sweep's trials and the others on its cards (see the module docstring)."""

    def __init__(self, slots: Sequence[Slot], neighbours: Neighbours | None = None) -> None:
        self.neighbours = neighbours
        self.uuid = {s.gpu: s.uuid or s.gpu for s in slots if s.gpu is not None}
        self.per_gpu = Counter(s.gpu or "" for s in slots if s.gpu is not None)
        self.where: dict[str, tuple[str, int]] = {}  #: by trial id: (card, MB reserved), admitted or running
        self.caps: dict[str, int] = {}  #: by trial id: its framework's cap, where it has one
        #: MB this sweep's trials were seen holding beyond their cap (a fixed per_gpu), the most
        self.context_mb: int | None = None
        self.evidence: dict[str, str] = {}  #: by trial id: who crowds its card, at the last sample
        self.crowded: dict[str, str] = {}  #: by trial id: its last attempt's OOM was others' (the words)
        self.reruns: Counter[str] = Counter()  #: by trial id: runs again after crowded OOMs
        self.excused: set[tuple[str, int]] = set()  #: (trial id, attempt): OOMs that were not the trial's
        self._others: dict[str, tuple[int, list[Holder]]] = {}  #: by card, since the cards were last read
        self._unclaimed: dict[str, dict[str, int]] = {}  #: by card, since the cards were last read
        self._generation = -1  #: the reading of the others' records the above were worked out from

    # -- what others hold and reserve ------------------------------------------------------

    def fresh(self) -> None:
        """The cards were read again: what others hold and reserve is worked out anew (once
        per reading, however many queued trials ask)."""
        self._others.clear()
        self._unclaimed.clear()

    def _current(self) -> None:
        """What was worked out from the others' records, forgotten where they were read again."""
        if self.neighbours is not None and self.neighbours.generation != self._generation:
            self._generation = self.neighbours.generation
            self.fresh()

    def others(self, gpu: str, listed: Listed, ours: set[int]) -> tuple[int, list[Holder]]:
        """MB that processes not this sweep's hold on card ``gpu`` (at what each holds), and who they are."""
        self._current()
        if gpu not in self._others:
            found = holders(listed, gpu, ours, self.neighbours.read() if self.neighbours else [],
                            self.uuid.get(gpu, ""))
            self._others[gpu] = (sum(h.mb or 0 for h in found), found)
        return self._others[gpu]

    def drainable(self, gpu: str, free_mb: int, listed: Listed, ours: set[int]) -> int:
        """What would be free on ``gpu`` with no sweep's trial on it: NVML's free memory, and
        what this sweep's and the other sweeps' trials hold there."""
        _, found = self.others(gpu, listed, ours)
        mine = sum(mb or 0 for pid, (card, mb) in listed.items() if card == gpu and pid in ours)
        return free_mb + mine + sum(h.mb or 0 for h in found if h.sweep)

    def unclaimed(self, gpu: str, listed: Listed) -> int:
        """MB other sweeps reserved on ``gpu`` and do not hold yet."""
        if self.neighbours is None:
            return 0
        return sum(self.reserving(gpu, listed).values())

    def reserving(self, gpu: str, listed: Listed) -> dict[str, int]:
        """MB other sweeps (and jobs) reserved on ``gpu`` and do not hold yet, by who they are."""
        if self.neighbours is None:
            return {}
        self._current()
        if gpu not in self._unclaimed:
            self._unclaimed[gpu] = self._reserved_by_others(gpu, listed)
        return self._unclaimed[gpu]

    def _reserved_by_others(self, gpu: str, listed: Listed) -> dict[str, int]:
        assert self.neighbours is not None

        def held(pid: int) -> int:
            from sweeper.system.procs import descendants

            tree = {pid, *descendants(pid)}
            return sum(mb or 0 for p, (_, mb) in listed.items() if p in tree)

        return self.neighbours.unclaimed_by(self.uuid.get(gpu, gpu), held)

    def share(self, gpu: str, total_mb: int, want_mb: int = 1, free_mb: float = math.inf,
              drainable_mb: float = math.inf) -> float:
        """The most this sweep may reserve more on ``gpu`` by the fair share (``free_mb``: the
        card's room now; ``drainable_mb``: with no sweep's trial on it)."""
        if self.neighbours is None:
            return math.inf
        return self.neighbours.share_room(self.uuid.get(gpu, gpu), total_mb, want_mb, free_mb, drainable_mb)

    def alone(self, gpu: str, total_mb: int, listed: Listed, ours: set[int]) -> float:
        """The least room a trial not measured yet starts with on ``gpu`` beside other sweeps:
        most (:data:`ALONE_SHARE`) of its fair share, less what processes that are no sweep's
        hold there; 0 where no other sweep holds or wants the card (any room, as alone)."""
        fair = self.neighbours.fair(self.uuid.get(gpu, gpu), total_mb) if self.neighbours is not None else None
        if fair is None:
            return 0.0
        _, found = self.others(gpu, listed, ours)
        return ALONE_SHARE * (fair - sum(h.mb or 0 for h in found if not h.sweep))

    def nominal(self, slot: Slot, total_mb: int | None) -> int:
        """What a trial of a fixed ``per_gpu`` reserves: its cap plus its context (measured,
        else :func:`default_context`); with memory growth, its share of the card."""
        per_card = max(1, self.per_gpu[slot.gpu or ""])
        if slot.cap_mb is None:
            return int(MARGIN * (total_mb or 0) / per_card)
        context = self.context_mb if self.context_mb is not None else default_context(slot.cap_mb, total_mb or 0,
                                                                                      per_card)
        return slot.cap_mb + context

    def measure(self, held: Mapping[str, int]) -> None:
        """What this sweep's running trials hold now (by trial id): one seen holding all its
        cap tells what a trial holds beyond it (its CUDA context), the most so far."""
        for tid, mb in held.items():
            cap = self.caps.get(tid)
            if cap and mb >= cap:
                self.context_mb = max(self.context_mb or 0, mb - cap)

    # -- a fixed per_gpu's placement -------------------------------------------------------

    def fixed(self, free: Sequence[Slot], load: Mapping[str, int], cards: Mapping[str, tuple[int, int]],
              ours_unclaimed: Mapping[str, float], listed: Listed,
              ours: set[int]) -> tuple[Slot | None, list[tuple[Slot, int]]]:
        """A free slot on the least-loaded card where its trial's reservation fits beside what
        all sweeps reserved (a card where nothing is: its cap) and within this sweep's share;
        else None, and the (slot, MB) that did not fit (a card NVML cannot read takes trials
        as before: nothing to check)."""
        missed: list[tuple[Slot, int]] = []
        seen: set[str | None] = set()
        for slot in sorted(free, key=lambda s: (load.get(s.gpu or "", 0), s.index)):
            if slot.gpu in seen:
                continue
            seen.add(slot.gpu)
            if slot.gpu is None or slot.gpu not in cards:
                return slot, []
            gpu = slot.gpu
            total, nvml_free = cards[gpu]
            want = self.nominal(slot, total)
            unclaimed = ours_unclaimed.get(gpu, 0.0) + self.unclaimed(gpu, listed)
            room = nvml_free - unclaimed
            bare = not unclaimed and not any(card == gpu for card, _ in listed.values())
            need = slot.cap_mb if want > room and bare and slot.cap_mb is not None else want
            share = self.share(gpu, total, need, room, self.drainable(gpu, nvml_free, listed, ours))
            if need <= min(room, share):
                return slot, []
            missed.append((slot, want))
        return None, missed

    def missed_packed(self, packer: Packer, params: dict, cards: Sequence[Card]) -> list[tuple[str, int]]:
        """(card, MB it would reserve) for a packed trial that fits nowhere, on each card with a
        free slot; [] where it waits for this sweep's own (its shape's first trial measuring)."""
        need = packer.needs.predict(params)
        if need.source == "unmeasured" and need.shape in packer.measuring and not packer.blind:
            return []
        out = []
        for card in cards:
            if card.gpu in packer.breaker.closed or (need.alone and card.ours):
                continue
            if need.bare:  # the card to itself: all a card where nothing is leaves
                out.append((card.gpu, card.total_mb - 2 * MARGIN_MB))
            else:
                out.append((card.gpu, int(alone_min(card) if need.alone else math.ceil(need.mb * (1 + HEADROOM)))))
        return out

    def blocked(self, missed: Sequence[tuple[str, int]], cards: Mapping[str, tuple[int, int]], listed: Listed,
                ours: set[int], running: bool, margin: int = MARGIN_MB) -> bool:
        """A trial that could start waits, on the cards ``missed`` (card, MB it would reserve).
        Where this sweep's own reservations are not what keeps it out, others are: said once per
        cause, published as what the sweep wants, and, with nothing of the sweep running and
        memory of processes that are no sweep's among the cause, bounded. Whether it waits on others."""
        words, keys, uuids, strangers = [], [], [], []
        everywhere = True
        for gpu, want in missed:
            if gpu not in cards:
                continue
            total, free = cards[gpu]
            mine = sum(r for g, r in self.where.values() if g == gpu)
            if want > total - mine - margin:  # this sweep's own trials fill it: they will end
                continue
            _, found = self.others(gpu, listed, ours)
            reserving = self.reserving(gpu, listed)
            share = self.share(gpu, total, want, free - sum(reserving.values()),
                               self.drainable(gpu, free, listed, ours))
            why = [said(found)] if found else []
            why += [f"{who} reserved {mb} MB there, not held yet" for who, mb in reserving.items()]
            owed = ["the fair share lets a sweep that waited longer go first"] if share < want else []
            why = why + owed or ["memory no process NVML lists holds"]
            words.append(f"gpu:{gpu} has {free} MB free, a trial here reserves {want} MB: {'; '.join(why)}")
            keys.append(f"{gpu}:{sorted(str(h.sweep or h.pid) for h in found)}:{sorted(reserving)}:{bool(owed)}")
            uuids.append(self.uuid.get(gpu, gpu))
            alien = [h for h in found if not h.sweep]
            strangers += alien
            everywhere = everywhere and (bool(alien) or not (found or reserving or owed))  # strangers' doing
        if not uuids:
            return False
        if self.neighbours is not None:
            self.neighbours.blocked(tuple(uuids), max(w for _, w in missed), "; ".join(words), "|".join(keys))
            if running or not everywhere:
                self.neighbours.starving_since = None
            else:
                self.neighbours.starving(said(strangers) if strangers else "memory no process NVML lists holds")
        return True

    # -- this sweep's trials ---------------------------------------------------------------

    def placed(self, trial_id: str, name: str, gpu: str, reserved_mb: int, cap_mb: int | None) -> None:
        """A trial is admitted to ``gpu``: its reservation is this sweep's (and published)."""
        self.where[trial_id] = (gpu, reserved_mb)
        if cap_mb:
            self.caps[trial_id] = cap_mb
        if self.neighbours is not None:
            self.neighbours.hold(trial_id, Holding(self.uuid.get(gpu, gpu), name, 0, reserved_mb, cap_mb))
            self.neighbours.admitted()

    def resize(self, trial_id: str, reserved_mb: int) -> None:
        """A running trial's reservation changed (measured at its first epoch): published so."""
        if trial_id in self.where:
            self.where[trial_id] = (self.where[trial_id][0], reserved_mb)
        if self.neighbours is not None:
            self.neighbours.resize(trial_id, reserved_mb)

    def began(self, trial_id: str, pid: int) -> None:
        if self.neighbours is not None:
            self.neighbours.started(trial_id, pid)

    def gone(self, trial_id: str) -> None:
        self.where.pop(trial_id, None)
        self.caps.pop(trial_id, None)
        self.evidence.pop(trial_id, None)
        if self.neighbours is not None:
            self.neighbours.drop(trial_id)

    def watch(self, listed: Listed, ours: set[int], cards: Mapping[str, tuple[int, int]],
              running: Mapping[str, int]) -> None:
        """One sample: for each running trial, whether others crowd its card now, and who (the
        last sample's word stands: a process that crowded it and left is not blamed later)."""
        self.fresh()
        for gpu in {g for tid, (g, _) in self.where.items() if tid in running}:
            if gpu not in cards:
                continue
            mb, found = self.others(gpu, listed, ours)
            ours_mb = sum(r for tid, (g, r) in self.where.items() if g == gpu and tid in running)
            now = f"gpu:{gpu}: {said(found)}" if found and crowded(cards[gpu][0], ours_mb, mb) else ""
            for tid, (g, _) in self.where.items():
                if g == gpu and tid in running:
                    self.evidence[tid] = now

    def ended(self, trial_id: str, peak_mb: int | None = None) -> str:
        """A trial's process is gone: the words for its row, where others crowded its card at
        the last sample ("" where not, or where it was seen holding all its cap, ``peak_mb``:
        an OOM then is its own)."""
        self.crowded.pop(trial_id, None)
        why = self.evidence.pop(trial_id, "")
        cap = self.caps.get(trial_id)
        if not why or (cap and peak_mb and peak_mb >= cap):
            return ""
        if self.reruns[trial_id] + 1 > CROWDED_RERUNS:
            words = (f"{why}, more than this sweep's reservations there leave; the {CROWDED_RERUNS + 1}th time, "
                     "so it counts as its own")
        else:
            words = f"{why}, more than this sweep's reservations there leave; it runs again once there is room"
        self.crowded[trial_id] = words
        return words

    def excuse(self, result: TrialResult) -> bool:
        """Whether this attempt ran out of memory for others' sake, within the bound: it runs
        again, retries or not, and teaches the packer nothing."""
        if result.status is not Status.OOM or result.trial_id not in self.crowded:
            return False
        if self.reruns[result.trial_id] >= CROWDED_RERUNS:
            return False
        self.reruns[result.trial_id] += 1
        self.excused.add((result.trial_id, result.attempts))
        return True

    def excused_row(self, result: TrialResult) -> bool:
        """Whether a recorded row is such an excused attempt (the packer learns nothing of it)."""
        return (result.trial_id, result.attempts) in self.excused


def beside(gpus: Sequence["Gpu"]) -> list[str]:
    """``--dry-run``'s lines on the machine's other sweeps and processes on these cards (as
    NVML and their records tell it now): who holds what, who waits; [] where nobody does."""
    import time

    from sweeper.placement.machine import Machine

    entries = Machine().read()
    lines = []
    for g in gpus:
        listed: dict[int, tuple[str, int | None]] = {pid: (str(g.index), mb) for pid, mb in g.processes}
        found = holders(listed, str(g.index), set(), entries, g.uuid)
        waiting = [e for e in entries if e.wants(g.uuid, time.time())]
        if not found and not waiting and not any(e.on(g.uuid) for e in entries):
            continue
        words = [said(found, most=5)] if found else []
        words += [f"{e.folder} ({e.user}) waits for {e.want.mb} MB" for e in waiting if e.want is not None]
        reserved = sum(e.reserved(g.uuid) for e in entries)
        words += [f"other sweeps reserve {reserved} MB"] if reserved else []
        lines.append(f"gpu:{g.index} is shared: {'; '.join(words)}")
    if lines:
        lines.append("this sweep's trials start there as room beside them and its fair share allow, and wait "
                     "otherwise (python -m sweeper gpus shows the machine)")
    return lines
