"""A trial as a batch scheduler's job runs it: ``python -m sweeper.child.batch TRIAL_DIR``.

A batch backend (one whose trials are jobs of a cluster's queue, Slurm's say) cannot
hand a trial a pipe or a queue; it shares a filesystem with it. It writes the job's
spec into the trial's folder (:func:`write_job`: the spec, ``train`` as a target, the
environment, the sweep's token) and submits this command; the job runs the channel trial
(:func:`sweeper.child.channel.channel_main`, the same trial as every other) with a
channel that appends each message to a file, and writes its return value whole::

    driver (the sweep)                              the job, on a node that sees the folder
    write_job(<trial>/.job/job.pkl) ── submit ───▶  python -m sweeper.child.batch <trial>
    JobReader.messages() ◀── <trial>/.job/messages ── each message: a length, a pickle, one write
    JobReader.returned() ◀── <trial>/.job/returned.pkl ── the return value, renamed into place

An array job runs ``python -m sweeper.child.batch --list FILE --uid UID``: each task the
trial on the line of ``FILE`` its index names (:func:`write_list`). As it starts, such a task
names itself in its trial's ``.job/scheduled`` (its id, its output file, the sweep's uid and
the trial's attempt: :func:`mark_task`), so a driver that never learnt the array's id (killed
between ``sbatch`` and its answer) is not needed to find it, and a later run of another
ledger (``--fresh``), or a later attempt, never takes it for its own.

The driver's half (:mod:`sweeper.backends.channel`) makes the engine's events of both;
how the job ended (its exit code, a kill) is the scheduler's to say.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import Any

from sweeper.store import paths

#: Each message's length, before its pickle.
_LENGTH = struct.Struct("<I")


def write_job(spec: Any, target: Any, env: dict[str, str], sweep: str | None) -> str:
    """The job's spec in its trial's folder (made, with an empty message file); the folder
    to give ``python -m sweeper.child.batch``. ``target`` must pickle by reference or by value."""
    job = paths.JobPaths(spec.dir)
    os.makedirs(job.folder, exist_ok=True)
    for stale in (job.messages, job.returned):  # an earlier attempt's
        if os.path.exists(stale):
            os.remove(stale)
    open(job.messages, "wb").close()
    with paths.atomic(job.spec, binary=True) as f:
        pickle.dump((spec, target, env, sweep, _main_module()), f)
    return spec.dir


def _main_module() -> dict[str, Any]:
    """What the job needs to import the driver's main module as ``__mp_main__``, as a spawned
    process does (``train`` defined in the script that called ``sweep()`` is pickled by
    reference to it): its path or name, and the driver's ``sys.path``."""
    import multiprocessing.spawn

    data = multiprocessing.spawn.get_preparation_data("sweeper-batch")
    return {k: data[k] for k in ("sys_path", "init_main_from_path", "init_main_from_name") if k in data}


class FileChannel:
    """The job's channel: ``put((trial id, message))`` appends one frame in one write, so
    the driver reads whole frames or none of one."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def put(self, item: Any, timeout: float | None = None) -> None:
        data = pickle.dumps(item)
        os.write(self.fd, _LENGTH.pack(len(data)) + data)


class JobReader:
    """The driver's reading of a job's files: new messages since the last look; what it returned."""

    def __init__(self, trial_dir: str) -> None:
        self.job = paths.JobPaths(trial_dir)
        self.offset = 0

    def messages(self) -> list[Any]:
        """Whole frames written since the last read. A frame not yet whole, or not yet readable
        (a network file system may show a write's length before its bytes: zeros), is read at
        the next look; so is everything while the file cannot be read."""
        try:
            with open(self.job.messages, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        out, at = [], 0
        while at + _LENGTH.size <= len(data):
            (size,) = _LENGTH.unpack_from(data, at)
            if size == 0 or at + _LENGTH.size + size > len(data):
                break  # written while we read: the rest at the next look
            try:
                out.append(pickle.loads(data[at + _LENGTH.size:at + _LENGTH.size + size]))
            except Exception:  # its bytes not all here yet
                break
            at += _LENGTH.size + size
        self.offset += at
        return out

    def returned(self) -> dict[str, Any] | None:
        """What the job returned, once it wrote it (renamed into place whole); None before, or
        while it cannot be read (or if it never will be)."""
        try:
            with open(self.job.returned, "rb") as f:
                out: dict[str, Any] = pickle.load(f)
                return out
        except (OSError, EOFError, pickle.UnpicklingError):
            return None


def write_list(path: str, trial_dirs: list[str]) -> None:
    """An array job's list: line ``i`` is the folder of the trial its task ``i`` runs."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with paths.atomic(path) as f:
        f.write("".join(f"{d}\n" for d in trial_dirs))


def trial_of_task(list_path: str, index: int) -> str:
    """The folder of the trial an array's task ``index`` runs (:func:`write_list`)."""
    with open(list_path) as f:
        return f.read().splitlines()[index]


def write_mark(trial_dir: str, job: str, output: str, uid: str, attempt: int) -> None:
    """The trial's ``.job/scheduled``: the task that runs it (Slurm's ``123_4``), its output
    file, the sweep's uid (its ledger's) and the attempt it runs."""
    with paths.atomic(paths.JobPaths(trial_dir).scheduled, fsync=False) as f:
        f.write(f"{job}\n{output}\n{uid}\n{attempt}\n")


def mark_task(list_path: str, index: int, trial_dir: str, uid: str, attempt: int) -> None:
    """An array's task names itself in its trial's ``.job/scheduled``, as the driver does once
    sbatch answered (:func:`write_mark`: output file ``<list>_<index>.out``)."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if not job:
        return
    try:
        write_mark(trial_dir, f"{job}_{index}", f"{list_path.removesuffix('.txt')}_{index}.out", uid, attempt)
    except OSError:  # (its driver, if it lives, knows it anyway)
        pass


def main(argv: list[str] | None = None) -> int:
    """Run the job whose spec is in ``<trial dir>/.job/``: ``TRIAL_DIR``, or ``--list FILE
    --uid UID`` (an array job's task: the line of ``FILE`` its ``SLURM_ARRAY_TASK_ID`` names)."""
    from sweeper.child.channel import channel_main

    args = sys.argv[1:] if argv is None else argv
    listed = args[1] if args[0] == "--list" else ""
    index = int(os.environ["SLURM_ARRAY_TASK_ID"]) if listed else 0
    trial_dir = trial_of_task(listed, index) if listed else args[0]
    job = paths.JobPaths(trial_dir)
    with open(job.spec, "rb") as f:
        spec, target, env, sweep, main = pickle.load(f)
    if listed:
        mark_task(listed, index, trial_dir, args[3] if args[2:3] == ["--uid"] else "", spec.attempt)
    import multiprocessing.spawn

    multiprocessing.spawn.prepare(main)  # the driver's script as __mp_main__ (its __main__ block does not run)
    # the node sees the sweep's folder (a batch job's must): the trial works and logs there
    out = channel_main(spec, target, env, FileChannel(job.messages), sweep, shared=True)
    with paths.atomic(job.returned, binary=True) as f:
        pickle.dump(out, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # its result is written: a thread train left behind does not keep the job (and its place)


if __name__ == "__main__":
    sys.exit(main())
