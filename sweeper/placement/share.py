"""A fair share of a card among the sweeps (and ``run --`` jobs) that want it.

Counted in memory, per card: of a card of ``total`` MB, a writer's share is ``total x its
weight / the weights of every writer active there`` (one that holds or wants some of it);
the weight is ``1.25 ** -nice`` of the writer's niceness (as the kernel weighs CPU time: ``nice
-n 5 python -m sweeper ...`` is worth about a third of an un-niced sweep). Under a fixed
``per_gpu`` a trial's reservation is its slot's cap, so a share in MB is a share of the
slots.

The rule is work-conserving and never stops a running trial:

* beyond its share only while no other writer is *entitled* and has waited longer: one that
  wants the card for a trial that would be within its own share, or that holds nothing
  there (a trial larger than a share still gets its turn). Capacity nobody else waits for
  is lent; it comes back as the borrower's trials end, since the borrower starts no more;
* within its share (what it holds there, plus the new trial, at most its share), where the
  memory is free, but never with room such a waiter needs: where an entitled writer that
  waited longer cannot start yet (its trial is larger than what is free), the others leave
  it what it waits for, and the card drains for it as their trials end. A trial larger
  than a share (a job that wants a whole card beside a sweep of two per card) gets its turn
  so, not after the other writer's last trial. Room that no sweep's trial ending would give
  (processes that are no sweep's hold it) is not waited for.

Among writers that are all beyond their shares (trials larger than a share: three sweeps
of ``--per-gpu 2`` on one card), the one waiting longest goes first: turns, in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Niceness is read as the kernel reads it, -20 (most) to 19 (least); each step weighs 1.25x.
NICE_STEP = 1.25


def weight(nice: int) -> float:
    """A writer's weight in the share, from its niceness."""
    return float(NICE_STEP ** -max(-20, min(19, nice)))


@dataclass(frozen=True)
class Party:
    """One writer on one card, as the share sees it."""

    key: str  #: who (unique per writer; ties between equal waits go by it)
    weight: float
    reserved_mb: int  #: what it holds or reserved there
    want_mb: int | None = None  #: its next trial's reservation, where it wants this card
    since: float = math.inf  #: since when it waits (inf: it does not)

    @property
    def active(self) -> bool:
        return self.reserved_mb > 0 or self.want_mb is not None


def share_mb(total_mb: int, party: Party, parties: list[Party]) -> float:
    """``party``'s share of the card: its weight's part of all active writers' (itself counted)."""
    weights = sum(p.weight for p in parties if p.active and p.key != party.key) + party.weight
    return total_mb * party.weight / weights


def entitled(total_mb: int, party: Party, parties: list[Party]) -> bool:
    """Whether a writer waits for this card with a claim on it: its next trial would be within
    its share, or it holds nothing there."""
    if party.want_mb is None:
        return False
    return party.reserved_mb == 0 or party.reserved_mb + party.want_mb <= share_mb(total_mb, party, parties)


def room(total_mb: int, me: Party, parties: list[Party], free_mb: float = math.inf,
         drainable_mb: float = math.inf) -> float:
    """The most ``me`` may reserve more on the card by the share: unlimited while no other
    entitled writer has waited longer, else what is left of its share, less the room those
    writers wait for (<= 0: nothing). ``free_mb``: the card's room now; ``drainable_mb``: its
    room with no sweep's trial on it (a waiter larger than that is not waited for).
    ``me.since``: when it began waiting (now, if it does not yet)."""
    others = [p for p in parties if p.key != me.key]
    everyone = [*others, me]
    ahead = [p for p in others if entitled(total_mb, p, everyone) and (p.since, p.key) < (me.since, me.key)]
    if not ahead:
        return math.inf
    owed = sum(p.want_mb or 0 for p in ahead if (p.want_mb or 0) <= drainable_mb)
    return min(share_mb(total_mb, me, everyone) - me.reserved_mb, free_mb - owed)
