"""The trial process, from spawn to exit: one bootstrap for local and Ray trials.

Small on purpose (as submitit's worker is). Locally the parent starts :func:`main` in a
fresh fork of its fork server or a ``spawn`` process and sends it one :class:`~sweeper.model.trial.TrialSpec` over a pipe;
on Ray (or any backend whose trials talk through a channel), :func:`sweeper.child.channel.channel_main`
is the task, and runs the same trial (:func:`run_trial`). Either way the child, in this order:

1. (locally) becomes the leader of its own process group, so a timeout or Ctrl-C can
   kill the trial with everything it started, and arranges to die with the sweep (a
   thread watching the sweep's sentinel, plus ``PR_SET_PDEATHSIG`` where the sweep is
   its parent: not for a fork, whose parent is the fork server);
2. sets the slot's environment (GPU pinning, memory cap) and installs the import hook
   (:mod:`sweeper.child.imports`): caps now for frameworks already imported, and the
   moment any other is imported; seeds follow with the trial;
3. points file descriptors 1 and 2 at the trial's ``log.txt`` (TensorFlow logs from C++),
   after a header line (:func:`sweeper.store.paths.log_header`);
4. loads ``train`` (importing the user's module) and runs ``train(params)``;
   :mod:`sweeper.model.outcome` judges what it returned or raised;
5. writes ``result.json`` whole (:func:`sweeper.store.paths.atomic`), sends the same
   :class:`~sweeper.model.protocol.Result` to the parent and exits, releasing all of its
   memory, GPU memory included.

A *standby* does steps 1-3 while its slot's previous trial still runs, and imports the
*installed* modules ``train`` needs (the framework's seconds), output going to a nameless
file until its trial comes; never the user's module. Every trial seeds ``random`` and the
frameworks before the user's module runs, in every kind of process (a fork, a spawn, a
standby, a replay), so what the module draws at its top is the trial's own and the same
however it ran. The CLI's grid reader (``inspect``, :mod:`sweeper.front.gridfile`) is such a
process that reads the grid file for the parent and ends: no trial runs after an import
that was not seeded for it. Nothing heavy is imported here: the framework arrives with
the user's module.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from sweeper.child import context, imports, loading
from sweeper.model import contract, outcome
from sweeper.model.metrics import BadResult, epochs_of
from sweeper.model.protocol import LoadFailed, Ready, Result, Unwritable
from sweeper.model.trial import TrialSpec, segment_seed
from sweeper.store import paths
from sweeper.system import environment, hostmem, procs

_PR_SET_PDEATHSIG = 1
#: Exit code of a trial process that found itself re-running the caller's ``sweep()``
#: while spawn re-imported the caller's script (no ``if __name__ == "__main__":`` guard).
NO_MAIN_GUARD = 86


@dataclass(frozen=True)
class Boot:
    """What a worker process is started with, before it knows its trial."""

    parent_pid: int
    target: Any  #: a :data:`sweeper.model.target.Target`; None with ``inspect`` (the grid file names it)
    env: dict[str, str] = field(default_factory=dict)  #: the slot's: GPU pinning, memory cap
    #: A standby: import the installed modules ``train`` needs (``warm``) at once, output
    #: to a nameless file until a trial comes (it vanishes with the process, however that
    #: ends). Never the user's module: that comes after the trial's seed.
    standby: bool = False
    #: False under forkserver, where the parent is the fork server, not the sweep.
    check_ppid: bool = True
    #: (grid file, seed): read the grid file for the parent, then end (its import drew
    #: from generators no trial's seed had set: no trial may run after it).
    inspect: tuple[str, int | None] | None = None
    #: A standby's candidates to import ahead (:func:`sweeper.system.modules.warm` keeps the installed ones).
    warm: tuple[str, ...] = ()


def check_not_in_a_trial_bootstrap() -> None:
    """A script without ``if __name__ == "__main__":`` runs its ``sweep()`` call (or its
    ``replay()``) again in every spawned trial process, while spawn re-imports it. Such a
    process ends at once with :data:`NO_MAIN_GUARD`, and the sweep says what to fix."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        os._exit(NO_MAIN_GUARD)


def main(conn: multiprocessing.connection.Connection, boot: Boot) -> None:
    """Entry point of a trial process (the ``target`` of its ``Process``)."""
    _guard(boot.parent_pid if boot.check_ppid else None)
    os.environ.update(boot.env)
    if not boot.check_ppid:  # a fork: /proc shows the server's environment, made this slot's
        procs.tag_slot(boot.env.get(contract.SLOT, ""))
    hook = imports.install()
    prelog: int | None = None
    if boot.inspect is not None:  # the grid reader: read, tell, end
        from sweeper.child.gridcheck import inspect

        if contract.SLOT not in boot.env:  # no slot's, forked or not (a fork has the server's placeholder)
            os.environ.pop(contract.SLOT, None)

        redirect_to_nameless()
        inspect(*boot.inspect, conn.send)
        conn.close()
        _exit_now()
    if boot.standby:  # what train needs from installed modules, before the trial comes
        from sweeper.system.modules import warm

        prelog = redirect_to_nameless()
        warm(boot.warm)
        conn.send(Ready())
    try:
        spec: TrialSpec = conn.recv()
    except EOFError:  # a standby the sweep no longer needs
        return
    started = time.monotonic()
    try:
        redirect_output(spec, prelog)
    except OSError as exc:  # the folder became read-only, or the disk is full: said, not run
        conn.send(Unwritable(exc.filename or spec.log_path, exc.strerror or str(exc)))
        return
    os.environ.update(spec.env)
    result = trial(spec, lambda: loading.load(boot.target), hook, started, conn.send, _receiver(conn) if spec.verdicts else None)
    if result is None:
        return
    unwritten = write_result(spec, result)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.send(result)
        if unwritten is not None:  # after the result, which stands
            conn.send(unwritten)
    except OSError:  # the parent is gone; the watcher will end us
        pass
    conn.close()
    _exit_now()


def _receiver(conn: multiprocessing.connection.Connection) -> Callable[[float], Any]:
    """The parent's next message on the trial's pipe, waiting at most so many seconds."""

    def receive(wait: float) -> Any:
        try:
            return conn.recv() if conn.poll(wait) else None
        except (EOFError, OSError):  # the parent is gone: its watcher ends us
            return None

    return receive


def _exit_now() -> None:
    """Leave without the interpreter's teardown, once the result is safe.

    Tearing down TensorFlow's modules and threads takes seconds, during which the slot
    cannot take its next trial (its memory must be released first). ``atexit`` handlers
    still run and the standard streams are flushed; then the process ends, and the
    operating system releases its memory, GPU memory included.
    """
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)


def setup() -> dict[str, Any]:
    """For a script run as a command trial: apply what sweeper chose, from the environment.

    Caps GPU memory (``SWEEPER_MEMORY_LIMIT_MB`` and friends; TensorFlow's cap needs this
    call, JAX reads its variable by itself) and seeds ``random``, NumPy, TensorFlow, Keras
    and PyTorch with ``SWEEPER_SEED``, for the frameworks imported now and those imported
    later. Call it first, before any framework touches the GPU.

    Returns:
        The trial's parameters (``SWEEPER_PARAMS``); outside a sweep, ``{}``.

    Raises:
        Nothing: a variable that is not set leaves its part undone.

    Example:
        A file ``train.py``::

            import json

            import sweeper.worker

            params = sweeper.worker.setup()
            print(json.dumps({"loss": params["lr"] * 2}))

        and a file ``flags.py``::

            import sweeper

            if __name__ == "__main__":
                df = sweeper.sweep("python train.py {flags}", {"lr": [0.1, 0.01]}, progress=False)
                print(df[["trial", "status", "loss"]].to_string(index=False))

        ``python flags.py`` prints::

              trial status  loss
             lr=0_1     ok   0.2
            lr=0_01     ok  0.02
    """
    hook = imports.install()
    seed = contract.seed_from_env()
    if seed is not None:
        hook.set_seed(seed)
    return contract.params_from_env()


def load_train(load: Callable[[], Callable[..., Any]], send: Callable[[Any], Any]) -> Callable[..., Any] | None:
    """``train``, or None after telling the parent why it cannot be imported: that is the
    sweep's problem (every trial would fail alike), not one trial's."""
    try:
        return load()
    except BaseException as exc:  # noqa: BLE001
        traceback.print_exc()
        send(LoadFailed(outcome.last_line(exc)))
        return None


def trial(spec: TrialSpec, load: Callable[[], Callable[..., Any]], hook: imports.OnImport, started: float,
          send: Callable[[Any], Any], receive: Callable[[float], Any] | None = None) -> Result | None:
    """A trial's steps, the same however its process was started and whatever carries its
    messages (a pipe here; a channel in :mod:`sweeper.child.channel`): seeded before the
    user's module runs (what its top draws is the trial's), ``train`` loaded (None after
    telling why it could not be), reports sent as they come (``receive``: a pruner's
    verdicts, where they can reach it), ``train`` run and judged; its :class:`Result`. A
    segment that resumes a paused trial is seeded by the trial's seed and the epoch it
    resumes after (:func:`~sweeper.model.trial.segment_seed`, its ``current_trial().seed``)."""
    spec = replace(spec, seed=segment_seed(spec.seed, spec.resumed_epoch))
    hook.set_seed(spec.seed)
    fn = load_train(load, send)
    if fn is None:
        return None
    context.start_reporting(send, receive, after=int(spec.env.get(contract.RESUMED_EPOCH) or 0))
    result = run_trial(spec, fn, hook, started)
    context.stop_reporting()  # its last batch goes before the result
    return result


def run_trial(spec: TrialSpec, fn: Callable[..., Any], hook: imports.OnImport, started: float) -> Result:
    """Run ``train`` (loaded and seeded already); the outcome, judged, as a :class:`Result`.

    ``duration_s`` is measured here, from ``started`` (the trial reached this process) to
    the end of ``train``: the trial's own time, whatever the parent was doing meanwhile.
    """
    context.set_current(spec)
    history: list[dict[str, Any]] = []
    try:
        hook.catch_up()
        context.announce_start()  # the parent may now start this slot's next process
        hostmem.reset_own_peak()  # the peak is train's, not that of how this process was made
        value = fn(dict(spec.params))
        verdict = outcome.returned(value)  # what it returned is not metrics: an error
        if verdict.error:
            print(f"sweeper: {verdict.error}", file=sys.stderr)
        else:
            history = epochs_of(value)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
        verdict = outcome.raised(exc, context.attempt_tail)
        if isinstance(exc, (outcome.TrialFailed, BadResult)):
            print(f"sweeper: {exc}", file=sys.stderr)
        else:
            traceback.print_exc()
    finally:
        context.set_current(None)
    duration = time.monotonic() - started
    return Result(verdict.status, verdict.metrics, verdict.error, duration, history, hostmem.own_peak_mb(),
                  environment.of_trial(hook.deterministic))


def write_result(spec: TrialSpec, result: Result) -> Unwritable | None:
    """``result.json``, whole or not at all (the ledger, not this file, makes a result
    durable, so no fsync); if it cannot be written, what to tell the parent (which then
    starts no new trial, and still records the result)."""
    path = paths.result_file(spec.dir)
    try:
        with paths.atomic(path, fsync=False) as f:
            json.dump(result.to_json(spec.trial_id), f)
    except OSError as exc:
        print(f"sweeper: could not write {path} ({exc.strerror})", file=sys.stderr)
        return Unwritable(path, exc.strerror or str(exc))
    return None


# -- staying with the parent -------------------------------------------------------------


def _kill_own_group(*_: Any) -> None:
    """End this trial and everything it started, at once."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)


def _guard(parent_pid: int | None) -> None:
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    # The parent started us with SIGINT blocked (Ctrl-C is its to handle); now that no
    # terminal's Ctrl-C reaches our group, ignore it (which drops one that came meanwhile),
    # unblock it, then give the trial Python's usual behaviour back.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, _kill_own_group)
    # A fork's parent is the fork server, whose end must not end the trial: only the
    # watcher below (on the sweep's own pipe) ties a fork to the sweep.
    if parent_pid is not None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
        except (OSError, AttributeError):  # not Linux: the watcher thread still works
            pass
    if parent_pid is not None and os.getppid() != parent_pid:  # died before prctl took effect
        _kill_own_group()
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        sentinel = parent.sentinel

        def watch() -> None:
            multiprocessing.connection.wait([sentinel])
            _kill_own_group()

        threading.Thread(target=watch, name="sweeper-parent-watch", daemon=True).start()


# -- logs ----------------------------------------------------------------------------------


def _redirect_fds(fd: int) -> None:
    """Send fds 1 and 2 (Python's and native code's output) to ``fd``, then close it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass


def redirect_to_nameless() -> int:
    """Point fds 1 and 2 at a file without a name (a standby's output until its trial
    comes, gone with the process however it ends); returns a descriptor to read it back."""
    import tempfile

    with tempfile.TemporaryFile() as f:
        keep = os.dup(f.fileno())
        _redirect_fds(os.dup(f.fileno()))
    return keep


def redirect_output(spec: TrialSpec, prelog: int | None = None) -> None:
    """Point output at the trial's log, after a header and what a standby printed so far."""
    os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
    _redirect_fds(os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    print(paths.log_header(spec.name, spec.trial_id, spec.attempt, os.getpid(), spec.device, spec.seed),
          flush=True)
    if prelog is not None:  # what the standby printed while it imported
        try:
            offset = 0
            while chunk := os.pread(prelog, 1 << 16, offset):
                os.write(1, chunk)
                offset += len(chunk)
        except OSError:
            pass
        finally:
            os.close(prelog)
