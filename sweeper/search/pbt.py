"""Population-based training (``search="pbt"``): a population of trials trained in segments,
each segment a fresh process; at each decision a member in the bottom quantile takes a copy
of a top member's checkpoint and its parameters, perturbed (Jaderberg et al. 2017; Ray
Tune's ``PopulationBasedTraining``, whose names and defaults the settings keep)::

    engine ── a member reports epoch e ──▶ reported() ── e a decision's epoch ──▶ PAUSE
           ── its process is gone ───────▶ paused()   ── its checkpoint folder published, whole,
                                                         as .pbt/<member>/<e> (a copy, renamed in)
                                                      ── bottom quantile at e, once another member
                                                         reported a later epoch: the copy journalled,
                                                         the member's folder replaced by a copy of a
                                                         top member's <e>, its parameters theirs,
                                                         explored, recorded, the journal entry gone
                                                      ── synch: waits until every live member is at e
           ── a place is free ───────────▶ next()     ── a member ready: the same trial, new params,
                                                         resumed from its checkpoint at epoch e (the
                                                         segment's start recorded in its schedule)
           ── a member's row ────────────▶ finished() ── failed for good: a copy of a top member
                                                         takes its place (a new trial, a new id);
                                                         every member over: .pbt/ removed

Where Ray Tune's users got hurt, this holds: no member is exploited that has no checkpoint (a
member that pauses without one stops the sweep, saying how to save one); a member that fails
is replaced, so the population never shrinks (a resume makes a replacement a stopped run did
not); a member waits for the answer to each report, so no decision is skipped however long a
copy takes; in synchronous mode the last member to reach
an epoch releases the others, and a member that finished or failed never holds them; bounds
and settings are checked before anything runs; a checkpoint is copied only from a folder
published at a segment's end, into a folder no process is writing, and a copy and its record
are one step (:mod:`sweeper.search.pbt_checkpoints`: a journal entry first, which a resume
completes); a member that finished early (EarlyStopping) stops no decision; exploration draws
from a stream of its own, never the one the population was drawn from.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from sweeper.errors import SweepError
from sweeper.model.protocol import Answer, Decision
from sweeper.model.space import Space
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.search import pbt_checkpoints
from sweeper.search.pbt_settings import PbtSettings, check, describe, explorable, explore, settings

__all__ = ["Member", "PbtSettings", "Population", "check", "describe", "explorable", "explore", "settings"]

log = logging.getLogger("sweeper")
#: Exploration's own stream of draws: the seed's, apart from the population's first draw.
_EXPLORE = 0x5EED

@dataclass
class Member:
    """One member of the population: its trial now (the same id across its segments)."""

    spec: TrialSpec
    scores: dict[int, float] = field(default_factory=dict)  #: its metric at each decision's epoch
    published: dict[int, str] = field(default_factory=dict)  #: epoch -> its checkpoint's copy then
    at: int = 0  #: the last decision's epoch it reached
    state: str = "queued"  #: queued, running, waiting (paused, a decision to come), ready, done
    released: bool = False  #: synchronous mode: every live member reached its epoch
    noted: int = 0  #: the latest epoch its schedule has a segment's start at
    last: int | None = None  #: its fit's last epoch, where its reports say it (Keras's ``epochs``)
    decided: int = 0  #: the epoch its last pause was decided at


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
    put another member's result in its row), then copies; where nothing is left running to
    tell, it goes on as it is. A member never pauses at its own last epoch where its reports
    say it (Keras's ``fit``); one that finished early (EarlyStopping) changes nothing for the others.

    ``note(trial_id, epoch, params, copied_from)`` records a member's parameters from
    ``epoch`` on (``copied_from``: the member whose checkpoint it took then, or ""), at each
    segment's start; ``make_spec(params, name)`` gives a new trial (a replacement) its spec.
    ``restart``: how many rows its schedules held as this run began (a resume explores with
    draws of its own). ``orphans``: members a killed or interrupted run left failed with no
    replacement on record; each gets one as this run starts, so the population never shrinks
    across a resume."""

    waits = True  #: each report waits for its answer: a member hears its pause at the epoch

    def __init__(self, specs: list[TrialSpec], space: Space, how: PbtSettings, metric: str, mode: str,
                 folder: str, seed: int, note: Callable[[str, int, dict[str, Any], str], None],
                 make_spec: Callable[..., TrialSpec], restart: int = 0) -> None:
        import numpy as np

        self.space, self.how, self.metric, self.mode = space, how, metric, mode
        self.folder = folder  #: <sweep>/.pbt: the published checkpoints, by member and epoch
        self.sweep = os.path.dirname(os.path.abspath(folder))
        self.note, self.make_spec = note, make_spec
        self.rng = np.random.default_rng([int(seed), _EXPLORE, int(restart)])
        self.members: dict[str, Member] = {s.trial_id: Member(s) for s in specs}
        self.first = list(specs)
        self.replaced = 0  #: members that failed and were replaced (at most the population's size)
        self.pending: list[Pending] = []
        self.lineage: list[tuple[str, int, str]] = []  #: (member, epoch, the member it copied)
        self.seen = 0  #: the latest epoch any member reported
        self.interrupted = False  #: a member was interrupted: its published checkpoints stay for the resume
        self.orphans: list[Member] = []  #: failed members on record with no replacement (a resume's)

    # -- the engine's questions -------------------------------------------------------------

    def ahead(self) -> list[TrialSpec]:
        """The members to start, as the run starts; a resume's failed members without a
        replacement get one now, and where every member is over, what is published goes."""
        for spec in self.first:
            member = self.members[spec.trial_id]
            member.state = "queued"
            self._starts(member)
        orphans, self.orphans = self.orphans, []
        for member in orphans:
            self._replace(member)
        if orphans:
            self._settle()
        self._tidy()
        return [self.members[spec.trial_id].spec for spec in self.first]

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
        self._starts(member)
        return member.spec

    def _starts(self, member: Member) -> None:
        """A segment of the member starts at its epoch: on record in its schedule (where no copy
        put it there), so a replay starts its segments where the member's started (each seeded
        by the member's seed and that epoch)."""
        if member.at > member.noted:
            self.note(member.spec.trial_id, member.at, member.spec.params, "")
            member.noted = member.at

    def reported(self, spec: TrialSpec, items: list[dict[str, Any]]) -> Answer:
        member = self.members.get(spec.trial_id)
        if member is None or not items:
            return Answer()
        member.state = "running"
        last = items[-1]
        epoch = int(last["epoch"])
        end = last.get("last")
        if isinstance(end, int) and not isinstance(end, bool):
            member.last = end
        if epoch > self.seen:
            self.seen = epoch
            self._settle()  # a member waiting at an earlier epoch now knows it was not the last
        if epoch <= member.at or epoch < max(self.how.burn_in, 1) or epoch % self.how.interval:
            return Answer()
        if member.last is not None and epoch >= member.last:  # its last epoch: nothing to train after a decision
            return Answer()
        member.scores[epoch] = self._score(last["metrics"].get(self.metric))
        member.decided = epoch
        return Answer(Decision.PAUSE, f"its segment ends at epoch {epoch} (population-based training)")

    def paused(self, spec: TrialSpec, epoch: int | None) -> None:
        member = self.members[spec.trial_id]
        member.spec = spec
        at = int(epoch or 0)
        if at != member.decided:  # (a member waits for each answer: never, unless its loop outran the pause)
            log.warning("sweeper: population-based training: trial %s paused after epoch %d, not at epoch %d "
                        "where its pause was decided; it goes on from epoch %d", spec.name, at, member.decided, at)
        self._publish(member, at)
        member.at, member.state = at, "waiting"
        self._settle()
        self._forget()

    def finished(self, result: TrialResult, retrying: bool) -> None:
        member = self.members.get(result.trial_id)
        if member is None or retrying:
            return
        member.state = "done"
        if result.status is Status.INTERRUPTED:
            self.interrupted = True
        elif result.status not in (Status.OK, Status.PRUNED):
            self._replace(member)
        self._settle()
        self._tidy()

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

    def _donor(self, member: Member | None, epoch: int) -> Member | None:
        """A top member at ``epoch`` that published its checkpoint then (None: none, or not bottom)."""
        bottom, top = self._quantiles(epoch)
        if member is not None and member not in bottom:
            return None
        donors = [m for m in top if epoch in m.published and m is not member]
        return donors[int(self.rng.integers(len(donors)))] if donors else None

    def _settle(self) -> None:
        """Let go on each waiting member that may: one not in the bottom quantile at once; one
        that is, with a copy, once its epoch is known not to be the last (another member
        reported a later one); in synchronous mode only once every live member reached that
        epoch. Nothing left running to tell: each goes on as it is, and a replacement still to
        make is not made."""
        self._barrier_release()
        for member in [m for m in self.members.values() if m.state == "waiting"]:
            if self.how.synch and not member.released:
                continue
            donor = self._donor(member, member.at)
            if donor is None:
                self._go(member)
            elif self.seen > member.at:
                self._exploit(member, donor)
                self._go(member)
        for pending in list(self.pending):
            if self.seen > pending.epoch:
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
        params = explore(donor.spec.params, self.space, self.rng, self.how)
        origin = self._origin(donor.spec.trial_id, epoch)
        self._copy_in(member, pbt_checkpoints.Copying(member.spec.trial_id, epoch, donor.published[epoch],
                                                      params, origin))
        member.spec = replace(member.spec, params=params)
        member.scores[epoch] = donor.scores[epoch]

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
        origin = self._origin(donor.spec.trial_id, epoch)
        self._copy_in(member, pbt_checkpoints.Copying(spec.trial_id, epoch, donor.published[epoch], params, origin))
        self.members[spec.trial_id] = member

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
            self.copy(source, target, f"trial {member.spec.name}'s checkpoint at epoch {epoch}")
        member.published[epoch] = target

    def _copy_in(self, member: Member, job: pbt_checkpoints.Copying) -> None:
        """The member goes on from a copy of ``job.source`` (a published checkpoint), in one
        step with its record: the journal entry first (a resume completes the copy from it),
        then its checkpoint folder, and what it publishes as its own at the epoch (a resume
        after Ctrl-C starts there), then the schedule's row, then the entry goes."""
        entry = pbt_checkpoints.begin(self.folder, job)
        target = os.path.join(self.folder, job.trial_id, str(job.epoch))
        what = f"a checkpoint of epoch {job.epoch} for trial {member.spec.name}"
        self.copy(job.source, target, what)  # durable before the record: what a resume goes on from
        self.copy(target, member.spec.checkpoint, what, durable=False)  # (a resume copies it again from there)
        member.published[job.epoch] = target
        self.lineage.append((job.trial_id, job.epoch, job.copied_from))
        self.note(job.trial_id, job.epoch, job.params, job.copied_from)
        member.noted = job.epoch
        pbt_checkpoints.end(entry)

    def copy(self, source: str, target: str, what: str, durable: bool = True) -> None:
        """``target`` becomes a copy of ``source``, whole or not at all (:func:`pbt_checkpoints.copy`)."""
        pbt_checkpoints.copy(source, target, what, self.sweep, durable=durable)

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

    def _tidy(self) -> None:
        """Every member over, none interrupted: the published checkpoints go (no decision and no
        resume can ask for one again); each member's own checkpoint folder stays as train left it.
        A sweep killed before or during this is tidied by the same command (:meth:`ahead`)."""
        if self.interrupted or self.pending or any(m.state != "done" for m in self.members.values()):
            return
        if not os.path.isdir(self.folder):
            return
        from sweeper.store.paths import SweepPaths

        size = pbt_checkpoints.published_size(self.folder)
        pbt_checkpoints.tidy(self.folder, SweepPaths(self.sweep).trials)
        why = pbt_checkpoints.remove(self.folder)
        if why is not None:
            log.warning("sweeper: population-based training: every member finished, but the checkpoints published "
                        "for its decisions (%s in %s) could not all be removed (%s); nothing needs them: remove "
                        "that folder yourself", size, self.folder, why)
            return
        log.info("sweeper: population-based training: every member finished, so the checkpoints published for "
                 "its decisions (%s in .pbt/) are removed; each member's own checkpoint folder "
                 "(trials/<member>/checkpoint) stays as train left it", size)
