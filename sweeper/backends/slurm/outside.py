"""The sweep's tasks in Slurm's queue, seen from a process that is not their driver: what
``status`` says of them (running, waiting and why, left by a driver that stopped; the driver
that runs the sweep, on any machine, by its heartbeat); a run stopped by Ctrl-C before it took
over what an earlier driver left (those tasks cancelled: nothing of the sweep runs on after a
Ctrl-C; a live driver's, on another machine, never), both found by the sweep's job name and
uid; and what a dry run says it would submit."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeper.backends.slurm import commands, driver
from sweeper.backends.slurm.adoption import uid_of
from sweeper.backends.slurm.options import SlurmOptions
from sweeper.backends.slurm.rules import job_name, never
from sweeper.store.folder import holder
from sweeper.store.paths import SweepPaths

if TYPE_CHECKING:
    from sweeper.model.settings import Settings


@dataclass(frozen=True)
class Seen:
    """What Slurm's queue holds of a sweep: its tasks that run, that wait, and lines saying so;
    the driver that runs it, where one beats (on this machine or another: "" where none does)."""

    running: int = 0
    waiting: int = 0
    lines: list[str] = field(default_factory=list)
    driver: str = ""

    @property
    def tasks(self) -> int:
        return self.running + self.waiting


def _queued(folder: str) -> dict[str, commands.Queued] | None:
    """The sweep's tasks Slurm holds ({} where it never ran on Slurm, or Slurm is not here)."""
    if not os.path.isdir(SweepPaths(folder).jobs) or commands.missing():
        return {}
    return commands.queue(job_name(folder))


def seen(folder: str, driven: bool) -> Seen:
    """What ``status`` says of the sweep's tasks in Slurm's queue; ``driven``: a driver of this
    machine holds the sweep's folder now (else the tasks are what a stopped one left, unless a
    driver beats elsewhere)."""
    beating = driver.heard(SweepPaths(folder).jobs)
    driven = driven or beating is not None
    queued = _queued(folder)
    if queued is None:
        return Seen(lines=["sweeper: Slurm's queue cannot be read now (squeue failed): its tasks are not shown"],
                    driver=str(beating or ""))
    running = sorted(t for t, q in queued.items() if q.state not in commands.WAITING)
    waiting = [q.reason or q.state for t, q in queued.items() if q.state in commands.WAITING]
    lines = [] if beating is not None else _driver_waits(folder)
    if not queued:
        return Seen(lines=lines, driver=str(beating or ""))
    arrays = ", ".join(dict.fromkeys(t.split("_")[0] for t in queued))
    if not driven:
        lines.append(f"sweeper: no driver runs this sweep, but {len(queued)} of its Slurm tasks are in Slurm's "
                     f"queue ({len(running)} running, {len(waiting)} waiting; job {arrays}), left by a run that "
                     "stopped: run the same command to take them over (or scancel them)")
    for reason, n in Counter(waiting).most_common():
        meaning = never(reason)
        lines.append(f"sweeper: {n} task{'s' if n > 1 else ''} wait{'' if n > 1 else 's'} in Slurm's queue: {reason}"
                     + (f" (Slurm never starts {'them' if n > 1 else 'it'}: {meaning.partition(': ')[2]})"
                        if meaning else ""))
    return Seen(len(running), len(waiting), lines, str(beating or ""))


def _driver_waits(folder: str) -> list[str]:
    """A detached sweep's driver that waits in Slurm's queue to start, in a line."""
    if not os.path.isdir(SweepPaths(folder).jobs) or commands.missing():
        return []
    return [f"sweeper: its driver (--detach) waits in Slurm's queue as job {job}: {seen.reason or seen.state}"
            for job, seen in (commands.queue(f"{job_name(folder)}-driver") or {}).items()
            if seen.state in commands.WAITING]


def abandon(folder: str) -> str:
    """A run stopped (Ctrl-C) before it took over the tasks an earlier run of the sweep left
    in Slurm's queue: those of the sweep's ledger (its uid) cancelled, where no other driver
    holds the folder now nor beats in it (from another machine, whose lock this one may not
    see). What was done, in one line ("" where nothing was)."""
    other = holder(folder)
    if other is not None and other != os.getpid():
        return ""
    if driver.elsewhere(SweepPaths(folder).jobs) is not None:
        return ""
    uid = uid_of(folder) if os.path.exists(SweepPaths(folder).ledger) else ""
    queued = {t: q for t, q in (_queued(folder) or {}).items() if uid and q.comment.startswith(f"sweeper/{uid}/")}
    if not queued:
        return ""
    commands.cancel(list(queued))
    arrays = ", ".join(dict.fromkeys(t.split("_")[0] for t in queued))
    return (f"sweeper: cancelled the {len(queued)} Slurm task{'s' if len(queued) > 1 else ''} an earlier run of "
            f"this sweep left in Slurm's queue (job {arrays})")


def planned(settings: Settings, folder: str, trials: int) -> list[str]:
    """What a dry run says the sweep would submit: its ``trials`` as one array (a search's as
    it asks for them), at most ``workers`` of its tasks at a time, the sbatch command (its
    options, the GPUs asked for) and the array's script (the set-up lines)."""
    from sweeper.backends.slurm.backend import DEFAULT_WORKERS

    own = settings.backend if isinstance(settings.backend, SlurmOptions) else SlurmOptions().checked()
    sbatch, env = own.jobs(settings.resources)
    k = settings.resources.workers or DEFAULT_WORKERS
    jobs = SweepPaths(folder).jobs
    gpus = ("the GPUs Slurm grants each task (its CUDA_VISIBLE_DEVICES)" if "CUDA_VISIBLE_DEVICES" not in env
            else "no GPU (CUDA_VISIBLE_DEVICES=-1: ask with --gpus all, or --slurm gres=gpu:1)")
    if settings.search.name is not None:
        what, array = "the trials the search asks for go as they are asked, each a task of an array", "0-<n-1>"
    elif not trials:
        return ["Slurm: no trial to run (every one is on record, kept)"]
    else:
        what = f"{trials} trial{'s' if trials > 1 else ''} to run as one array job of {trials} tasks"
        array = f"0-{trials - 1}" + (f"%{k}" if trials > k else "")
    own_options = (["Slurm: each point's own sbatch options (slurm_resources) are added to these; points whose "
                    "options differ go as arrays of their own, at most the same number at a time in all"]
                   if own.slurm_resources is not None else [])
    return [f"Slurm: {what}, at most {k} at a time (Slurm throttles it; an array past the cluster's MaxArraySize "
            f"is split), each a fresh process on a node, with {gpus}",
            "Slurm: sbatch " + " ".join([*sbatch, f"--job-name={job_name(folder)}", "--comment=sweeper/<uid>/<list>",
                                         f"--output={commands.pattern(jobs)}/<list>_%a.out", f"--array={array}",
                                         f"{jobs}/<list>.sh"]),
            "Slurm: <list>.sh: " + "; ".join(["set -e", *own.slurm_setup, "exec python -m sweeper.child.batch "
                                                f"--list {jobs}/<list>.txt --uid <uid>"]),
            *own_options]
