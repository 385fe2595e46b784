"""``python -m sweeper gpus``: this machine's cards at a glance, with whoever uses them.

Per card, as NVML tells it: its memory; each sweep's trials on it (the sweep's folder and
user, the trial, its process, its cap, what it reserved and what it holds now) and each
``run --`` job's; every other process there (pid, user, MB and command, where ``/proc``
lets them be read); and who waits for a share of it (since when, and for how much). The
sweeps' side comes from their records (:mod:`sweeper.placement.machine`): a sweep that died
is not shown. ``status`` shows a sweep's own wait from the same record (:func:`waiting_lines`).
"""

from __future__ import annotations

import argparse
import os
import time

from sweeper.placement.holders import holders
from sweeper.placement.liveness import lineage
from sweeper.placement.machine import Machine
from sweeper.placement.record import Entry, Kind
from sweeper.system.gpus import Gpu, inventory


def main(argv: list[str], prog: str = "python -m sweeper") -> int:
    from sweeper.system import gpus as nvml

    argparse.ArgumentParser(prog=f"{prog} gpus", allow_abbrev=False,
                            description="Show this machine's GPUs: each card's memory, the trials of every sweep "
                                        "on it, other processes, and who waits for a share.").parse_args(argv)
    found = inventory()
    if not found:
        print(f"sweeper: no GPU here ({nvml.unavailable or 'NVML lists none'})")
        return 0
    for line in lines(found, Machine().read(mine=True)):
        print(line)
    return 0


def _who(entry: Entry) -> str:
    what = entry.folder if entry.kind is Kind.SWEEP else f"run -- {entry.folder}"
    nice = f", nice {entry.nice}" if entry.nice else ""
    return f"{what} ({entry.user}{nice})"


def lines(gpus: list[Gpu], entries: list[Entry]) -> list[str]:
    """The view: a line per card, then one per trial, job, other process and waiter on it."""
    out = []
    now = time.time()
    for g in gpus:
        listed: dict[int, tuple[str, int | None]] = {pid: (str(g.index), mb) for pid, mb in g.processes}
        out.append(f"gpu:{g.index} {g.name}: {g.used_mb} MB used, {g.free_mb} MB free of {g.total_mb} MB")
        shown = 0
        for e in entries:
            for h in e.on(g.uuid):
                held = sum(mb or 0 for pid, (_, mb) in listed.items() if h.pid and h.pid in lineage(pid))
                what = f"trial {h.name}, " if e.kind is Kind.SWEEP else ""
                cap = f"cap {h.cap_mb} MB, " if h.cap_mb else ""
                out.append(f"  {_who(e)}: {what}pid {h.pid or '(starting)'}, {cap}reserved {h.reserved_mb} MB, "
                           f"holds {held} MB")
                shown += 1
        for other in holders(listed, str(g.index), set(), entries, g.uuid):
            if other.sweep:
                continue
            mb = "? MB" if other.mb is None else f"{other.mb} MB"
            out.append(f"  pid {other.pid} ({other.user or '?'}): {mb}" + (f", {other.command}" if other.command else ""))
            shown += 1
        for e in entries:  # (a want its writer stopped refreshing is not shown: nobody keeps room for it)
            if e.want is not None and e.wants(g.uuid, now):
                out.append(f"  waiting: {_who(e)} wants {e.want.mb} MB, for {now - e.want.since:.0f} s")
                shown += 1
        if not shown:
            out.append("  nothing")
    return out


def waiting_lines(folder: str) -> list[str]:
    """What the sweep running in ``folder`` waits for, as its record says ([] when it does not)."""
    path = os.path.abspath(folder)
    return [f"waiting: {e.waiting}" for e in Machine().read(mine=True)
            if e.kind is Kind.SWEEP and os.path.abspath(e.folder) == path and e.waiting]
