"""Several objectives: ``metric=[...]`` with ``mode=[...]`` (or ``--metric a,b --mode
max,min``) marks the Pareto front in a ``pareto`` column, the summary, ``status`` and the
report show it, a search runs Optuna's multi-objective samplers (NSGA-II by default) and
refuses a pruner, and ``export --optuna`` writes a study of several objectives.
``sweep_fns.tradeoff`` gives accuracy = 1 - 1/units - |lr - 0.01| and size = 10 units."""

from __future__ import annotations

import itertools
import random

import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import run_cli, write_grid
from sweeper.results import report as analysis
from sweeper.store import table
from sweeper.errors import SweepError
from sweeper.store.ledger import Ledger
from sweeper.model.objectives import Objectives, nondominated
from sweeper.model.options import Options
from sweeper.model.trial import Status, TrialResult

GRID = {"units": [0, 4, 8, 16], "lr": [0.001, 0.01, 0.1]}
BOTH = {"metric": ["accuracy", "size"], "mode": ["max", "min"]}


def _front_by_hand(df: pd.DataFrame) -> set[str]:
    """Every ok row that no other ok row beats in both (higher accuracy, smaller size)."""
    ok = df[df.status == "ok"]
    return {r.trial for r in ok.itertuples()
            if not any(o.accuracy >= r.accuracy and o.size <= r.size and (o.accuracy, o.size) != (r.accuracy, r.size)
                       for o in ok.itertuples())}


@pytest.mark.unit
def test_the_front_is_optunas_own_on_random_points_with_ties():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(0)
    for trial in range(30):
        n, k = rng.randint(1, 25), rng.choice([2, 3])
        modes = [rng.choice(["max", "min"]) for _ in range(k)]
        points = [[float(rng.randint(0, 4)) for _ in range(k)] for _ in range(n)]  # small ints: many ties
        study = optuna.create_study(directions=["maximize" if m == "max" else "minimize" for m in modes])
        dist = optuna.distributions.IntDistribution(0, 1000)
        study.add_trials([optuna.trial.create_trial(params={"i": i}, distributions={"i": dist}, values=p)
                          for i, p in enumerate(points)])
        theirs = {t.params["i"] for t in study.best_trials}
        ours = nondominated({i: tuple(v if m == "max" else -v for v, m in zip(p, modes))
                             for i, p in enumerate(points)})
        assert set(ours) == theirs, (points, modes)


@pytest.mark.unit
def test_only_ranked_rows_with_every_objective_stand_on_the_front():
    both = Objectives(("accuracy", "size"), ("max", "min"))

    def row(i, metrics, status=Status.OK, feasible=None):
        return TrialResult(f"t{i}", f"r{i}", i, {"i": i}, status, metrics, feasible=feasible)

    rows = [row(0, {"accuracy": 0.9, "size": 100}),
            row(1, {"accuracy": 0.99, "size": 1}, feasible=False),  # beats all, meets no constraint
            row(2, {"accuracy": 0.95, "size": 1}, status=Status.PRUNED),  # stopped early: not ranked
            row(3, {"accuracy": float("nan"), "size": 1}),  # no number to compare
            row(4, {"accuracy": 0.95}),  # an objective missing
            row(5, {"accuracy": 0.8, "size": 50}),
            row(6, {"accuracy": 0.8, "size": 50}),  # equal to 5: both stand
            row(7, {"accuracy": 0.7, "size": 60})]  # worse than 5 in both
    assert both.front(rows) == {"t0", "t5", "t6"}
    df = table.dataframe(rows, both)
    assert str(df.pareto.dtype) == "boolean" and df.pareto.tolist() == [True, False, False, False, False, True, True,
                                                                       False]
    assert "pareto" not in table.dataframe(rows).columns  # one objective: no column


@pytest.mark.unit
@pytest.mark.parametrize("metric, mode, words", [
    (["accuracy", "size"], "max", "metric names 2 objectives (accuracy, size) and mode gives 1 direction; give one "
                                  "per metric, such as --mode max,min (mode=['max', 'min'])"),
    ("accuracy,accuracy", None, "metric names 'accuracy' twice"),
    (["accuracy", 3], None, "metric must be a non-empty name or a list of them"),
    (["accuracy", "size"], ["max", "most"], "mode must be 'max' or 'min' (one per metric), got 'most'"),
    (["accuracy", "widgets"], None, "whether a higher or a lower 'widgets' is better; give one mode per metric"),
    (None, ["max", "min"], "mode gives 2 directions but no metric is named"),
    (["accuracy", "pareto"], None, "metric 'pareto' is a column sweeper writes in results.csv, never a metric"),
])
def test_objectives_that_do_not_add_up_are_one_line_naming_the_fix(metric, mode, words):
    with pytest.raises(SweepError) as caught:
        Options.build({"metric": metric, "mode": mode}).check_ranking()
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.unit
def test_metrics_as_text_or_list_are_one_form_and_the_first_ranks():
    for metric, mode in (("accuracy,size", "max,min"), (["accuracy", "size"], ("max", "min")),
                         (" accuracy , size ", ["max", "min"])):
        opts = Options.build({"metric": metric, "mode": mode})
        assert (opts.metric, opts.mode) == (("accuracy", "size"), ("max", "min"))
        assert (opts.ranked_by, opts.ranked_mode) == ("accuracy", "max")
        assert opts.objectives == Objectives(("accuracy", "size"), ("max", "min"))
    one = Options.build({"metric": ["val_loss"]})
    assert (one.metric, one.mode, one.objectives) == ("val_loss", None, None)  # one objective: as before
    assert Options.build({"metric": "val_loss,val_accuracy"}).objectives.modes == ("min", "max")  # by their names


def test_a_grid_sweep_marks_its_front_and_every_view_shows_it(tmp_path, capsys):
    df = sweeper.sweep(sweep_fns.tradeoff, GRID, **BOTH, out=str(tmp_path), name="s")
    assert str(df.pareto.dtype) == "boolean"
    assert set(df.loc[df.pareto, "trial"]) == _front_by_hand(df) == {"lr=0_01,units=4", "lr=0_01,units=8",
                                                                     "lr=0_01,units=16"}
    assert not df.loc[df.status != "ok", "pareto"].any()  # units=0 failed: on no front
    out = capsys.readouterr().out
    assert ("sweeper: Pareto front of accuracy (max), size (min): 3 trials (no other trial is better in every "
            "objective)") in out
    shown = out.split("Pareto front of")[1].splitlines()[1:4]
    assert [line.split()[-1] for line in shown] == ["lr=0_01,units=16", "lr=0_01,units=8", "lr=0_01,units=4"]
    csv = pd.read_csv(tmp_path / "s" / "results.csv", **table.READ_CSV)
    pd.testing.assert_series_equal(csv.pareto, df.pareto)  # the CSV and the frame agree
    pd.testing.assert_series_equal(sweeper.load(tmp_path / "s").pareto, df.pareto)  # and load() of the ledger
    status = run_cli("status", str(tmp_path / "s"))
    assert "sweeper: Pareto front of accuracy (max), size (min): 3 trials" in status.stdout, status.stdout
    report = run_cli("report", str(tmp_path / "s"))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "s" / "report.html").read_text()
    assert "<h2>Pareto front: 3 trials (accuracy (max), size (min))</h2>" in page
    assert page.count('class="pareto-plot"') == 1 and page.count('class="importance" data-metric=') == 2
    assert set(analysis.figures(tmp_path / "s")) >= {"pareto"}


def test_a_later_trial_pushes_a_row_off_the_front(tmp_path):
    first = sweeper.sweep(sweep_fns.tradeoff, {"units": [4, 8], "lr": [0.1]}, **BOTH, out=str(tmp_path), name="s",
                          progress=False)
    assert first.pareto.all()  # each is best in one objective
    second = sweeper.sweep(sweep_fns.tradeoff, {"units": [4, 8], "lr": [0.1, 0.01]}, **BOTH, out=str(tmp_path),
                           name="s", progress=False)
    assert set(second.loc[second.pareto, "trial"]) == {"lr=0_01,units=4", "lr=0_01,units=8"}  # lr 0.1 beaten
    one = sweeper.sweep(sweep_fns.tradeoff, {"units": [4, 8], "lr": [0.1, 0.01]}, metric="accuracy",
                        out=str(tmp_path), name="s", progress=False)
    assert "pareto" not in one.columns and "pareto" not in sweeper.load(tmp_path / "s").columns  # one objective now


def test_a_search_of_two_objectives_runs_nsga2_resumes_and_refuses_a_pruner(tmp_path):
    import optuna

    space = {"units": sweeper.randint(1, 64), "lr": sweeper.loguniform(1e-4, 1e-1)}
    df = sweeper.sweep(sweep_fns.tradeoff, space, search="auto", trials=8, **BOTH, out=str(tmp_path), name="s",
                       progress=False)
    assert len(df) == 8 and (df.status == "ok").all()
    assert set(df.loc[df.pareto, "trial"]) == _front_by_hand(df)
    ledger = Ledger(str(tmp_path / "s"), readonly=True)
    try:
        assert ledger.facts().search == "NSGAIISampler, prune None"  # what auto chose, on record
    finally:
        ledger.close()
    more = sweeper.sweep(sweep_fns.tradeoff, space, search="auto", trials=12, **BOTH, out=str(tmp_path), name="s",
                         progress=False)
    assert len(more) == 12 and set(df.trial) <= set(more.trial)  # the study rebuilt with both values of each
    with pytest.raises(SweepError, match=r"prune='asha' cannot judge 2 objectives at once .* drop prune, or give "
                                         r"one metric"):
        sweeper.sweep(sweep_fns.tradeoff, space, search="tpe", prune="asha", trials=4, **BOTH, out=str(tmp_path))
    with pytest.raises(SweepError, match="search='cmaes' optimises one objective"):
        sweeper.sweep(sweep_fns.tradeoff, space, search="cmaes", trials=4, **BOTH, out=str(tmp_path))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert run_cli("export", str(tmp_path / "s"), "--optuna", url).returncode == 0
    study = optuna.load_study(study_name="s", storage=url)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"] and study.metric_names == ["accuracy", "size"]
    assert {t.user_attrs["trial"] for t in study.best_trials} == set(more.loc[more.pareto, "trial"])


def test_the_cli_takes_several_metrics_and_says_a_pruner_cannot_judge_them(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import tradeoff as train\n"
                                "grid = {'units': [4, 8], 'lr': [0.01, 0.1]}\n")
    done = run_cli(grid, "--metric", "accuracy,size", "--mode", "max,min", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **table.READ_CSV)
    assert set(df.loc[df.pareto, "trial"]) == {"lr=0_01,units=4", "lr=0_01,units=8"}
    space = write_grid(tmp_path, "import sweeper\nfrom sweep_fns import tradeoff as train\n"
                                 "space = {'units': sweeper.randint(1, 9), 'lr': [0.01, 0.1]}\n", name="space.py")
    bad = run_cli(space, "--search", "tpe", "--trials", "3", "--prune", "median", "--metric", "accuracy,size",
                  "--mode", "max,min", "--out", str(tmp_path / "out"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "prune='median' cannot judge 2 objectives at once" in bad.stderr


def test_the_front_is_recorded_even_when_an_ok_trial_lacks_an_objective(tmp_path):
    # units=2 comes last: a first ok trial without it stops the sweep (tests/run/test_missing_metric.py)
    df = sweeper.sweep(sweep_fns.tradeoff_partial, {"units": [4, 8, 2], "lr": [0.01]}, **BOTH, out=str(tmp_path),
                       name="s", workers=1, progress=False)
    loaded = sweeper.load(tmp_path / "s")
    assert "pareto" in loaded.columns and loaded.attrs["objectives"] is not None  # load() agrees with the CSV
    pd.testing.assert_series_equal(loaded.pareto, df.pareto)
    assert set(df.loc[df.pareto, "trial"]) == {"units=4", "units=8"}  # units=2 lacks size (lr is fixed: unnamed)


def test_an_exported_constrained_study_has_the_front_of_the_feasible_rows(tmp_path):
    import optuna

    df = sweeper.sweep(sweep_fns.tradeoff, {"units": [2, 4, 8, 16], "lr": [0.01]}, **BOTH, constraints="size<=100",
                       out=str(tmp_path), name="s", progress=False)
    assert set(df.loc[df.pareto, "trial"]) == {"units=2", "units=4", "units=8"}
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert run_cli("export", str(tmp_path / "s"), "--optuna", url).returncode == 0
    study = optuna.load_study(study_name="s", storage=url)
    assert {t.user_attrs["trial"] for t in study.best_trials} == set(df.loc[df.pareto, "trial"])  # not units=16
