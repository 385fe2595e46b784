"""(Spike, issue 41.) A real one-node Slurm for the tests, started by them: munged,
slurmctld and slurmd with a configuration of their own in a temporary folder (their own
ports, no accounting, no cgroups: ``proctrack/linuxproc``), as root. Debian's
``slurm-wlm`` and ``munge`` (apt-get) give the binaries; without them, or not as root,
the tests that need it skip, saying why."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time

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
SelectTypeParameters=CR_Core
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
SlurmctldPort={port}
SlurmdPort={dport}
NodeName={host} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str:
    """Why no Slurm can be started here ("" where one can)."""
    if not all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sbatch")):
        return "no Slurm here (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a test Slurm runs as root"
    return ""


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def one_node(root: str):
    """Slurm up, SLURM_CONF set for this process and its children; all of it stopped after."""
    host = socket.gethostname()
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    conf = os.path.join(root, "slurm.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(host=host, root=root, port=_free_port(), dport=_free_port(), cpus=os.cpu_count() or 1))
    env = {**os.environ, "SLURM_CONF": conf}
    os.makedirs("/run/munge", exist_ok=True)
    subprocess.run(["munged", "--force"], capture_output=True)  # one already running is fine
    daemons = [subprocess.Popen([daemon, "-D"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for daemon in ("slurmctld", "slurmd")]
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test Slurm did not come up; see {root}/ctld.log and {root}/d.log")
            time.sleep(0.5)
        yield conf
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)  # no job outlives it
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
