"""What the folder records as the sweep's ranking (its metric and mode, or its objectives),
settled by the first successful result that has them: a judge the engine asks after each
recorded result (:meth:`Ranking.seen`), which writes what it settles. A mistyped metric never
becomes what ``status``, ``report`` and ``load()`` rank by."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import nearest
from sweeper.model.trial import Status, TrialResult
from sweeper.model.objectives import Objectives

log = logging.getLogger("sweeper")


class Ranking:
    """A metric the user named is recorded only once a successful result has it, so the
    folder keeps what it had until then. The first successful result of this run without it
    stops the sweep (one line naming what that result returned and the nearest name). A row a
    resume kept without it is only said (the next result decides); a search, which cannot
    optimise it, then takes no trial and ends with that error (:attr:`fault`)."""

    def __init__(self, metric: str | None, mode: str, search: bool, objectives: Objectives | None = None) -> None:
        self.metric, self.mode, self.search = metric, mode, search
        self.objectives = objectives  #: several metrics named: each must be in the result
        self.settled = metric is None
        self.warned = False
        self.fault: SweepError | None = None

    def facts(self) -> dict[str, str]:
        """What is recorded at the start: no metric named, this run's choice (none)."""
        return {"metric": "", "mode": self.mode, "objectives": ""} if self.metric is None else {}

    def seen(self, results: Iterable[TrialResult], live: bool = False) -> dict[str, Any] | SweepError | None:
        """Results with their metrics, kept by a resume or (``live``) recorded in this run: the
        facts to record once they settle the ranking, or (``live``) the error that stops the sweep."""
        if self.settled:
            return None
        for r in results:
            if r.status is not Status.OK:
                continue
            named = self.objectives.metrics if self.objectives is not None else (self.metric or "",)
            missing = [m for m in named if m not in r.metrics]
            if not missing:  # recorded with the first result that has them all
                self.settled = True
                several = self.objectives.text() if self.objectives is not None else ""
                return {"metric": self.metric or "", "mode": self.mode, "objectives": several}
            if live:
                self.settled = True
                return SweepError(not_returned(r, named, missing))
            if self.warned:
                continue
            self.warned = True
            said = (f"no metric {missing[0]!r} in what trial {r.name} returned ({', '.join(sorted(r.metrics))}), "
                    "so nothing is ranked by it")
            if self.search:  # the runner then asks the search for no trial
                self.settled = True
                self.fault = SweepError(f"{said}; a search cannot optimise it, so it took no more trials: give "
                                        "--metric (metric=) one of those, or report it from train")
                return None
            log.warning("sweeper: %s until a trial returns it; give --metric (metric=) one of those", said)
        return None


def not_returned(result: TrialResult, named: Sequence[str], missing: Sequence[str]) -> str:
    """The line that stops a sweep whose named metric a finished trial did not return: what it
    returned, the nearest name, and the command that ranks by it."""
    got = ", ".join(sorted(result.metrics)) or "no metric"
    head = f"no metric {' nor '.join(map(repr, missing))} in what trial {result.name} returned ({got})"
    near = {m: nearest(m, result.metrics) for m in missing}
    if all(near.values()):
        fixed = ",".join(near.get(m) or m for m in named)
        meant = " nor ".join(str(near[m]) for m in missing)
        return (f"{head}; did you mean {meant}? run again with --metric {fixed} (metric={fixed!r}); "
                "the sweep stopped, its finished trials are kept")
    return (f"{head}; the sweep stopped, its finished trials are kept: run again with --metric (metric=) one "
            "of those, or return it from train")
