"""The engine's contract with a backend, with a backend written for the test.

The engine (sweeper.run.engine) runs any backend that keeps the Backend protocol; these
tests drive it with one that hands out scripted events, to pin the orders that real
processes produce only by chance: a result and a Ctrl-C in the same wake-up, a fault
of the whole sweep in the same batch as a finished trial. The end-to-end versions of
everything else run real processes (test_failures.py)."""

from __future__ import annotations

import os
import signal

import pytest

from sweeper.run.engine import Engine
from sweeper.run.closing import Interrupted
from sweeper.errors import SweepError
from sweeper.store.ledger import Ledger
from sweeper.model.protocol import Began, Broken, Exited, LoadFailed, Result, Traits
from sweeper.run.planning import plan
from sweeper.model.trial import Status


class Scripted:
    """A backend whose first ``wait`` raises ``signal`` (if any) and returns ``events(ids)``."""

    traits = Traits(2, stop_word="killed")

    def __init__(self, events, send_signal=None):
        self.events, self.send_signal = events, send_signal
        self.ids: list[str] = []
        self.cancelled: list[tuple[str, bool]] = []
        self.waits = 0

    def open(self):
        pass

    def start(self, spec):
        self.ids.append(spec.trial_id)
        return Began(1000 + len(self.ids), "cpu")

    def wait(self, timeout, wake, queued):
        self.waits += 1
        assert self.waits < 20, "the engine kept waiting"
        if self.waits == 1:
            if self.send_signal:
                os.kill(os.getpid(), self.send_signal)
            events = self.events(self.ids)
            self.ended = {tid for tid, e in events if isinstance(e, Exited)}
            return events
        # afterwards, the cancelled ones die of their SIGTERM
        return [(tid, Exited(-15)) for tid, _ in self.cancelled if tid not in self.ended]

    def drain(self, trial_id):
        return []

    def cancel(self, trial_id, hard):
        self.cancelled.append((trial_id, hard))

    def close(self):
        return []


def _run(tmp_path, backend):
    ledger = Ledger(str(tmp_path))
    engine = Engine(backend, ledger)
    specs = plan([{"x": 1}, {"x": 2}], str(tmp_path), seed=0)
    try:
        with pytest.raises((Interrupted, SweepError)) as raised:
            engine.run(specs)
        return raised.value, ledger.results(), specs
    finally:
        ledger.close()


@pytest.mark.unit
def test_a_result_that_came_with_ctrl_c_stands(tmp_path):
    # trial 1 finished (its result and its exit are in the same wake-up as the signal);
    # trial 2 is running: only it is stopped
    def events(ids):
        return [(ids[0], Result(Status.OK, {"acc": 0.9}, "", 1.0)), (ids[0], Exited(0))]

    backend = Scripted(events, signal.SIGINT)
    stop, rows, specs = _run(tmp_path, backend)
    assert isinstance(stop, Interrupted)
    first, second = (rows[s.trial_id] for s in specs)
    assert first.status is Status.OK and first.metrics == {"acc": 0.9} and first.error == ""
    assert second.status is Status.INTERRUPTED and "SIGINT" in second.error
    assert (specs[1].trial_id, False) in backend.cancelled  # SIGTERM, not SIGKILL, after one Ctrl-C


@pytest.mark.unit
def test_a_death_that_came_with_ctrl_c_is_interrupted(tmp_path):
    def events(ids):
        return [(ids[0], Exited(-15)), (ids[1], Exited(-15))]

    stop, rows, specs = _run(tmp_path, Scripted(events, signal.SIGINT))
    assert isinstance(stop, Interrupted)
    assert {r.status for r in rows.values()} == {Status.INTERRUPTED}


@pytest.mark.unit
def test_a_fault_of_the_sweep_keeps_the_result_that_came_with_it(tmp_path):
    def events(ids):
        return [(ids[0], Result(Status.OK, {"acc": 0.5}, "", 1.0)), ("", Broken("the script lacks its guard")),
                (ids[0], Exited(0))]

    fault, rows, specs = _run(tmp_path, Scripted(events))
    assert isinstance(fault, SweepError) and "guard" in str(fault)
    assert rows[specs[0].trial_id].status is Status.OK  # recorded, not lost with the fault
    assert specs[1].trial_id not in rows  # no trial is to blame: it runs next time


@pytest.mark.unit
def test_a_trial_whose_module_failed_to_import_is_not_blamed_when_its_exit_comes_with_it(tmp_path):
    """A trial process sends LoadFailed and exits at once: both can reach the engine in
    one wake-up. The sweep's fault stands, and that trial has no row (it was recorded as
    crashed "with exit code 0", about one run in ten of test_standby_workers.py's end-to-end test)."""
    def events(ids):
        return [(ids[0], LoadFailed("ImportError: libcudart.so.12")), (ids[0], Exited(0))]

    fault, rows, specs = _run(tmp_path, Scripted(events))
    assert isinstance(fault, SweepError) and "libcudart" in str(fault)
    assert rows == {}  # no trial is to blame for the module


class Staged(Scripted):
    """A backend whose trials send their result in one wake-up and exit in the next."""

    def __init__(self, results, exits):
        super().__init__(lambda ids: [])
        self.stages = [results, exits]

    def wait(self, timeout, wake, queued):
        self.waits += 1
        assert self.waits < 20, "the engine kept waiting"
        return self.stages.pop(0)(self.ids) if self.stages else []


@pytest.mark.unit
@pytest.mark.parametrize("exit_how, status", [
    (Exited(3, peak_mb=123, mem_peak_mb=77, device="gpu:1"), Status.OK),  # died after its result: it stands
    (Exited(-9, peak_mb=123, mem_peak_mb=77, device="gpu:1"), Status.ERROR),
])
def test_a_result_is_judged_and_written_once_and_its_exit_adds_what_it_measured(tmp_path, monkeypatch,
                                                                                exit_how, status):
    """The verdict comes from the result, once; the exit only adds its
    exit code and peak memory to the row already on record (nothing re-judges it)."""
    from sweeper.model import outcome

    judged, written = [], []
    judge, record = outcome.judge, Ledger.record
    monkeypatch.setattr(outcome, "judge", lambda ending: judged.append(ending) or judge(ending))
    monkeypatch.setattr(Ledger, "record", lambda self, row, **kw: written.append(row) or record(self, row, **kw))
    said = Result(status, {"acc": 0.9}, "" if status is Status.OK else "ValueError: no", 1.0, mem_peak_mb=50)
    backend = Staged(lambda ids: [(ids[0], said)],
                     lambda ids: [(ids[0], exit_how)])
    ledger = Ledger(str(tmp_path))
    try:
        (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
        Engine(backend, ledger).run([spec])
        row = ledger.results()[spec.trial_id]
        assert not ledger.running()
    finally:
        ledger.close()
    assert len(judged) == 1 and judged[0].result is not None
    assert [r.status for r in written] == [status] and written[0].exitcode is None  # written when it came
    assert (row.status, row.metrics, row.duration_s) == (status, {"acc": 0.9}, 1.0)
    assert (row.exitcode, row.gpu_mem_peak_mb, row.mem_peak_mb, row.device) == (exit_how.exitcode, 123, 77, "gpu:1")


@pytest.mark.unit
def test_what_an_exit_measured_is_read_again_by_what_reads_rows_recorded_since(tmp_path):
    """The trackers read rows by their stamp: the exit's measures (its device, peak memory)
    renew it, so a look taken between the result and the exit is not the last word."""
    from dataclasses import replace

    from sweeper.model.trial import TrialResult

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    ledger = Ledger(str(tmp_path))
    early = TrialResult(trial_id=spec.trial_id, name="x=1", index=0, params={"x": 1}, status=Status.OK,
                        metrics={"loss": 1.0}, device="gpu:0")
    try:
        ledger.record(early)
        stamps: dict = {}
        rows, newest = ledger.recorded_since(None, stamps)
        assert rows[spec.trial_id].gpu_mem_peak_mb is None
        ledger.measured(replace(early, device="gpu:1", gpu_mem_peak_mb=4321, exitcode=0))
        again, _ = ledger.recorded_since(newest, stamps)
    finally:
        ledger.close()
    assert (again[spec.trial_id].device, again[spec.trial_id].gpu_mem_peak_mb) == ("gpu:1", 4321)
    assert again[spec.trial_id].metrics == {"loss": 1.0}


@pytest.mark.unit
def test_an_oom_the_kernel_then_ended_is_hinted_at_the_hosts_memory(tmp_path):
    """train raised MemoryError (its result: oom), then the kernel's OOM killer ended it: the
    status stands, and the hint names the host's memory, which only the exit tells."""
    backend = Staged(lambda ids: [(ids[0], Result(Status.OOM, {}, "MemoryError: Unable to allocate 30.0 GiB"))],
                     lambda ids: [(ids[0], Exited(-9, oom_killed="memory cgroup oom_kill 1"))])
    backend.start = lambda spec: backend.ids.append(spec.trial_id) or Began(10, "gpu:0", "GPU-x", 4800)
    ledger = Ledger(str(tmp_path))
    try:
        (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
        Engine(backend, ledger).run([spec])
        row = ledger.results()[spec.trial_id]
    finally:
        ledger.close()
    assert row.status is Status.OOM and "host memory ran out" in row.error, row.error
