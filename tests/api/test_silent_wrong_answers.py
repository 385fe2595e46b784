"""Nothing wrong, either: the answers that were once wrong without a word, each tried from
the user's side (``sweep()`` and the CLI), each able to fail on the old behaviour."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

import sweeper
from sweeper.store.table import READ_CSV
import sweep_fns
from conftest import HERE, ROOT, install_module, run_cli, write_grid

PY = sys.executable


def _cli(grid, *args, **kw):
    return subprocess.Popen([PY, "-m", "sweeper", grid, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(path, proc=None, timeout=120):
    """Wait for a file a trial writes (its sentinel), failing if the sweep ended first."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


# -- 1. any real number is stored as a number -------------------------------------------

def test_numpy_and_framework_scalars_are_plain_numbers_everywhere(tmp_path):
    df = sweeper.sweep(sweep_fns.numpy_metrics, {"x": [1]}, out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"], df.error.tolist()
    expected = {"f64": 0.6, "f32": 0.25, "i64": 7, "arr": 2.5, "int_arr": 3, "flag": 1, "item": 0.125,
                "plain": 1.5}
    for name, value in expected.items():
        assert pd.api.types.is_numeric_dtype(df[name]), (name, df[name].dtype)
        assert df[name][0] == pytest.approx(value)
    assert pd.api.types.is_integer_dtype(df.i64) and pd.api.types.is_integer_dtype(df.int_arr)
    with open(tmp_path / "sweep_fns" / "results.csv") as f:
        row = next(csv.DictReader(f))
    assert row["f64"] == "0.6" and row["i64"] == "7" and row["f32"] == "0.25"  # never np.float64(0.6)
    ledger = sqlite3.connect(tmp_path / "sweep_fns" / "ledger.sqlite")
    assert '"f64": 0.6' in ledger.execute("SELECT metrics FROM trials").fetchone()[0]
    ledger.close()
    report = run_cli("report", str(tmp_path / "sweep_fns"))
    assert report.returncode == 0 and "f64" in report.stdout, report.stdout + report.stderr


SUBCLASS_GRID = """
import numpy as np

class Score(float):  # a float subclass the parent cannot import
    pass

def train(params):
    if params["x"] == 2:
        return {"acc": "high"}
    return {"acc": Score(0.5), "n": np.float64(0.25)}

grid = {"x": [1, 2, 3]}
"""


def test_a_float_subclass_from_the_grid_file_cannot_stop_the_sweep(tmp_path):
    done = run_cli(write_grid(tmp_path, SUBCLASS_GRID, "g.py"), "--out", str(tmp_path / "out"))
    table = pd.read_csv(tmp_path / "out" / "g" / "results.csv").set_index("param_x")
    assert table.status.to_dict() == {1: "ok", 2: "error", 3: "ok"}, done.stdout + done.stderr
    assert table.loc[1, "acc"] == 0.5 and table.loc[3, "n"] == 0.25
    assert "metric 'acc'" in table.loc[2, "error"]  # not a number: that trial's error, naming it
    assert done.returncode == 1


# -- 2. a row is reused only for the same definition -------------------------------------

def test_functions_are_told_apart_by_module_name_and_bound_arguments():
    import functools

    from sweeper.child.loading import describe

    assert describe(sweep_fns.echo) == "sweep_fns.echo" != describe(sweep_fns.echo2)
    assert describe(functools.partial(sweep_fns.echo, lr=1)) != describe(functools.partial(sweep_fns.echo, lr=2))
    assert describe(functools.partial(sweep_fns.echo)) != describe(functools.partial(sweep_fns.echo2))


def test_another_seed_or_function_is_refused_not_reused(tmp_path):
    out = str(tmp_path)
    first = sweeper.sweep(sweep_fns.echo, {"x": [1, 2]}, out=out, progress=False)
    with pytest.raises(sweeper.SweepError, match="seed 0, not 7.*--name.*--fresh"):
        sweeper.sweep(sweep_fns.echo, {"x": [1, 2]}, out=out, seed=7, progress=False)
    with pytest.raises(sweeper.SweepError, match="sweep_fns.echo, not sweep_fns.echo2"):
        sweeper.sweep(sweep_fns.echo2, {"x": [1, 2]}, out=out, name="sweep_fns", progress=False)
    again = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, out=out, progress=False)  # the same: resume
    assert again.started_at[:2].tolist() == first.started_at.tolist()
    fresh = sweeper.sweep(sweep_fns.echo, {"x": [1, 2]}, out=out, seed=7, fresh=True, progress=False)
    assert fresh.seed.tolist() != first.seed.tolist()  # --fresh runs under the new seed


def test_a_ledger_from_before_the_record_is_checked_by_its_rows_seeds(tmp_path):
    sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), progress=False)
    with sqlite3.connect(tmp_path / "sweep_fns" / "ledger.sqlite") as db:  # as the previous release left it
        db.execute("DELETE FROM meta WHERE key = 'definition'")
        db.execute("DROP TABLE grid")
    with pytest.raises(sweeper.SweepError, match="seed another, not 3"):
        sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), seed=3, progress=False)
    kept = sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), progress=False)  # same seed: resumes
    assert kept.status.tolist() == ["ok"]


def test_cli_another_seed_or_command_exits_2_in_one_line(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    assert run_cli(grid, "--out", str(tmp_path / "out")).returncode == 0
    refused = run_cli(grid, "--out", str(tmp_path / "out"), "--seed", "7")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "seed 0, not 7" in refused.stderr and "--name" in refused.stderr and "--fresh" in refused.stderr
    (tmp_path / "g.json").write_text('{"x": [1]}')
    script = os.path.join(HERE, "scripts", "argv_echo.py")
    a = run_cli("--command", f"{PY} {script} --x={{x}}", "--grid", str(tmp_path / "g.json"), "--out",
                str(tmp_path / "out"), "--name", "cmd")
    assert a.returncode == 0, a.stdout + a.stderr
    b = run_cli("--command", f"{PY} {script} --x={{x}} --y=1", "--grid", str(tmp_path / "g.json"), "--out",
                str(tmp_path / "out"), "--name", "cmd")
    assert b.returncode == 2 and "--y=1" in b.stderr and "--fresh" in b.stderr, b.stderr


# -- 3. a stop the parent asked for decides the status -----------------------------------

def test_a_trial_that_returns_after_sigterm_is_timeout_not_ok(tmp_path):
    # 2 s: an epoch takes 0.05 s, the 400 of them 20 s: the timeout comes between, as 3 s did
    df = sweeper.sweep(sweep_fns.graceful, {"epochs": [400]}, out=str(tmp_path), timeout=2, progress=False)
    assert df.status.tolist() == ["timeout"], df.error.tolist()
    assert 1 <= df.epochs_done[0] < 400  # its partial metrics are kept, never as ok
    again = sweeper.sweep(sweep_fns.graceful, {"epochs": [400]}, out=str(tmp_path), timeout=2, progress=False)
    assert again.started_at[0] != df.started_at[0]  # resume runs it again


def test_a_trial_that_returns_after_ctrl_c_is_interrupted_and_reruns(tmp_path):
    until = tmp_path / "until"
    grid = write_grid(tmp_path, "from sweep_fns import graceful as train\n"
                                f"grid = {{'epochs': [2000], 'until': [{str(until)!r}]}}\n")
    proc = _cli(grid, "--out", str(tmp_path / "out"))
    _wait_for(next_started(tmp_path / "out" / "grid", proc), proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    table = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert table.status.tolist() == ["interrupted"] and table.epochs_done[0] < 2000
    until.touch()  # the rerun trains to its end at once
    again = run_cli(grid, "--out", str(tmp_path / "out"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert pd.read_csv(tmp_path / "out" / "grid" / "results.csv").status.tolist() == ["ok"]


def next_started(folder, proc, timeout=120):
    """The ``started`` sentinel of the first trial to write one."""
    deadline = time.monotonic() + timeout
    while True:
        found = list((folder / "trials").glob("*/started")) if (folder / "trials").exists() else []
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no trial started"
        time.sleep(0.02)


def test_sigterm_exits_143_as_the_readme_says(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import graceful as train\ngrid = {'epochs': [2000]}\n")
    proc = _cli(grid, "--out", str(tmp_path / "out"))
    next_started(tmp_path / "out" / "grid", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, out + err
    assert pd.read_csv(tmp_path / "out" / "grid" / "results.csv").status.tolist() == ["interrupted"]
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "143 after SIGTERM, 129 after SIGHUP" in readme


# -- 4. distinct points, distinct folders, across runs ------------------------------------

def test_lookalike_points_never_share_a_folder_across_runs(tmp_path):
    out = str(tmp_path)
    for value in (1, "1", True, "True", [1, 2], "1-2"):
        df = sweeper.sweep(sweep_fns.const, {"x": [value]}, out=out, name="s", progress=False)
        assert df.status.tolist() == ["ok"], (value, df.error.tolist())
    trials = list((tmp_path / "s" / "trials").iterdir())
    assert len(trials) == 6
    for folder in trials:  # one trial per folder: one log header each
        assert (folder / "log.txt").read_text().count("=== sweeper: trial") == 1


def test_a_folder_named_by_an_older_release_stays_its_trials_alone(tmp_path):
    first = sweeper.sweep(sweep_fns.const, {"x": ["1"]}, out=str(tmp_path), name="s", progress=False)
    trials = tmp_path / "s" / "trials"
    (trials / first.trial[0]).rename(trials / "x=1")  # as the previous release named "1"
    with sqlite3.connect(tmp_path / "s" / "ledger.sqlite") as db:
        db.execute("UPDATE trials SET name = 'x=1'")
    df = sweeper.sweep(sweep_fns.const, {"x": ["1", 1]}, out=str(tmp_path), name="s",
                       progress=False).set_index("trial_id")
    assert df.loc[first.trial_id[0], "trial"] == "x=1"  # kept where its log is
    assert df.trial.is_unique and (trials / df.trial.iloc[1]).is_dir()
    assert (trials / "x=1" / "log.txt").read_text().count("=== sweeper: trial") == 1


# -- 6. under --shell a value is never executed -------------------------------------------

HOSTILE = ["$(touch {m})", "`touch {m}`", "'; touch {m}; '", '"; touch {m}; "', "a; touch {m}", "\\"]


# "{text}" and $(echo {text}) are safe now (values reach the shell as variables): tests/child/test_shell_values.py
@pytest.mark.parametrize("template", ["'{text}'", "\\{text}"])
def test_a_quoted_placeholder_is_refused_before_anything_runs(tmp_path, template):
    script = os.path.join(HERE, "scripts", "argv_echo.py")
    marker = tmp_path / "pwned"
    (tmp_path / "g.json").write_text(json.dumps({"text": [h.format(m=marker) for h in HOSTILE]}))
    done = run_cli("--command", f"{PY} {script} {template}", "--grid", str(tmp_path / "g.json"), "--shell",
                   "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "bare" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_hostile_values_under_a_bare_placeholder_arrive_verbatim(tmp_path):
    script = os.path.join(HERE, "scripts", "argv_echo.py")
    marker = tmp_path / "pwned"
    values = [h.format(m=marker) for h in HOSTILE]
    df = sweeper.sweep(sweeper.Command(f"{PY} {script} --text={{text}}", shell=True), {"text": values},
                       out=str(tmp_path), name="sh", progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert not marker.exists()
    for name, value in zip(df.trial, df.param_text):
        seen = json.loads((tmp_path / "sh" / "trials" / name / "seen.json").read_text())
        assert seen["argv"] == [f"--text={value}"]


# -- 7. the smaller items -----------------------------------------------------------------

def test_duration_is_the_trials_own_time_even_when_the_parent_was_stopped(tmp_path):
    release = tmp_path / "release"
    grid = write_grid(tmp_path, f"from sweep_fns import own_time as train\ngrid = {{'release': [{str(release)!r}]}}\n")
    proc = _cli(grid, "--out", str(tmp_path / "out"))
    trial = next_started(tmp_path / "out" / "grid", proc).parent
    proc.send_signal(signal.SIGSTOP)
    try:
        release.touch()
        _wait_for(trial / "result.json")  # the trial finished while the parent was stopped
        time.sleep(2)  # the parent stays stopped a while longer: the scenario, not a wait
    finally:
        proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    row = pd.read_csv(tmp_path / "out" / "grid" / "results.csv").iloc[0]
    assert row.duration_s < row.own_s + 1.0, (row.duration_s, row.own_s)


def test_control_characters_never_reach_the_console_or_the_csv(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import crash as train\ngrid = {'how': ['ctrl_chars', 'newline_metric']}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"))
    assert done.returncode == 1
    text = (tmp_path / "out" / "grid" / "results.csv").read_text()
    for stream in (done.stdout, text):
        assert not any(c in stream for c in "\x1b\x07\x00"), repr(stream)
    table = pd.read_csv(tmp_path / "out" / "grid" / "results.csv").set_index("param_how")
    assert "\\x1b]0;title\\x07" in table.loc["ctrl_chars", "error"]  # escaped, still readable
    assert table.loc["newline_metric", "status"] == "error"
    assert "control characters" in table.loc["newline_metric", "error"]
    assert len(text.splitlines()) == 3  # a header and one line per trial


def test_a_corrupt_ledger_is_one_line_and_fresh_sets_it_aside(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    folder = tmp_path / "out" / "grid"
    assert run_cli(grid, "--out", str(tmp_path / "out")).returncode == 0
    for extra in ("-wal", "-shm"):
        (folder / f"ledger.sqlite{extra}").unlink(missing_ok=True)
    (folder / "ledger.sqlite").write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    for args in ([grid, "--out", str(tmp_path / "out")], ["status", str(folder)], ["report", str(folder)]):
        done = run_cli(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "ledger.sqlite" in done.stderr and "--fresh" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(sweeper.SweepError, match="ledger.sqlite"):
        sweeper.load(str(folder))
    fresh = run_cli(grid, "--out", str(tmp_path / "out"), "--fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert len(list(folder.glob("ledger.*.sqlite"))) == 1  # the damaged one, kept aside


def test_load_gives_the_rows_of_results_csv_unless_asked_for_every_row(tmp_path):
    out = str(tmp_path)
    sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, out=out, progress=False)
    df = sweeper.sweep(sweep_fns.echo, {"x": [3, 1]}, out=out, progress=False)  # 2 left the grid
    folder = tmp_path / "sweep_fns"
    pd.testing.assert_frame_equal(sweeper.load(str(folder)), df)
    pd.testing.assert_frame_equal(sweeper.load(str(folder)), pd.read_csv(
        folder / "results.csv", **READ_CSV))
    assert sorted(sweeper.load(str(folder), every=True).param_x) == [1, 2, 3]


def test_no_standby_log_is_left_when_the_sweep_is_killed(tmp_path):
    go, hold, imported = tmp_path / "go", tmp_path / "hold", tmp_path / "imported"
    go.touch()
    # standbys import installed libraries ahead, with output to hide: one that says so
    site = install_module(tmp_path / "site", "noisy_lib", f"""import os, sys
if "SWEEPER_SLOT" in os.environ:  # a worker importing it
    print("noisy_lib imported", file=sys.stderr)
    open(os.path.join({str(imported)!r}, str(os.getpid())), "w").close()
""")
    grid = write_grid(tmp_path, f"""
import noisy_lib
from sweep_fns import wait_for_file as train
grid = [{{"x": [1], "release": [{str(go)!r}]}}, {{"x": [2, 3, 4, 5], "release": [{str(hold)!r}]}}]
options = {{"workers": 1, "start_method": "spawn"}}  # standbys that import, with output to hide
""")
    imported.mkdir()
    proc = _cli(grid, "--out", str(tmp_path / "out"), env={**os.environ, "PYTHONPATH": site})
    deadline = time.monotonic() + 120
    while len(list(imported.iterdir())) < 3:  # x=1's process, x=2's, and a standby for x=3
        assert time.monotonic() < deadline and proc.poll() is None, "no standby imported the grid"
        time.sleep(0.05)
    kids = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.communicate(timeout=30)
    psutil.wait_procs(kids, timeout=15)
    left = [p for p in (tmp_path / "out" / "grid").rglob("*") if ".standby" in str(p) or ".tmp" in p.name]
    assert not left, left


FILLING_GRID = """
import os
import sweeper

def train(params):
    if params["x"] == 2 and os.path.exists(params["fill"]):  # fills the disk, as checkpoints would
        with open(os.path.join(sweeper.current_trial().dir, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
            except OSError:
                pass
    return {{"value": float(params["x"])}}

grid = {{"x": [1, 2, 3, 4], "fill": [{fill!r}]}}
options = {{"workers": 1}}
"""


def test_a_full_disk_stops_new_trials_keeps_the_ledger_and_resumes(tmp_path, small_disk):
    fill = tmp_path / "fill"
    fill.touch()
    grid = write_grid(tmp_path, FILLING_GRID.format(fill=str(fill)))
    done = run_cli(grid, "--out", str(small_disk), "--no-prefetch")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ledger.sqlite" in done.stderr and "Traceback" not in done.stdout + done.stderr
    folder = small_disk / "grid"
    assert not [p for p in folder.rglob("*.tmp*")], "temporary files left behind"
    with sqlite3.connect(folder / "ledger.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        statuses = {json.loads(p)["x"]: s for p, s in db.execute("SELECT params, status FROM trials")}
    assert statuses.get(1) == "ok" and 4 not in statuses, statuses  # no new trial started
    fill.unlink()
    for filler in folder.glob("trials/*/filler"):
        filler.unlink()  # space again: the same command resumes
    again = run_cli(grid, "--out", str(small_disk), "--no-prefetch")
    assert again.returncode == 0, again.stdout + again.stderr
    table = pd.read_csv(folder / "results.csv")
    assert sorted(table.param_x) == [1, 2, 3, 4] and (table.status == "ok").all()


# -- a ledger from the previous release ----------------------------------------------------

def test_a_ledger_written_by_the_previous_release_resumes_unchanged(tmp_path):
    """tests/data/v0_ledger.sqlite was written by sweeper 0.1.0 (commit e96a9a8):
    sweep(sweep_fns.echo, {"x": [1, 2]}). Bare-hex ids, no schema version, no grid table."""
    import shutil

    folder = tmp_path / "sweep_fns"
    folder.mkdir()
    shutil.copy(os.path.join(HERE, "data", "v0_ledger.sqlite"), folder / "ledger.sqlite")
    before = sweeper.load(str(folder))  # read-only: ids as this release writes them
    assert before.trial_id.tolist() == ["t5041bf1f713d", "t5e2b030a4a0f"]
    df = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, out=str(tmp_path), progress=False)
    assert df.trial_id.tolist()[:2] == before.trial_id.tolist()
    pd.testing.assert_series_equal(df.started_at[:2], before.started_at)  # kept, not re-run
    assert df.status.tolist() == ["ok"] * 3 and df.seed.tolist()[:2] == before.seed.tolist()
    with sqlite3.connect(folder / "ledger.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 9  # v0 -> v1 -> ... -> v9
        assert {r[0] for r in db.execute("SELECT trial_id FROM trials")} == set(df.trial_id)


def test_a_folder_written_before_the_engine_restructure_resumes_unchanged(tmp_path):
    """tests/data/v1_sweep/ was written by commit db7bffb (schema 1, the last release of
    the scheduler layout): ``python -m sweeper grid.py`` with grid.py.txt as grid.py.
    The same command now keeps every trial, runs none, and leaves the tables as they were."""
    import shutil

    data = os.path.join(HERE, "data", "v1_sweep")
    folder = tmp_path / "out" / "grid"
    folder.mkdir(parents=True)
    for name in ("ledger.sqlite", "results.csv", "history.csv"):
        shutil.copy(os.path.join(data, name), folder / name)
    shutil.copy(os.path.join(data, "grid.py.txt"), tmp_path / "grid.py")  # moved, not changed
    with sqlite3.connect(folder / "ledger.sqlite") as db:
        rows_before = db.execute("SELECT * FROM trials ORDER BY trial_id").fetchall()
        history_before = db.execute("SELECT * FROM history ORDER BY trial_id, epoch").fetchall()
    done = run_cli(str(tmp_path / "grid.py"), "--out", str(tmp_path / "out"), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 of 3 trials on record: 3 ok (0 run this time" in done.stdout
    for name in ("results.csv", "history.csv"):
        with open(os.path.join(data, name)) as old, open(folder / name) as new:
            assert new.read() == old.read(), name
    with sqlite3.connect(folder / "ledger.sqlite") as db:
        # migrated to schema 9: each row gains epoch_reached, mem_peak_mb, gpu_mem_reserved_mb,
        # feasible, env, deterministic, job_id and segments, NULL (not known then); nothing else
        assert db.execute("SELECT * FROM trials ORDER BY trial_id").fetchall() == [
            (*row, None, None, None, None, None, None, None, None) for row in rows_before]
        assert db.execute("SELECT * FROM history ORDER BY trial_id, epoch").fetchall() == history_before
        assert db.execute("PRAGMA user_version").fetchone()[0] == 9
    df = sweeper.load(str(folder))
    assert df.status.tolist() == ["ok"] * 3 and df.loss.tolist() == [0.5, 0.25, 1 / 6]


def test_a_metric_whose_conversion_raises_is_that_trials_error_not_a_crash(tmp_path):
    """Whatever turning train's return value into numbers raises is judged like what
    train raised: an error row with the exception's last line, never a retried crash."""
    df = sweeper.sweep(sweep_fns.exploding_metric, {"x": [1]}, out=str(tmp_path), retries=2, progress=False)
    row = df.iloc[0]
    assert row.status == "error" and row.attempts == 1
    assert "RuntimeError: device lost while reading the metric" in row.error
    assert (tmp_path / "sweep_fns" / "trials" / row.trial / "result.json").exists()
