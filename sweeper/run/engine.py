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
                                │ stopper: deadlines: timeout ▶    │ │  │  (sweeper.child):     │
                                │   cancel ▶ grace ▶ cancel(hard)  │ │  │  caps, seeds, log,    │
                                │ gate: signal pipe (Ctrl-C, ...), │ │  │  train(params)        │
                                │   a reason to start no new trial │ │  │                       │
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

The engine holds the queue, the running and paused trials and the loop; three collaborators,
each with its own state, do the rest:

* ``gate`` (:class:`~sweeper.run.closing.Gate`): whether a new trial may start; once not, the one
  reason why (:class:`~sweeper.run.closing.Closing`: a stop signal, a failed write, a halt, no
  place left, failures in a row, in the order they win), and how the sweep ends by it;
* ``stopper`` (:class:`~sweeper.run.stops.Stopper`): the deadlines, and how a trial is stopped
  and cancelled;
* ``recorder`` (:class:`~sweeper.run.recording.Recorder`): each trial's row, the ledger's
  writes, the ranking a result settles, the outputs told.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import deque
from dataclasses import replace
from typing import Callable, Mapping, Sequence

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
from sweeper.model.settings import Limits
from sweeper.model.lifecycle import Callback, SweepEnd
from sweeper.run.closing import Closing, Gate, catch_signals, load_error
from sweeper.run.phases import EXIT_GRACE, TERM_GRACE, Due, Phase, TrialState, log_file_age
from sweeper.placement.policy import Anywhere
from sweeper.run.ranking import Ranking
from sweeper.run.recording import Recorder
from sweeper.run.stops import Stopper
from sweeper.search.schedulers import Listed
from sweeper.store.ledger import Ledger, storage_error

log = logging.getLogger("sweeper")


class Engine:
    """Runs specs on a backend; every trial ends as one :class:`TrialResult` in the ledger."""

    def __init__(self, backend: Backend, ledger: Ledger, *, outputs: Callback | None = None,
                 limits: Limits = Limits(), clock: Callable[[], float] = time.monotonic,
                 log_age: Callable[[TrialSpec], float | None] | None = None,
                 constraints: Constraints | None = None, trial_env: Mapping[str, str] | None = None,
                 run_id: str = "", admission: Admission | None = None, ranking: Ranking | None = None) -> None:
        """``admission``: which queued trial may start now (default: any, in the queue's order;
        :mod:`sweeper.placement.policy`); ``outputs``: told each trial's start, reports, record and
        end (the sweep's :class:`~sweeper.model.lifecycle.Callbacks`); ``limits``: a trial's timeout,
        its stall (seconds a running trial may go without a sign of life), its retries, and the
        failures in a row that stop the sweep (:class:`~sweeper.run.closing.Streak`; 1: at the
        first failure); ``log_age``: seconds since a trial's log was last
        written, None where it has none (default: from the file's modification time);
        ``constraints``: what an ok trial must meet (its row's ``feasible``); ``trial_env``:
        what every trial finds in its environment besides its own (determinism's switches);
        ``run_id``: the id of this run's record in the ledger, which each row names; ``ranking``:
        settles what the folder ranks by from the results recorded (:mod:`sweeper.run.ranking`), which the
        engine records."""
        self.backend = backend
        self.admission: Admission = admission if admission is not None else Anywhere()
        self.trial_env = dict(trial_env or {})
        self.outputs = outputs if outputs is not None else Callback()
        #: Seconds, for deadlines and durations: monotonic time; a test's fake clock
        #: (tests/run/test_engine_clock.py plays deadlines, graces, retries and Ctrl-C in it).
        self.clock = clock
        self.retries = limits.retries
        self.queue: deque[TrialSpec] = deque()
        self.scheduler: Scheduler = Listed([])
        self.trials: dict[str, TrialState] = {}  #: the trials started and not ended, by id
        self.paused: dict[str, TrialState] = {}  #: trials the scheduler paused, by id (their process is gone)
        self.started: set[str] = set()  #: ids of the trials started (retries count once)
        self.gate = Gate(self.admission, limits.failure_limit)
        self.stopper = Stopper(backend, clock, self.handle, limits.timeout, limits.stall,
                               log_age if log_age is not None else log_file_age)
        self.recorder = Recorder(ledger, self.outputs, self.gate, clock, run_id, constraints, ranking)

    # -- the loop ---------------------------------------------------------------------

    def run(self, scheduler: Scheduler | Sequence[TrialSpec]) -> SweepEnd:
        """Run what the scheduler gives (specs: those, in order), with retries, each to a
        recorded result. Ends as the reason that closed the sweep says
        (:meth:`~sweeper.run.closing.Gate.end`): FINISHED, or FAILED (failures in a row); it
        raises Interrupted on a signal, StorageError when the ledger could not be written, the
        SweepError an output halted it with, or one saying no place is left."""
        self.scheduler = Listed(list(scheduler)) if isinstance(scheduler, Sequence) else scheduler
        self.queue.extend(self.scheduler.ahead())
        failed, seen = True, 0
        signals = self.gate.signals
        self.backend.open()
        wake_r, wake_w = os.pipe()  # the signal handler's way to wake the loop
        os.set_blocking(wake_w, False)
        try:
            with catch_signals(signals, wake_w):
                while self.trials or (self._queued() and self.gate.open):
                    self._fill()
                    if not self.trials and not self.queue:
                        break  # nothing runs and the scheduler gives nothing: it never will
                    due = self.outputs.tick()  # the outputs' own schedule (the tables' throttled writes)
                    events = self.backend.wait(self._next_timeout(due), wake_r,
                                               self._queued() if self.gate.open else 0)
                    if len(signals) > seen:  # Ctrl-C or SIGTERM came
                        seen = len(signals)
                        with contextlib.suppress(OSError):
                            os.read(wake_r, 1024)
                        # what trials said before the signal stands; a death seen with it
                        # is judged as stopped by it
                        self.handle([e for e in events if not isinstance(e[1], Exited)])
                        events = [e for e in events if isinstance(e[1], Exited)]
                        self._stop_running(Closing.SIGNAL, hard=len(signals) > 1)  # a second: at once
                    self.handle(events)
                    for reason in self.gate.unheeded():  # a halt, failures in a row: acted on once
                        self._stop_running(reason)
                    self.stopper.deadlines(self.trials.values())
            self._unresumed()
            failed = False
        finally:
            self._close(record_unfinished=not failed)
            os.close(wake_r)
            os.close(wake_w)
        return self.gate.end(self._queued())

    def _stop_running(self, reason: Closing, hard: bool = False) -> None:
        """Every running trial stopped as ``interrupted`` (it runs on resume; SIGTERM, then
        SIGKILL after the grace), for a reason that stops them: a stop signal (``hard``: a
        second one, SIGKILL at once), a halt, failures in a row (said in one line)."""
        why = self.gate.why(reason)
        if reason is Closing.SIGNAL:
            said = f"stopped by {signal.Signals(why).name}"
        elif reason is Closing.FAILURES:
            queued, running = self._queued(), len(self.trials)
            log.warning("sweeper: stopping: %s; %d queued trial%s not started, %d running stopped (interrupted); "
                        "fix it, then run the same command again (finished trials are kept)", why, queued,
                        " (or retry)" if queued == 1 else "s (or retries)", running)
            said = f"the sweep stopped: {why}"
        else:
            said = f"the sweep stopped: {str(why).split('; ')[0]}"
        self.stopper.stop_all(self.trials.values(), said, hard)

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
        while self._queued() and self.gate.open and (len(self.trials) < traits.capacity
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
                    self.recorder.anew(spec)
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

    def handle(self, events: list[tuple[str, Event]]) -> None:
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
                self.recorder.history(trial, event.items)
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
            elif not self.stopper.stop(trial, Status.PRUNED, answer.why):
                continue
            if trial.spec.verdicts:  # it stops by itself, at that epoch; if not, it is ended
                trial.set_deadline(Due.EXIT, self.clock() + TERM_GRACE)
            else:
                self.stopper.cancel(trial, hard=False)
        if fault is not None:
            raise fault

    def _began(self, trial: TrialState, began: Began) -> None:
        """The trial reached its process (:meth:`~sweeper.run.phases.TrialState.reached`);
        status shows it running."""
        if trial.reached(began, self.clock(), self.stopper.timeout, self.stopper.stall):
            self.recorder.running(trial, began)
            if self.backend.traits.queues:  # it waited in the backend's queue until now (its node says since when)
                self.outputs.started(trial.spec, since=began.at)

    def _requeued(self, trial: TrialState, event: Requeued) -> None:
        """It waits in the backend's queue again (said once): no clock, no deadline, until it
        begins again."""
        if trial.requeued():
            log.warning("sweeper: trial %s: %s", trial.spec.name, event.why)
            self.recorder.waiting(trial.spec)
            self.outputs.requeued(trial.spec, event.why)

    def _unwritable(self, trial: TrialState, event: Unwritable) -> None:
        """A trial could not write its files: no new trial starts (as for the ledger). One
        that had not begun training is stopped as ``interrupted``: it runs on resume."""
        self.recorder.failed(storage_error(event.path, event.error))
        if trial.result is None and trial.stop is None:
            trial.stop, trial.why = Status.INTERRUPTED, f"could not write {event.path} ({event.error})"
            trial.t1 = self.clock()

    def _result(self, trial: TrialState, result: Result) -> None:
        """The trial's own account: recorded at once (durable now, not when it has exited)."""
        if trial.result is not None:
            return
        if result.history and not trial.reported:  # train returned a Keras History
            self.recorder.history(trial, result.history)
        trial.result = result
        if trial.stop is None:
            trial.t1 = self.clock()
        if trial.pausing is None or result.status is Status.OK:  # (a paused one's is no result)
            self.recorder.early(trial)
        if not trial.phase.cancelled:
            trial.set_deadline(Due.EXIT, self.clock() + EXIT_GRACE)  # it should exit now

    def _exited(self, trial: TrialState, how: Exited) -> None:
        """The process is gone: judge the trial, record it, let its place be reused. One
        paused is not recorded: it waits, ``PAUSED``, for the scheduler to give it again."""
        del self.trials[trial.spec.trial_id]
        result = self.recorder.final(trial, how)
        if trial.pausing is not None and trial.stop is None and result.status is not Status.OK:
            trial.paused(self.clock())
            self.paused[trial.spec.trial_id] = trial
            self.recorder.waiting(trial.spec)
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
            self.handle([(trial_id, event)])
        for trial in self.trials.values():  # the backend ended them: nothing of them runs
            trial.to(Phase.ENDED)
        self.trials.clear()

    # -- a trial's end ---------------------------------------------------------------------

    def conclude(self, spec: TrialSpec, result: TrialResult, recorded: bool = False, last: bool = False) -> None:
        """Record a trial's outcome (before its place is reused; one ``recorded`` when its result
        came gains what its exit measured), queue a retry (not once the sweep is over:
        ``last``), tell the view. A run again on other terms (the backend's
        ``again``) is an attempt, but spends none of ``retries``: they are for a failure that
        may not recur on the same terms."""
        again = self.admission.again(result)
        retry = result.status.retryable and spec.attempt - spec.first_attempt < self.retries
        retrying = not last and self.gate.open and again is not None and (again or retry)
        if not retrying:  # a failure counts once its retries are spent
            self.gate.saw(result)
        stored = self.recorder.record(result, recorded)
        if retrying:
            fresh = {k: v for k, v in spec.env.items() if k != contract.RESUMED_EPOCH}  # a retry starts anew
            self.queue.append(replace(spec, attempt=spec.attempt + 1, first_attempt=spec.first_attempt + bool(again),
                                      env=fresh))
        self.scheduler.finished(result, retrying)
        self.outputs.finished(result, retrying, stored)

    def _unresumed(self) -> None:
        """Trials paused and never given again: ``interrupted`` (they run on resume)."""
        for trial in list(self.paused.values()):
            trial.stop, trial.why = Status.INTERRUPTED, f"{trial.pausing}; the sweep ended before it resumed"
            trial.to(Phase.ENDED)
            del self.paused[trial.spec.trial_id]
            self.conclude(trial.spec, self.recorder.row(trial), last=True)
