"""A sweep's outputs, each a :class:`sweeper.run.lifecycle.Callback`: the tables, the ranking,
the trackers (the console's live view is in :mod:`sweeper.run.progress`).

::

    engine ──recorded(result)──> TableFiles ──table.row()──> results.csv  (one row per trial)
           ──history()─────────>            ──────────────> history.csv  (per-epoch reports)
           ──recorded(result)──> Ranking    ──────────────> the ledger's metric and mode
    sweep  ──end(state)────────> Trackers   ──────────────> their process: a last look, closed

:class:`TableFiles` is where a result becomes a row of ``results.csv``: it holds the
sweep's rows (those a resume kept and those recorded since) and writes them through
:func:`sweeper.store.table.row`, throttled, and whole at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from sweeper import tracking
from sweeper.errors import SweepError
from sweeper.model.metrics import nearest
from sweeper.model.options import Options
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.results.objectives import Objectives
from sweeper.run.lifecycle import Callback
from sweeper.run.planning import Plan
from sweeper.store import table
from sweeper.store.ledger import Ledger, StorageError
from sweeper.store.paths import SweepPaths

if TYPE_CHECKING:
    from sweeper.tracking.process import TrackerProcess

log = logging.getLogger("sweeper")


class TableFiles(Callback):
    """``results.csv`` and ``history.csv``, kept current from what the ledger records."""

    def __init__(self, ledger: Ledger, plan: Plan, where: SweepPaths) -> None:
        self.ledger, self.plan, self.where = ledger, plan, where
        self.results: dict[str, TrialResult] = dict(plan.kept)  #: every row of the sweep, by trial id
        self.files = [table.Throttled(self._write_results, path=where.results),
                      table.Throttled(self._write_history, path=where.history)]

    @property
    def rows(self) -> list[TrialResult]:
        """This sweep's rows, in its order."""
        return table.ordered(r for tid, r in self.results.items() if tid in self.plan.wanted)

    def _write_results(self) -> None:
        # the objectives the folder records (as load() reads them): their Pareto front is marked
        table.write_csv([r for tid, r in self.results.items() if tid in self.plan.wanted], self.where.results,
                        self.ledger.objectives())

    def _write_history(self) -> None:
        order = {s.trial_id: (s.index, s.name) for s in self.plan.specs}
        rows = [(tid, order[tid][1], epoch, m) for tid, epoch, m in self.ledger.history() if tid in order]
        rows.sort(key=lambda row: (order[row[0]][0], row[2]))
        table.write_history_csv(rows, self.where.history)

    def recorded(self, result: TrialResult) -> None:
        self.results[result.trial_id] = result
        self.files[0].mark()
        self.files[0].tick()

    def history(self) -> None:
        self.files[1].mark()

    def tick(self) -> float | None:
        waits = [w for w in (f.tick() for f in self.files) if w is not None]
        return min(waits) if waits else None

    def end(self, state: str) -> None:
        for f in self.files:
            f.flush()

    def unwritten(self) -> list[tuple[str, str]]:
        """The files whose last write failed (a folder in the way, a full disk), with why."""
        return [(f.path, f.failure) for f in self.files if f.failure is not None]


class Ranking(Callback):
    """What the folder records as the sweep's ranking. A metric the user named is recorded
    only once a successful result has it, so a mistyped one never becomes what ``status``,
    ``report`` and ``load()`` rank by (the folder keeps what it had). The first successful
    result of this run without it stops the sweep (:attr:`stop`, the engine's ``halt``): one
    line naming what that result returned and the nearest name. A row a resume kept without
    it is only said (the next result decides); a search, which cannot optimise it, then takes
    no trial and ends with that error (:attr:`fault`)."""

    def __init__(self, ledger: Ledger, metric: str | None, mode: str, search: bool,
                 objectives: Objectives | None = None) -> None:
        self.ledger, self.metric, self.mode, self.search = ledger, metric, mode, search
        self.objectives = objectives  #: several metrics named: each must be in the result
        self.settled = metric is None
        self.warned = False
        self.fault: SweepError | None = None
        #: stops the sweep with an error (the engine's ``halt``), once it runs
        self.stop: Callable[[SweepError], None] | None = None

    def facts(self) -> dict[str, str]:
        """What is recorded at the start: no metric named, this run's choice (none)."""
        return {"metric": "", "mode": self.mode, "objectives": ""} if self.metric is None else {}

    def recorded(self, result: TrialResult) -> None:
        self.seen([result], live=True)

    def seen(self, results: Iterable[TrialResult], live: bool = False) -> None:
        """Results with their metrics: kept by a resume, or (``live``) recorded in this run."""
        if self.settled:
            return
        for r in results:
            if r.status is not Status.OK:
                continue
            named = self.objectives.metrics if self.objectives is not None else (self.metric or "",)
            missing = [m for m in named if m not in r.metrics]
            if not missing:  # recorded with the first result that has them all
                self.settled = True
                several = self.objectives.text() if self.objectives is not None else ""
                with contextlib.suppress(StorageError):  # the engine says a failed write itself
                    self.ledger.put_facts(metric=self.metric or "", mode=self.mode, objectives=several)
                return
            if live and self.stop is not None:
                self.settled = True
                self.stop(SweepError(not_returned(r, named, missing)))
                return
            if self.warned:
                continue
            self.warned = True
            said = (f"no metric {missing[0]!r} in what trial {r.name} returned ({', '.join(sorted(r.metrics))}), "
                    "so nothing is ranked by it")
            if self.search:  # the runner then asks the search for no trial
                self.settled = True
                self.fault = SweepError(f"{said}; a search cannot optimise it, so it took no more trials: give "
                                        "--metric (metric=) one of those, or report it from train")
                return
            log.warning("sweeper: %s until a trial returns it; give --metric (metric=) one of those", said)


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


class Trackers(Callback):
    """TensorBoard and MLflow, kept current from the ledger by a process of their own (a
    thread each there, so a slow server holds up neither the sweep nor the other): their
    work never shares the engine's interpreter. Here, only their labels and hints; at the
    end the process is told how the sweep ended and waited for."""

    def __init__(self, processes: list[TrackerProcess]) -> None:
        self.processes = processes

    @property
    def hints(self) -> list[str]:
        return [t.hint for each in self.processes for t in each.trackers]

    def end(self, state: str) -> None:
        for each in self.processes:
            each.close(state)

    @classmethod
    def of(cls, options: Options, folder: str, plan: Plan, space: Any) -> Trackers:
        from sweeper.tracking import chosen

        trackers = chosen.make(options, folder)
        if not trackers:
            return cls([])
        from sweeper.tracking.process import TrackerProcess

        domains = tracking.domains_of_space(space) if space is not None else tracking.domains_of_points(
            s.params for s in plan.specs)
        info = tracking.SweepInfo(name=os.path.basename(folder), folder=folder, uid=plan.uid, domains=domains,
                                  metric=options.ranked_by or "", mode=plan.mode, search=str(options.search or ""))
        known: dict[str, TrialSpec] = {}

        def spec_of(tid: str) -> TrialSpec | None:  # a running trial with no row yet, asked by the
            if tid not in known:  # trackers' process (from the thread reading it): the search adds specs
                known.update((s.trial_id, s) for s in list(plan.specs))
            return known.get(tid)

        return cls([TrackerProcess(folder, {"tensorboard": options.tensorboard, "mlflow": options.mlflow}, trackers,
                                   info, spec_of)])
