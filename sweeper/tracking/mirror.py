"""From the ledger to the trackers: what each one is missing, sent in order.

::

    engine ──writes──> ledger.sqlite <──reads (own read-only connection)── Mirror.sync()
                                                                             │ per tracker:
                                running marks, rows, per-epoch reports ──────┤ start (new attempt)
                                                                             │ epochs (after the last sent)
                                                                             │ finish (outcome not yet told)
                                                                             v
                                                       TensorBoard files, MLflow runs

:class:`Background` runs :meth:`Mirror.sync` in a thread of the sweep's parent, about once
a second and only when the ledger changed, so a slow or unreachable tracking server never
holds the engine up; ``export`` runs it once in the foreground.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping

from ..errors import SweepError
from ..ledger import Ledger
from ..trial import TrialResult, TrialSpec
from . import Attempt, Held, SweepInfo, Tracker, attempt_of, attempt_running, digest, numbers

log = logging.getLogger("sweeper")

#: Seconds between looks at the ledger while a sweep runs.
POLL_S = 1.0


class Mirror:
    """Keeps trackers showing what a sweep folder's ledger holds.

    ``specs`` finds a running trial's parameters (a running mark has none): the sweep's
    own specs while it runs; trials it cannot find wait until their row is recorded.
    ``strict``: a tracker's failure is raised (export), not said once and dropped (a sweep).
    """

    def __init__(self, folder: str, trackers: list[Tracker], info: SweepInfo,
                 specs: Callable[[str], TrialSpec | None] = lambda tid: None, strict: bool = False) -> None:
        self.folder, self.info, self.specs, self.strict = folder, info, specs, strict
        self.trackers = list(trackers)
        self.held: dict[int, dict[str, Held]] = {}
        self.metrics: list[str] = []
        self._ledger: Ledger | None = None
        self._seen: int | None = None

    def sync(self) -> bool:
        """Send what the trackers are missing; False when the ledger did not change."""
        if not self.trackers:
            return False
        if self._ledger is None:  # opened here: used by the thread that syncs
            self._ledger = Ledger(self.folder, readonly=True)
            for tracker in list(self.trackers):
                self._guard(tracker, lambda t: self.held.__setitem__(id(t), t.begin(self.info)))
        version = self._ledger.changed()
        if version == self._seen:
            return False
        self._seen = version
        results, running, last = self._read()
        new = sorted({k for r in results.values() for k in numbers(r.metrics)} - set(self.metrics))
        if new:
            self.metrics += new
            for tracker in list(self.trackers):
                self._guard(tracker, lambda t: t.metrics_known(list(self.metrics)))
        for tracker in list(self.trackers):
            self._guard(tracker, lambda t: self._sync_one(t, results, running, last))
        return True

    def _read(self) -> tuple[dict[str, TrialResult], dict[str, Attempt], dict[str, int]]:
        assert self._ledger is not None
        with self._ledger.snapshot():  # one moment: a trial is running or recorded, not neither
            results = self._ledger.results()
            marks = self._ledger.running()
            last = {tid: epoch for tid, (epoch, _) in self._ledger.latest_epochs().items()}
        running = {}
        for row in marks:
            spec = self.specs(row["trial_id"])
            if spec is None:  # running, its parameters unknown here: its old row is not its state
                results.pop(row["trial_id"], None)
                continue
            running[row["trial_id"]] = attempt_running(row, spec)
        return results, running, last

    def _sync_one(self, tracker: Tracker, results: Mapping[str, TrialResult], running: Mapping[str, Attempt],
                  last: Mapping[str, int]) -> None:
        assert self._ledger is not None
        held = self.held[id(tracker)]
        for tid in [*running, *(t for t in results if t not in running)]:
            result = None if tid in running else results[tid]
            attempt = running[tid] if result is None else attempt_of(result)
            mine = held.get(tid)
            told_otherwise = result is not None and mine is not None and mine.final not in (None, digest(result))
            if mine is None or mine.key != attempt.key or told_otherwise:
                # a new attempt, or a row recorded again with another outcome (a trial that
                # sent its result, then did not exit cleanly): shown anew, never half of each
                tracker.start(attempt, mine)
                mine = held[tid] = Held(attempt.key)
            if tid in last and (mine.epoch is None or last[tid] > mine.epoch):
                rows = self._ledger.epochs(tid, mine.epoch)
                if rows:
                    tracker.epochs(attempt, rows, rows[-1][0])
                    mine.epoch = rows[-1][0]
            if result is not None and mine.final != digest(result):
                tracker.finish(attempt, result, digest(result))
                mine.final = digest(result)

    def end(self, state: str) -> None:
        """A last sync, then the trackers close the sweep (``finished``, ``interrupted``, ``running``)."""
        self._seen = None
        self.sync()
        for tracker in list(self.trackers):
            self._guard(tracker, lambda t: t.end(state))
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    def _guard(self, tracker: Tracker, step: Callable[[Tracker], Any]) -> None:
        """A tracker that fails is said once and left; the sweep, and the others, go on."""
        if tracker not in self.trackers:
            return
        try:
            step(tracker)
        except Exception as exc:  # a tracker's own errors are many and its own
            self.trackers.remove(tracker)
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            if self.strict:
                raise SweepError(f"{tracker.label} failed ({why})") from None
            log.warning("sweeper: warning: %s failed (%s); the sweep goes on without it and the ledger "
                        "keeps every result; replay it later with: python -m sweeper export %s %s",
                        tracker.label, why, self.folder, tracker.flag)


class Background:
    """A mirror kept current from a thread while the sweep runs."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self._stop = threading.Event()
        self._state = "finished"
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweeper-trackers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.mirror.sync()
                except Exception as exc:  # the ledger could not be read now: try again
                    log.debug("sweeper: trackers: %s", exc)
                self._stop.wait(POLL_S)
            self.mirror.end(self._state)
        except Exception as exc:
            log.warning("sweeper: warning: trackers stopped (%s); replay with python -m sweeper export %s",
                        exc, self.mirror.folder)
        finally:
            self._done.set()

    def close(self, state: str, timeout: float = 60.0) -> None:
        """The last outcomes sent and the sweep closed, waiting at most ``timeout`` seconds
        (Ctrl-C ends the wait)."""
        self._state = state
        self._stop.set()
        try:
            done = self._done.wait(timeout)
        except KeyboardInterrupt:
            done = False
        if not done:
            log.warning("sweeper: warning: %s still sending after %.0fs; left unfinished. Replay it with: "
                        "python -m sweeper export %s %s", ", ".join(t.label for t in self.mirror.trackers),
                        timeout, self.mirror.folder, " ".join(t.flag for t in self.mirror.trackers))

