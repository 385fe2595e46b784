"""What stops trials (:class:`Stopping`, the engine's part that does) and what stops a whole sweep: a stop signal (Ctrl-C, SIGTERM, SIGHUP), noted and turned into :class:`Interrupted`; failures in a row (``fail_fast``, ``max_failures``: :class:`Streak`); ``train`` that no trial process can import (:func:`load_error`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from typing import Any, Callable, Iterator

from sweeper.errors import SweepError
from sweeper.model.protocol import Backend, Event
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.run.phases import TERM_GRACE, Due, Phase, TrialState

log = logging.getLogger("sweeper")

class Streak:
    """``fail_fast`` and ``max_failures``: the trials that failed the same way (status and
    error line; after their retries), one after another as they ended; ``stop`` says why
    once ``limit`` did. A trial that succeeded ends the streak; an interrupted one is no failure."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.way: tuple[Status, str] | None = None
        self.count = 0
        self.stop: str | None = None  #: why the sweep stops, once it does
        self.told = False  #: the stop was said and acted on

    def saw(self, result: TrialResult) -> None:
        if result.status.succeeded:
            self.way, self.count = None, 0
        if result.status.succeeded or result.status is Status.INTERRUPTED or self.stop is not None:
            return
        lines = (result.error or "").strip().splitlines()
        way = (result.status, lines[0] if lines else "")
        self.count = self.count + 1 if way == self.way else 1
        self.way = way
        if self.count >= self.limit:
            said = f"ended {way[0].value}" + (f" with {way[1]!r}" if way[1] else "")
            self.stop = (f"trial {result.name} {said}, the first failure" if self.limit == 1
                         else f"{self.count} trials in a row {said}")


class Interrupted(Exception):
    """The sweep was stopped by a signal; running trials were recorded ``interrupted``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def load_error(message: str) -> SweepError:
    """``train`` cannot be imported in a trial process: the sweep's fault, said once."""
    if "Can't get attribute" in message and "__mp_main__" in message:
        return SweepError(
            f"a trial process cannot find train in the calling script ({message}): it is defined "
            "inside if __name__ == '__main__': (or another block a trial process does not run); "
            "move def train to the module's top level"
        )
    return SweepError(
        f"a trial process could not import train: {message}; fix it and run again "
        "(finished trials are kept)"
    )


#: What stops a sweep as Ctrl-C does: SIGTERM, and SIGHUP (its terminal or ssh session closed).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def catch_signals(signals: list[int], wake_fd: int) -> Iterator[None]:
    """While a sweep runs, Ctrl-C, SIGTERM and SIGHUP are noted and wake its loop (a self-pipe);
    the loop, not the handler, stops the trials. Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signals.append(signum)
        with contextlib.suppress(OSError):
            os.write(wake_fd, b"!")

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Stopping:
    """How the engine (:class:`sweeper.run.engine.Engine`, which this is a part of) stops
    trials: a stop it decided (timeout, stall, pruned, Ctrl-C) and the cancel that follows
    (SIGTERM, SIGKILL after the grace), at their deadlines."""

    backend: Backend
    trials: dict[str, TrialState]
    clock: Callable[[], float]
    timeout: float | None
    stall: float | None
    log_age: Callable[[TrialSpec], float | None]
    signals: list[int]

    def _handle(self, events: list[tuple[str, Event]]) -> None:
        raise NotImplementedError

    def _queued(self) -> int:
        raise NotImplementedError

    def _stop(self, trial: TrialState, status: Status, why: str) -> bool:
        """The engine stops a trial: whatever it returns afterwards, this is its status.
        A result it sent before the stop is read first, and stands. False once it ended."""
        self._handle(self.backend.drain(trial.spec.trial_id))
        if trial.phase in (Phase.ENDED, Phase.PAUSED):  # it left meanwhile (a drain may hear its exit)
            return False
        if trial.result is None and trial.stop is None:
            trial.stop, trial.why, trial.t1 = status, why, self.clock()
        return True

    def _cancel(self, trial: TrialState, hard: bool) -> None:
        """Ask a trial to stop (``STOPPING``; ended hard after TERM_GRACE), or end it hard
        (``KILLED``). One asked already is asked again, its grace unchanged."""
        if hard:
            trial.to(Phase.KILLED)
            trial.set_deadline(None, None)
        elif not trial.phase.cancelled:
            trial.to(Phase.STOPPING)
            trial.set_deadline(Due.KILL, self.clock() + TERM_GRACE)
        self.backend.cancel(trial.spec.trial_id, hard)

    def _deadlines(self) -> None:
        now = self.clock()
        for trial in list(self.trials.values()):
            if trial.deadline is None or now < trial.deadline or trial.phase is Phase.ENDED:
                continue
            if trial.due is Due.TIMEOUT:
                why = f"ran past the timeout of {self.timeout:g}s and was {self.backend.traits.stop_word}"
                if self._stop(trial, Status.TIMEOUT, why):
                    self._cancel(trial, hard=False)
            elif trial.due is Due.STALL:
                assert self.stall
                if trial.stirred(now, self.log_age(trial.spec), self.stall):  # alive since the deadline was set
                    trial.watch(self.timeout, self.stall)
                    continue
                why = (f"neither reported an epoch nor wrote to its log for {self.stall:g}s and was "
                       f"{self.backend.traits.stop_word}")
                if self._stop(trial, Status.STALLED, why):
                    self._cancel(trial, hard=False)
            elif trial.due in (Due.EXIT, Due.KILL):  # it should have exited, or stopped, by now
                self._cancel(trial, hard=trial.due is Due.KILL)

    def _on_signal(self) -> None:
        """Ctrl-C or SIGTERM: no new trials; running ones are stopped as ``interrupted``
        (SIGTERM, then SIGKILL after the grace); a second signal kills them at once."""
        self._stop_running(f"stopped by {signal.Signals(self.signals[0]).name}", hard=len(self.signals) > 1)

    def _give_up(self, streak: Streak) -> None:
        """``fail_fast``, ``max_failures``: said in one line; no new trial starts (``taking_new``),
        running ones are stopped as ``interrupted`` (they run on resume)."""
        streak.told = True
        queued, running = self._queued(), len(self.trials)
        log.warning("sweeper: stopping: %s; %d queued trial%s not started, %d running stopped (interrupted); "
                    "fix it, then run the same command again (finished trials are kept)", streak.stop, queued,
                    " (or retry)" if queued == 1 else "s (or retries)", running)
        self._stop_running(f"the sweep stopped: {streak.stop}")

    def _stop_running(self, why: str, hard: bool = False) -> None:
        """Every running trial stopped as ``interrupted`` (SIGTERM, SIGKILL after the grace;
        ``hard``: at once)."""
        for trial in list(self.trials.values()):
            if not self._stop(trial, Status.INTERRUPTED, why):
                continue
            if hard and trial.phase is not Phase.KILLED:
                self._cancel(trial, hard=True)
            elif not trial.phase.cancelled:
                self._cancel(trial, hard=False)
