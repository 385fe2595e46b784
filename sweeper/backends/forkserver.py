"""The fork server of one sweep: the user's module imported once, each trial a fresh fork.

multiprocessing's ``forkserver`` does the forking; this adds what makes it fit a sweep:

* it is started with **no GPU visible** (``CUDA_VISIBLE_DEVICES=-1``) and the sweep's tag,
  and imports ``train``'s module (:mod:`sweeper._preload`), so a trial forks with its
  framework imported and pins its own GPU before the framework looks at one;
* it says when its import is done, **without blocking the sweep**: the preload writes
  ``ok`` (or why not) into a FIFO whose read end the sweep's loop waits on beside the
  trials' pipes; its death is seen through a pidfd. Until then trials wait for it or
  start as spawn processes (:mod:`sweeper.backends.local`), never on a blocked loop;
* it is **one per sweep**, stopped when the sweep ends, so a later sweep in the same
  process imports its own module, not the first one's.

Forking a process that has threads is safe only while none of them holds a lock the child
needs; the local backend's watchdog (``FORK_WATCHDOG_S``) catches a forked trial that
does not reach ``train`` and runs it again under spawn.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Any

from .. import procs
from ..target import FileTarget, Target

#: One fork server per process (multiprocessing keeps one): a second sweep running at the
#: same time in this process (another thread) uses spawn.
_IN_USE = threading.Lock()


class ForkServer:
    """Starting, ready or failed; ``fd`` becomes readable when its import has ended."""

    def __init__(self, ctx: Any, target: Target, tag: str, env: dict[str, str]) -> None:
        import multiprocessing.forkserver

        self.state = "starting"
        self.why = ""  #: why it cannot be used ("failed")
        self.started = time.monotonic()
        self.import_s: float | None = None  #: how long its import took
        self._server: Any = getattr(multiprocessing.forkserver, "_forkserver")  # its pid and _stop: private
        self._owned = _IN_USE.acquire(blocking=False)
        self._dir = tempfile.mkdtemp(prefix="sweeper-forkserver-")
        fifo = os.path.join(self._dir, "ready")
        os.mkfifo(fifo, 0o600)
        # O_RDWR: the FIFO never reads as ended (no writer yet is not EOF); only data wakes us
        self.fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.exit_fd: int | None = None
        if not self._owned or self._server._forkserver_pid is not None:
            self._fail("another sweep in this process is using the fork server")
            return
        preload = ["sweeper._preload"]
        import sys

        server_env = {**env, "CUDA_VISIBLE_DEVICES": "-1", procs.SWEEP_VAR: tag, "SWEEPER_PRELOAD_READY": fifo,
                      "SWEEPER_PRELOAD_PATH": os.pathsep.join(p for p in sys.path if p)}
        if isinstance(target, FileTarget):
            server_env["SWEEPER_PRELOAD_FILE"] = target.path
        elif target.module == "__main__":
            preload = ["__main__", *preload]  # multiprocessing imports the script as __mp_main__
        elif target.module:
            server_env["SWEEPER_PRELOAD_MODULE"] = target.module
        ctx.set_forkserver_preload(preload)
        from .local import environ

        try:
            with environ(server_env):
                self._server.ensure_running()
        except OSError as exc:
            self._fail(f"the fork server could not start ({exc})")
            return
        started: Any = self._server._forkserver_pid
        try:
            self.exit_fd = os.pidfd_open(started)
        except (AttributeError, OSError, TypeError):  # not Linux >= 5.3: a dead server is not seen
            self.exit_fd = None

    @property
    def pid(self) -> int | None:
        pid: int | None = self._server._forkserver_pid if self._owned else None
        return pid

    def waits(self) -> list[int]:
        """Descriptors for the sweep's loop while it starts."""
        if self.state != "starting":
            return []
        return [self.fd] + ([self.exit_fd] if self.exit_fd is not None else [])

    def check(self, ready: set[Any]) -> bool:
        """Read what it said, if anything; True when its state changed now."""
        if self.state != "starting":
            return False
        if self.fd in ready:
            try:
                said = os.read(self.fd, 4096).decode(errors="replace").strip()
            except BlockingIOError:
                said = ""
            if said == "ok":
                self.state, self.import_s = "ready", time.monotonic() - self.started
                return True
            if said:
                self._fail(f"the fork server cannot be used: {said}")
                return True
        if self.exit_fd is not None and self.exit_fd in ready:
            self._fail("the fork server died while it imported train's module")
            return True
        return False

    def _fail(self, why: str) -> None:
        self.state, self.why = "failed", why

    def stop(self) -> None:
        """End it (and its import, if still going) with the sweep."""
        try:
            if self._owned and self._server._forkserver_pid is not None:
                # killed, not asked: mid-import it would not notice, and it waits for every
                # holder of its lifeline (each fork has one) before it leaves
                with contextlib.suppress(OSError):
                    os.kill(self._server._forkserver_pid, signal.SIGKILL)
                with contextlib.suppress(OSError, AttributeError):
                    self._server._stop()  # closes the lifeline, reaps it
                if self._server._forkserver_pid is not None:  # _stop gave up midway (reaped already)
                    with contextlib.suppress(OSError, TypeError):
                        os.close(self._server._forkserver_alive_fd)
                    self._server._forkserver_pid = self._server._forkserver_alive_fd = None
                    self._server._forkserver_address = None
        finally:
            for fd in (self.fd, self.exit_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self.fd, self.exit_fd = -1, None
            shutil.rmtree(self._dir, ignore_errors=True)
            if self._owned:
                self._owned = False
                _IN_USE.release()
