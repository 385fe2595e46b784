"""A trial that talks to its sweep through a channel, and returns its result: how a trial
runs where the sweep cannot hand it a pipe (a Ray task; any queue a backend gives it).

The same trial as :func:`sweeper.child.bootstrap.main` (the local backend's), minus what
the channel's backend does itself (placing the task, setting ``CUDA_VISIBLE_DEVICES``,
ending the process): environment, caps, seeds, output into a log, ``train`` loaded,
seeded and run by the bootstrap's own :func:`~sweeper.child.bootstrap.run_trial`; messages
through ``channel`` (``channel.put((trial id, message), timeout=...)``) instead of a pipe;
the result, the log and how it ended in the return value, which the driver's half
(:mod:`sweeper.backends.channel`) writes into the sweep's folder.

Where the node cannot see the sweep's folder, the trial works in a temporary folder of the
node's (:class:`_Scratch`), removed when it ends; the node's leftovers of killed trials are
removed by the next trial there, or at the sweep's end (:func:`remove_leftovers`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, NoReturn

from sweeper.child import bootstrap, imports
from sweeper.child.loading import load
from sweeper.model import contract
from sweeper.model.protocol import Exiting, LoadFailed, Placed
from sweeper.model.target import FileTarget, FunctionTarget
from sweeper.model.trial import TrialSpec
from sweeper.store import paths


#: Given the run's ``Placed``, the trial's ``receive``: seconds (None: no limit) -> the
#: driver's next answer to its reports, or None when none came (:class:`sweeper.child.batch.Answers`).
Answering = Callable[[Placed], Callable[[float | None], Any]]


def channel_main(spec: TrialSpec, target: Any, env: dict[str, str], channel: Any,
             sweep: str | None = None, shared: bool = False, answers: Answering | None = None) -> dict[str, Any]:
    """Entry point of a trial as a Ray task (a fresh Ray worker process, ``max_calls=1``).

    The same bootstrap as :func:`main` minus what Ray does itself (placing the task,
    setting ``CUDA_VISIBLE_DEVICES``, ending the process): environment, caps, seeds, output
    into a log, messages through ``channel`` (a Ray queue, as ``(trial id, message)``)
    instead of a pipe. The log is a file without a name on this node (gone with the
    process, however it ends); it comes back in the return value, and the driver appends
    it to the trial's ``log.txt`` and writes ``result.json`` (this node may not see them).

    The trial's folder (``SWEEPER_TRIAL_DIR``, ``current_trial().dir``): where this node
    sees the sweep's own folder (``sweep`` is what :func:`sweep_token` made of it on the
    driver: the driver's machine, or a shared filesystem mounted at the same path), its
    folder there, as for a local trial; elsewhere a temporary folder of this node's
    (:class:`_Scratch`), removed with what the trial wrote in it when the task ends.

    ``shared``: the node sees the sweep's folder, always (a batch job's: the sweep requires it);
    then the trial writes its log there itself, as a local trial does (its last words survive
    a crash, and ``--stall`` sees it write), and the return value holds none.

    ``answers``: how the driver's answers reach the trial (a batch job's file), where its spec
    says it waits for verdicts; without it, or without verdicts, it hears none.
    """
    os.environ.update(env)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    limit = _limit_mb_here(gpus)
    if limit is not None:
        os.environ[contract.MEMORY_LIMIT_MB] = str(limit)
    device = f"gpu:{gpus}" if gpus and not gpus.startswith("-") else "cpu"
    remove_leftovers()  # of this node's trials that were killed (ray.cancel, a crash)
    scratch: _Scratch | None = None
    if not shared and (sweep is None or sweep_token(spec.dir) != sweep or not _made(spec.dir)):
        import ray

        # first, so the driver knows where to clean should this process be killed
        channel.put((spec.trial_id, ScratchOn(ray.get_runtime_context().get_node_id())))
        scratch = _Scratch(spec.trial_id)
    try:
        spec = replace(spec, dir=spec.dir if scratch is None else scratch.path, device=device)
        return _trial(spec, target, channel, limit, scratch, shared, answers)
    finally:
        if scratch is not None:
            scratch.remove()


def _trial(spec: TrialSpec, target: Any, channel: Any, limit: int | None,
               scratch: _Scratch | None, shared: bool = False, answers: Answering | None = None) -> dict[str, Any]:
    """:func:`channel_main`'s trial, in its folder: the return value the driver reads."""
    os.environ.update({**spec.env, contract.TRIAL_DIR: spec.dir})
    placed = Placed(os.getpid(), spec.device, limit, socket.gethostname(), time.time())
    channel.put((spec.trial_id, placed))
    receive = answers(placed) if answers is not None and spec.verdicts else None
    log: int | None = None
    if shared:
        bootstrap.redirect_output(spec)  # its log.txt, after the attempt's header
    else:
        log = bootstrap.redirect_to_nameless()
        print(paths.log_header(spec.name, spec.trial_id, spec.attempt, os.getpid(), spec.device, spec.seed),
              flush=True)
    started = time.monotonic()
    hook = imports.install()
    failed: list[LoadFailed] = []

    def send(message: Any) -> None:  # why train could not load goes back in the return value
        if isinstance(message, LoadFailed):
            failed.append(message)
        else:
            channel.put((spec.trial_id, message))

    real_exit = os._exit

    def exit_and_tell(code: int) -> NoReturn:  # Ray says only "the worker died": say how
        with contextlib.suppress(Exception):
            channel.put((spec.trial_id, Exiting(int(code))), timeout=5)
        if scratch is not None:  # no finally runs after os._exit
            scratch.remove()
        real_exit(code)

    os._exit = exit_and_tell  # type: ignore[assignment]
    try:
        result = bootstrap.trial(spec, (lambda: load(target)) if isinstance(target, (FileTarget, FunctionTarget)) else (lambda: target), hook,
                                 started, send, receive)
    finally:
        os._exit = real_exit
    if result is None:
        return {"load_error": failed[0].error, "log": _read_back(log) if log is not None else ""}
    sys.stdout.flush()
    sys.stderr.flush()
    return {"result": result, "log": _read_back(log) if log is not None else "", "pid": os.getpid(),
            "device": spec.device, "cap_mb": limit}


#: A Ray trial's temporary folder: ``<temp>/sweeper-ray-<trial id>-<random>`` on its node.
SCRATCH_PREFIX = "sweeper-ray-"


@dataclass(frozen=True)
class ScratchOn:
    """(Ray trial to driver) the trial's folder is a temporary one on node ``node``: if
    the task is killed, the driver has the node remove it (:func:`remove_leftovers`)."""

    node: str


class _Scratch:
    """A Ray trial's temporary folder, locked (``flock``) by its process for as long as
    that lives (and any fork of it that holds the descriptor): a folder nobody locks is a
    killed trial's leftover. :meth:`remove` when the task ends; after a SIGKILL
    (``ray.cancel(force=True)`` on a timeout or Ctrl-C, a crash, the OOM killer) no code of
    the trial runs, and :func:`remove_leftovers` removes it: the next sweeper task on the
    node does, and the driver has each node where such a task was killed do it when the
    sweep ends."""

    def __init__(self, trial_id: str) -> None:
        import fcntl
        import tempfile

        for _ in range(10):
            path = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{trial_id}-")
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:  # a cleaner took it before it was locked
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits out a cleaner that locked it first
            try:
                ours = os.path.samestat(os.fstat(fd), os.stat(path))
            except OSError:
                ours = False
            if ours:
                self.path, self._fd = path, fd
                return
            os.close(fd)  # removed meanwhile by that cleaner: make another
        raise OSError(f"could not make a temporary folder for trial {trial_id}")

    def remove(self) -> None:
        import shutil

        if self._fd < 0:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)  # unlocked once it is gone
        self._fd = -1


def remove_leftovers(wait: float = 0.0) -> int:
    """Remove the temporary folders of this node's Ray trials that no process holds any
    more (:class:`_Scratch`); a folder still held is left alone, after waiting up to
    ``wait`` seconds for its process to be gone. How many were removed."""
    import fcntl
    import glob
    import shutil
    import tempfile

    removed = 0
    deadline = time.monotonic() + wait
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{SCRATCH_PREFIX}*")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its trial runs (or is dying)
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.1)
                    continue
                except OSError:
                    break
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
                break
        finally:
            os.close(fd)
    return removed


def sweep_token(trial_dir: str) -> str | None:
    """What tells the sweep's folder from any other at the same path: the pid in its
    ``.lock`` (the running sweep's) and the lock file's inode number (which a network
    filesystem gives every client alike). None where it cannot be read."""
    sweep = os.path.dirname(os.path.dirname(trial_dir))  # <out>/<name>/trials/<trial>
    try:
        with open(os.path.join(sweep, paths.LOCK), "rb") as f:
            pid = f.read(32).decode(errors="replace").strip()
            inode = os.fstat(f.fileno()).st_ino
    except OSError:
        return None
    return f"{pid}:{inode}" if pid else None


def _made(folder: str) -> bool:
    """The folder exists, made here if need be, and this process can write in it."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def _read_back(fd: int) -> str:
    """What was written to the file open as ``fd`` (a nameless log), from its start."""
    sys.stdout.flush()
    sys.stderr.flush()
    chunks = []
    try:
        offset = 0
        while chunk := os.pread(fd, 1 << 16, offset):
            chunks.append(chunk)
            offset += len(chunk)
    except OSError:
        pass
    return b"".join(chunks).decode(errors="replace")


def _limit_mb_here(gpus: str) -> int | None:
    """The cap in MB for the GPU Ray gave this task: the fraction times its size, from NVML."""
    fraction = os.environ.get(contract.MEMORY_FRACTION)
    if not fraction or not gpus or gpus.startswith("-"):
        return None
    from sweeper.system.gpus import inventory

    first = gpus.split(",")[0]
    for gpu in inventory():
        if first in (str(gpu.index), gpu.uuid):
            return int(float(fraction) * gpu.total_mb)
    return None
