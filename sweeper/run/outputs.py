"""A sweep's outputs, each a :class:`sweeper.model.lifecycle.Callback`: the tables, the ranking,
the trackers (the console's live view is in :mod:`sweeper.front.progress`).

::

    engine ──recorded(result)──> TableFiles ──table.row()──> results.csv  (one row per trial)
           ──history()─────────>            ──────────────> history.csv  (per-epoch reports)
    sweep  ──end(state)────────> Trackers   ──────────────> their process: a last look, closed

:class:`TableFiles` is where a result becomes a row of ``results.csv``: it holds the
sweep's rows (those a resume kept and those recorded since) and writes them through
:func:`sweeper.store.table.row`, throttled, and whole at the end.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from sweeper import tracking
from sweeper.model.settings import Settings
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.model.lifecycle import Callback, SweepEnd
from sweeper.run.planning import Plan
from sweeper.store import table
from sweeper.store.ledger import Ledger
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
        table.write_history_csv(rows, self.where.history, self.ledger.schedule())

    def recorded(self, result: TrialResult) -> None:
        self.results[result.trial_id] = result
        self.files[0].mark()
        self.files[0].tick()

    def history(self) -> None:
        self.files[1].mark()

    def tick(self) -> float | None:
        waits = [w for w in (f.tick() for f in self.files) if w is not None]
        return min(waits) if waits else None

    def end(self, state: SweepEnd) -> None:
        for f in self.files:
            f.flush()

    def unwritten(self) -> list[tuple[str, str]]:
        """The files whose last write failed (a folder in the way, a full disk), with why."""
        return [(f.path, f.failure) for f in self.files if f.failure is not None]


class Trackers(Callback):
    """TensorBoard, MLflow and an Optuna study, kept current from the ledger by a process of their own (a
    thread each there, so a slow server holds up neither the sweep nor the other): their
    work never shares the engine's interpreter. Here, only their labels and hints; at the
    end the process is told how the sweep ended and waited for."""

    def __init__(self, processes: list[TrackerProcess]) -> None:
        self.processes = processes

    @property
    def hints(self) -> list[str]:
        return [t.hint for each in self.processes for t in each.trackers]

    def end(self, state: SweepEnd) -> None:
        for each in self.processes:
            each.close(state)

    @classmethod
    def of(cls, settings: Settings, folder: str, plan: Plan, space: Any) -> Trackers:
        """The trackers the sweep's outputs ask for, fed in a process of their own (none: none)."""
        from sweeper.tracking import chosen

        outputs, scoring, asked = settings.outputs, settings.scoring, settings.search
        trackers = chosen.make(outputs, folder)
        if not trackers:
            return cls([])
        from sweeper.tracking.process import TrackerProcess

        domains = tracking.domains_of_space(space) if space is not None else tracking.domains_of_points(
            s.params for s in plan.specs)
        several = scoring.objectives
        info = tracking.SweepInfo(name=os.path.basename(folder), folder=folder, uid=plan.uid, domains=domains,
                                  metric=scoring.metric or "", mode=plan.mode,
                                  search=str(asked.sampler or asked.name or ""),
                                  objectives=tuple(zip(several.metrics, several.modes)) if several else ())
        known: dict[str, TrialSpec] = {}

        def spec_of(tid: str) -> TrialSpec | None:  # a running trial with no row yet, asked by the
            if tid not in known:  # trackers' process (from the thread reading it): the search adds specs
                known.update((s.trial_id, s) for s in list(plan.specs))
            return known.get(tid)

        chosen_ = {"tensorboard": outputs.tensorboard, "mlflow": outputs.mlflow, "optuna": outputs.optuna}
        return cls([TrackerProcess(folder, chosen_, trackers, info, spec_of)])
