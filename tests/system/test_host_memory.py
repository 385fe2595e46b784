"""Each trial's peak resident host memory over its process tree (``mem_peak_mb``), on every
machine: what a trial held in its own process, in processes it started, in a command's
script, and in a trial that died without a result. Real allocations of a few hundred MB.

A measurement, so each test asserts a lower bound from what the trial touched, and an
upper bound far from it only where nothing else could be counted."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest

import sweeper
from sweeper.system import hostmem
from sweeper.store.ledger import Ledger, SCHEMA_VERSION
from sweeper.store.table import READ_CSV
from conftest import HERE, ROOT, run_cli, write_grid

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")

#: train(params): holds ``own`` MB in its process, ``child`` MB in a child process it
#: started, and ``forks`` forked children that share its pages (copy-on-write, never
#: written), all touched, for ``hold`` seconds (the parent samples every half second: a
#: peak held this long is seen on a busy machine too); then returns, or dies (``die``).
GRID = """import multiprocessing, os, subprocess, sys, time

HOLD = "import sys, time; b = bytearray(int(sys.argv[1]) << 20); time.sleep(float(sys.argv[2]))"


def train(params):
    own = bytearray(params["own"] << 20)  # bytearray() writes zeros: every page is touched
    started = []
    if params["child"]:
        started.append(subprocess.Popen([sys.executable, "-c", HOLD, str(params["child"]), str(params["hold"])]))
    fork = multiprocessing.get_context("fork")
    forks = [fork.Process(target=time.sleep, args=(params["hold"],)) for _ in range(params["forks"])]
    for f in forks:
        f.start()
    time.sleep(params["hold"])
    for p in [*started, *forks]:
        (p.wait if hasattr(p, "wait") else p.join)()
    if params["die"]:
        os._exit(3)
    return {"held": float(len(own) >> 20)}


grid = [{"own": 300, "child": 0, "forks": 0, "hold": 0, "die": False},
        {"own": 5, "child": 0, "forks": 0, "hold": 0, "die": False},
        {"own": 150, "child": 250, "forks": 0, "hold": 3, "die": False},
        {"own": 300, "child": 0, "forks": 0, "hold": 3, "die": True},
        {"own": 300, "child": 0, "forks": 3, "hold": 3, "die": False}]
"""


def test_each_trial_has_its_peak_over_its_process_tree(tmp_path):
    grid = write_grid(tmp_path, GRID)
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--workers", "2", "--quiet", timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr  # the trial that died
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert df.mem_peak_mb.dtype.kind == "i", df.mem_peak_mb.tolist()  # whole MB, every row measured
    big, small, tree, died, shared = df.mem_peak_mb.tolist()
    assert big >= 300 and small >= 5  # its own process, measured when train returned
    assert big - small >= 250  # the 295 MB more it held, not a figure common to every trial
    assert tree >= 150 + 250  # its process and its child's at once, sampled by the sweep
    assert df.status.tolist()[3] == "crashed" and died >= 300  # no result: the samples alone
    assert 300 <= shared < 300 + 150  # three forks sharing its 300 MB: counted once, not four times


def test_a_spawned_trial_does_not_inherit_the_sweeps_high_water_mark(tmp_path):
    """A process started by exec carries its spawner's peak in ru_maxrss: a script that
    once held 600 MB would give each spawned trial 600 MB, were that what was recorded."""
    code = ("b = bytearray(600 << 20); del b\n"
            "import sweeper, sweep_fns\n"
            f"df = sweeper.sweep(sweep_fns.const, {{'x': [1, 2]}}, out={str(tmp_path)!r}, progress=False, "
            "start_method='spawn')\n"
            "print(df.mem_peak_mb.tolist())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    peaks = eval(proc.stdout.strip().splitlines()[-1])
    assert len(peaks) == 2 and all(0 < p < 300 for p in peaks), peaks


def test_a_command_trials_script_is_measured(tmp_path):
    script = tmp_path / "alloc.py"
    script.write_text("import sys\nb = bytearray(int(sys.argv[1]) << 20)\nprint('{\"ok\": 1}')\n")
    df = sweeper.sweep(f"{sys.executable} {script} {{mb}}", {"mb": [10, 400]}, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    low, high = df.mem_peak_mb.tolist()
    assert high >= 400 and high - low >= 350


@pytest.mark.unit
def test_the_measures_and_their_largest():
    me = hostmem.tree_mb(os.getpid())
    assert me is not None and me > 0
    assert me <= hostmem.tree_mb(os.getpid(), [os.getpid()]) <= 2 * me + 1  # plus its private pages
    assert hostmem.tree_mb(2 ** 22 + 12345) is None  # no such process: not measured, not 0
    assert hostmem.own_peak_mb() >= me - 1  # a high-water mark is never below the present
    assert hostmem.peak(None, 3, 5) == 5 and hostmem.peak(None, None) is None and hostmem.peak(0) == 0
    spike = bytearray(200 << 20)  # a peak before train (an import, a grid read) ...
    del spike
    assert hostmem.reset_own_peak()  # ... is not train's: the high-water mark starts again
    with open("/proc/self/status") as f:
        hwm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    assert hwm_kb <= (hostmem.tree_mb(os.getpid()) + 20) * 1024


@pytest.mark.unit
def test_a_ledger_of_schema_2_gains_the_column_and_keeps_its_rows(tmp_path):
    from sweeper.model.trial import Status, TrialResult

    ledger = Ledger(str(tmp_path))
    ledger.record(TrialResult(trial_id="t000000000001", name="x=1", index=0, params={"x": 1}, status=Status.OK,
                              metrics={"m": 1.0}, epoch_reached=3))
    ledger.close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:  # as the previous release left it
        db.execute("ALTER TABLE trials DROP COLUMN mem_peak_mb")
        db.execute("PRAGMA user_version = 2")
    ledger = Ledger(str(tmp_path))
    try:
        (row,) = ledger.results().values()
        assert row.metrics == {"m": 1.0} and row.epoch_reached == 3 and row.mem_peak_mb is None
    finally:
        ledger.close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
        assert "mem_peak_mb" in {r[1] for r in db.execute("PRAGMA table_info(trials)")}
