"""The default way a trial gets its process: a fresh fork of the sweep's fork server, which
imported train's module once; and what makes that safe: the watchdog for a fork that never
reaches train, Ctrl-C while the server still imports, and spawn standbys that import ahead
only as far as idle cores allow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

import fork_deadlock
import sweeper
from conftest import HERE, ROOT, assert_dead, write_grid
from sweeper.backends import local
from sweeper.table import READ_CSV

#: A module that notes each process that imports it, then takes IMPORT_S (sleeping: an
#: import that waits on a disk, not on the CPU); its train notes when it ran.
COUNTED = """import os, time
_t0 = time.time()
time.sleep({import_s})
with open({marks!r}, "a") as f:
    f.write(f"{{os.getpid()}} import {{_t0!r}} {{time.time()!r}}\\n")

def train(params):
    t0 = time.time()
    time.sleep(params.get("s", 0.0))
    with open({marks!r}, "a") as f:
        f.write(f"{{os.getpid()}} train {{t0!r}} {{time.time()!r}}\\n")
    return {{"pid": os.getpid(), "ppid": os.getppid()}}
"""


def _counted(tmp_path, monkeypatch, name: str, import_s: float = 0.0):
    marks = tmp_path / f"{name}.marks"
    (tmp_path / f"{name}.py").write_text(COUNTED.format(import_s=import_s, marks=str(marks)))
    monkeypatch.syspath_prepend(str(tmp_path))  # a folder only the sweep's own sys.path has
    module = __import__(name)
    return module, marks


def _marks(marks, kind: str) -> list[tuple[int, float, float]]:
    rows = [line.split() for line in marks.read_text().splitlines()] if marks.exists() else []
    return [(int(pid), float(a), float(b)) for pid, k, a, b in rows if k == kind]


def test_by_default_every_trial_is_a_fresh_fork_of_one_import(tmp_path, monkeypatch):
    module, marks = _counted(tmp_path, monkeypatch, "counted_default")
    marks.unlink()  # this process's own import does not count
    df = sweeper.sweep(module.train, {"x": [1, 2, 3, 4, 5]}, workers=2, out=str(tmp_path / "o"), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    imports = [pid for pid, *_ in _marks(marks, "import")]
    assert len(imports) == 1, imports  # the fork server's import, and no other
    assert df.pid.nunique() == 5 and os.getpid() not in set(df.pid)  # a fresh process per trial
    assert set(df.ppid) == set(imports)  # each forked from the server that imported it
    assert_dead(imports[0])  # the server ends with its sweep
    for pid in df.pid:
        assert_dead(pid, timeout=1)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fork_that_never_reaches_train_is_killed_and_its_trial_run_under_spawn(tmp_path, monkeypatch, caplog,
                                                                                  workers):
    monkeypatch.setattr(local, "FORK_WATCHDOG_S", 2.0)
    with caplog.at_level("WARNING", logger="sweeper"):
        df = sweeper.sweep(fork_deadlock.train, {"x": [1, 2, 3, 4]}, workers=workers, out=str(tmp_path),
                           progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert (df.attempts == 1).all()  # a rescue is not a retry
    # the hung forks' trials and every later one ran in spawn processes: children of this one
    assert (df.ppid == os.getpid()).all() and df.pid.nunique() == 4
    logs = {t: (tmp_path / "fork_deadlock" / "trials" / t / "log.txt").read_text() for t in df.trial}
    fired = [t for t, text in logs.items() if local.WATCHDOG_MARK in text]
    hung = ["x=1", "x=2"][:workers]  # the forks made before the first rescue; none after it
    assert fired == hung, fired
    for t in hung:  # why, then the header of the process that ran it
        pid = df.loc[df.trial == t, "pid"].item()
        assert logs[t].index(local.WATCHDOG_MARK) < logs[t].index(f"pid {pid},")
    warned = [r.getMessage() for r in caplog.records if "had not reached train" in r.getMessage()]
    assert len(warned) == workers and all(any(t in w for w in warned) for t in hung)


def test_ctrl_c_while_the_fork_server_imports_ends_waiting_trials_as_interrupted(tmp_path):
    ready = tmp_path / "server_importing"
    grid = write_grid(tmp_path, f"""import os, time
if os.environ.get("SWEEPER_PRELOAD_READY"):  # the fork server's import, and only its
    open({str(ready)!r}, "w").close()
    time.sleep(600)
from sweep_fns import echo as train
grid = {{"x": [1, 2, 3]}}
""")
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--workers", "2",
                             "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the server's own sentinel file
        assert ready.exists(), proc.communicate(timeout=30)
        server = [p for p in psutil.Process(proc.pid).children(recursive=True)
                  if "forkserver" in " ".join(p.cmdline())]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    # x=1 ran in the process that read the grid file; the others waited for the server
    assert df.set_index("param_x").status.to_dict() == {1: "ok", 2: "interrupted", 3: "interrupted"}, df.error
    assert len(server) == 1
    assert_dead(server[0].pid, timeout=5)


def _overlaps(spans: list[tuple[int, float, float]]) -> int:
    """How many pairs of the spans overlap in time."""
    return sum(1 for i, a in enumerate(spans) for b in spans[i + 1:] if a[1] < b[2] and b[1] < a[2])


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["idle", "busy"])
def test_spawn_standbys_import_ahead_together_only_while_cores_are_idle(tmp_path, monkeypatch, machine):
    module, marks = _counted(tmp_path, monkeypatch, f"counted_{machine}", import_s=1.5)
    marks.unlink()
    burners = []
    if machine == "busy":  # every core taken (as by colleagues' jobs, or by trials using the CPU)
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   for _ in range(len(os.sched_getaffinity(0)))]
    try:
        df = sweeper.sweep(module.train, {"x": list(range(6)), "s": 0.5}, workers=1, start_method="spawn",
                           out=str(tmp_path / "o"), progress=False)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert (df.status == "ok").all(), df.error.tolist()
    imports = _marks(marks, "import")
    assert len(imports) == 6  # never more standbys than trials left: none started in vain
    together = _overlaps(imports)
    if machine == "idle":  # imports take 3 trials' time: one at a time would leave gaps
        assert together >= 2, imports
    else:
        assert together == 0, imports
