"""Slurm as submitit's users know it, on a real one-node Slurm (tests/slurm_cluster.py, a
cluster of this module's own): set-up lines before each task (docs/slurm.md's venv and conda
examples, pasted), each point's own sbatch options (the docs' grid file), and a detached sweep
(--detach): its driver a job of its own, status and report from the login node, scancel's two
meanings, the same command going on, and a Ctrl-C while it submits."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest
import slurm_cluster
from conftest import ROOT, run_cli, write_grid
from slurm_cluster import Heard, nothing_left, slurm, sweep_jobs, until  # noqa: F401 (slurm, nothing_left: fixtures)
from test_slurm_says import GATED, starts, status, tasks

import sweeper

pytestmark = [pytest.mark.skipif(bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or "-"), pytest.mark.slurm]

PAGE = open(os.path.join(ROOT, "docs", "slurm.md"), encoding="utf-8").read()


def _blocks(after: str, lang: str) -> list[str]:
    """The page's code blocks of ``lang`` after the line ``after``, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.split(after, 1)[1], re.DOTALL)


def test_set_up_lines_run_before_each_task_as_the_docs_venv_and_conda_examples_give_them(slurm, tmp_path):
    """The docs' two commands, their --slurm-setup lines as pasted (in a home of the test's
    own: a virtual environment made there, conda's profile script a stand-in that activates by
    name, `module` a command that notes what it loads): each task's trial runs with what they
    set; a line that fails ends the task, its row naming the task's output file."""
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venvs" / "sweeps")], check=True)
    profile = home / "miniconda3" / "etc" / "profile.d"
    profile.mkdir(parents=True)
    (profile / "conda.sh").write_text('conda() { [ "$1" = activate ] && export CONDA_DEFAULT_ENV="$2"; }\n')
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "module").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'modules'}\n")
    (bin_ / "module").chmod(0o755)
    grid = write_grid(tmp_path, (
        "import os\n"
        "def train(params):\n"
        "    return {'venv': float(os.environ.get('VIRTUAL_ENV', '').endswith('/venvs/sweeps')),\n"
        "            'conda': float(os.environ.get('CONDA_DEFAULT_ENV') == 'sweeps')}\n"
        "grid = {'x': [1, 2]}\n"))
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_}:{os.environ['PATH']}"}
    blocks = _blocks("## Set-up lines", "bash")[:2]
    for block, kind in zip(blocks, ("venv", "conda")):
        words = shlex.split(block.strip())
        setup = [w for pair in zip(words, words[1:]) if pair[0] == "--slurm-setup" for w in pair[1:]]
        assert words[:5] == ["python", "-m", "sweeper", "grid.py", "--backend"] and len(setup) == 2, block
        done = subprocess.run([sys.executable, "-m", "sweeper", grid, *words[4:], "--out", str(tmp_path / kind)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        df = sweeper.load(str(tmp_path / kind / "grid"))
        assert df[kind].tolist() == [1.0, 1.0], df.to_string()
    assert (tmp_path / "modules").read_text().split("\n")[:2] == ["load cuda/12"] * 2  # once per task
    failing = subprocess.run([sys.executable, "-m", "sweeper", grid, "--backend", "slurm", "--slurm-setup",
                              "source /nowhere/bin/activate", "--out", str(tmp_path / "failing")], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, env=env)
    df = sweeper.load(str(tmp_path / "failing" / "grid"))
    assert failing.returncode == 1 and df.status.tolist() == ["crashed"] * 2, failing.stdout + failing.stderr
    assert all("its batch script: line 4: /nowhere/bin/activate: No such file or directory; see " in e
               and e.endswith(".out)") for e in df.error), df.error


def test_each_point_gets_its_own_sbatch_options_from_the_docs_grid_file(slurm, tmp_path):
    """docs/slurm.md's resources() in a grid file's options (called as the file is read): the
    large point's task has 16G and 4 CPUs, the small ones 4G, each in an array of its own
    options; at most --workers 2 of the sweep's tasks at a time in all."""
    (snippet,) = _blocks("## Each point's own resources", "python")[:1]
    spans = tmp_path / "spans"
    grid = write_grid(tmp_path, snippet + (
        "import os, time\n"
        "def train(params):\n"
        f"    with open({str(spans)!r}, 'a') as f:\n"
        "        f.write(f'+ {time.time()}\\n')\n"
        "    time.sleep(0.5)\n"
        f"    with open({str(spans)!r}, 'a') as f:\n"
        "        f.write(f'- {time.time()}\\n')\n"
        "    return {'mem': float(os.environ['SLURM_MEM_PER_NODE']),\n"
        "            'cpus': float(os.environ.get('SLURM_CPUS_PER_TASK', 1))}\n"
        "grid = {'units': [64, 1024, 128]}\n"))
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    df = sweeper.load(str(tmp_path / "out" / "grid")).set_index("param_units")
    assert df.mem.to_dict() == {64: 4096.0, 1024: 16384.0, 128: 4096.0}, df.to_string()
    assert df.cpus.to_dict() == {64: 1.0, 1024: 4.0, 128: 1.0}, df.to_string()
    arrays = {units: job.split("_")[0] for units, job in df.job_id.items()}
    assert arrays[64] == arrays[128] != arrays[1024], arrays
    at, most = 0, 0
    for _, step in sorted((float(t), +1 if s == "+" else -1) for s, t in map(str.split, spans.read_text().splitlines())):
        at += step
        most = max(most, at)
    assert most <= 2, spans.read_text()


def _detach(command: list[str], **env: str) -> tuple[str, str]:
    """``command --detach``: its output, and the driver's job."""
    done = subprocess.run([*command, "--detach"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    return said, re.search(r"as Slurm job (\d+);", said).group(1)


def test_a_detached_sweep_runs_as_a_job_of_its_own_and_scancel_stops_it_or_leaves_it_to_the_same_command(
        slurm, tmp_path):
    """--detach returns at once, saying the docs' lines; its driver runs as a Slurm job. From the
    login node meanwhile: status names the driver's job, report reads the folder, a second
    --detach is refused. The driver's process SIGKILLed: its tasks run on;
    --detach again takes them over. scancel of that driver: the sweep stops, nothing left in the
    queue, rows interrupted. The same command without --detach then finishes it."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    grid = write_grid(tmp_path, GATED.format(xs=[1, 2, 3], gate=str(gate)))
    folder = out / "grid"
    command = [sys.executable, "-m", "sweeper", grid, "--out", str(out), "--backend", "slurm", "--workers", "2"]
    said, job = _detach(command)
    doc = PAGE.split("$ python -m sweeper grid.py --backend slurm --slurm partition=gpu --detach\n")[1].split("```")[0]
    for line, shown in zip(said.splitlines(), doc.splitlines()):
        shown = shown.replace("/home/you/sweeper/results/grid", str(folder)).replace("4711", job)
        assert line == shown, (line, shown)
    until(lambda: len(starts(folder)) == 2, "the detached driver's first two trials started")
    until(lambda: f"Slurm job {job})" in status(folder) and "2 running" in status(folder), "status names the driver")
    (tmp_path / "gate1").touch()
    until(lambda: "1 of 3 trials finished: 1 ok" in status(folder), "the first trial finished")
    report = run_cli("report", str(folder))
    assert report.returncode == 0 and (folder / "report.html").exists(), report.stdout + report.stderr
    again = subprocess.run([*command, "--detach"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "this sweep runs already (pid" in again.stderr and f"Slurm job {job})" in again.stderr
    # a driver that dies with no word (its node lost, the OOM killer): its process SIGKILLed (scancel's KILL
    # is no such death: Slurm cancels the job, SIGTERM first)
    host, pid = (folder / ".jobs" / "driver").read_text().split()[:2]
    os.kill(int(pid), signal.SIGKILL)
    until(lambda: "not running (no driver)" in status(folder), "the killed driver's tasks left running")
    left = tasks()
    assert len(left) == 2, left
    said, second = _detach(command)
    output = folder / ".jobs" / f"driver-{second}.out"
    until(lambda: output.exists() and "took over 2 Slurm tasks" in output.read_text(), "the new driver took over")
    assert tasks() == left | {second}  # (the new driver's job, and the same two tasks: none submitted again)
    subprocess.run(["scancel", second], check=True)
    until(lambda: not tasks(), "scancel of the driver: its tasks cancelled", within=30)
    last = [""]

    def gone() -> bool:
        last[0] = status(folder)
        # (the job's id as status names a job: a bare digit is in paths and hashes too)
        return "not running" in last[0] and not re.search(rf"\bjob {second}\b", last[0])

    try:
        until(gone, "the driver gone")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; status said:\n{last[0]}\nthe driver's output:\n{output.read_text()}") from None
    gate.touch()
    done = run_cli(*command[3:], "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr + output.read_text()
    df = sweeper.load(str(folder))
    assert df.status.tolist() == ["ok"] * 3, df[["status", "error"]].to_string()


def test_a_ctrl_c_while_detach_submits_leaves_nothing_of_the_sweep(slurm, tmp_path):
    """The terminal's Ctrl-C while sbatch takes the driver's job (a wrapper sbatch answers 3 s
    after it submitted): the job is cancelled, exit 130, nothing in the queue."""
    wrapper, flag = tmp_path / "bin", tmp_path / "submitted"
    wrapper.mkdir()
    (wrapper / "sbatch").write_text(f"#!/bin/sh\n{shutil.which('sbatch')} \"$@\" > {tmp_path / 'answer'}\n"
                                    f"touch {flag}\nsleep 3\ncat {tmp_path / 'answer'}\n")
    (wrapper / "sbatch").chmod(0o755)
    grid = write_grid(tmp_path, GATED.format(xs=[1], gate=str(tmp_path / "never")))
    detaching = Heard(subprocess.Popen(
        [sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--backend", "slurm", "--detach"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PATH": f"{wrapper}:{os.environ['PATH']}"}))
    try:
        until(flag.exists, "sbatch took the driver's job, its answer not yet given")
        os.killpg(detaching.process.pid, signal.SIGINT)
        said = detaching.end(timeout=60)
    finally:
        detaching.process.kill()
    assert detaching.process.returncode == 130 and "was cancelled: nothing of the sweep runs" in said, said
    until(lambda: not sweep_jobs(), "nothing of the sweep in Slurm's queue", within=15)
