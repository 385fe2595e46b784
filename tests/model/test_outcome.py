"""The judge (sweeper.model.outcome): one table of what is known of an ended trial -> its status.

The end-to-end crash cases (real processes dying every way) are in test_failures.py;
this is the decision itself, for both backends and command trials."""

from __future__ import annotations

import signal

import pytest

from sweeper.model.metrics import BadResult
from sweeper.model.outcome import Ending, TrialFailed, command_exit, judge, raised, returned
from sweeper.model.protocol import Began, Exited, Result
from sweeper.model.trial import Status

CPU = Began(pid=10, device="cpu")
GPU = Began(pid=10, device="gpu:1", gpu_uuid="GPU-x", cap_mb=4800)
DONE = Result(Status.OK, {"acc": 0.9}, "", 1.5)
OOM_LOG = ("step 1", "2026 W tensorflow: OOM when allocating tensor with shape [4096,4096]")

CASES = [
    # (what is known, status, words the error must hold)
    (Ending(CPU, Exited(0), DONE), Status.OK, ""),
    (Ending(CPU, Exited(0), DONE, Status.TIMEOUT, "ran past the timeout of 2s and was killed"),
     Status.TIMEOUT, "timeout of 2s"),  # a stop wins over a late result...
    (Ending(CPU, Exited(-15), None, Status.INTERRUPTED, "stopped by SIGINT"), Status.INTERRUPTED, "SIGINT"),
    (Ending(CPU, Exited(0), Result(Status.ERROR, {}, "ValueError: bad")), Status.ERROR, "ValueError: bad"),
    (Ending(CPU, Exited(-signal.SIGSEGV)), Status.CRASHED, "died with SIGSEGV before returning a result"),
    # a batch scheduler's own limits (Slurm's TIMEOUT, OUT_OF_MEMORY), as its backend tells them
    (Ending(CPU, Exited(0, time_limit="Slurm's time limit (job 7)")), Status.TIMEOUT, "ran past Slurm's time limit"),
    (Ending(CPU, Exited(-9, oom_killed="Slurm's memory limit, job 7")), Status.OOM, "Slurm's memory limit"),
    (Ending(CPU, Exited(-signal.SIGKILL)), Status.CRASHED, "killed from outside"),
    (Ending(CPU, Exited(3), tail=("last words",)), Status.CRASHED, "exit code 3 before returning a result; last log line: last words"),
    (Ending(CPU, Exited(-signal.SIGABRT), tail=OOM_LOG), Status.OOM, "host memory ran out"),
    (Ending(GPU, Exited(1), Result(Status.OOM, {}, "ResourceExhaustedError: OOM")), Status.OOM,
     "a cap of 4800 MB on gpu:1"),
    # Ray: the backend's own words, with or without an exit code the trial told
    (Ending(CPU, Exited(None, note="NodeDiedError: node gone")), Status.CRASHED, "NodeDiedError: node gone"),
    (Ending(CPU, Exited(7, note="WorkerCrashedError")), Status.CRASHED,
     "died with exit code 7 before returning a result (WorkerCrashedError)"),
    (Ending(CPU, Exited(cancelled=True)), Status.INTERRUPTED, "cancelled"),
    (Ending(CPU, Exited(cancelled=True), None, Status.TIMEOUT, "ran past the timeout of 1s and was cancelled"),
     Status.TIMEOUT, "cancelled"),
]


@pytest.mark.unit
@pytest.mark.parametrize("ending, status, words", CASES)
def test_the_judge(ending, status, words):
    verdict = judge(ending)
    assert verdict.status is status
    assert words in verdict.error
    assert "\n" not in verdict.error and len(verdict.error) < 600


@pytest.mark.unit
def test_a_stop_keeps_partial_metrics_but_never_as_ok():
    verdict = judge(Ending(CPU, Exited(0), DONE, Status.TIMEOUT, "ran past the timeout"))
    assert verdict.status is Status.TIMEOUT and verdict.metrics == {"acc": 0.9}


@pytest.mark.unit
def test_control_characters_never_reach_the_table():
    verdict = judge(Ending(CPU, Exited(0), Result(Status.ERROR, {}, "bad\x1b[31m\r\nline")))
    assert "\x1b" not in verdict.error and "\n" not in verdict.error


@pytest.mark.parametrize("exc, status", [
    (ValueError("no"), Status.ERROR),
    (MemoryError(), Status.OOM),
    (RuntimeError("CUDA error: out of memory"), Status.OOM),
    (type("ResourceExhaustedError", (Exception,), {})("x"), Status.OOM),
    (TrialFailed(Status.CRASHED, "the command ended with exit code 2"), Status.CRASHED),
    (BadResult("metric 'a' is str"), Status.ERROR),
    (KeyboardInterrupt(), Status.ERROR),
])
@pytest.mark.unit
def test_what_train_raised(exc, status):
    assert raised(exc).status is status


@pytest.mark.unit
def test_what_train_returned():
    assert returned({"a": 1}).status is Status.OK
    bad = returned(None)
    assert bad.status is Status.ERROR and "no return statement" in bad.error


@pytest.mark.unit
def test_a_command_that_failed():
    assert command_exit(2, ["Traceback", "ValueError: x"]).status is Status.CRASHED
    oom = command_exit(-9, ["std::bad_alloc"])
    assert oom.status is Status.OOM and "SIGKILL" in oom.error
