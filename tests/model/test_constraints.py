"""Constraints on a trial's results: rows gain ``feasible``, an infeasible trial is never
ranked, a re-run judges kept rows under its own constraints, and a search's sampler is
told the values. ``sweep_fns.surface`` gives score = 10a + 0.01b (+5 where c is "x")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import run_cli, write_grid
from sweeper.model.constraints import Constraints, parse
from sweeper.errors import SweepError
from sweeper.model.trial import Status, TrialResult

GRID = {"a": [1, 2, 3], "b": [0.0], "c": ["x", "y"]}  # scores 15, 25, 35 with x; 10, 20, 30 with y


def _row(metrics, status=Status.OK, params=None):
    return TrialResult(trial_id="t1", name="t", index=0, params=params or {"a": 1}, status=status, metrics=metrics)


@pytest.mark.unit
def test_constraints_read_as_mapping_text_or_function_and_judge_what_they_can():
    as_map = parse({"score": ("<=", 25), "cost": (">=", 0.5)})
    as_text = parse("score<=25, cost>=0.5")
    assert as_map == as_text == Constraints((("score", "<=", 25.0), ("cost", ">=", 0.5)))
    assert as_map.values({}, {"score": np.float32(20), "cost": np.int64(1)}) == (-5.0, -0.5)  # how far inside
    assert as_map.feasible(_row({"score": 20.0, "cost": 1.0})) is True
    assert as_map.feasible(_row({"score": 26.0, "cost": 1.0})) is False
    for bad in ({"score": 20.0}, {"score": float("nan"), "cost": 1.0}, {"score": "20", "cost": 1.0}):
        assert as_map.feasible(_row(bad)) is False  # what cannot be checked is not met
    assert as_map.feasible(_row({"score": 1.0, "cost": 1.0}, status=Status.PRUNED)) is None  # only ok rows
    by_param = parse("a<=1")
    assert by_param.feasible(_row({}, params={"a": 1})) is True  # a parameter may be bounded too
    fn = parse(lambda row: [row["score"] - 25, row["a"] - 2])
    assert fn.feasible(_row({"score": 20.0}, params={"a": 2})) is True
    assert fn.feasible(_row({"score": 20.0}, params={"a": 3})) is False
    assert fn.feasible(_row({}, params={"a": 1})) is False  # the function failed on the row: not met
    assert parse(None) is None and parse("") is None and parse({}) is None


@pytest.mark.unit
@pytest.mark.parametrize("value, words", [
    ("score<25", "constraint 'score<25' is not NAME<=NUMBER or NAME>=NUMBER"),
    ("score<=lots", "constraint 'score<=lots' is not NAME<=NUMBER"),
    ({"score": ("<", 1)}, "constraints['score'] is ('<', 1); give (op, number)"),
    ({"score": ("<=", float("inf"))}, "constraints['score']"),
    (42, "constraints is 42; give a mapping, a text or a function"),
])
def test_a_malformed_constraint_is_one_line_naming_the_fix(value, words):
    with pytest.raises(SweepError) as caught:
        parse(value)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_rows_say_feasible_and_the_best_is_the_best_that_meets_them(tmp_path, capsys):
    df = sweeper.sweep(sweep_fns.surface, GRID, constraints={"score": ("<=", 25)}, metric="score", mode="max",
                       out=str(tmp_path), name="s")
    by = df.set_index(["param_a", "param_c"])
    assert str(df.feasible.dtype) == "boolean"
    assert by.feasible.to_dict() == {(1, "x"): True, (1, "y"): True, (2, "x"): True, (2, "y"): True,
                                     (3, "x"): False, (3, "y"): False}
    out = capsys.readouterr().out
    assert "2 ok trials did not meet the constraints (feasible=False): not ranked" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("sweeper: top "))
    assert lines[head] == "sweeper: top 4 by score (max):"  # the 4 that meet them
    top = lines[head + 2]  # under the header
    assert top.split()[:2] == ["a=2,c=x", "25"], out  # 35 and 30 are better, and not ranked (b is fixed)
    pd.testing.assert_series_equal(sweeper.load(tmp_path / "s").feasible, df.feasible)  # the CSV and ledger agree
    status = run_cli("status", str(tmp_path / "s"))
    assert "best so far: score = 25 (max)" in status.stdout, status.stdout  # 35 and 30 are not ranked


def test_a_rerun_judges_the_rows_it_keeps_under_its_own_constraints(tmp_path):
    first = sweeper.sweep(sweep_fns.surface, GRID, constraints="score<=25", out=str(tmp_path), name="s",
                          progress=False)
    assert int(first.feasible.sum()) == 4
    second = sweeper.sweep(sweep_fns.surface, GRID, constraints="score<=15", out=str(tmp_path), name="s",
                           progress=False)
    assert (second.started_at == first.started_at).all()  # nothing ran again
    assert int(second.feasible.sum()) == 2  # 15 and 10: judged anew
    assert int(sweeper.load(tmp_path / "s").feasible.sum()) == 2  # what load() and status read, too
    third = sweeper.sweep(sweep_fns.surface, GRID, out=str(tmp_path), name="s", progress=False)
    assert "feasible" not in third.columns  # no constraints: no column


def test_a_search_tells_its_sampler_the_constraint_values():
    import optuna

    from sweeper.run.planning import plan
    from sweeper.search.sampling import CONSTRAINTS_ATTR, Search

    search = Search({"a": sweeper.uniform(0.0, 4.0)}, search="tpe", prune=None, trials=3, seed=0, metric="score",
                    mode="max", make_spec=lambda p, i: plan([p], "/tmp/unused", 0)[0],
                    constraints=parse("score<=25"))
    for score in (30.0, 20.0):
        spec = search.next()
        search.tell(TrialResult(trial_id=spec.trial_id, name=spec.name, index=0, params=spec.params,
                                status=Status.OK, metrics={"score": score}))
    told = [t for t in search.study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if hasattr(optuna.trial.Trial, "set_constraint"):  # Optuna 5: on the trial, by name
        assert [t.constraints for t in told] == [{"score <= 25": 5.0}, {"score <= 25": -5.0}]
    else:  # Optuna 4: the sampler's constraints_func reads them
        assert [t.user_attrs[CONSTRAINTS_ATTR] for t in told] == [{"score <= 25": 5.0}, {"score <= 25": -5.0}]
        assert [list(t.system_attrs["constraints"]) for t in told] == [[5.0], [-5.0]]


def test_the_cli_takes_constraints_and_refuses_a_malformed_one(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import surface as train\n"
                                "grid = {'a': [1, 2, 3], 'b': [0.0], 'c': ['y']}\n")
    done = run_cli(grid, "--constraints", "score<=20", "--metric", "score", "--mode", "max",
                   "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **sweeper.store.table.READ_CSV)
    assert df.feasible.tolist() == [True, True, False]
    bad = run_cli(grid, "--constraints", "score=20", "--out", str(tmp_path / "out"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "constraint 'score=20' is not NAME<=NUMBER or NAME>=NUMBER" in bad.stderr
