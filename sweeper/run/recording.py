"""What the engine keeps of its trials (:class:`Recorder`): each trial's row, judged with the
run's id and the constraints; the ledger's writes, in the engine's words (a trial running,
waiting, its epochs, its row); what a result settles of the ranking; the outputs told once
the ledger holds a row. The first write that fails closes the sweep to new trials
(:attr:`~sweeper.run.closing.Closing.STORAGE`), said once, naming the file.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from sweeper.errors import SweepError
from sweeper.model.constraints import Constraints
from sweeper.model.lifecycle import Callback
from sweeper.model.protocol import Began, Exited
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.run.closing import Closing, Gate
from sweeper.run.phases import TrialState
from sweeper.run.ranking import Ranking
from sweeper.store.ledger import Ledger, StorageError

log = logging.getLogger("sweeper")


class Recorder:
    """A sweep's trials into its ledger (``run_id``: this run's record there, which each row
    names; ``constraints``: what an ok trial must meet, its row's ``feasible``; ``ranking``:
    settles what the folder ranks by from the results recorded), and its outputs told."""

    def __init__(self, ledger: Ledger, outputs: Callback, gate: Gate, clock: Callable[[], float],
                 run_id: str = "", constraints: Constraints | None = None, ranking: Ranking | None = None) -> None:
        self.ledger, self.outputs, self.gate, self.clock = ledger, outputs, gate, clock
        self.run_id, self.constraints, self.ranking = run_id, constraints, ranking

    # -- rows ---------------------------------------------------------------------------

    def row(self, trial: TrialState, how: Exited = Exited()) -> TrialResult:
        """Its row judged now (``how``: how its process ended; none told: it has not)."""
        return trial.row(how, self.clock(), self.run_id, self.constraints)

    def final(self, trial: TrialState, how: Exited) -> TrialResult:
        """Its row once its process is gone (:meth:`~sweeper.run.phases.TrialState.final`)."""
        return trial.final(how, self.clock(), self.run_id, self.constraints)

    # -- writes ---------------------------------------------------------------------------

    def store(self, write: Callable[..., None], *args: Any, **kwargs: Any) -> bool:
        """A ledger write; on a full disk or a read-only folder the sweep stops taking new
        trials (running ones finish or stop as usual) and says so once, naming the file."""
        try:
            write(*args, **kwargs)
            return True
        except StorageError as exc:
            self.failed(exc)
            return False

    def failed(self, exc: StorageError) -> None:
        """A write of the sweep's files failed (the ledger's, or a trial's own): the first
        closes the sweep to new trials, said once."""
        if self.gate.close(Closing.STORAGE, exc):
            log.warning("sweeper: %s; no new trials start", str(exc).split("; ")[0])

    def running(self, trial: TrialState, began: Began) -> None:
        """It reached its process: status shows it running."""
        self.store(self.ledger.mark_running, trial.spec, began, trial.started_at)

    def waiting(self, spec: TrialSpec) -> None:
        """It runs no more for now (requeued, paused): status shows it waiting."""
        self.store(self.ledger.not_running, spec.trial_id)

    def anew(self, spec: TrialSpec) -> None:
        """A new attempt: the epochs an earlier one reported are replaced by its own."""
        self.store(self.ledger.clear_history, spec.trial_id)

    def history(self, trial: TrialState, items: list[dict[str, Any]]) -> None:
        """A trial's per-epoch reports: into the ledger and the view; its last epoch noted."""
        spec = trial.spec
        trial.note_epochs(items)
        self.store(self.ledger.add_history, spec.trial_id, items)
        self.outputs.history()
        if items:
            self.outputs.reported(spec, items[-1]["epoch"], items[-1]["metrics"])

    def early(self, trial: TrialState) -> None:
        """Its row when its result came: recorded at once (durable now, not when it has exited)."""
        trial.early = self.row(trial)
        trial.recorded = self.store(self.ledger.record, trial.early)

    def record(self, result: TrialResult, recorded: bool = False) -> bool:
        """A trial's row into the ledger (one ``recorded`` when its result came gains what its
        exit measured); once there, what it settles of the ranking, and the outputs told. True
        where the ledger holds it."""
        # (a row recorded when its result came stands, durable, even where its exit's measures failed to be)
        stored = self.store(self.ledger.measured if recorded else self.ledger.record, result) or recorded
        if stored:  # the tables show what the ledger holds
            self._rank(result)
            self.outputs.recorded(result)
        return stored

    def _rank(self, result: TrialResult) -> None:
        """What the folder ranks by, once a result settles it (recorded); a named metric the
        first successful result lacks halts the sweep (:attr:`~sweeper.run.closing.Closing.HALTED`)."""
        said = self.ranking.seen([result], live=True) if self.ranking is not None else None
        if isinstance(said, SweepError):
            self.gate.close(Closing.HALTED, said)
        elif said:
            self.store(self.ledger.put_facts, **said)
