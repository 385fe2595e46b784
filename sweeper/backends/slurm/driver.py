"""Who drives a sweep on Slurm, as any machine that shares its folder sees it: the driver's
heartbeat, ``<sweep>/.jobs/driver`` (its host, its pid and, for a detached sweep, its own
Slurm job), written as it starts and touched at every look at the queue, removed as it ends.

The folder's lock (``flock``) may be local to one machine (BeeGFS by default, Lustre's
``localflock``, NFS mounted ``local_lock=flock``), and a detached sweep's driver runs on a node:
a run on another login node, ``status`` there, and a Ctrl-C there go by the heartbeat. A
heartbeat older than :data:`STALE_S` is a driver gone (killed); one of this machine is gone
as soon as its process is.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass

from sweeper.child.batch import DRIVER_GONE_S
from sweeper.placement.liveness import exists
from sweeper.store.paths import DRIVER_BEAT, atomic

#: Seconds after its last beat that a driver of another machine counts as gone: it beats every
#: look at the queue (2 s); a file server's clock may be some seconds off this machine's. A job
#: waiting for the driver's answer stops waiting after as long (:mod:`sweeper.child.batch`).
STALE_S = DRIVER_GONE_S
#: The heartbeat's name in the sweep's jobs folder (a job waiting for its answers reads it too).
NAME = DRIVER_BEAT


@dataclass(frozen=True)
class Driver:
    """A driver of the sweep, as its heartbeat says."""

    host: str
    pid: int
    job: str = ""  #: its own Slurm job, where it runs as one (a detached sweep)
    age: float = 0.0  #: seconds since its last beat

    def __str__(self) -> str:
        job = f", Slurm job {self.job}" if self.job else ""
        return f"pid {self.pid} on {self.host}{job}"

    @property
    def me(self) -> bool:
        return self.host == socket.gethostname() and self.pid == os.getpid()


def beat(jobs: str) -> None:
    """This process drives the sweep: its heartbeat written (or touched, where it is there)."""
    path = os.path.join(jobs, NAME)
    seen = heard(jobs)
    with contextlib.suppress(OSError):
        if seen is not None and seen.me:
            os.utime(path)
            return
        with atomic(path, fsync=False) as f:
            f.write(f"{socket.gethostname()} {os.getpid()} {os.environ.get('SLURM_JOB_ID', '')}\n")


def heard(jobs: str) -> Driver | None:
    """The sweep's driver, where one beats (this process too); None where none does."""
    path = os.path.join(jobs, NAME)
    try:
        with open(path) as f:
            words = f.read().split()
        age = time.time() - os.stat(path).st_mtime
    except OSError:
        return None
    if len(words) < 2 or not words[1].isdigit():
        return None
    driver = Driver(words[0], int(words[1]), words[2] if len(words) > 2 else "", max(age, 0.0))
    if age >= STALE_S or (driver.host == socket.gethostname() and not exists(driver.pid)):
        return None
    return driver


def elsewhere(jobs: str) -> Driver | None:
    """Another process that drives the sweep now (on this machine or another), or None."""
    driver = heard(jobs)
    return None if driver is None or driver.me else driver


def stop(jobs: str) -> None:
    """This process no longer drives the sweep: its heartbeat removed (another's stays)."""
    driver = heard(jobs)
    if driver is not None and driver.me:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(jobs, NAME))

