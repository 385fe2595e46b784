"""Shared fixtures: every test must leave no process behind."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile

import psutil
import pytest

# A suite started in the background by a script (``cmd &``, nohup) inherits SIGINT ignored,
# and so would every CLI run it starts, which then never sees the Ctrl-C a test sends: the
# tests run as from a terminal, with Python's own Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The user's cache (sweeper keeps an empty MLflow store there): the suite's own, not the user's.
os.environ["XDG_CACHE_HOME"] = _CACHE = tempfile.mkdtemp(prefix="sweeper-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
# Where sweeps on one machine tell each other what they hold (docs/shared.md): the suite's own,
# one per test process, so sweeps of tests that run side by side (or a user's) never share cards.
os.environ["SWEEPER_MACHINE_DIR"] = _MACHINE = tempfile.mkdtemp(prefix="sweeper-test-machine-")
atexit.register(shutil.rmtree, _MACHINE, True)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:  # spawned children inherit sys.path, so they can import sweep_fns
    sys.path.insert(0, HERE)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (setup.cfg): three workers for the suite, whatever the machine (a test spends
    much of its time waiting on the processes it started, so a third file runs in that time on
    2 cores); two for the fast tier alone (``-m unit``: nothing waits there, and a third worker's
    start and collection would only add to its seconds)."""
    return 2 if config.getoption("markexpr") == "unit" else 3


def pytest_configure(config):
    """Compile sweeper's modules and the tests' helpers once, before any test, where Python
    writes no bytecode of its own (``PYTHONDONTWRITEBYTECODE``, set on some CI machines):
    else every process the suite starts that imports sweeper (CLI runs, trials, fork servers,
    Hydra apps) compiles its ~150 modules again, 0.12 s of a core each. Python still reads
    bytecode it finds; a module edited later is compiled again as usual."""
    if not sys.dont_write_bytecode or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall

    for folder in ("sweeper", "hydra_plugins", "tests"):
        compileall.compile_dir(os.path.join(ROOT, folder), quiet=2)


def group_of(nodeid: str) -> str:
    """The group a test runs in under pytest-xdist: its file's, and one for the Ray files."""
    stem = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return "ray" if stem.startswith("test_ray") else stem


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n auto``: three workers, see docs/development.md): a file's tests run
    in one worker, in order, so a module's fixture (a trained example, a Slurm or Ray cluster)
    starts once; the Ray files share one worker, so two Ray instances never start side by side.
    Three workers on two cores: much of a test's time is spent waiting on the processes it
    started (imports, Slurm's and Ray's daemons, deadlines), so a third file runs in that time.

    The groups are given here, to the scheduler, not as ``xdist_group`` marks: pytest-xdist turns
    a mark into a suffix of the test's id, which pytest 9 no longer lets it change, so every
    test became a group of its own and a module's fixture started again wherever its tests
    landed."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the workers' order holds: pytest_collection_modifyitems

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByFile(config, log)


def pytest_collection_modifyitems(config, items):
    """In a pytest-xdist worker: the groups that start the most processes first (a test not
    marked unit starts some), each group's tests in their order, so that the files left for the
    end are cheap ones and no long file starts last while the other workers have finished."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    weight: dict[str, int] = {}
    first: dict[str, int] = {}
    for at, item in enumerate(items):
        group = group_of(item.nodeid)
        first.setdefault(group, at)
        weight[group] = weight.get(group, 0) + (item.get_closest_marker("unit") is None)
    items.sort(key=lambda item: (-weight[group_of(item.nodeid)], first[group_of(item.nodeid)]))


@pytest.fixture(autouse=True)
def sweeper_lines_reach_caplog():
    """``sweep()`` prints sweeper's lines through a handler of its own and stops them going
    on to the root logger (an application's handlers there would print them twice) the
    first time it runs in a process; caplog reads at the root. That handler is put in place
    here first, with the lines going on, so a test's caplog sees them whatever ran before
    it in this process (alone, or first in its worker, such a test saw nothing).

    A handler an earlier test's library left on the root logger, writing to that test's
    captured stream (closed since), is taken off first: else each line printed a logging
    error whose "Arguments:" line repeats it in the next tests' output (a file run after
    the Ray or Hydra files in the same worker saw its one line twice)."""
    import logging

    from sweeper.front.messages import show_messages

    for logger in (logging.getLogger(), logging.getLogger("sweeper")):
        for handler in list(logger.handlers):
            if getattr(getattr(handler, "stream", None), "closed", False):
                logger.removeHandler(handler)
    show_messages()
    logging.getLogger("sweeper").propagate = True
    yield


@pytest.fixture(autouse=True)
def no_stray_processes():
    """Fail a test that leaves any child process of the test runner alive."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    left = [p for p in me.children(recursive=True) if p.pid not in before and not _helper(p)]
    alive = _still_running(left, within=10)
    for p in alive:
        p.kill()
    assert not alive, f"processes left behind: {[(p.pid, _cmd(p)) for p in alive]}"


#: In the environment of a process a module's fixture starts for the whole module (and of its
#: children): no test's process, so no test's leftover (tests/backends/test_slurm.py's time-limit sweep).
MODULE_PROCESS = "SWEEPER_TEST_MODULE_PROCESS"


def _helper(p: psutil.Process) -> bool:
    """multiprocessing's resource tracker and fork server (one per parent, for its lifetime),
    a local Ray instance's own processes (Ray keeps idle workers, and ends them itself), and a
    module fixture's own (:data:`MODULE_PROCESS`)."""
    cmd = _cmd(p)
    try:
        if p.environ().get(MODULE_PROCESS):
            return True
    except psutil.Error:
        pass
    try:
        if p.name().startswith("ray::") or "/ray/" in cmd or p.name() in ("raylet", "gcs_server"):
            return True
    except psutil.Error:
        return False
    try:  # a trial forked by the server shares its command line, but not its parent
        direct = p.ppid() == os.getpid()
    except psutil.Error:
        return False
    return direct and ("multiprocessing.resource_tracker" in cmd or "multiprocessing.forkserver" in cmd)


def _still_running(procs: list[psutil.Process], within: float) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie is not: it has ended, and its parent, which is
    not always this process, reaps it) after at most ``within`` seconds. ``psutil.wait_procs``
    counts a zombie it cannot reap as running, so a test whose trials' zombies wait for their
    server to reap them would wait out the whole ``within``."""
    import time

    deadline = time.monotonic() + within
    pending = list(procs)
    while True:  # wait_procs reaps those that are this process's children as they end
        _, pending = psutil.wait_procs(pending, timeout=0.05)
        alive = [p for p in pending if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:120]
    except psutil.Error:
        return "?"


#: The unit test running now (``-m unit``), if any: it may start no process.
_UNIT: list[str] = []
_STARTS = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "subprocess.Popen")


def _refuse_in_unit_tests(event: str, args: tuple) -> None:
    if _UNIT and event in _STARTS:
        raise RuntimeError(f"{_UNIT[0]} is marked unit (the fast tier, one process) but started a process "
                           f"({event}): keep it in-process, or drop its unit mark")


sys.addaudithook(_refuse_in_unit_tests)


@pytest.fixture(autouse=True)
def one_process_in_unit_tests(request, monkeypatch):
    """A ``unit`` test starts no process: forks, execs and subprocesses are refused by an
    audit hook, and multiprocessing's spawn (which fork-execs without an audit event) by
    its one entry point, so the tier stays fast and machine-independent."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import multiprocessing.util

    def refuse(*args, **kwargs):
        _refuse_in_unit_tests("os.exec", args)

    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse)
    _UNIT.append(request.node.nodeid)
    try:
        yield
    finally:
        _UNIT.clear()


@pytest.fixture(autouse=True)
def cpu_machine(request, monkeypatch):
    """Tests not about GPUs run as on a CPU machine wherever they run: GPUs are hidden
    (``CUDA_VISIBLE_DEVICES=-1``, from sweeper, its CLI runs and every framework), so a GPU
    machine neither changes their slots (one per GPU, not per core) nor gives them a GPU.
    GPU tests ask for their machine: ``fake_nvml`` / ``no_nvml``, or the ``gpu`` mark for
    the real cards."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")


@pytest.fixture
def fake_nvml(monkeypatch, tmp_path):
    """A machine with two 16 GB cards, as NVML describes it (tests/fake_nvml.py), whatever
    this machine has: the GPU logic above NVML runs for real, on CPU and GPU machines alike.
    The user's CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are cleared; a test sets its own.
    ``fake_nvml.board`` is where trials hold fake GPU memory (``fake_nvml.hold``)."""
    from fake_nvml import Card, FakeNvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    board = tmp_path / "nvml-board"
    board.mkdir()
    return FakeNvml([Card(), Card()], board=str(board)).install(monkeypatch)


@pytest.fixture
def no_nvml(monkeypatch):
    """A machine whose NVML library cannot be loaded (no driver), whatever this one has."""
    from fake_nvml import FakeNvml, no_driver

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = FakeNvml([]).install(monkeypatch)
    fake.fail["nvmlInit"] = no_driver()
    return fake


def assert_dead(pid: int, timeout: float = 10) -> None:
    """The process is gone (or a zombie nobody reaped, which holds no memory)."""
    try:
        p = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    alive = _still_running([p], within=timeout)
    for q in alive:
        q.kill()
    assert not alive, f"process {pid} outlived its trial"


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB filesystem of its own (tmpfs), so the test can fill it up; a skip saying why
    where none can be mounted."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here to fill up ({done.stderr.decode().strip()})")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def write_grid(tmp_path, body: str, name: str = "grid.py") -> str:
    """A grid file in tmp_path whose train functions come from tests/sweep_fns.py."""
    path = tmp_path / name
    path.write_text(f"import sys\nsys.path.insert(0, {HERE!r})\n{body}")
    return str(path)


def run_cli(*args: str, cwd=None, timeout: float = 240):
    """``python -m sweeper ...`` as a user runs it; returns the CompletedProcess."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "sweeper", *args],
        cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
    )


def run_cli_here(*args: str, cwd=None):
    """``python -m sweeper ARGS`` run in this process (``sweeper.front.cli.main``, which that
    command calls), in ``cwd``: its exit code, stdout and stderr, as :func:`run_cli` gives them.
    For a command a test runs only to use its result (an export after the sweep it checks),
    where a fresh interpreter would import MLflow or Optuna again; the CLI itself is run by
    the tests of each command."""
    import contextlib
    import io
    from types import SimpleNamespace

    from sweeper.front.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def run_fake_cli(fake, *args: str, timeout: float = 240):
    """``python -m sweeper ARGS`` on the machine the FakeNvml ``fake`` describes."""
    import subprocess

    env = {**os.environ, "SWEEPER_FAKE_NVML": fake.to_json()}
    return subprocess.run([sys.executable, os.path.join(HERE, "fake_nvml.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def install_module(site, name: str, source: str | None) -> str:
    """``name`` as an installed distribution lays it out in the folder ``site`` (a module and
    its ``.dist-info``), as a third-party library is: a fork server may import it ahead.
    Put ``site`` on sys.path (or PYTHONPATH for a CLI run) to use it; returns its path.
    ``source=None``: the metadata alone (the module lies elsewhere on sys.path)."""
    site = str(site)
    os.makedirs(os.path.join(site, f"{name}-1.0.dist-info"), exist_ok=True)
    if source is not None:
        with open(os.path.join(site, f"{name}.py"), "w") as f:
            f.write(source)
    info = os.path.join(site, f"{name}-1.0.dist-info")
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    with open(os.path.join(info, "top_level.txt"), "w") as f:
        f.write(f"{name}\n")
    with open(os.path.join(info, "RECORD"), "w") as f:
        f.write(f"{name}.py,,\n{name}-1.0.dist-info/METADATA,,\n")
    return site
