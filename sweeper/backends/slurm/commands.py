"""Slurm's commands, as the Slurm backend uses them: the one place that runs them and reads
what they print. Only ``sbatch``, ``squeue``, ``scontrol`` and ``scancel``: no ``sacct``
(many clusters keep no accounting).

A command that cannot run at all (not installed, the controller unreachable at submission)
is a :class:`~sweeper.errors.SweepError` in one line; a look at the queue that fails is None
(the caller looks again later: a controller that restarts must not look like every job ended).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable

from sweeper.errors import SweepError

#: Job states after which a job never runs again (``squeue``'s and ``scontrol``'s words).
#: PREEMPTED and NODE_FAIL are final only where Slurm does not requeue the job; a requeued
#: job is PENDING again, so it is still in the queue.
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
                   "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"})
#: States of a task that waits to run (a requeued one too): a signal must never reach it.
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})
#: Seconds a command may take before the look counts as failed.
COMMAND_S = 30.0


@dataclass(frozen=True)
class Queued:
    """A task of the sweep's as ``squeue`` shows it: its state, why it waits (Slurm's reason
    code, ``Resources``, ``PartitionConfig``, ...; ``None`` while it runs) and the array's
    comment (which names the list of trials it runs)."""

    state: str
    reason: str = ""
    comment: str = ""


@dataclass(frozen=True)
class Ended:
    """How a job ended, as ``scontrol`` tells it while it keeps the job (``MinJobAge``)."""

    state: str  #: COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, ...; UNKNOWN: forgotten
    exitcode: int | None = None  #: its exit status, or minus the signal that ended it
    node: str = ""


def missing() -> str:
    """Why Slurm's commands cannot be used here ("" where they can)."""
    lacking = [c for c in ("sbatch", "squeue", "scontrol", "scancel") if shutil.which(c) is None]
    if lacking:
        return (f"Slurm's {', '.join(lacking)} not found on this machine; run the sweep on a machine that "
                "submits Slurm jobs (a login node), or choose another backend")
    return ""


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def submit(options: list[str], name: str, output: str, command: str, array: str, env: dict[str, str],
           comment: str) -> str:
    """``sbatch --parsable``: the array job's id (its tasks get ``env``, Slurm's default
    ``--export=ALL``; ``output`` is a file name pattern, its own ``%`` doubled). A refusal is a
    SweepError in Slurm's words."""
    argv = ["sbatch", "--parsable", *options, f"--job-name={name}", f"--comment={comment}", f"--output={output}",
            f"--array={array}", "--wrap", command]
    done = _run(argv, env)
    if done is None or done.returncode != 0:
        said = refusal(done.stderr) if done is not None else "it did not answer"
        raise SweepError(f"Slurm refused the sweep's jobs: sbatch said: {said}; check the --slurm options "
                         "(partition, account, time, ...) against the cluster's (sinfo, sacctmgr show assoc)")
    return done.stdout.strip().split(";")[0]


def refusal(stderr: str) -> str:
    """What sbatch said when it refused, in one line: each line it wrote but its pointer to
    ``--help``, without its ``sbatch: error:`` prefixes."""
    lines = [re.sub(r"^(sbatch: )?(error: )?", "", line.strip()) for line in stderr.splitlines()]
    kept = [line for line in lines if line and not line.startswith("Try ")]
    return "; ".join(dict.fromkeys(kept)) or "(nothing)"


def pattern(path: str) -> str:
    """A path as sbatch's ``--output`` reads it: its ``%`` doubled (sbatch would expand
    ``%j``, ``%u``, ... in a folder's name)."""
    return path.replace("%", "%%")


def max_array_size() -> int:
    """The cluster's ``MaxArraySize`` (an array's indices are below it); 1001, Slurm's default, if unread."""
    done = _run(["scontrol", "show", "config"])
    found = re.search(r"^MaxArraySize\s*=\s*(\d+)", done.stdout if done else "", re.MULTILINE)
    return int(found.group(1)) if found else 1001


def queue(name: str) -> dict[str, Queued] | None:
    """The tasks of the jobs named ``name`` (the sweep's) that Slurm still holds, pending,
    running or ending: task id (``123_4``) -> what squeue says of it. None: the look failed."""
    done = _run(["squeue", "-h", "-r", "-a", "--name", name, "-o", "%i|%T|%r|%k"])
    if done is None or done.returncode != 0:
        return None
    out = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[1] not in FINAL:
            reason = "" if parts[2] in ("None", "(null)") else parts[2]
            out[parts[0]] = Queued(parts[1], reason, "" if parts[3] == "(null)" else parts[3])
    return out


def ended(tasks: Iterable[str]) -> dict[str, Ended]:
    """How tasks that left the queue ended: one ``scontrol`` per array job, whatever the number
    of its tasks (UNKNOWN where Slurm no longer says)."""
    tasks = list(tasks)
    out = {task: Ended("UNKNOWN") for task in tasks}
    for array in dict.fromkeys(task.split("_")[0] for task in tasks):
        done = _run(["scontrol", "-o", "show", "job", array])
        for line in (done.stdout if done is not None and done.returncode == 0 else "").splitlines():
            for task in _tasks_of(line):
                if task in out:
                    out[task] = _ended(line)
    return out


def _tasks_of(line: str) -> list[str]:
    """An ``scontrol -o show job`` line's task ids: ``123_4`` for an array's task; each task of
    an array's record of tasks that never ran (``ArrayTaskId=2,5-7%2``: cancelled while they
    waited, or waiting still); else the job's id."""
    array, indices = re.search(r"\bArrayJobId=(\d+)", line), re.search(r"\bArrayTaskId=([\d,-]+)", line)
    if array and indices:
        out = []
        for part in indices.group(1).split(","):
            low, _, high = part.partition("-")
            if low.isdigit() and (high.isdigit() or not high):
                out += [f"{array.group(1)}_{i}" for i in range(int(low), int(high or low) + 1)]
        return out
    job = re.search(r"\bJobId=(\d+)", line)
    return [job.group(1)] if job else []


def _ended(line: str) -> Ended:
    state = re.search(r"\bJobState=(\S+)", line)
    code = re.search(r"\bExitCode=(\d+):(\d+)", line)
    node = re.search(r"\bBatchHost=(\S+)", line)
    exitcode = None
    if code is not None:
        status, signal = int(code.group(1)), int(code.group(2))
        exitcode = -signal if signal else status
    return Ended(state.group(1) if state else "UNKNOWN", exitcode, node.group(1) if node else "")


def cancel(tasks: Iterable[str], signal: str | None = None, wait: bool = True) -> list[subprocess.Popen[bytes]]:
    """``scancel`` the tasks (a signal to those running: ``TERM``, ``KILL``; none: cancelled,
    pending or running). Never give a signal to a pending array task: Slurm then cancels
    every pending task of its array. ``wait=False``: the commands started, not waited for
    (scancel takes seconds to signal a task that is ending meanwhile); returned, to be reaped."""
    tasks, started = list(tasks), []
    for i in range(0, len(tasks), 500):  # a command line of a sane length
        argv = ["scancel", *([f"--signal={signal}", "--full"] if signal else []), *tasks[i:i + 500]]
        if wait:
            _run(argv)
            continue
        with contextlib.suppress(OSError):
            started.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return started

