"""What a sweep (or a ``run --`` job) tells the others on its machine: one record, one file.

A record says who wrote it (:class:`~sweeper.placement.liveness.Life`, the user, the sweep's
folder or the job's command, its niceness), what it holds on each card (:class:`Holding`:
a trial's card by UUID, its process, what it reserved and its cap; a trial admitted and not
started yet has pid 0) and what it waits for (:class:`Want`: the cards it could start its
next trial on, what that trial reserves, since when). It is JSON, written whole and renamed
into place (:mod:`sweeper.placement.machine`), so a reader sees the old record or the new,
never half of one; one a reader cannot make sense of (another version's, a damaged file)
is skipped, as if its writer were gone. Its words (folder, user, trial names, why it
waits) are another user's text: read with control characters escaped, so a line that
shows them stays one line.

A writer that waits rewrites its record every :data:`HEARTBEAT_S` (``written``); a want
whose record was not rewritten for :data:`WANT_STALE_S` counts for nothing (its writer is
stopped, Ctrl-Z, or stuck): nobody keeps room for it, nobody lets it go first.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass

from sweeper.model.text import printable
from sweeper.placement.liveness import Life

#: The format's version: a record of another is skipped (its writer sees ours alike).
VERSION = 2
#: Seconds between rewrites of a waiting writer's record, however little changed.
HEARTBEAT_S = 5.0
#: A want not rewritten for this long counts for nothing (its writer does not run on).
WANT_STALE_S = 30.0


class Kind(enum.Enum):
    """What wrote a record."""

    SWEEP = "sweep"
    JOB = "job"  #: ``python -m sweeper run -- CMD``


@dataclass(frozen=True)
class Holding:
    """A trial's place on a card."""

    card: str  #: the card's UUID (the same card to every process, whatever it may see)
    name: str  #: the trial's name (a job: its command)
    pid: int  #: its process; 0 while admitted and not started yet
    reserved_mb: int  #: what the card keeps for it (its cap under a fixed per_gpu)
    cap_mb: int | None = None  #: its framework's cap


@dataclass(frozen=True)
class Want:
    """A writer's next trial waits for room: on which cards, how much, since when."""

    cards: tuple[str, ...]  #: UUIDs of the cards it may start on (a free slot there)
    mb: int  #: what that trial reserves
    since: float  #: wall-clock time it began waiting (the longest waiter goes first)


@dataclass(frozen=True)
class Entry:
    """One writer's record (see the module docstring)."""

    life: Life
    uid: int
    user: str
    folder: str  #: the sweep folder (absolute), or a job's command
    kind: Kind = Kind.SWEEP
    nice: int = 0  #: the writer's niceness: it weights its share
    holdings: tuple[Holding, ...] = ()
    want: Want | None = None
    #: why its next trial waits, in one line (``status`` and ``gpus`` show it); "" when none does
    waiting: str = ""
    written: float = 0.0  #: wall-clock time of the write

    def on(self, card: str) -> list[Holding]:
        return [h for h in self.holdings if h.card == card]

    def reserved(self, card: str) -> int:
        return sum(h.reserved_mb for h in self.on(card))

    def wants(self, card: str, now: float | None = None) -> bool:
        """Whether it waits for ``card``, by a want refreshed within :data:`WANT_STALE_S` of
        ``now`` (None: any want)."""
        return self.want is not None and card in self.want.cards and (now is None or not self.stale(now))

    def stale(self, now: float) -> bool:
        """Whether its record was last rewritten too long before ``now`` for its want to count."""
        return now - self.written > WANT_STALE_S

    def to_json(self) -> str:
        data = asdict(self)
        data.update(version=VERSION, kind=self.kind.value, life=asdict(self.life))
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Entry | None":
        """The record, or None for one this version cannot read."""
        try:
            data = json.loads(text)
            if data.pop("version") != VERSION:
                return None
            want = data.pop("want")
            return cls(life=Life(**data.pop("life")), kind=Kind(data.pop("kind")),
                       holdings=tuple(Holding(**{**h, "name": printable(str(h["name"]))}) for h in data.pop("holdings")),
                       want=None if want is None else Want(tuple(want["cards"]), int(want["mb"]),
                                                           float(want["since"])),
                       user=printable(str(data.pop("user"))), folder=printable(str(data.pop("folder"))),
                       waiting=printable(str(data.pop("waiting"))), **data)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
