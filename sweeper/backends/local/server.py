"""The fork server of one sweep: the user's module imported once, each trial a fresh fork.

multiprocessing's ``forkserver`` does the forking; this adds what makes it fit a sweep:

* it is started with **no GPU visible** (``CUDA_VISIBLE_DEVICES=-1``) and the sweep's tag,
  and imports the *installed* modules ``train``'s module needs (:mod:`sweeper.child.preload`,
  :mod:`sweeper.system.modules`), never the user's module itself: each trial runs that, so what
  its top level makes (random generators, ids, threads, connections) is the trial's own,
  as under spawn; a trial forks with its framework imported and pins its own GPU before
  the framework looks at one;
* on a GPU machine it is **proven on a card before it is trusted there**: its probe fork
  (:func:`sweeper.child.preload.probe`) pins the sweep's first card, caps each framework
  the server loaded as a trial's is capped, allocates, computes and frees a little memory
  there; then NVML must list no process of the server's on any card (:meth:`ForkServer._held`).
  A hang, an error, a framework blind to the card in a fork, or a context left: spawn;
* it says when its import is done, **without blocking the sweep**: the preload writes
  ``ok`` (or why not) into a FIFO whose read end the sweep's loop waits on beside the
  trials' pipes; its death is seen through a pidfd. Until then trials wait for it or
  start as spawn processes (:mod:`sweeper.backends.local.fork`), never on a blocked loop;
* it is **one per sweep**, stopped when the sweep ends, so a later sweep in the same
  process imports its own module, not the first one's.

Forking a process that has threads is safe only while none of them holds a lock the child
needs; the local backend's watchdog (``FORK_WATCHDOG_S``, :mod:`sweeper.backends.local.fork`)
catches a forked trial that does not reach ``train`` and runs it again under spawn.
multiprocessing's private names it needs are in :mod:`sweeper.backends.local.internals`.
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

from sweeper.backends.local.internals import MpForkServer, own_mp_temp, restore_mp_temp
from sweeper.backends.local.process import sigint_held, tracker_started
from sweeper.model import contract
from sweeper.system import procs

#: One fork server per process (multiprocessing keeps one): a second sweep running at the
#: same time in this process (another thread) uses spawn.
_IN_USE = threading.Lock()
#: A sweep's temporary folder (its FIFO, the server's socket): ``<prefix><pid>-<random>``,
#: so a later sweep removes the folders of sweeps that were killed (:func:`clean_temp`).
TEMP_PREFIX = "sweeper-forkserver-"


def _temp_base() -> str:
    """The temporary folder, unless its path is too long for the server's socket in it
    (AF_UNIX paths end at 107 bytes): then /tmp, as Python 3.12's multiprocessing does."""
    base = tempfile.gettempdir()
    return base if len(base) + len(f"/{TEMP_PREFIX}4194304-12345678/listener-12345678") < 100 else "/tmp"


def clean_temp() -> None:
    """Remove the temporary folders that sweeps killed before they could clean up left
    (their pid is gone). A folder of a live process is left alone."""
    import glob

    for folder in glob.glob(os.path.join(_temp_base(), f"{TEMP_PREFIX}*-*")):
        pid = os.path.basename(folder)[len(TEMP_PREFIX):].split("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # another user's live process
            continue


class ForkServer:
    """Starting, ready, failed or dead; ``fd`` becomes readable when its import has ended."""

    def __init__(self, ctx: Any, preload: list[str], tag: str, env: dict[str, str],
                 probe_gpu: dict[str, str] | None = None) -> None:
        self.state = "starting"
        self.preload = list(preload)  #: the candidates it was given (it imports the installed ones)
        self.tag = tag
        self.env = dict(env)  #: what it started with: a sweep whose slots want other values starts its own
        #: a GPU slot's environment, for the probe fork to pin its card (None on the CPU)
        self.probe_gpu = probe_gpu
        self.why = ""  #: why it cannot be used ("failed")
        self.started = time.monotonic()
        self.import_s: float | None = None  #: how long its import took
        self._server = MpForkServer()
        self._owned = _IN_USE.acquire(blocking=False)
        clean_temp()
        self._dir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=_temp_base())
        fifo = os.path.join(self._dir, "ready")
        os.mkfifo(fifo, 0o600)
        # O_RDWR: the FIFO never reads as ended (no writer yet is not EOF); only data wakes us
        self.fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.exit_fd: int | None = None
        self._mp_temp: str | None = None
        if not self._owned or self._server.pid is not None:
            self._fail("another sweep in this process is using the fork server")
            return
        listing = os.path.join(self._dir, "modules")
        with open(listing, "w") as f:
            f.write("\n".join(preload))
        import sys

        server_env = {**env, "CUDA_VISIBLE_DEVICES": "-1", contract.SWEEP: tag, contract.PRELOAD_READY: fifo,
                      contract.SLOT: procs.SLOT_PLACEHOLDER, contract.PRELOAD_LIST: listing,
                      contract.PRELOAD_PATH: os.pathsep.join(p for p in sys.path if p)}
        if probe_gpu is not None:
            import json

            server_env[contract.PRELOAD_PROBE_GPU] = json.dumps(probe_gpu)
        # never the user's module (not even a script run as __main__: each fork imports it)
        ctx.set_forkserver_preload(["sweeper.child.preload"])
        self._mp_temp = own_mp_temp(self._dir)
        tracker_started()
        try:  # SIGINT blocked from its first line: Ctrl-C is the sweep's (preload ignores it, then unblocks)
            with procs.environ(server_env), sigint_held():
                self._server.ensure_running()
        except OSError as exc:
            self._fail(f"the fork server could not start ({exc})")
            return
        started: Any = self._server.pid
        try:
            self.exit_fd = os.pidfd_open(started)
        except (AttributeError, OSError, TypeError):  # not Linux >= 5.3: a dead server is not seen
            self.exit_fd = None

    def fits(self, env: dict[str, str], probe_gpu: dict[str, str] | None) -> bool:
        """Whether a sweep whose slots give this environment may use it."""
        return self.env == env and self.probe_gpu == probe_gpu

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._owned else None

    def serving(self) -> bool:
        """Ready and alive now: its pidfd says it has not ended. A fork asked of a server that
        died since the sweep last looked would make multiprocessing reap it (its cause of death
        then lost) and start a fresh server of its own in its place."""
        import select

        if self.state != "ready":
            return False
        return self.exit_fd is None or not select.select([self.exit_fd], [], [], 0)[0]

    def waits(self) -> list[int]:
        """Descriptors for the sweep's loop: its import's end while it starts, its death
        while it starts or serves."""
        fds = [self.fd] if self.state == "starting" else []
        if self.state in ("starting", "ready") and self.exit_fd is not None:
            fds.append(self.exit_fd)
        return fds

    def check(self, ready: set[Any]) -> bool:
        """Read what it said, if anything, or see it died; True when its state changed now."""
        if self.state == "ready" and self.exit_fd is not None and self.exit_fd in ready:
            self.state, self.why = "dead", f"the fork server (pid {self.pid}) died{self._how()}"
            return True
        if self.state != "starting":
            return False
        if self.fd in ready:
            try:
                said = os.read(self.fd, 4096).decode(errors="replace").strip()
            except BlockingIOError:
                said = ""
            if said == "ok":
                held = self._held() if self.probe_gpu is not None else ""
                if held:
                    self._fail(f"the fork server cannot be used: {held}")
                    return True
                self.state, self.import_s = "ready", time.monotonic() - self.started
                return True
            if said:
                self._fail(f"the fork server cannot be used: {said}")
                return True
        if self.exit_fd is not None and self.exit_fd in ready:
            self._fail("the fork server died while it imported train's module")
            return True
        return False

    def settle(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until its import has ended; whether it is ready to
        fork. For the CLI's grid reader, which then forks from it."""
        import select

        deadline = time.monotonic() + timeout
        while self.state == "starting":
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select(self.waits(), [], [], left)
            self.check(set(ready))
        return self.state == "ready"

    def fail(self, why: str) -> None:
        """Not to be forked from any more (a fork of it did not get on): why, said once by the sweep."""
        if self.state in ("starting", "ready"):
            self._fail(why)

    def _held(self) -> str:
        """After the probe said ok on a GPU machine: what NVML lists on a card from the
        server (itself, or a process it forked that is no trial's: the slot placeholder
        still in its environment), or "". Such memory is a CUDA context made before a fork,
        which no fork can use, or one the probe left behind."""
        from sweeper.system import gpus

        for gpu in gpus.inventory():
            for pid, mb in gpu.processes:
                tags = procs.tags(pid)  # {} once gone
                if tags.get(contract.SWEEP) != self.tag or tags.get(contract.SLOT) != procs.SLOT_PLACEHOLDER:
                    continue
                who = "the fork server" if pid == self.pid else f"a process the fork server left (pid {pid})"
                held = "memory" if mb is None else f"{mb} MB"
                return (f"{who} holds {held} on gpu:{gpu.index} after its probe (CUDA was initialised "
                        "before the fork, which forks cannot share)")
        return ""

    def _fail(self, why: str) -> None:
        self.state, self.why = "failed", why

    def _how(self) -> str:
        """How the (dead) server ended, as its parent can tell: " (killed by SIGKILL)"."""
        pid = self.pid
        if pid is None:
            return ""
        deadline = time.monotonic() + 1.0  # its pidfd said it ended: reapable at once, or all but
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return ""
            if done or time.monotonic() >= deadline:
                break
            time.sleep(0.01)  # a process of many threads is reapable once its last thread is gone
        if not done:
            return ""
        self._server.forget()  # reaped here: multiprocessing must not wait for it
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            name = signal.Signals(-code).name
            return f" (killed by {name}{': the kernel OOM killer?' if name == 'SIGKILL' else ''})"
        return f" (exit code {code})"

    def stop(self) -> None:
        """End it (and its import, if still going) with the sweep. Once: later calls do nothing."""
        if self.fd == -1:
            return
        try:
            pid = self._server.pid
            if self._owned and pid is not None:
                # killed, not asked: mid-import it would not notice, and it waits for every
                # holder of its lifeline (each fork has one) before it leaves
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError, AttributeError):
                    self._server.stop()  # closes the lifeline, reaps it
                if self._server.pid is not None:  # its stop gave up midway (reaped already)
                    self._server.forget()
            elif self._owned and self._server.alive_fd is not None:  # reaped by _how
                self._server.forget()
        finally:
            for fd in (self.fd, self.exit_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self.fd, self.exit_fd = -1, None
            restore_mp_temp(self._mp_temp)
            shutil.rmtree(self._dir, ignore_errors=True)
            if self._owned:
                self._owned = False
                _IN_USE.release()
