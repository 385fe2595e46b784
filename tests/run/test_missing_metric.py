"""A metric that is not there, from the user's side: a misspelled metric
is caught before a sweep is wasted on it, and a Keras ``History`` with no metric named ranks
by its validation loss, saying so."""

from __future__ import annotations

import csv
import importlib.util
import os

import pytest

import sweeper
import sweep_fns
from conftest import run_cli, write_grid
from sweeper.errors import SweepError

#: A trivial train that returns a validation and a training loss; with ``hold``, x=2 runs for two
#: minutes unless it is stopped (without the stop, the sweep ends ok after them).
LOSSES = """import threading

def train(params):
    if params["x"] == 2 and params.get("hold"):
        threading.Event().wait(120)  # until the sweep stops it
    return {"val_loss": 1.0 / params["x"], "loss": 2.0 / params["x"]}

grid = {"x": [1, 2, 3]}
"""


def _rows(folder) -> list[dict[str, str]]:
    with open(os.path.join(folder, "results.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_a_misspelled_metric_is_refused_before_anything_runs(tmp_path):
    grid = write_grid(tmp_path, LOSSES)
    out = tmp_path / "out"
    done = run_cli(grid, "--out", str(out), "--metric", "val_los")
    assert done.returncode == 2, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert said == ["sweeper: error: --metric val_los: did you mean val_loss? if val_los is a metric of yours, "
                    "give --mode max|min (mode='max' or 'min')"], done.stderr
    assert not (out / "grid").exists()  # no folder, no trial
    mine = run_cli(grid, "--out", str(out), "--metric", "zebra_count")  # like no known name: the mode question
    assert mine.returncode == 2 and "give --mode max or --mode min" in mine.stderr, mine.stderr
    assert "did you mean" not in mine.stderr and not (out / "grid").exists()


@pytest.mark.unit
def test_a_misspelled_metric_from_code_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(SweepError, match=r"^--metric val_acuracy: did you mean val_accuracy\? if val_acuracy is a "
                                         r"metric of yours, give --mode max\|min"):
        sweeper.sweep(sweep_fns.scored, {"x": [1, 2, 3]}, metric="val_acuracy", out=str(tmp_path), progress=False)
    with pytest.raises(SweepError, match="did you mean val_loss"):  # several objectives: each name checked
        sweeper.sweep(sweep_fns.scored, {"x": [1, 2, 3]}, metric=["val_auc", "val_los"], out=str(tmp_path),
                      progress=False)
    assert os.listdir(tmp_path) == []


def test_a_metric_the_first_result_lacks_stops_the_sweep_after_it(tmp_path):
    grid = write_grid(tmp_path, LOSSES)
    out = tmp_path / "out"
    done = run_cli(grid, "--out", str(out), "--metric", "val_los", "--mode", "min", "--workers", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "val_los" in line]
    assert len(said) == 1, done.stderr
    assert "no metric 'val_los' in what trial" in said[0] and "returned (loss, val_loss)" in said[0], said
    assert "did you mean val_loss? run again with --metric val_loss" in said[0], said
    rows = _rows(out / "grid")
    assert [r["status"] for r in rows] == ["ok"], rows  # one trial ran, its row kept
    frame = sweeper.load(out / "grid")
    assert len(frame) == 1 and frame.attrs["metric"] is None  # a misspelling never becomes the ranking


def test_trials_running_when_the_sweep_stops_are_interrupted(tmp_path):
    grid = write_grid(tmp_path, LOSSES.replace('grid = {"x": [1, 2, 3]}', 'grid = {"x": [1, 2, 3], "hold": [True]}'))
    out = tmp_path / "out"
    done = run_cli(grid, "--out", str(out), "--metric", "val_los", "--mode", "min", "--workers", "2")
    assert done.returncode == 2 and "did you mean val_loss?" in done.stderr, done.stdout + done.stderr
    statuses = {r["param_x"]: r["status"] for r in _rows(out / "grid")}
    assert statuses == {"1": "ok", "2": "interrupted"}, statuses  # x=3 never started


def test_sweep_from_code_stops_at_the_first_result_without_its_metric(tmp_path):
    with pytest.raises(SweepError) as info:
        sweeper.sweep(sweep_fns.scored, {"x": [1, 2, 3]}, metric="val_acc", workers=1, out=str(tmp_path),
                      name="s", progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "no metric 'val_acc' in what trial" in message and "(f1, val_auc, value)" in message, message
    assert "did you mean val_auc? run again with --metric val_auc (metric='val_auc')" in message, message
    assert len(sweeper.load(tmp_path / "s")) == 1


def test_a_search_stops_at_the_first_result_without_its_metric(tmp_path):
    with pytest.raises(SweepError, match=r"no metric 'losses' in what trial .* returned \(loss\); did you mean "
                                         r"loss\? run again with --metric loss"):
        sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0, 1), "epochs": 2, "pace": 0.0},
                      search="random", trials=8, metric="losses", mode="min", workers=1, out=str(tmp_path),
                      name="q", progress=False)
    assert len(sweeper.load(tmp_path / "q", every=True)) == 1


#: Keras imported at the top, as a user's file does: the sweep's fork server imports it once,
#: before the trials, where an import inside ``train`` cost each trial's process its own.
KERAS = """import keras
import numpy as np

def train(params):
    rng = np.random.default_rng(0)
    x = rng.random((64, 4)).astype("float32")
    y = (x.sum(axis=1) > 2).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(params["units"], activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model.fit(x, y, epochs=2, batch_size=16, validation_split=0.25, verbose=0)

grid = {"units": [2, 4]}
"""


def test_a_history_with_no_metric_named_ranks_by_its_validation_loss_and_says_so(tmp_path):
    if importlib.util.find_spec("keras") is None:  # found, not imported: the test's process never loads TensorFlow
        pytest.skip("needs keras")
    grid = write_grid(tmp_path, KERAS, name="mlp.py")
    out = tmp_path / "out"
    done = run_cli(grid, "--out", str(out), "--workers", "1", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    frame = sweeper.load(out / "mlp")
    assert {"accuracy", "loss", "val_accuracy", "val_loss"} <= set(frame.columns)
    assert ("sweeper: ranking by val_loss (min), the validation loss; give --metric/--mode (metric=, mode=) to "
            "choose another") in done.stdout.splitlines(), done.stdout
    assert "sweeper: top 2 by val_loss (min):" in done.stdout, done.stdout
    status = run_cli("status", str(out / "mlp"))
    assert "best so far: val_loss = " in status.stdout and "(min)" in status.stdout, status.stdout
