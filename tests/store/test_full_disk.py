"""On a full disk the console never says ``ok`` for a trial the ledger
could not keep: its line says it was not recorded (the next run runs it again)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, write_grid

pytestmark = pytest.mark.slow

#: x=1 fills the disk its folder is on, then returns: its result cannot be recorded.
FILLS = """import os, sweeper
grid = {"x": [1, 2, 3]}

def train(params):
    if params["x"] == 1:
        with open(os.path.join(sweeper.current_trial().dir, "filler"), "wb") as f:
            try:
                while True:
                    f.write(bytes(65536))
                    f.flush()
            except OSError:
                pass
    return {"value": float(params["x"])}
"""


def test_a_result_the_ledger_could_not_keep_is_never_shown_as_plainly_ok(tmp_path, small_disk):
    grid = write_grid(tmp_path, FILLS)
    done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(small_disk), "--workers", "1",
                           "--metric", "value", "--mode", "max"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == 1 and " ok " in lines[0] and "NOT RECORDED" in lines[0], done.stdout
    assert "no new trials start" in done.stdout + done.stderr
