"""A trial that never reached ``train`` because its fork never started
runs under spawn and costs it no attempt, and no message points at a log that does not
exist; the fork watchdog tells an import that waits (a disk, a socket, a sleep) from a
deadlock before it gives up the fork server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

import sweeper
from conftest import ROOT, install_module, write_grid
from sweeper.backends.local import fork
from sweeper.store.table import READ_CSV

pytestmark = pytest.mark.slow

GRID = """import {lib}
from sweep_fns import echo as train
grid = {{"x": [1, 2, 3]}}
"""


def _cli(tmp_path, lib: str, *args: str) -> subprocess.Popen:
    grid = write_grid(tmp_path, GRID.format(lib=lib))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    return subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--quiet", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the server's own sentinel file
    assert path.exists(), proc.communicate(timeout=30)


def _every_trial_ran_once(tmp_path, out: str) -> pd.DataFrame:
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert (df.status == "ok").all(), (df.error.tolist(), out)
    assert (df.attempts == 1).all()  # a trial that never began costs no attempt
    assert "crashed" not in out and "log:" not in out
    return df


def test_a_fork_server_killed_while_it_imports_costs_no_trial_anything(tmp_path):
    importing = tmp_path / "server_importing"
    install_module(tmp_path / "site", "slow_lib", f"""import os, time
if os.environ.get("SWEEPER_PRELOAD_READY"):  # the fork server's import, and only its
    open({str(importing)!r}, "w").close()
    time.sleep(600)
""")
    proc = _cli(tmp_path, "slow_lib", "--workers", "1")
    try:
        _wait_for(importing, proc)
        server = [p for p in psutil.Process(proc.pid).children() if "forkserver" in " ".join(p.cmdline())]
        assert len(server) == 1
        server[0].kill()  # as the OOM killer would
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "the fork server died while it imported" in out + err
    _every_trial_ran_once(tmp_path, out + err)


def test_when_every_fork_deadlocks_the_probe_too_trials_run_under_spawn(tmp_path):
    # a library that holds a lock in a thread of its own: every fork made after its import
    # waits for that lock for ever, the fork server's probe fork included
    install_module(tmp_path / "site", "unforkable", """import os, threading
_lock = threading.Lock()
_held = threading.Event()
def _hold():
    with _lock:
        _held.set()
        threading.Event().wait()
threading.Thread(target=_hold, daemon=True).start()
_held.wait()
if os.environ.get("SWEEPER_SWEEP"):
    os.register_at_fork(after_in_child=_lock.acquire)
""")
    proc = _cli(tmp_path, "unforkable", "--workers", "2")
    out, err = proc.communicate(timeout=200)
    assert proc.returncode == 0, out + err
    assert "fork server cannot be used" in out + err
    df = _every_trial_ran_once(tmp_path, out + err)
    assert df.pid.nunique() == 3


SLOW_IMPORT = """import os, time
time.sleep({wait})  # as a read from a slow disk or a socket at the module's top
with open({marks!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")

def train(params):
    return {{"pid": os.getpid(), "ppid": os.getppid()}}
"""


def test_a_fork_whose_import_waits_is_not_taken_for_deadlocked(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(fork, "FORK_WATCHDOG_S", 0.5)  # looks at it four times before it is done
    marks = tmp_path / "imported"
    (tmp_path / "waits_at_import.py").write_text(SLOW_IMPORT.format(wait=0.0, marks=str(marks)))
    monkeypatch.syspath_prepend(str(tmp_path))
    import waits_at_import  # here without the wait; each trial's import waits

    (tmp_path / "waits_at_import.py").write_text(SLOW_IMPORT.format(wait=2.5, marks=str(marks)))
    with caplog.at_level("WARNING", logger="sweeper"):
        df = sweeper.sweep(waits_at_import.train, {"x": [1, 2]}, workers=1, out=str(tmp_path / "o"), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert (df.ppid != os.getpid()).all()  # forks both: the fork server was not given up
    assert not [r for r in caplog.records if "watchdog" in r.getMessage() or "had not reached" in r.getMessage()]
    assert all(fork.WATCHDOG_MARK not in p.read_text() for p in (tmp_path / "o").rglob("log.txt"))


def _started(code: str) -> subprocess.Popen:
    """A Python process that says "go" on stdout once it is about to do what ``code`` does."""
    proc = subprocess.Popen([sys.executable, "-c", f"import sys, threading, time\nprint('go', flush=True)\n{code}"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    return proc


@pytest.mark.parametrize("code, on_lock", [
    # computing (or waiting for a core on a busy machine, the same state to /proc): seen in
    # CI as "cannot tell", so a fork that had just woken from a sleep at its import's top,
    # not yet given a core, was taken for deadlocked
    ("while True: pass", False),
    ("time.sleep(600)", False),
    ("l = threading.Lock(); l.acquire(); l.acquire()", True),
], ids=["running", "sleeping", "on a lock"])
def test_what_a_process_waits_on_is_read_from_proc(code, on_lock):
    proc = _started(code)
    try:
        from sweeper.system import procs

        deadline = time.monotonic() + 30
        seen = procs.waits_on_lock(proc.pid)
        while seen is not on_lock and time.monotonic() < deadline:  # the print above, until it waits
            time.sleep(0.05)
            seen = procs.waits_on_lock(proc.pid)
        assert seen is on_lock
        if not on_lock:  # and it stays so: not one look reads as "cannot tell", nor as a lock
            assert all(procs.waits_on_lock(proc.pid) is False for _ in range(200))
    finally:
        proc.kill()
        proc.wait()


def test_a_grid_reader_fork_that_deadlocks_is_read_again_under_spawn(tmp_path):
    # The CLI's grid reader is a fork of the fork server. A lock a thread of the server holds
    # (here only there: the library starts its holder in the server alone), taken by the
    # grid file's top, deadlocks that fork, which the probe fork (it runs no grid file)
    # cannot foresee: the reader is looked at as a trial's fork is, killed, and the file read
    # in a spawn process; the trials spawn too
    install_module(tmp_path / "site", "held_lib", """import os, threading
LOCK = threading.Lock()
if os.environ.get("SWEEPER_PRELOAD_READY"):  # the fork server's import, and only its
    _held = threading.Event()
    def _hold():
        with LOCK:
            _held.set()
            threading.Event().wait()
    threading.Thread(target=_hold, daemon=True).start()
    _held.wait()
""")
    grid = write_grid(tmp_path, "import held_lib\nheld_lib.LOCK.acquire()\nheld_lib.LOCK.release()\n"
                                "from sweep_fns import echo as train\ngrid = {'x': [1, 2, 3]}\n")
    argv = [grid, "--out", str(tmp_path / "out"), "--quiet", "--workers", "2"]
    code = ("import sys; from sweeper.backends.local import fork; fork.FORK_WATCHDOG_S = 1.0; "
            f"from sweeper.front.cli import main; sys.exit(main({argv!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=200,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "the fork that read grid.py stopped getting on" in said and "fresh spawn processes" in said, said
    df = _every_trial_ran_once(tmp_path, said)
    assert df.pid.nunique() == 3
