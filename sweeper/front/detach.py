"""``python -m sweeper grid.py --backend slurm --detach``: the sweep's driver submitted as a
small Slurm job of its own, running the same command less ``--detach``, so the user may log
out. What that job prints goes to ``<sweep>/.jobs/driver-<job>.out``; ``status`` and ``report``
read the sweep's folder from the login node as ever (``status`` names the driver's job by its
heartbeat, and says while it waits in the queue); ``scancel <job>`` stops the sweep as a
SIGTERM does (its tasks cancelled, their rows ``interrupted``), as its time limit does; a
driver that died with no word (its process SIGKILLed, its node lost) leaves its tasks to the
same command, with ``--detach`` or without, which takes them over.

A Ctrl-C while the driver's job is submitted ends with nothing of the sweep in Slurm's queue
(exit 130): the job sbatch took is cancelled; one after the command said the job's id stops
nothing (the sweep runs in Slurm: ``scancel`` stops it).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import time
from typing import Any, Iterator

from sweeper.backends import registry
from sweeper.backends.slurm import commands, driver
from sweeper.backends.slurm.options import SlurmOptions, argv
from sweeper.backends.slurm.rules import job_name
from sweeper.backends.slurm.submission import submit_env
from sweeper.errors import SweepError
from sweeper.front import gridfile
from sweeper.store.folder import holder
from sweeper.store.paths import SweepPaths, atomic

#: sbatch options of a trial's job that the driver's job takes too, unless ``slurm_driver`` says
#: otherwise: where it may run, and whose time it is.
SHARED = ("partition", "account", "qos", "reservation", "clusters")


def detach(words: list[str], folder: tuple[str, bool] | None, flags: dict[str, Any], grid_file: str | None) -> int:
    """Submit the driver of the sweep the command line ``words`` (with ``--detach``) names, whose
    folder the command line and the grid file's plain options say (``folder``: its path, and
    whether it is a dry run); say its job, where its output goes, and how to stop it."""
    plain = gridfile.plain_options(grid_file) if grid_file and os.path.isfile(grid_file) else {}
    shown = {k: v for k, v in (plain or {}).items() if v is not gridfile.UNKNOWN}
    opts = registry.options({**shown, **flags}, where="the command line", partial=True)
    if opts.backend != "slurm":
        raise SweepError("--detach submits the sweep's driver as a Slurm job of its own: it goes with --backend "
                         "slurm (for a sweep on this machine, run it in tmux or screen, or with nohup)")
    if folder is None:
        raise SweepError("--detach needs the sweep's folder before the grid file is read: give --out and --name on "
                         "the command line (or plainly in the grid file's options)")
    if folder[1]:
        raise SweepError("--dry-run says here what the sweep would do; leave --detach out")
    jobs = SweepPaths(folder[0]).jobs
    running = driver.heard(jobs)
    pid = holder(folder[0])
    if running is not None or pid:
        raise SweepError(f"this sweep runs already ({running or f'pid {pid}'}); see python -m sweeper status "
                         f"{folder[0]}, and stop it before running it again (scancel its job, or Ctrl-C there)")
    own: SlurmOptions = opts.backend_options or SlurmOptions().checked()
    chosen = {"cpus-per-task": "1", **{k: v for k, v in (own.slurm or {}).items() if k in SHARED},
              **(own.slurm_driver or {})}
    os.makedirs(jobs, exist_ok=True)
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    script = os.path.join(jobs, f"driver-{stamp}.sh")
    command = [sys.executable, "-m", "sweeper", *(w for w in words if w != "--detach")]
    with atomic(script, fsync=False) as f:
        f.write("#!/bin/bash\n# sweeper: a detached sweep's driver\n" + f"exec {shlex.join(command)}\n")
    comment = f"sweeper/driver/{stamp}"
    name = f"{job_name(folder[0])}-driver"
    with _signals() as stopped:
        said = commands.submit([*argv(chosen), f"--chdir={os.getcwd()}"], name, commands.pattern(jobs) + "/driver-%j.out",
                               script, "", submit_env(), comment)
        job = said.job or _found(name, comment)
    if not job:
        if said.answered:
            raise commands.refused(said.said)
        raise SweepError(f"sbatch did not answer ({said.said}), and no driver job of the sweep shows in Slurm's queue: "
                         "run the same command again")
    if stopped:
        commands.cancel([job])
        print(f"sweeper: interrupted; the driver's job {job} was cancelled: nothing of the sweep runs",
              file=sys.stderr)
        return 128 + stopped[0]
    print(f"sweeper: the sweep runs detached, as Slurm job {job}; its driver's output: {jobs}/driver-{job}.out\n"
          f"sweeper: python -m sweeper status {folder[0]} shows it; scancel {job} stops it (its tasks cancelled, "
          "their rows interrupted); the same command again, with --detach or without, goes on where it stopped")
    return 0


def _found(name: str, comment: str) -> str:
    """The driver's job sbatch took though it gave no id (its answer lost): found by its comment."""
    for job, seen in (commands.queue(name) or {}).items():
        if seen.comment == comment:
            return job
    return ""


@contextlib.contextmanager
def _signals() -> Iterator[list[int]]:
    """While the driver's job is submitted, a Ctrl-C (or SIGTERM) is noted, not raised: sbatch
    answers (in a session of its own, it never sees the terminal's), and the job it took is
    cancelled after."""
    stopped: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: stopped.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopped
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
