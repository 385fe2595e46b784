"""Nothing lost, nothing hung: every way a trial dies is a recorded status.

A table of crash cases in the style of loky's tests, all in one sweep (a module fixture).
Each case runs there next to a trial of its own that succeeds, which must finish ``ok``
whatever its neighbour does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

import sweeper
from sweeper.store.table import READ_CSV
import sweep_fns
from conftest import ROOT, _cmd, _helper, _still_running, assert_dead, run_cli, write_grid
from waiting_sweep import start_waiting_sweep

CASES = [
    # how, status, words the error must contain
    ("raise", "error", "ValueError: boom from the trial"),
    ("exit3", "crashed", "exit code 3"),
    ("segv", "crashed", "SIGSEGV"),
    ("sigkill", "crashed", "SIGKILL"),
    ("sleep", "timeout", "timeout of 4s"),
    ("none", "error", "returned None"),
    ("unpicklable", "error", "returned function"),
    ("bad_value", "error", "metric 'acc'"),
    ("reserved", "error", "clashes"),
    ("memory", "oom", "MemoryError"),
    ("oom_text", "oom", "out of memory"),
    ("bad_alloc", "oom", "std::bad_alloc"),
    ("orphan", "ok", ""),
    ("fork_then_die", "crashed", "SIGKILL"),
]


@pytest.fixture(scope="module")
def deaths(tmp_path_factory):
    """One sweep of every case (and test_timeout_kills_grandchildren's), each beside a trial
    of its own that succeeds (listed right after it, so the two are started together, two
    workers): the table and its trials' folder. What the sweep leaves running fails it here,
    as the suite's no_stray_processes would fail a test's own sweep."""
    out = tmp_path_factory.mktemp("deaths")
    grid = [{"case": [how], "how": [how, "ok"]} for how in [how for how, _, _ in CASES] + ["sleep_grandchild"]]
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    # 4 s: what runs beside "memory" (filling 512 MB) is the rest of the table, on a machine
    # that may be busy; the sleeping cases end on the timeout whatever its length
    df = sweeper.sweep(sweep_fns.crash, grid, out=str(out), workers=2, timeout=4, progress=False)
    left = [p for p in me.children(recursive=True) if p.pid not in before and not _helper(p)]
    alive = _still_running(left, within=10)
    for p in alive:
        p.kill()
    assert not alive, f"processes left behind: {[(p.pid, _cmd(p)) for p in alive]}"
    return df, out / "sweep_fns" / "trials"


@pytest.mark.parametrize("how,status,words", CASES, ids=[c[0] for c in CASES])
def test_each_death_is_a_status_and_others_finish(deaths, how, status, words):
    """Every case in one sweep (a module fixture): a death is recorded as its own status
    while the trial beside it and every other case's trial run on, each to its own status."""
    df, trials = deaths
    rows = df[df.param_case == how].set_index("param_how")
    assert len(df) == 2 * (len(CASES) + 1) and len(rows) == 2
    assert rows.loc["ok", "status"] == "ok"
    assert rows.loc[how, "status"] == status
    error = rows.loc[how, "error"]
    assert (words in error and "\n" not in error) if words else pd.isna(error)
    log = trials / rows.loc[how, "trial"] / "log.txt"
    assert log.exists()
    if status == "error" and how == "raise":
        assert "Traceback" in log.read_text()  # the full traceback is in the log
    if how in ("orphan", "fork_then_die"):  # what the trial started dies with it
        assert_dead(int((log.parent / "orphan.pid").read_text()))


DAEMON_GRID = """
from sweep_fns import crash as train
grid = {{"how": ["daemon_ok", "daemon_exit", "daemon_sleep"], "x": [1, 2, 3]}}
options = {{"workers": 2, "timeout": 3, "start_method": {method!r}}}
"""


@pytest.fixture(scope="module")
def daemon_sweeps(tmp_path_factory):
    """One CLI sweep per start method of every daemon case, three trials each (run once, on
    the first test that asks): its output, the table and the trials' folder."""
    done = {}

    def sweep_of(method):
        if method not in done:
            tmp = tmp_path_factory.mktemp(f"daemons_{method}")
            grid = write_grid(tmp, DAEMON_GRID.format(method=method))
            proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp / "out")],
                                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = proc.communicate(timeout=120)  # the daemons sleep 600 s and hold inherited pipes
            finally:
                proc.kill()
            done[method] = (out + err, pd.read_csv(tmp / "out" / "grid" / "results.csv"), tmp / "out" / "grid" / "trials")
        return done[method]

    return sweep_of


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("how,status", [("daemon_ok", "ok"), ("daemon_exit", "crashed"),
                                        ("daemon_sleep", "timeout")])
def test_a_double_forked_daemon_dies_with_its_trial(daemon_sweeps, how, status, method):
    """setsid and a double fork leave the trial's group; the sweep still finds and ends it,
    nothing it holds delays the loop, and the caller's captured output closes when the
    sweep ends, not when the daemon would. The three cases share one sweep per start method
    (a module fixture); each reads its own three trials."""
    said, table, trials = daemon_sweeps(method)
    assert len(table) == 9, said
    table = table[table.param_how == how]
    assert table.status.tolist() == [status] * 3, said
    if status == "timeout":  # timed out on time: no stall of seconds per trial in the loop
        assert (table.duration_s < 3 + 1.5).all(), table.duration_s.tolist()
    for name in table.trial:
        assert_dead(int((trials / name / "daemon.pid").read_text()), timeout=5)


def test_timeout_kills_grandchildren(deaths):
    """A case of the crash table's sweep (timeout=4), read from its module fixture."""
    df, trials = deaths
    row = df[(df.param_case == "sleep_grandchild") & (df.param_how == "sleep_grandchild")]
    assert row.status.tolist() == ["timeout"]
    pid_file = trials / row.trial.item() / "orphan.pid"
    assert_dead(int(pid_file.read_text()))


def test_retries_rerun_crashes_but_not_errors(tmp_path):
    df = sweeper.sweep(sweep_fns.flaky, {"x": [1, 2]}, out=str(tmp_path), workers=2, retries=1,
                       progress=False)
    assert df.status.tolist() == ["ok", "ok"]
    assert df.attempts.tolist() == [2, 2]
    df = sweeper.sweep(sweep_fns.crash, {"how": ["raise", "exit3"]}, out=str(tmp_path), workers=2,
                       retries=2, progress=False, name="crash")
    assert df.set_index("param_how").attempts.to_dict() == {"raise": 1, "exit3": 3}


def test_each_attempt_is_judged_on_its_own_log(tmp_path):
    df = sweeper.sweep(sweep_fns.oom_then_exit, {"x": [1]}, out=str(tmp_path), retries=1, progress=False)
    assert df.status.tolist() == ["crashed"] and df.attempts.tolist() == [2]
    assert "out of memory" not in df.error[0] and "exit code 3" in df.error[0]
    log = (tmp_path / "sweep_fns" / "trials" / "x=1" / "log.txt").read_text()
    assert log.count("=== sweeper: trial x=1") == 2 and "MemoryError" in log  # both attempts kept


def test_resume_skips_ok_and_reruns_the_rest(tmp_path):
    out = str(tmp_path)
    first = sweeper.sweep(sweep_fns.crash, {"how": ["ok", "raise"]}, out=out, progress=False)
    # same sweep, one point more: "ok" is kept as it was, "raise" runs again, "none" is new
    second = sweeper.sweep(sweep_fns.crash, {"how": ["ok", "raise", "none"]}, out=out, progress=False)
    assert second.trial_id.is_unique and len(second) == 3
    kept = second.set_index("param_how").loc["ok"]
    assert kept.started_at == first.set_index("param_how").loc["ok"].started_at
    assert second.set_index("param_how").loc["raise"].started_at != first.set_index("param_how").loc["raise"].started_at
    third = sweeper.sweep(sweep_fns.crash, {"how": ["ok", "raise", "none"]}, out=out, skip_failed=True,
                          progress=False)
    pd.testing.assert_frame_equal(third, second)  # nothing ran
    fresh = sweeper.sweep(sweep_fns.crash, {"how": ["ok"]}, out=out, fresh=True, progress=False)
    assert fresh.started_at[0] != kept.started_at
    folder = tmp_path / "sweep_fns"
    assert len(list(folder.glob("ledger.*.sqlite"))) == 1  # the old ledger, kept beside


def test_csv_is_written_whole_and_matches_the_ledger(tmp_path):
    df = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, out=str(tmp_path), progress=False)
    folder = tmp_path / "sweep_fns"
    assert not list(folder.glob("*.tmp*"))
    # what an analyst types (the README's one-liner) gives the same frame, dtypes included
    analyst = pd.read_csv(folder / "results.csv", **READ_CSV)
    pd.testing.assert_frame_equal(analyst, df)
    pd.testing.assert_frame_equal(sweeper.load(str(folder)), df)


# -- the whole sweep stopped from outside ---------------------------------------------

def _rerun(tmp_path, hold, *flags):
    hold.touch()
    grid = str(tmp_path / "grid.py")
    return subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_records_interrupted_and_resume_finishes(tmp_path, presses):
    proc, hold = start_waiting_sweep(tmp_path)
    trial_procs = psutil.Process(proc.pid).children(recursive=True)
    for _ in range(presses):
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "run the same command again to resume" in out
    psutil.wait_procs(trial_procs, timeout=10)
    assert not [p for p in trial_procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    table = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert sorted(table.status) == ["interrupted", "interrupted", "ok"]
    ok_row = table[table.status == "ok"].iloc[0]

    # interrupted trials are not failures: --skip-failed still runs them
    done = _rerun(tmp_path, hold, "--skip-failed")
    assert done.returncode == 0, done.stdout + done.stderr
    table = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert sorted(table.param_x) == [1, 2, 3, 4] and (table.status == "ok").all()
    again = table[table.param_x == ok_row.param_x].iloc[0]
    assert (again.started_at, again.value) == (ok_row.started_at, ok_row.value)  # not re-run


def test_parent_killed_children_die_and_rerun_loses_nothing(tmp_path):
    proc, hold = start_waiting_sweep(tmp_path)
    trial_procs = psutil.Process(proc.pid).children(recursive=True)
    assert trial_procs
    proc.kill()
    proc.communicate(timeout=30)
    gone, alive = psutil.wait_procs(trial_procs, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "trial outlived its parent"

    done = _rerun(tmp_path, hold)
    assert done.returncode == 0, done.stdout + done.stderr
    table = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert sorted(table.param_x) == [1, 2, 3, 4] and (table.status == "ok").all()
    assert "resumed: 1 trials" in done.stdout


# -- a trial that ignores SIGTERM: the grace ends in SIGKILL ---------------------------

STUBBORN_GRID = """
from sweep_fns import stubborn as train
grid = {{"x": [1]}}
options = {{"workers": 1, "start_method": {method!r}}}
"""
#: Wall-clock bound on a sweep of one SIGTERM-ignoring trial: it ends in seconds when the
#: grace ends in SIGKILL (TERM_GRACE, 5 s); without the SIGKILL it would never end.
STUBBORN_BOUND = 60


def _start_stubborn_sweep(tmp_path, method, *flags):
    grid = write_grid(tmp_path, STUBBORN_GRID.format(method=method))
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), *flags],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, tmp_path / "out" / "grid" / "trials" / "x=1" / "ignoring"


def _ignoring_pids(ignoring) -> list[int]:
    """The trial's pid and its child's, once both ignore SIGTERM (the trial wrote them)."""
    return [int(pid) for pid in ignoring.read_text().split()]


def _end_of(proc, ignoring) -> tuple[str, str]:
    """The sweep's output once it has ended by itself; a sweep still running after
    STUBBORN_BOUND seconds fails the test, after being killed with what it left."""
    try:
        return proc.communicate(timeout=STUBBORN_BOUND)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        for pid in _ignoring_pids(ignoring) if ignoring.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the sweep was still running {STUBBORN_BOUND}s later: its SIGTERM-ignoring trial "
                    f"was never killed\n{out}{err}")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_timeout_kills_a_trial_that_ignores_sigterm(tmp_path, method):
    proc, ignoring = _start_stubborn_sweep(tmp_path, method, "--timeout", "2")
    out, err = _end_of(proc, ignoring)
    assert proc.returncode == 1, out + err  # a trial failed
    # both ignored SIGTERM before the deadline: only the SIGKILL after the grace ended them
    assert ignoring.exists(), "the trial did not get to ignore SIGTERM within its 2 s"
    df = sweeper.load(str(tmp_path / "out" / "grid"))
    assert df.status.tolist() == ["timeout"], df.error.tolist()
    assert "timeout of 2s" in df.error[0]
    for pid in _ignoring_pids(ignoring):
        assert_dead(pid, timeout=1)


@pytest.mark.slow
# Without a timeout too: the scheduler before the engine formatted its timeout message on
# the way to the SIGKILL, with timeout=None (a TypeError, exit 1 instead of 130).
@pytest.mark.parametrize("method,timeout", [("spawn", None), ("forkserver", "600")])
def test_ctrl_c_kills_a_trial_that_ignores_sigterm(tmp_path, method, timeout):
    """Ctrl-C, then SIGKILL after the grace, under each start method, with a timeout and
    without. Not also spawn with a timeout: the timeout reaches the local backend only as
    the fork watchdog's (forkserver alone), so spawn's kill is the same with or without one
    (spawn-None), and the engine's path with a timeout set is forkserver-600's."""
    proc, ignoring = _start_stubborn_sweep(tmp_path, method, *(["--timeout", timeout] if timeout else []))
    deadline = time.monotonic() + STUBBORN_BOUND
    while not ignoring.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the trial's own sentinel file
    if not ignoring.exists():
        proc.kill()
        pytest.fail(f"the trial never got to ignore SIGTERM: {proc.communicate()}")
    proc.send_signal(signal.SIGINT)
    out, err = _end_of(proc, ignoring)
    assert proc.returncode == 130, out + err
    assert "run the same command again to resume" in out
    df = sweeper.load(str(tmp_path / "out" / "grid"))
    assert df.status.tolist() == ["interrupted"], df.error.tolist()
    assert "SIGINT" in df.error[0]
    for pid in _ignoring_pids(ignoring):
        assert_dead(pid, timeout=1)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_daemon_ends_with_its_trial_not_with_the_sweep(tmp_path, method):
    """A forked trial's daemon carries the fork server's environment as /proc shows it; the
    trial's slot is written there too, so the daemon is found when its trial ends."""
    df = sweeper.sweep(sweep_fns.daemon_then_check, {"x": [1, 2, 3]}, out=str(tmp_path), workers=1,
                       start_method=method, progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.earlier.tolist() == [0, 1, 2]
    assert df.outlived.tolist() == [0, 0, 0]


def test_a_daemon_started_by_the_grid_files_import_ends_with_the_sweep(tmp_path):
    """Wherever the file is imported (the CLI's grid reader, the fork server's trials), a
    daemon its top level starts is gone when the command returns."""
    marks = tmp_path / "daemons"
    grid = write_grid(tmp_path, f"""import os
from sweep_fns import _daemon, echo as train
_daemon({str(marks)!r} + "." + str(os.getpid()))
grid = {{"x": [1, 2, 3]}}
""")
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--workers", "1", "--quiet", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    pids = [int(p.read_text()) for p in tmp_path.glob("daemons.*")]
    assert len(pids) >= 4  # the reader's and each trial's
    for pid in pids:
        assert_dead(pid, timeout=5)


def _unprivileged() -> list[str]:
    """A command prefix that runs a process the file permissions bind (root without the
    capabilities that bypass them), or a skip saying why there is none here."""
    import shutil

    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux): no process here is refused a read-only folder")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.parametrize("which", ["trials", "own"])
def test_a_folder_made_read_only_mid_sweep_stops_new_trials_and_resumes(tmp_path, which):
    """The first trial file that cannot be written (the next trial's log, or a running
    trial's result.json) stops new trials in one line naming it; rows so far stay; resume."""
    prefix = _unprivileged()
    go, started = tmp_path / "go", tmp_path / "started"
    grid = write_grid(tmp_path, f"""import os, time
from sweep_fns import echo

def train(params):
    if params["x"] == 1 and not os.path.exists({str(go)!r}):
        open({str(started)!r}, "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)  # polling the test's own sentinel file
    return echo(params)

grid = {{"x": [1, 2, 3, 4]}}
""")
    out = tmp_path / "out"
    cmd = [*prefix, sys.executable, "-m", "sweeper", grid, "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the trial's sentinel file
        assert started.exists(), proc.communicate(timeout=30)
        locked = out / "grid" / "trials" / ("x=1" if which == "own" else "")
        locked.chmod(0o555)
        go.touch()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2, stdout + stderr
    said = [line for line in (stdout + stderr).splitlines() if "no new trials start" in line]
    assert len(said) == 1 and str(locked).rstrip("/") in said[0] and "Permission denied" in said[0], said
    df = pd.read_csv(out / "grid" / "results.csv", **READ_CSV)
    expected = {1: "ok"} if which == "own" else {1: "ok", 2: "interrupted"}
    assert df.set_index("param_x").status.to_dict() == expected, df.error.tolist()
    locked.chmod(0o755)
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    df = pd.read_csv(out / "grid" / "results.csv", **READ_CSV)
    assert (df.status == "ok").all() and len(df) == 4
