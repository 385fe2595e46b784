"""The schedulers: which trial runs next, and what each batch of reports is answered
(:class:`~sweeper.model.protocol.Scheduler`, the one interface the engine asks)::

    engine ── a place is free ──▶ next() ──▶ Listed: none (its trials were queued ahead)
                                             Searching: the sampler's next point, a spec of the plan
           ── Reports ──────────▶ reported() ──▶ CONTINUE, or STOP (the pruner's reason), or PAUSE
           ── a recorded result ▶ finished() ──▶ Searching: the study is told (not an attempt retried)
           ── paused trial gone ▶ paused()   ──▶ the scheduler gives it again from next(), or never

* :class:`Listed`: a grid's trials (or any list), all known ahead; every report is answered
  CONTINUE;
* :class:`Searching`: a search (:class:`~sweeper.search.sampling.Search`): the trials a resume runs
  again ahead, then a point asked for as each place frees; its pruner answers reports.

A scheduler that pauses (population-based training, a pruner that may change its mind) gives
a paused trial again from :meth:`~sweeper.model.protocol.Scheduler.next`; the engine starts it in a fresh
process, its epochs so far kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sweeper.model.protocol import Answer, Decision
from sweeper.model.trial import TrialResult, TrialSpec, keep_names

if TYPE_CHECKING:
    from sweeper.search.sampling import Search
    from sweeper.store.ledger import Ledger


class Listed:
    """The trials given, all queued ahead, in order; every report is answered CONTINUE."""

    waits = False
    remaining = 0

    def __init__(self, specs: Sequence[TrialSpec]) -> None:
        self.specs = list(specs)

    def ahead(self) -> list[TrialSpec]:
        return list(self.specs)

    def next(self) -> TrialSpec | None:
        return None

    def reported(self, spec: TrialSpec, items: list[dict[str, Any]]) -> Answer:
        return Answer()

    def paused(self, spec: TrialSpec, epoch: int | None) -> None:
        raise AssertionError(f"trial {spec.name} was paused, but nothing here pauses")

    def finished(self, result: TrialResult, retrying: bool) -> None:
        pass


class Following(Listed):
    """The trials given, each following a schedule (a population-based member replayed): it is
    paused at each epoch its schedule starts a segment at (where its parameters changed, or
    where the member's process was paused and given again), and given again with that
    segment's parameters and seed, in a fresh process, from its checkpoint. ``schedules``: by
    the spec's index, each a list of (epoch, the parameters from after it, the seed of the
    process that trained from there, or None: the spec's)."""

    waits = True  #: each report waits for its answer: a trial hears its pause at the epoch

    def __init__(self, specs: Sequence[TrialSpec], schedules: Mapping[int, Sequence[Any]]) -> None:
        super().__init__(specs)
        self.schedules = {i: list(s) for i, s in schedules.items()}
        self.at: dict[str, int] = {}  #: the segment each trial is in
        self.waiting: list[TrialSpec] = []

    def ahead(self) -> list[TrialSpec]:
        return [self._segment(spec, 0) for spec in self.specs]

    def _segment(self, spec: TrialSpec, k: int) -> TrialSpec:
        """The spec for segment ``k`` of its schedule: its parameters, its seed, and the mark that
        its parameters are recorded by epoch (the Keras callback holds the optimizer to them)."""
        from dataclasses import replace

        from sweeper.model import contract

        schedule = self.schedules.get(spec.index)
        if not schedule:
            return spec
        _, params, seed = (*schedule[k], None)[:3]
        spec = replace(spec, params=dict(params), env={**spec.env, contract.SCHEDULED: "1"})
        return replace(spec, seed=seed) if isinstance(seed, int) and not isinstance(seed, bool) else spec

    @property
    def remaining(self) -> int:  # type: ignore[override]
        return len(self.waiting)

    def next(self) -> TrialSpec | None:
        return self.waiting.pop(0) if self.waiting else None

    def reported(self, spec: TrialSpec, items: list[dict[str, Any]]) -> Answer:
        schedule = self.schedules.get(spec.index, [])
        k = self.at.get(spec.trial_id, 0)
        if k + 1 < len(schedule) and int(items[-1]["epoch"]) >= schedule[k + 1][0]:
            return Answer(Decision.PAUSE, f"its schedule starts a segment after epoch {schedule[k + 1][0]}")
        return Answer()

    def paused(self, spec: TrialSpec, epoch: int | None) -> None:
        k = self.at.get(spec.trial_id, 0) + 1
        self.at[spec.trial_id] = k
        self.waiting.append(self._segment(spec, k))


class Searching:
    """A search: ``todo`` (its trials a resume runs again) ahead, then a point asked of its
    sampler as each place frees, which becomes a spec of the plan (``specs``, ``wanted``) and
    a row of the ledger's grid; its pruner answers each batch of reports."""

    def __init__(self, search: Search, todo: Sequence[TrialSpec], specs: list[TrialSpec], wanted: set[str],
                 ledger: Ledger, recorded: Mapping[str, str]) -> None:
        self.search, self.todo, self.specs, self.wanted, self.ledger = search, list(todo), specs, wanted, ledger
        self.recorded = dict(recorded)  #: names on record, by trial id: none is taken again
        #: Its pruner may stop a trial: each report waits for its answer.
        self.waits = bool(search.prunes)
        #: Whether it asks its sampler for more (the runner says no where the search cannot rank
        #: what the rows kept returned: then only ``todo`` runs, its pruner still answering)
        self.asking = True

    def ahead(self) -> list[TrialSpec]:
        return list(self.todo)

    @property
    def remaining(self) -> int:
        return int(self.search.remaining) if self.asking else 0

    def next(self) -> TrialSpec | None:
        spec: TrialSpec | None = self.search.next() if self.asking else None
        if spec is not None:
            spec = keep_names([spec], {**self.recorded, **{s.trial_id: s.name for s in self.specs}})[0]
            self.specs.append(spec)
            self.wanted.add(spec.trial_id)
            self.ledger.set_grid((s.trial_id, s.index, s.name) for s in self.specs)
        return spec

    def reported(self, spec: TrialSpec, items: list[dict[str, Any]]) -> Answer:
        why = self.search.prune(spec, items)
        return Answer(Decision.STOP, why) if why else Answer()

    def paused(self, spec: TrialSpec, epoch: int | None) -> None:
        raise AssertionError(f"trial {spec.name} was paused, but a search never pauses")

    def finished(self, result: TrialResult, retrying: bool) -> None:
        if not retrying:  # a final result: the study learns it
            self.search.tell(result)
