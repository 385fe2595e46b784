"""A CLI run imports the grid file once to read it, in a process of its own that ends
then, and once in each trial's process, after that trial's seed is set: never in the
sweep's own process, nor in the fork server (which imports installed libraries only)."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from conftest import run_cli, write_grid
from sweeper.store.table import READ_CSV

pytestmark = pytest.mark.slow

#: A grid file that notes each process that imports it (its pid) and prints a line.
BODY = """import os
with open({marks!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
print("grid file imported")
from sweep_fns import echo as train
grid = {{"x": {xs!r}}}
{extra}
"""


def _grid(tmp_path, xs, extra=""):
    marks = tmp_path / "imports.txt"
    return write_grid(tmp_path, BODY.format(marks=str(marks), xs=xs, extra=extra)), marks


def _imports(marks) -> list[int]:
    return [int(line) for line in marks.read_text().split()] if marks.exists() else []


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_reader_ends_and_each_trial_imports_the_file_itself(tmp_path, method):
    grid, marks = _grid(tmp_path, [1, 2, 3])
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--workers", "1", "--quiet", "--start-method", method)
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert (df.status == "ok").all() and df.pid.nunique() == 3
    imports = _imports(marks)
    assert os.getpid() not in imports  # none in the parent
    reader, trials = imports[0], imports[1:]
    assert reader not in set(df.pid)  # the reader ran no trial
    assert sorted(df['pid']) == sorted(trials)  # one import per trial process, nothing else
    if method == "forkserver":  # every trial forked from one server (not this process)
        assert df.ppid.nunique() == 1 and os.getpid() not in set(df.ppid)
    log = (tmp_path / "out" / "grid" / "trials" / "x=1" / "log.txt").read_text()
    assert "grid file imported" in log  # what it printed while importing is the trial's


def test_a_resume_with_nothing_to_run_imports_once(tmp_path):
    grid, marks = _grid(tmp_path, [1])
    assert run_cli(grid, "--out", str(tmp_path / "out"), "--quiet").returncode == 0
    marks.unlink()
    again = run_cli(grid, "--out", str(tmp_path / "out"), "--quiet")
    assert again.returncode == 0, again.stderr
    assert "1 of 1 trials on record: 1 ok (0 run this time" in again.stdout
    assert len(_imports(marks)) == 1


def test_a_dry_run_imports_the_file_once(tmp_path):
    grid, marks = _grid(tmp_path, [1, 2])
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert len(_imports(marks)) == 1
