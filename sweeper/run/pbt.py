"""Population-based training (``search="pbt"``): a population of trials trained in segments,
each segment a fresh process; at each decision a member in the bottom quantile takes a copy
of a top member's checkpoint and its parameters, perturbed (Jaderberg et al. 2017; Ray
Tune's ``PopulationBasedTraining``, whose names and defaults the settings keep)::

    engine ── a member reports epoch e ──▶ reported() ── e a decision's epoch ──▶ PAUSE
           ── its process is gone ───────▶ paused()   ── its checkpoint folder published, whole,
                                                         as .pbt/<member>/<e> (a copy, renamed in)
                                                      ── bottom quantile at e: the member's folder
                                                         replaced by a copy of a top member's <e>,
                                                         its parameters theirs, explored
                                                      ── synch: waits until every live member is at e
           ── a place is free ───────────▶ next()     ── a member ready: the same trial, new params,
                                                         resumed from its checkpoint at epoch e
           ── a member's row ────────────▶ finished() ── failed for good: a copy of a top member
                                                         takes its place (a new trial, a new id)

Where Ray Tune's users got hurt, this holds: no member is exploited that has no checkpoint (a
member that pauses without one stops the sweep, saying how to save one); a member that fails
is replaced, so the population never shrinks; in synchronous mode the last member to reach
an epoch releases the others, and a member that finished or failed never holds them; bounds
and settings are checked before anything runs; a checkpoint is copied only from a folder
published at a segment's end, into a folder no process is writing.
"""

from __future__ import annotations

import math
import os
import shutil
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from sweeper.errors import SweepError
from sweeper.model.protocol import Answer, Decision
from sweeper.model.space import Space
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.run.pbt_settings import PbtSettings, check, describe, explorable, explore, settings

__all__ = ["Member", "PbtSettings", "Population", "check", "describe", "explorable", "explore", "settings"]

@dataclass
class Member:
    """One member of the population: its trial now (the same id across its segments)."""

    spec: TrialSpec
    scores: dict[int, float] = field(default_factory=dict)  #: its metric at each decision's epoch
    published: dict[int, str] = field(default_factory=dict)  #: epoch -> its checkpoint's copy then
    at: int = 0  #: the last decision's epoch it reached
    state: str = "queued"  #: queued, running, waiting (paused, a decision to come), ready, done
    released: bool = False  #: synchronous mode: every live member reached its epoch


@dataclass
class Pending:
    """A failed member's replacement, to be made once its copy's epoch is known not to be the last."""

    epoch: int
    donor: Member
    name: str


class Population:
    """The scheduler of population-based training (:class:`~sweeper.model.protocol.Scheduler`).

    A member paused at a decision's epoch ``e`` goes on at once unless it is in the bottom
    quantile there; one that is waits, holding no place, until ``e`` is known not to be the
    members' last epoch (another member reported a later one; a copy at the last epoch would
    put another member's result in its row), then copies; where ``e`` turns out to be the last
    (a member finished there), or nothing is left running to tell, it goes on as it is.

    ``note(trial_id, epoch, params, copied_from)`` records a member's parameters from
    ``epoch`` on (``copied_from``: the member whose checkpoint it took then, or "");
    ``make_spec(params, name)`` gives a new trial (a replacement) its spec."""

    waits = True  #: each report waits for its answer: a member hears its pause at the epoch

    def __init__(self, specs: list[TrialSpec], space: Space, how: PbtSettings, metric: str, mode: str,
                 folder: str, seed: int, note: Callable[[str, int, dict[str, Any], str], None],
                 make_spec: Callable[..., TrialSpec]) -> None:
        import numpy as np

        self.space, self.how, self.metric, self.mode = space, how, metric, mode
        self.folder = folder  #: <sweep>/.pbt: the published checkpoints, by member and epoch
        self.note, self.make_spec = note, make_spec
        self.rng = np.random.default_rng(seed)
        self.members: dict[str, Member] = {s.trial_id: Member(s) for s in specs}
        self.first = list(specs)
        self.replaced = 0  #: members that failed and were replaced (at most the population's size)
        self.pending: list[Pending] = []
        self.lineage: list[tuple[str, int, str]] = []  #: (member, epoch, the member it copied)
        #: the last epoch members train: the largest a finished member reached (Optuna's
        #: ``max_resource="auto"`` rule), where a report does not say it (Keras's ``epochs``)
        self.end: int | None = None
        self.seen = 0  #: the latest epoch any member reported

    # -- the engine's questions -------------------------------------------------------------

    def ahead(self) -> list[TrialSpec]:
        for spec in self.first:
            self.members[spec.trial_id].state = "queued"
        return list(self.first)

    @property
    def remaining(self) -> int:
        return sum(m.state in ("waiting", "ready") for m in self.members.values()) + len(self.pending)

    def next(self) -> TrialSpec | None:
        """The ready member furthest behind (each gets its fair share of time, as in Ray Tune,
        so decisions compare members at the same epoch)."""
        ready = [m for m in self.members.values() if m.state == "ready"]
        if not ready:
            return None
        member = min(ready, key=lambda m: m.at)
        member.state = "running"
        return member.spec

    def reported(self, spec: TrialSpec, items: list[dict[str, Any]]) -> Answer:
        member = self.members.get(spec.trial_id)
        if member is None or not items:
            return Answer()
        member.state = "running"
        last = items[-1]
        epoch = int(last["epoch"])
        if epoch > self.seen:
            self.seen = epoch
            self._settle()  # a member waiting at an earlier epoch now knows it was not the last
        if epoch <= member.at or epoch < max(self.how.burn_in, 1) or epoch % self.how.interval:
            return Answer()
        if self._at_end(epoch, last.get("last")):  # its last epoch: nothing to train after a decision
            return Answer()
        member.scores[epoch] = self._score(last["metrics"].get(self.metric))
        return Answer(Decision.PAUSE, f"its segment ends at epoch {epoch} (population-based training)")

    def paused(self, spec: TrialSpec, epoch: int | None) -> None:
        member = self.members[spec.trial_id]
        member.spec = spec
        at = int(epoch or 0)
        self._publish(member, at)
        member.at, member.state = at, "waiting"
        self._settle()
        self._forget()

    def finished(self, result: TrialResult, retrying: bool) -> None:
        member = self.members.get(result.trial_id)
        if member is None or retrying:
            return
        member.state = "done"
        if result.status is Status.OK and result.epoch_reached:
            self.end = max(self.end or 0, result.epoch_reached)
        elif result.status not in (Status.OK, Status.PRUNED, Status.INTERRUPTED):
            self._replace(member)
        self._settle()

    # -- decisions --------------------------------------------------------------------------

    def _score(self, value: Any) -> float:
        """Higher is better; a missing or non-finite metric ranks last."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return -math.inf
        return float(value) if self.mode == "max" else -float(value)

    def _quantiles(self, epoch: int) -> tuple[list[Member], list[Member]]:
        """The bottom and top members at ``epoch``, among those that reached it."""
        ranked = sorted((m for m in self.members.values() if epoch in m.scores),
                        key=lambda m: (m.scores[epoch], m.spec.trial_id))
        k = min(len(ranked) // 2, math.ceil(len(ranked) * self.how.quantile))
        if k == 0:
            return [], []
        return ranked[:k], ranked[-k:]

    def _at_end(self, epoch: int, last: Any = None) -> bool:
        """Whether ``epoch`` is a member's last, as its report says (``last``) or finished members showed."""
        if isinstance(last, int) and not isinstance(last, bool) and epoch >= last:
            return True
        return self.end is not None and epoch >= self.end

    def _donor(self, member: Member | None, epoch: int) -> Member | None:
        """A top member at ``epoch`` that published its checkpoint then (None: none, or not bottom)."""
        bottom, top = self._quantiles(epoch)
        if member is not None and member not in bottom:
            return None
        donors = [m for m in top if epoch in m.published and m is not member]
        return donors[int(self.rng.integers(len(donors)))] if donors else None

    def _settle(self) -> None:
        """Let go on each waiting member that may: one not in the bottom quantile at once; one
        that is, with a copy, once its epoch is known not to be the last; in synchronous mode
        only once every live member reached that epoch. Nothing left running to tell: each goes
        on as it is, and a replacement still to make is not made."""
        self._barrier_release()
        for member in [m for m in self.members.values() if m.state == "waiting"]:
            if self.how.synch and not member.released:
                continue
            donor = self._donor(member, member.at)
            if donor is None or self._at_end(member.at):
                self._go(member)
            elif self.seen > member.at:
                self._exploit(member, donor)
                self._go(member)
        for pending in list(self.pending):
            if self._at_end(pending.epoch):
                self.pending.remove(pending)
            elif self.seen > pending.epoch:
                self.pending.remove(pending)
                self._make_replacement(pending)
        if not any(m.state in ("queued", "running", "ready") for m in self.members.values()):
            for member in [m for m in self.members.values() if m.state == "waiting"]:
                if not self.how.synch or member.released:
                    self._go(member)
            self.pending.clear()

    def _barrier_release(self) -> None:
        """Synchronous mode: once every live member reached the lowest epoch members wait at, they may go on."""
        if not self.how.synch:
            return
        waiting = [m for m in self.members.values() if m.state == "waiting" and not m.released]
        if not waiting:
            return
        epoch = min(m.at for m in waiting)
        if any(m.state in ("queued", "running", "ready") and m.at < epoch for m in self.members.values()):
            return
        if any(p.epoch < epoch for p in self.pending):
            return
        for m in waiting:
            if m.at == epoch:
                m.released = True

    def _go(self, member: Member) -> None:
        member.released = False
        member.state = "ready"

    def _exploit(self, member: Member, donor: Member) -> None:
        """The member takes a copy of ``donor``'s checkpoint at its epoch, and its parameters, explored."""
        epoch = member.at
        self._adopt(member, donor.published[epoch], epoch)
        params = explore(donor.spec.params, self.space, self.rng, self.how)
        member.spec = replace(member.spec, params=params)
        member.scores[epoch] = donor.scores[epoch]
        origin = self._origin(donor.spec.trial_id, epoch)
        self.lineage.append((member.spec.trial_id, epoch, origin))
        self.note(member.spec.trial_id, epoch, params, origin)

    def _origin(self, donor: str, epoch: int) -> str:
        """Whose model a copy of ``donor``'s checkpoint at ``epoch`` is: the donor's own, or, where
        the donor itself took a copy at that epoch before, that copy's origin (the lineage names
        the member whose training the model is, so a replay can follow it)."""
        for tid, at, source in reversed(self.lineage):
            if tid == donor and at == epoch:
                return source
        return donor

    def _replace(self, member: Member) -> None:
        """A member failed for good: a new trial takes its place, a copy of a top member at
        its latest published checkpoint (or, before any, fresh from the space)."""
        if self.replaced >= self.how.population:
            return
        self.replaced += 1
        name = f"{member.spec.name}.r{self.replaced}"
        for epoch in sorted({e for m in self.members.values() for e in m.published}, reverse=True):
            donor = self._donor(None, epoch)
            if donor is not None:
                self.pending.append(Pending(epoch, donor, name))
                return
        params = self.space.sample(1, seed=int(self.rng.integers(2**31)))[0]
        spec = self.make_spec(params, name)
        self.members[spec.trial_id] = Member(spec, state="ready")
        self.note(spec.trial_id, 0, params, "")

    def _make_replacement(self, pending: Pending) -> None:
        from sweeper.model import contract

        epoch, donor = pending.epoch, pending.donor
        params = explore(donor.spec.params, self.space, self.rng, self.how)
        spec = self.make_spec(params, pending.name)
        spec = replace(spec, env={**spec.env, contract.RESUMED_EPOCH: str(epoch)})
        member = Member(spec, scores={epoch: donor.scores[epoch]}, at=epoch, state="ready")
        self._adopt(member, donor.published[epoch], epoch)
        self.members[spec.trial_id] = member
        origin = self._origin(donor.spec.trial_id, epoch)
        self.lineage.append((spec.trial_id, epoch, origin))
        self.note(spec.trial_id, epoch, params, origin)

    # -- checkpoints ----------------------------------------------------------------------

    def _publish(self, member: Member, epoch: int) -> None:
        """The member's checkpoint as it left it at ``epoch``, copied whole where no process
        writes (renamed in once complete); a member that saved nothing stops the sweep."""
        source = member.spec.checkpoint
        if not os.path.isdir(source) or not os.listdir(source):
            raise SweepError(
                f"trial {member.spec.name} reached epoch {epoch} with nothing in its checkpoint folder "
                f"({source}): population-based training resumes each member from it, so train must save "
                "its state there before each report (Keras: keras.callbacks.BackupAndRestore("
                "sweeper.current_trial().checkpoint), before sweeper's callback)")
        target = os.path.join(self.folder, member.spec.trial_id, str(epoch))
        if not os.path.isdir(target):
            self.copy(source, target)
        member.published[epoch] = target

    def _adopt(self, member: Member, source: str, epoch: int) -> None:
        """The member goes on from a copy of ``source`` (a published checkpoint): its checkpoint
        folder, and what it publishes as its own at ``epoch`` (a resume after Ctrl-C starts there)."""
        self.copy(source, member.spec.checkpoint)
        target = os.path.join(self.folder, member.spec.trial_id, str(epoch))
        self.copy(source, target)
        member.published[epoch] = target

    @staticmethod
    def copy(source: str, target: str) -> None:
        """``target`` becomes a copy of ``source``: built beside it, then renamed into place."""
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        building = os.path.join(parent, f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}")
        shutil.copytree(source, building, symlinks=True)
        old = None
        if os.path.exists(target):
            old = os.path.join(parent, f".{os.path.basename(target)}.old.{uuid.uuid4().hex[:8]}")
            os.rename(target, old)
        os.rename(building, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _forget(self) -> None:
        """Published checkpoints no decision can ask for again: each member keeps those at or
        after the lowest epoch a live member has reached."""
        live = [m.at for m in self.members.values() if m.state != "done"] + [p.epoch for p in self.pending]
        if not live:
            return
        oldest = min(live)
        for m in self.members.values():
            for epoch in [e for e in m.published if e < oldest]:
                shutil.rmtree(m.published.pop(epoch), ignore_errors=True)
