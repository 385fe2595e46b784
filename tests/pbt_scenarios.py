"""Whole population-based training runs that the local backend's tests (test_pbt.py) and
Slurm's (test_slurm.py) both run, each on its own backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
from conftest import ROOT


def ctrl_c_then_the_same_command(tmp_path, *flags: str, cancelled_as_it_started: int = 0) -> None:
    """A population of 4 (``flags``: on a backend of the command line's) Ctrl-C'd while member_0
    holds at epoch 3 and others are paused: every row interrupted; the same command then resumes
    each member from its checkpoint to its end, one continuous curve, a log header per segment.
    ``cancelled_as_it_started``: segments a member may count beyond its log's headers (a batch
    queue's task that the Ctrl-C cancelled as it started, before its Python wrote a line: it ran,
    so it counts, as its attempt does)."""
    hold = tmp_path / "hold"
    grid = tmp_path / "grid.py"
    grid.write_text(
        "import sweeper\nfrom tests.pbt_fns import climb as train\n"
        f"space = {{'lr': sweeper.loguniform(0.01, 0.5), 'hold': {str(hold)!r}}}\n"
        "options = {'search': 'pbt', 'metric': 'acc', 'workers': 2, 'pbt': {'population': 4, 'interval': 2}}\n")
    command = [sys.executable, "-m", "sweeper", str(grid), "--out", str(tmp_path / "out"), "--quiet", *flags]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not hold.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # member_0's own sentinel: it holds at epoch 3
        assert hold.exists(), proc.communicate(timeout=30)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    first = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert set(first["status"]) == {"interrupted"}, err
    hold.unlink()
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert list(df["status"]) == ["ok"] * 4, df["error"].tolist()  # each resumed from its checkpoint
    hist = pd.read_csv(tmp_path / "out" / "grid" / "history.csv")
    for _, part in hist.groupby("trial_id"):
        assert list(part["epoch"]) == list(range(1, 9))
    with open(tmp_path / "out" / "grid" / "trials" / "member_0" / "checkpoint" / "state.json") as f:
        assert json.load(f)["epoch"] == 8
    for _, member in df.iterrows():  # its segments: every process it ran in, in both runs (a header each)
        log = (tmp_path / "out" / "grid" / "trials" / member["trial"] / "log.txt").read_text()
        headers = log.count("=== sweeper: trial")
        assert headers <= member["segments"] <= headers + cancelled_as_it_started, (member["trial"], member["segments"], log)
