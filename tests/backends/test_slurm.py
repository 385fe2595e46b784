"""Sweeps on a real one-node Slurm, the tests' own (tests/slurm_cluster.py): each trial a task
of an array job; every status, Ctrl-C, a requeue, a killed driver, GPUs as Slurm grants them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pbt_scenarios
import pytest
import slurm_cluster
import sweep_fns
from conftest import MODULE_PROCESS, ROOT, run_cli, write_grid
from slurm_cluster import driver, sweep_jobs, until

import sweeper

pytestmark = [pytest.mark.skipif(bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or "-"), pytest.mark.slurm]

#: A grid file whose trial waits until its release file exists, telling first that it started.
WAITING = (
    "import os, time, sweeper\n"
    "def train(params):\n"
    "    open(os.path.join(sweeper.current_trial().dir, 'started'), 'w').close()\n"
    "    while not os.path.exists(params['release']):\n"
    "        time.sleep(0.05)\n"
    "    return {{'job': float(os.environ['SLURM_ARRAY_JOB_ID']), 'task': float(os.environ['SLURM_ARRAY_TASK_ID'])}}\n"
    "grid = {{'x': {xs}, 'release': [{release!r}]}}\n")


#: The sweep that runs into Slurm's own time limit (a minute at least): started with the
#: cluster, beside the other tests, and judged by the last test.
LIMITED: dict[str, object] = {}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_cluster.one_node(str(tmp_path_factory.mktemp("slurm"))) as conf:
        folder = tmp_path_factory.mktemp("limited")
        grid = write_grid(folder, WAITING.format(xs=[1], release=str(folder / "never")), name="timelimit.py")
        LIMITED.update(folder=folder, sweep=subprocess.Popen(
            [sys.executable, "-m", "sweeper", grid, "--out", str(folder), "--backend", "slurm", "--slurm", "time=1",
             "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, MODULE_PROCESS: "1"}))
        try:
            yield conf
        finally:
            LIMITED["sweep"].kill()  # type: ignore[attr-defined]


def others() -> list[list[str]]:
    """The tasks of sweeper's jobs in the queue, but the time-limit sweep's."""
    return [row for row in sweep_jobs() if not row[2].startswith("sweeper-timelimit-")]


@pytest.fixture(autouse=True)
def nothing_left(slurm):
    """Every test leaves Slurm's queue without a job of sweeper's."""
    yield
    left = others()
    if left:
        subprocess.run(["scancel", *(row[0] for row in left)], capture_output=True)
    assert not left, left


def started(folder) -> int:
    return len(list(folder.glob("trials/*/started")))


def test_a_task_slurm_requeues_runs_again_and_its_row_is_written_once(slurm, tmp_path):
    """Its node set down mid-run: Slurm requeues the task; the node comes back; the trial runs again
    from the start, in the same task, and ends ok: one row, one attempt, the requeue in its log."""
    out, release = tmp_path / "out", tmp_path / "release"
    grid = write_grid(tmp_path, WAITING.format(xs=[1], release=str(release)))
    sweep = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm",
                              "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node = os.uname().nodename
    try:
        until(lambda: started(out / "grid") == 1, "the trial started")
        for path in (out / "grid" / "trials").glob("*/started"):
            path.unlink()
        job = others()[0][0]
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=test"], check=True)
        until(lambda: [job, "PENDING"] == others()[0][:2], "Slurm requeued the task")
        until(lambda: "0 of 1 trials finished: none yet; 0 running, 1 waiting in Slurm's queue" in run_cli(
            "status", str(out / "grid")).stdout, "status counts the requeued task waiting, not running", within=60)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
        for row in sweep_jobs():  # this one, and the time-limit sweep's: now, not in 2 minutes
            subprocess.run(["scontrol", "update", f"jobid={row[0]}", "starttime=now"], capture_output=True)
        until(lambda: started(out / "grid") == 1, "the requeued trial started again")
        release.touch()
        said, _ = sweep.communicate(timeout=120)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
        sweep.kill()
    assert sweep.returncode == 0, said
    df = sweeper.load(str(out / "grid"))
    assert df.status.tolist() == ["ok"] and df.attempts.tolist() == [1] and df.job_id.tolist() == [job], said
    assert "Slurm requeued job" in said, said


def test_a_grid_runs_as_one_array_and_each_status_is_right(slurm, tmp_path):
    df = sweeper.sweep(sweep_fns.crash, {"how": ["ok", "raise", "exit3", "segv"]}, backend="slurm", workers=2,
                       out=str(tmp_path), progress=False)
    by = df.set_index("param_how")
    shown = df[["param_how", "status", "error", "job_id", "device"]].to_string()
    assert by.status.to_dict() == {"ok": "ok", "raise": "error", "exit3": "crashed", "segv": "crashed"}, shown
    assert by.loc["ok", "value"] == 1.0
    assert "boom from the trial" in by.loc["raise", "error"]
    assert "exit code 3" in by.loc["exit3", "error"] and "SIGSEGV" in by.loc["segv", "error"], shown
    assert "about to segfault" in by.loc["segv", "error"], shown  # its last words: it logs into the shared folder
    # one array job (its tasks 123_0 .. 123_3), each trial on this node
    assert len({j.split("_")[0] for j in df.job_id}) == 1 and sorted(j.split("_")[1] for j in df.job_id) == \
        ["0", "1", "2", "3"], shown
    host = os.uname().nodename
    assert set(df.device) == {f"cpu@{host}"}, shown
    csv = open(os.path.join(tmp_path, "sweep_fns", "results.csv")).readline()
    assert "job_id" in csv.strip().split(",")


def test_workers_is_the_most_tasks_at_a_time_and_a_retry_is_submitted_on_its_own(slurm, tmp_path):
    """Slurm throttles the array (%K); a retry (a new task) never makes them more than K."""
    out = tmp_path / "out"
    grid = write_grid(tmp_path, (
        "import os, time, sweeper, fcntl\n"
        f"LOG = {str(tmp_path / 'spans')!r}\n"
        "def train(params):\n"
        "    with open(LOG, 'a') as f:\n"
        "        f.write(f'+ {time.time()}\\n')\n"
        "    time.sleep(1.0)\n"
        "    with open(LOG, 'a') as f:\n"
        "        f.write(f'- {time.time()}\\n')\n"
        "    if params['x'] == 0 and sweeper.current_trial().attempt == 1:\n"
        "        os._exit(3)\n"
        "    return {'x': float(params['x'])}\n"
        "grid = {'x': [0, 1, 2, 3, 4]}\n"))
    done = run_cli(grid, "--out", str(out), "--backend", "slurm", "--workers", "1", "--retries", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    df = sweeper.load(str(out / "grid"))
    assert df.status.tolist() == ["ok"] * 5 and df.set_index("param_x").attempts[0] == 2
    events = sorted((float(t), +1 if s == "+" else -1) for s, t in
                    (line.split() for line in (tmp_path / "spans").read_text().splitlines()))
    at, most = 0, 0
    for _, step in events:
        at += step
        most = max(most, at)
    assert most == 1, events
    assert len({j.split("_")[0] for j in df.job_id}) == 2  # the grid's array, and the retry's


def test_sbatch_options_reach_the_job_and_mistakes_are_one_line(slurm, tmp_path):
    grid = {"how": ["ok"]}
    df = sweeper.sweep(sweep_fns.crash, grid, backend="slurm", slurm={"partition": "debug", "time": 5},
                       out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"]
    for bad, said in [({"array": "0-3"}, "sweeper's own"), (["partition"], "KEY=VALUE"), ({"a b": 1}, "no sbatch")]:
        with pytest.raises(sweeper.SweepError, match=said):
            sweeper.sweep(sweep_fns.crash, grid, backend="slurm", slurm=bad, out=str(tmp_path))
    with pytest.raises(sweeper.SweepError, match="Slurm refused the sweep's jobs: sbatch said: .*partition"):
        sweeper.sweep(sweep_fns.crash, grid, backend="slurm", slurm={"partition": "nosuch"}, out=str(tmp_path / "b"))
    with pytest.raises(sweeper.SweepError, match="per_gpu=2 shares a GPU"):
        sweeper.sweep(sweep_fns.crash, grid, backend="slurm", per_gpu=2, out=str(tmp_path / "c"))


def test_a_timeout_cancels_the_job_and_leaves_nothing_queued(slurm, tmp_path):
    df = sweeper.sweep(sweep_fns.crash, {"how": ["sleep", "sigkill"]}, backend="slurm", workers=2, timeout=5,
                       out=str(tmp_path), progress=False)
    by = df.set_index("param_how")
    shown = df[["param_how", "status", "error"]].to_string()
    assert by.status.to_dict() == {"sleep": "timeout", "sigkill": "crashed"}, shown
    assert "SIGKILL" in by.loc["sigkill", "error"] and "cancelled" in by.loc["sleep", "error"], shown


def test_the_command_line_runs_on_slurm_and_resumes(slurm, tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import crash as train\ngrid = {'how': ['ok', 'exit3']}\n")
    out = str(tmp_path / "out")
    done = run_cli(grid, "--out", out, "--backend", "slurm", "--slurm", "partition=debug", "--slurm", "time=5")
    assert done.returncode == 1, done.stdout + done.stderr  # one trial failed
    assert "1 ok" in done.stdout and "1 crashed" in done.stdout, done.stdout
    first = sweeper.load(os.path.join(out, "grid")).set_index("param_how")
    again = run_cli(grid, "--out", out, "--backend", "slurm")  # only the failed one runs again
    assert again.returncode == 1, again.stdout + again.stderr
    second = sweeper.load(os.path.join(out, "grid")).set_index("param_how")
    assert second.loc["ok", "job_id"] == first.loc["ok", "job_id"], "the ok trial ran again"
    assert second.loc["exit3", "job_id"] != first.loc["exit3", "job_id"]
    status = run_cli("status", os.path.join(out, "grid"))
    assert "1 ok, 1 crashed" in status.stdout, status.stdout + status.stderr
    replay = run_cli("replay", os.path.join(out, "grid"), first.loc["ok", "trial"], "--quiet")
    assert replay.returncode == 0 and f"ran as job {first.loc['ok', 'job_id']} on cpu@" in replay.stdout, \
        replay.stdout + replay.stderr
    bad = run_cli(grid, "--out", out, "--backend", "slurm", "--slurm", "partition")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr + bad.stdout, bad.stdout + bad.stderr


def test_a_job_cancelled_from_outside_is_crashed_and_says_cancelled(slurm, tmp_path):
    """scancel by hand (or an admin): the row says so, whatever the exit code."""
    release = tmp_path / "release"

    def cancel_when_started():
        until(lambda: started(tmp_path / "grid") == 1, "the trial started")
        job = [row[0] for row in others()][0]
        subprocess.run(["scancel", job])

    grid = write_grid(tmp_path, WAITING.format(xs=[1], release=str(release)))
    killer = threading.Thread(target=cancel_when_started)
    killer.start()
    done = run_cli(grid, "--out", str(tmp_path), "--backend", "slurm")
    killer.join()
    df = sweeper.load(str(tmp_path / "grid"))
    assert df.status.tolist() == ["crashed"] and "cancelled from outside" in df.error[0], done.stdout + done.stderr


def test_ctrl_c_cancels_every_task_within_seconds_and_rows_are_interrupted(slurm, tmp_path):
    """Two tasks run, two wait in the array: SIGINT to the sweep; none is left in the queue 10 s later."""
    out = tmp_path / "out"
    grid = write_grid(tmp_path, WAITING.format(xs=[1, 2, 3, 4], release=str(tmp_path / "never")))
    sweep = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm",
                              "--workers", "2"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: started(out / "grid") == 2, "two trials started")
        assert len(others()) == 4
        sweep.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        until(lambda: not others(), "every task cancelled", within=10)
        assert time.monotonic() - signalled < 10
        said, _ = sweep.communicate(timeout=60)
    finally:
        sweep.kill()
    assert sweep.returncode == 130, said
    df = sweeper.load(str(out / "grid"))
    assert df.status.tolist() == ["interrupted"] * 4, said
    # the two that waited never started: no duration, no log to point at (the two that ran: theirs)
    assert df.duration_s.isna().sum() == 2 and "no log" not in said and said.count("(never started)") == 2, said


def test_a_killed_driver_leaves_its_jobs_and_the_same_command_adopts_them(slurm, tmp_path):
    """SIGKILL the driver while two tasks run and a third waits; the same command
    again adopts all three (no task submitted twice, no trial trained twice) and records them."""
    release, out = tmp_path / "release", tmp_path / "out"
    grid = write_grid(tmp_path, WAITING.format(xs=[1, 2, 3], release=str(release)))
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers", "2"]
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until(lambda: started(out / "grid") == 2, "the first driver's trials started")
    first.kill()
    first.wait()
    tasks = {row[0] for row in others()}
    assert len(tasks) == 3, tasks  # left by the killed driver: two running, one pending
    second = driver(command)
    try:
        until(lambda: second.said("took over 3 Slurm tasks"), "the second driver took the tasks over (one line)")
        assert {row[0] for row in others()} == tasks, second.text  # nothing submitted again
        release.touch()
    finally:
        said = second.end()
    assert second.process.returncode == 0, said
    df = sweeper.load(str(out / "grid"))
    assert df.status.tolist() == ["ok"] * 3, said
    assert set(df.job_id) == tasks and {f"{int(j)}_{int(t)}" for j, t in zip(df.job, df.task)} == tasks


def test_a_search_with_a_pruner_submits_as_it_asks(slurm, tmp_path):
    """A search on Slurm: each finished trial's place refilled as it ends, up to its budget; a
    trial its pruner stops hears the verdict through its task's answers file at the epoch
    judged and stops there by itself (no cancel: its history ends at that epoch), its row pruned."""
    space = {"x": sweeper.uniform(0.0, 1.0), "epochs": 12, "pace": 0.15}
    df = sweeper.sweep(sweep_fns.descent, space, search="tpe", prune="median(n_startup_trials=1, n_warmup_steps=2)",
                       trials=5, metric="loss", mode="min", workers=1, seed=3, backend="slurm", out=str(tmp_path),
                       progress=False)
    shown = df[["param_x", "status", "epoch_reached", "job_id", "error"]].to_string()
    assert len(df) == 5 and set(df.status) == {"ok", "pruned"}, shown
    pruned = df[df.status == "pruned"]
    judged = pruned.error.str.extract(r"^pruned by median\(.*\) at epoch (\d+) ")[0].astype(int)
    assert (pruned.epoch_reached == judged.values).all(), shown  # stopped at the verdict's epoch, not a cancel later
    last = pd.read_csv(next(tmp_path.glob("*/history.csv"))).groupby("trial").epoch.max()
    assert (last[pruned.trial].values == judged.values).all(), shown  # no epoch trained after it
    for name, why in zip(pruned.trial, pruned.error):  # the task said it and returned; a cancelled one says nothing
        assert f"sweeper: {why}" in next(tmp_path.glob(f"*/trials/{name}/log.txt")).read_text(), shown
    assert df.job_id.nunique() == 5, shown  # each its own task, submitted as the search asked


def test_population_based_training_runs_on_slurm_with_the_schedules_of_a_local_run(slurm, tmp_path):
    """search='pbt' on Slurm: each member hears its pause through its task's answers file, leaves
    once its checkpoint is published, and goes on as a new task from it (the trial raises if a
    segment starts from another epoch); a synchronous population of 4 ends with every member's
    history, lineage and final row as a local run of the same seed gives them."""
    import pbt_fns

    runs = {}
    for backend in ("local", "slurm"):
        runs[backend] = sweeper.sweep(pbt_fns.climb, {"lr": sweeper.loguniform(0.01, 0.5), "epochs": 6}, search="pbt",
                                      metric="acc",
                                      workers=4, seed=5, backend=backend, out=str(tmp_path / backend), name="pbt",
                                      pbt={"population": 4, "interval": 3, "synch": True}, progress=False)
    df = runs["slurm"]
    shown = df[["trial", "status", "segments", "attempts", "job_id", "error"]].to_string()
    assert list(df.status) == ["ok"] * 4 and set(df.segments) == {3} and set(df.attempts) == {1}, shown
    assert df.job_id.str.len().gt(0).all(), shown  # each member's last segment was a Slurm task
    hist = {b: pd.read_csv(tmp_path / b / "pbt" / "history.csv") for b in runs}
    assert hist["slurm"].dropna(subset=["copied_from"]).shape[0] >= 1, hist["slurm"]  # a member copied another
    same = ["trial_id", "epoch", "acc", "param_lr", "copied_from"]
    pd.testing.assert_frame_equal(hist["slurm"][same], hist["local"][same])
    pd.testing.assert_frame_equal(df[["trial_id", "acc", "param_lr"]], runs["local"][["trial_id", "acc", "param_lr"]])


def test_ctrl_c_with_members_paused_and_running_then_the_same_command_ends_the_population(slurm, tmp_path):
    """The local test's Ctrl-C (test_pbt.py) on Slurm, four tasks at a time: member_0's task
    cancelled as it holds at epoch 3, others paused with their checkpoints published; the same
    command goes on from them to the population's end."""
    pbt_scenarios.ctrl_c_then_the_same_command(tmp_path, "--backend", "slurm", "--workers", "4",
                                               cancelled_as_it_started=1)


def test_a_trial_that_asks_for_a_gpu_gets_the_one_slurm_granted(slurm, tmp_path):
    """gpus= asks Slurm for one GPU per trial (--gres=gpu:1); the trial sees Slurm's CUDA_VISIBLE_DEVICES
    and its device names the node and that GPU."""
    if not slurm_cluster.GPUS:
        pytest.skip("the test Slurm could not make its GPU devices")
    grid = write_grid(tmp_path, (
        "import os\n"
        "def train(params):\n"
        "    return {'gpu': float(os.environ['CUDA_VISIBLE_DEVICES']), 'granted': float(os.environ['SLURM_GPUS_ON_NODE'])}\n"
        "grid = {'x': [1, 2]}\n"))
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--backend", "slurm", "--gpus", "all", "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    df = sweeper.load(str(tmp_path / "out" / "grid"))
    host = os.uname().nodename
    assert sorted(df.device) == sorted(f"gpu:{int(g)}@{host}" for g in df.gpu) and set(df.granted) == {1.0}


def test_sweep_from_a_script_whose_train_is_defined_in_it(slurm, tmp_path):
    """The common case from code: train defined in the script that calls sweep() (pickled by
    reference to __main__): each task imports that script as spawn does (its main block does not run)."""
    script = tmp_path / "mine.py"
    script.write_text(
        "import sweeper\n"
        "def train(params):\n"
        "    return {'double': 2.0 * params['x']}\n"
        "if __name__ == '__main__':\n"
        f"    df = sweeper.sweep(train, {{'x': [1, 2]}}, backend='slurm', out={str(tmp_path / 'out')!r},\n"
        "                       progress=False)\n"
        "    print(sorted(df.double.tolist()), sorted(df.status.tolist()))\n")
    done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0 and "[2.0, 4.0] ['ok', 'ok']" in done.stdout, done.stdout + done.stderr


def test_a_retry_is_a_new_task_and_a_fresh_run_replays_nothing(slurm, tmp_path):
    """A retry submits the trial again (never takes over the task that already returned), and a
    second run over the same folder (--fresh) runs the new code: no old task's result comes back."""
    df = sweeper.sweep(sweep_fns.oom_then_exit, {"x": [1]}, backend="slurm", retries=1, out=str(tmp_path),
                       progress=False)
    shown = df[["status", "error", "attempts", "job_id"]].to_string()
    assert df.status.tolist() == ["crashed"] and "exit code 3" in df.error[0] and df.attempts[0] == 2, shown
    out = str(tmp_path / "again")
    for value in (1, 2):
        grid = write_grid(tmp_path, f"def train(params):\n    return {{'v': {value}.0}}\ngrid = {{'x': [1, 2]}}\n")
        done = run_cli(grid, "--out", out, "--backend", "slurm", "--fresh", "--quiet")
        assert done.returncode == 0, done.stdout + done.stderr
        assert sweeper.load(os.path.join(out, "grid")).v.tolist() == [value] * 2


def test_a_thread_train_leaves_behind_does_not_hold_the_task(slurm, tmp_path):
    """train returns, leaving a thread that never ends: its task ends with its result, and the
    next trial gets its place (workers=1)."""
    grid = write_grid(tmp_path, (
        "import threading, time\n"
        "def train(params):\n"
        "    threading.Thread(target=time.sleep, args=(600,)).start()\n"
        "    return {'x': float(params['x'])}\n"
        "grid = {'x': [1, 2]}\n"))
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--backend", "slurm", "--workers", "1", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    df = sweeper.load(str(tmp_path / "out" / "grid"))
    assert df.status.tolist() == ["ok", "ok"]
    for job in df.job_id:  # each task ended by itself, not cancelled for lingering after its result
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
        assert "JobState=COMPLETED" in shown, shown


def test_slurms_own_time_limit_is_a_timeout(slurm):
    """--slurm time=1 (a minute; the sweep started with the cluster): Slurm ends the job; the row
    is timeout, naming Slurm's limit. Last in this file, so the minute passes beside the others."""
    sweep = LIMITED["sweep"]
    said, _ = sweep.communicate(timeout=240)  # type: ignore[attr-defined]
    df = sweeper.load(str(LIMITED["folder"] / "timelimit"))  # type: ignore[operator]
    assert df.status.tolist() == ["timeout"] and "Slurm's time limit" in df.error[0], said


def test_a_hydra_multirun_runs_its_jobs_as_tasks_of_one_array(slurm, tmp_path):
    """hydra/launcher=sweeper with backend=slurm: each job a task, its job folder
    and .hydra/ files on the shared folder, its job id in the table."""
    pytest.importorskip("hydra", reason="hydra-core is not installed (pip install -e '.[hydra]')")
    import pandas

    sweep = tmp_path / "sweep"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "hydra_app", "app.py"), "-m",
                           "hydra/launcher=sweeper", "lr=0.1,0.01", f"hydra.sweep.dir={sweep}",
                           "hydra.launcher.backend=slurm", "+hydra.launcher.slurm={mem: 500M}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = pandas.read_csv(sweep / "results.csv")
    assert list(table.status) == ["ok", "ok"] and list(table.value) == pytest.approx([1.16, 0.26])
    assert len({j.split("_")[0] for j in table.job_id}) == 1  # one array
    for num in (0, 1):
        assert (sweep / str(num) / ".hydra" / "config.yaml").exists() and (sweep / str(num) / "app.log").exists()
