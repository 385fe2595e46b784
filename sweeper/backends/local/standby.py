"""Standbys: a slot's next processes, started while its trial runs, so the next trial
finds the installed modules ``train`` needs imported (a fork has them from the server; a spawn
process imports them); the user's module comes with the trial, after its seed.

How many: a fork per busy slot at once (it costs no import); spawn ones, which import,
beyond that only while measured idle cores allow (:mod:`sweeper.system.headroom`), up to the
depth that keeps a slot fed (:meth:`Standbys.depth`, at most ``MAX_AHEAD``), while memory
allows another standby, and never more than trials are left. Three standbys dead before
their trials, and the sweep stops making them.

A :class:`Spare` is a worker process started before its trial: a standby, the CLI's grid
reader, or a process about to get its trial (:func:`spawn` starts each).
"""

from __future__ import annotations

import math
import multiprocessing.connection
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sweeper.backends.local.process import (
    REAP_WAIT_S,
    Proc,
    exit_fd,
    join,
    no_main_guard,
    sigint_held,
    tracker_started,
)
from sweeper.child import bootstrap
from sweeper.model.protocol import Broken, Event, LoadFailed, Ready
from sweeper.placement.slots import Slot
from sweeper.system import headroom, procs

#: Standbys per slot at most (spawn ones, while cores are idle).
MAX_AHEAD = 3
#: Idle cores that must be measured, beyond what standbys started since took, for one more.
IDLE_FOR_ONE = 0.8


@dataclass
class Spare:
    """A worker process started before its trial: a standby, or the CLI's grid reader
    (:func:`sweeper.front.gridfile.read`)."""

    process: Any  # multiprocessing.context.SpawnProcess
    conn: multiprocessing.connection.Connection
    exit_fd: int  #: readable once the process has exited (a pidfd)
    env: dict[str, str]  #: what it was started with: only a slot with the same may use it
    tag: str = ""  #: the sweep tag in its environment
    closed: bool = False
    forked: bool = False  #: a fork of the fork server (else a spawn process)
    ready: bool = False  #: it has imported ahead (sent Ready)
    born: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        """It is not needed: end it and everything it started."""
        if self.closed:
            return
        self.closed = True
        if self.process.exitcode is None:  # once reaped, its pid may name a stranger
            procs.kill_group_and_tree(self.process.pid)
        join(self.process, self.exit_fd, REAP_WAIT_S)
        self.conn.close()
        if self.exit_fd != self.process.sentinel:
            os.close(self.exit_fd)


def spawn(ctx: Any, boot: bootstrap.Boot, env: dict[str, str], name: str) -> Spare:
    """Start a worker process with ``env`` set in it from its first instruction."""
    # multiprocessing's resource tracker started now, outside the slot's environment (never
    # taken for a stray of it) and before SIGINT is held (it would unblock it)
    tracker_started()
    parent_conn, child_conn = ctx.Pipe()
    process = ctx.Process(target=bootstrap.main, args=(child_conn, boot), name=name, daemon=False)
    try:
        with procs.environ(env), sigint_held():  # Ctrl-C is the parent's to handle
            process.start()
    except BaseException:
        parent_conn.close()
        raise
    finally:
        child_conn.close()
    return Spare(process, parent_conn, exit_fd(process), dict(env))


class Standbys:
    """A sweep's standbys, by slot, and what decides how many more it starts."""

    def __init__(self, prefetch: bool) -> None:
        self.prefetch = prefetch  #: standbys are made (off: each trial imports train after its seed is set)
        self.by_slot: dict[int, list[Spare]] = {}  #: by slot index, oldest first
        self.deaths = 0  #: standbys that died before their trial
        self.idle: headroom.IdleCpu | None = None  #: measured once spawn standbys are considered
        self.recheck_at: float | None = None  #: when to measure idle cores again
        self.import_s: list[float] = []  #: standbys' import times, newest last
        self.trial_s: list[float] = []  #: trials' run times, newest last
        self.standby_mb = 0.0  #: the largest resident memory of a ready standby

    def all(self) -> list[Spare]:
        return [sb for queue in self.by_slot.values() for sb in queue]

    def add(self, slot: Slot, sb: Spare) -> None:
        self.by_slot.setdefault(slot.index, []).append(sb)

    def drop(self, sb: Spare) -> None:
        for queue in self.by_slot.values():
            if sb in queue:
                queue.remove(sb)
        sb.close()

    def trim(self, queued: int) -> None:
        """No more standbys than ``queued`` trials left: those still importing go first."""
        standbys = self.all()
        for sb in sorted(standbys, key=lambda sb: (sb.ready, -sb.born))[:max(0, len(standbys) - queued)]:
            self.drop(sb)  # more standbys than trials left: those still importing go first
        self.recheck_at = None

    def event(self, sb: Spare, ready: set[Any]) -> list[tuple[str, Event]]:
        """What a standby said (Ready, or why it cannot import train), or that it died."""
        events: list[tuple[str, Event]] = []
        if sb.conn in ready:
            try:
                while sb.conn.poll():
                    message = sb.conn.recv()  # Ready, or why it cannot import train
                    if isinstance(message, LoadFailed):
                        events.append(("", message))
                    elif isinstance(message, Ready) and not sb.ready:
                        sb.ready = True
                        if not sb.forked:
                            self.import_s = [*self.import_s[-15:], time.monotonic() - sb.born]
                            self.standby_mb = max(self.standby_mb, headroom.rss_mb(sb.process.pid) or 0.0)
            except (EOFError, OSError):
                pass
        if sb.exit_fd in ready:  # died before it had a trial: forget it; give up after a few
            if sb.process.exitcode == bootstrap.NO_MAIN_GUARD:
                events.append(("", Broken(str(no_main_guard()))))
            self.drop(sb)
            self.deaths += 1
            if self.deaths >= 3:
                self.prefetch = False
        return events

    def more(self, queued: int, running: Iterable[Proc], start: Callable[[Slot], Spare]) -> None:
        """Spawn standbys beyond one per busy slot, each only while a whole idle core is
        measured for it (those started since the measurement count as busy), up to the
        depth that keeps a slot fed, and while memory allows another standby."""
        if self.idle is None:
            self.idle = headroom.IdleCpu()
        cores = self.idle.sample()
        busy = [p.slot for p in running if p.fn_started]
        depth = self.depth()
        while len(self.all()) < queued:
            short = [s for s in busy if len(self.by_slot.get(s.index, [])) < depth]
            if not short:
                return
            if cores is None:  # a window has not passed yet, or cannot be measured here
                self.recheck_at = time.monotonic() + headroom.WINDOW_S
                return
            since = sum(1 for sb in self.all() if sb.born > self.idle.measured_at - headroom.WINDOW_S)
            mem = headroom.available_mb()
            if cores - since < IDLE_FOR_ONE or (mem is not None and mem < 3 * max(self.standby_mb, 512.0)):
                self.recheck_at = time.monotonic() + headroom.WINDOW_S
                return
            slot = min(short, key=lambda s: (len(self.by_slot.get(s.index, [])), s.index))
            self.add(slot, start(slot))

    def depth(self) -> int:
        """Standbys a slot needs to be fed: one per trial that ends during one import, plus
        one; the most until a trial and an import have been timed."""
        if not self.import_s or not self.trial_s:
            return MAX_AHEAD
        ratio = statistics.median(self.import_s[-8:]) / max(0.1, statistics.median(self.trial_s[-8:]))
        return max(1, min(MAX_AHEAD, math.ceil(ratio) + 1))
