"""Population-based training written the Keras way (docs/pbt.md's snippet, as a user pastes
it into a grid file): the learning rate each epoch trained with is the one ``history.csv``
records for it, whatever ``BackupAndRestore`` put back into the optimizer after a copy; and
a rate that something else changes fails the member in one line saying what to do."""

from __future__ import annotations

import json
import os
import re

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


def snippet() -> str:
    """The first Python block of docs/pbt.md, as written."""
    text = open(os.path.join(ROOT, "docs", "pbt.md"), encoding="utf-8").read()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_docs_snippet_trains_each_epoch_with_the_rate_history_records(tmp_path):
    pytest.importorskip("sklearn")
    grid = tmp_path / "grid.py"
    grid.write_text(snippet() + OBSERVED)
    out = tmp_path / "out"
    done = run_cli(str(grid), "--out", str(out), "--workers", "2", "--pbt", "population=4", "--pbt", "synch=true",
                   "--quiet", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    hist = pd.read_csv(out / "grid" / "history.csv")
    df = pd.read_csv(out / "grid" / "results.csv")
    assert list(df["status"]) == ["ok"] * 4
    assert hist["copied_from"].notna().sum() >= 2  # synch: a bottom member copied at each decision
    for _, row in df.iterrows():
        seen = {}
        with open(out / "grid" / "trials" / row["trial"] / "observed.jsonl") as f:
            for line in f:
                item = json.loads(line)
                seen[item["epoch"]] = item  # an epoch trained again (a resume) counts as last trained
        mine = hist[hist.trial_id == row["trial_id"]]
        assert list(mine["epoch"]) == list(range(1, 13))
        for _, epoch in mine.iterrows():
            for when in ("first", "end"):
                assert seen[epoch.epoch][when] == pytest.approx(epoch.param_lr, rel=1e-6), (
                    row["trial"], epoch.epoch, when, epoch.copied_from)


#: A member whose rate a callback halves each epoch (``{report}``: how it builds sweeper's callback).
HALVED = """import keras, numpy as np, sweeper, sweeper.keras

space = {{"lr": sweeper.loguniform(1e-3, 1e-1)}}
options = {{"search": "pbt", "metric": "loss", "mode": "min", "pbt": {{"population": 2, "interval": 2}}}}


def train(params):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(params["lr"]), "mse")
    halve = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr / 2)
    ckpt = sweeper.current_trial().checkpoint
    return model.fit(x, x[:, :1], epochs=3, verbose=0,
                     callbacks=[keras.callbacks.BackupAndRestore(ckpt), halve, {report}])
"""


@pytest.mark.parametrize("report, says", [
    ("sweeper.keras.Report()", "something changed the rate"),
    ("sweeper.keras.Report(optimizer={'lr': None})", None),  # declared: lr is not the optimizer's rate
])
def test_a_rate_something_else_changes_fails_the_member_in_one_line_unless_declared(tmp_path, report, says):
    grid = tmp_path / "grid.py"
    grid.write_text(HALVED.format(report=report))
    done = run_cli(str(grid), "--out", str(tmp_path / "out"), "--workers", "2", "--quiet", timeout=300)
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    if says is None:
        assert done.returncode == 0 and list(df["status"]) == ["ok", "ok"], done.stdout + done.stderr
        return
    assert done.returncode != 0 and set(df["status"]) == {"error"}, done.stdout + done.stderr
    for error in df["error"]:
        assert says in error and "Report(optimizer={'lr': None})" in error and "\n" not in error, error
        assert "epoch 2 trained with the optimizer's learning_rate" in error  # 1: Report set it after the halving


#: Report's mapping, tried in a fresh process (Keras never enters the test's own): a member's
#: parameters set on an SGD optimizer compiled with other values, then one its Adam lacks.
MAPPED = """import os, sys, numpy as np, keras, sweeper.keras
from sweeper.child import context
from sweeper.model import contract
from sweeper.model.outcome import TrialFailed
from sweeper.model.trial import TrialSpec

params = {"lr": 0.05, "momentum": 0.7}
context.set_current(TrialSpec("t1", "member_0", 0, params, 0, sys.argv[1], env={contract.SCHEDULED: "1"}))
x = np.ones((8, 2), "float32")
for optimizer in (keras.optimizers.SGD(0.5, momentum=0.0), keras.optimizers.Adam(0.5)):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer, "mse")
    try:
        model.fit(x, x[:, :1], epochs=1, verbose=0, callbacks=[sweeper.keras.Report(optimizer={"momentum": "momentum"})])
        print("set", float(model.optimizer.learning_rate), model.optimizer.momentum)
    except TrialFailed as exc:
        print("failed", exc)
backup = os.path.join(sys.argv[1], "backup")  # a checkpoint whose optimizer holds rate 0.5
for callbacks in ([keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)],
                  [sweeper.keras.Report(), keras.callbacks.BackupAndRestore(backup)]):  # Report first, then the restore
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.5), "mse")
    model.fit(x, x[:, :1], epochs=1 + len(callbacks), verbose=0, callbacks=callbacks)
print("restored", float(model.optimizer.learning_rate))
"""


def test_reports_mapping_sets_the_optimizers_other_hyperparameters_or_says_it_has_none(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MAPPED, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith(("set", "failed"))]
    assert said[0].split() == ["set", "0.05000000074505806", "0.7"], said
    said += [line for line in done.stdout.splitlines() if line.startswith("restored")]
    assert said[2] == "restored 0.05000000074505806", said  # set after the restore, wherever Report stands
    assert said[1].startswith("failed parameter 'momentum' is recorded as the optimizer's momentum") and "Adam has no" in said[1]
