"""A trial's identity is not its parameters' hash.

A point has a key (its parameters' hash, what a resume matches rows by); a trial has an id,
made once by the plan (:func:`sweeper.model.trial.new_id`) and then carried. So a ledger
whose trials carry ids that are not their points' keys (a copy that population-based
training makes, say) resumes as any other: each row is found by its point's key, keeps its
id, its seed and its folder, and two trials of the same parameters stay apart.
"""

from __future__ import annotations

import pytest

from sweeper.model.grid import expand
from sweeper.model.options import Options
from sweeper.model.settings import parse
from sweeper.model.trial import Status, TrialResult, keep_names, new_id, params_key, trial_seed
from sweeper.run.planning import Plan, on_record, plan
from sweeper.store.folder import SweepFolder
from sweeper.store.ledger import Ledger

pytestmark = pytest.mark.unit


def _row(tid, x, name, status=Status.OK, seed=0):
    return TrialResult(trial_id=tid, name=name, index=x, params={"x": x}, status=status,
                       metrics={"loss": float(x)} if status is Status.OK else {}, device="cpu",
                       seed=trial_seed(seed, tid), error="" if status is Status.OK else "exit code 7")


def _resume(tmp_path, rows, grid, space=None, options=None):
    folder = SweepFolder(str(tmp_path), "s")
    folder.prepare()
    ledger = Ledger(folder.path)
    try:
        for row in rows:
            ledger.record(row)
        specs = plan(expand(grid), folder.path, 0) if grid is not None else []
        return Plan.resume(ledger, parse(options or Options.build({})), specs, space, folder, None, "fn")
    finally:
        ledger.close()


@pytest.mark.parametrize("taken, made", [
    ((), "tabc"),  # a point's first trial: its key
    ({"tabc"}, "tabc-2"),  # a second trial of the same parameters
    ({"tabc", "tabc-2", "tabc-3"}, "tabc-4"),
    ({"tabc-2"}, "tabc"),  # only what is taken counts
])
def test_an_id_is_made_once_and_never_one_taken(taken, made):
    assert new_id("tabc", taken) == made


def test_a_points_first_trial_is_its_key_so_ledgers_from_before_keep_their_ids():
    specs = plan([{"x": 1}, {"x": 2}, {"x": 1}], "/f", seed=3)
    assert [s.trial_id for s in specs] == [params_key({"x": 1}), params_key({"x": 2})]  # listed twice: once
    assert [s.key for s in specs] == [s.trial_id for s in specs]
    assert [s.seed for s in specs] == [trial_seed(3, params_key({"x": 1})), trial_seed(3, params_key({"x": 2}))]


def test_a_row_is_found_by_its_points_key_not_by_an_id_made_from_its_parameters(tmp_path):
    """A trial recorded under an id that is no hash of its parameters is the grid's trial for
    its point: kept, not run again, with its own id, seed and folder."""
    made = _resume(tmp_path, [_row("tmember0007", 1, "member7")], {"x": [1, 2]})
    one, two = made.specs
    assert (one.trial_id, one.seed, one.name) == ("tmember0007", trial_seed(0, "tmember0007"), "member7")
    assert one.dir.endswith("member7")
    assert two.trial_id == params_key({"x": 2})
    assert set(made.kept) == {"tmember0007"} and [s.trial_id for s in made.todo] == [two.trial_id]
    assert made.wanted == {"tmember0007", two.trial_id}
    assert not made.notes  # no row on record is taken for another grid's


def test_a_failed_row_under_its_own_id_runs_again_as_that_trial(tmp_path):
    made = _resume(tmp_path, [_row("tmember0007", 1, "member7", Status.CRASHED)], {"x": [1]})
    (spec,) = made.todo
    assert (spec.trial_id, spec.attempt, spec.name) == ("tmember0007", 2, "member7")


def test_two_trials_of_the_same_parameters_stay_apart(tmp_path):
    """A copy of a point on record beside the point's own trial: the grid's point is its own
    trial (the id that is its key), the copy one row more that this grid does not count."""
    key = params_key({"x": 1})
    rows = [_row(key, 1, "x=1"), _row(f"{key}-2", 1, "x=1~copy")]
    made = _resume(tmp_path, rows, {"x": [1]})
    assert [s.trial_id for s in made.specs] == [key]
    assert set(made.kept) == {key}
    assert any("1 trials on record here are not in this grid" in n for n in made.notes), made.notes


@pytest.mark.parametrize("by", ["order", "reversed"])
def test_on_record_gives_each_row_to_one_spec(by):
    """Two specs of one point (two trials of it) and two rows: each spec its own row, in
    whatever order they come."""
    key = params_key({"x": 1})
    specs = [*plan([{"x": 1}], "/f", 0)] * 2
    previous = {key: _row(key, 1, "a"), f"{key}-2": _row(f"{key}-2", 1, "b")}
    if by == "reversed":
        previous = dict(reversed(previous.items()))
    ids = [s.trial_id for s in on_record(specs, previous, 0)]
    assert sorted(ids) == [key, f"{key}-2"]


def test_a_new_point_never_takes_an_id_on_record(tmp_path):
    """An id on record is never given again, even were it some other point's key."""
    key = params_key({"x": 2})
    specs = on_record(plan([{"x": 2}], "/f", 0), {key: _row(key, 1, "x=1")}, 0)  # (a forged row)
    assert specs[0].trial_id == f"{key}-2"


def test_a_copy_of_a_point_gets_a_folder_of_its_own():
    key = params_key({"x": 1})
    (spec,) = plan([{"x": 1}], "/f", 0)
    copy = type(spec)(**{**spec.__dict__, "trial_id": f"{key}-2"})
    named = keep_names([copy], {key: "x=1"})
    assert named[0].name == f"x=1~{key}-2"


def test_a_search_knows_a_row_on_record_by_its_points_key(tmp_path):
    """A search resumed over a row whose id is not its key tells the study that row and keeps
    it under its id."""
    pytest.importorskip("optuna")
    options = Options.build({"search": "random", "trials": 2, "metric": "loss", "mode": "min"})
    made = _resume(tmp_path, [_row("tmember0007", 1, "member7")], None, space={"x": [1, 2]}, options=options)
    assert set(made.kept) == {"tmember0007"}
    assert [s.trial_id for s in made.specs] == ["tmember0007"]
    assert made.search is not None and params_key({"x": 1}) in made.search.known
    asked = made.search.next()  # the only other point: never x=1 again
    assert asked is not None and asked.params == {"x": 2}
    assert made.search.next() is None


def test_a_point_a_search_asks_for_never_takes_an_id_on_record(tmp_path):
    """A row on record whose id is another point's key: the search's new point gets an id of
    its own (else the sweep's grid table would refuse it, and the sweep stop)."""
    pytest.importorskip("optuna")
    forged = _row(params_key({"x": 2}), 1, "x=1")  # x=1, recorded under x=2's key
    options = Options.build({"search": "random", "trials": 2, "metric": "loss", "mode": "min"})
    made = _resume(tmp_path, [forged], None, space={"x": [1, 2]}, options=options)
    asked = made.search.next()
    assert asked is not None and asked.params == {"x": 2}
    assert asked.trial_id == f"{params_key({'x': 2})}-2"
