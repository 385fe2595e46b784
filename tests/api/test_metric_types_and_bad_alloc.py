"""Unusual numbers and dying children, from the user's side (``sweep()``): a complex metric is an
error naming it, every real NumPy scalar a plain number; a child process that dies of
``std::bad_alloc`` makes its trial ``oom`` (retried), whether its stderr was inherited or
captured."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

import number_fns
import sweeper


def test_complex_metrics_are_errors_and_every_real_numpy_scalar_a_plain_number(tmp_path):
    df = sweeper.sweep(number_fns.numbers, {"what": ["np_complex", "py_complex", "complex_0d", "reals"]},
                       out=str(tmp_path), name="n", progress=False).set_index("param_what")
    for what in ("np_complex", "py_complex", "complex_0d"):  # never ok with the imaginary part dropped
        assert df.loc[what, "status"] == "error", (what, df.loc[what, "error"])
        assert "'m'" in df.loc[what, "error"] and "complex" in df.loc[what, "error"]
        assert pd.isna(df.loc[what, "m"])
    reals = df.loc["reals"]
    assert reals.status == "ok", reals.error  # np.longdouble was a RecursionError
    expected = {"m": 0.1, "f16": 0.5, "f32": 0.25, "ld_0d": 0.75, "i8": -3, "u16": 65535, "i32": -7,
                "u32": 4_000_000_000, "i64": 2**40, "b": 1}
    for name, value in expected.items():
        assert pd.api.types.is_numeric_dtype(df[name]), (name, df[name].dtype)
        assert reals[name] == pytest.approx(value), name
    with open(tmp_path / "n" / "results.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["param_what"] == "reals")
    assert row["m"] == "0.1" and row["f16"] == "0.5" and row["i8"] == "-3" and row["u32"] == "4000000000"
    assert row["b"] == "1" and row["i64"] == str(2**40)  # plain numbers, never np.longdouble(...)


def test_a_child_that_dies_of_bad_alloc_is_oom_and_retried(tmp_path):
    df = sweeper.sweep(number_fns.child_abort, {"capture": [False, True]}, retries=1, out=str(tmp_path),
                       name="oom", progress=False).set_index("param_capture")
    for capture in (False, True):  # stderr inherited into the log, or captured by the trial
        row = df.loc[capture]
        assert row.status == "oom", (capture, row.error)
        assert "bad_alloc" in row.error and "hint:" in row.error
        assert row.attempts == 2  # retried, as an oom is
