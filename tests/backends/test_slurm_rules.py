"""The Slurm backend's decisions, in the test's own process (no Slurm needed): how many held
trials go in the next array, how a task that returned nothing is judged, its options; and
the engine's side of a backend with a queue of its own (``Traits.queues``)."""

from __future__ import annotations

import pytest

from sweeper.backends.slurm.commands import Ended
from sweeper.backends.slurm.options import SlurmOptions
from sweeper.backends.slurm.rules import Task, array_size, how_it_ended, unseen_failure
from sweeper.errors import SweepError
from sweeper.model import outcome
from sweeper.model.protocol import Began, Exited, Result, Traits
from sweeper.model.trial import Status
from sweeper.run.engine import Engine
from sweeper.model.lifecycle import Callback
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


def test_a_sweep_folder_the_nodes_do_not_share_is_told_by_a_task_that_ended_unseen(tmp_path):
    """Slurm ran a task (its node named) and it ended, and its output file (slurmd makes it as
    the task starts) never showed here: the folder is not the nodes'. One that waited, or whose
    file showed, or that wrote a message, is no sign of that."""
    from sweeper.child.batch import JobReader
    from sweeper.run.planning import plan

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    task = Task(spec, JobReader(spec.dir), job="7_0", output=str(tmp_path / "a_0.out"), seen=100.0)
    for state in ("FAILED", "COMPLETED"):
        assert unseen_failure(task, Ended(state, 1, "node3"))
    assert not unseen_failure(task, Ended("CANCELLED", 0, ""))  # cancelled while it waited
    assert not unseen_failure(task, Ended("FAILED", 1, ""))  # no node ran it
    (tmp_path / "a_0.out").touch()
    assert not unseen_failure(task, Ended("FAILED", 1, "node3"))


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
    ("ReqNodeNotAvail, Reserved for maintenance", ""),  # a maintenance window ahead: it ends
    ("ReqNodeNotAvail, May be reserved for other job", ""),
    ("ReqNodeNotAvail, UnavailableNodes:", ""),  # what many sites show before a maintenance
    ("PartitionNodeLimit", ""),  # said too where the partition's nodes are down or drained
    ("QOSMaxCpuPerUserLimit", ""),  # the user's other jobs hold the limit: they end
    ("DependencyNeverSatisfied", "DependencyNeverSatisfied: a job it depends on ended as it must not"),
    ("PartitionConfig", "PartitionConfig: it asks for more than any node of its partition has"),
    ("PartitionTimeLimit", "PartitionTimeLimit: its time limit is above its partition's"),
    ("BadConstraints", "BadConstraints: no node has the features it asks for"),
    ("QOSMaxCpuPerJobLimit", "QOSMaxCpuPerJobLimit: it asks for more than its QOS or account lets one job have"),
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

    from sweeper.front.progress import LiveView

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


def test_a_reason_that_means_never_is_acted_on_once_it_stood_for_minutes_or_slurms_sizes_confirm_it(tmp_path):
    """InvalidAccount while an administrator edits the accounts passes: two looks seconds apart
    are no proof; NEVER_AFTER_S of it, look after look, is. A reason that passed meanwhile counts
    anew. PartitionConfig that Slurm's sizes confirm (more CPUs than any node) is ended at the
    second look."""
    from sweeper.backends.slurm.rules import NEVER_AFTER_S, gives_up, never
    from sweeper.child.batch import JobReader

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    task = Task(spec, JobReader(spec.dir), job="7_0")
    account = never("InvalidAccount")
    assert not gives_up(task, account, 0.0, False) and not gives_up(task, account, 2.0, False)
    assert not gives_up(task, "", 4.0, False)  # it passed
    assert not gives_up(task, account, 6.0, False)
    assert not gives_up(task, account, 6.0 + NEVER_AFTER_S - 1, False)
    assert gives_up(task, account, 6.0 + NEVER_AFTER_S, False)
    assert NEVER_AFTER_S >= 120, NEVER_AFTER_S  # minutes, not seconds
    other = Task(spec, JobReader(spec.dir), job="7_1")
    config = never("PartitionConfig")
    assert not gives_up(other, config, 0.0, True) and gives_up(other, config, 2.0, True)


def test_a_node_clock_behind_ours_never_starts_a_trial_before_it_was_submitted(tmp_path):
    """A task's node says it began a minute before the driver submitted it (its clock runs
    behind, as munge lets it by up to five): its start is its submission's; one after stands."""
    from sweeper.backends.slurm.rules import named
    from sweeper.child.batch import JobReader

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    task = Task(spec, JobReader(spec.dir), job="7_0", host="node3", submitted=1000.0)
    assert named(task, Began(1, "cpu", at=940.0)).at == 1000.0
    assert named(task, Began(1, "cpu", at=1010.0)).at == 1010.0


def _returned(spec, out, tmp_path, uid="u1", attempt=None):
    import os
    import pickle

    from sweeper.child.batch import write_mark
    from sweeper.store.paths import JobPaths

    os.makedirs(JobPaths(spec.dir).folder, exist_ok=True)
    write_mark(spec.dir, "7_0", out, uid, spec.attempt if attempt is None else attempt)
    with open(JobPaths(spec.dir).returned, "wb") as f:
        pickle.dump({"load_error": "boom"}, f)


def test_a_result_read_is_taken_over_by_a_later_driver_until_what_it_made_is_on_record(tmp_path, monkeypatch):
    """The driver read a task's result and told the engine; killed before the ledger took the
    row, the next driver takes that result over (else its trial trains again); once the driver
    waited again (the row recorded), no later driver does."""
    from sweeper.backends import registry
    from sweeper.backends.slurm import commands
    from sweeper.backends.slurm.adoption import Left, found
    from sweeper.backends.slurm.backend import SlurmBackend
    from sweeper.child.batch import JobReader
    from sweeper.model.settings import parse

    monkeypatch.setattr(commands, "missing", lambda: "")
    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    out = str(tmp_path / "a_0.out")
    _returned(spec, out, tmp_path)
    backend = SlurmBackend(None, parse(registry.options({"backend": "slurm"})))
    task = Task(spec, JobReader(spec.dir), job="7_0", output=out)
    backend.tasks[spec.trial_id] = task
    backend.relay.watch(spec.trial_id)
    assert [type(e).__name__ for _, e in backend._heard(spec.trial_id, task)] == ["LoadFailed"]
    assert found(spec, Left("u1")) == ("7_0", out)  # a SIGKILL now: the next driver has it
    backend._unmark()  # what the next wait does first: the engine recorded it meanwhile
    assert found(spec, Left("u1")) is None


def test_a_mark_of_another_ledger_or_of_an_attempt_on_record_is_not_taken_over(tmp_path):
    """A task's result left by the run before --fresh (another uid) is not this ledger's; one of
    attempt 1 is not attempt 2's (attempt 1's row is on record); this ledger's for this attempt is."""
    from dataclasses import replace

    from sweeper.backends.slurm.adoption import Left, found

    (spec,) = plan([{"x": 1}], str(tmp_path), seed=0)
    out = str(tmp_path / "a_0.out")
    _returned(spec, out, tmp_path, uid="before-fresh")
    assert found(spec, Left("u1")) is None
    _returned(spec, out, tmp_path, attempt=1)
    assert found(replace(spec, attempt=2), Left("u1")) is None
    _returned(spec, out, tmp_path, attempt=1)
    assert found(replace(spec, attempt=1), Left("u1")) == ("7_0", out)


def test_slurms_commands_ask_for_the_users_own_jobs_and_a_lost_answer_is_no_refusal(monkeypatch):
    """squeue reads the user's own jobs (--me: not the whole table, not another user's of the
    same name); sbatch's words are an answer unless they say it could not reach the controller,
    or it said nothing, or a signal ended it: then the job may exist."""
    import subprocess

    from sweeper.backends.slurm import commands

    calls, answers = [], []

    def run(argv, **how):
        calls.append((argv, how))
        return answers.pop(0)

    monkeypatch.setattr(commands.subprocess, "run", run)
    answers.append(subprocess.CompletedProcess([], 0, "12_0|RUNNING|None|sweeper/u/l\n", ""))
    assert list(commands.queue("sweeper-x-1")) == ["12_0"]
    assert "--me" in calls[-1][0] and calls[-1][1]["start_new_session"], calls[-1]
    for code, err, job, answered in [
        (0, "", "41", True),
        (1, "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n", "", False),
        (1, "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n", "",
         False),
        (-2, "", "", False),  # a signal ended it
        (1, "", "", False),  # it said nothing
        (1, "sbatch: error: invalid partition specified: nosuch\n", "", True),
    ]:
        answers.append(subprocess.CompletedProcess([], code, "41\n" if code == 0 else "", err))
        said = commands.submit(["--mem=1G"], "sweeper-x-1", "/o/l_%a.out", "/o/l.sh", "0-1", {}, "sweeper/u/l")
        assert (said.job, said.answered) == (job, answered), (code, err, said)
        assert calls[-1][0][-1] == "/o/l.sh" and calls[-1][1]["start_new_session"]


def test_an_arrays_script_runs_the_set_up_lines_then_its_trial_and_stops_at_one_that_fails():
    from sweeper.backends.slurm.submission import script

    lines = script("/s/.jobs/l", "u1", ("module load cuda/12", "source ~/venv/bin/activate")).splitlines()
    assert lines[0] == "#!/bin/bash" and lines[2:5] == ["set -e", "module load cuda/12", "source ~/venv/bin/activate"]
    assert lines[5].startswith("exec ") and lines[5].endswith("-m sweeper.child.batch --list /s/.jobs/l.txt --uid u1")


def test_set_up_lines_and_a_points_own_sbatch_options_are_checked_and_given_to_its_job():
    """slurm_setup: lines (a list, or one text of lines); slurm_resources: a function of the
    point giving a dict of sbatch options, which win over the sweep's and may ask for a GPU."""
    from sweeper.backends import registry
    from sweeper.model.grid import ByPoint
    from sweeper.model.settings import parse

    opts = registry.options({"backend": "slurm", "slurm": {"mem": "8G", "time": "10"}, "slurm_setup":
                             "module load cuda/12\nsource ~/venv/bin/activate",
                             "slurm_resources": lambda p: {"mem": "32G", "gres": "gpu:1"} if p["units"] > 512 else {}})
    own = opts.backend_options
    assert own.slurm_setup == ("module load cuda/12", "source ~/venv/bin/activate")
    assert own.jobs(parse(opts).resources, {"units": 64}) == (["--mem=8G", "--time=10"], {"CUDA_VISIBLE_DEVICES": "-1"})
    sbatch, env = own.jobs(parse(opts).resources, {"units": 1024})
    assert sbatch == ["--mem=32G", "--time=10", "--gres=gpu:1"] and "CUDA_VISIBLE_DEVICES" not in env
    table = ByPoint.of("slurm_resources", lambda p: {"mem": f"{p['units'] // 16}G"}, [{"units": 64}, {"units": 512}])
    assert table({"units": 512}) == {"mem": "32G"}
    with pytest.raises(SweepError, match="slurm_resources, a function in a grid file, .* from sweep"):
        table({"units": 7})
    for bad, said in [({"slurm_setup": [1]}, "shell lines"), ({"slurm_resources": {"mem": "1G"}}, "a function"),
                      ({"slurm_driver": ["time"]}, "--slurm-driver takes KEY=VALUE")]:
        with pytest.raises(SweepError, match=said):
            registry.options({"backend": "slurm", **bad})
    wrong = registry.options({"backend": "slurm", "slurm_resources": lambda p: {"array": "0-3"}})
    with pytest.raises(SweepError, match="slurm_resources option 'array' is sweeper's own"):
        wrong.backend_options.jobs(parse(wrong).resources, {"units": 1})
