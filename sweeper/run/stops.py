"""What stops a whole sweep, not one trial: a stop signal (Ctrl-C, SIGTERM, SIGHUP), noted and turned into :class:`Interrupted`; failures in a row (``fail_fast``, ``max_failures``: :class:`Streak`); ``train`` that no trial process can import (:func:`load_error`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator

from sweeper.errors import SweepError
from sweeper.model.trial import Status, TrialResult


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
