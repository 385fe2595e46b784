"""The Slurm backend's decisions, in the test's own process (no Slurm needed): how many held
trials go in the next array, how a task that returned nothing is judged, its options; and
the engine's side of a backend with a queue of its own (``Traits.queues``)."""

from __future__ import annotations

import pytest

from sweeper.backends.slurm.commands import Ended
from sweeper.backends.slurm.options import SlurmOptions
from sweeper.backends.slurm.rules import SHARED_GRACE_S, Task, array_size, how_it_ended, unshared
from sweeper.errors import SweepError
from sweeper.model import outcome
from sweeper.model.protocol import Began, Exited, Result, Traits
from sweeper.model.trial import Status
from sweeper.run.engine import Engine
from sweeper.run.lifecycle import Callback
from sweeper.run.planning import plan
from sweeper.store.ledger import Ledger

pytestmark = pytest.mark.unit

# held, unfinished, workers, MaxArraySize -> how many go now, as one array
ARRAYS = [
    (100, 0, 4, 1001, 100),  # the grid, all at once: Slurm throttles it to 4 (%4)
    (2500, 0, 4, 1001, 1001),  # split at MaxArraySize
    (1499, 1001, 4, 1001, 0),  # the rest waits while the first array has 4 or more unfinished
    (1499, 3, 4, 1001, 1),  # and fills the places it frees
    (1, 4, 4, 1001, 0),  # a retry never makes them more than workers
    (5, 2, 4, 1001, 2),
    (0, 0, 4, 1001, 0),
]


@pytest.mark.parametrize("held, unfinished, k, most, expected", ARRAYS)
def test_how_many_held_trials_go_in_the_next_array(held, unfinished, k, most, expected):
    assert array_size(held, unfinished, k, most) == expected


def _judged(ended: Ended, code, cancelled=False, stop=None):
    how = how_it_ended("7_1", "node3", "/out/.jobs/a_1.out", cancelled, ended, code)
    began = Began(42, "cpu@node3", job="7_1")
    return outcome.judge(outcome.Ending(began, how, None, stop, "stopped by SIGINT" if stop else "", ()))


# what Slurm says of a task that returned nothing -> the row's status and its words
ENDINGS = [
    (Ended("TIMEOUT", -15), None, Status.TIMEOUT, "Slurm's time limit (job 7_1 on node3)"),
    (Ended("OUT_OF_MEMORY", -9), None, Status.OOM, "Slurm's memory limit, job 7_1 on node3"),
    (Ended("CANCELLED", -15), None, Status.CRASHED, "cancelled from outside the sweep"),
    (Ended("NODE_FAIL", None), None, Status.CRASHED, "NODE_FAIL on node3 and was not requeued"),
    (Ended("PREEMPTED", -15), None, Status.CRASHED, "PREEMPTED on node3 and was not requeued"),
    (Ended("FAILED", 3), None, Status.CRASHED, "exit code 3"),
    (Ended("FAILED", -11), None, Status.CRASHED, "SIGSEGV"),
    (Ended("UNKNOWN", None), None, Status.CRASHED, "Slurm no longer says how it ended (see /out/.jobs/a_1.out)"),
    # cancelled by the sweep (Ctrl-C): the sweep's reason stands, whatever Slurm says
    (Ended("CANCELLED", -15), Status.INTERRUPTED, Status.INTERRUPTED, "SIGINT"),
]


@pytest.mark.parametrize("ended, stop, status, words", ENDINGS)
def test_what_slurm_says_of_a_task_is_judged_as_sweepers_own(ended, stop, status, words):
    verdict = _judged(ended, ended.exitcode, cancelled=stop is not None, stop=stop)
    assert verdict.status is status and words in verdict.error, verdict


def test_a_sweep_folder_the_nodes_do_not_share_stops_the_sweep_in_one_line(tmp_path):
    """Slurm ran a task; its output file (slurmd makes it as the task starts) never shows here."""
    from sweeper.child.batch import JobReader
    from sweeper.run.planning import plan

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    task = Task(spec, JobReader(spec.dir), job="7_0", output=str(tmp_path / "a_0.out"), seen=100.0)
    assert unshared([task], 100.0 + SHARED_GRACE_S - 1, "/sweep") is False  # not yet: a slow file system
    with pytest.raises(SweepError, match="Slurm ran job 7_0, but nothing it wrote shows in /sweep here: the "
                                         "sweep's folder must be on a file system this machine and the nodes share"):
        unshared([task], 100.0 + SHARED_GRACE_S + 1, "/sweep")
    (tmp_path / "a_0.out").touch()
    assert unshared([task], 100.0 + SHARED_GRACE_S + 1, "/sweep") is True


def test_slurm_options_are_sbatchs_and_gpus_asked_there_stand():
    own = SlurmOptions(slurm=["partition=gpu", "time=02:00:00", "gres=gpu:a100:1"]).checked()
    assert own.sbatch() == ["--partition=gpu", "--time=02:00:00", "--gres=gpu:a100:1"] and own.asks_gpus()
    assert not SlurmOptions(slurm={"mem_per_cpu": "4G"}).checked().asks_gpus()
    assert SlurmOptions(slurm={"mem_per_cpu": "4G"}).checked().sbatch() == ["--mem-per-cpu=4G"]
    for bad, said in [({"output": "x"}, "sweeper's own"), ({"partition": ["a"]}, "give text or a number"),
                      ("gpu", "dict of sbatch options"), (["=x"], "KEY=VALUE")]:
        with pytest.raises(SweepError, match=said):
            SlurmOptions(slurm=bad).checked()


class Queueing:
    """A backend with a queue of its own (as Slurm's): it runs two at a time; each started
    trial begins when the one before it ended."""

    traits = Traits(2, queues=True)

    def __init__(self):
        self.started, self.running, self.told = [], [], []
        self.first_wait: list[str] | None = None  #: what was started when the engine first waited

    def open(self):
        pass

    def start(self, spec):
        self.started.append(spec.trial_id)
        return None

    def wait(self, timeout, wake, queued):
        assert len(self.told) < 40, "the engine kept waiting"
        if self.first_wait is None:
            self.first_wait = list(self.started)
        events = []
        for tid in self.running:  # each running trial returns and exits
            events += [(tid, Result(Status.OK, {"value": 1.0})), (tid, Exited(0))]
        self.running = [tid for tid in self.started if tid not in self.told][:2]
        self.told += self.running
        events += [(tid, Began(1, "cpu", where="job", job=f"9_{self.started.index(tid)}")) for tid in self.running]
        return events

    def drain(self, trial_id):
        return []

    def cancel(self, trial_id, hard):
        pass

    def close(self):
        return []


class Heard(Callback):
    def __init__(self):
        self.said = []

    def started(self, spec, since=None):
        self.said.append(("started", spec.trial_id))

    def finished(self, result, retrying, kept=True):
        self.said.append(("finished", result.trial_id))


def test_a_backend_with_its_own_queue_is_given_every_trial_queued_ahead_at_once(tmp_path):
    """Traits.queues: the engine starts all five at once (the backend holds them, and runs two at
    a time); the console hears of a trial as started when it began, not when it was queued."""
    ledger = Ledger(str(tmp_path))
    backend, heard = Queueing(), Heard()
    specs = plan([{"x": i} for i in range(5)], str(tmp_path), seed=0)
    try:
        Engine(backend, ledger, outputs=heard).run(specs)
        rows = list(ledger.results().values())
    finally:
        ledger.close()
    assert backend.first_wait == [s.trial_id for s in specs]  # all at the first fill
    assert [r.status for r in rows] == [Status.OK] * 5 and sorted(r.job_id for r in rows) == [
        f"9_{i}" for i in range(5)]
    # never more than two started-and-unfinished in the console's view
    running, most = set(), 0
    for what, tid in heard.said:
        (running.add if what == "started" else running.discard)(tid)
        most = max(most, len(running))
    assert most == 2 and [w for w, _ in heard.said].count("started") == 5, heard.said


def test_a_machine_without_slurm_is_told_in_one_line(monkeypatch, tmp_path):
    from sweeper.backends.slurm import commands

    monkeypatch.setenv("PATH", str(tmp_path))
    assert commands.missing() == ("Slurm's sbatch, squeue, scontrol, scancel not found on this machine; run the "
                                  "sweep on a machine that submits Slurm jobs (a login node), or choose another "
                                  "backend")


def test_scontrols_lines_are_read_as_each_task_ended():
    """One ``scontrol -o show job <array>`` line per task (Slurm 22.05's words, trimmed)."""
    from sweeper.backends.slurm.commands import _ended, _tasks_of

    lines = {
        "JobId=34 ArrayJobId=32 ArrayTaskId=1 JobName=sweeper-x JobState=FAILED Reason=NonZeroExitCode "
        "ExitCode=3:0 BatchHost=node7": ("32_1", Ended("FAILED", 3, "node7")),
        "JobId=35 ArrayJobId=32 ArrayTaskId=2 JobState=CANCELLED ExitCode=0:15 BatchHost=node7":
            ("32_2", Ended("CANCELLED", -15, "node7")),
        "JobId=36 ArrayJobId=32 ArrayTaskId=3 JobState=TIMEOUT ExitCode=0:0": ("32_3", Ended("TIMEOUT", 0, "")),
        "JobId=40 JobName=plain JobState=COMPLETED ExitCode=0:0": ("40", Ended("COMPLETED", 0, "")),
        # the array's record of its tasks that never ran: each of them (cancelled while they waited)
        "JobId=32 ArrayJobId=32 ArrayTaskId=2,4-5%2 JobState=CANCELLED ExitCode=0:0":
            (["32_2", "32_4", "32_5"], Ended("CANCELLED", 0, "")),
    }
    for line, (task, ended) in lines.items():
        assert (_tasks_of(line), _ended(line)) == ([task] if isinstance(task, str) else task, ended), line


# Slurm's reasons for a task that waits -> what the sweep says it means ("": it waits on)
REASONS = [
    ("Resources", ""),
    ("Priority", ""),
    ("JobArrayTaskLimit", ""),
    ("BeginTime", ""),  # a requeued task, before it may start again
    ("ReqNodeNotAvail, UnavailableNodes:node3", ""),  # a node that is down may come back
    ("QOSMaxCpuPerUserLimit", ""),  # the user's other jobs hold the limit: they end
    ("PartitionConfig", "PartitionConfig: it asks for more than any node of its partition has"),
    ("PartitionTimeLimit", "PartitionTimeLimit: its time limit is above its partition's"),
    ("BadConstraints", "BadConstraints: no node has the features it asks for"),
    ("QOSMaxCpuPerJobLimit", "QOSMaxCpuPerJobLimit: it asks for more than its QOS or account lets one job have"),
    ("ReqNodeNotAvail, UnavailableNodes:", "ReqNodeNotAvail: no node it may run on is there"),
]


@pytest.mark.parametrize("reason, meaning", REASONS)
def test_which_pending_reasons_mean_a_task_never_starts(reason, meaning):
    from sweeper.backends.slurm.rules import never

    said = never(reason)
    assert said.startswith(meaning) and bool(said) == bool(meaning), said


def test_sbatchs_refusal_is_kept_in_its_own_words_and_a_percent_in_a_path_is_a_percent():
    from sweeper.backends.slurm.commands import pattern, refusal

    assert refusal("sbatch: unrecognized option '--partiton=debug'\nTry \"sbatch --help\" for more information\n") \
        == "unrecognized option '--partiton=debug'"
    assert refusal("sbatch: error: invalid partition specified: nosuch\nsbatch: error: Batch job submission failed: "
                   "Invalid partition name specified\n") == ("invalid partition specified: nosuch; Batch job "
                                                             "submission failed: Invalid partition name specified")
    assert pattern("/runs/50%j/grid/.jobs/a") == "/runs/50%%j/grid/.jobs/a"
    with pytest.raises(SweepError, match="backslash"):
        from sweeper.backends.slurm.rules import output_folder

        output_folder("/runs/a\\b/grid/.jobs")


def test_a_task_that_never_ran_names_no_output_file_and_a_lost_node_names_a_flag_slurm_takes():
    never_ran = how_it_ended("7_1", "", "/out/.jobs/a_1.out", False, Ended("CANCELLED", 0), None, ran=False)
    assert never_ran.note == ("Slurm job 7_1 was cancelled from outside the sweep before it started (scancel, or "
                              "the cluster's administrators)")
    forgotten = how_it_ended("7_1", "", "/out/.jobs/a_1.out", False, Ended("UNKNOWN"), None, ran=False)
    assert "before it started" in forgotten.note and ".out" not in forgotten.note
    lost = how_it_ended("7_1", "node3", "/out/.jobs/a_1.out", False, Ended("NODE_FAIL"), None)
    assert "--slurm requeue" in lost.note and "no-requeue" not in lost.note
    assert SlurmOptions(slurm=["requeue", "time=5"]).checked().sbatch() == ["--requeue", "--time=5"]
    assert SlurmOptions(slurm={"exclusive": True, "requeue": False}).checked().sbatch() == ["--exclusive"]
    assert SlurmOptions(slurm=["exclusive=user"]).checked().sbatch() == ["--exclusive=user"]
    with pytest.raises(SweepError, match="sweeper's own"):
        SlurmOptions(slurm={"comment": "mine"}).checked()


def test_the_live_view_says_how_many_trials_wait_in_the_queue_and_why():
    """Slurm's reasons, told as each changes (Pending): one line under the running trials."""
    from rich.console import Console

    from sweeper.run.progress import LiveView

    view = LiveView()
    try:
        (a, b, c) = plan([{"x": i} for i in range(3)], "/tmp/nowhere", seed=0)
        view.pending(a, "Resources")
        view.pending(b, "Resources")
        view.pending(c, "PartitionConfig")
        view.started(c, since=None)
        console = Console(record=True, width=200)
        console.print(view._render())
        shown = console.export_text()
    finally:
        view.close()
    assert "2 waiting in the queue: Resources (2)" in shown, shown
