"""(Spike, issue 41.) A sweep on a real one-node Slurm, the tests' own: each trial a job."""

from __future__ import annotations

import pytest

import sweeper
import sweep_fns
import slurm_cluster

pytestmark = [pytest.mark.skipif(bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or "-"),
              pytest.mark.xdist_group("slurm")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_cluster.one_node(str(tmp_path_factory.mktemp("slurm"))) as conf:
        yield conf


def test_a_grid_runs_as_slurm_jobs_and_each_status_is_right(slurm, tmp_path):
    df = sweeper.sweep(sweep_fns.crash, {"how": ["ok", "raise", "exit3", "segv"]}, backend="slurm", workers=2,
                       out=str(tmp_path), progress=False)
    by = df.set_index("param_how")
    shown = df[["param_how", "status", "error"]].to_string()
    assert by.status.to_dict() == {"ok": "ok", "raise": "error", "exit3": "crashed", "segv": "crashed"}, shown
    assert by.loc["ok", "value"] == 1.0
    assert "boom from the trial" in by.loc["raise", "error"]


def test_sbatch_options_reach_the_job_and_mistakes_are_one_line(slurm, tmp_path):
    df = sweeper.sweep(sweep_fns.crash, {"how": ["ok"]}, backend="slurm", slurm={"partition": "debug", "time": 5},
                       out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"]
    for bad, said in [({"array": "0-3"}, "sweeper's own"), (["partition"], "KEY=VALUE"), ({"a b": 1}, "no sbatch")]:
        with pytest.raises(sweeper.SweepError, match=said):
            sweeper.sweep(sweep_fns.crash, {"how": ["ok"]}, backend="slurm", slurm=bad, out=str(tmp_path))


def test_a_timeout_cancels_the_job_and_leaves_nothing_queued(slurm, tmp_path):
    import subprocess

    df = sweeper.sweep(sweep_fns.crash, {"how": ["sleep", "sigkill"]}, backend="slurm", workers=2, timeout=5,
                       out=str(tmp_path), progress=False)
    by = df.set_index("param_how")
    shown = df[["param_how", "status", "error"]].to_string()
    assert by.status.to_dict() == {"sleep": "timeout", "sigkill": "crashed"}, shown
    assert "SIGKILL" in by.loc["sigkill", "error"], shown
    queued = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout
    assert "sweeper-" not in queued, queued


def test_the_command_line_runs_on_slurm_with_its_sbatch_options(slurm, tmp_path):
    from conftest import run_cli, write_grid

    grid = write_grid(tmp_path, "from sweep_fns import crash as train\ngrid = {'how': ['ok', 'raise']}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--backend", "slurm", "--slurm", "partition=debug",
                   "--slurm", "time=5")
    assert done.returncode == 1, done.stdout + done.stderr  # one trial failed
    assert "1 ok" in done.stdout and "1 error" in done.stdout, done.stdout
    bad = run_cli(grid, "--out", str(tmp_path / "out"), "--backend", "slurm", "--slurm", "partition")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr + bad.stdout, bad.stdout + bad.stderr


def test_a_job_cancelled_from_outside_is_crashed_and_says_cancelled(slurm, tmp_path):
    """scancel by hand (or an admin): the row says so, whatever the exit code."""
    import subprocess
    import threading
    import time

    def cancel_when_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %j"], capture_output=True,
                                  text=True).stdout.split()
            if jobs:
                time.sleep(1)  # in train by now (it sleeps 600 s)
                subprocess.run(["scancel", jobs[0]])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=cancel_when_running)
    killer.start()
    df = sweeper.sweep(sweep_fns.crash, {"how": ["sleep"]}, backend="slurm", out=str(tmp_path), progress=False)
    killer.join()
    assert df.status.tolist() == ["crashed"] and "cancelled from outside" in df.error[0], df.error[0]


@pytest.mark.slow
def test_slurms_own_time_limit_is_a_timeout(slurm, tmp_path):
    """--slurm time=1 (a minute): Slurm ends the job; the row is timeout, naming Slurm's limit."""
    df = sweeper.sweep(sweep_fns.crash, {"how": ["sleep"]}, backend="slurm", slurm={"time": 1},
                       out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["timeout"] and "Slurm's time limit" in df.error[0], df.error[0]


def test_a_killed_driver_leaves_its_jobs_and_the_same_command_adopts_them(slurm, tmp_path):
    """issue 41, item 4: SIGKILL the driver while its jobs run; the same command again adopts
    them (no job submitted twice, no trial trained twice) and records their results."""
    import sqlite3
    import subprocess
    import sys
    import time

    from conftest import ROOT, write_grid

    release, out = tmp_path / "release", tmp_path / "out"
    grid = write_grid(tmp_path, (
        "import os, time, sweeper\n"
        "def train(params):\n"
        "    open(os.path.join(sweeper.current_trial().dir, 'started'), 'w').close()\n"
        "    while not os.path.exists(params['release']):\n"
        "        time.sleep(0.05)\n"
        "    return {'job': float(os.environ['SLURM_JOB_ID'])}\n"
        f"grid = {{'x': [1, 2], 'release': [{str(release)!r}]}}\n"))
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers", "2"]

    def until(check, what):
        deadline = time.monotonic() + 90
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until(lambda: len(list((out / "grid" / "trials").glob("*/started"))) == 2, "the first driver's trials started")
    first.kill()
    first.wait()
    queued = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout.split()
    jobs = {float(job) for job, name in zip(queued[::2], queued[1::2]) if name.startswith("sweeper-")}
    assert len(jobs) == 2, queued  # left running by the killed driver

    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1))

    def adopted():  # the second driver marks both running (the first's marks were cleared first)
        with sqlite3.connect(out / "grid" / "ledger.sqlite") as db:
            return db.execute("SELECT count(*) FROM running WHERE started_at >= ?", (since,)).fetchone()[0] == 2

    second = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until(adopted, "the second driver adopted both running jobs")
        release.touch()
        said, _ = second.communicate(timeout=120)
    finally:
        second.kill()
    assert second.returncode == 0, said
    df = sweeper.load(str(out / "grid"))
    assert df.status.tolist() == ["ok", "ok"], said
    assert set(df.job) == jobs  # their own jobs: adopted, none submitted again
    assert "sweeper-" not in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout
