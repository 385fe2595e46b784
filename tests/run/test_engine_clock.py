"""The engine's deadlines in fake time: timeouts, the SIGTERM grace, the exit grace, retries,
pruning and Ctrl-C, each to the second and in milliseconds of real time.

The engine (sweeper.run.engine) takes its clock as a parameter; here it is a number the test
moves, and the backend (:class:`Timed`) plays each trial's life as a script of events at
fake times, moving the clock to the next event or by the timeout the engine waits with.
What the backend was asked to do (start, SIGTERM, SIGKILL, a verdict) is noted with the
fake time it was asked at, so an ordering is asserted exactly; the same orderings with real
processes take tens of seconds each and are tested end to end in test_failures.py.

Every move of a trial between phases (sweeper.run.phases.Phase) is noted too (:func:`moves`),
and every trial of every test here must have ENDED; the races of a trial's end (a Ctrl-C
while it stops, a result after its kill, a prune and a result) show their paths."""

from __future__ import annotations

import heapq
import itertools
import os
import select
import signal
from typing import Any

import pytest

from sweeper.run import phases as phases_module
from sweeper.run.engine import Engine
from sweeper.run.phases import EXIT_GRACE, TERM_GRACE
from sweeper.run.closing import Interrupted
from sweeper.run.phases import Phase
from sweeper.store.ledger import Ledger
from sweeper.model.protocol import Answer, Began, Decision, Exited, Reports, Result, Traits
from sweeper.model.lifecycle import Callback, Callbacks, SweepEnd
from pausing import Pausing
from sweeper.run.planning import plan
from sweeper.search.schedulers import Listed
from sweeper.model.settings import Limits
from sweeper.model.trial import Status, TrialResult

pytestmark = pytest.mark.unit

T0 = 1000.0  # the fake clock's start


@pytest.fixture(autouse=True)
def moves(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every trial's moves between phases, as (the trial, from, to); once the test is over,
    every trial that moved has ENDED (its process gone, judged, recorded)."""
    seen: list[tuple[Any, Phase, Phase]] = []
    move = phases_module.TrialState.to

    def noted(trial: Any, phase: Phase) -> None:
        before = trial.phase
        move(trial, phase)
        seen.append((trial, before, phase))

    monkeypatch.setattr(phases_module.TrialState, "to", noted)
    yield seen
    trials = {id(t): t for t, _, _ in seen}.values()
    assert [t.phase for t in trials] == [Phase.ENDED] * len(trials)


def paths(moves: list[tuple[Any, Phase, Phase]]) -> list[list[str]]:
    """Each trial's phases (each attempt its own), in the order they first moved."""
    out: dict[int, list[str]] = {}
    for trial, before, after in moves:
        out.setdefault(id(trial), [before.name]).append(after.name)
    return list(out.values())


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Timed:
    """A backend in fake time. ``lives[i]``: the i-th started trial's script, ``(seconds
    after its start, event)``; a trial whose script ends without ``Exited`` runs on. On a
    SIGTERM (a soft cancel) a trial dies at once (``on_term="die"``) or runs on
    (``"ignore"``); on a SIGKILL it dies at once."""

    def __init__(self, clock: Clock, lives: list[list[tuple[float, Any]]], on_term: str = "die",
                 answers: bool = False) -> None:
        self.clock, self.lives, self.on_term = clock, lives, on_term
        self.traits = Traits(1, stop_word="killed", answers=answers)
        self.pending: list[tuple[float, int, str, Any]] = []
        self.order = itertools.count()
        self.calls: list[tuple[float, str, str]] = []  # (fake time, what, trial id)
        self.started: list[str] = []
        self.on_wait: list[Any] = []  # callables run at the start of the next waits, one each
        self.waits = 0

    def _at(self, t: float, tid: str, event: Any) -> None:
        heapq.heappush(self.pending, (t, next(self.order), tid, event))

    def open(self) -> None:
        pass

    def start(self, spec: Any) -> Began:
        life = self.lives[min(len(self.started), len(self.lives) - 1)]
        self.started.append(spec.trial_id)
        self.calls.append((self.clock.now - T0, "start", spec.trial_id))
        for dt, event in life:
            self._at(self.clock.now + dt, spec.trial_id, event)
        return Began(1000 + len(self.started), "cpu")

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Any]]:
        if self.on_wait:
            self.on_wait.pop(0)()
        if select.select([wake], [], [], 0)[0]:  # a signal woke the loop: at once, as a real backend
            return []
        self.waits += 1
        assert self.waits < 500 and len(self.calls) < 200, "the engine kept going"
        nxt = self.pending[0][0] if self.pending else None
        if nxt is None or (timeout is not None and self.clock.now + timeout < nxt):
            assert timeout is not None, "the engine would wait forever for a trial that never ends"
            self.clock.now += timeout
            return []
        self.clock.now = max(self.clock.now, nxt)
        events = []
        while self.pending and self.pending[0][0] <= self.clock.now:
            _, _, tid, event = heapq.heappop(self.pending)
            events.append((tid, event))
        return events

    def _forget(self, tid: str) -> None:
        self.pending = [p for p in self.pending if p[2] != tid]
        heapq.heapify(self.pending)

    def cancel(self, trial_id: str, hard: bool) -> None:
        self.calls.append((self.clock.now - T0, "SIGKILL" if hard else "SIGTERM", trial_id))
        if hard or self.on_term == "die":
            self._forget(trial_id)
            self._at(self.clock.now, trial_id, Exited(-9 if hard else -15))

    def tell(self, trial_id: str, message: Any) -> None:
        assert isinstance(message, Answer)
        said = "verdict" if message.decision is not Decision.PAUSE else "pause"
        self.calls.append((self.clock.now - T0, f"{said} {message.why!r}", trial_id))

    def drain(self, trial_id: str) -> list[Any]:
        return []

    def close(self) -> list[Any]:
        return []


class Pruned(Listed):
    """The trials given, each batch of reports answered by ``prune`` (a reason: STOP)."""

    def __init__(self, specs: Any, prune: Any, waits: bool) -> None:
        super().__init__(specs)
        self.prune, self.waits = prune, waits

    def reported(self, spec: Any, items: list[dict[str, Any]]) -> Answer:
        why = self.prune(spec, items)
        return Answer(Decision.STOP, why) if why else Answer()


def run(tmp_path: Any, backend: Timed, n: int = 1, prune: Any = None, verdicts: bool = False,
        **engine: Any) -> tuple[dict[str, TrialResult], list[Any]]:
    """Run ``n`` trials; their rows by spec order, and what the backend was asked, by trial
    index. ``prune``: answers each batch of reports (a reason: STOP), waited for (``verdicts``)."""
    ledger = Ledger(str(tmp_path))
    try:
        specs = plan([{"x": i} for i in range(n)], str(tmp_path), seed=0)
        limits = Limits(**{k: engine.pop(k) for k in ("timeout", "stall", "retries") if k in engine})
        Engine(backend, ledger, clock=backend.clock, limits=limits, **engine).run(
            Pruned(specs, prune, verdicts) if prune is not None else specs)
        rows = ledger.results()
        return [rows[s.trial_id] for s in specs], _named(backend, specs)
    finally:
        ledger.close()


def _named(backend: Timed, specs: list[Any]) -> list[tuple[float, str, int]]:
    index = {s.trial_id: i for i, s in enumerate(specs)}
    return [(round(t, 6), what, index[tid]) for t, what, tid in backend.calls]


def ok(acc: float = 0.9) -> Result:
    return Result(Status.OK, {"acc": acc}, "", None)


# -- timeouts and graces -----------------------------------------------------------------------

def test_a_trial_past_its_timeout_gets_sigterm_then_sigkill_after_the_grace(tmp_path):
    backend = Timed(Clock(), [[]], on_term="ignore")  # hangs, ignores SIGTERM
    (row,), calls = run(tmp_path, backend, timeout=30)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0), (30 + TERM_GRACE, "SIGKILL", 0)]
    assert row.status is Status.TIMEOUT and "ran past the timeout of 30s and was killed" in row.error
    assert row.duration_s == pytest.approx(30)  # to its stop, not to its death


def test_a_trial_that_obeys_sigterm_is_not_killed(tmp_path):
    (row,), calls = run(tmp_path, Timed(Clock(), [[]], on_term="die"), timeout=30)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0)]
    assert row.status is Status.TIMEOUT and row.exitcode == -15


def test_a_result_a_moment_before_the_timeout_stands(tmp_path):
    backend = Timed(Clock(), [[(29.9, ok()), (30.5, Exited(0))]])
    (row,), calls = run(tmp_path, backend, timeout=30)
    assert calls == [(0, "start", 0)]  # its result came first: no stop, no signal
    assert row.status is Status.OK and row.metrics == {"acc": 0.9}
    assert row.duration_s == pytest.approx(29.9)


def test_a_result_a_moment_after_the_timeout_is_too_late(tmp_path):
    # the stop came first: whatever the trial says afterwards, it timed out (a stop beats a result)
    backend = Timed(Clock(), [[(30.1, ok()), (30.2, Exited(0))]], on_term="ignore")
    (row,), calls = run(tmp_path, backend, timeout=30)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0)]
    assert row.status is Status.TIMEOUT


def test_a_process_that_lingers_after_its_result_is_ended_and_its_result_stands(tmp_path):
    backend = Timed(Clock(), [[(12, ok())]], on_term="ignore")  # sends its result, never exits
    (row,), calls = run(tmp_path, backend)
    assert calls == [(0, "start", 0), (12 + EXIT_GRACE, "SIGTERM", 0), (12 + EXIT_GRACE + TERM_GRACE, "SIGKILL", 0)]
    assert row.status is Status.OK and row.metrics == {"acc": 0.9} and row.duration_s == pytest.approx(12)


def test_no_timeout_means_no_deadline_while_it_trains(tmp_path):
    backend = Timed(Clock(), [[(86_400 * 3, ok()), (86_400 * 3, Exited(0))]])  # three days
    (row,), calls = run(tmp_path, backend)
    assert calls == [(0, "start", 0)] and row.status is Status.OK


# -- stalls: no epoch report and no write to the log for `stall` seconds ------------------------

def _log_written_at(clock: Clock, *times: float) -> Any:
    """A trial's log as the engine sees it: last written at the latest of ``times`` (fake
    seconds after T0) not after now; None (no log) before the first."""
    def age(spec: Any) -> float | None:
        past = [t for t in times if T0 + t <= clock.now]
        return clock.now - (T0 + max(past)) if past else None
    return age


def test_a_trial_silent_for_the_stall_is_stopped_as_stalled(tmp_path):
    clock = Clock()
    backend = Timed(clock, [[]], on_term="ignore")  # hangs, ignores SIGTERM
    (row,), calls = run(tmp_path, backend, stall=60, log_age=_log_written_at(clock))
    assert calls == [(0, "start", 0), (60, "SIGTERM", 0), (60 + TERM_GRACE, "SIGKILL", 0)]
    assert row.status is Status.STALLED and row.status.retryable and not row.status.succeeded
    assert "neither reported an epoch nor wrote to its log for 60s and was killed" in row.error


def test_each_epoch_report_is_a_sign_of_life(tmp_path):
    clock = Clock()
    life = [(50, _reports(1, 0.9)), (100, _reports(2, 0.8)), (150, _reports(3, 0.7))]  # then silent
    (row,), calls = run(tmp_path, Timed(clock, [life]), stall=60, log_age=_log_written_at(clock))
    assert calls == [(0, "start", 0), (210, "SIGTERM", 0)]
    assert row.status is Status.STALLED and row.epoch_reached == 3 and row.metrics == {"loss": 0.7}


def test_a_write_to_the_log_is_a_sign_of_life(tmp_path):
    clock = Clock()
    backend = Timed(clock, [[(200, ok()), (200, Exited(0))]])  # no epochs; its log written at 30 and 80
    (row,), calls = run(tmp_path, backend, stall=60, log_age=_log_written_at(clock, 0, 30, 80))
    # looked at 60 (written at 30: on to 90), at 90 (written at 80: on to 140), stalled at 140
    assert calls == [(0, "start", 0), (140, "SIGTERM", 0)]
    assert row.status is Status.STALLED


def test_a_trial_that_keeps_writing_its_log_is_never_stalled(tmp_path):
    clock = Clock()
    backend = Timed(clock, [[(200, ok()), (200, Exited(0))]])
    (row,), calls = run(tmp_path, backend, stall=60, log_age=_log_written_at(clock, *range(0, 200, 50)))
    assert calls == [(0, "start", 0)] and row.status is Status.OK


@pytest.mark.parametrize("timeout, stall, when, status", [(30, 60, 30, Status.TIMEOUT), (100, 20, 20, Status.STALLED)])
def test_the_timeout_or_the_stall_whichever_comes_first(tmp_path, timeout, stall, when, status):
    clock = Clock()
    (row,), calls = run(tmp_path, Timed(clock, [[]]), timeout=timeout, stall=stall, log_age=_log_written_at(clock))
    assert calls == [(0, "start", 0), (when, "SIGTERM", 0)] and row.status is status


def test_a_timeout_still_comes_while_the_trial_keeps_reporting(tmp_path):
    clock = Clock()
    life = [(t, _reports(t, 0.5)) for t in range(5, 100, 5)]
    (row,), calls = run(tmp_path, Timed(clock, [life]), timeout=42, stall=10, log_age=_log_written_at(clock))
    assert calls == [(0, "start", 0), (42, "SIGTERM", 0)] and row.status is Status.TIMEOUT


def test_a_stalled_trial_is_retried_with_a_clock_of_its_own(tmp_path):
    clock = Clock()
    backend = Timed(clock, [[], [(5, ok()), (5.1, Exited(0))]])
    (row,), calls = run(tmp_path, backend, stall=60, retries=1, log_age=_log_written_at(clock))
    assert calls == [(0, "start", 0), (60, "SIGTERM", 0), (60, "start", 0)]
    assert row.status is Status.OK and row.attempts == 2


# -- retries ---------------------------------------------------------------------------------

def test_a_timed_out_trial_is_retried_with_a_clock_of_its_own(tmp_path):
    backend = Timed(Clock(), [[], [(5, ok()), (5.1, Exited(0))]])
    (row,), calls = run(tmp_path, backend, timeout=30, retries=1)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0), (30, "start", 0)]
    assert row.status is Status.OK and row.attempts == 2 and row.duration_s == pytest.approx(5)


def test_a_retry_times_out_a_whole_timeout_after_its_own_start(tmp_path):
    (row,), calls = run(tmp_path, Timed(Clock(), [[(0.5, _reports(1, 0.9))], []]), timeout=30, retries=1)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0), (30, "start", 0), (60, "SIGTERM", 0)]
    assert row.status is Status.TIMEOUT and row.attempts == 2
    assert row.epoch_reached is None  # the first attempt's epochs are not the second's


def test_retries_run_out_and_the_last_timeout_is_recorded(tmp_path):
    (row,), calls = run(tmp_path, Timed(Clock(), [[]]), timeout=10, retries=2)
    assert [c for c in calls if c[1] == "start"] == [(0, "start", 0), (10, "start", 0), (20, "start", 0)]
    assert row.status is Status.TIMEOUT and row.attempts == 3


def test_an_error_is_not_retried(tmp_path):
    backend = Timed(Clock(), [[(1, Result(Status.ERROR, {}, "ValueError: bad", None)), (1, Exited(1))]])
    (row,), calls = run(tmp_path, backend, retries=3)
    assert [c[1] for c in calls] == ["start"] and row.status is Status.ERROR


def test_the_next_trial_starts_when_the_first_has_exited_not_when_it_was_stopped(tmp_path):
    backend = Timed(Clock(), [[], [(1, ok()), (1, Exited(0))]], on_term="ignore")
    rows, calls = run(tmp_path, backend, n=2, timeout=10)
    # one place: the second trial waits for the first's process to be gone (SIGKILL at 15)
    assert calls == [(0, "start", 0), (10, "SIGTERM", 0), (10 + TERM_GRACE, "SIGKILL", 0),
                     (10 + TERM_GRACE, "start", 1)]
    assert [r.status for r in rows] == [Status.TIMEOUT, Status.OK]


# -- pruning ---------------------------------------------------------------------------------

def _reports(epoch: int, loss: float) -> Reports:
    return Reports([{"epoch": epoch, "metrics": {"loss": loss}, "t": 0.0}])


def test_a_pruned_trial_is_stopped_at_once_and_killed_after_the_grace(tmp_path):
    verdicts = []

    def prune(spec, items):
        verdicts.append(items[-1]["epoch"])
        return "pruned by median at epoch 2" if items[-1]["epoch"] == 2 else None

    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (3, _reports(3, 0.7))]
    backend = Timed(Clock(), [life], on_term="ignore")
    (row,), calls = run(tmp_path, backend, prune=prune)
    assert calls == [(0, "start", 0), (2, "SIGTERM", 0), (2 + TERM_GRACE, "SIGKILL", 0)]
    assert row.status is Status.PRUNED and row.error == "pruned by median at epoch 2"
    assert verdicts[:2] == [1, 2]


def test_a_trial_that_waits_for_verdicts_and_stops_by_itself_is_not_signalled(tmp_path):
    def prune(spec, items):
        return "pruned at epoch 2" if items[-1]["epoch"] == 2 else None

    # told to stop at epoch 2, it raises out of report() and exits a moment later
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.1, Exited(0))]
    backend = Timed(Clock(), [life], on_term="ignore", answers=True)
    (row,), calls = run(tmp_path, backend, prune=prune, verdicts=True)
    assert calls == [(0, "start", 0), (1, "verdict ''", 0), (2, "verdict 'pruned at epoch 2'", 0)]
    assert row.status is Status.PRUNED and row.epoch_reached == 2 and row.error == "pruned at epoch 2"


def test_a_trial_that_waits_for_verdicts_and_does_not_stop_is_ended_after_the_grace(tmp_path):
    def prune(spec, items):
        return "pruned at epoch 2" if items[-1]["epoch"] == 2 else None

    # it hears each verdict; told to stop at epoch 2, it does not (a hung callback): ended
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8))]
    backend = Timed(Clock(), [life], on_term="ignore", answers=True)
    (row,), calls = run(tmp_path, backend, prune=prune, verdicts=True)
    assert calls == [(0, "start", 0), (1, "verdict ''", 0), (2, "verdict 'pruned at epoch 2'", 0),
                     (2 + TERM_GRACE, "SIGTERM", 0), (2 + 2 * TERM_GRACE, "SIGKILL", 0)]
    assert row.status is Status.PRUNED and row.epoch_reached == 2 and row.metrics == {"loss": 0.8}


def test_a_result_in_the_same_batch_as_the_prune_stands(tmp_path):
    judged = []

    def prune(spec, items):
        judged.append(items[-1]["epoch"])
        return "pruned"

    backend = Timed(Clock(), [[(3, _reports(3, 0.5)), (3, ok(0.7)), (3.2, Exited(0))]])
    (row,), calls = run(tmp_path, backend, prune=prune)
    assert judged == [3]  # the pruner said stop; the result that came with the report stands
    assert calls == [(0, "start", 0)]
    assert row.status is Status.OK and row.metrics["acc"] == 0.7


# -- a scheduler that pauses -----------------------------------------------------------------

def run_paused(tmp_path: Any, backend: Timed, scheduler: Pausing) -> tuple[TrialResult, list[Any], list[int]]:
    """One trial under ``scheduler``: its row, what the backend was asked, the epochs on record."""
    ledger = Ledger(str(tmp_path))
    try:
        scheduler.specs = plan([{"x": 0}], str(tmp_path), seed=0)
        Engine(backend, ledger, clock=backend.clock).run(scheduler)
        (row,) = ledger.results().values()
        assert ledger.running() == []
        return row, _named(backend, scheduler.specs), [e for e, _, _ in ledger.epochs(row.trial_id)]
    finally:
        ledger.close()


AFTER_THE_PAUSE = [(1, _reports(3, 0.6)), (2, _reports(4, 0.5)), (2.5, ok(0.95)), (2.6, Exited(0))]


def test_a_paused_trial_leaves_its_process_unrecorded_and_resumes_in_a_fresh_one(tmp_path, moves):
    # paused at epoch 2 (SIGTERM: it does not wait for answers), given again at once: epochs 3
    # and 4 in a second process, then its result; one row, every epoch kept, both runs' time
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (50, ok(0.1))]
    backend = Timed(Clock(), [life, AFTER_THE_PAUSE], on_term="die")
    scheduler = Pausing([], at=2)
    row, calls, epochs = run_paused(tmp_path, backend, scheduler)
    assert calls == [(0, "start", 0), (2, "SIGTERM", 0), (2, "start", 0)]
    assert row.status is Status.OK and row.metrics["acc"] == 0.95 and row.epoch_reached == 4
    assert row.duration_s == pytest.approx(4.5) and row.attempts == 1
    assert epochs == [1, 2, 3, 4]
    assert [e for _, e in scheduler.paused_at] == [2] and [r.status for r in scheduler.told] == [Status.OK]
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "PAUSED", "STARTING", "RUNNING", "ENDED"]]


def test_a_trial_that_waits_for_answers_hears_the_pause_and_leaves_by_itself(tmp_path, moves):
    # its own account of leaving (interrupted, "paused: ...") is no result: never recorded
    left = Result(Status.INTERRUPTED, {}, "paused: paused at epoch 2", None)
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.1, left), (2.2, Exited(0))]
    backend = Timed(Clock(), [life, AFTER_THE_PAUSE], on_term="ignore", answers=True)
    row, calls, epochs = run_paused(tmp_path, backend, Pausing([], at=2, waits=True))
    assert [what for _, what, _ in calls] == ["start", "verdict ''", "pause 'paused at epoch 2'", "start",
                                              "verdict ''", "verdict ''"]
    assert calls[3][0] == pytest.approx(2.2)
    assert row.status is Status.OK and row.metrics["acc"] == 0.95 and epochs == [1, 2, 3, 4]
    assert paths(moves) == [["STARTING", "RUNNING", "PAUSED", "STARTING", "RUNNING", "ENDED"]]


def test_a_paused_trial_never_given_again_is_recorded_interrupted_when_the_sweep_ends(tmp_path, moves):
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (50, ok(0.1))]
    backend = Timed(Clock(), [life], on_term="die")
    scheduler = Pausing([], at=2, resume=False)
    row, calls, epochs = run_paused(tmp_path, backend, scheduler)
    assert calls == [(0, "start", 0), (2, "SIGTERM", 0)]
    assert row.status is Status.INTERRUPTED and row.epoch_reached == 2 and epochs == [1, 2]
    assert row.error == "paused at epoch 2; the sweep ended before it resumed"
    assert row.duration_s == pytest.approx(2) and [r.status for r in scheduler.told] == [Status.INTERRUPTED]
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "PAUSED", "ENDED"]]


def test_ctrl_c_as_a_pausing_trial_leaves_records_it_interrupted_once(tmp_path, moves):
    # paused at 2 (SIGTERM); Ctrl-C comes before its exit is read, and the stop's drain reads
    # that exit: the trial is PAUSED by then, so it is not cancelled again; it is recorded
    # interrupted when the sweep ends, not resumed, once
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.05, Exited(-15))]
    backend = Piped(Clock(), [life], window=0.1, on_term="ignore")
    backend.on_wait = [lambda: None, lambda: None, lambda: os.kill(os.getpid(), signal.SIGINT)]
    scheduler = Pausing([], at=2)
    ledger = Ledger(str(tmp_path))
    try:
        scheduler.specs = plan([{"x": 0}], str(tmp_path), seed=0)
        with pytest.raises(Interrupted):
            Engine(backend, ledger, clock=backend.clock).run(scheduler)
        rows = list(ledger.results().values())
    finally:
        ledger.close()
    assert [what for _, what, _ in backend.calls] == ["start", "SIGTERM"]
    assert [(r.status, r.error) for r in rows] == [(Status.INTERRUPTED,
                                                    "paused at epoch 2; the sweep ended before it resumed")]
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "PAUSED", "ENDED"]]


def test_a_resumed_trial_is_told_the_epoch_it_was_paused_at_and_a_retry_is_not(tmp_path):
    told: list[str | None] = []

    class Noting(Timed):
        def start(self, spec: Any) -> Began:
            told.append(spec.env.get("SWEEPER_RESUMED_EPOCH"))
            return super().start(spec)

    crash = [(1, _reports(3, 0.6)), (2, Exited(-11))]  # the resumed process crashes: retried anew
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (50, ok(0.1))]
    backend = Noting(Clock(), [life, crash, AFTER_THE_PAUSE], on_term="die")
    ledger = Ledger(str(tmp_path))
    try:
        scheduler = Pausing(plan([{"x": 0}], str(tmp_path), seed=0), at=2)
        Engine(backend, ledger, clock=backend.clock, limits=Limits(retries=1)).run(scheduler)
    finally:
        ledger.close()
    assert told == [None, "2", None]


def test_a_result_in_the_same_batch_as_the_pause_stands_and_nothing_is_paused(tmp_path, moves):
    backend = Timed(Clock(), [[(2, _reports(2, 0.5)), (2, ok(0.7)), (2.2, Exited(0))]])
    scheduler = Pausing([], at=2)
    row, calls, _ = run_paused(tmp_path, backend, scheduler)
    assert calls == [(0, "start", 0)] and row.status is Status.OK and row.metrics["acc"] == 0.7
    assert scheduler.paused_at == [] and paths(moves) == [["STARTING", "RUNNING", "ENDED"]]


def test_a_trial_that_fails_while_pausing_is_paused_not_failed(tmp_path, moves):
    # told to pause, it dies on the SIGTERM with a crash of its own: it left, as asked; the
    # next process runs it on
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.1, Exited(-11))]
    backend = Timed(Clock(), [life, AFTER_THE_PAUSE], on_term="ignore")
    row, calls, _ = run_paused(tmp_path, backend, Pausing([], at=2))
    assert [what for _, what, _ in calls] == ["start", "SIGTERM", "start"]
    assert row.status is Status.OK and paths(moves)[0][3] == "PAUSED"


# -- Ctrl-C ----------------------------------------------------------------------------------

def test_ctrl_c_stops_running_trials_and_kills_them_after_the_grace(tmp_path):
    backend = Timed(Clock(), [[]], on_term="ignore")
    backend.on_wait = [lambda: os.kill(os.getpid(), signal.SIGINT)]
    with pytest.raises(Interrupted):
        run(tmp_path, backend, timeout=100)
    assert [(t, what) for t, what, _ in backend.calls] == [(0, "start"), (0, "SIGTERM"), (TERM_GRACE, "SIGKILL")]
    ledger = Ledger(str(tmp_path))
    try:
        (row,) = ledger.results().values()
    finally:
        ledger.close()
    assert row.status is Status.INTERRUPTED and "SIGINT" in row.error


def test_a_second_ctrl_c_kills_at_once(tmp_path):
    backend = Timed(Clock(), [[]], on_term="ignore")
    backend.on_wait = [lambda: os.kill(os.getpid(), signal.SIGINT), lambda: os.kill(os.getpid(), signal.SIGINT)]
    with pytest.raises(Interrupted):
        run(tmp_path, backend)
    assert [(t, what) for t, what, _ in backend.calls] == [(0, "start"), (0, "SIGTERM"), (0, "SIGKILL")]


# -- phases: the races of a trial's end ------------------------------------------------------

def _signal() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _only_row(tmp_path: Any) -> TrialResult:
    ledger = Ledger(str(tmp_path))
    try:
        (row,) = ledger.results().values()
        return row
    finally:
        ledger.close()


def test_the_paths_of_a_trial_that_ends_by_itself_and_one_that_times_out(tmp_path, moves):
    backend = Timed(Clock(), [[(1, ok()), (1, Exited(0))], []])
    rows, _ = run(tmp_path, backend, n=2, timeout=10)
    assert [r.status for r in rows] == [Status.OK, Status.TIMEOUT]
    assert paths(moves) == [["STARTING", "RUNNING", "ENDED"],
                            ["STARTING", "RUNNING", "STOPPING", "ENDED"]]


def test_ctrl_c_while_a_trial_is_stopping_leaves_its_stop_and_its_grace(tmp_path, moves):
    # timed out at 30 (SIGTERM, which it ignores), then Ctrl-C during the grace: the stop that
    # came first stands, the grace is not restarted, and no retry starts
    backend = Timed(Clock(), [[]], on_term="ignore")
    backend.on_wait = [lambda: None, _signal]
    with pytest.raises(Interrupted):
        run(tmp_path, backend, timeout=30, retries=1)
    assert [(t, what) for t, what, _ in backend.calls] == [(0, "start"), (30, "SIGTERM"),
                                                           (30 + TERM_GRACE, "SIGKILL")]
    row = _only_row(tmp_path)
    assert row.status is Status.TIMEOUT and "ran past the timeout of 30s" in row.error and row.attempts == 1
    assert row.duration_s == pytest.approx(30) and row.exitcode == -9
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "KILLED", "ENDED"]]


def test_a_second_ctrl_c_while_a_trial_is_stopping_kills_it_at_once(tmp_path, moves):
    backend = Timed(Clock(), [[]], on_term="ignore")
    backend.on_wait = [lambda: None, _signal, _signal]
    with pytest.raises(Interrupted):
        run(tmp_path, backend, timeout=30)
    assert [(t, what) for t, what, _ in backend.calls] == [(0, "start"), (30, "SIGTERM"), (30, "SIGKILL")]
    assert _only_row(tmp_path).status is Status.TIMEOUT
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "KILLED", "ENDED"]]


class StartsLate(Timed):
    """Its trials begin (Began) ``after`` seconds after their start, not at once."""

    def __init__(self, clock: Clock, lives: list[list[tuple[float, Any]]], after: float, **kw: Any) -> None:
        super().__init__(clock, lives, **kw)
        self.after = after

    def start(self, spec: Any) -> Any:
        began = super().start(spec)
        self._at(self.clock.now + self.after, spec.trial_id, began)
        return None


def test_ctrl_c_before_a_trial_began_stops_it_and_its_late_began_starts_no_clock(tmp_path, moves):
    backend = StartsLate(Clock(), [[]], after=1, on_term="ignore")
    backend.on_wait = [_signal]
    with pytest.raises(Interrupted):
        run(tmp_path, backend, timeout=30)
    # its Began (at 1, during the grace) says where it ran, and sets no timeout
    assert [(t, what) for t, what, _ in backend.calls] == [(0, "start"), (0, "SIGTERM"), (TERM_GRACE, "SIGKILL")]
    row = _only_row(tmp_path)
    assert row.status is Status.INTERRUPTED and row.device == "cpu" and row.duration_s is None  # it never ran
    assert paths(moves) == [["STARTING", "STOPPING", "KILLED", "ENDED"]]


def test_a_result_after_the_timeouts_sigterm_keeps_its_metrics_but_not_its_status(tmp_path, moves):
    # its SIGTERM handler stops training and returns: partial metrics, never ok
    backend = Timed(Clock(), [[(31, ok()), (31.5, Exited(0))]], on_term="ignore")
    (row,), calls = run(tmp_path, backend, timeout=30)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0)]  # its result set no exit grace: it is stopping
    assert row.status is Status.TIMEOUT and row.metrics == {"acc": 0.9} and row.duration_s == pytest.approx(30)
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "ENDED"]]


class SaysTooLate(Timed):
    """On a SIGKILL, a result the trial had sent is read with its death (it was in the pipe)."""

    def __init__(self, clock: Clock, lives: list[list[tuple[float, Any]]], late: Any, **kw: Any) -> None:
        super().__init__(clock, lives, **kw)
        self.late = late

    def cancel(self, trial_id: str, hard: bool) -> None:
        super().cancel(trial_id, hard)
        if hard:  # its death again, after the result
            self._forget(trial_id)
            self._at(self.clock.now, trial_id, self.late)
            self._at(self.clock.now, trial_id, Exited(-9))


def test_a_result_read_after_the_timeouts_kill_is_too_late(tmp_path, moves):
    backend = SaysTooLate(Clock(), [[]], late=ok(0.8), on_term="ignore")
    (row,), calls = run(tmp_path, backend, timeout=30)
    assert calls == [(0, "start", 0), (30, "SIGTERM", 0), (30 + TERM_GRACE, "SIGKILL", 0)]
    assert row.status is Status.TIMEOUT and row.metrics == {"acc": 0.8} and row.exitcode == -9
    assert row.duration_s == pytest.approx(30)
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "KILLED", "ENDED"]]


class Piped(Timed):
    """``drain`` reads what a trial sent up to ``window`` seconds later: messages already in
    its pipe when the engine stops it, which ``wait`` had not read yet."""

    def __init__(self, clock: Clock, lives: list[list[tuple[float, Any]]], window: float, **kw: Any) -> None:
        super().__init__(clock, lives, **kw)
        self.window = window

    def drain(self, trial_id: str) -> list[Any]:
        ready = sorted(p for p in self.pending if p[2] == trial_id and p[0] <= self.clock.now + self.window)
        self.pending = [p for p in self.pending if p not in ready]
        heapq.heapify(self.pending)
        return [(tid, event) for _, _, tid, event in ready]


def _prune_at_2(spec: Any, items: list[dict[str, Any]]) -> str | None:
    return "pruned at epoch 2" if items[-1]["epoch"] == 2 else None


def test_a_result_read_just_before_the_prunes_stop_stands(tmp_path, moves):
    # pruned at 2; its result, sent at 2.05, is read by the stop's drain: it stands (still
    # SIGTERMed, as a trial the pruner stopped)
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.05, ok(0.7)), (2.5, Exited(0))]
    backend = Piped(Clock(), [life], window=0.1, on_term="die")
    (row,), calls = run(tmp_path, backend, prune=_prune_at_2)
    assert calls == [(0, "start", 0), (2, "SIGTERM", 0)]
    assert row.status is Status.OK and row.metrics == {"acc": 0.7, "loss": 0.8} and row.duration_s == pytest.approx(2)
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "ENDED"]]


def test_a_result_just_after_the_prunes_stop_is_too_late(tmp_path, moves):
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.5, ok(0.7)), (3, Exited(0))]
    backend = Piped(Clock(), [life], window=0.1, on_term="ignore")
    (row,), calls = run(tmp_path, backend, prune=_prune_at_2)
    assert calls == [(0, "start", 0), (2, "SIGTERM", 0)]
    assert row.status is Status.PRUNED and row.error == "pruned at epoch 2"
    assert row.metrics == {"acc": 0.7, "loss": 0.8} and row.duration_s == pytest.approx(2)
    assert paths(moves) == [["STARTING", "RUNNING", "STOPPING", "ENDED"]]


def test_a_result_in_the_same_batch_as_the_prune_is_never_stopped(tmp_path, moves):
    backend = Timed(Clock(), [[(3, _reports(3, 0.5)), (3, ok(0.7)), (3.2, Exited(0))]])
    (row,), calls = run(tmp_path, backend, prune=lambda spec, items: "pruned")
    assert calls == [(0, "start", 0)] and row.status is Status.OK
    assert paths(moves) == [["STARTING", "RUNNING", "ENDED"]]


def test_a_result_after_a_verdict_to_stop_is_pruned_and_the_trial_never_cancelled(tmp_path, moves):
    # told to stop at epoch 2, it returns what it had and exits: stopped, never signalled
    life = [(1, _reports(1, 0.9)), (2, _reports(2, 0.8)), (2.1, ok(0.7)), (2.2, Exited(0))]
    backend = Timed(Clock(), [life], on_term="ignore", answers=True)
    (row,), calls = run(tmp_path, backend, prune=_prune_at_2, verdicts=True)
    assert [what for _, what, _ in calls] == ["start", "verdict ''", "verdict 'pruned at epoch 2'"]
    assert row.status is Status.PRUNED and row.metrics == {"acc": 0.7, "loss": 0.8}
    assert paths(moves) == [["STARTING", "RUNNING", "ENDED"]]


def test_a_trial_moved_to_a_new_process_goes_back_to_starting_and_its_clock_restarts(tmp_path, moves):
    moved = Began(2001, "cpu", moved="moved to a fresh process: the fork hung")
    backend = Timed(Clock(), [[(5, moved)]], on_term="die")
    (row,), calls = run(tmp_path, backend, timeout=30)
    assert calls == [(0, "start", 0), (35, "SIGTERM", 0)]  # 30 s after the move
    assert row.status is Status.TIMEOUT and row.duration_s == pytest.approx(30) and row.pid == 2001
    assert paths(moves) == [["STARTING", "RUNNING", "STARTING", "RUNNING", "STOPPING", "ENDED"]]


# -- what the outputs hear (sweeper.model.lifecycle) ---------------------------------------------------

class Heard(Callback):
    """Every call an output gets, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def started(self, spec: Any) -> None:
        self.calls.append(("started", spec.params["x"], spec.attempt))

    def reported(self, spec: Any, epoch: int, metrics: dict[str, Any]) -> None:
        self.calls.append(("reported", spec.params["x"], epoch))

    def history(self) -> None:
        self.calls.append(("history",))

    def recorded(self, result: TrialResult) -> None:
        self.calls.append(("recorded", result.params["x"], result.status.value))

    def finished(self, result: TrialResult, retrying: bool, kept: bool = True) -> None:
        self.calls.append(("finished", result.params["x"], result.status.value, retrying))


def test_the_outputs_hear_each_start_report_record_and_end_in_order_a_retry_included(tmp_path):
    backend = Timed(Clock(), [[(1, _reports(1, 0.5)), (2, ok()), (2, Exited(0))],
                              [(1, Exited(-11))],  # a segfault: crashed, retried
                              [(1, ok()), (1, Exited(0))]])
    heard = Heard()
    rows, _ = run(tmp_path, backend, n=2, outputs=heard, retries=1)
    assert [r.status for r in rows] == [Status.OK, Status.OK]
    assert heard.calls == [
        ("started", 0, 1), ("history",), ("reported", 0, 1), ("recorded", 0, "ok"), ("finished", 0, "ok", False),
        ("started", 1, 1), ("recorded", 1, "crashed"), ("finished", 1, "crashed", True),
        ("started", 1, 2), ("recorded", 1, "ok"), ("finished", 1, "ok", False)]


def test_the_engine_waits_no_longer_than_an_outputs_tick_asks():
    class Due(Callback):
        def __init__(self, wait: float | None) -> None:
            self.wait = wait

        def tick(self) -> float | None:
            return self.wait

    assert Callbacks([Due(None), Due(3.0), Due(1.5)]).tick() == 1.5
    assert Callbacks([Due(None)]).tick() is None and Callbacks().tick() is None


def test_every_output_is_ended_even_when_one_fails_and_the_first_failure_is_raised():
    ended: list[str] = []

    class Ends(Callback):
        def __init__(self, name: str, fails: bool = False) -> None:
            self.name, self.fails = name, fails

        def end(self, state: SweepEnd) -> None:
            ended.append(f"{self.name} {state.value}")
            if self.fails:
                raise OSError(f"{self.name} could not flush")

    with pytest.raises(OSError, match="a could not flush"):
        Callbacks([Ends("a", fails=True), Ends("b", fails=True), Ends("c")]).end(SweepEnd.INTERRUPTED)
    assert ended == ["a interrupted", "b interrupted", "c interrupted"]
