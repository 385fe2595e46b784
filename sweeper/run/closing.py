"""Why a sweep starts no new trial, and how it ends: one reason, :class:`Closing`, held by the
:class:`Gate` every new trial passes (open until a reason closes it); what closes it: a stop
signal (Ctrl-C, SIGTERM, SIGHUP; :func:`catch_signals`, then :class:`Interrupted`), a failed
write of the sweep's files, an output that halts the sweep, no place left, failures in a row
(``fail_fast``, ``max_failures``: :class:`Streak`). ``train`` that no trial process can import
(:func:`load_error`) is a fault of the whole sweep, raised at once.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import threading
from typing import Any, Iterator

from sweeper.errors import SweepError
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.protocol import Admission
from sweeper.model.trial import Status, TrialResult
from sweeper.store.ledger import StorageError


class Closing(enum.Enum):
    """Why a sweep starts no new trial, in the order the reasons win: where several came, the
    sweep ends as the first says (:meth:`Gate.end`). Running trials finish, unless the reason
    :attr:`stops_running` (then they are stopped as ``interrupted``: they run on resume)."""

    #: Ctrl-C, SIGTERM or SIGHUP: running trials stopped (a second signal: at once); raises Interrupted.
    SIGNAL = "signal"
    #: A write of the sweep's files failed (a full disk, a read-only folder): raises the StorageError.
    STORAGE = "storage"
    #: An output found the sweep cannot go on (a named metric the first ok result lacks):
    #: running trials stopped; raises its SweepError.
    HALTED = "halted"
    #: No place is left for a trial (the card breaker closed every card; memory others hold kept every
    #: trial from starting for the longest wait): raises while trials are queued.
    EXHAUSTED = "exhausted"
    #: ``fail_fast``, ``max_failures``: said in one line; running trials stopped; the sweep ends FAILED.
    FAILURES = "failures"

    @property
    def stops_running(self) -> bool:
        """Whether running trials are stopped (as ``interrupted``) when it comes."""
        return self in (Closing.SIGNAL, Closing.HALTED, Closing.FAILURES)


class Gate:
    """The gate new trials pass: open until a :class:`Closing` reason closes it; the first
    account of each reason stands. A stop signal closes it from its handler (``signals``), no
    place left from the admission (asked each time), failures in a row from the streak
    (:meth:`saw`); the others are told (:meth:`close`)."""

    def __init__(self, admission: Admission, max_failures: int | None = None) -> None:
        self.admission = admission
        #: The stop signals that came, in order (appended by :func:`catch_signals`' handler).
        self.signals: list[int] = []
        self.streak = Streak(max_failures) if max_failures else None
        self._why: dict[Closing, StorageError | SweepError | str] = {}
        self._heeded: set[Closing] = set()

    def close(self, reason: Closing, why: StorageError | SweepError | str) -> bool:
        """Close the gate for ``reason`` (``why``: its exception, or its line); True where this
        reason is new (the first account stands)."""
        if reason in self._why:
            return False
        self._why[reason] = why
        return True

    def saw(self, result: TrialResult) -> None:
        """A trial's outcome once its retries are spent: the streak of failures counts it, and
        closes the gate once it reaches its limit."""
        if self.streak is not None:
            stop = self.streak.saw(result)
            if stop is not None:
                self.close(Closing.FAILURES, stop)

    def why(self, reason: Closing) -> Any:
        """What closed it for ``reason`` (the first signal, the exception, the line), or None."""
        if reason is Closing.SIGNAL:
            return self.signals[0] if self.signals else None
        if reason is Closing.EXHAUSTED:
            return self.admission.exhausted
        return self._why.get(reason)

    @property
    def reasons(self) -> list[Closing]:
        """Every reason that closed it, in the order they win."""
        return [reason for reason in Closing if self.why(reason) is not None]

    @property
    def reason(self) -> Closing | None:
        """The reason that wins, or None while it is open."""
        reasons = self.reasons
        return reasons[0] if reasons else None

    @property
    def open(self) -> bool:
        """Whether new trials may still start."""
        return not self.reasons

    def unheeded(self) -> list[Closing]:
        """The reasons that stop running trials and were not acted on yet, in order; each is
        given once (a stop signal is acted on as it comes, each one: not here)."""
        fresh: list[Closing] = [r for r in self.reasons
                                if r.stops_running and r is not Closing.SIGNAL and r not in self._heeded]
        self._heeded.update(fresh)
        return fresh

    def end(self, queued: int) -> SweepEnd:
        """How the sweep ends, as the first reason says: a stop signal raises
        :class:`Interrupted`; a failed write, its StorageError; a halt, its SweepError; no place
        left, a SweepError while ``queued`` trials wait; failures in a row end it ``FAILED``;
        an open gate, ``FINISHED``."""
        for reason in self.reasons:
            why = self.why(reason)
            if reason is Closing.SIGNAL:
                raise Interrupted(why)
            if isinstance(why, SweepError):  # STORAGE, HALTED
                raise why
            if reason is Closing.EXHAUSTED and queued:
                raise SweepError(f"no place left for the {queued} trials still queued: {why}; then run the same "
                                 "command again (finished trials are kept)")
            if reason is Closing.FAILURES:
                return SweepEnd.FAILED
        return SweepEnd.FINISHED


class Streak:
    """``fail_fast`` and ``max_failures``: the trials that failed the same way (status and
    error line; after their retries), one after another as they ended; the sweep stops once
    ``limit`` did. A trial that succeeded ends the streak; an interrupted one is no failure."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.way: tuple[Status, str] | None = None
        self.count = 0
        self.reached = False  #: the limit was reached (said once, by :meth:`saw`)

    def saw(self, result: TrialResult) -> str | None:
        """Count a trial's outcome; why the sweep stops, the first time the limit is reached."""
        if result.status.succeeded:
            self.way, self.count = None, 0
        if result.status.succeeded or result.status is Status.INTERRUPTED or self.reached:
            return None
        lines = (result.error or "").strip().splitlines()
        way = (result.status, lines[0] if lines else "")
        self.count = self.count + 1 if way == self.way else 1
        self.way = way
        if self.count < self.limit:
            return None
        self.reached = True
        said = f"ended {way[0].value}" + (f" with {way[1]!r}" if way[1] else "")
        return (f"trial {result.name} {said}, the first failure" if self.limit == 1
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
    """While a sweep runs, Ctrl-C, SIGTERM and SIGHUP are noted (in ``signals``: the gate's)
    and wake its loop (a self-pipe); the loop, not the handler, stops the trials. Only the
    main thread can set handlers."""
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
