"""A scheduler that pauses, for the engine's tests (test_engine_clock.py in fake time,
test_schedulers.py with real processes): nothing in sweeper pauses a trial yet."""

from __future__ import annotations

from typing import Any

from sweeper.model.protocol import Answer, Decision
from sweeper.model.trial import TrialResult
from sweeper.search.schedulers import Listed


class Pausing(Listed):
    """The trials given; each is answered PAUSE the first time it reports epoch ``at``, and
    given again at the next free place (``resume``), or never. ``waits``: each report waits
    for its answer (where the backend answers), so the trial hears the pause."""

    def __init__(self, specs: Any, at: int, waits: bool = False, resume: bool = True) -> None:
        super().__init__(specs)
        self.at, self.waits, self.resume = at, waits, resume
        self.waiting: list[Any] = []
        self.paused_at: list[tuple[str, int | None]] = []  #: (trial id, epoch), as they left
        self.told: list[TrialResult] = []  #: the results it was told, in order

    @property
    def remaining(self) -> int:  # type: ignore[override]
        return len(self.waiting)

    def next(self) -> Any:
        return self.waiting.pop(0) if self.waiting else None

    def reported(self, spec: Any, items: list[dict[str, Any]]) -> Answer:
        if items[-1]["epoch"] == self.at and spec.trial_id not in {tid for tid, _ in self.paused_at}:
            return Answer(Decision.PAUSE, f"paused at epoch {self.at}")
        return Answer()

    def paused(self, spec: Any, epoch: int | None) -> None:
        self.paused_at.append((spec.trial_id, epoch))
        if self.resume:
            self.waiting.append(spec)

    def finished(self, result: TrialResult, retrying: bool) -> None:
        self.told.append(result)
