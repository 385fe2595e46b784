"""What Slurm knows, said, on a real one-node Slurm (tests/slurm_cluster.py, a cluster of this
module's own): why tasks wait and when they never start, sbatch's own words, when each task
began on its node, tasks that never started, and a driver killed at the worst moment (between
sbatch and its answer) or stopped by Ctrl-C before it took over what an earlier one left."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import slurm_cluster
import sweep_fns
from conftest import ROOT, run_cli, write_grid
from slurm_cluster import driver, nothing_left, slurm, sweep_jobs, until  # noqa: F401 (slurm, nothing_left: fixtures)

import sweeper

pytestmark = [pytest.mark.skipif(bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or "-"), pytest.mark.slurm]

#: A grid file whose trial notes each start (its task's id, in its folder's ``starts``), then
#: waits until ``gate`` exists, or ``gate<x>`` (its own).
GATED = (
    "import os, time, sweeper\n"
    "def train(params):\n"
    "    with open(os.path.join(sweeper.current_trial().dir, 'starts'), 'a') as f:\n"
    "        f.write(os.environ['SLURM_ARRAY_JOB_ID'] + '_' + os.environ['SLURM_ARRAY_TASK_ID'] + '\\n')\n"
    "    while not (os.path.exists(params['gate']) or os.path.exists(params['gate'] + str(params['x']))):\n"
    "        time.sleep(0.05)\n"
    "    return {{'x': float(params['x'])}}\n"
    "grid = {{'x': {xs}, 'gate': [{gate!r}]}}\n")


def starts(folder) -> dict[str, list[str]]:
    """Each trial's starts (the task that started it), by its folder's name."""
    return {p.parent.name: p.read_text().split() for p in folder.glob("trials/*/starts")}


def tasks() -> set[str]:
    return {row[0] for row in sweep_jobs()}


def status(folder) -> str:
    done = run_cli("status", str(folder))
    return done.stdout + done.stderr


def test_a_driver_killed_between_sbatch_and_its_answer_leaves_no_trial_to_run_twice(slurm, tmp_path):
    """sbatch took the array, and the driver died before it read the id (a wrapper sbatch on
    PATH, as a user's, kills it then): the same command takes the array over (one line says
    so) instead of submitting again; each trial trains once, its row under its task's id."""
    out, gate, wrapper = tmp_path / "out", tmp_path / "gate", tmp_path / "bin"
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2, 3], gate=str(gate)))
    wrapper.mkdir()
    (wrapper / "sbatch").write_text(f"#!/bin/sh\n{shutil.which('sbatch')} \"$@\" > {tmp_path / 'answer'}\n"
                                    "kill -9 $PPID\n")
    (wrapper / "sbatch").chmod(0o755)
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers", "2"]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PATH": f"{wrapper}:{os.environ['PATH']}"})
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    array = (tmp_path / "answer").read_text().strip()
    left = tasks()
    assert left == {f"{array}_{i}" for i in range(3)}, left
    until(lambda: len(starts(out / "grid")) == 2, "the array's first two tasks started")
    second = driver(command)
    try:
        until(lambda: second.said("took over 3 Slurm tasks"), "the second driver took the array over")
        assert tasks() == left  # nothing submitted again
        gate.touch()
        said = second.end()
    finally:
        second.process.kill()
    assert second.process.returncode == 0, said
    df = sweeper.load(str(out / "grid"))
    assert df.status.tolist() == ["ok"] * 3 and set(df.job_id) == left, said
    assert {name: ran for name, ran in starts(out / "grid").items()} == {
        row.trial: [row.job_id] for row in df.itertuples()}, said  # each trained once, by its row's task


def test_a_task_slurm_never_starts_is_ended_naming_the_reason_and_the_fix(slurm, tmp_path):
    """More CPUs than the node has (Slurm's PartitionConfig): not a wait for ever; each row is
    crashed naming the reason and the option to change, said in one line; nothing queued."""
    grid = write_grid(tmp_path, "def train(params):\n    return {'x': 1.0}\ngrid = {'x': [1, 2]}\n")
    done = run_cli(grid, "--out", str(tmp_path), "--backend", "slurm", "--slurm", "cpus-per-task=64", timeout=90)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    df = sweeper.load(str(tmp_path / "grid"))
    assert df.status.tolist() == ["crashed"] * 2, said
    assert all("never starts" in e and "PartitionConfig" in e and "--slurm" in e for e in df.error), df.error
    assert df.duration_s.isna().all() and said.count("Slurm never starts the sweep's tasks") == 1, said
    assert "no log" not in said, said


def test_status_says_why_tasks_wait_and_counts_each_from_its_start_on_its_node(slurm, tmp_path):
    """One at a time: the second task waits (Slurm's JobArrayTaskLimit, in status) while the
    first runs 6 s; once it runs, status's clock and its row's started_at count from its start
    on the node, not from the submission."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2], gate=str(gate)))
    sweep = driver([sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers",
                    "1", "--quiet"])
    try:
        until(lambda: len(starts(out / "grid")) == 1, "the first trial started")
        began, (first,) = time.monotonic(), list((out / "grid" / "trials").glob("*/starts"))
        until(lambda: "1 task waits in Slurm's queue: JobArrayTaskLimit" in status(out / "grid"),
              "status says why the second task waits", within=60)
        until(lambda: time.monotonic() - began > 6, "the first trial ran 6 s")  # (a duration, not a wait for an event)
        (tmp_path / "gate1").touch()
        until(lambda: len(starts(out / "grid")) == 2, "the second trial started")
        second = next(p for p in (out / "grid" / "trials").glob("*/starts") if p != first)
        shown = ""

        def clocked() -> bool:
            nonlocal shown
            shown = status(out / "grid")
            return "x=2" in shown and " running  " in shown

        until(clocked, "status shows the second trial running", within=60)
        since = time.time() - second.stat().st_mtime
        elapsed = int(re.search(r"running .*x=2.*  (\d+)s", shown).group(1))
        assert abs(elapsed - since) < 4, (elapsed, since, shown)  # (from the submission: 6 s more at least)
        gate.touch()
        said = sweep.end()
    finally:
        sweep.process.kill()
    assert sweep.process.returncode == 0, said
    df = sweeper.load(str(out / "grid")).set_index("param_x")
    assert (df.loc[2, "started_at"] - df.loc[1, "started_at"]).total_seconds() > 6, df.started_at


def test_sbatchs_own_words_a_percent_in_the_folder_and_a_bare_flag(slurm, tmp_path):
    """sbatch's refusal in its own words; a sweep folder named with a % (sbatch's pattern
    character) is a folder; --slurm requeue (a flag without a value) reaches sbatch."""
    grid = {"how": ["ok"]}
    with pytest.raises(sweeper.SweepError, match="sbatch said: unrecognized option '--partiton=debug'"):
        sweeper.sweep(sweep_fns.crash, grid, backend="slurm", slurm={"partiton": "debug"}, out=str(tmp_path / "a"))
    df = sweeper.sweep(sweep_fns.crash, grid, backend="slurm", slurm={"requeue": True}, out=str(tmp_path / "50%j"),
                       progress=False)
    assert df.status.tolist() == ["ok"], df[["status", "error"]].to_string()
    shown = subprocess.run(["scontrol", "-o", "show", "job", df.job_id[0]], capture_output=True, text=True).stdout
    assert "Requeue=1" in shown, shown


def test_tasks_that_never_started_say_so_and_run_as_their_first_attempt(slurm, tmp_path):
    """One runs, two wait: one waiting task cancelled from outside, then the whole array: the
    two that never ran have no duration, no log pointed at, no output file named, Slurm's
    CANCELLED; the same command runs them as attempt 1 (the one that ran: attempt 2)."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2, 3], gate=str(gate)))
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers", "1"]
    sweep = driver(command)
    try:
        until(lambda: len(starts(out / "grid")) == 1, "the first trial started")
        array = sorted(tasks())[0].split("_")[0]
        subprocess.run(["scancel", f"{array}_2"], check=True)
        until(lambda: sweep.said("[1/3]"), "the task cancelled while it waited is recorded")
        subprocess.run(["scancel", array], check=True)
        said = sweep.end()
    finally:
        sweep.process.kill()
    df = sweeper.load(str(out / "grid")).set_index("param_x")
    shown = df[["status", "error", "duration_s", "attempts"]].to_string()
    assert df.status.tolist() == ["crashed"] * 3, shown
    assert "cancelled from outside the sweep" in df.loc[1, "error"] and df.loc[1, "duration_s"] > 0, shown
    for x in (2, 3):
        assert "before it started" in df.loc[x, "error"] and ".out" not in df.loc[x, "error"], shown
        assert df.isna().loc[x, "duration_s"], shown
    assert "was cancelled from outside" in df.loc[2, "error"], shown  # Slurm says CANCELLED
    assert "no log" not in said and "never started" in said, said
    gate.touch()
    again = run_cli(*command[3:], "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    df = sweeper.load(str(out / "grid")).set_index("param_x")
    assert df.attempts.to_dict() == {1: 2, 2: 1, 3: 1}, df[["status", "attempts"]].to_string()


def test_a_killed_drivers_tasks_are_in_status_and_a_ctrl_c_before_they_are_taken_over_ends_them(slurm, tmp_path):
    """A driver SIGKILLed: status says no driver runs the sweep yet its tasks run (not "0
    running"). The same command, Ctrl-C while it reads the grid file (before it took the tasks
    over): they are cancelled too, nothing of the sweep is left in the queue."""
    out, gate, reading = tmp_path / "out", tmp_path / "gate", tmp_path / "reading"
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2, 3], gate=str(gate)) + (
        "if os.environ.get('SLOW_READ'):\n"
        f"    open({str(reading)!r}, 'w').close()\n"
        "    time.sleep(60)\n"))
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers", "2"]
    first = driver(command)
    until(lambda: len(starts(out / "grid")) == 2, "the first driver's trials started")
    first.process.kill()
    first.end()
    shown = status(out / "grid")
    assert "not running (no driver)" in shown and "0 of 3 trials finished: none yet; 2 running, 1 waiting" in shown
    assert "3 of its Slurm tasks are in Slurm's queue" in shown, shown
    second = driver(command, SLOW_READ="1")
    try:
        until(reading.exists, "the second driver reads the grid file")
        second.process.send_signal(signal.SIGINT)
        said = second.end(timeout=60)
    finally:
        second.process.kill()
    assert second.process.returncode == 130, said
    assert "cancelled the 3 Slurm tasks an earlier run of this sweep left" in said, said
    until(lambda: not tasks(), f"the cancelled tasks leave Slurm's queue (scancel is asynchronous): {said}", 30)


def test_a_folder_the_nodes_do_not_see_is_said_in_one_line(slurm, tmp_path):
    """The driver's --out is a tmpfs of its own (a mount namespace): the node cannot open the
    task's output file there; the sweep stops with the documented line, no trial crashed."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        pytest.skip("no mount namespaces here (unshare -m)")
    out = tmp_path / "out"
    out.mkdir()
    grid = write_grid(tmp_path, "def train(params):\n    return {'x': 1.0}\ngrid = {'x': [1]}\n")
    script = f"mount -t tmpfs tmpfs {out} && exec {sys.executable} -m sweeper {grid} --out {out} --backend slurm"
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "but nothing it wrote shows in" in said, said
    assert "must be on a file system this machine and the nodes share" in said and "crashed" not in said, said


def test_a_dry_run_on_slurm_says_the_array_and_its_sbatch_options_as_the_docs_show(slurm, tmp_path):
    """docs/slurm.md's dry run, pasted as it is there: the array and its sbatch options, not
    this machine's slots; nothing submitted."""
    page = open(os.path.join(ROOT, "docs", "slurm.md"), encoding="utf-8").read()
    block = page.split("$ python -m sweeper experiments/digits_mlp.py --backend slurm")[1].split("```")[0]
    command, *shown = block.splitlines()
    argv = ["experiments/digits_mlp.py", "--backend", "slurm", *command.split()]
    done = run_cli(*argv, cwd=ROOT)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "slots" not in said and not tasks(), said
    folder = os.path.join(ROOT, "results", "digits_mlp")
    for doc, line in zip(shown[:3], said.splitlines()):  # the folder and the job name's digest are this checkout's
        doc = doc.replace("/home/you/sweeper/results/digits_mlp", folder)
        assert re.sub(r"digits_mlp-[0-9a-f]{8}", "digits_mlp-*", line) == re.sub(r"digits_mlp-[0-9a-f]{8}",
                                                                                   "digits_mlp-*", doc), said
