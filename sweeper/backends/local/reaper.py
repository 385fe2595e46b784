"""The sweep's reaper: nothing a trial started outlives it, and no orphan of it stays a
zombie of the sweep.

While trials run this process is a child subreaper (:func:`sweeper.system.procs.subreaper`): an
orphan a trial leaves (a daemon, a double fork) comes back to it, not to init, and is
told apart by the sweep's tag and its slot in its environment, read from ``/proc``
(:func:`sweeper.system.procs.strays`). Signalling a trial signals its process group, everything
below it, and its slot's adopted orphans; those that have died are reaped as trials end,
and every one is killed and reaped when the sweep ends. This process's own children that
are sweeper's (workers, standbys, multiprocessing's helpers) are never taken for strays,
nor are the children the caller had before the sweep.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
from typing import Callable, Iterable

from sweeper.backends.local.internals import mp_helpers
from sweeper.backends.local.process import REAP_WAIT_S, Proc
from sweeper.system import procs


class Reaper:
    """Orphans of one sweep's trials, from ``open`` to ``close``; ``workers`` says which of
    this process's children are the sweep's own worker processes (running or standing by)."""

    def __init__(self, tag: str, workers: Callable[[], Iterable[int]]) -> None:
        self.tags = {tag}
        self.workers = workers
        self.adopted: set[int] = set()  #: orphans of trials, come back to this subreaper
        self.before: set[int] = set()
        self.subreaper: contextlib.ExitStack | None = None

    def open(self) -> None:
        self.before = set(procs.children(os.getpid()))  # the caller's own children: never ours
        self.subreaper = contextlib.ExitStack()
        self.subreaper.enter_context(procs.subreaper())  # until every trial's orphans are reaped

    def close(self) -> None:
        if self.subreaper is not None:
            self.subreaper.close()

    def signal(self, p: Proc, sig: int) -> None:
        """Signal a trial's process group, everything below it, and its slot's adopted orphans."""
        procs.kill_group_and_tree(p.process.pid, sig)
        strays = procs.strays(self.tags, p.slot.index, self.known())
        self.adopted.update(strays)
        procs.signal_all(strays, sig)

    def known(self) -> set[int]:
        """This process's own children that are sweeper's workers or helpers, never strays."""
        return set(self.workers()) | mp_helpers()

    def reap(self, final: bool = False) -> None:
        """Collect adopted orphans that have died, so none stays a zombie of the sweep: those
        it killed, and any other child that came to it while trials ran (an orphan that
        shed the sweep's tag) once it has exited."""
        if final:  # the sweep ends: nothing a trial started may outlive it
            strays = procs.strays(self.tags, None, self.known())
            self.adopted.update(strays)
            procs.signal_all(strays, signal.SIGKILL)
        came = set(procs.children(os.getpid())) - self.before - self.known()
        self.adopted |= set(procs.zombies(came))
        self.adopted = procs.reap(self.adopted, wait=REAP_WAIT_S if final else 0.0)


def orphan_exit(p: Proc, server_dead: bool) -> int | None:
    """A fork's exit code comes through the fork server; once the server is dead
    (``server_dead``), its forks are this subreaper's children, and their own exit code is
    read here (else multiprocessing would say 255)."""
    if not p.forked or not server_dead:
        return None
    if not multiprocessing.connection.wait([p.exit_fd], REAP_WAIT_S):
        return None
    try:
        done, status = os.waitpid(p.process.pid, os.WNOHANG)
    except ChildProcessError:  # not adopted (no subreaper here)
        return None
    return os.waitstatus_to_exitcode(status) if done else None
