"""A trial's process as the local backend holds it (:class:`Proc`), and what every worker
process of the sweep needs: its exit seen through a pidfd (:func:`exit_fd`), its reaping
without waiting on a sentinel a daemon may hold (:func:`join`), a start that a Ctrl-C
cannot cut short (:func:`sigint_held`), and the
reading of what a trial sends over its pipe (:func:`receive`).
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from sweeper.errors import SweepError
from sweeper.model import outcome
from sweeper.model.protocol import Event, Result, TrainStarted
from sweeper.model.trial import TrialSpec
from sweeper.placement.slots import Slot

#: Seconds a process is waited for once it was killed (SIGKILL) or has exited, to reap it
#: and what it left. (Not the engine's ``TERM_GRACE``, which is how long a trial asked to
#: stop, SIGTERM, has before it is killed; both are 5 s.)
REAP_WAIT_S = 5.0


@dataclass
class Proc:
    """A trial's process."""

    spec: TrialSpec
    slot: Slot
    process: Any
    conn: multiprocessing.connection.Connection | None
    exit_fd: int
    forked: bool = False
    handed: float = field(default_factory=time.monotonic)  #: when it was sent its trial
    watch_at: float = 0.0  #: a fork: when the watchdog looks at it next (if not in train yet)
    cpu_s: float = 0.0  #: a fork: the CPU time it had used when the watchdog last looked
    io: int | None = None  #: a fork: the bytes it had read and written then
    fn_started: bool = False  #: its train() has begun (its imports are done)
    has_result: bool = False
    cancelled: bool = False
    oom_kills: int | None = None  #: the cgroup's OOM-kill count when it was handed its trial


def receive(p: Proc) -> list[tuple[str, Event]]:
    """Every message waiting in a trial's pipe."""
    assert p.conn is not None
    tid = p.spec.trial_id
    events: list[tuple[str, Event]] = []
    try:
        while p.conn.poll():
            try:
                message = p.conn.recv()
            except (EOFError, OSError):
                raise
            except Exception as exc:  # noqa: BLE001 - a message the parent cannot read back
                message = outcome.unreadable(exc)
            if isinstance(message, TrainStarted):
                p.fn_started = True
            elif isinstance(message, Result):
                if p.has_result:
                    continue
                p.has_result = True
            events.append((tid, message))
    except (EOFError, OSError):
        p.conn.close()
        p.conn = None
    return events


def no_main_guard() -> SweepError:
    """A trial process re-ran the caller's ``sweep()``: the script lacks its main guard."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or "the calling script"
    return SweepError(
        f"{main} calls sweep() at its top level, so every trial process, which re-imports it, "
        "calls it again; put the call under if __name__ == \"__main__\": (finished trials are kept)"
    )


def join(process: Any, exit_fd: int, timeout: float) -> bool:
    """Reap a process once its exit descriptor says it has exited (at most ``timeout`` s).

    ``Process.join(timeout)`` would wait on the sentinel, which a daemon the trial left
    behind may hold open: seconds lost per trial. A pidfd says the truth; then ``join()``
    only collects the exit status.
    """
    if process.exitcode is None and not multiprocessing.connection.wait([exit_fd], timeout):
        return False
    process.join()
    return True


def exit_fd(process: Any) -> int:
    """A descriptor readable once the process has exited.

    A pidfd, not the process's sentinel: the sentinel stays open in any grandchild
    that inherited it (``os.fork``), so it would say nothing while one of those lives.
    """
    try:
        return os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3
        fd: int = process.sentinel
        return fd


def tracker_started() -> None:
    """Start multiprocessing's resource tracker now, before :func:`sigint_held`: started on
    first need inside the window, it unblocks SIGINT after its own start, and the child
    then started has Python's start-up open to a Ctrl-C (a fork server printed half a
    traceback under the sweep's one line)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Start a child with SIGINT blocked, so a Ctrl-C during its bootstrap (before it leads
    its own process group) reaches only the parent, which then stops it properly: the child
    inherits the blocked signal through fork and exec, and its bootstrap ignores SIGINT
    (which drops one that came meanwhile) before it unblocks it
    (:func:`sweeper.child.bootstrap._guard`).

    Only this thread's mask changes, never the process's handler: a Ctrl-C that lands on
    this thread meanwhile is pending until the window closes, and one that lands on another
    thread (a user's, a library's) is handled as ever. (The handler was set to SIG_IGN here
    before, for the whole process: a Ctrl-C another thread received in this window was
    lost, and the sweep ran on; found by bench/search.py, whose budget watcher is a thread.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
