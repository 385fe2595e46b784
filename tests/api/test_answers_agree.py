"""What sweeper records, prints, returns and reports about a sweep agree,
tested from the user's side: the CLI, ``sweep()`` and ``load()``."""

from __future__ import annotations

import os

import pytest

import sweeper
import sweep_fns
from conftest import run_cli, write_grid
from sweeper.errors import SweepError

SCORED = """from sweep_fns import scored as train
grid = {"x": [1, 2, 3]}
"""


def test_a_mistyped_metric_is_said_at_once_and_never_becomes_the_ranking(tmp_path):
    grid = write_grid(tmp_path, SCORED)
    out = str(tmp_path / "out")
    first = run_cli(grid, "--out", out, "--metric", "f1", "--quiet")
    assert first.returncode == 0, first.stderr
    again = run_cli(grid, "--out", out, "--metric", "val_acc", "--fresh", "--quiet")
    assert again.returncode == 2, again.stdout + again.stderr  # stopped after the first result without the metric
    said = [line for line in (again.stdout + again.stderr).splitlines() if "no metric 'val_acc'" in line]
    assert said and "(f1, val_auc, value); did you mean val_auc?" in said[0], again.stdout + again.stderr
    frame = sweeper.load(tmp_path / "out" / "grid")
    assert frame.attrs == {"metric": None, "mode": None}  # --fresh: a new ledger, and nothing ranked by val_acc
    resumed = run_cli(grid, "--out", out, "--metric", "val_acc", "--quiet")
    assert resumed.returncode == 2 and "no metric 'val_acc'" in resumed.stdout + resumed.stderr
    assert sweeper.load(tmp_path / "out" / "grid").attrs == {"metric": None, "mode": None}


def test_a_metric_on_record_stays_when_a_later_run_mistypes_it(tmp_path):
    out = str(tmp_path)
    sweeper.sweep(sweep_fns.scored, {"x": [1, 2]}, out=out, metric="f1", progress=False)
    with pytest.raises(SweepError, match="no metric 'val_acc'"):
        sweeper.sweep(sweep_fns.scored, {"x": [1, 2, 3]}, out=out, metric="val_acc", progress=False)
    assert sweeper.load(tmp_path / "sweep_fns").attrs == {"metric": "f1", "mode": "max"}


def test_a_search_with_a_metric_no_trial_reports_stops_and_fails(tmp_path):
    with pytest.raises(SweepError, match="no metric 'val_los'.*the sweep stopped"):
        sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0, 1), "epochs": 2, "pace": 0.0},
                      search="random", trials=8, metric="val_los", mode="min", workers=1, out=str(tmp_path),
                      progress=False)
    ran = sweeper.load(tmp_path / "sweep_fns", every=True)
    assert len(ran) == 1  # it stopped taking trials at the first result


def test_sweep_returns_the_attrs_load_reads(tmp_path):
    df = sweeper.sweep(sweep_fns.scored, {"x": [1, 2, 3]}, out=str(tmp_path), progress=False)
    assert df.attrs == sweeper.load(tmp_path / "sweep_fns").attrs
    df = sweeper.sweep(sweep_fns.scored, {"x": [1, 2, 3]}, out=str(tmp_path), name="m", metric="val_auc",
                       progress=False)
    assert df.attrs == {"metric": "val_auc", "mode": "max"} == sweeper.load(tmp_path / "m").attrs


def test_a_closed_output_drops_the_console_and_every_trial_still_runs(tmp_path):
    """``python -m sweeper grid.py | head -1``: the console is dropped once its reader has
    gone; every trial runs and is recorded, and the exit code says how they went."""
    import subprocess
    import sys

    import pandas as pd

    from conftest import ROOT
    from sweeper.store.table import READ_CSV

    grid = write_grid(tmp_path, """import time
from sweep_fns import echo

def train(params):
    time.sleep(0.3)
    return echo(params)

grid = {"x": [1, 2, 3, 4, 5]}
""")
    for args in ([], ["--dry-run"]):
        proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"),
                                 "--workers", "2", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # as `| head -1` does: one line, then the reader is gone
        proc.stdout.close()
        err = proc.stderr.read() if proc.stderr else ""
        assert proc.wait(timeout=120) == 0, err
        assert err == "", err
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert len(df) == 5 and (df.status == "ok").all(), df.error.tolist()


def test_every_row_has_the_columns_its_trial_reported(tmp_path):
    """A row carries its last reported epoch's metrics, overridden by what train returned:
    an ok row is not missing what a pruned one has."""
    df = sweeper.sweep(sweep_fns.reporter, {"x": [1, 2]}, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all()
    assert df.loss.tolist() == [1 / 3, 1 / 3]  # the last epoch's, never returned
    assert df.acc.tolist() == [3.0, 6.0]  # what train returned
    csv = __import__("pandas").read_csv(tmp_path / "sweep_fns" / "results.csv")
    assert csv.loss.notna().all()


@pytest.mark.unit
def test_help_states_each_default_as_options_has_it():
    """--help's defaults come from Options itself, so they cannot drift from the code."""
    import dataclasses

    from sweeper.backends import registry
    from sweeper.front.cli import parser

    defaults = {f.name: f.default for f, _ in registry.flags()}  # Options', and each backend group's
    checked = 0
    for action in parser()._actions:
        value = defaults.get(action.dest, None)
        if value is None or isinstance(value, bool) or not action.help:
            continue
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        assert f"default {shown}" in action.help, (action.dest, action.help)
        checked += 1
    assert checked >= 6


@pytest.mark.unit
def test_readme_and_docstrings_say_what_the_code_does():
    import os

    from conftest import ROOT

    import re

    from sweeper.front.cli import parser
    from sweeper.model.options import Options

    readme = open(os.path.join(ROOT, "README.md")).read()
    options = open(os.path.join(ROOT, "docs", "options.md")).read()
    # every flag the CLI takes is in the options reference, and the reference names no other
    taken = {o for a in parser()._actions for o in a.option_strings if o.startswith("--")} - {"--help", "--version"}
    rows = [line.split(" | ")[0] for line in options.splitlines() if line.startswith("| `--")]
    named = set(re.findall(r"`(--[a-z][a-z-]*)", "\n".join(rows)))
    assert taken == named, (sorted(taken - named), sorted(named - taken))
    # the default start method, as the code has it, is the one the reference and sweep() call the default
    default = Options().start_method
    assert f"| (default `{default}`) `{default}`: " in options
    assert "fork" in (sweeper.sweep.__doc__ or "").split("Args:")[0] and default == "forkserver"
    # the sample output shows only lines the program prints: each of its sweeper lines is one
    # of the CLI's own beginnings
    sample = readme.split("## The grid file")[0].split("$ python -m sweeper experiments/digits_mlp.py")[1]
    sample = sample.split("```")[0]
    said = [line for line in sample.splitlines() if line.startswith("sweeper:")]
    assert said and all(line.startswith(("sweeper: 8 of 8 trials on record", "sweeper: top 5 by",
                                         "sweeper: results:")) for line in said), said


def test_a_pruned_trial_stops_at_the_epoch_it_was_judged_and_a_seeded_search_repeats(tmp_path):
    """Each report waits for the pruner's verdict: error, epoch_reached, the row's metrics
    and history.csv name one epoch, and one worker gives the same rows twice."""
    import re

    import pandas as pd

    space = {"x": sweeper.uniform(0, 1), "epochs": 12, "pace": 0.01}
    frames = []
    for name in ("a", "b"):
        df = sweeper.sweep(sweep_fns.descent, space, search="tpe", trials=8, prune="median", metric="loss",
                           mode="min", workers=1, seed=3, out=str(tmp_path), name=name, progress=False)
        frames.append(df)
        pruned = df[df.status == "pruned"]
        assert len(pruned) >= 1, df[["status", "error"]]
        history = pd.read_csv(tmp_path / name / "history.csv")
        for _, row in pruned.iterrows():
            judged = int(re.search(r"at epoch (\d+)", row.error).group(1))
            epochs = history[history.trial_id == row.trial_id]
            assert judged == row.epoch_reached == epochs.epoch.max(), (row.error, row.epoch_reached, epochs)
            assert row.loss == epochs[epochs.epoch == judged].loss.item()
    same = ["trial", "status", "param_x", "loss", "error", "epoch_reached"]
    pd.testing.assert_frame_equal(frames[0][same], frames[1][same])


def test_a_parameter_name_with_control_characters_is_refused_in_one_line(tmp_path):
    path = write_grid(tmp_path, 'from sweep_fns import echo as train\ngrid = {"a\\x1b[31m": [1, 2]}\n')
    r = run_cli(path, "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "control characters" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "\x1b" not in r.stdout + r.stderr


@pytest.mark.parametrize("body, flags, words", [
    ('grid = {"x": [1, 2]}', ["--search", "tpe", "--trials", "2", "--metric", "value", "--mode", "max"],
     "got a grid (a search reads space"),
    ('space = {}\nsearch = "tpe"\ntrials = 2', ["--metric", "value", "--mode", "max"], "space is empty"),
    ('space = [1, 2]\nsearch = "tpe"\ntrials = 2', ["--metric", "value", "--mode", "max"], "got a list"),
])
def test_a_search_without_a_space_is_one_clear_line(tmp_path, body, flags, words):
    path = write_grid(tmp_path, f"from sweep_fns import echo as train\n{body}\n")
    r = run_cli(path, "--out", str(tmp_path / "out"), *flags)
    assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "Points" not in r.stderr and "TypeError" not in r.stderr


@pytest.mark.unit
def test_a_report_named_like_historys_own_columns_is_refused():
    from sweeper.model.metrics import BadResult, check_metric_name

    for name in ("trial_id", "trial", "epoch"):
        with pytest.raises(BadResult, match="clashes"):
            check_metric_name(name, final=False)


@pytest.mark.unit
def test_an_error_with_a_carriage_return_keeps_its_whole_text():
    from sweeper.model.outcome import last_line, raised

    exc = ValueError("loss went NaN\rat step 40")
    assert "loss went NaN" in last_line(exc) and "at step 40" in last_line(exc)
    assert "loss went NaN" in raised(exc).error


def test_a_damaged_ledger_is_one_line(tmp_path):
    folder = tmp_path / "out" / "grid"
    folder.mkdir(parents=True)
    (folder / "ledger.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x01" * 4000)
    path = write_grid(tmp_path, 'from sweep_fns import echo as train\ngrid = {"x": [1]}\n')
    r = run_cli(path, "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--fresh" in r.stderr, r.stderr


def test_ctrl_c_while_the_grid_file_imports_is_one_line(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    importing = tmp_path / "importing"
    path = write_grid(tmp_path, f"""import time
open({str(importing)!r}, "w").close()
time.sleep(600)
from sweep_fns import echo as train
grid = {{"x": [1]}}
""")
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", path, "--out", str(tmp_path / "out")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not importing.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the grid file's own sentinel
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and err.count("\n") == 1 and "interrupted" in err, err


@pytest.mark.unit
def test_a_ctrl_c_while_a_child_starts_arrives_when_it_has_started():
    """The parent holds SIGINT back while it starts a child (so the child inherits that); a
    Ctrl-C meanwhile was lost, and on a busy machine the child may import the whole grid
    file in that window (the test above then waited for the import, 600 s). Now it is
    held, and arrives as the window closes."""
    import signal

    from sweeper.backends.local.process import sigint_held

    import threading

    got = []
    with pytest.raises(KeyboardInterrupt):
        with sigint_held():
            # to the thread that starts children (the main one), where kill and a terminal's
            # Ctrl-C land in a process whose other threads block SIGINT, as sweeper's do
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            got.append("not yet")
        got.append("lost")
    assert got == ["not yet"]


@pytest.mark.unit
def test_a_ctrl_c_landing_on_another_thread_while_a_child_starts_is_not_lost():
    """A Ctrl-C (or a kill) the kernel hands to another thread of the parent, one that does
    not block SIGINT (a user's, a library's: sweeper's own block it), while the main thread
    starts a child. With SIG_IGN as the process's handler in that window it was dropped,
    and the sweep ran on (bench/search.py's budget watcher, a thread, lost one that way)."""
    import signal
    import threading
    import time

    from sweeper.backends.local.process import sigint_held

    go, sent = threading.Event(), threading.Event()

    def other() -> None:  # started before the window, so SIGINT is not blocked here
        go.wait(30)
        os.kill(os.getpid(), signal.SIGINT)  # the kernel hands it to a thread that takes it: this one
        sent.set()

    thread = threading.Thread(target=other)
    thread.start()
    with pytest.raises(KeyboardInterrupt):
        try:
            with sigint_held():
                go.set()
                assert sent.wait(30)
                time.sleep(0.05)  # the window stays open while that thread takes the signal
        finally:
            thread.join()
        for _ in range(100):  # Python runs the handler in the main thread at its next check
            time.sleep(0.01)


def test_a_trial_run_again_on_resume_counts_its_attempts_on(tmp_path):
    """A crashed trial run again by the next run is attempt 2, in its row and its log's
    second header, and still gets this run's retries."""
    first = sweeper.sweep(sweep_fns.flaky, {"x": [1]}, out=str(tmp_path), progress=False)
    assert first.status.tolist() == ["crashed"] and first.attempts.tolist() == [1]
    again = sweeper.sweep(sweep_fns.flaky, {"x": [1]}, out=str(tmp_path), progress=False)
    assert again.status.tolist() == ["ok"] and again.attempts.tolist() == [2]
    log = (tmp_path / "sweep_fns" / "trials" / "x=1" / "log.txt").read_text()
    headers = [line for line in log.splitlines() if line.startswith("=== sweeper: trial")]
    assert [("attempt 1," in h, "attempt 2," in h) for h in headers] == [(True, False), (False, True)], headers
