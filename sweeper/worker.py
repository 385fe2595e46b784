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
from dataclasses import dataclass, field
from typing import Any, Callable

from . import capping, context
from .metrics import BadResult, is_oom, normalise
from .target import Target
from .trial import Status, TrialSpec

_PR_SET_PDEATHSIG = 1
LOG_HEADER = "=== sweeper:"  #: starts the line the worker writes at the top of each attempt


@dataclass(frozen=True)
class Boot:
    """What a worker process is started with, before it knows its trial."""

    parent_pid: int
    target: Target
    env: dict[str, str] = field(default_factory=dict)


def main(conn: multiprocessing.connection.Connection, boot: Boot) -> None:
    """Entry point of a trial process (the ``target`` of its ``Process``)."""
    _guard(boot.parent_pid)
    os.environ.update(boot.env)
    spec: TrialSpec = conn.recv()
    _redirect_output(spec)
    os.environ.update(spec.env)
    message = run_trial(spec, boot.target.load)
    _write_json(os.path.join(spec.dir, "result.json"), {"trial_id": spec.trial_id, **message})
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.send(("result", message))
    except OSError:  # the parent is gone; the watcher will end us
        pass
    conn.close()


def run_trial(spec: TrialSpec, load: Callable[[], Callable[..., Any]]) -> dict[str, Any]:
    """Load ``train``, seed, run it, and describe the outcome as a plain message."""
    context._set(spec)
    try:
        _OnImport.install(spec.seed)
        fn = load()
        if _OnImport.current is not None:
            _OnImport.current.catch_up()
        value = fn(dict(spec.params))
        return {"status": Status.OK.value, "metrics": normalise(value), "error": ""}
    except BadResult as exc:
        print(f"sweeper: {exc}", file=sys.stderr)
        return {"status": Status.ERROR.value, "metrics": {}, "error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
        traceback.print_exc()
        line = traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[-1]
        status = Status.OOM if is_oom(exc) else Status.ERROR
        return {"status": status.value, "metrics": {}, "error": line}
    finally:
        context._set(None)


# -- staying with the parent -------------------------------------------------------------


def _kill_own_group(*_: Any) -> None:
    """End this trial and everything it started, at once."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)


def _guard(parent_pid: int) -> None:
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
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        _kill_own_group()
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        sentinel = parent.sentinel

        def watch() -> None:
            multiprocessing.connection.wait([sentinel])
            _kill_own_group()

        threading.Thread(target=watch, name="sweeper-parent-watch", daemon=True).start()


# -- logs ----------------------------------------------------------------------------------


def _redirect_output(spec: TrialSpec) -> None:
    """Send fds 1 and 2 (Python's and native code's output) to the trial's log."""
    os.makedirs(spec.dir, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(
        f"{LOG_HEADER} trial {spec.name} (id {spec.trial_id}) attempt {spec.attempt}, "
        f"pid {os.getpid()}, device {spec.device}, seed {spec.seed}, {stamp}Z ===",
        flush=True,
    )


def _write_json(path: str, data: dict[str, Any]) -> None:
    """Write a file that readers see whole or not at all."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- seeds and caps, the moment a framework is imported -----------------------------------


def _numpy_ready(mod: Any, seed: int) -> None:
    mod.random.seed(seed)


def _tensorflow_ready(mod: Any, seed: int) -> None:
    capping.apply_tensorflow(mod)  # first: it must come before anything touches the GPU
    mod.random.set_seed(seed)


def _keras_ready(mod: Any, seed: int) -> None:
    mod.utils.set_random_seed(seed)


def _torch_ready(mod: Any, seed: int) -> None:
    capping.apply_torch(mod)
    mod.manual_seed(seed)


_ON_IMPORT: dict[str, Callable[[Any, int], None]] = {
    "numpy": _numpy_ready,
    "tensorflow": _tensorflow_ready,
    "keras": _keras_ready,
    "torch": _torch_ready,
}


class _OnImport(importlib.abc.MetaPathFinder):
    """Seeds (and caps) each framework now if imported, else right after its import."""

    current: "_OnImport | None" = None

    def __init__(self, seed: int, pending: set[str]) -> None:
        self.seed = seed
        self.pending = pending
        self._busy = False

    @classmethod
    def install(cls, seed: int) -> None:
        random.seed(seed)
        pending = set()
        for name, ready in _ON_IMPORT.items():
            if name in sys.modules:
                ready(sys.modules[name], seed)
            else:
                pending.add(name)
        if pending:
            cls.current = cls(seed, pending)
            sys.meta_path.insert(0, cls.current)

    def catch_up(self) -> None:
        """Seed and cap what got imported past the hook (e.g. by a custom loader)."""
        for name in sorted(self.pending):
            if name in sys.modules:
                self.pending.discard(name)
                _ON_IMPORT[name](sys.modules[name], self.seed)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.pending or self._busy:
            return None
        self._busy = True  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        inner, seed, ready, pending = spec.loader, self.seed, _ON_IMPORT[fullname], self.pending

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return inner.create_module(spec)

            def exec_module(self, module: Any) -> None:
                inner.exec_module(module)
                if fullname in pending:  # a probe (find_spec alone) does not count
                    pending.discard(fullname)
                    ready(module, seed)

            def __getattr__(self, name: str) -> Any:  # resources, is_package, get_code...
                return getattr(inner, name)

        spec.loader = Loader()
        return spec
