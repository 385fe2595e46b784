"""Trials packed on GPUs by the memory they measurably need (``per_gpu="auto"``).

What a trial needs is *predicted* (:class:`Needs`), in this order:

1. the same point's earlier attempts: the most its process tree held (``gpu_mem_peak_mb``,
   as NVML counts it: CUDA context and libraries included), or what points alike in
   ``memory_keys`` needed since, if more (an OOM of the shape); after an OOM, 1.5 times
   what it was given (its cap plus :data:`CONTEXT_MB`) or held, whichever is more, and
   after a second OOM the largest card to itself, once it is *bare* (nothing of anyone's on
   it; :meth:`Packer.again`: both run again, retries or not; an OOM there ends the trial, no
   card can hold it). A guess after an OOM is the point's (and its shape's), never "the
   largest so far" of every other point. A trial not measured yet that ran out beside other
   sweeps, with less than a bare card's room, is still not measured: it runs again once a
   card is bare;
2. the user's hint, ``gpu_memory="6GB"`` or a function of the point;
3. points that agree on the parameters named ``memory_keys``: the most any of them held;
4. without ``memory_keys``: the most any trial of the sweep held;
5. else (a shape not measured yet, or nothing measured): the trial gets a card to itself,
   and is measured there; the others of its shape (without ``memory_keys``: every other
   one) wait for that. Such trials are offered first (:meth:`Packer.ranked`), so what
   each shape needs is known early. It is known at the trial's *first epoch* where the
   trial reports epochs (Keras's fit does, through sweeper's callback): the most its tree
   held by then is its shape's need until its end says more (a training step, a
   validation pass and the framework's workspaces are all allocated by then); the others
   of its shape start, and its own reservation shrinks to that plus :data:`EARLY_HEADROOM`,
   so its card takes them too (:meth:`Packer.first_epoch`). A trial that reports nothing
   is measured at its end.

Placement scans the queue in order and lets a later trial pass one that does not fit
(backfilling), but not for ever: once :data:`PATIENCE` trials have started past the first
one that fitted on no card, the card closest to fitting it is *drained* for it (no other
trial starts there) until it starts.

A trial is *placed* (:meth:`Packer.place`) on the card where it fits best: its reservation
(the prediction plus :data:`HEADROOM`) must fit in ::

    room = free (NVML, now) - sum over our trials there of max(0, reserved - held now) - MARGIN_MB

that is, what NVML says is free, less what our running trials there reserved and have not
taken yet, less a margin for the driver and fragmentation. A stranger's process counts
through NVML's free memory, as does memory a trial left behind. A trial that needs a card
to itself goes only on a card where none of ours runs, and gets what is free there.

Its framework's *cap* is the reservation less :data:`CONTEXT_MB` (the CUDA context lives
outside TensorFlow's allocator and JAX's fraction), but never below the prediction; the
framework grows to it (:func:`sweeper.system.capping.trial_env`), so a peak is a need, not a cap.
A trial not measured yet reserves at most its fair share beside other sweeps, but is capped
by the card's room (it grows only as far as it needs): a share is no reason to fail. Its cap is
never below :data:`MIN_CAP_MB`, except on a card too small to give that, bare.

A card where trials crash is closed, under any ``per_gpu`` (:mod:`sweeper.placement.breaker`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from sweeper.model.trial import Status, TrialResult
from sweeper.placement.breaker import Breaker
from sweeper.model.lifecycle import Callback

log = logging.getLogger("sweeper")

#: Share added to a prediction for what a trial reserves: a later epoch, another batch's
#: shapes, the allocator's rounding.
HEADROOM = 0.05
#: MB a framework holds on the card outside its allocator's cap: the CUDA context (about
#: 300 MB since CUDA 11.7 loads kernels lazily, over 1 GB before: pytorch/pytorch#107667,
#: #20532) and cuBLAS/cuDNN handles and workspaces (a TensorFlow process capped at 512 MB
#: was seen holding 1.9 GB: tensorflow/tensorflow#53822). Subtracted from a reservation to
#: give the cap, so a trial that grows past what it was measured holding stays within its
#: reservation; measured peaks include it already.
CONTEXT_MB = 1024
#: MB of each card never reserved: the driver's own use and fragmentation (an idle card
#: shows a few hundred MB used), and a small trial's context beyond its reservation.
MARGIN_MB = 512
#: Share added, for the rest of its run, to what a shape's first trial held at its first
#: epoch: its cap (a card's, given while unmeasured) lets it grow, as a later evaluation or
#: prediction with other batch shapes may make it; the others of its shape get HEADROOM.
EARLY_HEADROOM = 0.25
#: A trial that ran out of memory is given this many times what it had, next time.
OOM_GROWTH = 1.5
#: Trials that may start past one that fits nowhere before a card is drained for it (draining
#: idles a card; most waits end sooner by themselves, as trials end).
PATIENCE = 8
#: A prediction with nothing measured: the whole card.
ALONE = math.inf
#: MB a trial not measured yet is capped at, at least: less trains nothing of note.
MIN_CAP_MB = 1024
#: MB of room at least that a trial not measured yet starts with on a card to itself (its
#: context and :data:`MIN_CAP_MB`): where others hold more, it waits (never a cap of nothing).
ALONE_MIN_MB = CONTEXT_MB + MIN_CAP_MB


def point_key(params: Mapping[str, Any]) -> str:
    """One text per point (the same for the same parameters in any order)."""
    return json.dumps(params, sort_keys=True, default=repr)


@dataclass(frozen=True)
class Need:
    """A trial's predicted peak GPU memory: MB (``ALONE``: a card to itself), and why."""

    mb: float
    source: str  #: "hint", "same point", "memory_keys", "largest so far", "unmeasured", "oom twice"
    shape: str = ""  #: unmeasured: the shape its measurement will tell (memory_keys' values)
    bare: bool = False  #: it waits for a card where nothing of anyone's is, and takes all its room

    @property
    def alone(self) -> bool:
        return self.mb == ALONE


class Needs:
    """Predictions from what trials held (see the module docstring); learns from each row."""

    def __init__(self, memory_keys: Sequence[str] | None = None,
                 hint: Callable[[dict[str, Any]], Any] | str | int | None = None, host: bool = False) -> None:
        self.keys = list(memory_keys) if memory_keys is not None else None
        self.hint = hint
        self.host = host  #: host memory (``mem_peak_mb``), else GPU memory (``gpu_mem_peak_mb``)
        #: a shape not measured yet is predicted as the largest so far, not given a place to itself
        self.guess_new_shapes = False
        self.by_point: dict[str, float] = {}
        self.by_shape: dict[str, float] = {}
        self.largest: float | None = None
        self.ooms: dict[str, int] = {}  #: point -> OOMs so far
        #: points not measured yet that ran out beside other sweeps: each waits for a bare card
        self.bare: set[str] = set()

    def _shape(self, params: Mapping[str, Any]) -> str:
        return point_key({k: params.get(k) for k in self.keys or ()})

    def shape_of(self, params: Mapping[str, Any]) -> str:
        """The shape a trial's measurement tells (every point's, without ``memory_keys``)."""
        return self._shape(params) if self.keys is not None else ""

    def predict(self, params: dict[str, Any]) -> Need:
        key = point_key(params)
        if self.ooms.get(key, 0) >= 2:
            return Need(ALONE, "oom twice", bare=True)
        if key in self.bare:
            return Need(ALONE, "unmeasured", self.shape_of(params), bare=True)
        shape = self.by_shape.get(self._shape(params)) if self.keys is not None else None
        if key in self.by_point:  # what an alike point needed since counts too (an OOM of the shape)
            return Need(max(self.by_point[key], shape or 0.0), "same point")
        if self.hint is not None:
            from sweeper.model.units import megabytes

            value = self.hint(params) if callable(self.hint) else self.hint
            return Need(float(megabytes(value, "gpu_memory")), "hint")
        if shape is not None:
            return Need(shape, "memory_keys")
        if self.largest is not None and (self.keys is None or self.guess_new_shapes):
            return Need(self.largest, "largest so far")
        return Need(ALONE, "unmeasured", self.shape_of(params))

    def provisional(self, params: Mapping[str, Any], mb: float) -> None:
        """What a shape's first trial held at its first epoch: its shape's need (and, without
        ``memory_keys``, the largest so far) until that trial's end says more."""
        if self.keys is not None:
            shape = self._shape(params)
            self.by_shape[shape] = max(mb, self.by_shape.get(shape, 0.0))
        self.largest = max(mb, self.largest or 0.0)

    def learn(self, result: TrialResult) -> None:
        """What a finished attempt says of its point's need (nothing, where it was not measured)."""
        key = point_key(result.params)
        self.bare.discard(key)
        peak = result.mem_peak_mb if self.host else result.gpu_mem_peak_mb
        measured = need = float(peak) if peak else None
        if result.status is Status.OOM:
            self.ooms[key] = self.ooms.get(key, 0) + 1
            given = result.gpu_mem_cap_mb + CONTEXT_MB if result.gpu_mem_cap_mb and not self.host else 0
            need = OOM_GROWTH * max(need or 0.0, given)
            if not need:  # it ran out, and nothing says of what: a card to itself next time
                self.by_point[key] = ALONE
                return
        if need is None:
            return
        self.by_point[key] = max(need, self.by_point.get(key, 0.0))
        if self.keys is not None:
            shape = self._shape(result.params)
            self.by_shape[shape] = max(need, self.by_shape.get(shape, 0.0))
        if measured is not None:  # (a guess after an OOM is its point's, not every other point's)
            self.largest = max(measured, self.largest or 0.0)


@dataclass(frozen=True)
class Card:
    """One GPU as the packer sees it at a placement: NVML's numbers, and ours on it."""

    gpu: str  #: its index, as slots name it
    total_mb: int
    free_mb: int  #: NVML, now
    #: (reserved MB, MB its tree holds now) per trial of ours on the card
    ours: tuple[tuple[float, float], ...] = ()
    others_mb: float = 0.0  #: what the machine's other sweeps reserved there and do not hold yet
    share_mb: float = math.inf  #: the most this sweep may reserve more there, by the fair share
    alone_mb: float = 0.0  #: beside other sweeps: the least room a trial not measured yet starts with

    @property
    def physical(self) -> float:
        """What a trial may take here, the share aside: free, less what is reserved and not held, less the margin."""
        unclaimed = sum(max(0.0, reserved - held) for reserved, held in self.ours)
        return self.free_mb - unclaimed - self.others_mb - MARGIN_MB

    @property
    def room(self) -> float:
        """What a trial may reserve here: :attr:`physical`, within this sweep's share."""
        return min(self.physical, self.share_mb)

    @property
    def bare(self) -> bool:
        """Whether nothing of anyone's holds or reserves it (an idle card's driver share aside)."""
        return not self.ours and not self.others_mb and self.free_mb >= self.total_mb - 2 * MARGIN_MB


@dataclass(frozen=True)
class Spot:
    """Where a trial goes and on what terms."""

    gpu: str
    reserved_mb: int
    cap_mb: int
    need: Need


def alone_min(card: Card) -> float:
    """The least room a trial not measured yet takes a card with (beside other sweeps, most
    of its fair share of the card)."""
    return max(ALONE_MIN_MB, card.alone_mb)


def terms(need: Need, card: Card, overfill: bool = False) -> tuple[int, int] | None:
    """(reserved, cap) MB for a trial with this need on this card, None if it does not fit.
    ``overfill``: it may go on this card where nothing of anyone's is, even where it does not
    fit (no card could ever hold it: waiting cannot help)."""
    if need.alone:  # the card's room: at least ALONE_MIN_MB (on a smaller card, bare), never a cap of nothing
        whole = card.bare and card.share_mb >= card.physical  # the card to itself, nobody ahead of it
        small = card.physical < alone_min(card) and card.total_mb - 2 * MARGIN_MB < ALONE_MIN_MB
        if card.ours or not (whole if need.bare or small else card.room >= alone_min(card)):
            return None
        reserved = card.physical if need.bare or small else card.room
        return int(reserved), int(max(card.physical - CONTEXT_MB, card.physical // 2))
    else:
        reserved = math.ceil(need.mb * (1 + HEADROOM))
        if reserved > card.room and not (overfill and card.bare):
            return None
        reserved = min(reserved, max(card.room, need.mb))
    floor = math.ceil(min(need.mb, reserved))  # a known need is never capped below
    return int(reserved), int(max(floor, math.floor(reserved - CONTEXT_MB)))


class Packer(Callback):
    """Decides where each trial goes by memory; learns from each row the sweep records
    (a :class:`~sweeper.model.lifecycle.Callback`), and from the rows a resume keeps."""

    def __init__(self, needs: Needs, gpus: Sequence[str], breaker: Breaker | None = None) -> None:
        self.needs = needs
        self.gpus = list(gpus)  #: the cards the sweep may use
        #: which cards take no new trial (it learns from the rows itself, as a Callback of its own)
        self.breaker = breaker if breaker is not None else Breaker(self.gpus)
        self.totals: dict[str, int] = {}  #: card -> its size in MB, as placements saw it
        #: shapes whose first trial runs, unmeasured: the others of the shape wait for it
        self.measuring: set[str] = set()
        #: a trial ended ok on a card without NVML showing its memory: nothing will be
        #: measured, so unmeasured trials run a card each at once instead of waiting
        self.blind = False
        #: (point, trials started past it): the first trial that fitted nowhere, while it waits
        self.waiting: tuple[str, int] | None = None
        #: (card, point): the card kept for it once :data:`PATIENCE` trials passed it, until it starts
        self.draining: tuple[str, str] | None = None
        #: whether a recorded row is an OOM others caused (:mod:`sweeper.placement.crowd`): nothing to learn from
        self.excused: Callable[[TrialResult], bool] = lambda result: False
        #: points started not measured yet beside other sweeps, with less than a bare card's room
        self.cramped: set[str] = set()

    def describe(self) -> str:
        """The policy in one line (``--dry-run``)."""
        needs = self.needs
        order = ["the same point's earlier attempts"]
        if needs.hint is not None:
            order.insert(0, "the gpu_memory hint" + ("" if callable(needs.hint) else f" ({needs.hint})"))
        elif needs.keys is not None:
            order.append(f"points alike in {', '.join(needs.keys)}")
        else:
            order.append("the largest measured so far")
        return (f"per_gpu auto: a trial starts on a card while its predicted need plus {HEADROOM:.0%} fits the "
                f"free memory NVML reports, less {MARGIN_MB} MB and what this sweep's trials there reserved and "
                f"do not hold yet; predicted from {', then '.join(order)}; an unmeasured shape gets a card to "
                "itself first, until its first epoch (or its end) measures it; each is capped at its need (or its "
                f"reservation less {CONTEXT_MB} MB for the CUDA context, if more); a first OOM runs again with {OOM_GROWTH:g}x, "
                f"a second with the largest card to itself; {self.breaker.limit} crashed in a row close a card")

    def place(self, params: dict[str, Any], cards: Iterable[Card]) -> Spot | None:
        """The card where the trial fits with the least room left (best fit), or None: it
        waits, for room this sweep's trials or others' (other sweeps, other processes) hold,
        however long (the sweep bounds a wait on others: :mod:`sweeper.placement.crowd`). Only a
        trial that no card could ever hold takes a card where nothing is, anyway."""
        need = self.needs.predict(params)
        if need.source == "unmeasured" and need.shape in self.measuring and not self.blind:
            return None  # its shape's first trial is being measured: wait for what it says
        cards = [c for c in cards if c.gpu not in self.breaker.closed]
        self.totals.update({c.gpu: c.total_mb for c in cards})
        if need.source == "oom twice":  # the largest card, or none: a smaller one would run out again
            cards = [c for c in cards if c.total_mb >= self._largest()]
        key = point_key(params)
        if self.draining is not None and self.draining[0] in self.breaker.closed:
            self.draining = None
        mine = self.draining is not None and self.draining[1] == key
        best: tuple[tuple[bool, float], Spot, Card] | None = None
        largest = max((c.total_mb for c in cards), default=0) - MARGIN_MB
        overfill = not need.alone and need.mb * (1 + HEADROOM) > largest
        for card in cards:
            if self.draining is not None and card.gpu == self.draining[0] and not mine:
                continue
            fit = terms(need, card, overfill)
            if fit is None:
                continue
            left = card.room - fit[0]
            rank = (left < 0, abs(left))
            if best is None or rank < best[0]:
                best = (rank, Spot(card.gpu, fit[0], fit[1], need), card)
        if best is None:
            if self.waiting is None or self.waiting[0] == key and self.draining is None:
                passed = self.waiting[1] if self.waiting is not None else 0
                self.waiting = (key, passed)
                if passed >= PATIENCE and cards:  # it would wait for ever behind smaller ones
                    self.draining = (max(cards, key=lambda c: (not c.ours, c.room)).gpu, key)
            return None
        if mine or (self.waiting is not None and self.waiting[0] == key):
            self.draining = self.waiting = None
        elif self.waiting is not None:
            self.waiting = (self.waiting[0], self.waiting[1] + 1)
        if need.source == "unmeasured":
            self.measuring.add(need.shape)
            card = best[2]  # beside other sweeps, capped below what a bare card gives: an OOM measures nothing
            if card.alone_mb and card.physical < card.total_mb - 2 * MARGIN_MB:
                self.cramped.add(key)
        return best[1]

    def ranked(self, queued: Sequence[dict[str, Any]]) -> list[int]:
        """The order to offer queued trials in: one per shape not measured yet first (what
        it needs is then known early, and packs the rest of its shape), then the rest, each
        part in the queue's order."""
        first: list[int] = []
        shapes: set[str] = set()
        for i, params in enumerate(queued):
            shape = self.needs.shape_of(params)
            if shape not in shapes and self.needs.predict(params).source == "unmeasured":
                shapes.add(shape)
                first.append(i)
        chosen = set(first)
        return first + [i for i in range(len(queued)) if i not in chosen]

    def first_epoch(self, params: dict[str, Any], spot: Spot, held_mb: float | None) -> int | None:
        """A trial placed unmeasured (a card to itself) reported its first epoch, holding
        ``held_mb`` (its tree's most so far, as NVML showed it): its shape is measured now,
        and the others of the shape may start; its own new, smaller reservation is returned
        (its card takes other trials beside it). None where nothing changes: it was placed
        on a measurement or after two OOMs, or NVML showed nothing of it yet."""
        if spot.need.source != "unmeasured" or not held_mb:
            return None
        self.needs.provisional(params, held_mb)
        self.measuring.discard(spot.need.shape)
        return min(spot.reserved_mb, math.ceil(held_mb * (1 + EARLY_HEADROOM)))

    def again(self, result: TrialResult) -> bool | None:
        """Whether an attempt runs again on other terms, retries or not (True): a first or a
        second ``oom`` (the packer's guess was short: the next is 1.5x, then the largest card
        to itself); never (None): an ``oom`` with the largest card to itself (no card can
        hold it: a retry would run out alike); else as retries say (False)."""
        if result.status is not Status.OOM:
            return False
        return None if self.last_resort(result.params) else True

    def last_resort(self, params: Mapping[str, Any]) -> bool:
        """Whether the point runs (or ran, till its row is learnt) with the largest card to
        itself, after two OOMs."""
        return self.needs.ooms.get(point_key(params), 0) >= 2

    def _largest(self) -> int:
        """The size of the largest card that takes trials (0: none seen yet)."""
        return max((mb for g, mb in self.totals.items() if g not in self.breaker.closed), default=0)

    def recorded(self, result: TrialResult) -> None:
        self.learn(result)

    def seen(self, results: Iterable[TrialResult]) -> None:
        """Rows on record before this run (a resume): what they measured counts, not their cards."""
        for result in results:
            self.needs.learn(result)

    @property
    def exhausted(self) -> str | None:
        """Why no card takes a trial any more, once none does."""
        return self.breaker.exhausted

    def learn(self, result: TrialResult) -> None:
        if self.excused(result):
            return
        key = point_key(result.params)
        if key in self.cramped:
            self.cramped.discard(key)
            if result.status is Status.OOM:  # still not measured: it waits for a bare card
                self.needs.bare.add(key)
                self.measuring.discard(self.needs.shape_of(result.params))
                return
        if (result.status is Status.OK and result.device.startswith("gpu:") and result.gpu_mem_peak_mb is None
                and not self.blind):
            self.blind = True
            log.warning("sweeper: per_gpu auto: NVML did not show %s's GPU memory (it did not touch the card, or "
                        "NVML here lists other pids than this container's), so nothing can be measured: trials "
                        "not measured run one per card; give --gpu-memory or --per-gpu N", result.name)
        self.needs.learn(result)
        self.measuring.discard(self.needs.shape_of(result.params))
