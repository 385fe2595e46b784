"""A card where trials crash is closed to new trials, under any ``per_gpu``."""

from __future__ import annotations

import logging
from typing import Sequence

from sweeper.model.trial import Status, TrialResult
from sweeper.model.lifecycle import Callback

log = logging.getLogger("sweeper")

#: Trials in a row ending ``crashed`` on one card before it takes no new one.
BREAKER = 3


class Breaker(Callback):
    """Closes a card where trials crash, under any ``per_gpu`` (``"auto"``, a number, or the
    one per card of ``gpus`` alone): :data:`BREAKER` trials in a row ending ``crashed`` on
    one card (no ``ok`` between) and it takes no new trial, said in one line; the others
    take them; when no card is left, :attr:`exhausted` says why and the sweep stops taking
    trials. An ``oom`` neither counts nor resets: it says what a trial needs against what it
    was given, not that the card fails (packed, it runs again on other terms; under a fixed
    ``per_gpu`` the larger points of a grid, often in a row, would close sound cards)."""

    def __init__(self, gpus: Sequence[str], limit: int = BREAKER) -> None:
        self.gpus = list(gpus)  #: the cards the sweep may use
        self.limit = limit
        self.failures: dict[str, int] = {}  #: card -> trials ending crashed in a row
        self.closed: dict[str, str] = {}  #: card -> why it takes no new trial

    def recorded(self, result: TrialResult) -> None:
        self.learn(result)

    def learn(self, result: TrialResult) -> None:
        gpu = result.device.removeprefix("gpu:") if result.device.startswith("gpu:") else None
        if gpu is None or gpu in self.closed:
            return
        if result.status is Status.CRASHED:
            self.failures[gpu] = self.failures.get(gpu, 0) + 1
            if self.failures[gpu] >= self.limit:
                self._close(gpu, f"{self.limit} trials in a row crashed there (the last: {result.name})")
        elif result.status.succeeded:
            self.failures[gpu] = 0

    def _close(self, gpu: str, why: str) -> None:
        self.closed[gpu] = why
        left = [g for g in self.gpus if g not in self.closed]
        log.warning("sweeper: gpu:%s takes no new trial: %s; %s", gpu, why,
                    f"the sweep goes on on gpu:{', gpu:'.join(left)}" if left else "no GPU is left")

    @property
    def exhausted(self) -> str | None:
        """Why no card takes a trial any more, once none does."""
        if self.gpus and all(g in self.closed for g in self.gpus):
            return "; ".join(f"gpu:{g}: {why}" for g, why in self.closed.items()) + "; look at those trials' logs"
        return None


