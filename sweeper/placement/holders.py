"""Who holds a card's memory besides a sweep's own trials, in words; and whether a trial's
out-of-memory was caused by them.

NVML lists the processes on each card, with what each holds; ``/proc`` says whose they are
and what they run (where readable: a process of another user shows its owner and command
line, its environment not). A process that is another sweep's trial (or below one: a command
trial's script) is named by that sweep's record (:mod:`sweeper.placement.record`); any other
is a *stranger*: a colleague's job, a notebook, a ``run --`` job's command.

An out-of-memory is not the trial's own when, at its end, the card's memory held by
processes that are not this sweep's (each at what it holds: another sweep's trial that grew
past its reservation counts all of it) was more than the card less what this sweep reserved
there, the trial's own reservation included (:func:`crowded`): the trial was placed where its
reservation fitted beside what the others held and reserved, and something else took memory
since. A trial's own excess (a need over its cap) leaves that sum where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from sweeper.placement.liveness import command, lineage, owner
from sweeper.placement.record import Entry, Kind


@dataclass(frozen=True)
class Holder:
    """One process on a card that is not this sweep's."""

    pid: int
    mb: int | None  #: None where NVML cannot tell
    user: str = ""
    command: str = ""
    #: the other sweep (or job) whose trial it is, by its folder (or command); "" for a stranger
    sweep: str = ""
    trial: str = ""

    def said(self) -> str:
        held = "an amount NVML cannot tell" if self.mb is None else f"{self.mb} MB"
        if self.sweep:
            return f"{self.trial or 'a trial'} of {self.sweep} ({self.user}) holds {held}"
        who = ", ".join(w for w in (self.user, self.command) if w)
        return f"pid {self.pid}{f' ({who})' if who else ''} holds {held}"


def holders(listed: Mapping[int, tuple[str, int | None]], card: str, ours: Iterable[int],
            sweeps: Iterable[Entry], card_uuid: str = "") -> list[Holder]:
    """The processes NVML listed on ``card`` (by index, as listed) that are not in ``ours``,
    named: another sweep's trial by its record (``card_uuid``: the card, as records name it),
    any other by ``/proc``; the largest first."""
    mine = set(ours)
    trials = {h.pid: (e, h.name) for e in sweeps for h in e.holdings if h.pid and (not card_uuid or h.card == card_uuid)}
    out = []
    for pid, (where, mb) in listed.items():
        if where != card or pid in mine:
            continue
        who = owner(pid)
        user = who[1] if who else ""
        found = next((trials[p] for p in lineage(pid) if p in trials), None)
        if found is not None:
            entry, name = found
            label = entry.folder if entry.kind is Kind.SWEEP else f"the job {entry.folder!r}"
            out.append(Holder(pid, mb, entry.user, "", label, name if entry.kind is Kind.SWEEP else ""))
        else:
            out.append(Holder(pid, mb, user, command(pid)))
    return sorted(out, key=lambda h: -(h.mb or 0))


def crowded(total_mb: int, ours_reserved_mb: int, others_mb: int) -> bool:
    """Whether processes that are not this sweep's (``others_mb``, what they held) took memory
    this sweep's reservations on the card counted on (``ours_reserved_mb``: the trial's own
    included): its out-of-memory is theirs, not the trial's."""
    return others_mb > total_mb - ours_reserved_mb


def said(found: list[Holder], most: int = 3) -> str:
    """Who holds it, in one line: the largest ``most`` holders, and how many more."""
    words = "; ".join(h.said() for h in found[:most])
    return words + (f"; and {len(found) - most} more" if len(found) > most else "")
