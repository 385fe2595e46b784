"""Adaptive search: Optuna's samplers and pruners driving a fresh process per trial.

The synthetic ``descent`` (tests/sweep_fns.py) trains for 20 short epochs; points with
x >= 0.5 are clearly bad (their loss stays above 5), the others' loss falls. No TensorFlow.
"""

from __future__ import annotations

import os
import sys

import optuna
import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import run_cli, write_grid
from sweeper.model.trial import Status

SPACE = {"x": sweeper.uniform(0.0, 1.0), "pace": 0.04}
#: For one worker: its trials run one after another and, with a pruner, each report waits for
#: the pruner's verdict, so what is pruned (and what the sampler is told) does not depend on how
#: long an epoch takes; no epoch waits.
ONE_AT_A_TIME = {**SPACE, "pace": 0.0}


class Recording(optuna.samplers.RandomSampler):
    """A seeded random sampler that notes every trial the study is told about."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.told: list[tuple[dict, str]] = []

    def after_trial(self, study, trial, state, values):
        self.told.append((dict(trial.params), state.name))
        super().after_trial(study, trial, state, values)


def _search(tmp_path, name, space=SPACE, **options):
    opts = dict(search="tpe", trials=10, prune="median", metric="loss", workers=2, out=str(tmp_path),
                name=name, progress=False)
    opts.update(options)
    return sweeper.sweep(sweep_fns.descent, space, **opts)


def test_bad_points_are_pruned_early_and_the_study_hears_every_trial(tmp_path):
    sampler = Recording(seed=0)
    df = _search(tmp_path, "s", search=sampler, trials=12)
    assert len(df) == 12 and set(df.status) <= {"ok", "pruned"}, df[["status", "error"]]
    pruned = df[df.status == "pruned"]
    # stopped well before the 20th epoch (one running while the pruner's first five
    # trials completed may be judged, and stopped, late)
    assert (pruned.epoch_reached <= 10).sum() >= 2, df[["param_x", "status", "epoch_reached", "error"]]
    assert (pruned.param_x >= 0.5).all()  # only bad points were stopped
    assert (pruned.loss >= 5).all() and pruned.error.str.startswith("pruned by median at epoch").all()
    assert (df[df.status == "ok"].epoch_reached == 20).all()
    told = {round(p["x"], 12): state for p, state in sampler.told}
    assert told == {round(x, 12): {"ok": "COMPLETE", "pruned": "PRUNED"}[s]
                    for x, s in zip(df.param_x, df.status)}
    history = pd.read_csv(tmp_path / "s" / "history.csv")
    last = history.groupby("trial").epoch.max()
    assert (last[pruned.trial].values == pruned.epoch_reached.values).all()  # where they stopped


def test_the_same_seed_gives_the_same_points_with_one_worker(tmp_path):
    a = _search(tmp_path, "a", ONE_AT_A_TIME, workers=1, trials=6, seed=5, prune=None)
    b = _search(tmp_path, "b", ONE_AT_A_TIME, workers=1, trials=6, seed=5, prune=None)
    c = _search(tmp_path, "c", ONE_AT_A_TIME, workers=1, trials=6, seed=6, prune=None)
    assert a.param_x.tolist() == b.param_x.tolist()
    assert a.param_x.tolist() != c.param_x.tolist()
    assert (a.seed == b.seed).all()  # trial seeds from the sweep's seed and the id


def test_a_resumed_search_keeps_its_rows_and_runs_up_to_the_new_count(tmp_path):
    first = _search(tmp_path, "r", ONE_AT_A_TIME, trials=6, workers=1)
    second = _search(tmp_path, "r", ONE_AT_A_TIME, trials=10, workers=1)
    assert len(second) == 10
    kept = second.set_index("trial_id").loc[first.trial_id]
    cols = ["status", "param_x", "loss", "started_at", "duration_s", "epoch_reached"]
    pd.testing.assert_frame_equal(kept[cols].reset_index(drop=True), first[cols].reset_index(drop=True))
    new = second[~second.trial_id.isin(first.trial_id)]
    assert len(new) == 4 and (new.started_at > first.started_at.max()).all()
    third = _search(tmp_path, "r", ONE_AT_A_TIME, trials=10, workers=1)
    pd.testing.assert_frame_equal(third, second)  # nothing more to run


def test_the_cli_flags_search_a_space_and_pruned_is_no_failure(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import descent as train\nimport sweeper\n"
                                "space = {'x': sweeper.uniform(0, 1), 'pace': 0.04}\n")
    done = run_cli(grid, "--search", "tpe", "--trials", "10", "--prune", "median", "--metric", "loss",
                   "--workers", "2", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert len(df) == 10 and set(df.status) <= {"ok", "pruned"}
    if (df.status == "pruned").any():
        assert f"{(df.status == 'pruned').sum()} pruned" in done.stdout
    assert not Status.PRUNED.retryable and Status.PRUNED.succeeded


def test_a_grid_file_says_search_trials_and_prune_itself(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import descent as train\nimport sweeper\n"
                                "space = {'x': sweeper.uniform(0, 1), 'pace': 0.02}\n"
                                "search = 'random'\ntrials = 4\nprune = 'asha'\n"
                                "options = {'metric': 'loss'}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "4 of 4 trials on record" in done.stdout


@pytest.mark.parametrize("body,flags,words", [
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--search", "bogus", "--trials", "3", "--metric", "loss"],
     "search is 'bogus'; give one of auto, tpe, nsga2, random"),
    ("import scipy.stats\nspace = {'x': scipy.stats.uniform(0, 1)}\n",
     ["--search", "tpe", "--trials", "3", "--metric", "loss"], "space['x'] is"),
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--search", "tpe", "--trials", "3", "--metric", "widget"],
     "whether a higher or a lower 'widget' is better"),
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--search", "tpe", "--trials", "3"], "needs the metric"),
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--search", "tpe", "--metric", "loss"], "needs trials = N"),
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--trials", "3"], "neither samples = N nor a search"),
    ("grid = {'x': [1, 2]}\n", ["--prune", "median"], "trials and prune go with a search"),
    ("space = {'x': [[1, 2], [3]]}\n", ["--search", "tpe", "--trials", "3", "--metric", "loss"],
     "space['x'] lists [1, 2]; a search chooses among numbers"),
    ("space = {'x': []}\n", ["--search", "tpe", "--trials", "3", "--metric", "loss"],
     "space['x'] is an empty list"),
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--search", "tpe", "--trials", "3", "--metric", "loss",
                                                 "--prune", "asha(min_res=2)"],
     "asha takes no min_res; it takes min_resource, reduction_factor"),
    ("space = {'x': sweeper.uniform(0, 1)}\n", ["--search", "tpe", "--trials", "3", "--metric", "loss",
                                                 "--prune", "patient(asha)"], "patient needs patience=N"),
])
def test_bad_search_input_is_one_line_and_exit_2(tmp_path, body, flags, words):
    grid = write_grid(tmp_path, f"from sweep_fns import descent as train\nimport sweeper\n{body}")
    done = run_cli(grid, *flags, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out" / "grid" / "results.csv").exists()


def test_command_trials_are_pruned_from_their_epoch_lines(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(
        "import json, sys, time\n"
        "x = float(sys.argv[1])\n"
        "for epoch in range(1, 21):\n"
        "    time.sleep(0.04)\n"
        "    loss = (1 + x) / epoch if x < 0.5 else 5 + x\n"
        "    print(json.dumps({'epoch': epoch, 'loss': loss}), flush=True)\n"
        "print(json.dumps({'loss': loss}))\n")
    df = sweeper.sweep(f"{sys.executable} {script} {{x}}", {"x": sweeper.uniform(0, 1)}, search="random",
                       trials=10, prune="median", metric="loss", seed=1, workers=2, out=str(tmp_path),
                       name="cmd", progress=False)
    assert set(df.status) <= {"ok", "pruned"} and (df.status == "pruned").any(), df[["status", "error"]]
    assert (df[df.status == "pruned"].epoch_reached < 20).all()


@pytest.mark.unit
def test_a_search_dry_run_says_what_it_would_search(tmp_path):
    plan = _search(tmp_path, "d", dry_run=True)
    assert len(plan) == 0
    assert not os.path.exists(tmp_path / "d")


@pytest.mark.slow
def test_the_keras_example_searches_and_prunes(tmp_path):
    """experiments/digits_search.py as a user runs it, fewer trials: real Keras models, TPE,
    ASHA stopping some trials' processes early. Four trials show both outcomes, as eight did:
    the first two start together, before any trial has finished (until then ASHA's
    automatic min_resource prunes nothing), and finish; the next two meet their epochs at
    ASHA's rungs, and the sweep's seed (0) gives them rates under 3e-4, far behind. Each
    further trial (one more pruned) cost 1.5 CPU s."""
    from conftest import ROOT

    example = os.path.join(ROOT, "experiments", "digits_search.py")
    done = run_cli(example, "--trials", "4", "--workers", "2", "--out", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "digits_search" / "results.csv")
    assert len(df) == 4 and set(df.status) <= {"ok", "pruned"}, df[["status", "error"]]
    assert (df.status == "ok").any() and (df.status == "pruned").any(), df[["status", "epoch_reached"]]
    assert (df[df.status == "ok"].epoch_reached == 20).all()
    assert (df[df.status == "pruned"].epoch_reached < 20).all()
    assert set(df.columns) >= {"val_accuracy", "val_loss", "accuracy", "loss", "epoch_reached"}
    assert df.loc[df.status == "ok", "val_accuracy"].max() > 0.9
    assert "pruned" in done.stdout


def test_failed_trials_of_a_search_run_again_on_resume_and_are_told(tmp_path):
    """As in any sweep, a re-run runs failed trials again (their points asked anew, so the
    pruner watches them and the study hears how they end); they count toward trials once."""
    space = {**SPACE, "fail_once": True}
    first = sweeper.sweep(sweep_fns.descent, space, search="random", trials=4, metric="loss", workers=2,
                          out=str(tmp_path), name="f", progress=False)
    assert (first.status == "error").all()
    sampler = Recording(seed=0)
    second = sweeper.sweep(sweep_fns.descent, space, search=sampler, trials=4, metric="loss", workers=2,
                           out=str(tmp_path), name="f", progress=False)
    assert len(second) == 4 and set(second.trial_id) == set(first.trial_id)
    assert (second.status == "ok").all(), second[["status", "error"]]
    assert sorted(state for _, state in sampler.told) == ["COMPLETE"] * 4


@pytest.mark.parametrize("before", ["grid", "fixed"])
def test_a_search_counts_only_rows_of_its_own_space(tmp_path, before):
    """Rows another grid or space left in the folder (x outside the space, or another fixed
    value) are not the search's: they are not counted toward trials nor ranked."""
    first = {"grid": 'grid = {"x": [5.0, 6.0, 7.0, 8.0], "epochs": 2}',
             "fixed": 'space = {"x": sweeper.uniform(0, 1), "epochs": 3}\nsearch = "random"\ntrials = 2'}[before]
    body = 'import sweeper\nfrom sweep_fns import descent as train\noptions = {"metric": "loss", "mode": "min"}\n'
    grid = write_grid(tmp_path, body + first + "\n")
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    write_grid(tmp_path, body + 'space = {"x": sweeper.uniform(0, 1), "epochs": 2}\nsearch = "random"\ntrials = 3\n')
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 of 3 trials on record" in r.stdout and "(3 run this time" in r.stdout, r.stdout
    assert "not in this search's space" in r.stdout, r.stdout
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert len(df) == 3 and df.param_x.between(0, 1).all() and (df.param_epochs == 2).all(), df


@pytest.mark.unit
@pytest.mark.parametrize("text, cls, attrs", [
    ("asha", optuna.pruners.SuccessiveHalvingPruner, {"_min_resource": None, "_reduction_factor": 4}),
    ("asha(min_resource=2, reduction_factor=3)", optuna.pruners.SuccessiveHalvingPruner,
     {"_min_resource": 2, "_reduction_factor": 3}),
    ("asha(grace_period=3)", optuna.pruners.SuccessiveHalvingPruner, {"_min_resource": 3}),  # Ray Tune's word
    ("hyperband(min_resource=2, max_resource=20, reduction_factor=2)", optuna.pruners.HyperbandPruner,
     {"_min_resource": 2, "_max_resource": 20, "_reduction_factor": 2}),
    ("median(n_startup_trials=3, n_warmup_steps=2)", optuna.pruners.MedianPruner,
     {"_n_startup_trials": 3, "_n_warmup_steps": 2}),
    ("percentile(percentile=25.0)", optuna.pruners.PercentilePruner, {"_percentile": 25.0}),
    ("wilcoxon(p_threshold=0.05)", optuna.pruners.WilcoxonPruner, {"_p_threshold": 0.05}),
    ("patient(asha(min_resource=2), patience=3)", optuna.pruners.PatientPruner, {"_patience": 3}),
])
def test_a_pruner_is_named_with_optunas_keywords(text, cls, attrs):
    from sweeper.search.pruners import pruner

    built = pruner(text)
    assert type(built) is cls
    assert {k: getattr(built, k) for k in attrs} == attrs
    if cls is optuna.pruners.PatientPruner:
        assert isinstance(built._wrapped_pruner, optuna.pruners.SuccessiveHalvingPruner)
        assert built._wrapped_pruner._min_resource == 2


@pytest.mark.unit
@pytest.mark.parametrize("text, words", [
    ("asha(2)", "asha takes keywords only"),
    ("asha(min_resource=x)", "min_resource= must be a number"),
    ("asha(reduction_factor=1)", "SuccessiveHalvingPruner refused it: The value of `reduction_factor` is 1"),
    ("asha(", "not a pruner's name or call"),
    ("bohb", "no pruner 'bohb'; give one of median, percentile, asha, hyperband, patient, wilcoxon"),
    ("patient(asha, median, patience=1)", "patient wraps one pruner"),
    ("asha(grace_period=2, min_resource=3)", "grace_period and min_resource are the same keyword"),
    # accepted by Optuna's constructors, refused only when pruning: found before anything runs
    ("hyperband(reduction_factor=2.5)", "reduction_factor must be a whole number, got 2.5"),
    ("patient(patience=1.5)", "patience must be a whole number, got 1.5"),
    ("hyperband(min_resource=0)", "Optuna's pruner fails with it (ZeroDivisionError"),
])
def test_a_pruner_text_that_is_wrong_says_what_to_write(text, words):
    from sweeper.search.pruners import pruner

    with pytest.raises(sweeper.SweepError) as caught:
        pruner(text)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_asha_judges_from_its_minimum_resource_on(tmp_path):
    """ASHA told min_resource=4, reduction_factor=2 judges at epochs 4, 8 and 16 only (its
    rungs), never at Optuna's default first rung, epoch 1; bad points are stopped there."""
    df = _search(tmp_path, "asha", search="random", trials=12, prune="asha(min_resource=4, reduction_factor=2)",
                 seed=3)
    pruned = df[df.status == "pruned"]
    assert len(pruned) >= 2, df[["param_x", "status", "epoch_reached"]]
    assert set(pruned.epoch_reached) <= {4, 8, 16}, pruned[["param_x", "epoch_reached", "error"]]
    assert pruned.error.str.startswith("pruned by asha(min_resource=4, reduction_factor=2) at epoch").all()
