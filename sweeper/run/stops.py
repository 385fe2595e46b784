"""How the engine stops a trial (:class:`Stopper`): a stop it decides (a timeout, a stall, a
prune, the sweep's closing) and the cancel that follows (SIGTERM, SIGKILL after the grace), at
each trial's deadline (:class:`~sweeper.run.phases.Due`). Why a whole sweep stops taking
trials is :mod:`sweeper.run.closing`'s.
"""

from __future__ import annotations

from typing import Callable, Iterable

from sweeper.model.protocol import Backend, Event
from sweeper.model.trial import Status, TrialSpec
from sweeper.run.phases import TERM_GRACE, Due, Phase, TrialState


class Stopper:
    """The deadlines of running trials (``timeout``, ``stall``: seconds; ``log_age``: seconds
    since a trial's log was written, None where it has none) and how a trial is stopped. A
    stop reads first what the trial said before it (``hear``: the engine takes in the events
    the backend drained), so a result it sent then stands."""

    def __init__(self, backend: Backend, clock: Callable[[], float], hear: Callable[[list[tuple[str, Event]]], None],
                 timeout: float | None, stall: float | None,
                 log_age: Callable[[TrialSpec], float | None]) -> None:
        self.backend, self.clock, self.hear = backend, clock, hear
        self.timeout, self.stall, self.log_age = timeout, stall, log_age

    def stop(self, trial: TrialState, status: Status, why: str) -> bool:
        """The engine stops a trial: whatever it returns afterwards, this is its status.
        A result it sent before the stop is read first, and stands. False once it ended."""
        self.hear(self.backend.drain(trial.spec.trial_id))
        if trial.phase in (Phase.ENDED, Phase.PAUSED):  # it left meanwhile (a drain may hear its exit)
            return False
        if trial.result is None and trial.stop is None:
            trial.stop, trial.why, trial.t1 = status, why, self.clock()
        return True

    def cancel(self, trial: TrialState, hard: bool) -> None:
        """Ask a trial to stop (``STOPPING``; ended hard after TERM_GRACE), or end it hard
        (``KILLED``). One asked already is asked again, its grace unchanged."""
        if hard:
            trial.to(Phase.KILLED)
            trial.set_deadline(None, None)
        elif not trial.phase.cancelled:
            trial.to(Phase.STOPPING)
            trial.set_deadline(Due.KILL, self.clock() + TERM_GRACE)
        self.backend.cancel(trial.spec.trial_id, hard)

    def deadlines(self, trials: Iterable[TrialState]) -> None:
        """Each trial whose deadline passed: stopped (a timeout, a stall) and cancelled, or
        cancelled (it should have exited by now), or cancelled hard (its grace ran out)."""
        now = self.clock()
        for trial in list(trials):
            if trial.deadline is None or now < trial.deadline or trial.phase is Phase.ENDED:
                continue
            if trial.due is Due.TIMEOUT:
                why = f"ran past the timeout of {self.timeout:g}s and was {self.backend.traits.stop_word}"
                if self.stop(trial, Status.TIMEOUT, why):
                    self.cancel(trial, hard=False)
            elif trial.due is Due.STALL:
                assert self.stall
                if trial.stirred(now, self.log_age(trial.spec), self.stall):  # alive since the deadline was set
                    trial.watch(self.timeout, self.stall)
                    continue
                why = (f"neither reported an epoch nor wrote to its log for {self.stall:g}s and was "
                       f"{self.backend.traits.stop_word}")
                if self.stop(trial, Status.STALLED, why):
                    self.cancel(trial, hard=False)
            elif trial.due in (Due.EXIT, Due.KILL):  # it should have exited, or stopped, by now
                self.cancel(trial, hard=trial.due is Due.KILL)

    def stop_all(self, trials: Iterable[TrialState], why: str, hard: bool = False) -> None:
        """Every running trial stopped as ``interrupted`` (SIGTERM, SIGKILL after the grace;
        ``hard``: at once)."""
        for trial in list(trials):
            if not self.stop(trial, Status.INTERRUPTED, why):
                continue
            if hard and trial.phase is not Phase.KILLED:
                self.cancel(trial, hard=True)
            elif not trial.phase.cancelled:
                self.cancel(trial, hard=False)
