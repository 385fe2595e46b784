"""A real one-node Slurm for the tests, started by them: munged, slurmctld and slurmd with a
configuration of their own in a temporary folder (their own ports, no accounting, no
cgroups: ``proctrack/linuxproc``, ``task/none``), as root. The node is this machine, as
``slurmd -C`` describes its memory, with :data:`CPUS` CPUs whatever it has
(``SlurmdParameters=config_overrides``: a long job, Slurm's own time limit's, runs beside the
other tests' jobs on a 2-core machine; Slurm does not enforce cores without cgroups anyway),
and two GPUs of its own: Slurm hands them out as ``gres/gpu``
(``CUDA_VISIBLE_DEVICES`` set by Slurm) though they are character devices as /dev/null is,
so a job that asks for a GPU runs here; nothing in the tests touches a real GPU through them.
Where such devices cannot be made, the node has no GPUs (:data:`GPUS` says so).

Debian's ``slurm-wlm`` and ``munge`` (apt-get) give the binaries; without them, or not as
root, the tests that need it skip, saying why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import threading
import time

import pytest

CONF = """\
ClusterName=sweeper
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/ctld.pid
SlurmdPidFile={root}/d.pid
SlurmctldLogFile={root}/ctld.log
SlurmdLogFile={root}/d.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
SlurmctldPort={port}
SlurmdPort={dport}
{node} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
GRES = "Name=gpu File={root}/gpu[0-1]\n"


#: Whether the running test Slurm has its two GPUs (their device files could be made).
GPUS = False
#: The CPUs the test node offers Slurm (more than a small machine has: jobs mostly wait).
CPUS = 8


def _fake_gpus(root: str) -> bool:
    """Two character devices (as /dev/null) for Slurm's gres/gpu, which wants devices, not files."""
    try:
        for gpu in range(2):
            path = os.path.join(root, f"gpu{gpu}")
            if not os.path.exists(path):
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        return False
    return True


def missing() -> str:
    """Why no Slurm can be started here ("" where one can)."""
    if not all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sbatch")):
        return "no Slurm here (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a test Slurm runs as root"
    return ""


def _munge_answers() -> bool:
    """Whether a munged runs here and answers (a credential made and read back)."""
    try:
        made = subprocess.run(["munge", "-n"], capture_output=True)
        return made.returncode == 0 and subprocess.run(["unmunge"], input=made.stdout,
                                                       capture_output=True).returncode == 0
    except OSError:  # (no munge client here: start one)
        return False


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_line() -> str:
    """This machine as slurmd sees it (``slurmd -C``: its name and memory), with :data:`CPUS` CPUs."""
    seen = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.split()
    fields = dict(word.split("=", 1) for word in seen if "=" in word)
    return f"NodeName={fields['NodeName']} CPUs={CPUS} RealMemory={fields['RealMemory']}"


@contextlib.contextmanager
def one_node(root: str):
    """Slurm up, SLURM_CONF set for this process and its children; all of it stopped after."""
    host = socket.gethostname()
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    global GPUS
    GPUS = _fake_gpus(root)
    conf = os.path.join(root, "slurm.conf")
    text = CONF.format(host=host, root=root, port=_free_port(), dport=_free_port(), node=node_line())
    with open(conf, "w") as f:
        f.write(text if GPUS else text.replace(" Gres=gpu:2", "").replace("GresTypes=gpu\n", ""))
    with open(os.path.join(root, "gres.conf"), "w") as f:
        f.write(GRES.format(root=root) if GPUS else "")
    env = {**os.environ, "SLURM_CONF": conf}
    os.makedirs("/run/munge", exist_ok=True)
    if not _munge_answers():  # one running already serves every cluster of the session (none started twice)
        subprocess.run(["munged", "--force"], capture_output=True)
    daemons = [subprocess.Popen([daemon, "-D"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for daemon in ("slurmctld", "slurmd")]
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test Slurm did not come up; see {root}/ctld.log and {root}/d.log")
            time.sleep(0.2)
        yield conf
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)  # no job outlives it
        deadline = time.monotonic() + 15  # slurmd ends the jobs' steps: stopped before that, they lived on
        while time.monotonic() < deadline and subprocess.run(["squeue", "-h"], env=env, capture_output=True,
                                                             text=True).stdout.strip():
            time.sleep(0.2)
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()


def squeue(*args: str) -> list[list[str]]:
    """``squeue -h -r`` with ``args`` (``-o`` a format), its lines split."""
    out = subprocess.run(["squeue", "-h", "-r", *args], capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def sweep_jobs() -> list[list[str]]:
    """The tasks of sweeper's jobs still in the queue: [task id, state, name]."""
    return [row for row in squeue("-o", "%i %T %j") if len(row) == 3 and row[2].startswith("sweeper-")]


def until(check, what: str, within: float = 90.0) -> None:
    """Wait for ``check()`` (a look every 0.1 s), failing with ``what`` past ``within`` seconds."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


class Heard:
    """A driver's output, read as it comes (a thread), so a test can wait for a line of it."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.text = process, ""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.text += line

    def said(self, words: str) -> bool:
        return words in self.text

    def end(self, timeout: float = 120) -> str:
        """Its whole output, once it ended (killed past ``timeout``: the test fails on its code)."""
        try:
            self.process.wait(timeout=timeout)
        finally:
            self.process.kill()
            self.reader.join(timeout=10)
        return self.text


def driver(command: list[str], cwd: str | None = None, **env: str) -> Heard:
    """A sweep's driver (``python -m sweeper ...``) started as a user would, its output heard."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return Heard(subprocess.Popen(command, cwd=cwd or root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env={**os.environ, **env}))


def overriding(folder: str, constants: dict[str, object], hooks: str = "") -> dict[str, str]:
    """An environment whose Python processes (a driver, its grid reader, the tasks it submits:
    they inherit its ``PYTHONPATH``) set module constants as they start, through a
    ``sitecustomize.py`` in ``folder``: ``{"sweeper.backends.slurm.rules.NEVER_AFTER_S": 1.0}``,
    a threshold of minutes made seconds for a test. A constant an older sweeper lacks is set
    all the same (harmless). ``hooks``: more lines of Python for it to run."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write("import importlib\n"
                f"for _path, _value in {constants!r}.items():\n"
                "    _module, _, _name = _path.rpartition('.')\n"
                "    try:\n"
                "        setattr(importlib.import_module(_module), _name, _value)\n"
                "    except ImportError:\n"
                "        pass\n" + hooks)
    return {"PYTHONPATH": os.pathsep.join([folder, *filter(None, [os.environ.get("PYTHONPATH")])])}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm of the test module's own (imported by a module, it is that module's)."""
    with one_node(str(tmp_path_factory.mktemp("slurm"))) as conf:
        yield conf


@pytest.fixture(autouse=True)
def nothing_left(slurm):
    """Every test leaves Slurm's queue without a job of sweeper's."""
    yield
    left = sweep_jobs()
    if left:
        subprocess.run(["scancel", *(row[0] for row in left)], capture_output=True)
    assert not left, left
