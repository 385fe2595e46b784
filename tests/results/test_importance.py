"""Which parameters mattered (Optuna's fANOVA over the ok trials), as ``status --importance``
and the report show it, for a sweep whose answer is known: ``sweep_fns.surface`` depends
mostly on ``a``, a little on ``c``, hardly on ``b``."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import run_cli
from sweeper.errors import SweepError
from sweeper.results.query import finished_ok
from sweeper.results.importance import MIN_TRIALS, importance as _importance


def importance(df, metric, mode):
    """The table's ok rows, as the report and status pass them."""
    return _importance(df[finished_ok(df)], metric, mode)


def _shares(text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) / 100 for m in re.finditer(r"^  (\w+)\s+([\d.]+)%", text, re.M)}


def test_status_and_the_report_say_which_parameters_mattered(tmp_path):
    grid = {"a": [1, 2, 3, 4], "b": [0.1, 1.0, 10.0], "c": ["x", "y"]}
    df = sweeper.sweep(sweep_fns.surface, grid, out=str(tmp_path), name="s", metric="score", mode="max",
                       progress=False)
    assert (df.status == "ok").all() and len(df) == 24
    folder = str(tmp_path / "s")
    done = run_cli("status", folder, "--importance")
    assert done.returncode == 0, done.stderr
    assert "which parameters mattered for score (fANOVA over 24 ok trials" in done.stdout, done.stdout
    shares = _shares(done.stdout)
    assert list(shares) == ["a", "c", "b"], done.stdout  # largest first
    assert shares["a"] > 0.8 and shares["b"] < 0.05 and math.isclose(sum(shares.values()), 1, abs_tol=0.01)
    report = run_cli("report", folder)
    assert report.returncode == 0, report.stderr
    assert _shares(report.stdout) == shares  # the same table, the same numbers (a seeded forest)
    page = (tmp_path / "s" / "report.html").read_text()
    rows = re.findall(r'<tr data-param="(\w+)"><td>\w+</td><td class="num">([\d.]+)%</td>', page)
    assert [name for name, _ in rows] == ["a", "c", "b"]
    plain = run_cli("status", folder)
    assert "which parameters mattered" not in plain.stdout  # asked for, not by default


@pytest.mark.unit
def test_too_few_trials_or_nothing_varying_is_said_in_one_line():
    few = pd.DataFrame({"status": ["ok"] * (MIN_TRIALS - 1) + ["error"], "param_a": range(MIN_TRIALS),
                        "score": [1.0] * MIN_TRIALS})
    with pytest.raises(SweepError, match=f"needs at least {MIN_TRIALS} ok trials with score; there are "
                                         f"{MIN_TRIALS - 1}"):
        importance(few, "score", "max")
    flat = pd.DataFrame({"status": ["ok"] * 6, "param_a": [1] * 6, "score": range(6)})
    with pytest.raises(SweepError, match="no parameter varies among the 6 ok trials"):
        importance(flat, "score", "max")
    with pytest.raises(SweepError, match="no trial has 'loss'"):
        importance(flat, "loss", "min")
    same = pd.DataFrame({"status": ["ok"] * 6, "param_a": range(6), "score": [1.0] * 6})
    with pytest.raises(SweepError, match="score is the same in all 6 ok trials"):
        importance(same, "score", "max")  # fANOVA's zero variance, said as what it means


@pytest.mark.unit
def test_hostile_values_are_taken_as_they_are():
    """numpy numbers, bools beside text, 1 beside "1", a parameter some rows lack, metrics
    that are text, NaN or infinite (left out, not counted): no crash, honest counts."""
    n = 12
    df = pd.DataFrame({
        "status": ["ok"] * n,
        "param_lr": np.array([1e-4, 1e-3, 1e-2, 1e-1] * 3, dtype=np.float64),
        "param_kind": [True, "1", 1, "a"] * 3,
        "param_extra": [1, 2] + [None] * (n - 2),
        "param_seed": [2**62 + i for i in range(n)],  # beyond a float's whole numbers: a choice
        "score": [float(i % 4) for i in range(n - 3)] + ["9", float("nan"), float("inf")],
    })
    imp = importance(df, "score", "max")
    assert imp.trials == n - 3  # the text "9" is no number, NaN and infinity are none
    assert dict(imp.shares).keys() == {"lr", "kind", "seed"} and imp.left_out == ("extra",)
    assert math.isclose(sum(dict(imp.shares).values()), 1, abs_tol=1e-6)
    assert imp.lines()[-1] == "  not compared (some trials lack them): extra"
