"""The Slurm backend's decisions that need no Slurm (each a function of what it is given, so
the tests take them one by one): what a driver knows of a task, how many held trials go in the
next array, how a task that returned nothing ended, whether the sweep's folder is shared,
which of Slurm's reasons for a task that waits mean it never starts (and when to act on one),
and a task's marks in its trial's folder."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from dataclasses import dataclass, replace

from sweeper.backends.slurm import commands
from sweeper.child.batch import JobReader
from sweeper.errors import SweepError
from sweeper.model.protocol import Began, Event, Exited
from sweeper.model.trial import TrialSpec
from sweeper.store.paths import JobPaths

#: Seconds a reason that means a task never starts (:func:`never`) must stand, look after
#: look, before the task is cancelled, where Slurm's own sizes do not confirm it at once: an
#: administrator editing accounts or QOSes, or a partition being changed, passes.
NEVER_AFTER_S = 300.0


@dataclass
class Task:
    """One trial's Slurm task, as far as this driver knows it."""

    spec: TrialSpec
    reader: JobReader
    job: str = ""  #: Slurm's task id, ``123_4``; "" while held
    output: str = ""  #: Slurm's own output file of it (made by slurmd when it starts)
    #: seconds since the epoch: when it was submitted (for a task taken over, its list was
    #: written): it began no earlier, whatever its node's clock says
    submitted: float | None = None
    appeared: float | None = None  #: seconds since the epoch: when its output file first showed here
    running: bool = False  #: Slurm ran it at the last look (a signal reaches it; a pending one must get none)
    host: str = ""  #: the node it began on
    began: int = 0  #: how often it began (more than once: Slurm requeued it)
    seen: float | None = None  #: monotonic; when Slurm first said it runs, or that it ended
    left: float | None = None  #: monotonic; when it left Slurm's queue, its result not yet seen
    ended: commands.Ended | None = None
    cancelled: str = ""  #: "TERM", "KILL" or "cancel": what this sweep asked of it
    requeued: bool = False  #: Slurm requeued it after it began, and it has not begun again (told once)
    reason: str = ""  #: why it waits, as squeue last said (Slurm's reason code); "" while it runs
    never: str = ""  #: a reason that means it never starts, seen at the last look
    never_since: float = 0.0  #: monotonic; since when it has (acted on after NEVER_AFTER_S)

    @property
    def ran(self) -> bool:
        """Whether Slurm ever started it: it wrote to its files, a look saw it run, or its
        output file (made by slurmd as it starts) shows here."""
        return bool(self.began or self.running or (self.output and os.path.exists(self.output)))


def not_shared(job: str, folder: str) -> SweepError:
    """The one line for a sweep folder the nodes do not see (or cannot write in)."""
    return SweepError(f"Slurm ran job {job}, but nothing it wrote shows in {folder} here: the sweep's folder "
                      "must be on a file system this machine and the nodes share (and may write in); give --out "
                      "a folder there (your home, or the cluster's shared disk)")


def unseen_failure(task: Task, ended: commands.Ended) -> bool:
    """Whether a task that returned nothing ended as one does whose node works in another
    folder than this machine sees: Slurm ran it (it FAILED, its node could not open its output
    file there; or it COMPLETED), and neither its output file nor a message of it shows here
    (slurmd makes the file before anything of the task runs). Judged from ended tasks only: a
    slow prolog, or a node that boots, keeps a running task's file from showing for minutes."""
    return (ended.state in ("FAILED", "COMPLETED") and bool(ended.node) and not task.began
            and not (task.output and os.path.exists(task.output)))


#: Slurm's reasons for a task that waits (``squeue %r``) that mean it never starts as asked,
#: whatever else the queue does, and what to change (Slurm's job reason codes). Not
#: ``ReqNodeNotAvail`` (a maintenance reservation ahead, nodes down or drained: they come back),
#: nor ``PartitionNodeLimit`` (said too where the partition's nodes are down or drained).
NEVER = {
    "PartitionConfig": "it asks for more than any node of its partition has (cpus-per-task, mem, gres, ...: "
                       "compare the --slurm options with sinfo -o '%P %c %m %G')",
    "PartitionTimeLimit": "its time limit is above its partition's (--slurm time=...; sinfo -o '%P %l')",
    "BadConstraints": "no node has the features it asks for (--slurm constraint=...)",
    "InvalidAccount": "its account is not one Slurm knows for you (--slurm account=...; sacctmgr show assoc)",
    "InvalidQOS": "its QOS is not one Slurm knows for you (--slurm qos=...; sacctmgr show assoc)",
    "AccountNotAllowed": "its partition does not take its account (--slurm account=... or partition=...)",
    "QOSNotAllowed": "its partition does not take its QOS (--slurm qos=... or partition=...)",
    "DependencyNeverSatisfied": "a job it depends on ended as it must not (--slurm dependency=...)",
}
#: Limits a QOS or an association sets on one job (``QOSMaxCpuPerJobLimit``, ...): a job over
#: one never starts under it (a limit on all of a user's jobs, ``...PerUser...``, passes).
_PER_JOB = re.compile(r"^(QOS|Assoc)Max\w*Per(Job|Node)\w*$")


def never(reason: str) -> str:
    """What a task's pending reason means when it means the task never starts (Slurm's words
    first), else ""."""
    code = reason.partition(",")[0].strip()
    if code in NEVER:
        return f"{code}: {NEVER[code]}"
    if _PER_JOB.match(code):
        return f"{code}: it asks for more than its QOS or account lets one job have (sacctmgr show qos)"
    return ""


def gives_up(task: Task, meaning: str, now: float, confirmed: bool) -> bool:
    """Whether a waiting task whose reason means ``meaning`` (:func:`never`; "" for a reason
    that passes) is to be ended now: ``confirmed`` (Slurm's own sizes say it: more CPUs or
    memory than any node of its partition has), at the second look that says so; else once
    it said so for :data:`NEVER_AFTER_S`, look after look. Notes the look on ``task``."""
    if not meaning or task.never != meaning:
        task.never, task.never_since = meaning, now
        return False
    return confirmed or now - task.never_since >= NEVER_AFTER_S


def job_name(folder: str) -> str:
    """The name of every job of the sweep in this folder (the one ``squeue --name`` looks for):
    its folder's name and a digest of its real path."""
    real = os.path.realpath(folder)
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(real))[:24]
    return f"sweeper-{base}-{hashlib.sha1(real.encode()).hexdigest()[:8]}"


def output_folder(jobs: str) -> None:
    """The folder of the tasks' output files, as sbatch's ``--output`` may name it: ``%`` is
    doubled (:func:`~sweeper.backends.slurm.commands.pattern`), a backslash is refused."""
    if "\\" in jobs:
        raise SweepError(f"the sweep's folder {os.path.dirname(jobs)} has a backslash in its path, which Slurm "
                         "reads in a job's output file name as 'expand nothing'; give --out (or --name) a path "
                         "without one")


def array_size(held: int, unfinished: int, k: int, max_array: int) -> int:
    """How many held trials to submit now, as one array: all of them (up to ``max_array``,
    throttled to ``k`` by Slurm) when none of the sweep's tasks is unfinished; else as many as
    bring the unfinished to ``k``; none when they are ``k`` already."""
    if unfinished >= k:
        return 0
    return min(held, max_array) if unfinished == 0 else min(held, k - unfinished, max_array)


def how_it_ended(job: str, node: str, output: str, cancelled: bool, ended: commands.Ended,
                 code: int | None, ran: bool = True, early: str | None = None) -> Exited:
    """How a task that returned nothing ended, in the judge's terms: Slurm's time limit is a
    ``timeout``, its memory limit an ``oom``; a cancel from outside the sweep says so; one the
    sweep cancelled is judged by the sweep's reason (its timeout, Ctrl-C, a pruner). One that
    never ran (``ran`` False: cancelled while it waited) says so, and names no output file; one
    that ran and ended before its trial began (``early``: the last line of its output file, the
    only account of it) names that file."""
    on = f" on {node}" if node else ""
    if not ran and not cancelled and ended.state in ("CANCELLED", "UNKNOWN"):
        why = ("was cancelled" if ended.state == "CANCELLED"
               else "left the queue (Slurm no longer says why: cancelled, most likely)")
        return Exited(None, note=f"Slurm job {job} {why} from outside the sweep before it started (scancel, or the "
                                 "cluster's administrators)", job=job)
    if not ran:
        output = "it never started: no output file"
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
        return Exited(None, note=f"Slurm job {job} ended {ended.state}{on} and was not requeued (the cluster "
                                 "requeues no job by itself, JobRequeue=0: --slurm requeue asks it to; --retries "
                                 "submits the trial again)", job=job)
    if ended.state == "UNKNOWN":
        return Exited(code, note=f"Slurm job {job} left the queue and Slurm no longer says how it ended "
                                 f"(see {output})", job=job)
    if code is None:
        return Exited(None, note=f"Slurm job {job}{on} ended {ended.state} (see {output})", job=job)
    if early is not None:
        said = re.sub(r"^\S*/slurm_script: ", "its batch script: ", early)  # (slurmd's copy of it)
        return Exited(code, note=f"it ended before its trial began{': ' + said if said else ''}; see {output}",
                      job=job)
    return Exited(code, job=job)


def appeared(task: Task) -> float:
    """When a task's output file showed here (slurmd makes it as the task starts): as first
    seen, else its time stamp; no earlier than its submission."""
    at = task.appeared
    if at is None:
        try:
            at = os.path.getmtime(task.output)
        except OSError:
            at = time.time()
    return max(at, task.submitted or at)


def last_line(path: str) -> str:
    """The last line a file holds (its last 4 KB read), "" where it has none or cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def named(task: Task, event: Event) -> Event:
    """Began and Exited with where the task ran: its job, its node (and GPU) as its device."""
    if isinstance(event, Began):
        moved = ""
        if task.began > 1:
            moved = (f"Slurm requeued job {task.job} (its node failed, or it was preempted); it runs again "
                     f"on {task.host or 'a node'}, from the start")
        at = event.at  # a node's clock behind ours: no earlier than its submission
        if at is not None and task.submitted is not None:
            at = max(at, task.submitted)
        return replace(event, device=on_node(event.device, task.host), job=task.job, moved=moved, at=at,
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
    """A driver saw the trial's task end (or ended it), and what it made of it is on record:
    no later driver adopts it. Another task of the trial named there since (a retry's) stays."""
    path = JobPaths(spec.dir).scheduled
    with contextlib.suppress(OSError):
        with open(path) as f:
            if f.read().split("\n")[0].strip() != job:
                return
        os.remove(path)


@dataclass(frozen=True)
class Mark:
    """A trial's ``.job/scheduled``: the task a driver submitted for it (or that named itself
    as it started) and no driver has seen end: its id, its Slurm output file, the uid of the
    sweep's ledger that submitted it, and the attempt it runs."""

    job: str
    output: str
    uid: str = ""
    attempt: int = 0


def scheduled(trial_dir: str) -> Mark | None:
    """The mark in a trial's folder (:class:`Mark`); None where it has none."""
    try:
        with open(JobPaths(trial_dir).scheduled) as f:
            job, output, uid, attempt = (f.read().split("\n") + ["", "", ""])[:4]
    except OSError:
        return None
    if not re.fullmatch(r"\d+(_\d+)?", job):
        return None
    return Mark(job, output, uid, int(attempt) if attempt.isdigit() else 0)
