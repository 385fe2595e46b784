"""What trials leave on their cards, and what else is there: the local backend's placement
(:class:`sweeper.placement.policy.SlotPlacement`) asks it at each reading of the cards.

* **Teardown verified** (per_gpu="auto"): a packed trial's reservation stands after it ended
  until its card's memory that no process NVML lists holds is back within
  :data:`TEARDOWN_TOLERANCE_MB` of what it was when the trial started (and no leftover
  process of the sweep holds any there); after :data:`TEARDOWN_S` what did not come back
  is said once and counts as used (through NVML's free memory), and the reservation is freed.
* **Leftovers and strangers**: a process NVML lists on a card that carries this sweep's tag
  from a slot no trial runs in (a trial's leftover) is killed, said once; another that is
  no sweep's is said once and counts as used; another sweep's trial is that sweep's to say
  (``sweeper gpus`` shows it).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from sweeper.model import contract
from sweeper.placement.liveness import lineage
from sweeper.placement.packing import Card

log = logging.getLogger("sweeper")

#: A packed trial's reservation is freed once its card's memory that no process NVML lists
#: holds is within this many MB of what it was when the trial started. The driver's own
#: share of a card moves by tens of MB as contexts come and go; a leaked context is hundreds.
TEARDOWN_TOLERANCE_MB = 256
#: Seconds a reservation waits for that; then what did not come back is said once (it is
#: counted as used anyway: room comes from NVML's free memory) and the reservation is freed.
#: The driver frees a context within a second of its process's exit.
TEARDOWN_S = 10.0

#: (card index, MB or None) per pid NVML lists, as the sampler read it.
Listed = Mapping[int, tuple[str, "int | None"]]


@dataclass
class Teardown:
    """A packed trial that ended, its reservation kept until its card's memory is back."""

    name: str  #: the trial's, for the line that says what did not come back
    gpu: str
    reserved_mb: int
    before_mb: int  #: MB of the card no listed process held when the trial started
    until: float  #: monotonic time after which it is said and freed
    residue_mb: int = 0  #: what has not come back, at the last look


def unlisted(read: Iterable[Card], listed: Listed) -> dict[str, int]:
    """Per card, MB used that no process NVML listed holds (the driver's own share, and
    contexts whose process is gone). A card where NVML cannot tell some process's memory is
    left out: nothing there can be told apart."""
    held: dict[str, int] = {}
    unknown: set[str] = set()
    for card, mb in listed.values():
        if mb is None:
            unknown.add(card)
        held[card] = held.get(card, 0) + (mb or 0)
    return {c.gpu: c.total_mb - c.free_mb - held.get(c.gpu, 0) for c in read if c.gpu not in unknown}


class Leftovers:
    """Teardowns in progress, the sweep's leftovers killed, the strangers said (see the module docstring)."""

    def __init__(self) -> None:
        self.tearing: dict[str, Teardown] = {}  #: by trial id: ended, its card's memory not verified back yet
        self.before: dict[str, int] = {}  #: by trial id: MB of its card no listed process held at its start
        self.left: dict[int, str] = {}  #: pid -> card: leftovers of the sweep's trials, killed
        self.told: set[int] = set()  #: pids on the cards that were not the sweep's trials, said once

    def ended(self, trial_id: str, name: str, packed: tuple[str, int] | None) -> bool:
        """A packed trial ended: its reservation stands until its card's memory is back. Whether it does."""
        before = self.before.pop(trial_id, None)
        if packed is None or before is None:
            return False
        self.tearing[trial_id] = Teardown(name, packed[0], packed[1], before, time.monotonic() + TEARDOWN_S)
        return True

    def check(self, read: list[Card], listed: Listed, reserved: Mapping[str, tuple[str, int]]) -> None:
        """Ended packed trials whose card's memory is back (within ``TEARDOWN_TOLERANCE_MB``
        of what no listed process held at their start, no leftover of the sweep's there)
        have their reservation freed; one past ``TEARDOWN_S`` has it freed too, and what did
        not come back is said once: counted as used, through NVML's free memory."""
        if not self.tearing:
            return
        free = unlisted(read, listed)
        left: dict[str, int] = {}
        for pid, card in self.left.items():
            if pid in listed:
                left[card] = left.get(card, 0) + (listed[pid][1] or 0)
        self.left = {pid: card for pid, card in self.left.items() if pid in listed}
        now = time.monotonic()
        for tid, t in list(self.tearing.items()):
            if t.gpu not in free:  # NVML cannot read the card, or tell what its processes hold
                if now >= t.until:
                    del self.tearing[tid]  # nothing to verify by: freed, unsaid
                continue
            t.residue_mb = max(0, free[t.gpu] - t.before_mb) + left.get(t.gpu, 0)
            if t.residue_mb <= TEARDOWN_TOLERANCE_MB:
                del self.tearing[tid]
            elif now >= t.until:
                del self.tearing[tid]
                self._not_back(t, reserved)

    def _not_back(self, t: Teardown, reserved: Mapping[str, tuple[str, int]]) -> None:
        """Said once, for this trial: the others on the card measure from it, not blamed for it."""
        log.warning("sweeper: gpu:%s: %d MB did not come back %.0f s after trial %s ended (used by no "
                    "process NVML lists, or by a process it left); counted as used", t.gpu,
                    t.residue_mb, TEARDOWN_S, t.name)
        for other in self.tearing.values():
            if other.gpu == t.gpu:
                other.before_mb += t.residue_mb
        for rid, (gpu, _) in reserved.items():
            if gpu == t.gpu and rid in self.before:
                self.before[rid] += t.residue_mb

    def strangers(self, listed: Listed, ours: set[int], busy: set[str], tag: str, theirs: set[int]) -> None:
        """Processes NVML lists on the sweep's cards that are no running trial's (``ours``: nor
        below one, nor a standby): one of this sweep's (``tag``) from a slot no trial runs in
        (``busy`` are those that do) is a trial's leftover, killed, once said; one of another
        sweep's trials (``theirs``, or below one) is that sweep's; any other is said once and
        counts as used through NVML's free memory."""
        from sweeper.system import procs

        for pid, (card, mb) in listed.items():
            if pid in ours or pid in self.told or not os.path.exists(f"/proc/{pid}"):
                continue  # (not in /proc: gone, or NVML reports the host's pids to this container)
            if theirs and theirs & set(lineage(pid)):
                continue  # another sweep's trial: its sweep says what it holds (sweeper gpus shows it)
            mark = procs.tags(pid)
            if mark.get(contract.SWEEP) == tag and mark.get(contract.SLOT) == procs.SLOT_PLACEHOLDER:
                continue  # the fork server or its probe: the server's own check (ForkServer._held) judges it
            self.told.add(pid)
            if mark.get(contract.SWEEP) == tag:
                if mark.get(contract.SLOT) in busy:  # a running trial's detached helper: its trial's
                    self.told.discard(pid)
                    continue
                procs.signal_all([pid], signal.SIGKILL)
                self.left[pid] = card
                log.warning("sweeper: gpu:%s: pid %d, left by a trial of this sweep, held %s after its trial "
                            "ended; killed", card, pid, _amount(mb))
            else:
                log.warning("sweeper: gpu:%s: pid %d, not this sweep's, holds %s; counted as used", card, pid,
                            _amount(mb))


def _amount(mb: int | None) -> str:
    return "an amount NVML cannot tell" if mb is None else f"{mb} MB"
