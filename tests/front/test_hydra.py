"""sweeper as a Hydra launcher, with real hydra-core: the small app of
tests/hydra_app run as a user runs it, ``python app.py -m hydra/launcher=sweeper ...``.

Its task function writes where it ran into its job folder (``seen.json``) and a line per run
into the sweep folder (``runs.txt``); the ``recording`` sweeper of tests/hydra_app/hydra_plugins
is Hydra's basic sweeper writing down every JobReturn the launcher gives it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas
import pytest

from conftest import HERE

hydra = pytest.importorskip("hydra", reason="hydra-core is not installed (pip install -e '.[hydra]')")

APP = os.path.join(HERE, "hydra_app")


@pytest.fixture
def app(tmp_path):
    """A copy of the app (its config may be edited), run in tmp_path."""
    shutil.copytree(APP, tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__", "multirun", "outputs"))
    return tmp_path


def multirun(where, *overrides: str, launcher: str = "sweeper", env: dict | None = None, sweep_dir: str = "sweep"):
    """``python app.py -m ...`` into ``where/sweep_dir``; the CompletedProcess."""
    args = [sys.executable, str(where / "app" / "app.py"), "-m", f"hydra/launcher={launcher}",
            "hydra/sweeper=recording", f"hydra.sweep.dir={where / sweep_dir}", *overrides]
    full = {**os.environ, "RECORD": str(where / f"{sweep_dir}.record"), **(env or {})}
    for name in ("APP_FAIL", "APP_KILL", "APP_OOM", "APP_HANG"):
        if env is None or name not in env:
            full.pop(name, None)
    return subprocess.run(args, cwd=where, env=full, capture_output=True, text=True, timeout=180)


def recorded(where, sweep_dir: str = "sweep") -> list[dict]:
    with open(where / f"{sweep_dir}.record") as f:
        return [json.loads(line) for line in f]


def runs(where, sweep_dir: str = "sweep") -> list[str]:
    with open(where / sweep_dir / "runs.txt") as f:
        return [line.split(" pid=")[0] for line in f.read().splitlines()]


def seen(where, num: int, sweep_dir: str = "sweep") -> dict:
    with open(where / sweep_dir / str(num) / "seen.json") as f:
        return json.load(f)


def job_files(folder) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files}


@pytest.mark.slow
def test_each_job_runs_in_a_fresh_process_on_a_card_of_its_own_leaving_what_the_basic_launcher_leaves(app, fake_nvml):
    """Each job a fresh process pinned to the card its row names, its folder as Hydra's basic
    launcher leaves it. (Two tests once, each with its own multirun of 4 jobs: on the CPU with
    hydra.launcher.workers=2, and on the fake machine's two cards, whose two slots are two
    workers. One on the two cards serves both: what a job's folder holds and the process it
    runs in do not depend on its card.)"""
    uuids = {f"gpu:{i}": card.uuid for i, card in enumerate(fake_nvml.cards)}
    env = {"SWEEPER_FAKE_NVML": fake_nvml.to_json(),
           "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "fake_machine"), os.environ.get("PYTHONPATH", "")])}
    done = multirun(app, "lr=0.1,0.01", "units=16,32", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    basic = multirun(app, "lr=0.1,0.01", "units=16,32", launcher="basic", sweep_dir="basic")
    assert basic.returncode == 0, basic.stderr[-3000:]
    ours, theirs = recorded(app), recorded(app, "basic")
    assert [r["overrides"] for r in ours] == [r["overrides"] for r in theirs]
    for mine, base in zip(ours, theirs):  # what Hydra's sweeper is given: the same, but where it ran
        assert mine["status"] == base["status"] == "COMPLETED"
        assert mine["value"] == pytest.approx(base["value"])
        assert mine["cfg"] == base["cfg"] and mine["task_name"] == base["task_name"] == "app"
        assert mine["working_dir"] == base["working_dir"] == str(app)  # hydra.job.chdir is off
        assert mine["output_dir"] == str(app / "sweep" / mine["output_dir"].rsplit("/", 1)[1])
    pids = set()
    for num in range(4):  # each job folder as the basic launcher makes it: .hydra/, the job's log
        assert job_files(app / "sweep" / str(num)) == job_files(app / "basic" / str(num)) == {
            ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "app.log", "seen.json"}
        for name in ("config.yaml", "overrides.yaml"):
            assert (app / "sweep" / str(num) / ".hydra" / name).read_text() == \
                (app / "basic" / str(num) / ".hydra" / name).read_text()
        assert "training with lr=" in (app / "sweep" / str(num) / "app.log").read_text()
        pids.add(seen(app, num)["pid"])
        assert seen(app, num)["num"] == num
    assert len(pids) == 4 and len({seen(app, n, "basic")["pid"] for n in range(4)}) == 1  # fresh, vs one
    assert "sweeper is launching 4 jobs" in done.stdout and "#3 : lr=0.01 units=32" in done.stdout
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert set(table.device) == {"gpu:0", "gpu:1"}
    for num, device in zip(table.trial, table.device):  # pinned to the card its row names
        assert seen(app, num)["cuda"] == uuids[device]


@pytest.mark.slow
def test_the_sweep_folder_is_a_sweepers_results_status_and_load_read_it(app):
    import sweeper

    done = multirun(app, "lr=0.1,0.01", "ret=dict")
    assert done.returncode == 0, done.stderr[-3000:]
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert list(table.trial) == [0, 1] and list(table.status) == ["ok", "ok"]
    assert list(table.param_lr) == [0.1, 0.01] and list(table.param_ret) == ["dict", "dict"]
    assert list(table.score) == pytest.approx([1.16, 0.26]) and table.units_seen.dtype.kind == "i"
    loaded = sweeper.load(str(app / "sweep"))
    assert list(loaded.score) == pytest.approx([1.16, 0.26])
    assert list(loaded.trial) == ["0", "1"]  # a job's number, as text (a trial's name)
    status = subprocess.run([sys.executable, "-m", "sweeper", "status", str(app / "sweep")],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "2 ok" in status.stdout, status.stdout + status.stderr
    assert "best so far: score = 1.16 (max): 0\n" in status.stdout  # "score" is higher-is-better
    none = multirun(app, "lr=0.1", "ret=none", sweep_dir="none")  # None: ok, no metric
    assert none.returncode == 0, none.stderr[-3000:]
    table = pandas.read_csv(app / "none" / "results.csv")
    assert list(table.status) == ["ok"] and "value" not in table
    assert recorded(app, "none")[0]["value"] is None


@pytest.mark.slow
def test_a_failed_job_is_said_with_its_log_the_same_command_runs_only_it_and_one_number_ranks_no_job_until_told(app):
    """A failed job is said as it ends, with its log; the same command again runs only it, a
    job of the multirun alone is kept, a new job takes a number no job had. A task function
    returning one float (an accuracy, say) is the metric ``value``, whose name says no
    direction: listed in job order, never ranked nor called best, until the mode is given.

    (Two tests once, each with its own multirun ``lr=0.1,0.01`` of jobs returning one float:
    the one that runs the failed job again serves both.)"""
    import sweeper

    failed = multirun(app, "lr=0.1,0.01", env={"APP_FAIL": "0.01"})
    assert failed.returncode != 0  # Hydra's sweeper sees the job failed
    assert "error       1  ValueError: lr=0.01 diverged" in failed.stdout  # said when it happened,
    assert f"log: {app / 'sweep' / 'trials' / '1' / 'log.txt'}" in failed.stdout  # with its log
    assert "job #1 (lr=0.01) ended error: ValueError: lr=0.01 diverged" in failed.stderr
    assert "lr=0.01 diverged" in (app / "sweep" / "trials" / "1" / "log.txt").read_text()
    assert [r["status"] for r in recorded(app)] == ["COMPLETED", "FAILED"]
    first = (app / "sweep" / "0" / "seen.json").read_text()
    assert sorted(runs(app)) == ["0 lr=0.1 units=16", "1 lr=0.01 units=16"]

    again = multirun(app, "lr=0.1,0.01")  # the same command: only the job not ok runs
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(runs(app)[2:]) == ["1 lr=0.01 units=16"]
    assert (app / "sweep" / "0" / "seen.json").read_text() == first  # a finished job's folder: untouched
    assert [r["status"] for r in recorded(app)[2:]] == ["COMPLETED", "COMPLETED"]
    assert recorded(app)[2]["value"] == pytest.approx(1.16)  # the kept job's own return value
    # values 1.16 and 0.26: the higher, job 0, is the better here
    assert ("sweeper: not ranked: 'value' does not say by its name whether higher or lower is better; give "
            "hydra.launcher.mode=max or hydra.launcher.mode=min to rank by it, or hydra.launcher.metric to rank "
            "by another\n") in again.stdout, again.stdout
    listed = again.stdout.split("sweeper: first 2 of 2 ok trials, in grid order (not ranked):\n")[1].splitlines()
    assert [line.split()[0] for line in listed[1:3]] == ["0", "1"], again.stdout
    assert "(min)" not in again.stdout and "assumed" not in again.stdout
    status = subprocess.run([sys.executable, "-m", "sweeper", "status", str(app / "sweep")],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "best" not in status.stdout, status.stdout + status.stderr
    assert sweeper.load(str(app / "sweep")).attrs["mode"] is None

    told = multirun(app, "lr=0.1,0.01", "hydra.launcher.mode=max")  # the jobs kept, now ranked
    assert told.returncode == 0 and len(runs(app)) == 3, told.stderr[-3000:]
    ranked = told.stdout.split("sweeper: top 2 by value (max):\n")[1].splitlines()
    assert [line.split()[0] for line in ranked[1:3]] == ["0", "1"], told.stdout
    status = subprocess.run([sys.executable, "-m", "sweeper", "status", str(app / "sweep")],
                            capture_output=True, text=True, timeout=120)
    assert "best so far: value = 1.16 (max): 0\n" in status.stdout, status.stdout + status.stderr

    alone = multirun(app, "lr=0.01")  # one job of the multirun again, alone: kept, nothing runs
    assert alone.returncode == 0 and len(runs(app)) == 3, alone.stderr[-3000:]

    more = multirun(app, "lr=0.001,0.1,0.01")  # a new job takes a number no job had
    assert more.returncode == 0, more.stderr[-3000:]
    assert runs(app)[3:] == ["2 lr=0.001 units=16"]
    assert (app / "sweep" / "0" / "seen.json").read_text() == first
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert list(zip(table.trial, table.param_lr, table.status)) == [(2, 0.001, "ok"), (0, 0.1, "ok"), (1, 0.01, "ok")]


@pytest.mark.slow
def test_a_killed_job_is_crashed_and_the_others_finish(app):
    done = multirun(app, "lr=0.1,0.01", env={"APP_KILL": "0.1"})
    assert done.returncode != 0
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert list(table.status) == ["crashed", "ok"]
    assert "SIGKILL" in table.error[0]
    assert "job #0 (lr=0.1) ended crashed" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("setting, env, status", [
    ("hydra.launcher.timeout=3", {"APP_HANG": "0.01"}, "timeout"),
    ("hydra.launcher.stall=3", {"APP_HANG": "0.01"}, "stalled"),
    ("hydra.launcher.retries=1", {"APP_OOM": "0.01"}, "oom"),
])
def test_every_way_a_job_ends_is_its_status(app, setting, env, status):
    done = multirun(app, "lr=0.1,0.01", setting, env=env)
    assert done.returncode != 0
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert list(table.status) == ["ok", status]
    assert f"job #1 (lr=0.01) ended {status}" in done.stderr
    if status == "oom":  # retried (sweeper's retries), then given up
        assert list(table.attempts) == [1, 2]


@pytest.mark.slow
def test_ctrl_c_ends_the_multirun_with_every_job_recorded_and_the_same_command_resumes(app):
    import signal
    import time

    args = [sys.executable, str(app / "app" / "app.py"), "-m", "hydra/launcher=sweeper", "lr=0.1,0.01",
            f"hydra.sweep.dir={app / 'sweep'}"]
    env = {**os.environ, "APP_HANG": "0.01"}
    proc = subprocess.Popen(args, cwd=app, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        runs_file, deadline = app / "sweep" / "runs.txt", time.monotonic() + 120
        while not (runs_file.exists() and "1 lr=0.01" in runs_file.read_text()):  # the hanging job started
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)
        second = multirun(app, "lr=0.1,0.01")  # another multirun into the same folder: refused, changing nothing
        assert second.returncode != 0 and "another sweep (pid" in second.stderr, second.stderr[-3000:]
        assert "Traceback" not in second.stderr
        assert "or give this multirun another hydra.sweep.dir" in second.stderr and "--name" not in second.stderr
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, out[-3000:]
    assert "interrupted; what finished is in" in out
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert dict(zip(table.trial, table.status))[1] == "interrupted"
    again = multirun(app, "lr=0.1,0.01")
    assert again.returncode == 0, again.stderr[-3000:]
    assert list(pandas.read_csv(app / "sweep" / "results.csv").status) == ["ok", "ok"]


@pytest.mark.slow
@pytest.mark.parametrize("setting, said", [
    ("hydra.launcher.per_gpu=lots", "hydra.launcher: per_gpu"),
    ("+hydra.launcher.search=tpe", "hydra.launcher.search is not a setting of sweeper's launcher"),
    ("+hydra.launcher.wokers=2", "unknown option 'wokers' in hydra.launcher; did you mean 'workers'?"),
    ("hydra.launcher.wokers=2", "Key 'wokers' is not in struct"),
])
def test_a_mistaken_setting_is_one_line_before_any_job(app, setting, said):
    done = multirun(app, "lr=0.1,0.01", setting)
    assert done.returncode != 0 and said in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not (app / "sweep" / "0").exists()


@pytest.mark.slow
def test_batches_of_hydras_sweeper_make_one_table_say_one_summary_and_a_changed_config_is_refused(app):
    """Hydra's sweeper in batches of 2: one table of all 4 jobs, each batch's launch line as
    Hydra logs its own, one summary of all 4 jobs when the multirun ends, no batch said to
    resume the earlier ones; a batch with a failed job (where Hydra's basic sweeper stops) is
    summarised before Hydra's error. The same command again after the config files changed but
    no job's config did keeps every job; a changed job's config is refused, fresh=true runs all.

    (Two tests once, each starting with its own batched multirun of 4 jobs: one sweep serves both.)"""
    grid = ("lr=0.1,0.01", "model=small,big")
    done = multirun(app, *grid, "hydra.sweeper.max_batch_size=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["first"] for r in recorded(app)] == [0, 0, 2, 2]
    table = pandas.read_csv(app / "sweep" / "results.csv")
    assert list(table.trial) == [0, 1, 2, 3] and list(table.status) == ["ok"] * 4
    assert done.stdout.count("[HYDRA] sweeper is launching 2 jobs") == 2, done.stdout
    assert done.stdout.count("trials on record") == 1 and "resumed" not in done.stdout, done.stdout
    assert "sweeper: 4 of 4 trials on record: 4 ok (4 run this time, " in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith(f"sweeper: results: {app / 'sweep' / 'results.csv'}"), done.stdout

    failing = multirun(app, "lr=0.1,0.01", "units=16,32", "hydra.sweeper.max_batch_size=2", env={"APP_FAIL": "0.01"},
                       sweep_dir="failing")  # the second batch fails
    assert failing.returncode != 0
    assert failing.stdout.count("trials on record") == 1, failing.stdout
    assert "sweeper: 4 of 4 trials on record: 2 ok, 2 error (4 run this time, " in failing.stdout, failing.stdout
    assert "job #2 (lr=0.01 units=16) ended error" in failing.stderr

    conf = app / "app" / "conf"
    (conf / "config.yaml").write_text((conf / "config.yaml").read_text() + "# a comment changes no job\n")
    same = multirun(app, *grid)  # the files changed, the jobs' configs did not: every job kept
    assert same.returncode == 0 and len(runs(app)) == 4, same.stderr[-3000:]
    (conf / "model" / "big.yaml").write_text("width: 128\n")  # the option two of the jobs choose
    changed = multirun(app, *grid)
    assert changed.returncode != 0 and len(runs(app)) == 4
    assert "job #1 (lr=0.1 model=big) is on record" in changed.stderr and "its config changed" in changed.stderr
    assert "hydra.launcher.fresh=true" in changed.stderr and "another hydra.sweep.dir" in changed.stderr
    assert "Traceback" not in changed.stderr
    fresh = multirun(app, *grid, "hydra.launcher.fresh=true")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert sorted(runs(app)[4:]) == ["4 lr=0.1 units=16", "5 lr=0.1 units=16", "6 lr=0.01 units=16",
                                     "7 lr=0.01 units=16"]  # new numbers: no job folder written twice
    assert seen(app, 0)["num"] == 0 and len(pandas.read_csv(app / "sweep" / "results.csv")) == 4


@pytest.mark.slow
def test_a_multirun_again_after_the_apps_code_changed_says_which_kept_jobs_other_code_made(app):
    """A job ok on record is kept when the app's code changed since it ran, as a resume keeps it,
    and the multirun says so in one line before any job runs: which jobs, which files, how to run
    them all again; every later multirun says it again while such a row stands; never said
    where every kept job ran the code the app has now."""
    said = "the app's code changed since"
    first = multirun(app, "lr=0.1")
    assert first.returncode == 0, first.stderr[-3000:]
    again = multirun(app, "lr=0.1")
    assert again.returncode == 0 and said not in again.stdout + again.stderr, again.stdout
    script = app / "app" / "app.py"
    script.write_text(script.read_text().replace("float(cfg.lr) * 10", "float(cfg.lr) * 100"))
    edited = multirun(app, "lr=0.1,0.02", "hydra.launcher.progress=false")
    assert edited.returncode == 0, edited.stderr[-3000:]
    line = ("sweeper: the app's code changed since job #0 on record ran ok (edited: app.py): its row is kept as made, "
            "as a resume keeps every job ok on record; hydra.launcher.fresh=true runs every job again")
    assert [t for t in edited.stdout.splitlines() if said in t] == [line], edited.stdout
    assert runs(app) == ["0 lr=0.1 units=16", "1 lr=0.02 units=16"]  # job 0 kept; job 1 ran the edited app
    values = [r["value"] for r in recorded(app)[-2:]]
    assert values == [pytest.approx(1.16), pytest.approx(2.16)]  # job 0's old return (0.1*10), job 1's new (0.02*100)
    (app / "app" / "helper.py").write_text("SCALE = 1\n")  # a module of the app, beside its script
    later = multirun(app, "lr=0.1,0.02")
    assert later.returncode == 0 and len(runs(app)) == 2, later.stderr[-3000:]
    assert "code changed since 2 jobs (#0, #1) on record ran ok (edited: app.py; added: helper.py): their rows are " \
           "kept as made" in later.stdout, later.stdout
    fresh = multirun(app, "lr=0.1,0.02", "hydra.launcher.fresh=true")
    assert fresh.returncode == 0 and said not in fresh.stdout, fresh.stdout
    assert sorted(runs(app)[2:]) == ["2 lr=0.1 units=16", "3 lr=0.02 units=16"]
    assert [r["value"] for r in recorded(app)[-2:]] == [pytest.approx(10.16), pytest.approx(2.16)]
    settled = multirun(app, "lr=0.1,0.02")
    assert settled.returncode == 0 and said not in settled.stdout and len(runs(app)) == 4, settled.stdout


def _said(text: str, folder: str) -> list[str]:
    """What sweeper says at a multirun's end, as docs/hydra.md shows it: its summary lines and
    tables (not the jobs' lines, whose order is the processes', nor the machine's GPUs), the
    sweep folder and every time put aside."""
    import re

    keep = [line for line in text.splitlines() if line.startswith(("sweeper: ", "  ")) and "NVIDIA" not in line
            and not line.startswith(("    |", "    log:"))]
    return [re.sub(r"\d+\.\d+s\)", "Xs)", line.replace(folder, "FOLDER")) for line in keep]


def _table(text: str, columns: list[str]) -> list[dict[str, str]]:
    """A results.csv's rows in ``columns`` but those of the machine and the moment (device,
    started_at, duration_s, mem_peak_mb)."""
    import csv

    kept = [c for c in columns if c not in ("device", "started_at", "duration_s", "mem_peak_mb")]
    return [{c: row.get(c, "") for c in kept} for row in csv.DictReader(text.splitlines())]


@pytest.mark.slow
def test_what_a_multirun_shows_is_what_its_commands_print(tmp_path):
    """docs/hydra.md's "What a multirun shows", pasted into a shell in a folder holding the tests'
    app where the page has it: each command's exit status, its closing lines and its table."""
    page = open(os.path.join(HERE, "..", "docs", "hydra.md"), encoding="utf-8").read()
    section = page.split("## What a multirun shows")[1].split("\n## ")[0]
    shutil.copytree(APP, tmp_path / "tests" / "hydra_app", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    shown, folder = "/tmp/multirun/demo", str(tmp_path / "multirun" / "demo")
    commands = 0
    for block in section.split("```text\n")[1:]:
        steps = block.split("```")[0].split("\n$ ")
        rc = None
        for step in steps:
            command, _, expected = step.removeprefix("$ ").partition("\n")
            if command == "echo $?":
                assert str(rc) == expected.strip(), command
                continue
            done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=180)
            rc, out = done.returncode, done.stdout + done.stderr
            if command.startswith("cat "):
                columns = expected.splitlines()[0].split(",")
                assert _table(out, columns) == _table(expected, columns), out
            else:
                assert _said(out, folder) == _said(expected, shown), (command, out)
            commands += 1
    assert commands == 5
