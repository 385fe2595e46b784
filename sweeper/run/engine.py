"""The engine: every trial of a sweep, from the queue to one recorded result.

The engine owns what does not depend on where trials run: the queue, retries, deadlines,
the stop signals (Ctrl-C, SIGTERM, SIGHUP), recording in the ledger, and telling the sweep's
outputs (:class:`sweeper.model.lifecycle.Callback`: the CSVs, the console, a search) what happened.
Where and how a trial runs is a backend's (:class:`~sweeper.model.protocol.Backend`, found by
name in :mod:`sweeper.backends.registry`); which queued trial may start now, and in what
order, the placement's it asks (:class:`~sweeper.model.protocol.Admission`:
:mod:`sweeper.placement.policy`).

Data flow of one sweep::

     sweep() / CLI               Engine (parent, one thread)             Backend
    ┌──────────────┐ TrialSpecs ┌─────────────────────────────────┐    ┌──────────────────────────┐
    │ grid → specs │──────────▶ │ queue ──▶ start(spec) ───────────┼──▶ │ local: a spawn process    │
    │ minus rows   │ a Scheduler│  admits? (the placement) ────────┼─── │  per trial (standby, fork │
    │ already ok   │ (grid,     │  a place free: scheduler.next()  │    │  server, pidfd, process   │
    └──────────────┘  search)   │ wait(deadline, signal pipe) ◀────┼─── │  group); Ray: a task      │
                                │   Began      clock starts        │    │                          │
                                │   Reports    history, live view, │    │        │ spec       ▲ messages
                                │     scheduler: go on, stop, pause│    │        │            │
                                │   Result     judged, recorded ───┼─┐  │        ▼            │
                                │   Exited     judged if no Result ┼─┤  │  trial process        │
                                │ deadlines: timeout ▶ cancel ▶    │ │  │  (sweeper.child):     │
                                │   SIGTERM grace ▶ cancel(hard)   │ │  │  caps, seeds, log,    │
                                │ signal pipe: Ctrl-C, SIGTERM     │ │  │  train(params)        │
                                └─────────────────────────────────┘ │  └──────────────────────────┘
                                     outcome.judge ◀─────────────────┘  (once per trial)
                                          │ TrialResult: written once; its exit adds what it measured
                                          ▼ (exit code, peak memory), before the slot is reused
                     Ledger (SQLite WAL, fsync) ──▶ outputs.recorded / .finished ──▶ results.csv, console

A trial's status is decided in one place, :func:`sweeper.model.outcome.judge`, from what the
engine gathered: its :class:`~sweeper.model.protocol.Result` (if any), the stop the engine
asked for (timeout, interrupted, pruned), and how its process ended (:class:`~sweeper.model.protocol.Exited`).
It is judged once: when its result comes (recorded then, durable, in case its process never
exits cleanly), else when its process is gone; nothing after a result changes a verdict.

Which trial runs next, and what each batch of per-epoch reports is answered, is the
:class:`~sweeper.model.protocol.Scheduler`'s (:mod:`sweeper.search.schedulers`: a grid, a search and its
pruner): a free place asks it for the next trial; a trial answered STOP is stopped as
``pruned`` and cancelled like a timed-out one (SIGTERM, then SIGKILL after the grace), so its
GPU memory is freed at once; one answered PAUSE leaves its process the same way, unrecorded
(``PAUSED``: its place is free), until the scheduler gives it again, to a fresh process.

A trial's deadlines (:class:`~sweeper.run.phases.Due`) and its phases
(:class:`~sweeper.run.phases.Phase`, moved only along the table ``MOVES``): :mod:`sweeper.run.phases`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.protocol import (
    Admission,
    Answer,
    Backend,
    Began,
    Broken,
    Decision,
    Event,
    Exited,
    LoadFailed,
    Pending,
    Reports,
    Requeued,
    Result,
    Scheduler,
    Unwritable,
)
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.model.constraints import Constraints
from sweeper.model.lifecycle import Callback
from sweeper.run.phases import EXIT_GRACE, TERM_GRACE, Due, Phase, TrialState, log_file_age
from sweeper.placement.policy import Anywhere
from sweeper.run.ranking import Ranking
from sweeper.search.schedulers import Listed
from sweeper.run.stops import Interrupted, Stopping, Streak, catch_signals, load_error
from sweeper.store.ledger import Ledger, StorageError, storage_error

log = logging.getLogger("sweeper")



class Engine(Stopping):
    """Runs specs on a backend; every trial ends as one :class:`TrialResult` in the ledger."""

    def __init__(self, backend: Backend, ledger: Ledger, *, outputs: Callback | None = None,
                 timeout: float | None = None,
                 retries: int = 0, stall: float | None = None, clock: Callable[[], float] = time.monotonic,
                 log_age: Callable[[TrialSpec], float | None] | None = None,
                 constraints: Constraints | None = None, trial_env: Mapping[str, str] | None = None,
                 run_id: str = "", max_failures: int | None = None, admission: Admission | None = None,
                 ranking: Ranking | None = None) -> None:
        """``admission``: which queued trial may start now (default: any, in the queue's order;
        :mod:`sweeper.placement.policy`); ``outputs``: told each trial's start, reports, record and
        end (the sweep's :class:`~sweeper.model.lifecycle.Callbacks`); ``stall``: seconds a running trial may
        go without a sign of life; ``log_age``: seconds since a trial's log was last
        written, None where it has none (default: from the file's modification time);
        ``constraints``: what an ok trial must meet (its row's ``feasible``); ``trial_env``:
        what every trial finds in its environment besides its own (determinism's switches);
        ``run_id``: the id of this run's record in the ledger, which each row names;
        ``max_failures``: stop taking new trials once this many in a row failed the same way
        (:class:`Streak`; 1: at the first failure); ``ranking``: settles what the folder ranks by
        from the results recorded (:mod:`sweeper.run.ranking`), which the engine records."""
        self.backend, self.ledger = backend, ledger
        self.admission: Admission = admission if admission is not None else Anywhere()
        self.trial_env = dict(trial_env or {})
        self.run_id = run_id
        self.constraints = constraints
        self.outputs = outputs if outputs is not None else Callback()
        self.ranking = ranking
        #: Seconds, for deadlines and durations: monotonic time; a test's fake clock
        #: (tests/test_engine_clock.py plays deadlines, graces, retries and Ctrl-C in it).
        self.clock = clock
        self.timeout, self.retries, self.stall = timeout, retries, stall
        self.streak = Streak(max_failures) if max_failures else None
        self.log_age = log_age if log_age is not None else log_file_age
        self.queue: deque[TrialSpec] = deque()
        self.scheduler: Scheduler = Listed([])
        self.trials: dict[str, TrialState] = {}
        self.paused: dict[str, TrialState] = {}  #: trials the scheduler paused, by id (their process is gone)
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

    def run(self, scheduler: Scheduler | Sequence[TrialSpec]) -> None:
        """Run what the scheduler gives (specs: those, in order), with retries, each to a
        recorded result; raise Interrupted on a signal, StorageError when the ledger
        could not be written, the SweepError an output stopped it with (:meth:`halt`)."""
        self.scheduler = Listed(list(scheduler)) if isinstance(scheduler, Sequence) else scheduler
        self.queue.extend(self.scheduler.ahead())
        failed, seen, halting = True, 0, False
        self.backend.open()
        wake_r, wake_w = os.pipe()  # the signal handler's way to wake the loop
        os.set_blocking(wake_w, False)
        try:
            with catch_signals(self.signals, wake_w):
                while self.trials or (self._queued() and self.taking_new):
                    self._fill()
                    if not self.trials and not self.queue:
                        break  # nothing runs and the scheduler gives nothing: it never will
                    due = self.outputs.tick()  # the outputs' own schedule (the tables' throttled writes)
                    events = self.backend.wait(self._next_timeout(due), wake_r,
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
            self._unresumed()
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
                             f"{self.admission.exhausted}; then run the same command again (finished trials "
                             "are kept)")

    def _queued(self) -> int:
        return len(self.queue) + self.scheduler.remaining

    def _next(self) -> TrialSpec | None:
        """The first queued trial the backend admits now (the scheduler's next, asked for
        when none waits; one that does not fit waits in the queue), or None."""
        order = self.admission.ranked(self.queue) if self.queue else None
        for i in order if order is not None else range(len(self.queue)):
            spec = self.queue[i]
            if self.admission.admits(spec):
                del self.queue[i]
                return spec
        if self.queue or not self.scheduler.remaining:
            return None
        fed = self.scheduler.next()
        if fed is not None and not self.admission.admits(fed):
            self.queue.append(fed)
            return None
        return fed

    def _fill(self) -> None:
        traits = self.backend.traits
        while self._queued() and self.taking_new and (len(self.trials) < traits.capacity
                                                        or (traits.queues and self.queue)):
            spec = self._next()
            if spec is None:
                break
            spec = replace(spec, env={**spec.env, **self.trial_env, **contract.trial_env(spec)},
                           verdicts=self.scheduler.waits and self.backend.traits.answers)
            trial = self.paused.pop(spec.trial_id, None)
            if trial is not None:  # the same trial in a fresh process: its epochs so far stand, and go on
                spec = replace(spec, env={**spec.env, contract.RESUMED_EPOCH: str(trial.epoch or 0)})
                trial.resume(spec, self.clock())
            else:
                trial = TrialState(spec, "", self.clock(), segments=spec.ran_before + 1)  # its start: at Began
                if contract.RESUMED_EPOCH not in spec.env:  # (one its scheduler resumes keeps its epochs)
                    self.store(self.ledger.clear_history, spec.trial_id)  # a new attempt's replace the old
            self.trials[spec.trial_id] = trial
            began = self.backend.start(spec)
            self.started.add(spec.trial_id)
            if began is not None:
                self._began(trial, began)
            if not traits.queues:
                self.outputs.started(trial.spec)

    def _next_timeout(self, due: float | None) -> float | None:
        """Seconds the loop may wait: until the soonest trial's deadline, or the outputs' next
        due work (``due``, as their :meth:`~sweeper.model.lifecycle.Callback.tick` said)."""
        times = [t.deadline for t in self.trials.values() if t.deadline is not None]
        soonest = min(times) - self.clock() if times else None
        if due is not None:
            soonest = due if soonest is None else min(soonest, due)
        return None if soonest is None else max(0.0, soonest)

    # -- events -------------------------------------------------------------------------

    def _handle(self, events: list[tuple[str, Event]]) -> None:
        """Events in order; a fault of the whole sweep is raised after the rest are in."""
        fault: SweepError | None = None
        answered: list[tuple[TrialState, Answer]] = []
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
                answer = self.scheduler.reported(trial.spec, event.items) if event.items else Answer()
                if trial.spec.verdicts:  # it waits for the answer: given at once
                    self.backend.tell(trial_id, answer)
                if answer.decision is not Decision.CONTINUE:
                    answered.append((trial, answer))
            elif isinstance(event, Unwritable):
                self._unwritable(trial, event)
            elif isinstance(event, Result):
                self._result(trial, event)
            elif isinstance(event, Exited):
                self._exited(trial, event)
            elif isinstance(event, Requeued):
                self._requeued(trial, event)
            elif isinstance(event, Pending):
                self.outputs.pending(trial.spec, event.why)
        for trial, answer in answered:  # after the batch: a result that came with it stands
            if trial.phase in (Phase.ENDED, Phase.PAUSED) or trial.stop or trial.result or trial.pausing:
                continue
            if answer.decision is Decision.PAUSE:
                trial.pausing = answer.why or "paused by the scheduler"
            elif not self._stop(trial, Status.PRUNED, answer.why):
                continue
            if trial.spec.verdicts:  # it stops by itself, at that epoch; if not, it is ended
                trial.set_deadline(Due.EXIT, self.clock() + TERM_GRACE)
            else:
                self._cancel(trial, hard=False)
        if fault is not None:
            raise fault

    def _began(self, trial: TrialState, began: Began) -> None:
        """The trial reached its process (:meth:`~sweeper.run.phases.TrialState.reached`);
        status shows it running."""
        if trial.reached(began, self.clock(), self.timeout, self.stall):
            self.store(self.ledger.mark_running, trial.spec, began, trial.started_at)
            if self.backend.traits.queues:  # it waited in the backend's queue until now (its node says since when)
                self.outputs.started(trial.spec, since=began.at)

    def _requeued(self, trial: TrialState, event: Requeued) -> None:
        """It waits in the backend's queue again (said once): no clock, no deadline, until it
        begins again."""
        if trial.requeued():
            log.warning("sweeper: trial %s: %s", trial.spec.name, event.why)
            self.store(self.ledger.not_running, trial.spec.trial_id)  # status: waiting, not running
            self.outputs.requeued(trial.spec, event.why)

    def _unwritable(self, trial: TrialState, event: Unwritable) -> None:
        """A trial could not write its files: no new trial starts (as for the ledger). One
        that had not begun training is stopped as ``interrupted``: it runs on resume."""
        self._storage_failed(storage_error(event.path, event.error))
        if trial.result is None and trial.stop is None:
            trial.stop, trial.why = Status.INTERRUPTED, f"could not write {event.path} ({event.error})"
            trial.t1 = self.clock()

    def _result(self, trial: TrialState, result: Result) -> None:
        """The trial's own account: recorded at once (durable now, not when it has exited)."""
        if trial.result is not None:
            return
        if result.history and not trial.reported:  # train returned a Keras History
            self.history(trial, result.history)
        trial.result = result
        if trial.stop is None:
            trial.t1 = self.clock()
        if trial.pausing is None or result.status is Status.OK:  # (a paused one's is no result)
            trial.early = trial.row(Exited(), self.clock(), self.run_id, self.constraints)
            trial.recorded = self.store(self.ledger.record, trial.early)
        if not trial.phase.cancelled:
            trial.set_deadline(Due.EXIT, self.clock() + EXIT_GRACE)  # it should exit now

    def _exited(self, trial: TrialState, how: Exited) -> None:
        """The process is gone: judge the trial, record it, let its place be reused. One
        paused is not recorded: it waits, ``PAUSED``, for the scheduler to give it again."""
        del self.trials[trial.spec.trial_id]
        result = trial.final(how, self.clock(), self.run_id, self.constraints)
        if trial.pausing is not None and trial.stop is None and result.status is not Status.OK:
            trial.paused(self.clock())
            self.paused[trial.spec.trial_id] = trial
            self.store(self.ledger.not_running, trial.spec.trial_id)
            self.outputs.paused(trial.spec, trial.pausing)
            self.scheduler.paused(trial.spec, trial.epoch)
            return
        trial.to(Phase.ENDED)
        self.conclude(trial.spec, result, recorded=trial.adds_only_measures(result))

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

    def conclude(self, spec: TrialSpec, result: TrialResult, recorded: bool = False, last: bool = False) -> None:
        """Record a trial's outcome (before its place is reused; one ``recorded`` when its result
        came gains what its exit measured), queue a retry (not once the sweep is over:
        ``last``), tell the view. A run again on other terms (the backend's
        ``again``) is an attempt, but spends none of ``retries``: they are for a failure that
        may not recur on the same terms."""
        again = self.admission.again(result)
        retry = result.status.retryable and spec.attempt - spec.first_attempt < self.retries
        retrying = not last and self.taking_new and again is not None and (again or retry)
        if self.streak is not None and not retrying:  # a failure counts once its retries are spent
            self.streak.saw(result)
        # (a row recorded when its result came stands, durable, even where its exit's measures failed to be)
        stored = self.store(self.ledger.measured if recorded else self.ledger.record, result) or recorded
        if retrying:
            fresh = {k: v for k, v in spec.env.items() if k != contract.RESUMED_EPOCH}  # a retry starts anew
            self.queue.append(replace(spec, attempt=spec.attempt + 1, first_attempt=spec.first_attempt + bool(again),
                                      env=fresh))
        if stored:  # the tables show what the ledger holds
            self._rank(result)
            self.outputs.recorded(result)
        self.scheduler.finished(result, retrying)
        self.outputs.finished(result, retrying, stored)

    def _rank(self, result: TrialResult) -> None:
        """What the folder ranks by, once a result settles it (recorded); a named metric the
        first successful result lacks stops the sweep (:meth:`halt`)."""
        said = self.ranking.seen([result], live=True) if self.ranking is not None else None
        if isinstance(said, SweepError):
            self.halt(said)
        elif said:
            self.store(self.ledger.put_facts, **said)

    def _unresumed(self) -> None:
        """Trials paused and never given again: ``interrupted`` (they run on resume)."""
        for trial in list(self.paused.values()):
            trial.stop, trial.why = Status.INTERRUPTED, f"{trial.pausing}; the sweep ended before it resumed"
            trial.to(Phase.ENDED)
            del self.paused[trial.spec.trial_id]
            self.conclude(trial.spec, trial.row(Exited(), self.clock(), self.run_id, self.constraints), last=True)

    def history(self, trial: TrialState, items: list[dict[str, Any]]) -> None:
        """A trial's per-epoch reports: into the ledger and the view; its last epoch noted."""
        spec = trial.spec
        trial.note_epochs(items)
        self.store(self.ledger.add_history, spec.trial_id, items)
        self.outputs.history()
        if items:
            self.outputs.reported(spec, items[-1]["epoch"], items[-1]["metrics"])


