"""What a driver must not take at Slurm's word, on a real one-node Slurm (tests/slurm_cluster.py,
a cluster of this module's own): a maintenance window ahead is no "never"; an sbatch that gave
no answer may have submitted all the same (a lost answer, a Ctrl-C at the terminal while it
ran); a run started over (--fresh), or one whose grid shrank, takes over nothing of what is not
its own and cancels it at once; a live driver's tasks are not another login node's to cancel;
a slow prolog is no unshared folder; a task that died before its trial began has run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import slurm_cluster
from conftest import ROOT, run_cli, write_grid
from slurm_cluster import Heard, driver, nothing_left, overriding, slurm, until  # noqa: F401 (slurm, nothing_left: fixtures)
from test_slurm_says import GATED, starts, status, tasks

import sweeper

pytestmark = [pytest.mark.skipif(bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or "-"), pytest.mark.slurm]

#: GATED, with the trial's value scaled by a constant of the file (its code, changed between runs).
SCALED = GATED.replace("return {{'x': float(params['x'])}}", "return {{'y': float(params['x']) * SCALE}}")


def test_a_maintenance_window_ahead_keeps_the_tasks_waiting_and_they_run_once_it_is_gone(slurm, tmp_path):
    """A maintenance reservation ahead (ReqNodeNotAvail, Reserved for maintenance): the tasks
    wait, past any threshold (made 1 s here), shown in status, never cancelled; they run once
    it is deleted."""
    subprocess.run(["scontrol", "create", "reservation", "reservationname=maint", "starttime=now+120", "duration=10",
                    "nodes=ALL", "flags=maint,ignore_jobs", "users=root"], check=True, capture_output=True)
    out = tmp_path / "out"
    grid = write_grid(tmp_path, "def train(params):\n    return {'x': float(params['x'])}\ngrid = {'x': [1, 2]}\n")
    env = overriding(str(tmp_path / "site"), {"sweeper.backends.slurm.rules.NEVER_AFTER_S": 1.0})
    sweep = driver([sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm"], **env)
    try:
        seen = ""

        def waiting() -> bool:
            nonlocal seen
            seen = status(out / "grid")
            return "2 tasks wait in Slurm's queue: ReqNodeNotAvail, Reserved for maintenance" in seen

        until(waiting, "status says both tasks wait for the maintenance", within=60)
        began = time.monotonic()  # the driver looks every 2 s: four looks, well past the threshold
        until(lambda: time.monotonic() - began > 8, "8 s pass (a duration: nothing is to happen)")
        assert waiting() and "never starts" not in seen and sweep.process.poll() is None, seen + sweep.text
    finally:
        subprocess.run(["scontrol", "delete", "reservation=maint"], capture_output=True)
    said = sweep.end()
    assert sweep.process.returncode == 0, said
    assert sweeper.load(str(out / "grid")).status.tolist() == ["ok", "ok"], said


def test_a_run_takes_over_only_its_own_and_cancels_the_rest_as_it_starts(slurm, tmp_path):
    """A driver killed, its three tasks in the queue. The same command with x=3 gone from the
    grid: x=3's task is cancelled as the run starts (not when it ends), x=1 and x=2's taken
    over. Killed again; the same command with --fresh and the code changed (SCALE 1 -> 100):
    nothing taken over, what the old ledger left cancelled at once, every row the new code's."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    path = write_grid(tmp_path, "SCALE = 1\n" + SCALED.format(xs=[1, 2, 3], gate=str(gate)))
    command = [sys.executable, "-m", "sweeper", path, "--out", str(out), "--backend", "slurm", "--workers", "3"]
    first = driver(command)
    until(lambda: len(starts(out / "grid")) == 3, "the first driver's three trials started")
    first.process.kill()
    first.end()
    left = tasks()
    by_x = {name: ran[0] for name, ran in starts(out / "grid").items()}
    write_grid(tmp_path, "SCALE = 1\n" + SCALED.format(xs=[1, 2], gate=str(gate)))
    second = driver(command)
    try:
        until(lambda: by_x["x=3"] not in tasks(), "x=3's task cancelled as the run starts", within=30)
        assert tasks() == left - {by_x["x=3"]}, second.text  # x=1, x=2 run on, taken over
        until(lambda: second.said("took over 2 Slurm tasks"), "the take-over said")
        second.process.kill()
    finally:
        second.end()
    write_grid(tmp_path, "SCALE = 100\n" + SCALED.format(xs=[1, 2], gate=str(gate)))
    third = driver([*command, "--fresh"])
    try:
        until(lambda: not tasks() & left, "the old ledger's tasks cancelled at once", within=30)
        until(lambda: third.said("cancelled 2 Slurm tasks an earlier run of this sweep left"), "said in one line")
        gate.touch()
        said = third.end()
    finally:
        third.process.kill()
    assert third.process.returncode == 0 and "took over" not in said, said
    df = sweeper.load(str(out / "grid"))
    assert sorted(df.y.tolist()) == [100.0, 200.0] and not set(df.job_id) & left, said


def test_an_sbatch_answer_lost_after_it_submitted_trains_no_trial_twice(slurm, tmp_path):
    """The retry's sbatch submits, then says "Socket timed out" (exit 1): its array is found by
    its comment at once, not submitted again; x=1 runs twice (its attempt and its retry), not
    three times, its row under the task that ran it."""
    wrapper, calls = tmp_path / "bin", tmp_path / "calls"
    wrapper.mkdir()
    (wrapper / "sbatch").write_text(
        f"#!/bin/sh\necho x >> {calls}\nif [ \"$(wc -l < {calls})\" = 2 ]; then\n"
        f"  {shutil_which('sbatch')} \"$@\" > /dev/null\n"
        "  echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' >&2\n"
        f"  exit 1\nfi\nexec {shutil_which('sbatch')} \"$@\"\n")
    (wrapper / "sbatch").chmod(0o755)
    grid = write_grid(tmp_path, (
        "import os, sweeper\n"
        "def train(params):\n"
        "    with open(os.path.join(sweeper.current_trial().dir, 'starts'), 'a') as f:\n"
        "        f.write(os.environ['SLURM_ARRAY_JOB_ID'] + '_' + os.environ['SLURM_ARRAY_TASK_ID'] + '\\n')\n"
        "    if params['x'] == 1 and sweeper.current_trial().attempt == 1:\n"
        "        os._exit(3)\n"
        "    return {'y': float(params['x'])}\n"
        "grid = {'x': [1, 2]}\n"))
    env = overriding(str(tmp_path / "site"), {"sweeper.backends.slurm.backend.RETRY_S": 2.0,
                                             "sweeper.backends.slurm.submission.RETRY_S": 2.0})
    done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--backend",
                           "slurm", "--retries", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env, "PATH": f"{wrapper}:{os.environ['PATH']}"})
    said = done.stdout + done.stderr
    assert done.returncode == 0 and calls.read_text().count("x") == 2, said
    df = sweeper.load(str(tmp_path / "out" / "grid")).set_index("param_x")
    ran = starts(tmp_path / "out" / "grid")
    assert len(ran["x=1"]) == 2 and df.loc[1, "job_id"] == ran["x=1"][-1] and df.loc[1, "attempts"] == 2, (ran, said)
    assert "refused" not in said and "requeued" not in said, said


def test_a_ctrl_c_at_the_terminal_while_sbatch_answers_leaves_nothing_running(slurm, tmp_path):
    """The terminal's Ctrl-C reaches its whole process group, sbatch too, once the controller
    took the array and before sbatch said its id: sbatch runs in a session of its own and
    answers; the sweep stops as after any Ctrl-C (exit 130), its tasks cancelled, nothing
    called a refusal."""
    wrapper, flag = tmp_path / "bin", tmp_path / "submitted"
    wrapper.mkdir()
    (wrapper / "sbatch").write_text(f"#!/bin/sh\n{shutil_which('sbatch')} \"$@\" > {tmp_path / 'answer'}\n"
                                    f"touch {flag}\nsleep 3\ncat {tmp_path / 'answer'}\n")
    (wrapper / "sbatch").chmod(0o755)
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2], gate=str(tmp_path / "never")))
    sweep = Heard(subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"),
                                    "--backend", "slurm"], cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                   env={**os.environ, "PATH": f"{wrapper}:{os.environ['PATH']}"}))
    try:
        until(flag.exists, "sbatch submitted, its answer not yet given")
        os.killpg(sweep.process.pid, signal.SIGINT)  # as the terminal does: the whole foreground group
        said = sweep.end(timeout=60)
    finally:
        sweep.process.kill()
    assert sweep.process.returncode == 130 and "refused" not in said, said
    until(lambda: not tasks(), "nothing of the sweep left in Slurm's queue", within=15)


#: A hook for a driver's sitecustomize: with SLOW_IMPORT set, the import of sweeper's command
#: line (the last of sweeper's own) waits, saying so, for the test's Ctrl-C.
SLOW_IMPORT = (
    "import os, sys, time\n"
    "class _Slow:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'sweeper.front.cli' and os.environ.get('SLOW_IMPORT'):\n"
    "            sys.meta_path.remove(self)\n"
    "            open(os.environ['SLOW_IMPORT'], 'w').close()\n"
    "            time.sleep(60)\n"
    "        return None\n"
    "sys.meta_path.insert(0, _Slow())\n")


def test_a_live_drivers_tasks_are_no_other_machines_to_cancel_and_a_killed_ones_end_with_a_ctrl_c(slurm, tmp_path):
    """A driver runs; a Ctrl-C on another login node, whose lock (flock) does not see this
    one's (its holder() finds none), cancels nothing: the driver's heartbeat says it lives, and
    status there says where it runs. Once it is SIGKILLed, the same command stopped by a Ctrl-C
    while sweeper itself is still being imported cancels what it left."""
    out, gate, importing = tmp_path / "out", tmp_path / "gate", tmp_path / "importing"
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2], gate=str(gate)))
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm"]
    first = driver(command)
    until(lambda: len(starts(out / "grid")) == 2, "the driver's trials started")
    elsewhere = subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "from sweeper.backends.slurm import outside\n"
        "outside.holder = lambda folder: None  # a lock this machine cannot see\n"
        "print(repr(outside.abandon(sys.argv[1])), outside.seen(sys.argv[1], driven=False).driver)\n"),
        str(out / "grid")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 0 and elsewhere.stdout.startswith("'' pid "), elsewhere.stdout + elsewhere.stderr
    assert len(tasks()) == 2 and f"pid {first.process.pid} on {os.uname().nodename}" in elsewhere.stdout
    first.process.kill()
    first.end()
    env = overriding(str(tmp_path / "site"), {}, SLOW_IMPORT)
    second = driver(command, SLOW_IMPORT=str(importing), **env)
    try:
        until(importing.exists, "the second driver imports sweeper's command line")
        second.process.send_signal(signal.SIGINT)
        said = second.end(timeout=60)
    finally:
        second.process.kill()
    assert second.process.returncode == 130, said
    assert not tasks() and "cancelled the 2 Slurm tasks an earlier run of this sweep left" in said, said


def test_a_slow_prolog_is_no_folder_the_nodes_do_not_share(slurm, tmp_path):
    """A prolog runs for seconds before each task (the task RUNNING, nothing of it on disk yet),
    longer than any grace the driver might give a running task's output file (made 2 s here):
    the sweep runs as usual."""
    prolog, conf = tmp_path / "prolog.sh", open(slurm).read()
    prolog.write_text("#!/bin/sh\nsleep 5\nexit 0\n")
    prolog.chmod(0o755)
    with open(slurm, "a") as f:
        f.write(f"Prolog={prolog}\n")
    try:
        subprocess.run(["scontrol", "reconfigure"], check=True, capture_output=True)
        until(lambda: str(prolog) in subprocess.run(["scontrol", "show", "config"], capture_output=True,
                                                    text=True).stdout, "the prolog in force")
        grid = write_grid(tmp_path, "def train(params):\n    return {'x': float(params['x'])}\ngrid = {'x': [1]}\n")
        env = overriding(str(tmp_path / "site"), {"sweeper.backends.slurm.rules.SHARED_GRACE_S": 2.0})
        done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--backend",
                               "slurm"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})
    finally:
        with open(slurm, "w") as f:
            f.write(conf)
        subprocess.run(["scontrol", "reconfigure"], capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sweeper.load(str(tmp_path / "out" / "grid")).status.tolist() == ["ok"]


def test_a_task_that_died_before_its_trial_began_has_run_and_names_its_output_file(slurm, tmp_path):
    """A script whose top level imports a module the nodes lack: the task ran (Slurm started it,
    its output file holds the traceback) and died before its trial began: crashed with a start
    and a duration, the error naming that file and its last line; the next run is attempt 2."""
    script = tmp_path / "mine.py"
    script.write_text(
        "import os, sweeper\n"
        "if os.environ.get('SLURM_JOB_ID'):\n"
        "    import a_module_the_nodes_lack\n"
        "def train(params):\n"
        "    return {'y': float(params['x'])}\n"
        "if __name__ == '__main__':\n"
        f"    df = sweeper.sweep(train, {{'x': [1]}}, backend='slurm', out={str(tmp_path / 'out')!r})\n")
    for attempt in (1, 2):
        done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                              timeout=120)
        said = done.stdout + done.stderr
        df = sweeper.load(str(tmp_path / "out" / "mine"))
        row = df.iloc[0]
        assert row.status == "crashed" and row.attempts == attempt, said
        assert "before its trial began: " in row.error and "a_module_the_nodes_lack" in row.error, row.error
        assert ".jobs/" in row.error and ".out" in row.error and "never started" not in said, said
        assert row.duration_s >= 0 and not df.started_at.isna().any(), df.to_string()


def shutil_which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    assert found, name
    return found
