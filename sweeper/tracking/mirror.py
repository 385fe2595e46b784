"""From the ledger to the trackers: what each one is missing, sent in order.

::

    engine ──writes──> ledger.sqlite <──reads (own read-only connection)── Mirror.sync()
                                                                             │ per tracker:
                                running marks, rows, per-epoch reports ──────┤ start (new attempt)
                                                                             │ epochs (after the last sent)
                                                                             │ finish (outcome not yet told)
                                                                             │ flush (one write per look)
                                                                             v
                                          TensorBoard files, MLflow runs, an Optuna study

Each look reads only what changed: the rows recorded since the last look (and a few
seconds before, in case the clock stepped back), the running marks and each trial's
last epoch; a look at the end, and the first one, read every row. So a look costs what
changed, not the size of the sweep.

While a sweep runs, :class:`Background` runs :meth:`Mirror.sync` in a thread of the
trackers' own process (:mod:`sweeper.tracking.process`), about once a second and only
when the ledger changed (or a running trial it left out, its parameters not yet told by the
sweep, is to be shown); ``export`` runs it once in the foreground.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Any, Callable, Mapping

from sweeper.errors import SweepError
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.store.ledger import Ledger
from sweeper.tracking import Attempt, Held, SweepInfo, Tracker, attempt_of, attempt_running, digest, numbers

log = logging.getLogger("sweeper")

#: Seconds between looks at the ledger while a sweep runs.
POLL_S = 1.0
#: Rows recorded up to this many seconds before the newest row already read are read
#: again (a clock that steps back, a row written while the last look read).
OVERLAP_S = 5.0


class Mirror:
    """Keeps trackers showing what a sweep folder's ledger holds.

    ``specs`` finds a running trial's parameters (a running mark has none) when it has no
    row yet (a row of an earlier attempt has them: a trial's id is its parameters): the
    sweep's own specs; trials it cannot find wait until their row is recorded.
    ``strict``: a tracker's failure is raised (export), not said once and dropped (a sweep).
    """

    def __init__(self, folder: str, trackers: list[Tracker], info: SweepInfo,
                 specs: Callable[[str], TrialSpec | None] = lambda tid: None, strict: bool = False) -> None:
        self.folder, self.info, self.specs, self.strict = folder, info, specs, strict
        self.trackers = list(trackers)
        self.held: dict[int, dict[str, Held]] = {}
        self.metrics: list[str] = []
        self.recorded: set[str] = set()  #: the trials with a row, as last read
        self._ledger: Ledger | None = None
        self._seen: int | None = None
        self._since: float | None = None  # rows recorded from then on are read again; None: all
        self._stamps: dict[str, float] = {}  # each row's time as last read: unchanged, not read again
        self._earlier: dict[str, TrialResult] = {}  # a running trial's row of an earlier attempt
        self._unplaced = False  # a running trial was left out, its parameters not known yet: look again

    def sync(self) -> bool:
        """Send what the trackers are missing; False when the ledger did not change."""
        if not self.trackers:
            return False
        if self._ledger is None:  # opened here: used by the thread that syncs
            self._ledger = Ledger(self.folder, readonly=True)
            for tracker in list(self.trackers):
                self._guard(tracker, lambda t: self.held.__setitem__(id(t), t.begin(self.info)))
        version = self._ledger.changed()
        if version == self._seen and not self._unplaced:
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
        for tracker in list(self.trackers):
            self._guard(tracker, lambda t: t.flush())
        return True

    def _read(self) -> tuple[dict[str, TrialResult], dict[str, Attempt], dict[str, int]]:
        """What changed: rows recorded since the last look (all of them the first time), the
        running marks, and each trial's last epoch."""
        assert self._ledger is not None
        ledger = self._ledger
        with ledger.snapshot():  # one moment: a trial is running or recorded, not neither
            try:
                results, newest = ledger.recorded_since(self._since, self._stamps)
            except sqlite3.OperationalError:  # a ledger without the column: every row, every time
                results, newest = ledger.results(), None
            marks = ledger.running()
            last = ledger.last_epochs()
            marked = {row["trial_id"] for row in marks}
            behind = [tid for tid, epoch in last.items()  # epochs of a trial whose row did not change
                      if tid not in results and tid not in marked and self._behind(tid, epoch)]
            unknown = [tid for tid in marked if tid not in self._earlier and tid not in results]
            if behind or unknown:
                rows = ledger.rows_of([*behind, *unknown])
                results.update((tid, rows[tid]) for tid in behind if tid in rows)
                self._earlier.update((tid, rows[tid]) for tid in unknown if tid in rows)
        if newest is not None:
            self._since = max(self._since or 0.0, newest - OVERLAP_S)
        self.recorded.update(results)
        self._earlier.update((tid, results[tid]) for tid in marked if tid in results)
        running = {}
        self._unplaced = False
        for row in marks:
            tid = row["trial_id"]
            earlier = self._earlier.get(tid)
            if earlier is not None:
                running[tid] = attempt_running(row, earlier.params, earlier.seed, earlier.log)
                continue
            spec = self.specs(tid)
            if spec is None:  # running, its parameters unknown here yet: shown once told (or recorded)
                results.pop(tid, None)
                self._unplaced = True
                continue
            running[tid] = attempt_running(row, spec.params, spec.seed, spec.log_path)
        for tid in [t for t in self._earlier if t not in marked]:
            del self._earlier[tid]
        return results, running, last

    def _behind(self, tid: str, epoch: int) -> bool:
        """Whether a tracker was sent fewer of this trial's epochs than the ledger holds."""
        for tracker in self.trackers:
            mine = self.held.get(id(tracker), {}).get(tid)
            if mine is None or mine.epoch is None or mine.epoch < epoch:
                return True
        return False

    def _sync_one(self, tracker: Tracker, results: Mapping[str, TrialResult], running: Mapping[str, Attempt],
                  last: Mapping[str, int]) -> None:
        assert self._ledger is not None
        held = self.held[id(tracker)]
        for tid in [*running, *(t for t in results if t not in running)]:
            result = None if tid in running else results[tid]
            attempt = running[tid] if result is None else attempt_of(result)
            mine = held.get(tid)
            final = digest(result) if result is not None else None
            told_otherwise = final is not None and mine is not None and mine.final not in (None, final)
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
            if result is not None and final is not None and mine.final != final:
                tracker.finish(attempt, result, final)
                mine.final = final

    def sent(self, tracker: Tracker) -> int:
        """How many trials' outcomes a tracker was told."""
        return sum(1 for h in self.held.get(id(tracker), {}).values() if h.final is not None)

    def end(self, state: SweepEnd) -> None:
        """A last sync of every row, then the trackers close the sweep as it ended (``state``)."""
        self._seen = self._since = None
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
            if self.strict and isinstance(exc, SweepError):  # sweeper's own line, as it is
                raise
            said = str(exc).splitlines()[0][:300] if str(exc) else ""
            why = said if isinstance(exc, SweepError) else f"{type(exc).__name__}: {said}"
            if self.strict:
                raise SweepError(f"{tracker.label} failed ({why})") from None
            log.warning("sweeper: warning: %s failed (%s); the sweep goes on without it and the ledger "
                        "keeps every result; replay it later with: python -m sweeper export %s %s",
                        tracker.label, why, self.folder, tracker.flag)


class Background:
    """A mirror kept current from a thread: a look about once a second, then, once
    :meth:`stop` is called, a last one and the trackers closed (:meth:`Mirror.end`).
    ``after`` is called after each look (the trackers' process says how far it got)."""

    def __init__(self, mirror: Mirror, after: Callable[[Mirror], None] = lambda m: None) -> None:
        self.mirror, self._after = mirror, after
        self._stop = threading.Event()
        self._state = SweepEnd.FINISHED
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
                self._after(self.mirror)
                self._stop.wait(POLL_S)
            self.mirror.end(self._state)
            self._after(self.mirror)
        except Exception as exc:
            log.warning("sweeper: warning: %s stopped (%s); replay it with: python -m sweeper export %s %s",
                        ", ".join(t.label for t in self.mirror.trackers), exc, self.mirror.folder,
                        " ".join(t.flag for t in self.mirror.trackers))
            self.mirror.trackers.clear()
        finally:
            self._done.set()

    def stop(self, state: SweepEnd) -> None:
        """A last look, then the sweep closed as ``state``; :meth:`wait` waits for it."""
        self._state = state
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)
