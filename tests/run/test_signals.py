"""Signals: nothing a sweep started outlives it (SIGHUP is a stop like
SIGTERM; a SIGKILLed sweep's daemons end with it through its guardian, or at the latest
with the next run of the same sweep), and Ctrl-C at any moment of start-up is one line
and exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from conftest import ROOT, assert_dead, install_module, write_grid
from sweeper.store.table import READ_CSV

pytestmark = pytest.mark.slow

#: x=1 starts a daemon (its pid in ``daemon``), says so (``started``), then waits for
#: ever while the file ``hold`` exists; x=2 returns at once.
HELD = """import os, time
from sweep_fns import _daemon
grid = {{"x": [1, 2]}}

def train(params):
    if params["x"] == 1:
        _daemon({daemon!r})
        open({started!r}, "w").close()
        while os.path.exists({hold!r}):
            time.sleep(0.1)
    return {{"value": float(params["x"])}}
"""


def _start(tmp_path, *args: str, pipes: bool = True) -> subprocess.Popen:
    """The sweep, in a group of its own as a terminal's job is. ``pipes=False``: its output
    goes nowhere, for a run whose daemon (which keeps every inherited descriptor) may live on."""
    paths = {k: str(tmp_path / k) for k in ("daemon", "started", "hold")}
    (tmp_path / "hold").touch()
    grid = write_grid(tmp_path, HELD.format(**paths))
    out = subprocess.PIPE if pipes else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--workers", "1",
                             *args], cwd=ROOT, stdout=out, stderr=out, text=True, start_new_session=True)


def _wait_for(path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the trial's own sentinel file
    assert path.exists(), proc.communicate(timeout=30)


def _daemon(tmp_path) -> int:
    return int((tmp_path / "daemon").read_text())


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sighup_stops_a_sweep_as_sigterm_does(tmp_path):
    proc = _start(tmp_path)
    try:
        _wait_for(tmp_path / "started", proc)
        proc.send_signal(signal.SIGHUP)  # the terminal or the ssh session closed
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGHUP, out + err
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert df.set_index("param_x").status.to_dict() == {1: "interrupted"}, df.error.tolist()
    assert "stopped by SIGHUP" in df.error[0]
    assert sum(line.startswith("sweeper: interrupted;") for line in out.splitlines()) == 1, out
    assert "Traceback" not in err
    assert_dead(_daemon(tmp_path), timeout=10)


def test_the_daemons_of_a_sigkilled_sweep_end_with_it(tmp_path):
    proc = _start(tmp_path, "--quiet", pipes=False)
    try:
        _wait_for(tmp_path / "started", proc)
        daemon = _daemon(tmp_path)
        assert _alive(daemon)
        proc.kill()  # no handler runs: the guardian ends what the sweep's processes left
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_dead(daemon, timeout=10)


def _guardian(sweep: int) -> psutil.Process:
    """The sweep's guardian: a process of its own session, started by the sweep."""
    found = [p for p in psutil.Process(sweep).children() if "sweeper.system.procs import guard" in " ".join(p.cmdline())]
    assert len(found) == 1
    return found[0]


def test_the_next_run_ends_what_a_sweep_and_its_guardian_left_when_both_were_killed(tmp_path):
    proc = _start(tmp_path, "--quiet", pipes=False)
    try:
        _wait_for(tmp_path / "started", proc)
        daemon = _daemon(tmp_path)
        _guardian(proc.pid).kill()
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        assert _alive(daemon)  # nothing ended it: only the next run can
        (tmp_path / "hold").unlink()
        (tmp_path / "started").unlink()
        again = _start(tmp_path)
        (tmp_path / "hold").unlink()
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, out + err
        said = [line for line in (out + err).splitlines() if "earlier run of this sweep left running" in line]
        assert len(said) == 1 and str(daemon) in said[0], out + err
        assert not _alive(daemon)
    finally:
        if _alive(daemon):
            os.kill(daemon, signal.SIGKILL)


#: ``python -m sweeper ARGS`` with a Ctrl-C landing while sweeper's own modules import (as it
#: does in the first half second: a finder raises KeyboardInterrupt at ``sweeper.model.options``).
INTERRUPTED_IMPORT = """import runpy, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "sweeper.model.options":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["sweeper", *sys.argv[1:]]
runpy.run_module("sweeper", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_sweeper_imports_is_one_line_and_130(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT, grid, "--out", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "interrupted" in done.stderr


def test_ctrl_c_while_the_grid_file_is_read_is_one_line_and_130(tmp_path):
    reading = tmp_path / "reading"
    grid = write_grid(tmp_path, f"""import os, time
if "SWEEPER_SLOT" not in os.environ:  # the grid reader's import, and only its
    open({str(reading)!r}, "w").close()
    time.sleep(600)
from sweep_fns import echo as train
grid = {{"x": [1]}}
""")
    code, out, err = _ctrl_c_once(tmp_path, grid, reading)
    assert code == 130, out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_ctrl_c_while_the_fork_server_imports_prints_no_traceback_of_it(tmp_path):
    importing = tmp_path / "server_importing"
    site = install_module(tmp_path / "site", "slow_lib", f"""import os, time
if os.environ.get("SWEEPER_PRELOAD_READY"):  # the fork server's import, and only its
    open({str(importing)!r}, "w").close()
    time.sleep(600)
""")
    grid = write_grid(tmp_path, "import slow_lib\nfrom sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    code, out, err = _ctrl_c_once(tmp_path, grid, importing, {**os.environ, "PYTHONPATH": site})
    assert code == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def _ctrl_c_once(tmp_path, grid: str, sentinel, env=None) -> tuple[int, str, str]:
    """``python -m sweeper GRID`` in a group of its own, as a terminal's job is; once
    ``sentinel`` exists, the terminal's Ctrl-C to that whole group: its exit code and output."""
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--quiet"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        _wait_for(sentinel, proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


STARTUP_MASKS = """import os
cmd = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace")
if "multiprocessing.forkserver" in cmd:  # at the first line Python runs in the fork server
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    with open({out!r}, "a") as f:
        f.write(f"{{status['SigBlk'].strip()}} {{status['SigIgn'].strip()}}\\n")
"""


def test_the_fork_server_is_deaf_to_ctrl_c_from_its_first_line(tmp_path):
    # A Ctrl-C during Python's own start-up in the fork server (before sweeper's preload
    # ignores it) printed half a traceback, "Traceback (most recent call last):" alone, under
    # the sweep's one line (seen with the suite run two tests at a time): the server starts
    # with SIGINT blocked, as every process sweeper starts does
    masks = tmp_path / "masks"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STARTUP_MASKS.format(out=str(masks)))
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1, 2]}\n")
    done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stdout + done.stderr
    seen = masks.read_text().split("\n")[:-1] if masks.exists() else []
    assert seen, "no fork server started"
    sigint = 1 << (signal.SIGINT - 1)
    assert all(int(blocked, 16) & sigint or int(ignored, 16) & sigint for blocked, ignored in map(str.split, seen)), seen
