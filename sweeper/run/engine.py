"""The engine: every trial of a sweep, from the queue to one recorded result.

The engine owns what does not depend on where trials run: the queue, retries, deadlines,
the stop signals (Ctrl-C, SIGTERM, SIGHUP), recording in the ledger, and telling the sweep's
outputs (:class:`sweeper.run.lifecycle.Callback`: the CSVs, the console, a search) what happened.
Where and how a trial runs is a backend's (:class:`~sweeper.model.protocol.Backend`, found by
name in :mod:`sweeper.backends.registry`); which queued trial may start now, and in what
order, the placement's it asks (:class:`~sweeper.model.protocol.Admission`:
:mod:`sweeper.run.placement`).

Data flow of one sweep::

     sweep() / CLI               Engine (parent, one thread)             Backend
    ┌──────────────┐ TrialSpecs ┌─────────────────────────────────┐    ┌──────────────────────────┐
    │ grid → specs │──────────▶ │ queue ──▶ start(spec) ───────────┼──▶ │ local: a spawn process    │
    │ minus rows   │ or a Feed  │  admits? (the placement) ────────┼─── │  per trial (standby, fork │
    │ already ok   │ (search)   │  (a Feed: a search asks Optuna   │    │  server, pidfd, process   │
    └──────────────┘            │ wait(deadline, signal pipe) ◀────┼─── │  group); Ray: a task      │
                                │   Began      clock starts        │    │                          │
                                │   Reports    history, live view, │    │        │ spec       ▲ messages
                                │              pruner: stop, cancel│    │        │            │
                                │   Result     recorded at once    │    │        ▼            │
                                │   Exited     judged, recorded ───┼─┐  │  trial process        │
                                │ deadlines: timeout ▶ cancel ▶    │ │  │  (sweeper.child):     │
                                │   SIGTERM grace ▶ cancel(hard)   │ │  │  caps, seeds, log,    │
                                │ signal pipe: Ctrl-C, SIGTERM     │ │  │  train(params)        │
                                └─────────────────────────────────┘ │  └──────────────────────────┘
                                     outcome.judge ◀─────────────────┘
                                          │ TrialResult, before the slot is reused
                                          ▼
                     Ledger (SQLite WAL, fsync) ──▶ outputs.recorded / .finished ──▶ results.csv, console

A trial's status is decided in one place, :func:`sweeper.model.outcome.judge`, from what the
engine gathered: its :class:`~sweeper.model.protocol.Result` (if any), the stop the engine
asked for (timeout, interrupted, pruned), and how its process ended (:class:`~sweeper.model.protocol.Exited`).

A search (:mod:`sweeper.run.search`) hooks in at two places: trials come from its
:class:`Feed` as places free, and each batch of per-epoch reports is offered to its
pruner (``prune``); a trial it names is stopped as ``pruned`` and cancelled like a
timed-out one (SIGTERM, then SIGKILL after the grace), so its GPU memory is freed at once.

Deadlines, one per running trial, of four kinds (:class:`Due`):

* ``TIMEOUT``: ``timeout`` seconds after the trial reached its process (:class:`Began`,
  the same moment on both backends); then the trial is stopped (``timeout``) and cancelled;
* ``STALL``: ``stall`` seconds after its last sign of life (its start, an epoch report);
  then its log is looked at: written since, the deadline moves on from that write; else
  the trial is stopped (``stalled``) and cancelled. Whichever of these two comes first is
  the running trial's deadline;
* ``EXIT``: ``EXIT_GRACE`` after it sent its result, by when its process should be gone;
  then it is cancelled (its result stands);
* ``KILL``: ``TERM_GRACE`` after a cancel (SIGTERM locally), by when it should have
  stopped; then it is cancelled hard (SIGKILL to everything it started).

A trial is in one :class:`Phase` from its start to its end, moved only along :data:`MOVES`
(any other move is a bug in the engine, refused with :class:`PhaseError`)::

           ┌──────────── moved ◀─────────┐   Began again before train (the fork watchdog):
           ▼                             │   at once on to RUNNING, with a new clock
      STARTING ──────── Began ────────▶ RUNNING
           │                             │
           ├──────────▶ STOPPING ◀───────┤   cancel (SIGTERM): timeout, exit grace, pruned, Ctrl-C
           │               │             │
           │               ▼             │
           └──────────▶ KILLED ◀─────────┘   cancel hard (SIGKILL): the grace ran out, a second
                                             Ctrl-C (two at once: from STARTING or RUNNING)

      STARTING, RUNNING, STOPPING, KILLED ──── Exited ───▶ ENDED   its process is gone (or the
                                                                  backend closed): no move on

The phase says where a trial is, not how it ended: its result (which may come in any phase
before ``ENDED``) and the stop the engine asked for are what the judge reads. A trial
stopped before it began (its files could not be written) stays ``STARTING``: no clock.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from sweeper.errors import SweepError
from sweeper.model import contract, outcome
from sweeper.model.protocol import (
    Admission,
    Backend,
    Began,
    Broken,
    Event,
    Exited,
    LoadFailed,
    PruneVerdict,
    Reports,
    Result,
    Unwritable,
)
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.results.constraints import Constraints
from sweeper.run.lifecycle import Callback
from sweeper.run.placement import Anywhere
from sweeper.store.ledger import Ledger, StorageError, storage_error
from sweeper.store.paths import log_tail
from sweeper.system import hostmem

log = logging.getLogger("sweeper")

#: Seconds between a cancel (SIGTERM) and a hard cancel (SIGKILL) of a trial.
TERM_GRACE = 5.0
#: Seconds a process may take to exit after it sent its result.
EXIT_GRACE = 10.0


#: A search's pruner: a trial reported epochs; a reason to prune it now, or None.
Prune = Callable[[TrialSpec, list[dict[str, Any]]], "str | None"]


class Feed(Protocol):
    """Trials made on demand, as places free (a search asks its sampler for each)."""

    @property
    def remaining(self) -> int:
        """How many more it will give (for standbys); 0 once it has given its last."""

    def next(self) -> TrialSpec | None:
        """The next trial to start; None when there is none any more."""


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


class Due(enum.Enum):
    """What happens when a trial's deadline passes."""

    TIMEOUT = "timeout"  #: it ran too long: stop it as ``timeout``, cancel it
    STALL = "stall"  #: no sign of life for ``stall`` seconds (if its log says none either): ``stalled``
    EXIT = "exit"  #: it sent its result but has not exited: cancel it
    KILL = "kill"  #: it was cancelled but has not stopped: cancel it hard


class Phase(enum.Enum):
    """Where a trial is, from its start to its end (the judge, not the phase, says how it
    ended); moved only along :data:`MOVES`."""

    STARTING = "starting"  #: started; its process has not begun (no clock yet)
    RUNNING = "running"  #: it reached its process (Began): its clock and timeout run
    STOPPING = "stopping"  #: cancelled (SIGTERM): cancelled hard if not gone after TERM_GRACE
    KILLED = "killed"  #: cancelled hard (SIGKILL): its end is due
    ENDED = "ended"  #: its process is gone: judged and recorded (unless the sweep failed)

    @property
    def cancelled(self) -> bool:
        """Whether the engine has cancelled it (asked it to stop, or ended it hard)."""
        return self in (Phase.STOPPING, Phase.KILLED)


#: The moves a trial may make, from each phase (see the module's diagram).
MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.STARTING: frozenset({Phase.RUNNING, Phase.STOPPING, Phase.KILLED, Phase.ENDED}),
    Phase.RUNNING: frozenset({Phase.STARTING, Phase.STOPPING, Phase.KILLED, Phase.ENDED}),
    Phase.STOPPING: frozenset({Phase.KILLED, Phase.ENDED}),
    Phase.KILLED: frozenset({Phase.ENDED}),
    Phase.ENDED: frozenset(),
}


class PhaseError(AssertionError):
    """A trial was moved where :data:`MOVES` does not allow: a bug in the engine, not in
    the sweep."""


@dataclass
class _Trial:
    """The engine's view of one running trial."""

    spec: TrialSpec
    started_at: str  #: ISO 8601, when it was started
    t0: float  #: monotonic; when it reached its process (from Began), else when started
    sign: float = 0.0  #: monotonic; its last sign of life (Began, an epoch report, a write to its log)
    phase: Phase = Phase.STARTING  #: where it is; moved by :meth:`to` only
    began: Began | None = None  #: where it was placed (once it began, or was stopped before)
    due: Due | None = None
    deadline: float | None = None
    stop: Status | None = None  #: the status the engine decided when it stopped it
    why: str = ""
    t1: float | None = None  #: monotonic; when its result came or it was stopped (its duration's end)
    result: Result | None = None
    early: TrialResult | None = None  #: recorded when its result arrived
    reported: bool = False  #: sent per-epoch reports (then a returned History is not used)
    epoch: int | None = None  #: the last epoch it reported
    epoch_metrics: dict[str, Any] = field(default_factory=dict)  #: what it reported then

    def to(self, phase: Phase) -> None:
        """Move it to ``phase``; a move :data:`MOVES` does not allow is refused."""
        if phase not in MOVES[self.phase]:
            raise PhaseError(f"trial {self.spec.trial_id} ({self.spec.name}) cannot move from "
                             f"{self.phase.name} to {phase.name}: a bug in sweeper's engine, "
                             "please report it")
        self.phase = phase

    def set_deadline(self, due: Due | None, at: float | None) -> None:
        self.due, self.deadline = due, at


class Engine:
    """Runs specs on a backend; every trial ends as one :class:`TrialResult` in the ledger."""

    def __init__(self, backend: Backend, ledger: Ledger, *, outputs: Callback | None = None,
                 prune: Prune | None = None, verdicts: bool = False, timeout: float | None = None,
                 retries: int = 0, stall: float | None = None, clock: Callable[[], float] = time.monotonic,
                 log_age: Callable[[TrialSpec], float | None] | None = None,
                 constraints: Constraints | None = None, trial_env: Mapping[str, str] | None = None,
                 run_id: str = "", max_failures: int | None = None, admission: Admission | None = None) -> None:
        """``admission``: which queued trial may start now (default: any, in the queue's
        order; :mod:`sweeper.run.placement`); ``outputs``: told each trial's start, reports, record and end (the sweep's
        :class:`~sweeper.run.lifecycle.Callbacks`); ``prune``: a search's pruner, offered
        each batch of reports; ``verdicts``: it may stop trials, so each report waits for
        its verdict (where the backend answers); ``stall``: seconds a running trial may
        go without a sign of life; ``log_age``: seconds since a trial's log was last
        written, None where it has none (default: from the file's modification time);
        ``constraints``: what an ok trial must meet (its row's ``feasible``); ``trial_env``:
        what every trial finds in its environment besides its own (determinism's switches);
        ``run_id``: the id of this run's record in the ledger, which each row names;
        ``max_failures``: stop taking new trials once this many in a row failed the same way
        (:class:`Streak`; 1: at the first failure)."""
        self.backend, self.ledger = backend, ledger
        self.admission: Admission = admission if admission is not None else Anywhere()
        self.trial_env = dict(trial_env or {})
        self.run_id = run_id
        self.constraints = constraints
        self.outputs = outputs if outputs is not None else Callback()
        self.prune, self.verdicts = prune, verdicts
        #: Seconds, for deadlines and durations: monotonic time; a test's fake clock
        #: (tests/test_engine_clock.py plays deadlines, graces, retries and Ctrl-C in it).
        self.clock = clock
        self.timeout, self.retries, self.stall = timeout, retries, stall
        self.streak = Streak(max_failures) if max_failures else None
        self.log_age = log_age if log_age is not None else log_file_age
        self.queue: deque[TrialSpec] = deque()
        self.feed: Feed | None = None
        self.trials: dict[str, _Trial] = {}
        self.started: set[str] = set()  #: ids of the trials started (retries count once)
        self.signals: list[int] = []
        #: The first failed ledger write: no new trial starts; running ones may finish.
        self.storage_error: StorageError | None = None
        #: Why an output stopped the sweep (:meth:`halt`): the sweep fails with it.
        self.halted: SweepError | None = None

    @property
    def taking_new(self) -> bool:
        """Whether queued trials may still start (no stop signal, the ledger writable, a place left)."""
        return (not self.signals and self.storage_error is None and self.halted is None
                and self.admission.exhausted is None and (self.streak is None or self.streak.stop is None))

    def halt(self, error: SweepError) -> None:
        """An output found that the sweep cannot go on (a named metric the first ok result
        lacks): no new trials; running ones are stopped as ``interrupted`` (they run on
        resume), and the sweep fails with ``error``. The first reason stands."""
        if self.halted is None:
            self.halted = error

    # -- the loop ---------------------------------------------------------------------

    def run(self, specs: Sequence[TrialSpec], feed: Feed | None = None) -> None:
        """Run every spec (and its retries), then what ``feed`` gives as places free, each
        to a recorded result; raise Interrupted on a signal, StorageError when the ledger
        could not be written, the SweepError an output stopped it with (:meth:`halt`)."""
        self.queue.extend(specs)
        self.feed = feed
        failed, seen, halting = True, 0, False
        self.backend.open()
        wake_r, wake_w = os.pipe()  # the signal handler's way to wake the loop
        os.set_blocking(wake_w, False)
        try:
            with _catch(self.signals, wake_w):
                while self.trials or (self._queued() and self.taking_new):
                    self._fill()
                    events = self.backend.wait(self._next_timeout(), wake_r,
                                               self._queued() if self.taking_new else 0)
                    if len(self.signals) > seen:  # Ctrl-C or SIGTERM came
                        seen = len(self.signals)
                        with contextlib.suppress(OSError):
                            os.read(wake_r, 1024)
                        # what trials said before the signal stands; a death seen with it
                        # is judged as stopped by it
                        self._handle([e for e in events if not isinstance(e[1], Exited)])
                        events = [e for e in events if isinstance(e[1], Exited)]
                        self._on_signal()
                    self._handle(events)
                    if self.halted is not None and not halting:
                        halting = True
                        self._stop_running(f"the sweep stopped: {str(self.halted).split('; ')[0]}")
                    if self.streak is not None and self.streak.stop is not None and not self.streak.told:
                        self._give_up(self.streak)
                    self._deadlines()
            failed = False
        finally:
            self._close(record_unfinished=not failed)
            os.close(wake_r)
            os.close(wake_w)
        if self.signals:
            raise Interrupted(self.signals[0])
        if self.storage_error is not None:
            raise self.storage_error
        if self.halted is not None:
            raise self.halted
        if self.admission.exhausted is not None and self._queued():
            raise SweepError(f"no place left for the {self._queued()} trials still queued: "
                             f"{self.admission.exhausted}; look at those trials' logs, then run the same "
                             "command again (finished trials are kept)")

    def _queued(self) -> int:
        return len(self.queue) + (self.feed.remaining if self.feed is not None else 0)

    def _next(self) -> TrialSpec | None:
        """The first queued trial the backend admits now (a search's next point, asked for
        when none waits; one that does not fit waits in the queue), or None."""
        order = self.admission.ranked(self.queue) if self.queue else None
        for i in order if order is not None else range(len(self.queue)):
            spec = self.queue[i]
            if self.admission.admits(spec):
                del self.queue[i]
                return spec
        if self.queue or self.feed is None or not self.feed.remaining:
            return None
        fed = self.feed.next()
        if fed is not None and not self.admission.admits(fed):
            self.queue.append(fed)
            return None
        return fed

    def _fill(self) -> None:
        while self._queued() and len(self.trials) < self.backend.traits.capacity and self.taking_new:
            spec = self._next()
            if spec is None:
                break
            spec = replace(spec, env={**spec.env, **self.trial_env, **contract.trial_env(spec)},
                           verdicts=self.verdicts and self.backend.traits.answers)
            trial = _Trial(spec, "", self.clock())
            self.trials[spec.trial_id] = trial
            began = self.backend.start(spec)
            trial.started_at = now_iso()
            self.started.add(spec.trial_id)
            self.store(self.ledger.clear_history, spec.trial_id)  # a new attempt's epochs replace the old ones
            if began is not None:
                self._began(trial, began)
            self.outputs.started(trial.spec)

    def _next_timeout(self) -> float | None:
        times = [t.deadline for t in self.trials.values() if t.deadline is not None]
        soonest = min(times) - self.clock() if times else None
        due = self.outputs.tick()
        if due is not None:
            soonest = due if soonest is None else min(soonest, due)
        return None if soonest is None else max(0.0, soonest)

    # -- events -------------------------------------------------------------------------

    def _handle(self, events: list[tuple[str, Event]]) -> None:
        """Events in order; a fault of the whole sweep is raised after the rest are in."""
        fault: SweepError | None = None
        prune: list[tuple[_Trial, str]] = []
        blameless: set[str] = set()  #: trials whose module failed to import: the sweep's fault, no row
        for trial_id, event in events:
            if isinstance(event, LoadFailed):  # every trial would fail alike
                fault = fault or load_error(event.error)
                blameless.add(trial_id)
                continue
            if isinstance(event, Broken):
                fault = fault or SweepError(event.error)
                continue
            trial = self.trials.get(trial_id)
            if trial is None or trial_id in blameless:  # (its exit may come in the same batch)
                continue
            if isinstance(event, Began):
                self._began(trial, event)
            elif isinstance(event, Reports):
                trial.reported, trial.sign = True, self.clock()  # a sign of life (the stall looks at it when due)
                self.history(trial, event.items)
                why = self.prune(trial.spec, event.items) if self.prune and event.items else None
                if trial.spec.verdicts:  # it waits for the verdict: answered at once
                    self.backend.tell(trial_id, PruneVerdict(why or ""))
                if why:
                    prune.append((trial, why))
            elif isinstance(event, Unwritable):
                self._unwritable(trial, event)
            elif isinstance(event, Result):
                self._result(trial, event)
            elif isinstance(event, Exited):
                self._exited(trial, event)
        for trial, why in prune:  # after the batch: a result that came with it stands
            if trial.phase is not Phase.ENDED and trial.stop is None and trial.result is None:
                if self._stop(trial, Status.PRUNED, why):
                    if trial.spec.verdicts:  # it stops by itself, at that epoch; if not, it is ended
                        trial.set_deadline(Due.EXIT, self.clock() + TERM_GRACE)
                    else:
                        self._cancel(trial, hard=False)
        if fault is not None:
            raise fault

    def _began(self, trial: _Trial, began: Began) -> None:
        """The trial reached its process: its clock starts; status shows it running. Told
        again with ``moved``: it was moved to a new process before ``train`` began there
        (the fork watchdog), so its clock starts again and the move is said."""
        if began.moved and trial.phase is Phase.RUNNING and trial.stop is None:
            log.warning("sweeper: trial %s: %s", trial.spec.name, began.moved)
            trial.to(Phase.STARTING)
            trial.began = None
            trial.set_deadline(None, None)
        if trial.phase is not Phase.STARTING or trial.stop is not None:
            if trial.began is None:  # stopped before it began: where it was placed, no clock
                trial.began = began
                trial.spec = replace(trial.spec, device=began.device)
            return
        trial.to(Phase.RUNNING)
        trial.began, trial.t0 = began, self.clock()
        trial.sign = trial.t0
        trial.spec = replace(trial.spec, device=began.device)
        if trial.due is None:
            self._watch(trial)
        self.store(self.ledger.mark_running, trial.spec, began.pid, trial.started_at, began.reserved_mb)

    def _unwritable(self, trial: _Trial, event: Unwritable) -> None:
        """A trial could not write its files: no new trial starts (as for the ledger). One
        that had not begun training is stopped as ``interrupted``: it runs on resume."""
        self._storage_failed(storage_error(event.path, event.error))
        if trial.result is None and trial.stop is None:
            trial.stop, trial.why = Status.INTERRUPTED, f"could not write {event.path} ({event.error})"
            trial.t1 = self.clock()

    def _result(self, trial: _Trial, result: Result) -> None:
        """The trial's own account: recorded at once (durable now, not when it has exited)."""
        if trial.result is not None:
            return
        if result.history and not trial.reported:  # train returned a Keras History
            self.history(trial, result.history)
        trial.result = result
        if trial.stop is None:
            trial.t1 = self.clock()
        trial.early = self._record_of(trial, Exited())
        self.store(self.ledger.record, trial.early)
        if not trial.phase.cancelled:
            trial.set_deadline(Due.EXIT, self.clock() + EXIT_GRACE)  # it should exit now

    def _exited(self, trial: _Trial, how: Exited) -> None:
        """The process is gone: judge the trial, record it, let its place be reused."""
        trial.to(Phase.ENDED)
        del self.trials[trial.spec.trial_id]
        result = self._record_of(trial, how)
        early = trial.early
        self.conclude(trial.spec, result, durable=early is None or early.status is not result.status)

    def _record_of(self, trial: _Trial, how: Exited) -> TrialResult:
        """The trial's row: the judge's verdict, and where and how long it ran."""
        spec = trial.spec
        began = trial.began or Began(0, "")
        pid = how.pid if how.pid is not None else began.pid
        tail: tuple[str, ...] = ()
        if trial.result is None and trial.stop is None:  # a crash: its last words
            tail = tuple(log_tail(spec.log_path, pid=pid)) if pid else ()  # this attempt's part
        verdict = outcome.judge(outcome.Ending(began, how, trial.result, trial.stop, trial.why, tail,
                                               trial.epoch_metrics))
        duration = (trial.t1 if trial.t1 is not None else self.clock()) - trial.t0
        if trial.stop is None and trial.result is not None and trial.result.duration_s is not None:
            duration = trial.result.duration_s
        row = TrialResult(
            trial_id=spec.trial_id, name=spec.name, index=spec.index, params=spec.params,
            status=verdict.status, metrics=verdict.metrics, seed=spec.seed,
            device=(how.device if how.device is not None else began.device) or "",  # "": it never had one
            started_at=trial.started_at, duration_s=duration, error=verdict.error, attempts=spec.attempt,
            pid=pid, exitcode=how.exitcode, log=spec.log_path, gpu_uuid=began.gpu_uuid,
            gpu_mem_cap_mb=how.cap_mb if how.cap_mb is not None else began.cap_mb,
            gpu_mem_reserved_mb=began.reserved_mb, gpu_mem_peak_mb=how.peak_mb, epoch_reached=trial.epoch,
            mem_peak_mb=hostmem.peak(how.mem_peak_mb, trial.result.mem_peak_mb if trial.result else None),
            env={**(trial.result.env if trial.result is not None else {}), **({"run": self.run_id} if self.run_id else {})},
            deterministic=True if spec.env.get(contract.DETERMINISTIC) == "1" else None,
        )
        return row if self.constraints is None else replace(row, feasible=self.constraints.feasible(row))

    # -- stopping -------------------------------------------------------------------------

    def _stop(self, trial: _Trial, status: Status, why: str) -> bool:
        """The engine stops a trial: whatever it returns afterwards, this is its status.
        A result it sent before the stop is read first, and stands. False once it ended."""
        self._handle(self.backend.drain(trial.spec.trial_id))
        if trial.phase is Phase.ENDED:
            return False
        if trial.result is None and trial.stop is None:
            trial.stop, trial.why, trial.t1 = status, why, self.clock()
        return True

    def _cancel(self, trial: _Trial, hard: bool) -> None:
        """Ask a trial to stop (``STOPPING``; ended hard after TERM_GRACE), or end it hard
        (``KILLED``). One asked already is asked again, its grace unchanged."""
        if hard:
            trial.to(Phase.KILLED)
            trial.set_deadline(None, None)
        elif not trial.phase.cancelled:
            trial.to(Phase.STOPPING)
            trial.set_deadline(Due.KILL, self.clock() + TERM_GRACE)
        self.backend.cancel(trial.spec.trial_id, hard)

    def _watch(self, trial: _Trial) -> None:
        """A running trial's deadline: its timeout or its stall, whichever comes first."""
        due: list[tuple[float, Due]] = []
        if self.timeout:
            due.append((trial.t0 + self.timeout, Due.TIMEOUT))
        if self.stall:
            due.append((trial.sign + self.stall, Due.STALL))
        at, what = min(due, key=lambda d: d[0]) if due else (None, None)
        trial.set_deadline(what, at)

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
                age = self.log_age(trial.spec)
                if age is not None:  # a write to its log is a sign of life too
                    trial.sign = max(trial.sign, now - max(age, 0.0))
                if now - trial.sign < self.stall:  # alive since the deadline was set
                    self._watch(trial)
                    continue
                why = (f"neither reported an epoch nor wrote to its log for {self.stall:g}s and was "
                       f"{self.backend.traits.stop_word}")
                if self._stop(trial, Status.STALLED, why):
                    self._cancel(trial, hard=False)
            elif trial.due is Due.EXIT:
                self._cancel(trial, hard=False)
            elif trial.due is Due.KILL:
                self._cancel(trial, hard=True)

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
        ``hard``: at once); no standby is needed any more."""
        for trial in list(self.trials.values()):
            if not self._stop(trial, Status.INTERRUPTED, why):
                continue
            if hard and trial.phase is not Phase.KILLED:
                self._cancel(trial, hard=True)
            elif not trial.phase.cancelled:
                self._cancel(trial, hard=False)

    def _close(self, record_unfinished: bool) -> None:
        """On every way out: nothing of a trial outlives the sweep. Trials that ended
        meanwhile are recorded; unfinished ones are ``interrupted``, unless the sweep
        itself failed (then no trial is to blame: they run next time)."""
        events = self.backend.close()
        for trial_id, event in events:
            trial = self.trials.get(trial_id)
            if trial is None or isinstance(event, (LoadFailed, Broken)):
                continue
            if isinstance(event, Exited) and trial.result is None and trial.stop is None:
                if not record_unfinished:
                    continue
                trial.stop, trial.why = Status.INTERRUPTED, "the sweep stopped while it ran"
            self._handle([(trial_id, event)])
        for trial in self.trials.values():  # the backend ended them: nothing of them runs
            trial.to(Phase.ENDED)
        self.trials.clear()

    # -- recording ------------------------------------------------------------------------

    def store(self, write: Callable[..., None], *args: Any, **kwargs: Any) -> bool:
        """A ledger write; on a full disk or a read-only folder the sweep stops taking new
        trials (running ones finish or stop as usual) and says so once, naming the file."""
        try:
            write(*args, **kwargs)
            return True
        except StorageError as exc:
            self._storage_failed(exc)
            return False

    def _storage_failed(self, exc: StorageError) -> None:
        """The first failed write of the sweep's files stops new trials; said once."""
        if self.storage_error is None:
            self.storage_error = exc
            log.warning("sweeper: %s; no new trials start", str(exc).split("; ")[0])

    def conclude(self, spec: TrialSpec, result: TrialResult, durable: bool = True) -> None:
        """Record a trial's outcome (before its place is reused), queue a retry, tell the view.
        A run again on other terms (the backend's ``again``) is an attempt, but spends none of
        ``retries``: they are for a failure that may not recur on the same terms."""
        again = self.admission.again(result)
        retry = result.status.retryable and spec.attempt - spec.first_attempt < self.retries
        retrying = self.taking_new and again is not None and (again or retry)
        if self.streak is not None and not retrying:  # a failure counts once its retries are spent
            self.streak.saw(result)
        stored = self.store(self.ledger.record, result, durable=durable)
        if retrying:
            self.queue.append(replace(spec, attempt=spec.attempt + 1, first_attempt=spec.first_attempt + bool(again)))
        if stored:  # the tables show what the ledger holds
            self.outputs.recorded(result)
        self.outputs.finished(result, retrying, stored)

    def history(self, trial: _Trial, items: list[dict[str, Any]]) -> None:
        """A trial's per-epoch reports: into the ledger and the view; its last epoch noted."""
        spec = trial.spec
        for item in items:
            if trial.epoch is None or item["epoch"] >= trial.epoch:
                trial.epoch, trial.epoch_metrics = item["epoch"], dict(item["metrics"])
        self.store(self.ledger.add_history, spec.trial_id, items)
        self.outputs.history()
        if items:
            self.outputs.reported(spec, items[-1]["epoch"], items[-1]["metrics"])


def log_file_age(spec: TrialSpec) -> float | None:
    """Seconds since the trial's log was last written (None: it has none here, as a Ray
    trial's, written when it ends)."""
    try:
        return time.time() - os.stat(spec.log_path).st_mtime
    except OSError:
        return None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
def _catch(signals: list[int], wake_fd: int) -> Iterator[None]:
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
