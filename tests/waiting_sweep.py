"""A sweep stopped from outside while it runs: a CLI sweep whose trials wait on a file, for
the tests of Ctrl-C, a killed driver and ``status`` from another terminal."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

from conftest import ROOT, write_grid

#: x=1 is released at once (``go`` exists), 2, 3 and 4 wait for ``hold``.
WAITING_GRID = """
from sweep_fns import wait_for_file as train
grid = [{{"x": [1], "release": [{go!r}]}}, {{"x": [2, 3, 4], "release": [{hold!r}]}}]
options = {{"workers": 2}}
"""


def start_waiting_sweep(tmp_path):
    """A CLI sweep of four trials, two at a time, started in the background: returns its
    process and ``hold`` once three trials have started and x=1's ``ok`` row is in the
    ledger, so x=2 and x=3 are running (waiting for ``hold``) and x=4 is still to come."""
    go, hold = tmp_path / "go", tmp_path / "hold"
    go.touch()
    grid = write_grid(tmp_path, WAITING_GRID.format(go=str(go), hold=str(hold)))
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trials = tmp_path / "out" / "grid" / "trials"
    deadline = time.monotonic() + 120
    started = []
    while time.monotonic() < deadline and proc.poll() is None:
        started = sorted(p.parent.name for p in trials.glob("*/started"))
        if len(started) == 3 and ok_rows(tmp_path) == 1:
            break
        time.sleep(0.05)  # polling the trials' own sentinel files
    assert len(started) == 3, (started, proc.poll())
    return proc, hold


def ok_rows(tmp_path) -> int:
    """The ledger's ``ok`` rows so far (0 before it has a table)."""
    path = tmp_path / "out" / "grid" / "ledger.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        try:
            return db.execute("SELECT count(*) FROM trials WHERE status='ok'").fetchone()[0]
        except sqlite3.OperationalError:
            return 0
