"""The one interface the engine asks which trial runs next and what each report is answered
(sweeper.model.protocol.Scheduler; sweeper.search.schedulers): a pause, end to end in real
processes (the same orderings in fake time are in test_engine_clock.py), and the search's
scheduler answering with its pruner."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sweeper.backends.local import LocalBackend
from sweeper.model.protocol import Answer, Decision
from sweeper.model.target import FunctionTarget
from sweeper.model.trial import Status, TrialResult
from sweeper.run.engine import Engine
from sweeper.run.planning import plan
from sweeper.search.schedulers import Searching
from sweeper.placement.slots import place
from sweeper.store.ledger import Ledger
from sweeper.system.capping import MemoryPolicy
from pausing import Pausing
from toy_batch_backend import BatchBackend
from tests import sweep_fns


def run_paused(tmp_path: Any, fn: Any, points: list[dict[str, Any]], batch: bool = False
               ) -> tuple[Pausing, dict[str, TrialResult], dict[str, list[int]], list[Any]]:
    """``points`` run in real spawned processes (``batch``: each a batch job that shares only
    files with the sweep, its answers too), one slot each, each paused once at epoch 2 and
    given again: the scheduler, the rows and the epochs on record by trial id, and the specs."""
    specs = plan(points, str(tmp_path), seed=0)
    scheduler = Pausing(specs, at=2, waits=True)  # each report waits for its answer: it hears the pause
    slots = place("none", MemoryPolicy(1, None), len(specs)).slots
    backend: Any = LocalBackend(FunctionTarget.of(fn), slots, workers=len(specs), start_method="spawn")
    if batch:
        backend = BatchBackend(SimpleNamespace(target=FunctionTarget.of(fn), options=SimpleNamespace(
            worker_count=len(specs))))
    ledger = Ledger(str(tmp_path))
    try:
        Engine(backend, ledger).run(scheduler)
        assert ledger.running() == []
        epochs = {s.trial_id: [e for e, _, _ in ledger.epochs(s.trial_id)] for s in specs}
        return scheduler, ledger.results(), epochs, specs
    finally:
        ledger.close()


@pytest.mark.parametrize("batch", [False, True], ids=["pipe", "batch-files"])
def test_a_paused_trial_leaves_its_process_and_finishes_in_a_fresh_one(tmp_path, batch):
    scheduler, rows, epochs, specs = run_paused(tmp_path, sweep_fns.reporter, [{"x": 1.0}, {"x": 2.0}], batch)
    # each heard the pause at epoch 2 and left; given again, it ran to its end in a new process
    # (a batch job: the pause came through its answers file, and it was submitted again)
    assert sorted(scheduler.paused_at) == sorted((s.trial_id, 2) for s in specs)
    assert [r.status for r in scheduler.told] == [Status.OK, Status.OK]
    assert [rows[s.trial_id].status for s in specs] == [Status.OK, Status.OK], [r.error for r in rows.values()]
    assert [rows[s.trial_id].metrics["acc"] for s in specs] == [3.0, 6.0]
    assert all(rows[s.trial_id].attempts == 1 for s in specs)
    assert epochs == {s.trial_id: [1, 2, 3] for s in specs}
    with open(specs[0].log_path) as f:
        log = f.read()
    assert log.count("=== sweeper: trial") == 2  # both of its processes wrote to its one log


def test_a_resumed_trial_numbers_its_epochs_on_from_where_it_was_paused(tmp_path):
    # its fresh process is told the epoch it was paused at (SWEEPER_RESUMED_EPOCH), and
    # report()'s own numbering goes on after it, so no epoch on record is written over
    scheduler, rows, epochs, (spec,) = run_paused(tmp_path, sweep_fns.auto_reporter, [{"x": 1.0}])
    row = rows[spec.trial_id]
    assert scheduler.paused_at == [(spec.trial_id, 2)]
    assert row.status is Status.OK and row.metrics["resumed_after"] == 2.0 and row.epoch_reached == 5
    assert epochs[spec.trial_id] == [1, 2, 3, 4, 5]


@pytest.mark.unit
def test_a_search_answers_with_its_pruner_and_learns_only_final_results(tmp_path):
    told: list[str] = []

    class Study:  # the part of run.search.Search the scheduler asks
        prunes, remaining = True, 0

        def prune(self, spec: Any, items: list[dict[str, Any]]) -> str | None:
            return "pruned by median at epoch 2" if items[-1]["epoch"] == 2 else None

        def tell(self, result: Any) -> None:
            told.append(result.status.value)

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    ledger = Ledger(str(tmp_path))
    try:
        searching = Searching(Study(), [spec], [spec], {spec.trial_id}, ledger, {})  # type: ignore[arg-type]
    finally:
        ledger.close()
    assert searching.waits and searching.ahead() == [spec] and searching.remaining == 0
    assert searching.reported(spec, [{"epoch": 1, "metrics": {}}]) == Answer()
    assert searching.reported(spec, [{"epoch": 2, "metrics": {}}]) == Answer(Decision.STOP,
                                                                              "pruned by median at epoch 2")
    failed = TrialResult(trial_id=spec.trial_id, name=spec.name, index=0, params=spec.params, status=Status.ERROR)
    searching.finished(failed, retrying=True)  # an attempt that runs again: not the study's yet
    searching.finished(failed, retrying=False)
    assert told == ["error"]



def test_a_search_whose_kept_rows_lack_the_metric_asks_for_no_trial_and_says_so(tmp_path):
    # the ranking judges the rows a resume kept; the runner, not an output, then asks the
    # search for nothing, and the sweep fails with the one line that says what to do
    import sweeper

    space = {"x": sweeper.uniform(0.0, 1.0), "epochs": 2, "pace": 0.0}
    first = sweeper.sweep(sweep_fns.descent, space, search="random", trials=2, metric="loss", seed=0,
                          out=str(tmp_path), name="s", progress=False, workers=1)
    assert (first.status == "ok").all() and len(first) == 2
    with pytest.raises(sweeper.SweepError, match="a search cannot optimise it, so it took no more trials"):
        sweeper.sweep(sweep_fns.descent, space, search="random", trials=4, metric="accuracy", seed=0,
                      out=str(tmp_path), name="s", progress=False, workers=1)
    assert len(sweeper.load(str(tmp_path / "s"))) == 2  # nothing ran
