"""A metric's direction is taken from its name only where
the name says it beyond doubt (a closed list; scikit-learn's ``neg_`` scores maximised), any
other name needs ``mode`` before anything runs; a constraint on a name that is both a
parameter and a metric says which it binds; a sweep whose ok trials all miss the constraints
says so; a metric named ``a,b`` can be chosen from a list."""

from __future__ import annotations

import logging

import pytest

from conftest import run_cli, write_grid
from sweeper.results.query import leaderboard_lines
from sweeper.model.constraints import parse
from sweeper.model.metrics import direction
from sweeper.store.table import dataframe
from sweeper.model.trial import Status, TrialResult


# -- the closed list of names that tell a direction ---------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("name,expected", [
    # Keras's, with where it was measured
    ("loss", "min"), ("val_loss", "min"), ("train_loss", "min"), ("test_mse", "min"), ("val_mae", "min"),
    ("mean_squared_error", "min"), ("sparse_categorical_crossentropy", "min"), ("val_auc_1", "max"),
    ("accuracy", "max"), ("val_accuracy", "max"), ("acc", "max"), ("AUC", "max"), ("val_precision", "max"),
    ("top_k_categorical_accuracy", "max"), ("r2_score", "max"), ("f1_score", "max"),
    # scikit-learn's scorers, as cross_validate names them: neg_ scores are maximised
    ("neg_mean_squared_error", "max"), ("neg_log_loss", "max"), ("test_neg_mean_absolute_error", "max"),
    ("neg_root_mean_squared_error", "max"), ("neg_brier_score", "max"), ("train_neg_log_loss", "max"),
    ("roc_auc", "max"), ("f1_macro", "max"), ("test_recall_weighted", "max"), ("balanced_accuracy", "max"),
    ("log_loss", "min"), ("score", "max"), ("test_score", "max"),
    # names that hold a known word but say nothing beyond doubt: never guessed
    ("one_minus_accuracy", None), ("1-accuracy", None), ("time_to_accuracy", None), ("accuracy_drop", None),
    ("loss_reduction", None), ("loss_improvement", None), ("reward_std", None), ("dense_1_loss", None),
    ("neg_accuracy", None), ("max_error", None), ("epochs_to_best_loss", None), ("value", None),
    ("latency", None), ("params", None), ("", None),
])
def test_a_direction_is_taken_from_a_known_name_only(name, expected):
    assert direction(name) == expected


NEG_MSE = """
grid = {"x": [1, 2, 3]}

def train(params):
    return {"neg_mean_squared_error": -float(params["x"])}  # x=1 the best: -1 is the highest
"""


def test_a_negated_scikit_learn_score_ranks_the_highest_best(tmp_path):
    done = run_cli(write_grid(tmp_path, NEG_MSE), "--metric", "neg_mean_squared_error",
                   "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    board = done.stdout.split("top 3 by neg_mean_squared_error (max):")[1].splitlines()
    assert [line.split()[0] for line in board[2:5]] == ["x=1", "x=2", "x=3"], done.stdout


UNKNOWN = """
import os
space = {"x": [1, 2, 3]}

def train(params):
    open(os.path.join(os.path.dirname(__file__), "ran"), "w").close()
    return {"one_minus_accuracy": 0.1 * params["x"], "1-accuracy": 0.1, "time_to_accuracy": 3.0}
"""


@pytest.mark.parametrize("metric", ["one_minus_accuracy", "time_to_accuracy"])
def test_a_search_on_a_name_that_says_no_direction_refuses_before_any_trial(tmp_path, metric):
    grid = write_grid(tmp_path, UNKNOWN)
    done = run_cli(grid, "--search", "tpe", "--trials", "3", "--metric", metric, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "--mode max or --mode min" in done.stderr and metric in done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "out").exists()  # nothing ran


# -- a list takes names as they are -------------------------------------------------------

COMMA = """
grid = {"x": [1, 2, 3]}
options = {"metric": ["a,b"], "mode": "max"}

def train(params):
    return {"a": -float(params["x"]), "b": 0.0, "a,b": float(params["x"])}  # by a,b: x=3 the best
"""


def test_a_metric_named_with_a_comma_is_chosen_from_a_list(tmp_path):
    done = run_cli(write_grid(tmp_path, COMMA), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    board = done.stdout.split("top 3 by a,b (max):")[1].splitlines()
    assert board[2].split()[0] == "x=3", done.stdout
    status = run_cli("status", str(tmp_path / "out" / "grid"))
    assert "best so far: a,b = 3 (max): x=3" in status.stdout, status.stdout + status.stderr


# -- a name both a parameter and a metric -------------------------------------------------

def _ok(params, metrics):
    return TrialResult(trial_id="t1", name="t", index=0, params=params, status=Status.OK, metrics=metrics)


@pytest.mark.unit
def test_a_constraint_on_a_name_both_parameter_and_metric_says_which_it_binds(caplog):
    both = _ok({"units": 64}, {"units": 10.0})  # the parameter asked for 64; the model used 10
    judge = parse("units<=32")
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        assert judge.feasible(both) is True  # the metric, as documented
        assert judge.feasible(both) is True
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "'units' is both a parameter and a metric" in said[0] and "param_units" in said[0]
    assert parse("param_units<=32").feasible(both) is False  # the parameter, by its column's name
    assert parse({"param_units": ("<=", 64)}).feasible(both) is True
    assert parse(lambda row: row["param_units"] - 32).feasible(both) is False
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        assert parse("units<=32").feasible(_ok({"units": 64}, {"loss": 1.0})) is False  # no metric: the parameter
    assert not caplog.records


BOTH = """
grid = {"units": [16, 64]}
options = {"constraints": "units<=32", "metric": "loss"}

def train(params):
    return {"loss": 1.0 / params["units"], "units": 8.0}  # units used, under 32 in both trials
"""


def test_a_sweep_says_once_that_a_constraint_binds_the_metric(tmp_path):
    done = run_cli(write_grid(tmp_path, BOTH), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert out.count("'units' is both a parameter and a metric") == 1, out
    assert "top 2 by loss (min):" in done.stdout  # both feasible: bound on the metric


# -- every ok trial infeasible ------------------------------------------------------------

@pytest.mark.unit
def test_a_ranking_whose_ok_trials_all_miss_the_constraints_says_so():
    rows = [TrialResult(trial_id=f"t{i}", name=f"x={i}", index=i, params={"x": i}, status=Status.OK,
                        metrics={"loss": float(i)}, feasible=False) for i in range(3)]
    lines = leaderboard_lines(dataframe(rows), "loss", "min")
    assert lines[1] == "  3 trials finished ok but none met the constraints"
    failed = [TrialResult(trial_id="t9", name="x=9", index=0, params={"x": 9}, status=Status.ERROR,
                          metrics={"loss": 1.0})]
    assert leaderboard_lines(dataframe(failed), "loss", "min")[1] == "  no trial finished ok"


INFEASIBLE = """
grid = {"x": [1, 2, 3]}
options = {"constraints": "loss<=0", "metric": "loss"}

def train(params):
    return {"loss": float(params["x"])}
"""


def test_a_sweep_whose_ok_trials_all_miss_the_constraints_says_so_everywhere(tmp_path):
    done = run_cli(write_grid(tmp_path, INFEASIBLE), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 ok" in done.stdout and "no trial finished ok" not in done.stdout, done.stdout
    assert "3 trials finished ok but none met the constraints" in done.stdout, done.stdout
    folder = str(tmp_path / "out" / "grid")
    status = run_cli("status", folder)
    assert "3 trials finished ok but none met the constraints" in status.stdout, status.stdout + status.stderr
    report = run_cli("report", folder)
    assert "3 trials finished ok but none met the constraints" in report.stdout, report.stdout + report.stderr
    page = (tmp_path / "out" / "grid" / "report.html").read_text()
    assert "No trial finished ok" not in page and "3 trials finished ok but none met the constraints" in page


# -- export --optuna never guesses the study's direction ----------------------------------

PICKED = """
grid = {"x": [1, 2]}

def train(params):
    return {"value": float(params["x"])}
"""


def test_export_of_a_metric_that_says_no_direction_asks_for_mode(tmp_path):
    optuna = pytest.importorskip("optuna")
    done = run_cli(write_grid(tmp_path, PICKED), "--out", str(tmp_path / "out"))  # the first metric, picked
    assert done.returncode == 0 and "not ranked: 'value'" in done.stdout, done.stdout + done.stderr
    folder, url = str(tmp_path / "out" / "grid"), f"sqlite:///{tmp_path / 'study.db'}"
    asked = run_cli("export", folder, "--optuna", url)
    assert asked.returncode == 2 and asked.stderr.count("\n") == 1 and "--mode max" in asked.stderr, asked.stderr
    given = run_cli("export", folder, "--optuna", url, "--mode", "max")
    assert given.returncode == 0, given.stdout + given.stderr
    study = optuna.load_study(study_name="grid", storage=url)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE and study.best_value == 2.0
