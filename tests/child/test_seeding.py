"""Every trial is seeded before the user's module runs, in every kind of
process (a fork of the server, a spawn process, a standby, the replay), so what a grid
file draws at its top is the trial's own: reproducible, and the same forked, spawned and
replayed."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import run_cli, write_grid
from sweeper.store.table import READ_CSV

pytestmark = pytest.mark.slow

#: Draws at its top (NumPy and random) and in train; six trials on two workers, so that
#: standbys (forked and spawned) and fresh processes all run some of them.
DRAWS = """import random
import numpy as np
TOP = float(np.random.rand())
TOP_RANDOM = random.random()
grid = {"x": list(range(6))}

def train(params):
    return {"top": TOP, "top_random": TOP_RANDOM, "inside": float(np.random.rand())}
"""
DRAWN = ["top", "top_random", "inside"]


def _run(grid: str, out, method: str) -> pd.DataFrame:
    done = run_cli(grid, "--out", str(out), "--workers", "2", "--quiet", "--start-method", method)
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(out / "grid" / "results.csv", **READ_CSV)
    assert (df.status == "ok").all() and len(df) == 6
    return df.set_index("trial").sort_index()


def test_draws_at_the_top_are_the_trials_own_forked_spawned_and_replayed(tmp_path):
    grid = write_grid(tmp_path, DRAWS)
    forked = _run(grid, tmp_path / "fork", "forkserver")
    spawned = _run(grid, tmp_path / "spawn", "spawn")
    # the trial's own: no two trials drew the same at the top (a shared state would)
    assert forked.top.nunique() == 6 and forked.top_random.nunique() == 6
    # the same, whatever process ran it
    pd.testing.assert_frame_equal(forked[DRAWN], spawned[DRAWN])
    # and the same replayed: exit 0 at tolerance 0 for every trial
    again = run_cli("replay", str(tmp_path / "fork" / "grid"), "--all", "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "within the tolerance 0 (exact)" in again.stdout
