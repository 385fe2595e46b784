"""The sweep engine end to end: real processes, real TensorFlow, real files."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

import sweeper
from sweeper.store.table import READ_CSV
import sweep_fns
from conftest import ROOT, run_cli, write_grid

EXAMPLE = os.path.join(ROOT, "experiments", "digits_mlp.py")
COLUMNS = ["trial_id", "trial", "status", "param_batch_size", "param_epochs", "param_lr", "param_units",
           "val_accuracy", "val_loss", "train_accuracy", "epochs_run", "accuracy", "loss",
           "seed", "device", "started_at", "duration_s", "error", "attempts", "epoch_reached", "mem_peak_mb"]
SMALL = {"lr": [0.01], "units": [16, 64], "batch_size": [64], "epochs": 3}


@pytest.fixture(scope="module")
def example():
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    import digits_mlp

    yield digits_mlp
    sys.path.remove(os.path.dirname(EXAMPLE))


@pytest.mark.slow
def test_example_trains_real_models_reproducibly(tmp_path, example):
    first = sweeper.sweep(example.train, SMALL, out=str(tmp_path / "a"), workers=2, progress=False)
    assert list(first.columns) == COLUMNS
    assert (first.status == "ok").all() and first.error.isna().all()
    assert first.val_accuracy.between(0.6, 1.0).all(), first.val_accuracy
    assert (first.device == "cpu").all() and (first.attempts == 1).all() and (first.epoch_reached == 3).all()
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "digits_mlp" / "results.csv",
                                              **READ_CSV), first)
    # each trial in its own process, none of them the parent
    pids = set()
    for name in first.trial:
        header = (tmp_path / "a" / "digits_mlp" / "trials" / name / "log.txt").read_text().splitlines()[0]
        pids.add(int(header.split(" pid ")[1].split(",")[0]))
    assert len(pids) == len(first) and os.getpid() not in pids
    # sweeper.keras.Report() in the example: one history row per epoch per trial
    history = pd.read_csv(tmp_path / "a" / "digits_mlp" / "history.csv")
    assert sorted(history.groupby("trial").epoch.apply(list).tolist()) == [[1, 2, 3]] * 2
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history.columns)
    last = history[history.epoch == 3].set_index("trial").val_accuracy
    assert (last.loc[first.trial].values == first.val_accuracy.values).all()
    second = sweeper.sweep(example.train, SMALL, out=str(tmp_path / "b"), workers=2, progress=False)
    metrics = ["val_accuracy", "val_loss", "train_accuracy"]
    pd.testing.assert_frame_equal(first[metrics], second[metrics])


def test_each_trial_is_its_own_spawned_process(tmp_path):
    df = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3, 4]}, out=str(tmp_path), workers=2, progress=False,
                       start_method="spawn")
    assert df.value.tolist() == [2.0, 4.0, 6.0, 8.0]
    assert df.pid.nunique() == 4 and os.getpid() not in set(df.pid)
    assert (df.ppid == os.getpid()).all()
    assert (df.seed_seen == df.seed).all()  # current_trial() inside the trial
    assert (df.cuda == -1).all()  # CPU slots hide every GPU


def test_seeds_reach_python_and_numpy_imported_late(tmp_path):
    """Also a probe of numpy's spec before its import does not cost numpy its seed: the probing
    trial draws what the same trial (x=1, seed 0) of the plain sweep ``a`` drew."""
    a = sweeper.sweep(sweep_fns.draws, {"x": [1, 2]}, out=str(tmp_path / "a"), progress=False)
    b = sweeper.sweep(sweep_fns.draws, {"x": [2, 1]}, out=str(tmp_path / "b"), progress=False)
    b = b.set_index("trial_id").loc[a.trial_id].reset_index()
    pd.testing.assert_frame_equal(a[["py", "np"]], b[["py", "np"]])  # same trial, same draws
    assert a.py.nunique() == 2 and a.np.nunique() == 2  # different trials, different draws
    c = sweeper.sweep(sweep_fns.draws, {"x": [1, 2]}, out=str(tmp_path / "c"), seed=1, progress=False)
    assert not (c.np == a.np).any()
    probed = sweeper.sweep(sweep_fns.probe_then_import, {"x": [1]}, out=str(tmp_path / "p"), progress=False)
    assert probed.np.tolist() == a[a.param_x == 1].np.tolist()


def test_sampled_points_run_as_drawn(tmp_path):
    space = {"layers": [[8, 8], [16]], "x": sweeper.uniform(0, 1)}
    points = sweeper.sample(space, 4, seed=0)
    df = sweeper.sweep(sweep_fns.echo, points, out=str(tmp_path), progress=False)
    assert len(df) == 4
    assert set(df.param_layers) <= {"[8, 8]", "[16]"}
    assert df.value.tolist() == [2 * p["x"] for p in points]


def test_cli_runs_a_grid_file_and_summarises(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1, 2, 3]}\n"
                      "options = {'workers': 2, 'metric': 'value', 'mode': 'max'}\n", name="echoes.py")
    done = run_cli(grid, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "3 ok" in done.stdout
    assert "sweeper: top 3 by value (max):" in done.stdout
    board = done.stdout.split("top 3 by value (max):")[1].splitlines()[2:5]
    assert [line.split()[0] for line in board] == ["x=3", "x=2", "x=1"]
    csv = tmp_path / "out" / "echoes" / "results.csv"
    assert f"results: {csv}" in done.stdout
    assert len(pd.read_csv(csv)) == 3
    again = run_cli(grid, "--out", str(tmp_path / "out"))  # resume: nothing left to run
    assert again.returncode == 0 and "0 run this time" in again.stdout


def test_cli_exit_code_1_when_a_trial_fails(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import crash as train\ngrid = {'how': ['ok', 'raise']}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--name", "mixed")
    assert done.returncode == 1
    assert "1 ok, 1 error" in done.stdout
    assert "ValueError: boom from the trial" in done.stdout  # the failure and its log's tail
    assert "\x1b" not in done.stdout  # plain lines when not on a terminal


#: ``python -m sweeper`` as a user runs it, in a process that also says which heavy modules it
#: holds right after the grid file was read and once the command is done (on its last line).
WATCHED_CLI = """import runpy, sys
import sweeper.front.gridfile as g
heavy = lambda: sorted(m for m in ('tensorflow', 'keras', 'pandas') if m in sys.modules)
read, seen = g.read, {}
def watched(*args, **kwargs):
    grid = read(*args, **kwargs)
    seen['read'] = heavy()
    return grid
g.read = watched
sys.argv = ['sweeper', *sys.argv[1:]]
try:
    runpy.run_module('sweeper', run_name='__main__', alter_sys=True)
except SystemExit as end:
    code = end.code
print('modules', seen.get('read'), [m for m in heavy() if m != 'pandas'])
sys.exit(code)
"""


def test_dry_run_runs_nothing_and_parent_never_imports_tensorflow(tmp_path):
    """One run of the example's dry run (its grid file imports Keras: each read of it is
    TensorFlow's import in the reader, seconds of CPU), watched from inside: right after the
    command's own read of the grid file (the spawned reader of a dry run, as any read
    without a fork server) the parent holds none of TensorFlow, Keras and pandas, and
    TensorFlow and Keras still none when the command is done."""
    done = subprocess.run([sys.executable, "-c", WATCHED_CLI, EXAMPLE, "--out", str(tmp_path), "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "8 trials" in done.stdout and "starts on" in done.stdout
    assert not (tmp_path / "digits_mlp").exists()
    assert done.stdout.splitlines()[-1] == "modules [] []", done.stdout + done.stderr


def test_import_sweeper_is_light():
    probe = "import sys, sweeper; print(sorted(m for m in ('tensorflow', 'keras', 'pandas', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr


# -- bad input: one line naming the problem and the fix, exit code 2 ------------------

BAD_GRIDS = [
    ("raising", "import sweep_fns\n1 / 0\n", "raised on import: ZeroDivisionError"),
    # control characters in the error's text are escaped: one line, no terminal codes
    ("raising_control", "raise ValueError('bad\\rvalue\\x1b[31m')\n", "raised on import: ValueError: bad\\rvalue\\x1b[31m"),
    ("syntax", "def train(:\n", "is not valid Python"),
    ("no_train", "grid = {'x': [1]}\n", "defines no train"),
    ("no_grid", "from sweep_fns import echo as train\n", "defines no grid"),
    ("not_callable", "train = 3\ngrid = {'x': [1]}\n", "not a function"),
    ("wrong_args", "def train(a, b):\n    pass\ngrid = {'x': [1]}\n", "called as train(params)"),
    ("empty_list", "from sweep_fns import echo as train\ngrid = {'x': []}\n", "'x' has an empty list"),
    ("empty_list_grid", "from sweep_fns import echo as train\ngrid = []\n", "grid is an empty list"),
    ("empty_grid", "from sweep_fns import echo as train\ngrid = {}\n", "grid is empty"),
    ("unstorable", "from sweep_fns import echo as train\ngrid = {'opt': [object()]}\n", "'opt'"),
    ("not_a_grid", "from sweep_fns import echo as train\ngrid = 'lr'\n", "grid must be a dict"),
    ("bad_option", "from sweep_fns import echo as train\ngrid = {'x': [1]}\noptions = {'wrokers': 2}\n",
     "did you mean 'workers'"),
]


@pytest.mark.parametrize("name,body,words", BAD_GRIDS, ids=[b[0] for b in BAD_GRIDS])
def test_bad_grid_files_get_one_line_and_exit_2(tmp_path, name, body, words):
    done = run_cli(write_grid(tmp_path, body, name=f"{name}.py"), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_a_syntax_error_in_a_module_the_grid_imports_names_that_module(tmp_path):
    # it named the grid file, with the other file's line number: the user looked in the wrong file
    (tmp_path / "helper.py").write_text("x = 1\nthis is not python (\n")
    done = run_cli(write_grid(tmp_path, "from helper import x\nfrom sweep_fns import echo as train\n"
                              "grid = {'x': [1]}\n"), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{tmp_path / 'helper.py'} is not valid Python" in done.stderr and "(line 2)" in done.stderr, done.stderr


def test_bad_command_lines_get_one_line_and_exit_2(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    cases = [
        ((str(tmp_path / "missing.py"),), "does not exist"),
        ((str(tmp_path),), "not a .py file"),
        ((grid, "--wokers", "2"), "did you mean --workers"),
        ((grid, "--workers", "0"), "workers must be"),
        ((grid, "--out", grid), "cannot write"),
        ((grid, "--gpus", "zero"), "not a GPU index"),
    ]
    for args, words in cases:
        done = run_cli(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)


@pytest.mark.unit
def test_sweep_refuses_bad_input_with_sweep_error(tmp_path):
    with pytest.raises(sweeper.SweepError, match="nested function"):
        sweeper.sweep(lambda p: {}, {"x": [1]}, out=str(tmp_path))
    with pytest.raises(sweeper.SweepError, match="did you mean 'retries'"):
        sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), retires=1)
    with pytest.raises(sweeper.SweepError, match="empty list"):
        sweeper.sweep(sweep_fns.echo, {"x": []}, out=str(tmp_path))
