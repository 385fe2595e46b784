"""A sweep among the others on its machine: what it publishes of itself, and what it reads
of them when it places a trial (:class:`Neighbours`, which :class:`sweeper.placement.policy.SlotPlacement`
and ``run --`` ask).

Each round of placements (the engine's fill, between two waits) starts from one fresh
reading of the others' records; each decision in it is made under the machine's lock, and
no more than the decision::

    first admit of a round ─▶ read the others
    each decision          ─▶ lock; read them again where their folder changed; others'
        unclaimed reservations (reserved, not yet held) are taken from the card's room; the
        fair share (:mod:`sweeper.placement.share`) bounds what more this sweep may reserve
        there ─▶ a trial admitted: its reservation published ─▶ unlock
    the wait after it      ─▶ publish what this sweep wants now (no lock: a want reserves nothing)

so a reservation is published before another sweep can decide on the card again, and a
sweep's launches, ledger writes and results are never made under the lock. A sweep that waits
rewrites its record every few seconds (:data:`~sweeper.placement.record.HEARTBEAT_S`), so one
that stopped (Ctrl-Z) is soon no longer waited for.

A trial that could start but does not, for room others hold or a share they are owed, is
said once per cause (the console's one line, not one per trial); the same line is the
record's ``waiting`` (``status``, ``gpus``). When nothing of the sweep runs and memory held
by processes that are no sweep's keeps its next trial from starting for the longest wait
(``SWEEPER_MEMORY_WAIT``, default one hour), :attr:`Neighbours.starved` says so: the sweep
stops taking trials, in one line naming them (exit 2; the queued trials run on the next run).
Other sweeps need no such bound: the share gives each its turn.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from dataclasses import replace
from typing import Callable, Iterator

from sweeper.errors import SweepError
from sweeper.placement import share
from sweeper.placement.liveness import user_name
from sweeper.placement.machine import Machine
from sweeper.placement.record import HEARTBEAT_S, Entry, Holding, Kind, Want

log = logging.getLogger("sweeper")

#: The variable that bounds how long a sweep with nothing running waits for memory strangers hold.
WAIT_ENV = "SWEEPER_MEMORY_WAIT"
#: Its default, seconds.
WAIT_S = 3600.0
#: Seconds between looks at the cards while a trial waits for room others hold (NVML has no event).
LOOK_EVERY = 0.5


def memory_wait() -> float:
    """``SWEEPER_MEMORY_WAIT`` in seconds (``90``, ``90s``, ``10m``, ``2h``), else :data:`WAIT_S`."""
    text = os.environ.get(WAIT_ENV, "").strip().lower()
    if not text:
        return WAIT_S
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise SweepError(f"{WAIT_ENV}={os.environ[WAIT_ENV]!r}: give the longest wait for GPU memory as seconds "
                         "or a duration such as 90s, 10m or 2h")
    return seconds


class Neighbours:
    """This sweep's record on the machine, and its reading of the others' (see the module docstring)."""

    def __init__(self, folder: str, kind: Kind = Kind.SWEEP, machine: Machine | None = None) -> None:
        self.machine = machine or Machine()
        self.folder, self.kind = folder, kind
        self.nice = os.nice(0)
        self.wait_s = memory_wait()
        self.others: list[Entry] = []  #: the live others' records, as read this round
        self.holdings: dict[str, Holding] = {}  #: by trial id: what this sweep holds or reserved
        self.want: Want | None = None
        self.waiting = ""  #: why a trial that could start does not, said once per cause
        self._blocked: tuple[tuple[str, ...], int, str] | None = None  #: this round's first block
        self._said: set[str] = set()
        self.generation = 0  #: how many times the others were read: what is worked out from them is kept until then
        self._published: Entry | None = None
        self._written = 0.0  #: monotonic time of the last write
        self.starving_since: float | None = None  #: nothing of ours runs and strangers' memory blocks
        self.starved: str | None = None  #: why the sweep stops taking trials, once it does
        self.next_look = 0.0

    # -- the record ------------------------------------------------------------------------

    def open(self) -> None:
        self.machine.open()
        self.publish()

    def close(self) -> None:
        self.end_round()
        self.machine.withdraw()

    def entry(self) -> Entry:
        return Entry(self.machine.me, self.machine.uid, user_name(self.machine.uid), self.folder, self.kind,
                     self.nice, tuple(self.holdings.values()), self.want, self.waiting, time.time())

    def publish(self) -> None:
        """This sweep's record, written where it changed, and every :data:`HEARTBEAT_S` while it waits."""
        entry = self.entry()
        beat = self.want is not None and time.monotonic() - self._written >= HEARTBEAT_S
        if replace(entry, written=0.0) != self._published or beat:
            self._published = replace(entry, written=0.0)
            self._written = time.monotonic()
            self.machine.publish(entry)

    # -- a round of placements -------------------------------------------------------------

    def read_round(self) -> None:
        """The first placement of a round: the others read afresh."""
        self.others = self.machine.read()
        self.generation += 1

    @contextlib.contextmanager
    def deciding(self) -> Iterator[None]:
        """One decision, under the machine's lock: the others read again where their records
        changed since, and what it reserved published before the lock is let go."""
        with self.machine.locked():
            if self.machine.changed():
                self.read_round()
            yield
            self.publish()

    def end_round(self) -> None:
        """The round is over: what this sweep wants is published. A round that was blocked for
        room others hold or are owed wants; one that was not, not."""
        if self._blocked is None:
            self.want = None
            self.waiting = ""
        else:
            cards, mb, _ = self._blocked
            since = self.want.since if self.want is not None else time.time()
            self.want = Want(cards, mb, since)
        self._blocked = None
        self.publish()

    def read(self) -> list[Entry]:
        """The others' records, as last read."""
        return self.others

    # -- what a placement asks -------------------------------------------------------------

    def unclaimed(self, card: str, held: Callable[[int], int]) -> int:
        """MB the other sweeps reserved on ``card`` (a UUID) and do not hold yet (``held``:
        what a process's tree holds now, as NVML lists it)."""
        return sum(self.unclaimed_by(card, held).values())

    def unclaimed_by(self, card: str, held: Callable[[int], int]) -> dict[str, int]:
        """The same, by writer, named as ``folder (user)`` (a job: ``run -- CMD (user)``)."""
        out: dict[str, int] = {}
        for e in self.others:
            mb = sum(max(0, h.reserved_mb - (held(h.pid) if h.pid else 0)) for h in e.on(card))
            if mb:
                name = f"{e.folder} ({e.user})" if e.kind is Kind.SWEEP else f"run -- {e.folder} ({e.user})"
                out[name] = out.get(name, 0) + mb
        return out

    def share_room(self, card: str, total_mb: int, want_mb: int, free_mb: float = math.inf,
                   drainable_mb: float = math.inf) -> float:
        """The most this sweep may reserve more on ``card`` by the fair share, where ``free_mb``
        is the room there now and ``drainable_mb`` what it would be with no sweep's trial on it
        (:func:`sweeper.placement.share.room`)."""
        mine = sum(h.reserved_mb for h in self.holdings.values() if h.card == card)
        me = share.Party("", share.weight(self.nice), mine, want_mb,
                         self.want.since if self.want is not None else time.time())
        parties = self._parties(card)
        return share.room(total_mb, me, [p for p in parties if p.active] + [me], free_mb, drainable_mb)

    def fair(self, card: str, total_mb: int) -> float | None:
        """This sweep's fair share of ``card`` in MB, where another sweep holds or wants some of
        it (None where none does: the card is its own, as far as sweeps go)."""
        parties = self._parties(card)
        if not any(p.active for p in parties):
            return None
        me = share.Party("", share.weight(self.nice), 0, 1)
        return share.share_mb(total_mb, me, [*parties, me])

    def _parties(self, card: str) -> list[share.Party]:
        """The others on ``card``, as the share sees them (a want not refreshed lately counts for nothing)."""
        now = time.time()
        return [share.Party(f"{e.life.pid}-{e.life.start}", share.weight(e.nice), e.reserved(card),
                            e.want.mb if e.want is not None and e.wants(card, now) else None,
                            e.want.since if e.want is not None and e.wants(card, now) else math.inf)
                for e in self.others]

    def blocked(self, cards: tuple[str, ...], mb: int, why: str, cause: str) -> None:
        """A trial that could start on ``cards`` waits for room others hold or are owed
        (``why``, said once per ``cause``: who, not how much). The round's first such trial
        is what this sweep wants."""
        if self._blocked is None:
            self._blocked = (cards, mb, why)
        if cause not in self._said:
            self._said.add(cause)
            log.warning("sweeper: waiting: %s", why)
        self.waiting = why

    def admitted(self) -> None:
        """A trial started: this sweep's wait, if it waited, is over."""
        self.want = None
        self.waiting = ""
        self.starving_since = None

    def hold(self, trial_id: str, holding: Holding) -> None:
        self.holdings[trial_id] = holding

    def started(self, trial_id: str, pid: int) -> None:
        old = self.holdings.get(trial_id)
        if old is not None:
            self.holdings[trial_id] = Holding(old.card, old.name, pid, old.reserved_mb, old.cap_mb)

    def resize(self, trial_id: str, reserved_mb: int) -> None:
        old = self.holdings.get(trial_id)
        if old is not None:
            self.holdings[trial_id] = replace(old, reserved_mb=reserved_mb)

    def drop(self, trial_id: str) -> None:
        self.holdings.pop(trial_id, None)

    def trial_pids(self) -> set[int]:
        """The processes of the other sweeps' trials (their commands' scripts are below them)."""
        return {h.pid for e in self.others for h in e.holdings if h.pid}

    def starving(self, strangers: str) -> None:
        """Nothing of this sweep runs, and memory of processes that are no sweep's (``strangers``,
        in words) keeps its next trial from starting: after the longest wait, it is starved."""
        now = time.monotonic()
        if self.starving_since is None:
            self.starving_since = now
        elif now - self.starving_since >= self.wait_s and self.starved is None:
            self.starved = (f"no trial could start for {self.wait_s:g} s for GPU memory other processes hold "
                            f"({strangers}); set {WAIT_ENV} to wait longer")
