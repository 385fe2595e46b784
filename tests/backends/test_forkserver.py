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

import sweeper
from conftest import ROOT, assert_dead, install_module, run_cli, write_grid
from sweeper.backends.local import fork
from sweeper.store.table import READ_CSV

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


def _counted(tmp_path, monkeypatch, name: str, import_s: float = 0.0, extra: str = ""):
    marks = tmp_path / f"{name}.marks"
    (tmp_path / f"{name}.py").write_text(extra + COUNTED.format(import_s=import_s, marks=str(marks)))
    monkeypatch.syspath_prepend(str(tmp_path))  # a folder only the sweep's own sys.path has
    module = __import__(name)
    return module, marks


def _marks(marks, kind: str) -> list[tuple[int, float, float]]:
    rows = [line.split() for line in marks.read_text().splitlines()] if marks.exists() else []
    return [(int(pid), float(a), float(b)) for pid, k, a, b in rows if k == kind]


def test_every_trial_is_a_fresh_fork_that_runs_the_users_module_itself(tmp_path, monkeypatch):
    """The fork server imports what the module imports from installed libraries, once; the
    module's own top level runs in each trial, as under spawn."""
    site = install_module(tmp_path / "site", "noted_lib", NOTED_LIB.format(marks=str(tmp_path / "lib.marks")))
    monkeypatch.syspath_prepend(site)
    module, marks = _counted(tmp_path, monkeypatch, "counted_default", import_s=0.0, extra="import noted_lib\n")
    marks.unlink()  # this process's own import does not count
    (tmp_path / "lib.marks").unlink()
    df = sweeper.sweep(module.train, {"x": [1, 2, 3, 4, 5]}, workers=2, out=str(tmp_path / "o"), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.pid.nunique() == 5 and os.getpid() not in set(df.pid)  # a fresh process per trial
    assert {pid for pid, *_ in _marks(marks, "import")} == set(df.pid)  # each ran the module itself
    lib = [int(line) for line in (tmp_path / "lib.marks").read_text().split()]
    assert len(lib) == 1 and set(df.ppid) == set(lib)  # the library: once, in the server they forked from
    assert_dead(lib[0])  # the server ends with its sweep
    for pid in df.pid:
        assert_dead(pid, timeout=1)


#: An installed library that notes each process that imports it.
NOTED_LIB = """import os
with open({marks!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
"""


def test_what_the_users_module_makes_at_import_is_each_trials_own(tmp_path):
    """Random generators, ids, threads, locks, connections made at the grid file's import:
    under the fork server as under spawn, each trial has its own."""
    grid = write_grid(tmp_path, """import os, random, sqlite3, threading, time, uuid
import numpy as np
RNG = np.random.default_rng()
R = random.Random()
RUN_ID = uuid.uuid4().hex
IMPORTED_IN = os.getpid()
DB = sqlite3.connect(":memory:")
LOCK = threading.Lock()

def _hold():  # a thread of the module's that holds its lock most of the time
    while True:
        with LOCK:
            time.sleep(0.05)
        time.sleep(0.001)

threading.Thread(target=_hold, daemon=True).start()

def train(params):
    with LOCK:
        pass
    DB.execute("select 1")
    return {"rng": float(RNG.random()), "r": R.random(), "run_id": int(RUN_ID[:12], 16),
            "own_import": int(IMPORTED_IN == os.getpid()), "pid": os.getpid()}

grid = {"x": [1, 2, 3, 4, 5, 6]}
""")
    for method in ("forkserver", "spawn"):
        r = run_cli(grid, "--out", str(tmp_path / "out"), "--name", method, "--workers", "2", "--quiet",
                    "--start-method", method, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        df = pd.read_csv(tmp_path / "out" / method / "results.csv", **READ_CSV)
        assert (df.status == "ok").all() and len(df) == 6, df.error.tolist()
        assert (df.own_import == 1).all(), method
        for column in ("rng", "r", "run_id", "pid"):
            assert df[column].nunique() == 6, (method, column, df[column].tolist())


def _deadlocking_library(tmp_path, monkeypatch):
    """tests/fork_deadlock.py as an installed library (the fork server imports it ahead),
    and a user's module whose train comes from it."""
    monkeypatch.syspath_prepend(install_module(tmp_path / "site", "fork_deadlock", None))
    (tmp_path / "deadlock_user.py").write_text("from fork_deadlock import train as _train\n\n\n"
                                               "def train(params):\n    return _train(params)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import deadlock_user

    return deadlock_user


@pytest.mark.parametrize("workers, watchdog, timeout", [(2, 2.0, None), (1, None, 5.0)])
def test_a_fork_that_never_reaches_train_is_killed_and_its_trial_run_under_spawn(tmp_path, monkeypatch, caplog,
                                                                                  workers, watchdog, timeout):
    """Whatever the timeout: with --timeout 5 the watchdog (30 s) looks at half the timeout.
    Not also one worker with the watchdog's own 2 s: one hung fork rescued alone is the
    timeout case's path (one worker), and the watchdog's own length, not half a timeout, is
    the two workers' case; the length is one number either way (fork.Launcher.watch_s)."""
    if watchdog is not None:
        monkeypatch.setattr(fork, "FORK_WATCHDOG_S", watchdog)
    user = _deadlocking_library(tmp_path, monkeypatch)
    with caplog.at_level("WARNING", logger="sweeper"):
        df = sweeper.sweep(user.train, {"x": [1, 2, 3, 4]}, workers=workers, out=str(tmp_path / "o"),
                           progress=False, timeout=timeout)
    assert (df.status == "ok").all(), df.error.tolist()
    assert (df.attempts == 1).all()  # a rescue is not a retry
    # the hung forks' trials and every later one ran in spawn processes: children of this one
    assert (df.ppid == os.getpid()).all() and df.pid.nunique() == 4
    logs = {t: (tmp_path / "o" / "deadlock_user" / "trials" / t / "log.txt").read_text() for t in df.trial}
    fired = [t for t, text in logs.items() if fork.WATCHDOG_MARK in text]
    hung = ["x=1", "x=2"][:workers]  # the forks made before the first rescue; none after it
    assert fired == hung, fired
    for t in hung:  # why, then the header of the process that ran it
        pid = df.loc[df.trial == t, "pid"].item()
        assert logs[t].index(fork.WATCHDOG_MARK) < logs[t].index(f"pid {pid},")
    warned = [r.getMessage() for r in caplog.records if "had not reached train" in r.getMessage()]
    assert len(warned) == workers and all(any(t in w for w in warned) for t in hung)


def test_ctrl_c_while_the_fork_server_imports_ends_waiting_trials_as_interrupted(tmp_path):
    # sweep() from a script: its trials are planned, handed to their slots, and wait for the
    # fork server (the CLI's, started before its grid file is read, has imported before any
    # trial is planned: tests/run/test_signals.py covers Ctrl-C there). Ctrl-C is sent
    # once the ledger holds the plan; where it still came before the trials were handed to
    # their slots (no row at all), the run is tried again, twice at most.
    df = None
    for attempt in range(3):
        code, said, server = _ctrl_c_while_the_server_imports(tmp_path, attempt)
        assert code == 130, said
        csv = tmp_path / f"out{attempt}" / "grid" / "results.csv"
        df = pd.read_csv(csv, **READ_CSV) if csv.exists() else None
        if df is not None and len(df):
            break
    assert df is not None and len(df), f"three times Ctrl-C came before a trial was handed to a slot: {said}"
    # the trials of both slots waited for the server; x=3 never started: no row, the next run runs it
    assert df.set_index("param_x").status.to_dict() == {1: "interrupted", 2: "interrupted"}, df.error
    assert df.device.isna().all()  # no slot was theirs: no device, not "?"
    assert len(server) == 1
    assert_dead(server[0].pid, timeout=5)


#: A script that sweeps a train of its own, whose module holds an installed library the
#: fork server therefore imports (and which sleeps there).
INTERRUPTED_SCRIPT = """import sys
import slow_lib  # noqa: F401  (held by train's module: the fork server imports it ahead)
from sweeper import sweep


def train(params):
    return {{"x": params["x"]}}


if __name__ == "__main__":
    try:
        sweep(train, {{"x": [1, 2, 3]}}, workers=2, out={out!r}, name="grid", progress=False)
    except KeyboardInterrupt:
        sys.exit(130)
"""


def _ctrl_c_while_the_server_imports(tmp_path, attempt: int) -> tuple[int | None, str, list[psutil.Process]]:
    """A script's sweep whose fork server imports for ever, Ctrl-C'd once the server imports
    and the ledger holds the plan: its exit code, what it printed, its fork server."""
    from sweeper.store.ledger import Ledger

    ready, out_dir = tmp_path / f"server_importing{attempt}", tmp_path / f"out{attempt}"
    site = install_module(tmp_path / f"site{attempt}", "slow_lib", f"""import os, time
if os.environ.get("SWEEPER_PRELOAD_READY"):  # the fork server's import, and only its
    open({str(ready)!r}, "w").close()
    time.sleep(600)
""")
    script = tmp_path / f"interrupted{attempt}.py"
    script.write_text(INTERRUPTED_SCRIPT.format(out=str(out_dir)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, ROOT])}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)

    def planned() -> bool:
        if not (out_dir / "grid" / "ledger.sqlite").exists():
            return False
        try:
            ledger = Ledger(str(out_dir / "grid"), readonly=True)
        except Exception:  # noqa: BLE001 - being made: looked at again
            return False
        try:
            return len(ledger.grid_names()) == 3
        finally:
            ledger.close()

    try:
        deadline = time.monotonic() + 120
        while not (ready.exists() and planned()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the server's own sentinel file and the sweep's ledger
        assert ready.exists() and planned(), proc.communicate(timeout=30)
        server = [p for p in psutil.Process(proc.pid).children(recursive=True)
                  if "forkserver" in " ".join(p.cmdline())]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out + err, server


def _overlaps(spans: list[tuple[int, float, float]]) -> int:
    """How many pairs of the spans overlap in time."""
    return sum(1 for i, a in enumerate(spans) for b in spans[i + 1:] if a[1] < b[2] and b[1] < a[2])


class _Measured:
    """Idle cores as :class:`sweeper.system.headroom.IdleCpu` would measure them, injected: the
    test is of sweeper's policy, not of how busy this machine is."""

    def __init__(self, cores: float) -> None:
        self.cores, self.measured_at = cores, 0.0

    def sample(self) -> float:
        self.measured_at = time.monotonic()
        return self.cores


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["idle", "busy"])
def test_spawn_standbys_import_ahead_together_only_while_cores_are_idle(tmp_path, monkeypatch, machine):
    from sweeper.system import headroom

    # what standbys import ahead is installed libraries (the user's module comes after the
    # trial's seed): a library that takes 1.5 s, imported by the user's module
    marks = tmp_path / "lib.marks"
    lib = f"counted_lib_{machine}"
    site = install_module(tmp_path / "site", lib, COUNTED.format(import_s=1.5, marks=str(marks)))
    monkeypatch.syspath_prepend(site)
    (tmp_path / f"counted_{machine}.py").write_text(f"import {lib}\ntrain = {lib}.train\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(f"counted_{machine}")
    marks.unlink()  # this process's own import does not count
    # busy: every core taken (as by colleagues' jobs, or by trials using the CPU)
    monkeypatch.setattr(headroom, "IdleCpu", lambda: _Measured(4.0 if machine == "idle" else 0.0))
    monkeypatch.setattr(headroom, "available_mb", lambda: 64000.0)
    df = sweeper.sweep(module.train, {"x": list(range(6)), "s": 0.5}, workers=1, start_method="spawn",
                       out=str(tmp_path / "o"), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    imports = _marks(marks, "import")
    assert len(imports) == 6  # never more standbys than trials left: none started in vain
    together = _overlaps(imports)
    if machine == "idle":  # imports take 3 trials' time: one at a time would leave gaps
        assert together >= 2, imports
    else:
        assert together == 0, imports


def test_when_the_fork_server_dies_its_forks_keep_their_exit_codes_and_the_rest_spawn(tmp_path, capsys):
    """The kernel's OOM killer may pick the server: one line says so, a running fork's own
    exit code (not multiprocessing's 255) is recorded, and later trials are spawned."""
    import sweep_fns

    df = sweeper.sweep(sweep_fns.server_killer, {"x": [1, 2, 3, 4], "sweep": os.getpid()}, workers=2,
                       out=str(tmp_path), progress=False)
    by_x = df.set_index("param_x")
    assert by_x.status.to_dict() == {1: "crashed", 2: "ok", 3: "ok", 4: "ok"}, df.error.tolist()
    assert "exit code 7" in by_x.error[1], by_x.error[1]
    assert (by_x.ppid[[3, 4]] == os.getpid()).all()  # spawned: children of the sweep
    said = capsys.readouterr()
    died = [line for line in (said.out + said.err).splitlines() if "fork server" in line and "died" in line]
    assert len(died) == 1 and "SIGKILL" in died[0], died


def test_a_killed_sweep_leaves_no_temporary_folders_once_the_next_one_starts(tmp_path):
    """A SIGKILL gives the sweep no chance to clean up; the next sweep removes the folders
    of sweeps that are gone (and only theirs)."""
    import pathlib
    import shutil
    import tempfile

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sw-", dir="/tmp"))  # short: a socket's path lies in it
    (tmp / "sweeper-forkserver-1-alive").mkdir()  # pid 1 lives: not a dead sweep's
    started = tmp_path / "started"
    grid = write_grid(tmp_path, f"""import os, time
from sweep_fns import echo

def train(params):
    if params["x"] == 1 and not os.path.exists({str(started)!r}):
        open({str(started)!r}, "w").close()
        time.sleep(600)
    return echo(params)

grid = {{"x": [1, 2]}}
""")
    env = {**os.environ, "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--quiet", "--workers", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the trial's own sentinel file
        assert started.exists()
        assert len(list(tmp.glob("sweeper-forkserver-*-*"))) == 2, sorted(tmp.iterdir())
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        left = sorted(p.name for p in tmp.iterdir())
        assert left == ["sweeper-forkserver-1-alive"], left
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_train_may_use_multiprocessing_as_a_plain_script_may(tmp_path, method):
    """A Pool with the default start method, ProcessPoolExecutor, spawn and forkserver
    children: each finds the grid file's functions again, as under plain python."""
    grid = write_grid(tmp_path, """import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

def square(x):
    return x * x

def train(params):
    with mp.Pool(2) as pool:
        default = sum(pool.map(square, range(4)))
    with ProcessPoolExecutor(2) as ex:
        executor = sum(ex.map(square, range(4)))
    with mp.get_context("spawn").Pool(1) as pool:
        spawned = sum(pool.map(square, range(4)))
    with mp.get_context("forkserver").Pool(1) as pool:
        forkserved = sum(pool.map(square, range(4)))
    return {"default": default, "executor": executor, "spawned": spawned, "forkserved": forkserved}

if __name__ == "__main__":
    raise SystemExit("the grid file's main block ran in a trial")

grid = {"x": [1, 2]}
""")
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--quiet", "--start-method", method, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert (df.status == "ok").all(), df.error.tolist()
    for column in ("default", "executor", "spawned", "forkserved"):
        assert (df[column] == 14).all(), (column, df[column].tolist())


#: An installed library that "initialises CUDA" where it is imported, as NVML would show it
#: (tests/fake_nvml.py): the importing process holds memory on the first fake card, as one
#: holding a CUDA context would. (A real framework started with no card visible, as the fork
#: server is, makes no context; a library that picks its own card at import does.)
CUDA_AT_IMPORT = """import os
if os.environ.get("HOLD_AT_IMPORT_MB"):
    with open(os.path.join(os.environ["HOLD_BOARD"], str(os.getpid())), "w") as f:
        f.write(os.environ["HOLD_CARD"] + " " + os.environ["HOLD_AT_IMPORT_MB"])
"""

TRAIN_WITH_IT = """import os
import cuda_at_import

def train(params):
    return {"pid": os.getpid(), "ppid": os.getppid()}
"""


@pytest.mark.parametrize("holds", [True, False], ids=["server-holds-a-context", "clean"])
def test_on_a_gpu_machine_forks_are_trusted_only_if_the_server_holds_nothing_on_a_card(
        tmp_path, monkeypatch, fake_nvml, capsys, holds):
    """The fork server's probe on a GPU machine: after it, NVML must list no process of the
    server's on any card (a context made before a fork is one no fork can use); else the
    sweep spawns, said in one line, and every trial is still ok."""
    site = install_module(tmp_path / "site", "cuda_at_import", CUDA_AT_IMPORT)
    monkeypatch.syspath_prepend(site)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "probed_fns.py").write_text(TRAIN_WITH_IT)
    monkeypatch.syspath_prepend(str(tmp_path / "user"))
    card = fake_nvml.cards[0]
    monkeypatch.setenv("HOLD_BOARD", fake_nvml.board)
    monkeypatch.setenv("HOLD_CARD", card.uuid)
    if holds:
        monkeypatch.setenv("HOLD_AT_IMPORT_MB", "700")
    module = __import__("probed_fns")
    df = sweeper.sweep(module.train, {"x": [1, 2, 3]}, workers=2, out=str(tmp_path / "out"), progress=False)
    assert df.status.tolist() == ["ok"] * 3, df.error.tolist()
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if "fork server" in line]
    if holds:
        assert len(lines) == 1, lines
        assert "holds 700 MB on gpu:0 after its probe" in lines[0] and "spawn processes" in lines[0], lines
        assert (df.ppid == os.getpid()).all()  # spawned: children of the sweep
    else:
        assert lines == []
        assert (df.ppid != os.getpid()).all()  # forks of the server


@pytest.mark.unit
def test_the_probe_pins_the_first_card_of_the_sweep_under_a_small_cap(fake_nvml):
    """What the probe fork's environment is on a GPU machine (a GPU slot's, the freest card's,
    with a cap as a packed trial's), and that on the CPU there is no GPU probe."""
    from sweeper.system import capping
    from sweeper.model import contract
    from sweeper.placement.slots import parse_gpus, place

    env = fork.probe_env(place(parse_gpus("1"), capping.resolve(2, None, False), None).slots)
    assert env is not None
    assert env["CUDA_VISIBLE_DEVICES"] == fake_nvml.cards[1].uuid
    fake_nvml.cards[0].reserved_mb = 9000  # card 0 busy: the probe takes the freer one
    both = fork.probe_env(place("all", capping.resolve(2, None, False), None).slots)
    assert both is not None and both["CUDA_VISIBLE_DEVICES"] == fake_nvml.cards[1].uuid
    assert env[contract.MEMORY_LIMIT_MB] == str(capping.PROBE_CAP_MB)
    assert float(env[contract.MEMORY_FRACTION]) == pytest.approx(capping.PROBE_CAP_MB / 16384, rel=1e-3)
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and contract.SLOT not in env
    assert fork.probe_env(place("none", capping.resolve(None, None, False), 2).slots) is None
