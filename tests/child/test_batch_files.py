"""A batch job's files, both halves in the test's own process: the driver's answers to a job's
reports reach the run of the job that sent them, in order, and never a later run of it (a
job the scheduler started again); a run that waits without limit stops once its driver is gone."""

from __future__ import annotations

import os
import pickle
import time

import pytest

from sweeper.child import batch
from sweeper.child.batch import Answers, FileChannel, JobReader, write_job
from sweeper.model.protocol import Answer, Decision, Placed, Reports
from sweeper.model.trial import TrialSpec
from sweeper.store import paths

pytestmark = pytest.mark.unit

STOP, PAUSE = Answer(Decision.STOP, "pruned at epoch 2"), Answer(Decision.PAUSE, "paused at epoch 2")


def _job(tmp_path) -> tuple[str, FileChannel, JobReader]:
    """A trial's folder where a sweep's would be (``<sweep>/trials/<trial>``), its job written."""
    trial_dir = str(tmp_path / "sweep" / "trials" / "x=1")
    write_job(TrialSpec("t1", "x=1", 0, {"x": 1}, 1, trial_dir), None, {}, None)
    return trial_dir, FileChannel(paths.JobPaths(trial_dir).messages), JobReader(trial_dir)


def _run(n: int) -> Placed:
    return Placed(100 + n, "cpu", None, "node1", 1000.0 + n)


def _reports(epoch: int) -> Reports:
    return Reports([{"epoch": epoch, "metrics": {"loss": 1.0 / epoch}, "t": 0.0}])


def test_each_answer_reaches_the_run_that_asked_in_order(tmp_path):
    trial_dir, channel, reader = _job(tmp_path)
    first = _run(1)
    for message in (first, _reports(1), _reports(2)):
        channel.put(("t1", message))
    assert len(reader.messages()) == 3
    assert reader.answer(Answer()) and reader.answer(STOP)
    assert not reader.answer(PAUSE)  # no batch is waiting for it: nothing written
    answers = Answers(trial_dir, first)
    assert answers.receive(1.0) == Answer() and answers.receive(1.0) == STOP
    assert answers.receive(0.05) is None


def test_a_run_started_again_never_takes_an_earlier_runs_answers(tmp_path):
    """Slurm requeued the job after its first run sent a batch that was answered late: the
    answer names the first run, and the second run's own batch gets its own."""
    trial_dir, channel, reader = _job(tmp_path)
    first, second = _run(1), _run(2)
    for message in (first, _reports(1), second, _reports(1)):  # read together, in one look
        channel.put(("t1", message))
    reader.messages()
    assert reader.answer(STOP) and reader.answer(PAUSE)  # the first run's batch, then the second's
    assert Answers(trial_dir, second).receive(0.5) == PAUSE
    assert Answers(trial_dir, first).receive(0.5) == STOP


def test_a_new_attempts_job_starts_with_no_answers(tmp_path):
    trial_dir, channel, reader = _job(tmp_path)
    run = _run(1)
    channel.put(("t1", run))
    channel.put(("t1", _reports(1)))
    reader.messages()
    reader.answer(STOP)
    write_job(TrialSpec("t1", "x=1", 0, {"x": 1}, 1, trial_dir, attempt=2), None, {}, None)  # the next attempt
    assert os.path.getsize(paths.JobPaths(trial_dir).answers) == 0
    assert Answers(trial_dir, run).receive(0.05) is None


def test_a_frame_half_written_is_read_once_whole(tmp_path):
    trial_dir, channel, reader = _job(tmp_path)
    run = _run(1)
    data = pickle.dumps((run, STOP))
    with open(paths.JobPaths(trial_dir).answers, "ab") as f:
        f.write(batch._LENGTH.pack(len(data)) + data[:5])  # a network file system showed part of it
    answers = Answers(trial_dir, run)
    assert answers.receive(0.05) is None
    with open(paths.JobPaths(trial_dir).answers, "ab") as f:
        f.write(data[5:])
    assert answers.receive(0.5) == STOP


def test_a_run_waiting_without_limit_stops_waiting_once_its_driver_is_gone(tmp_path, monkeypatch):
    trial_dir, _, _ = _job(tmp_path)
    jobs = paths.SweepPaths(str(tmp_path / "sweep")).jobs
    os.makedirs(jobs)
    beat = os.path.join(jobs, paths.DRIVER_BEAT)
    with open(beat, "w") as f:
        f.write("login1 4242\n")
    stale = time.time() - batch.DRIVER_GONE_S - 5
    os.utime(beat, (stale, stale))  # its last beat, over a minute ago
    monkeypatch.setattr(batch, "BEAT_LOOK_S", 0.05)
    assert Answers(trial_dir, _run(1)).receive(None) is None  # returns: training goes on
    os.utime(beat)  # a driver that beats now
    answers = Answers(trial_dir, _run(1))
    os.remove(beat)  # and then ended (its heartbeat removed) while the run waited
    assert answers.receive(None) is None


def test_a_driver_that_takes_the_job_over_never_answers_a_batch_twice(tmp_path):
    """A driver killed after answering two of three batches: the next one reads every batch again
    (it adopts the job) and answers only the third, so the run's answers stay one per batch."""
    trial_dir, channel, reader = _job(tmp_path)
    run = _run(1)
    for message in (run, _reports(1), _reports(2)):
        channel.put(("t1", message))
    reader.messages()
    assert reader.answer(Answer()) and reader.answer(Answer())  # the killed driver's
    channel.put(("t1", _reports(3)))
    again = JobReader(trial_dir)  # the next driver, from the start of the job's messages
    assert len(again.messages()) == 4
    assert not again.answer(Answer()) and not again.answer(Answer())  # answered already: nothing written
    assert again.answer(STOP)  # the third batch's, its first answer
    answers = Answers(trial_dir, run)
    assert [answers.receive(0.5) for _ in range(3)] == [Answer(), Answer(), STOP]
    assert answers.receive(0.05) is None
