"""The tasks an earlier driver of the sweep left in Slurm's queue (it was killed: SIGKILL, a
lost ssh session, a login node rebooted), found by the next driver, which adopts them: no
trial is submitted, nor trained, twice.

Two ways lead from a trial to its task, so that neither the driver's memory nor its timing
matters::

    the trial's mark    <trial>/.job/scheduled: the task's id and output file, the sweep's
                        uid and the trial's attempt, written by the driver once sbatch
                        answered, and by the task itself as it starts
    Slurm's queue       every array's comment names the sweep (its uid) and its list
                        (<sweep>/.jobs/<list>.txt, written before sbatch runs: line i is the
                        trial of task i), so an array whose id the driver never read (killed
                        between sbatch and its answer) is found by one squeue

A trial's task is adopted while Slurm holds it (pending or running), or once it wrote its
result, where it was submitted for this ledger (the uid: a run started over with ``--fresh``
adopts nothing of the old one, whose tasks it cancels at once) and for the attempt this run
gives the trial (a result a driver saw and recorded is never taken again); one gone from the
queue without a result is forgotten (its trial runs anew).
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field

from sweeper.backends.slurm import commands
from sweeper.backends.slurm.rules import Mark, Task, scheduled, seen_end
from sweeper.errors import SweepError
from sweeper.model.trial import TrialSpec
from sweeper.store.paths import JobPaths

#: Looks at Slurm's queue before a driver that cannot read it gives up (a second apart).
LOOKS = 3


def uid_of(folder: str) -> str:
    """The sweep's uid, as its ledger keeps it across runs."""
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        return ledger.facts().uid
    finally:
        ledger.close()


def comment(uid: str, listed: str) -> str:
    """What an array's ``--comment`` says: the sweep's uid and its list's name."""
    return f"sweeper/{uid}/{os.path.basename(listed)}"


@dataclass
class Left:
    """What earlier drivers of the sweep left in Slurm's queue."""

    uid: str = ""  #: the sweep's (its ledger's): only its tasks are this run's to take
    #: task id -> what squeue says, for the sweep's tasks (its uid's) in the queue
    queued: dict[str, commands.Queued] = field(default_factory=dict)
    #: trial folder -> (task id, its output file), for the tasks of this sweep's arrays in the queue
    listed: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: tasks of the sweep's name no run of this ledger submitted (one that started over, --fresh, left
    #: them): cancelled at once
    strays: list[str] = field(default_factory=list)
    adopted: list[tuple[str, str]] = field(default_factory=list)  #: (task id, its state) adopted, not yet said
    taken: set[str] = field(default_factory=set)  #: the tasks adopted

    def take(self, task: Task) -> bool:
        """Whether the trial's task was left by an earlier driver, and adopted (its id, output
        file, when it was submitted and whether it runs now, in ``task``): see :func:`found`."""
        adopted = found(task.spec, self)
        if adopted is None:
            return False
        task.job, task.output = adopted
        task.submitted = listed_at(task.output)
        queued = self.queued.get(task.job)
        task.running = queued is not None and queued.state not in commands.WAITING
        self.taken.add(task.job)
        self.adopted.append((task.job, queued.state if queued is not None else ""))
        return True


def look(name: str, uid: str, jobs: str) -> Left:
    """One look at the queue for the jobs named ``name``, where an earlier driver of the sweep
    submitted any (a list in ``jobs``): the tasks of this ledger's (``uid``) arrays and their
    trials, from their comments and lists; any other of that name a stray. A queue that cannot
    be read is one line: the tasks left cannot be told from ended ones."""
    if not glob.glob(os.path.join(glob.escape(jobs), "*.txt")):
        return Left()
    for attempt in range(LOOKS):
        queued = commands.queue(name)
        if queued is not None:
            break
        if attempt < LOOKS - 1:
            time.sleep(1.0)
    else:
        raise SweepError("Slurm's queue cannot be read (squeue failed), so the jobs a killed sweep left "
                         "cannot be told from ended ones; run the same command again once squeue works")
    left = Left(uid)
    for task, seen in queued.items():
        owner, _, listed = seen.comment.partition("/")[2].partition("/")
        if not seen.comment.startswith("sweeper/") or owner != uid:
            left.strays.append(task)
            continue
        left.queued[task] = seen
        if listed:
            array, _, index = task.partition("_")
            path = os.path.join(jobs, f"{listed}.txt")
            trial = _line(path, int(index)) if index.isdigit() else None
            if trial is not None:
                left.listed[trial] = (task, os.path.join(jobs, f"{listed}_{index}.out"))
    return left


def _line(path: str, index: int) -> str | None:
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return lines[index] if index < len(lines) else None


def found(spec: TrialSpec, left: Left) -> tuple[str, str] | None:
    """The task (its id, its output file) an earlier driver of this ledger left for this trial's
    attempt: one Slurm still holds, or one that wrote its result; None (its mark removed) where
    there is none."""
    mark, listed = scheduled(spec.dir), left.listed.get(spec.dir)
    marked = (mark.job, mark.output) if mark is not None and mine(mark, spec, left.uid) else None
    if marked is not None and os.path.exists(JobPaths(spec.dir).returned):
        return marked
    for task in (marked, listed):
        if task is not None and task[0] in left.queued:
            return task
    if mark is not None:
        seen_end(spec, mark.job)
    return None


def mine(mark: Mark, spec: TrialSpec, uid: str) -> bool:
    """Whether a trial's mark names a task of this ledger (``uid``) for the attempt this run
    gives the trial: a mark of another ledger's (before --fresh) or of an attempt on record is not."""
    return bool(uid) and mark.uid == uid and mark.attempt == spec.attempt


def listed_at(output: str) -> float | None:
    """When the list of a task's array was written (its output file ``<list>_<i>.out`` names
    it): the task was submitted no earlier. None where it cannot be read."""
    try:
        return os.path.getmtime(output.rpartition("_")[0] + ".txt")
    except OSError:
        return None


def said(adopted: list[tuple[str, str]]) -> str:
    """The adoption, in one line: how many tasks, in which states, which arrays."""
    states: dict[str, int] = {}
    for _, state in adopted:
        word = {"RUNNING": "running", "": "ended with a result"}.get(state, "waiting")
        states[word] = states.get(word, 0) + 1
    arrays = ", ".join(dict.fromkeys(task.split("_")[0] for task, _ in adopted))
    counts = ", ".join(f"{n} {word}" for word, n in states.items())
    return (f"sweeper: took over {len(adopted)} Slurm task{'s' if len(adopted) > 1 else ''} an earlier run of this "
            f"sweep left ({counts}; job {arrays}): none is submitted again")


def cancelled(tasks: list[str], why: str) -> str:
    """Tasks an earlier run of the sweep left that this run cancelled, in one line."""
    arrays = ", ".join(dict.fromkeys(task.split("_")[0] for task in tasks))
    return (f"sweeper: cancelled {len(tasks)} Slurm task{'s' if len(tasks) > 1 else ''} an earlier run of this sweep "
            f"left (job {arrays}): {why}")
