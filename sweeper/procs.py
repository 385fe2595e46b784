"""Finding everything a trial started, so that none of it outlives the trial.

A trial leads its own process group, and killing the group ends what stayed in it. A
daemon escapes the group: it double-forks and calls ``setsid``, and its parent exits, so
it is re-parented and leads a session of its own. Two things bring it back within reach:

* the sweep's process is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``, Linux) while
  trials run: an orphan anywhere below it is re-parented to it, not to init;
* every trial process starts with ``SWEEPER_SLOT`` in its environment, which forks and
  execs inherit, so an adopted orphan is attributed to the slot whose trial made it.

So a trial is stopped by signalling its group, every process below its own (a live
tree, walked through ``/proc``) and every adopted orphan of its slot. Linux only; on
other systems the group kill alone remains.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from typing import Iterable, Iterator

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
SLOT_VAR = "SWEEPER_SLOT"


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (empty when it is gone or /proc cannot tell)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children."""
    seen: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.append(child)
        todo += children(child)
    return seen


def slot_of(pid: int) -> str | None:
    """The ``SWEEPER_SLOT`` a process was started (or exec'd) with, if any."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    prefix = f"{SLOT_VAR}=".encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def strays(slot: int | None, known: Iterable[int]) -> list[int]:
    """Orphans adopted by this process that came from a trial of ``slot`` (any slot if None),
    with everything below them; ``known`` are this process's own workers, never strays."""
    skip = set(known)
    out: list[int] = []
    for child in children(os.getpid()):
        if child in skip:
            continue
        tag = slot_of(child)
        if tag is None or (slot is not None and tag != str(slot)):
            continue
        out += [child, *descendants(child)]
    return out


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap(pids: Iterable[int]) -> None:
    """Collect adopted orphans that have exited, so none stays a zombie (never blocks)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Make this process the child subreaper of everything below it while the block runs."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        old = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(old), 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        yield
        return
    try:
        yield
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, old.value, 0, 0, 0)


def kill_group_and_tree(leader: int, sig: int = signal.SIGKILL) -> None:
    """Signal a process group led by ``leader`` and every process below ``leader``."""
    below = descendants(leader)
    try:
        os.killpg(leader, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leader, sig)
    except PermissionError:
        pass
    signal_all(below, sig)
