"""Population-based training written the Keras way (docs/pbt.md's snippet, as a user pastes
it into a grid file): the learning rate each epoch trained with is the one ``history.csv``
records for it, whatever ``BackupAndRestore`` put back into the optimizer after a copy; and
a rate that something else changes fails the member in one line saying what to do."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

#: Appended to the grid file by the test, never by a user: a callback put first in every
#: ``fit`` that writes down the optimizer's rate at each epoch's first batch and at its end.
OBSERVED = """
import json as _json, os as _os


class _Observe(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            self.first = float(self.model.optimizer.learning_rate)

    def on_epoch_end(self, epoch, logs=None):
        with open(_os.path.join(sweeper.current_trial().dir, "observed.jsonl"), "a") as f:
            f.write(_json.dumps({"epoch": epoch + 1, "first": self.first,
                                 "end": float(self.model.optimizer.learning_rate)}) + "\\n")


_fit = keras.Model.fit


def _observed(self, *args, callbacks=(), **kwargs):
    return _fit(self, *args, callbacks=[_Observe(), *callbacks], **kwargs)


keras.Model.fit = _observed
"""


def snippet(swapped: bool = False) -> str:
    """The first Python block of docs/pbt.md, as written, or with sweeper's callback put before
    ``BackupAndRestore`` (``swapped``)."""
    text = open(os.path.join(ROOT, "docs", "pbt.md"), encoding="utf-8").read()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    if swapped:
        written = ("callbacks=[keras.callbacks.BackupAndRestore(ckpt),  # saved before the report\n"
                   "                                sweeper.keras.Report()]")
        assert written in code, code
        code = code.replace(written, "callbacks=[sweeper.keras.Report(), keras.callbacks.BackupAndRestore(ckpt)]")
    return code


def trained_as_recorded(folder: Path, epochs: int, scale: float = 1.0,
                        param: str | dict[str, str] = "param_lr") -> pd.DataFrame:
    """Each member trained each epoch once, with ``scale`` times the rate ``history.csv`` records
    for it (at the epoch's first batch and at its end) in the column ``param`` (or
    ``param[member]``); the history."""
    hist = pd.read_csv(folder / "history.csv")
    df = pd.read_csv(folder / "results.csv")
    for _, row in df.iterrows():
        with open(folder / "trials" / row["trial"] / "observed.jsonl") as f:
            seen = [json.loads(line) for line in f]
        assert [s["epoch"] for s in seen] == list(range(1, epochs + 1)), (row["trial"], seen)  # none twice
        by_epoch = {s["epoch"]: s for s in seen}
        mine = hist[hist.trial_id == row["trial_id"]]
        assert list(mine["epoch"]) == list(range(1, epochs + 1))
        for _, epoch in mine.iterrows():
            for when in ("first", "end"):
                column = param if isinstance(param, str) else param[row["trial"]]
                assert by_epoch[epoch.epoch][when] == pytest.approx(scale * epoch[column], rel=1e-6), (
                    row["trial"], epoch.epoch, when, epoch.copied_from)
    return hist


def needs_sklearn() -> None:
    """Skip where scikit-learn (the snippet's digits) is not installed; found, not imported
    (importing it here cost the test's own process a second of CPU for nothing)."""
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("the docs snippet needs scikit-learn")


def test_the_docs_snippet_trains_each_epoch_with_the_rate_history_records(tmp_path):
    """The snippet as pasted, with two members (of its eight): synch, the bottom one copies
    the top one at each decision (epochs 4 and 8) and the other resumes from its own
    checkpoint, as with more members; what is checked holds for each member, whatever their
    number (each member's three segments cost some 6 CPU s: four members cost 12 more)."""
    needs_sklearn()
    grid = tmp_path / "grid.py"
    grid.write_text(snippet() + OBSERVED)
    out = tmp_path / "out"
    done = run_cli(str(grid), "--out", str(out), "--workers", "2", "--pbt", "population=2", "--pbt", "synch=true",
                   "--quiet", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(out / "grid" / "results.csv")
    assert list(df["status"]) == ["ok"] * 2
    hist = trained_as_recorded(out / "grid", 12)
    assert hist["copied_from"].notna().sum() >= 2  # synch: a bottom member copied at each decision


def test_report_before_backup_and_restore_trains_no_epoch_twice(tmp_path):
    """The pause comes after every callback's epoch end, so BackupAndRestore saved the epoch the
    member paused at, wherever sweeper's callback stands in the list."""
    needs_sklearn()
    grid = tmp_path / "grid.py"
    grid.write_text(snippet(swapped=True) + OBSERVED)
    out = tmp_path / "out"
    done = run_cli(str(grid), "--out", str(out), "--workers", "2", "--pbt", "population=2", "--pbt", "synch=true",
                   "--quiet", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(out / "grid" / "results.csv")
    assert list(df["status"]) == ["ok"] * 2 and list(df["segments"]) == [3, 3]
    hist = trained_as_recorded(out / "grid", 12)
    assert hist["copied_from"].notna().sum() == 2  # the bottom member copied the top one at epochs 4 and 8


#: A small model whose optimizer ``train`` compiles from a parameter, scaled: member_0 from
#: ``rate``, member_1 from ``lr``, each beside the other in the space.
SCALED = """import keras, numpy as np, sweeper, sweeper.keras

space = {"rate": sweeper.loguniform(1e-3, 1e-1), "lr": sweeper.loguniform(1e-3, 1e-1)}
options = {"search": "pbt", "metric": "loss", "mode": "min",
           "pbt": {"population": 2, "interval": 2, "synch": True}}
NAMES = {"member_0": "rate", "member_1": "lr"}


def train(params):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(params[NAMES[sweeper.current_trial().name]] * 4, momentum=0.5), "mse")
    ckpt = sweeper.current_trial().checkpoint
    return model.fit(x, x[:, :1], epochs=6, verbose=0,
                     callbacks=[keras.callbacks.BackupAndRestore(ckpt), sweeper.keras.Report()])
"""


def test_the_rate_train_compiled_is_the_one_each_epoch_trains_with_whatever_its_name(tmp_path):
    """A member compiles four times its parameter: after a restore of its own checkpoint or a
    copy of the other's (which holds the other's rate), each epoch trains with four times the
    recorded value. One sweep for both names (a sweep's fork server imports TensorFlow, 5 CPU
    s): the member compiled from ``lr`` fails a mapping of the parameter named ``lr`` to the
    rate (it would put back a quarter of it), and the one compiled from ``rate``, which has an
    ``lr`` beside it, fails any mapping by name."""
    grid = tmp_path / "grid.py"
    grid.write_text(SCALED + OBSERVED)
    out = tmp_path / "out"
    done = run_cli(str(grid), "--out", str(out), "--workers", "2", "--quiet", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    hist = trained_as_recorded(out / "grid", 6, scale=4.0, param={"member_0": "param_rate", "member_1": "param_lr"})
    assert hist["copied_from"].notna().sum() == 2


#: A member whose rate a callback halves each epoch, which sweeper's callback was not told.
HALVED = """import keras, numpy as np, sweeper, sweeper.keras

space = {"lr": sweeper.loguniform(1e-3, 1e-1)}
options = {"search": "pbt", "metric": "loss", "mode": "min", "pbt": {"population": 2, "interval": 2}}


def train(params):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(params["lr"]), "mse")
    halve = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr / 2)
    ckpt = sweeper.current_trial().checkpoint
    return model.fit(x, x[:, :1], epochs=3, verbose=0,
                     callbacks=[keras.callbacks.BackupAndRestore(ckpt), halve, sweeper.keras.Report()])
"""


def test_a_rate_something_else_changes_fails_the_member_in_one_line(tmp_path):
    """(Declared, ``Report(free=["learning_rate"])``, nothing fails: the sweep of
    :func:`halved_and_stopped`, whose callback halves the rate as here.)"""
    grid = tmp_path / "grid.py"
    grid.write_text(HALVED)
    done = run_cli(str(grid), "--out", str(tmp_path / "out"), "--workers", "2", "--quiet", timeout=300)
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert done.returncode != 0 and set(df["status"]) == {"error"}, done.stdout + done.stderr
    for error in df["error"]:
        assert "something changed it" in error and "Report(free=['learning_rate'])" in error and "\n" not in error, (
            error)
        assert "epoch 2 trained with the optimizer's learning_rate" in error  # 1: Report put it back after the halving


#: Report outside a sweep, in a fresh process (Keras never enters the test's own): for each
#: optimizer, a checkpoint of one epoch at rate 0.5 restored into the same model compiled with
#: rate 0.05 (a parameter named ``rate``), Report before BackupAndRestore; the rate the second
#: epoch trained with.
HELD = """import os, shutil, sys, numpy as np, keras, sweeper.keras
from sweeper.child import context
from sweeper.model import contract
from sweeper.model.trial import TrialSpec

x = np.ones((8, 2), "float32")


class Seen(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.rate = float(self.model.optimizer.learning_rate)


def fit(make, rate, epochs, scheduled):
    env = {contract.SCHEDULED: "1"} if scheduled else {}
    context.set_current(TrialSpec("t1", "member_0", 0, {"rate": rate}, 0, sys.argv[1], env=env))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(make(rate), "mse")
    seen = Seen()
    model.fit(x, x[:, :1], epochs=epochs, verbose=0, callbacks=[
        seen, sweeper.keras.Report(), keras.callbacks.BackupAndRestore(os.path.join(sys.argv[1], "backup"))])
    return seen.rate


def second_epoch(make, scheduled=True):
    shutil.rmtree(os.path.join(sys.argv[1], "backup"), ignore_errors=True)
    try:
        fit(make, 0.5, 2, scheduled)  # its checkpoint after epoch 1, at rate 0.5 (stopped there)
    except KeyboardInterrupt:
        pass
    return fit(make, 0.05, 2, scheduled)


class StopAfterOne(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0 and context.current_trial().params["rate"] == 0.5:
            raise KeyboardInterrupt


_fit = keras.Model.fit
keras.Model.fit = lambda self, *a, callbacks=(), **k: _fit(self, *a, callbacks=[*callbacks, StopAfterOne()], **k)
print("compiled", second_epoch(lambda r: keras.optimizers.SGD(r)))
print("unscheduled", second_epoch(lambda r: keras.optimizers.SGD(r), scheduled=False))
print("momentum", second_epoch(lambda r: keras.optimizers.SGD(r * 4, momentum=0.9)))
print("loss scaled", second_epoch(lambda r: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(r))))
print("schedule", second_epoch(lambda r: keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(r, 1, 0.5))))
"""


def test_report_holds_the_optimizer_as_compiled_after_a_restore_and_only_in_population_based_training(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HELD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    said = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines() if line.split(" ")[0] in (
        "compiled", "unscheduled", "momentum", "loss", "schedule"))
    assert float(said["unscheduled"]) == pytest.approx(0.5)  # as restored: any other sweep's Report only reports
    assert float(said["compiled"]) == pytest.approx(0.05)  # put back after the restore's 0.5, whatever its name
    assert float(said["momentum"]) == pytest.approx(0.2)  # four times the parameter, as train compiled it
    assert float(said["loss scaled"]) == pytest.approx(0.05)  # mixed precision: the inner optimizer's
    assert float(said["schedule"]) == pytest.approx(0.05 * 0.5)  # a schedule: the one compiled, at the restored step


#: member_0's fit stops after epoch 2, a decision's epoch (as EarlyStopping would), its callback
#: after sweeper's (which has heard the pause by then); each member's rate a callback halves
#: each epoch, declared to sweeper's callback (``free``).
STOPS = """import keras, numpy as np, sweeper, sweeper.keras

space = {"lr": sweeper.loguniform(1e-3, 1e-1)}
options = {"search": "pbt", "metric": "loss", "mode": "min", "pbt": {"population": 2, "interval": 2}}


class Stop(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == 2 and sweeper.current_trial().name == "member_0":
            self.model.stop_training = True


def train(params):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(params["lr"]), "mse")
    halve = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr / 2)
    ckpt = sweeper.current_trial().checkpoint
    return model.fit(x, x[:, :1], epochs=6, verbose=0,
                     callbacks=[keras.callbacks.BackupAndRestore(ckpt), halve,
                                sweeper.keras.Report(free=["learning_rate"]), Stop()])
"""


@pytest.fixture(scope="module")
def halved_and_stopped(tmp_path_factory):
    """The sweep of ``STOPS``, run once for the two tests below (each sweep's fork server
    imports TensorFlow: 5 CPU s): its CompletedProcess and folder."""
    tmp_path = tmp_path_factory.mktemp("stops")
    grid = tmp_path / "grid.py"
    grid.write_text(STOPS)
    done = run_cli(str(grid), "--out", str(tmp_path / "out"), "--workers", "2", "--quiet", timeout=300)
    return done, tmp_path / "out" / "grid"


def test_a_rate_a_callback_changes_on_purpose_fails_nothing_once_declared(halved_and_stopped):
    done, folder = halved_and_stopped
    df = pd.read_csv(folder / "results.csv")
    assert done.returncode == 0 and list(df["status"]) == ["ok", "ok"], done.stdout + done.stderr


def test_a_member_whose_fit_stops_at_a_decisions_epoch_finishes_there(halved_and_stopped):
    done, folder = halved_and_stopped
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(folder / "results.csv").set_index("trial")
    assert list(df["status"]) == ["ok", "ok"]
    assert df.loc["member_0", "epoch_reached"] == 2
    log = (folder / "trials" / "member_0" / "log.txt").read_text()
    assert log.count("=== sweeper: trial") == 1  # one process: never paused, never resumed
    assert df.loc["member_1", "epoch_reached"] == 6
