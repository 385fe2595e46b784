"""Why a sweep starts no new trial (sweeper.run.closing): one reason, held by the gate, each doing
what it does (which trials are stopped and how, what is said, how the sweep ends), and the order
in which reasons win when two come together.

The gate alone first; then each reason through the engine in fake time (the backend of
test_engine_clock.py, each trial's life a script of events at fake times)."""

from __future__ import annotations

import itertools
import logging
import os
import signal
from typing import Any

import pytest

from sweeper.errors import SweepError
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.protocol import Exited, Result, Traits
from sweeper.model.settings import Limits
from sweeper.model.trial import Status, TrialResult
from sweeper.placement.policy import Anywhere
from sweeper.run.closing import Closing, Gate, Interrupted
from sweeper.run.engine import Engine
from sweeper.run.planning import plan
from sweeper.run.ranking import Ranking
from sweeper.store.ledger import Ledger, StorageError
from test_engine_clock import Clock, Timed

pytestmark = pytest.mark.unit


class Exhausts(Anywhere):
    """Every trial may start until ``after`` trials have ended; then no place is left."""

    def __init__(self, after: int) -> None:
        self.after, self.ended = after, 0

    @property  # type: ignore[override]
    def exhausted(self) -> str | None:
        return "gpu:0: 3 trials in a row crashed there" if self.ended >= self.after else None

    def again(self, result: TrialResult) -> bool | None:
        self.ended += 1
        return False


def _failed(name: str = "t", error: str = "crashed: exit code 1") -> TrialResult:
    return TrialResult("id-" + name, name, 0, {}, Status.CRASHED, {}, error=error)


def _closed(gate: Gate, reason: Closing) -> None:
    """Close ``gate`` for ``reason``, each the way the engine does."""
    if reason is Closing.SIGNAL:
        gate.signals.append(signal.SIGTERM)
    elif reason is Closing.STORAGE:
        gate.close(reason, StorageError("could not write /x/ledger.db (disk full); free some space"))
    elif reason is Closing.HALTED:
        gate.close(reason, SweepError("no metric 'loss' in what trial t returned (acc); run again"))
    elif reason is Closing.EXHAUSTED:
        assert isinstance(gate.admission, Exhausts)
        gate.admission.ended = gate.admission.after
    else:
        gate.saw(_failed())


# -- the gate ---------------------------------------------------------------------------------

def test_an_open_gate_has_no_reason_and_the_sweep_finishes():
    gate = Gate(Exhausts(1), max_failures=1)
    assert gate.open and gate.reason is None and gate.reasons == [] and gate.unheeded() == []
    assert gate.end(queued=3) is SweepEnd.FINISHED


@pytest.mark.parametrize("reason", list(Closing))
def test_each_reason_closes_the_gate_alone(reason):
    gate = Gate(Exhausts(1), max_failures=1)
    _closed(gate, reason)
    assert not gate.open and gate.reason is reason and gate.reasons == [reason]
    assert gate.why(reason) is not None
    assert [r for r in Closing if r is not reason and gate.why(r) is not None] == []


@pytest.mark.parametrize("reason, raised, end", [
    (Closing.SIGNAL, Interrupted, None),
    (Closing.STORAGE, StorageError, None),
    (Closing.HALTED, SweepError, None),
    (Closing.EXHAUSTED, SweepError, SweepEnd.FINISHED),  # raised only while trials are queued
    (Closing.FAILURES, None, SweepEnd.FAILED),
])
def test_each_reason_ends_the_sweep_its_own_way(reason, raised, end):
    gate = Gate(Exhausts(1), max_failures=1)
    _closed(gate, reason)
    if raised is not None:
        with pytest.raises(raised) as caught:
            gate.end(queued=2)
        assert type(caught.value) is raised
    if reason is Closing.SIGNAL:
        assert caught.value.signum == signal.SIGTERM  # type: ignore[attr-defined]
    if reason is Closing.EXHAUSTED:
        assert str(caught.value).startswith("no place left for the 2 trials still queued: gpu:0: 3 trials")
    if end is not None:
        assert gate.end(queued=0) is end


@pytest.mark.parametrize("first, second", list(itertools.permutations(Closing, 2)))
def test_of_two_reasons_the_one_earlier_in_the_order_wins_whichever_came_first(first, second):
    gate = Gate(Exhausts(1), max_failures=1)
    _closed(gate, first)
    _closed(gate, second)
    winner = min(first, second, key=list(Closing).index)
    assert gate.reason is winner and gate.reasons == sorted({first, second}, key=list(Closing).index)
    expected: Any = {Closing.SIGNAL: Interrupted, Closing.STORAGE: StorageError, Closing.HALTED: SweepError,
                     Closing.EXHAUSTED: SweepError}.get(winner)
    if expected is None:
        assert gate.end(queued=2) is SweepEnd.FAILED
        return
    with pytest.raises(expected) as caught:
        gate.end(queued=2)
    assert type(caught.value) is expected
    if winner is Closing.EXHAUSTED:
        assert "no place left" in str(caught.value)


def test_the_order_the_reasons_win_in():
    assert list(Closing) == [Closing.SIGNAL, Closing.STORAGE, Closing.HALTED, Closing.EXHAUSTED, Closing.FAILURES]
    assert [r for r in Closing if r.stops_running] == [Closing.SIGNAL, Closing.HALTED, Closing.FAILURES]


def test_no_place_left_with_nothing_queued_gives_way_to_the_next_reason():
    gate = Gate(Exhausts(0), max_failures=1)
    assert gate.reason is Closing.EXHAUSTED and gate.end(queued=0) is SweepEnd.FINISHED
    gate.saw(_failed())
    assert gate.reason is Closing.EXHAUSTED and gate.end(queued=0) is SweepEnd.FAILED


def test_the_first_account_of_a_reason_stands():
    gate = Gate(Anywhere())
    first, later = StorageError("could not write a"), StorageError("could not write b")
    assert gate.close(Closing.STORAGE, first) and not gate.close(Closing.STORAGE, later)
    assert gate.why(Closing.STORAGE) is first
    gate.signals += [signal.SIGTERM, signal.SIGINT]
    assert gate.why(Closing.SIGNAL) == signal.SIGTERM


def test_a_halt_and_failures_in_a_row_are_each_acted_on_once_the_others_never():
    gate = Gate(Exhausts(0), max_failures=1)
    _closed(gate, Closing.SIGNAL)
    _closed(gate, Closing.STORAGE)
    assert gate.unheeded() == []  # a signal is acted on as it comes; the others stop no running trial
    _closed(gate, Closing.FAILURES)
    _closed(gate, Closing.HALTED)
    assert gate.unheeded() == [Closing.HALTED, Closing.FAILURES] and gate.unheeded() == []


def test_failures_in_a_row_close_the_gate_at_the_limit_only_the_same_way_and_once():
    gate = Gate(Anywhere(), max_failures=3)
    gate.saw(_failed("a"))
    gate.saw(_failed("b", error="error: ValueError"))  # another way: the streak starts again
    gate.saw(_failed("c", error="error: ValueError"))
    gate.saw(TrialResult("id-i", "i", 0, {}, Status.INTERRUPTED, {}))  # no failure, no end of the streak
    assert gate.open
    gate.saw(_failed("d", error="error: ValueError"))
    assert gate.why(Closing.FAILURES) == "3 trials in a row ended crashed with 'error: ValueError'"
    gate.saw(_failed("e", error="error: ValueError"))
    assert gate.why(Closing.FAILURES) == "3 trials in a row ended crashed with 'error: ValueError'"
    one = Gate(Anywhere(), max_failures=1)
    one.saw(TrialResult("id-o", "o", 0, {}, Status.OK, {}))
    assert one.open
    one.saw(_failed("f"))
    assert one.why(Closing.FAILURES) == "trial f ended crashed with 'crashed: exit code 1', the first failure"
    assert Gate(Anywhere()).streak is None


# -- each reason through the engine -----------------------------------------------------------

def _sweep(tmp_path: Any, lives: list[list[tuple[float, Any]]], n: int, capacity: int = 2,
           **engine: Any) -> tuple[Any, list[TrialResult | None], list[tuple[float, str, int]]]:
    """``n`` trials on ``capacity`` places: how the run ended (its SweepEnd, or what it raised),
    each trial's row (None: it never started), what the backend was asked (by trial index)."""
    backend = Timed(Clock(), lives)
    backend.traits = Traits(capacity, stop_word="killed")
    ledger = Ledger(str(tmp_path))
    specs = plan([{"x": i} for i in range(n)], str(tmp_path), seed=0)
    try:
        try:
            limits = Limits(failure_limit=engine.pop("max_failures", None))
            ended: Any = Engine(backend, ledger, clock=backend.clock, limits=limits, **engine).run(specs)
        except (SweepError, Interrupted) as exc:
            ended = exc
        rows = ledger.results()
    finally:
        ledger.close()
    index = {s.trial_id: i for i, s in enumerate(specs)}
    calls = [(round(t, 6), what, index[tid]) for t, what, tid in backend.calls]
    return ended, [rows.get(s.trial_id) for s in specs], calls


CRASH = [(1, Exited(1))]
LONG = [(50, Result(Status.OK, {"acc": 0.5}, "", None)), (50, Exited(0))]
OK_ACC = [(1, Result(Status.OK, {"acc": 0.9}, "", None)), (1, Exited(0))]


def test_failures_in_a_row_stop_the_running_trials_start_no_other_and_end_the_sweep_failed(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        ended, rows, calls = _sweep(tmp_path, [CRASH, LONG], n=3, max_failures=1)
    assert ended is SweepEnd.FAILED
    assert [r.status if r else None for r in rows] == [Status.CRASHED, Status.INTERRUPTED, None]
    assert rows[1] is not None and rows[1].error.startswith("the sweep stopped: trial ")
    assert rows[1].error.endswith("the first failure")
    assert calls == [(0, "start", 0), (0, "start", 1), (1, "SIGTERM", 1)]
    assert caplog.text.count("sweeper: stopping: trial ") == 1
    assert "1 queued trial (or retry) not started, 1 running stopped (interrupted)" in caplog.text


def test_a_halt_stops_the_running_trials_and_raises_its_error(tmp_path):
    ended, rows, calls = _sweep(tmp_path, [OK_ACC, LONG], n=3, ranking=Ranking("loss", "min", False))
    assert isinstance(ended, SweepError) and not isinstance(ended, StorageError)
    assert str(ended).startswith("no metric 'loss' in what trial ")
    assert [r.status if r else None for r in rows] == [Status.OK, Status.INTERRUPTED, None]
    assert rows[1] is not None and rows[1].error == f"the sweep stopped: {str(ended).split('; ')[0]}"
    assert calls == [(0, "start", 0), (0, "start", 1), (1, "SIGTERM", 1)]


def test_a_failed_write_lets_the_running_trials_finish_and_raises_it(tmp_path, monkeypatch, caplog):
    """The second trial's start cannot be written (the disk filled): the first, running, and the
    second finish as they would; no third starts; the failure is said once."""
    written = Ledger.mark_running

    def full_after_one(self: Ledger, *args: Any) -> None:
        if full_after_one.calls:  # type: ignore[attr-defined]
            raise StorageError(f"could not write {self.path} (No space left on device); free some space")
        full_after_one.calls += 1  # type: ignore[attr-defined]
        written(self, *args)

    full_after_one.calls = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(Ledger, "mark_running", full_after_one)
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        ended, rows, calls = _sweep(tmp_path, [LONG], n=3)
    assert isinstance(ended, StorageError)
    assert [r.status if r else None for r in rows] == [Status.OK, Status.OK, None]  # both ran to their end
    assert [what for _, what, _ in calls] == ["start", "start"]  # none stopped, no third
    assert caplog.text.count("; no new trials start") == 1


def test_no_place_left_lets_the_running_trials_finish_and_names_the_trials_still_queued(tmp_path):
    ended, rows, calls = _sweep(tmp_path, [OK_ACC, LONG], n=4, admission=Exhausts(1))
    assert isinstance(ended, SweepError)
    assert str(ended).startswith("no place left for the 2 trials still queued: gpu:0: 3 trials in a row crashed")
    assert [r.status if r else None for r in rows] == [Status.OK, Status.OK, None, None]
    assert [what for _, what, _ in calls] == ["start", "start"]


def test_a_halt_and_failures_in_the_same_batch_the_halt_wins(tmp_path, caplog):
    """Both come as two trials end together: the running one is stopped in the halt's words,
    failures in a row are still said, and the sweep raises the halt's error, not FAILED."""
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        ended, rows, calls = _sweep(tmp_path, [OK_ACC, CRASH, LONG], n=4, capacity=3, max_failures=1,
                                    ranking=Ranking("loss", "min", False))
    assert isinstance(ended, SweepError) and str(ended).startswith("no metric 'loss'")
    assert [r.status if r else None for r in rows] == [Status.OK, Status.CRASHED, Status.INTERRUPTED, None]
    assert rows[2] is not None and rows[2].error.startswith("the sweep stopped: no metric 'loss'")
    assert "sweeper: stopping: trial " in caplog.text
    assert calls[-1] == (1, "SIGTERM", 2) and [c for c in calls if c[1] == "SIGTERM"] == [(1, "SIGTERM", 2)]


def test_a_signal_after_a_failed_write_wins(tmp_path, monkeypatch):
    def full(self: Ledger, *args: Any) -> None:
        raise StorageError(f"could not write {self.path} (No space left on device)")

    monkeypatch.setattr(Ledger, "mark_running", full)
    backend = Timed(Clock(), [[(5, Exited(0))]])
    backend.on_wait = [lambda: os.kill(os.getpid(), signal.SIGINT)]  # after the write failed
    ledger = Ledger(str(tmp_path))
    try:
        with pytest.raises(Interrupted) as caught:
            Engine(backend, ledger, clock=backend.clock).run(plan([{"x": 0}, {"x": 1}], str(tmp_path), seed=0))
    finally:
        ledger.close()
    assert caught.value.signum == signal.SIGINT


def test_failures_in_a_row_with_no_place_left_and_nothing_queued_end_the_sweep_failed(tmp_path):
    ended, rows, _ = _sweep(tmp_path, [CRASH], n=1, max_failures=1, admission=Exhausts(1))
    assert ended is SweepEnd.FAILED and rows[0] is not None and rows[0].status is Status.CRASHED


def test_an_engine_with_no_reason_finishes(tmp_path):
    ended, rows, _ = _sweep(tmp_path, [OK_ACC], n=2, max_failures=1)
    assert ended is SweepEnd.FINISHED and [r.status for r in rows if r] == [Status.OK, Status.OK]
