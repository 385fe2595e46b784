"""The Slurm backend's decisions that need no Slurm (each a function of what it is given, so
the tests take them one by one): what a driver knows of a task, how many held trials go in the
next array, how a task that returned nothing ended, whether the sweep's folder is shared,
and a task's marks in its trial's folder."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, replace

from sweeper.backends.slurm import commands
from sweeper.child.batch import JobReader
from sweeper.errors import SweepError
from sweeper.model.protocol import Began, Event, Exited
from sweeper.model.trial import TrialSpec
from sweeper.store.paths import JobPaths

#: Seconds a task may run (or have ended) without its Slurm output file showing here before
#: the sweep's folder is taken as not shared with the nodes.
SHARED_GRACE_S = 30.0


@dataclass
class Task:
    """One trial's Slurm task, as far as this driver knows it."""

    spec: TrialSpec
    reader: JobReader
    job: str = ""  #: Slurm's task id, ``123_4``; "" while held
    output: str = ""  #: Slurm's own output file of it (made by slurmd when it starts)
    running: bool = False  #: Slurm ran it at the last look (a signal reaches it; a pending one must get none)
    host: str = ""  #: the node it began on
    began: int = 0  #: how often it began (more than once: Slurm requeued it)
    seen: float | None = None  #: monotonic; when Slurm first said it runs, or that it ended
    left: float | None = None  #: monotonic; when it left Slurm's queue, its result not yet seen
    ended: commands.Ended | None = None
    cancelled: str = ""  #: "TERM", "KILL" or "cancel": what this sweep asked of it
    requeued: bool = False  #: Slurm requeued it after it began, and it has not begun again (told once)


def unshared(tasks: list[Task], now: float, folder: str) -> bool:
    """Whether a task's file showed here: Slurm's output of a task it ran (slurmd makes it as
    the task starts). False while none did; a SweepError once a task Slurm ran (or ended)
    ``SHARED_GRACE_S`` ago shows none: the folder is not one the nodes share."""
    if any(t.output and os.path.exists(t.output) for t in tasks):
        return True
    late = [t for t in tasks if t.seen is not None and now - t.seen > SHARED_GRACE_S]
    if late:
        raise SweepError(f"Slurm ran job {late[0].job}, but nothing it wrote shows in {folder} here: the "
                         "sweep's folder must be on a file system this machine and the nodes share; give --out "
                         "a folder there (your home, or the cluster's shared disk)")
    return False


def array_size(held: int, unfinished: int, k: int, max_array: int) -> int:
    """How many held trials to submit now, as one array: all of them (up to ``max_array``,
    throttled to ``k`` by Slurm) when none of the sweep's tasks is unfinished; else as many as
    bring the unfinished to ``k``; none when they are ``k`` already."""
    if unfinished >= k:
        return 0
    return min(held, max_array) if unfinished == 0 else min(held, k - unfinished, max_array)


def how_it_ended(job: str, node: str, output: str, cancelled: bool, ended: commands.Ended,
                 code: int | None) -> Exited:
    """How a task that returned nothing ended, in the judge's terms: Slurm's time limit is a
    ``timeout``, its memory limit an ``oom``; a cancel from outside the sweep says so; one the
    sweep cancelled is judged by the sweep's reason (its timeout, Ctrl-C, a pruner)."""
    on = f" on {node}" if node else ""
    if ended.state == "TIMEOUT":
        return Exited(code, time_limit=f"Slurm's time limit (job {job}{on})", job=job)
    if ended.state == "OUT_OF_MEMORY":
        return Exited(code, oom_killed=f"Slurm's memory limit, job {job}{on}", job=job)
    if cancelled:
        return Exited(code, note=f"cancelled by the sweep (Slurm job {job})", job=job)
    if ended.state == "CANCELLED":
        return Exited(None, note=f"cancelled: Slurm job {job}{on} was cancelled from outside the sweep "
                                 "(scancel, or the cluster's administrators)", job=job)
    if ended.state in ("NODE_FAIL", "PREEMPTED", "BOOT_FAIL"):
        return Exited(None, note=f"Slurm job {job} ended {ended.state}{on} and was not requeued "
                                 "(the cluster's JobRequeue=0, or --slurm no-requeue)", job=job)
    if ended.state == "UNKNOWN":
        return Exited(code, note=f"Slurm job {job} left the queue and Slurm no longer says how it ended "
                                 f"(see {output})", job=job)
    if code is None:
        return Exited(None, note=f"Slurm job {job}{on} ended {ended.state} (see {output})", job=job)
    return Exited(code, job=job)


def named(task: Task, event: Event) -> Event:
    """Began and Exited with where the task ran: its job, its node (and GPU) as its device."""
    if isinstance(event, Began):
        moved = ""
        if task.began > 1:
            moved = (f"Slurm requeued job {task.job} (its node failed, or it was preempted); it runs again "
                     f"on {task.host or 'a node'}, from the start")
        return replace(event, device=on_node(event.device, task.host), job=task.job, moved=moved,
                       where=f"{task.host}, Slurm job {task.job}" if task.host else f"Slurm job {task.job}")
    if isinstance(event, Exited):
        device = on_node(event.device, task.host) if event.device is not None else None
        return replace(event, job=task.job, device=device)
    return event


def on_node(device: str | None, host: str) -> str:
    """A device named with its node: ``gpu:0@node3``, ``cpu@node3``."""
    device = device or ""
    return f"{device}@{host}" if host and device and "@" not in device else device


def seen_end(spec: TrialSpec, job: str) -> None:
    """A driver saw the trial's task end (or ended it): no later driver adopts it. Another
    task of the trial named there since (a retry's) stays."""
    path = JobPaths(spec.dir).scheduled
    with contextlib.suppress(OSError):
        with open(path) as f:
            if f.read().split("\n")[0].strip() != job:
                return
        os.remove(path)


def scheduled(spec: TrialSpec) -> tuple[str, str] | None:
    """The task a driver submitted for this trial and has not seen end (its id, its Slurm
    output file), as the trial's ``.job/scheduled`` names it; None where none does."""
    try:
        with open(JobPaths(spec.dir).scheduled) as f:
            job, output = (f.read().split("\n") + [""])[:2]
    except OSError:
        return None
    return (job, output) if re.fullmatch(r"\d+(_\d+)?", job) else None
