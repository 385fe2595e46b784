"""Host memory as a resource (``workers="auto"``, ``host_memory``): a trial starts while
its predicted peak resident memory fits what the machine (and a budget) leaves, predicted
as GPU packing predicts (:class:`sweeper.placement.packing.Needs`, on ``mem_peak_mb``).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Sequence

from sweeper.model.trial import TrialResult
from sweeper.model.lifecycle import Callback
from sweeper.placement.packing import Need, Needs

log = logging.getLogger("sweeper")

#: Share added to a predicted host memory peak: resident memory varies more between runs
#: of a point than a card's (data loading, the allocator's arenas, Python's garbage).
HOST_HEADROOM = 0.2
#: MB of the machine's available memory that host packing never reserves: the system, the
#: parent, the standbys.
HOST_RESERVE_MB = 1024


class HostRoom(Callback):
    """Host memory as a resource: with ``workers="auto"`` or a ``host_memory`` budget, a
    trial starts while its predicted peak resident memory (:class:`~sweeper.placement.packing.Needs` on ``mem_peak_mb``,
    the same order as for GPUs) plus :data:`HOST_HEADROOM` fits in ::

        room = min(budget - sum over our trials of max(reserved, resident now),
                   MemAvailable - sum over our trials of max(0, reserved - resident now) - HOST_RESERVE_MB)

    Under a budget, a shape not measured yet (and, with nothing measured, any trial) starts
    only when none of ours runs: the budget is a promise. Without one, a new shape is
    predicted to need the most any trial held so far (MemAvailable, read at each start,
    shows what it really takes before the next one starts). What running trials hold now
    counts where it is more than they reserved. With
    ``workers="auto"`` a trial also needs a whole idle core, measured
    (:class:`sweeper.system.headroom.IdleCpu`; those started since the measurement count as busy),
    unless none of ours runs: trials that wait (on a GPU, on I/O) pack; trials that compute
    do not crowd each other out."""

    def __init__(self, needs: Needs, budget_mb: int | None, watch_cores: bool) -> None:
        from sweeper.system.headroom import IdleCpu

        self.needs, self.budget = needs, budget_mb
        needs.guess_new_shapes = budget_mb is None
        self.idle = IdleCpu() if watch_cores else None
        self.measuring: set[str] = set()
        self.starts: list[float] = []  #: monotonic, when each trial was let start
        self.over_said = False  #: a trial's peak over the whole budget was said (once a sweep)

    def fits(self, params: dict[str, Any], available_mb: float | None,
             ours: Sequence[tuple[float, float]]) -> tuple[int, Need] | None:
        """(MB to reserve, the need) when the trial may start now, else None; changes nothing."""
        need = self.needs.predict(params)
        if need.source == "unmeasured" and need.shape in self.measuring:
            return None
        room = math.inf
        if self.budget is not None:
            room = self.budget - sum(max(r, h) for r, h in ours)
        if available_mb is not None:
            room = min(room, available_mb - sum(max(0.0, r - h) for r, h in ours) - HOST_RESERVE_MB)
        if need.alone:
            if ours:
                return None
            reserved = room if room != math.inf else 0.0
        else:
            reserved = math.ceil(need.mb * (1 + HOST_HEADROOM))
            if reserved > room and ours:
                return None
        if ours and not self._idle_core():
            return None
        return max(0, int(reserved)), need

    def _idle_core(self) -> bool:
        if self.idle is None:
            return True
        from sweeper.system.headroom import WINDOW_S

        cores = self.idle.sample()
        since = sum(1 for t in self.starts if t > self.idle.measured_at - WINDOW_S)
        return cores is not None and cores - since >= 1

    def commit(self, need: Need) -> None:
        """The trial starts on these terms."""
        import time

        self.starts = [*self.starts[-31:], time.monotonic()]
        if need.source == "unmeasured":
            self.measuring.add(need.shape)

    def recorded(self, result: TrialResult) -> None:
        self.needs.learn(result)
        self.measuring.discard(self.needs.shape_of(result.params))
        self._over_budget(result)

    def _over_budget(self, result: TrialResult) -> None:
        """The first trial whose measured peak is over the whole budget is said, once: such
        trials run one at a time, and each still takes more than the budget allows."""
        peak = result.mem_peak_mb
        if self.budget is None or self.over_said or not peak or peak <= self.budget:
            return
        self.over_said = True
        log.warning("sweeper: trial %s peaked at %d MB, over the whole --host-memory budget of %d MB: trials run "
                    "one at a time and still exceed it; raise the budget or make the trials smaller", result.name,
                    peak, self.budget)

    def seen(self, results: Iterable[TrialResult]) -> None:
        for result in results:
            self.needs.learn(result)

    def describe(self) -> str:
        budget = f"the {self.budget} MB budget and " if self.budget is not None else ""
        cores = ", and a measured idle core is free" if self.idle is not None else ""
        new = ("a new shape first runs with the budget to itself" if self.budget is not None
               else "a new shape is predicted as the largest so far")
        return (f"host memory: a trial starts while its predicted peak plus {HOST_HEADROOM:.0%} fits under {budget}the "
                f"available memory less {HOST_RESERVE_MB} MB{cores}; {new}; the first with the machine to itself")
