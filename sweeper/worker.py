"""The trial process, from spawn to exit. Small on purpose (as submitit's worker is).

The parent starts ``main`` in a fresh ``spawn`` process and sends it one
:class:`~sweeper.trial.TrialSpec` over a pipe. The child then, in this order:

1. becomes the leader of its own process group (so a timeout or Ctrl-C can kill the
   trial with everything it started) and arranges to die with its parent
   (``PR_SET_PDEATHSIG`` plus a thread watching the parent's sentinel);
2. points file descriptors 1 and 2 at the trial's ``log.txt`` (TensorFlow logs from C++);
3. sets the trial's environment; caps GPU memory and seeds ``random``, NumPy,
   TensorFlow, Keras and PyTorch, now if they are imported and otherwise the moment they
   are (see :mod:`sweeper.capping`); then loads ``train`` (importing the user's module);
4. runs ``train(params)``, turns its return value into metrics, writes ``result.json``
   atomically in the trial folder and sends the same message to the parent;
5. exits, releasing all of its memory, GPU memory included.

Nothing heavy is imported here: the framework arrives with the user's module.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import importlib.util
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable, NoReturn

from . import capping, context
from .metrics import BadResult, TrialFailed, epochs_of, is_oom, normalise
from .target import Target
from .trial import Status, TrialSpec

_PR_SET_PDEATHSIG = 1
#: Exit code of a trial process that found itself re-running the caller's ``sweep()``
#: while spawn re-imported the caller's script (no ``if __name__ == "__main__":`` guard).
NO_MAIN_GUARD = 86
LOG_HEADER = "=== sweeper:"  #: starts the line the worker writes at the top of each attempt


@dataclass(frozen=True)
class Boot:
    """What a worker process is started with, before it knows its trial."""

    parent_pid: int
    target: Target
    env: dict[str, str] = field(default_factory=dict)  #: the slot's: GPU pinning, memory cap
    #: A standby: import ``train`` at once, output to a nameless file until a trial comes
    #: (it vanishes with the process, however that ends).
    standby: bool = False
    #: False under forkserver, where the parent is the fork server, not the sweep.
    check_ppid: bool = True


def main(conn: multiprocessing.connection.Connection, boot: Boot) -> None:
    """Entry point of a trial process (the ``target`` of its ``Process``)."""
    _guard(boot.parent_pid if boot.check_ppid else None)
    os.environ.update(boot.env)
    hook = _OnImport.install()
    fn = None
    prelog: int | None = None
    if boot.standby:  # import the user's module while the slot's trial still runs
        prelog = _redirect_to_nameless()
        fn = _load(boot.target.load, conn.send)
        if fn is None:
            return
        conn.send(("ready", None))
    try:
        spec: TrialSpec = conn.recv()
    except EOFError:  # a standby the sweep no longer needs
        return
    started = time.monotonic()
    _redirect_output(spec, prelog)
    os.environ.update(spec.env)
    hook.set_seed(spec.seed)  # before the module loads (unless a standby loaded it already)
    if fn is None:
        fn = _load(boot.target.load, conn.send)
        if fn is None:
            return
    context._start_reporting(conn.send)
    message = run_trial(spec, fn, hook, started)
    context._stop_reporting()  # its last batch goes before the result
    _write_json(os.path.join(spec.dir, "result.json"), {"trial_id": spec.trial_id, **message})
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.send(("result", message))
    except OSError:  # the parent is gone; the watcher will end us
        pass
    conn.close()
    _exit_now()


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


def ray_main(spec: TrialSpec, target: Any, env: dict[str, str], channel: Any) -> dict[str, Any]:
    """Entry point of a trial as a Ray task (a fresh Ray worker process, ``max_calls=1``).

    The same bootstrap as :func:`main` minus what Ray does itself (placing the task,
    setting ``CUDA_VISIBLE_DEVICES``, ending the process): environment, caps, seeds, output
    into a log, reports through ``channel`` (a Ray queue) instead of a pipe. The trial's
    folder and log are on this node, so the log comes back in the return value and the
    driver appends it to the trial's ``log.txt``.
    """
    import tempfile

    os.environ.update(env)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    limit = _limit_mb_here(gpus)
    if limit is not None:
        os.environ["SWEEPER_MEMORY_LIMIT_MB"] = str(limit)
    folder = tempfile.mkdtemp(prefix=f"sweeper-{spec.trial_id}-")
    device = f"gpu:{gpus}" if gpus and not gpus.startswith("-") else "cpu"
    spec = replace(spec, dir=folder, device=device)
    os.environ.update({**spec.env, "SWEEPER_TRIAL_DIR": folder})
    channel.put((spec.trial_id, "placed", {"pid": os.getpid(), "device": device, "t": time.time()}))
    _redirect_output(spec)
    started = time.monotonic()
    hook = _OnImport.install()
    hook.set_seed(spec.seed)
    failed: list[Any] = []
    fn = _load(target.load if hasattr(target, "load") else (lambda: target), failed.append)
    if fn is None:
        return {"load_error": failed[0][1], "log": _read(spec.log_path)}
    context._start_reporting(lambda message: channel.put((spec.trial_id, *message)))
    real_exit = os._exit

    def exit_and_tell(code: int) -> NoReturn:  # Ray says only "the worker died": say how
        with contextlib.suppress(Exception):
            channel.put((spec.trial_id, "exit", int(code)), timeout=5)
        real_exit(code)

    os._exit = exit_and_tell  # type: ignore[assignment]
    try:
        message = run_trial(spec, fn, hook, started)
    finally:
        os._exit = real_exit
    context._stop_reporting()
    sys.stdout.flush()
    sys.stderr.flush()
    return {"message": message, "log": _read(spec.log_path), "pid": os.getpid(), "device": device,
            "cap_mb": limit}


def _limit_mb_here(gpus: str) -> int | None:
    """The cap in MB for the GPU Ray gave this task: the fraction times its size, from NVML."""
    fraction = os.environ.get("SWEEPER_MEMORY_FRACTION")
    if not fraction or not gpus or gpus.startswith("-"):
        return None
    from .gpus import inventory

    first = gpus.split(",")[0]
    for gpu in inventory():
        if first in (str(gpu.index), gpu.uuid):
            return int(float(fraction) * gpu.total_mb)
    return None


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def setup() -> dict[str, Any]:
    """For a script run as a command trial: apply what sweeper chose, from the environment.

    Caps GPU memory (``SWEEPER_MEMORY_LIMIT_MB`` and friends; TensorFlow's cap needs this
    call, JAX reads its variable by itself) and seeds ``random``, NumPy, TensorFlow, Keras
    and PyTorch with ``SWEEPER_SEED``, for the frameworks imported now and those imported
    later. Returns the trial's parameters (``SWEEPER_PARAMS``); outside a sweep, ``{}``::

        import sweeper.worker
        sweeper.worker.setup()
    """
    hook = _OnImport.install()
    seed = os.environ.get("SWEEPER_SEED")
    if seed is not None:
        hook.set_seed(int(seed))
    return json.loads(os.environ.get("SWEEPER_PARAMS", "{}"))


def _load(load: Callable[[], Callable[..., Any]], send: Callable[[Any], Any]) -> Callable[..., Any] | None:
    """``train``, or None after telling the parent why it cannot be imported: that is the
    sweep's problem (every trial would fail alike), not one trial's."""
    try:
        return load()
    except BaseException as exc:  # noqa: BLE001
        traceback.print_exc()
        send(("load_error", _last_line(exc)))
        return None


def run_trial(spec: TrialSpec, fn: Callable[..., Any], hook: "_OnImport", started: float) -> dict[str, Any]:
    """Run ``train`` (loaded and seeded already) and describe the outcome as a plain message.

    ``duration_s`` is measured here, from ``started`` (the trial reached this process) to
    the end of ``train``: the trial's own time, whatever the parent was doing meanwhile.
    """
    context._set(spec)
    try:
        message = _outcome(spec, fn, hook)
    finally:
        context._set(None)
    message["duration_s"] = time.monotonic() - started
    return message


def _outcome(spec: TrialSpec, fn: Callable[..., Any], hook: "_OnImport") -> dict[str, Any]:
    try:
        hook.catch_up()
        context._announce_start()  # the parent may now start this slot's next process
        value = fn(dict(spec.params))
        return {"status": Status.OK.value, "metrics": normalise(value), "error": "",
                "history": epochs_of(value)}
    except BadResult as exc:
        print(f"sweeper: {exc}", file=sys.stderr)
        return {"status": Status.ERROR.value, "metrics": {}, "error": str(exc)}
    except TrialFailed as exc:
        print(f"sweeper: {exc}", file=sys.stderr)
        return {"status": Status(exc.status).value, "metrics": {}, "error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
        traceback.print_exc()
        line = _last_line(exc)
        status = Status.OOM if is_oom(exc) else Status.ERROR
        return {"status": status.value, "metrics": {}, "error": line}


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[-1]


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
    # The parent started us with SIGINT ignored (Ctrl-C is its to handle); now that no
    # terminal's Ctrl-C reaches our group, give the trial Python's usual behaviour back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, _kill_own_group)
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


def _redirect_to_nameless() -> int:
    """Point fds 1 and 2 at a file without a name (a standby's output until its trial
    comes, gone with the process however it ends); returns a descriptor to read it back."""
    import tempfile

    with tempfile.TemporaryFile() as f:
        keep = os.dup(f.fileno())
        _redirect_fds(os.dup(f.fileno()))
    return keep


def _redirect_output(spec: TrialSpec, prelog: int | None = None) -> None:
    """Point output at the trial's log, after a header and what a standby printed so far."""
    os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
    _redirect_fds(os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(
        f"{LOG_HEADER} trial {spec.name} (id {spec.trial_id}) attempt {spec.attempt}, "
        f"pid {os.getpid()}, device {spec.device}, seed {spec.seed}, {stamp}Z ===",
        flush=True,
    )
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


def _write_json(path: str, data: dict[str, Any]) -> None:
    """Write a file that readers see whole or not at all (the ledger, not this file, is
    what makes a result durable, so no fsync here)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the parent's ledger still gets the result
        print(f"sweeper: could not write {path} ({exc.strerror})", file=sys.stderr)
        with contextlib.suppress(OSError):
            os.remove(tmp)


# -- seeds and caps, the moment a framework is imported -----------------------------------


def _cap_tensorflow(mod: Any) -> None:
    capping.apply_tensorflow(mod)


def _cap_torch(mod: Any) -> None:
    capping.apply_torch(mod)


def _seed_numpy(mod: Any, seed: int) -> None:
    mod.random.seed(seed)


def _seed_tensorflow(mod: Any, seed: int) -> None:
    mod.random.set_seed(seed)


def _seed_keras(mod: Any, seed: int) -> None:
    mod.utils.set_random_seed(seed)


def _seed_torch(mod: Any, seed: int) -> None:
    mod.manual_seed(seed)


#: Caps come first: they must precede anything that touches the GPU.
_CAPS: dict[str, Callable[[Any], None]] = {"tensorflow": _cap_tensorflow, "torch": _cap_torch}
_SEEDS: dict[str, Callable[[Any, int], None]] = {
    "numpy": _seed_numpy,
    "tensorflow": _seed_tensorflow,
    "keras": _seed_keras,
    "torch": _seed_torch,
}


class _OnImport(importlib.abc.MetaPathFinder):
    """Caps and seeds each framework now if imported, else right after its import.

    Installed before the user's module is imported (so a cap precedes the module's own
    code); the seed comes later, with the trial (a standby imports before it has one).
    """

    current: "_OnImport | None" = None

    def __init__(self) -> None:
        self.seed: int | None = None
        self.done: set[str] = set()
        self._busy = False

    @classmethod
    def install(cls) -> "_OnImport":
        if cls.current is None:
            cls.current = cls()
            sys.meta_path.insert(0, cls.current)
            cls.current.catch_up()
        return cls.current

    def set_seed(self, seed: int) -> None:
        """Seed ``random`` and every framework imported so far; later ones on import."""
        self.seed = seed
        random.seed(seed)
        for name, seeder in _SEEDS.items():
            if name in self.done:
                seeder(sys.modules[name], seed)
        self.catch_up()

    def catch_up(self) -> None:
        """Handle what got imported before the hook, or past it (e.g. by a custom loader)."""
        for name in sorted(set(_SEEDS) - self.done):
            if name in sys.modules:
                self._ready(name, sys.modules[name])

    def _ready(self, name: str, module: Any) -> None:
        self.done.add(name)
        if name in _CAPS:
            _CAPS[name](module)
        if self.seed is not None:
            _SEEDS[name](module, self.seed)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _SEEDS or fullname in self.done or self._busy:
            return None
        self._busy = True  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        inner, hook = spec.loader, self

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return inner.create_module(spec)

            def exec_module(self, module: Any) -> None:
                inner.exec_module(module)
                if fullname not in hook.done:  # a probe (find_spec alone) does not count
                    hook._ready(fullname, module)

            def __getattr__(self, name: str) -> Any:  # resources, is_package, get_code...
                return getattr(inner, name)

        spec.loader = Loader()
        return spec
