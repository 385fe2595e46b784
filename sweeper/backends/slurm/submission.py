"""Held trials to Slurm as array jobs: grouped by their sbatch options (the sweep's, and a
point's own from ``slurm_resources``: trials whose options differ cannot share an array), at
most ``workers`` of the sweep's tasks unfinished. Each array is a list (``<list>.txt``: line
``i`` the folder of task ``i``'s trial) and a script (``<list>.sh``: bash, the set-up lines,
then the task's command), both written before ``sbatch`` runs and named in the array's
comment (``sweeper/<uid>/<list>``).

An ``sbatch`` that gives no id is not taken at its word: the array may exist all the same (its
answer lost to a timeout, a controller that restarts, a signal). It is looked for first (its
comment, by one ``squeue``; the marks its tasks write as they start). Then one that answered
with a refusal is one (the first: the sweep stops, in Slurm's words; a later one: its trials
wait, tried again every :data:`RETRY_S`); one that did not answer is looked for again, and
submitted again with the same list and comment, every :data:`RETRY_S`: never a second array
of the same trials once the first shows.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass

from sweeper.backends.slurm import commands
from sweeper.backends.slurm.adoption import comment
from sweeper.backends.slurm.rules import array_size, scheduled
from sweeper.child.batch import write_list, write_mark
from sweeper.store.paths import atomic

log = logging.getLogger("sweeper")

#: Seconds before a submission that failed (or was not answered) is tried again.
RETRY_S = 30.0


@dataclass(frozen=True)
class Held:
    """A trial started and not yet submitted: its id, its folder, its job's sbatch options."""

    tid: str
    dir: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class Array:
    """An array job of held trials, as written (and submitted, or about to be)."""

    tids: tuple[str, ...]
    dirs: tuple[str, ...]
    listed: str  #: its list's path less ``.txt``: its script is ``.sh``, task i's output ``_<i>.out``
    options: tuple[str, ...]  #: its sbatch options
    at: float  #: seconds since the epoch, when it was written: its tasks were submitted no earlier

    def output(self, i: int) -> str:
        return f"{self.listed}_{i}.out"

    def mark(self, job: str, uid: str, attempts: list[int]) -> None:
        """Each trial's mark, once Slurm took the array as ``job`` (:func:`~sweeper.child.batch.write_mark`)."""
        for i, (trial_dir, attempt) in enumerate(zip(self.dirs, attempts)):
            try:  # (a full disk here costs only the adoption of this task by a later driver)
                write_mark(trial_dir, f"{job}_{i}", self.output(i), uid, attempt)
            except OSError:
                pass


class Submitter:
    """The sweep's held trials and their submission (see the module's docstring)."""

    def __init__(self, name: str, uid: str, jobs: str, k: int, max_array: int, env: dict[str, str],
                 setup: tuple[str, ...]) -> None:
        self.name, self.uid, self.jobs = name, uid, jobs
        self.k, self.max_array = k, max_array
        self.env = env  #: what sbatch hands every task: the driver's environment, its imports' paths
        self.setup = setup  #: the shell lines each task runs before its trial
        self.held: list[Held] = []
        self.unsure: Array | None = None  #: submitted, its answer lost, not yet found: looked for again
        self.failing: float | None = None  #: monotonic; when a submission last failed (tried again after RETRY_S)
        self.submitted = 0  #: arrays Slurm took
        self.arrays = 0  #: arrays written (each its own list)
        self.doubted = False  #: an answer was lost in this run: its array may exist unknown to the driver

    def hold(self, tid: str, trial_dir: str, options: list[str]) -> None:
        self.held.append(Held(tid, trial_dir, tuple(options)))

    def drop(self, tid: str) -> bool:
        """A held trial the engine cancelled: never submitted (False where it was not held)."""
        kept = [h for h in self.held if h.tid != tid]
        dropped, self.held = len(kept) < len(self.held), kept
        return dropped

    def due(self, unfinished: int) -> list[tuple[Array, str]]:
        """Submit what may go now (``unfinished``: the sweep's tasks Slurm holds): the arrays
        Slurm took, each with its job id."""
        out: list[tuple[Array, str]] = []
        if self.failing is not None and time.monotonic() - self.failing < RETRY_S:
            return out
        if self.unsure is not None:
            array, self.unsure = self.unsure, None
            job = self._settled(array)
            if job is None:
                return out
            out.append((array, job))
            unfinished += len(array.tids)
        while self.held:
            group = [h for h in self.held if h.options == self.held[0].options]
            n = array_size(len(group), unfinished, self.k, self.max_array)
            if not n:
                break
            sent = self._send(group[:n])
            if sent is None:
                break
            out.append(sent)
            unfinished += len(sent[0].tids)
        return out

    def _send(self, group: list[Held]) -> tuple[Array, str] | None:
        array = self._write(group)
        job, said = self._try(array)
        if job is None and said.answered and len(group) > self.k:  # a limit on submitted tasks: workers at a time
            array = self._write(group[:self.k])
            job, said = self._try(array)
        if job is not None:
            return self._taken(array, job)
        if said.answered:
            if not self.submitted:  # the first: the options are wrong, say so at once
                raise commands.refused(said.said)
            self._failed(f"Slurm refused the sweep's jobs: sbatch said: {said.said}")
            return None
        self.held = [h for h in self.held if h.tid not in array.tids]
        self.unsure, self.doubted = array, True
        self._failed(f"sbatch did not answer ({said.said}), so the sweep's array may exist or not: it is looked "
                     "for in Slurm's queue, and submitted again with the same list only where it is not there")
        return None

    def _settled(self, array: Array) -> str | None:
        """An array whose answer was lost: found now, or submitted again (the same list and
        comment); its id, or None (unsure still)."""
        job: str | None = self.find(array)
        if not job:
            job, said = self._try(array)
            if job is None and said.answered:  # refused now: it never was
                self.held = [Held(t, d, array.options) for t, d in zip(array.tids, array.dirs)] + self.held
                self._failed(f"Slurm refused the sweep's jobs: sbatch said: {said.said}")
                return None
        if not job:
            self.unsure = array
            self.failing = time.monotonic()
            return None
        self.held = [h for h in self.held if h.tid not in array.tids]
        return self._taken(array, job)[1]

    def _try(self, array: Array) -> tuple[str | None, commands.Submitted]:
        n = len(array.tids)
        said = commands.submit(list(array.options), self.name, commands.pattern(array.listed) + "_%a.out",
                               array.listed + ".sh", f"0-{n - 1}" + (f"%{self.k}" if n > self.k else ""), self.env,
                               comment(self.uid, array.listed))
        return (said.job or self.find(array) or None), said

    def find(self, array: Array) -> str:
        """The id of the array Slurm took for this list, where it did: a task of it in the queue
        (its comment), or one that named itself in its trial's folder as it started; "" where
        none shows."""
        mine = comment(self.uid, array.listed)
        for task, seen in (commands.queue(self.name) or {}).items():
            if seen.comment == mine:
                return task.split("_")[0]
        for trial_dir in array.dirs:
            mark = scheduled(trial_dir)
            if mark is not None and mark.output.startswith(array.listed + "_") and mark.uid == self.uid:
                return mark.job.split("_")[0]
        return ""

    def _taken(self, array: Array, job: str) -> tuple[Array, str]:
        self.submitted += 1
        self.failing = None
        self.held = [h for h in self.held if h.tid not in array.tids]
        return array, job

    def _failed(self, why: str) -> None:
        if self.failing is None:  # said once, until one goes through
            log.warning("sweeper: %s; trying again every %gs", why, RETRY_S)
        self.failing = time.monotonic()

    def _write(self, group: list[Held]) -> Array:
        """An array's list and script, written before sbatch runs (a driver killed before it reads
        the id leaves an array the next one finds: :mod:`~sweeper.backends.slurm.adoption`)."""
        self.arrays += 1
        listed = os.path.join(self.jobs, f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{self.arrays}")
        at = time.time()
        dirs = tuple(h.dir for h in group)
        write_list(listed + ".txt", list(dirs))
        with atomic(listed + ".sh", fsync=False) as f:
            f.write(script(listed, self.uid, self.setup))
        return Array(tuple(h.tid for h in group), dirs, listed, group[0].options, at)


def submit_env() -> dict[str, str]:
    """What sbatch hands every task: this process's environment (Slurm's default, ``--export=ALL``)
    and its imports' paths; where the driver runs in a Slurm job itself (a detached sweep), not
    the variables Slurm set for that job, which sbatch would read as asked for
    (``SLURM_MEM_PER_NODE`` beside a trial's ``--mem-per-cpu`` is a refusal), but the
    configuration's path."""
    inside = "SLURM_JOB_ID" in os.environ
    env = {k: v for k, v in os.environ.items() if not (inside and k.startswith("SLURM_") and k != "SLURM_CONF")}
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def script(listed: str, uid: str, setup: tuple[str, ...]) -> str:
    """An array's batch script: bash, stopping at a line that fails; the set-up lines; then the
    task's trial, with this Python (the sweep's)."""
    command = (f"exec {shlex.quote(sys.executable)} -m sweeper.child.batch --list {shlex.quote(listed + '.txt')} "
               f"--uid {shlex.quote(uid)}")
    lines = ["#!/bin/bash", f"# sweeper: task i runs the trial on line i of {listed}.txt", "set -e", *setup, command]
    return "\n".join(lines) + "\n"
