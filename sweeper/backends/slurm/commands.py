"""Slurm's commands, as the Slurm backend uses them: the one place that runs them and reads
what they print. Only ``sbatch``, ``squeue``, ``scontrol`` and ``scancel``: no ``sacct``
(many clusters keep no accounting).

A command that cannot run at all (not installed) is a :class:`~sweeper.errors.SweepError` in
one line; a look at the queue that fails is None (the caller looks again later: a controller
that restarts must not look like every job ended); a submission is :class:`Submitted`, answered
or not (an ``sbatch`` that timed out, or said it could not reach the controller, may have
created the job all the same: its caller looks for it before it concludes anything).

Every command runs in a session of its own: a Ctrl-C at the terminal reaches the sweep, which
decides what to do, never an ``sbatch`` half-way through its answer.
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
#: What sbatch says when it could not tell whether the controller took the job (a lost
#: answer, a controller that restarts): no refusal, the job may exist.
_UNANSWERED = re.compile(r"timed out|unable to contact|connection refused|zero bytes|temporarily unavailable|"
                         r"communication|socket|try again", re.IGNORECASE)


@dataclass(frozen=True)
class Submitted:
    """What ``sbatch`` gave: the job's id ("" where it gave none), what it said (its error
    lines, in one line), and whether that is an answer (False: it timed out, a signal ended
    it, or it could not reach the controller; the job may exist all the same)."""

    job: str
    said: str = ""
    answered: bool = True


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
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_S, env=env,
                              start_new_session=True)
    except (OSError, subprocess.TimeoutExpired):
        return None


def submit(options: list[str], name: str, output: str, script: str, array: str, env: dict[str, str],
           comment: str) -> Submitted:
    """``sbatch --parsable`` of ``script`` as an array (``array``: its indices; "": a job of its
    own), its tasks given ``env`` (Slurm's default ``--export=ALL``; ``output`` is a file name
    pattern, its own ``%`` doubled): what it gave."""
    argv = ["sbatch", "--parsable", *options, f"--job-name={name}", f"--comment={comment}", f"--output={output}",
            *([f"--array={array}"] if array else []), script]
    done = _run(argv, env)
    if done is None:
        return Submitted("", f"no answer within {COMMAND_S:g}s", answered=False)
    job = done.stdout.strip().split(";")[0]
    if done.returncode == 0 and re.fullmatch(r"\d+", job):
        return Submitted(job)
    said = refusal(done.stderr)
    answered = done.returncode > 0 and said != "(nothing)" and not _UNANSWERED.search(said)
    return Submitted("", said if done.returncode >= 0 else f"{said} (ended by signal {-done.returncode})", answered)


def refused(said: str) -> SweepError:
    """Slurm's refusal of the sweep's jobs, in its words (sbatch's), naming what to check."""
    return SweepError(f"Slurm refused the sweep's jobs: sbatch said: {said}; check the --slurm options "
                      "(partition, account, time, ...) against the cluster's (sinfo, sacctmgr show assoc)")


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
    done = _run(["squeue", "-h", "-r", "-a", "--me", "--name", name, "-o", "%i|%T|%r|%k"])
    if done is None or done.returncode != 0:
        return None
    out = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[1] not in FINAL:
            reason = "" if parts[2] in ("None", "(null)") else parts[2]
            out[parts[0]] = Queued(parts[1], reason, "" if parts[3] == "(null)" else parts[3])
    return out


def beyond_partition(task: str) -> bool:
    """Whether a waiting task asks for more CPUs or memory on a node than any node of its
    partition has, as ``scontrol`` and ``sinfo`` tell it (False where they cannot tell)."""
    job = _run(["scontrol", "-o", "show", "job", task])
    line = job.stdout if job is not None and job.returncode == 0 else ""
    partition = re.search(r"\bPartition=(\S+)", line)
    cpus, nodes = re.search(r"\bNumCPUs=(\d+)", line), re.search(r"\bNumNodes=(\d+)", line)
    if partition is None or cpus is None:
        return False
    per_node = -(-int(cpus.group(1)) // max(1, int(nodes.group(1)) if nodes else 1))
    memory = re.search(r"\bMinMemory(Node|CPU)=(\d+(?:\.\d+)?)([KMGT]?)", line)
    mb = 0.0
    if memory is not None:
        mb = float(memory.group(2)) * {"K": 1 / 1024, "G": 1024.0, "T": 1024.0 ** 2}.get(memory.group(3), 1.0)
        mb *= per_node if memory.group(1) == "CPU" else 1
    sizes = _run(["sinfo", "-h", "-N", "-p", partition.group(1), "-o", "%c %m"])
    nodes_seen = [line.split() for line in (sizes.stdout if sizes is not None and sizes.returncode == 0 else "")
                  .splitlines()]
    known = [(int(c), float(m)) for c, m in (n for n in nodes_seen if len(n) == 2) if c.isdigit() and
             m.replace(".", "", 1).isdigit()]
    return bool(known) and (per_node > max(c for c, _ in known) or mb > max(m for _, m in known))


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
            started.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True))
    return started

