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
    JobReader.answer() ── <trial>/.job/answers ──▶ Answers.receive(): the verdict on each batch
                                                   of reports, where the trial waits for them

Each answer names the run of the job it answers (the ``Placed`` that run sent first): a job
the scheduler started again (a requeue) never takes an earlier run's answers for its own. A
run waiting for an answer with no time limit (a trial whose every epoch hears its verdict)
stops waiting once the sweep's driver is gone: its heartbeat (``<sweep>/.jobs/driver``, where
the backend keeps one) stale for ``DRIVER_GONE_S`` or removed.

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
import time
from typing import Any

from sweeper.model.protocol import Placed, Reports
from sweeper.store import paths

#: Each message's length, before its pickle.
_LENGTH = struct.Struct("<I")
#: Seconds after the driver's last heartbeat that a job waiting for an answer stops waiting
#: (the driver beats every couple of seconds; a file server's clock may be some seconds off).
DRIVER_GONE_S = 60.0
#: Seconds between two looks at the answers file, at most (the first looks come sooner).
ANSWER_POLL_S = 0.25
#: Seconds between two looks at the driver's heartbeat while an answer is waited for without limit.
BEAT_LOOK_S = 5.0


def write_job(spec: Any, target: Any, env: dict[str, str], sweep: str | None) -> str:
    """The job's spec in its trial's folder (made, with an empty message file); the folder
    to give ``python -m sweeper.child.batch``. ``target`` must pickle by reference or by value."""
    job = paths.JobPaths(spec.dir)
    os.makedirs(job.folder, exist_ok=True)
    for stale in (job.messages, job.returned, job.answers):  # an earlier attempt's
        if os.path.exists(stale):
            os.remove(stale)
    for fresh in (job.messages, job.answers):
        open(fresh, "wb").close()
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
        os.write(self.fd, _frame(item))


def _frame(item: Any) -> bytes:
    """One message as it is appended, in one write: its length, then its pickle."""
    data = pickle.dumps(item)
    return _LENGTH.pack(len(data)) + data


class JobReader:
    """The driver's reading of a job's files: new messages since the last look; what it
    returned; and its answers to the job's reports (:meth:`answer`)."""

    def __init__(self, trial_dir: str) -> None:
        self.trial_dir = trial_dir
        self.job = paths.JobPaths(trial_dir)
        self.offset = 0
        self.placed: Any = None  #: the Placed the job's latest run sent first
        #: the run (its Placed) of each batch of reports read and not yet answered, oldest first;
        #: None for one an earlier driver of the sweep answered already (this one took the job over)
        self.asked: list[Any] = []
        self.answered: dict[Any, int] | None = None  #: by run: the answers found as the first messages came

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
        out, at = _frames(data)
        self.offset += at
        if out and self.answered is None:  # before this driver answered any: a killed driver's answers
            self.answered = {}
            for run in _runs(self.job.answers):
                self.answered[run] = self.answered.get(run, 0) + 1
        answered = self.answered if self.answered is not None else {}
        for _, message in out:
            if isinstance(message, Placed):  # a run the scheduler started again: its batches are its own
                self.placed = message
            elif isinstance(message, Reports):
                earlier = answered.get(self.placed, 0)
                if earlier:  # answered before this driver took the job over: never twice
                    answered[self.placed] = earlier - 1
                self.asked.append(None if earlier else self.placed)
        return out

    def answer(self, message: Any) -> bool:
        """The answer to the oldest batch of reports read and not yet answered, for the run
        that sent it (:func:`write_answer`); False when there is none, or it could not be written."""
        if not self.asked:
            return False
        run = self.asked.pop(0)
        return run is not None and write_answer(self.trial_dir, run, message)

    def returned(self) -> dict[str, Any] | None:
        """What the job returned, once it wrote it (renamed into place whole); None before, or
        while it cannot be read (or if it never will be)."""
        try:
            with open(self.job.returned, "rb") as f:
                out: dict[str, Any] = pickle.load(f)
                return out
        except (OSError, EOFError, pickle.UnpicklingError):
            return None


def _frames(data: bytes) -> tuple[list[Any], int]:
    """The whole frames at the start of ``data`` and the bytes they take. A frame not yet
    whole, or not yet readable (a network file system may show a write's length before its
    bytes: zeros), ends the list: it is read at the next look."""
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
    return out, at


def _runs(path: str) -> list[Any]:
    """The run each answer in an answers file is for, in order ([] where it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return [run for run, _ in _frames(f.read())[0]]
    except OSError:
        return []


def write_answer(trial_dir: str, run: Any, message: Any) -> bool:
    """The driver's answer to a job's last batch of reports, for the run of it that sent
    ``run`` (its ``Placed``): one frame appended to its ``.job/answers`` in one write. False
    where it cannot be written (the job waits its while, then trains on; a stop is then a cancel)."""
    try:
        fd = os.open(paths.JobPaths(trial_dir).answers, os.O_WRONLY | os.O_APPEND)  # never remade once removed
    except OSError:
        return False
    try:
        os.write(fd, _frame((run, message)))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class Answers:
    """The job's half of the verdicts: :meth:`receive` is the trial's ``receive`` (as a local
    trial's reads its pipe), the next answer meant for this run of the job, in order."""

    def __init__(self, trial_dir: str, run: Any) -> None:
        self.path = paths.JobPaths(trial_dir).answers
        self.run = run  #: the Placed this run sent first: answers naming another run are not its own
        self.beat = os.path.join(paths.SweepPaths(os.path.dirname(os.path.dirname(trial_dir))).jobs,
                                 paths.DRIVER_BEAT)
        self.offset = 0
        self.heard: list[Any] = []
        self.beat_seen = os.path.exists(self.beat)  #: the driver's heartbeat was there once (a backend that keeps one)

    def receive(self, wait: float | None) -> Any:
        """The next answer, waiting at most ``wait`` seconds (None: until it comes, or the
        driver is gone); None when none came."""
        deadline = None if wait is None else time.monotonic() + wait
        pause, beat_looked = 0.01, time.monotonic()  # (the driver answers within its read period)
        while True:
            self._read()
            if self.heard:
                return self.heard.pop(0)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if deadline is None and now - beat_looked >= BEAT_LOOK_S:
                beat_looked = now
                if self._driver_gone():
                    return None
            pause = min(pause * 2, ANSWER_POLL_S)
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - now)))

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        frames, at = _frames(data)
        self.offset += at
        self.heard += [message for run, message in frames if run == self.run]

    def _driver_gone(self) -> bool:
        """The driver's heartbeat, once seen, is stale or removed (where none was ever seen,
        the backend keeps none: the answer is waited for)."""
        try:
            age = time.time() - os.stat(self.beat).st_mtime
        except OSError:
            return self.beat_seen
        self.beat_seen = True
        return age >= DRIVER_GONE_S


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
    out = channel_main(spec, target, env, FileChannel(job.messages), sweep, shared=True,
                       answers=lambda run: Answers(trial_dir, run).receive)
    with paths.atomic(job.returned, binary=True) as f:
        pickle.dump(out, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # its result is written: a thread train left behind does not keep the job (and its place)


if __name__ == "__main__":
    sys.exit(main())
