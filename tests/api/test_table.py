"""A table analysts can trust: the right "best", ids that stay strings, one sweep per
folder, clear misuse messages and a package that installs like its peers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import HERE, ROOT, run_cli, run_fake_cli, write_grid
from sweeper.model.metrics import direction

PY = sys.executable


# -- 1. the direction of a metric --------------------------------------------------------

@pytest.mark.parametrize("name,mode", [
    ("val_loss", "min"), ("loss", "min"), ("val_mse", "min"), ("mean_absolute_error", "min"),
    ("val_rmse", "min"), ("perplexity", "min"), ("sparse_categorical_crossentropy", "min"),
    ("val_accuracy", "max"), ("acc", "max"), ("val_auc", "max"), ("f1", "max"), ("f1_score", "max"),
    ("r2", "max"), ("score", "max"), ("map", "max"), ("val_iou", "max"), ("precision", "max"),
    ("recall", "max"), ("top_k_categorical_accuracy", "max"), ("episode_reward", "max"),
    ("value", None), ("epochs_run", None),
])
@pytest.mark.unit
def test_direction_follows_keras(name, mode):
    assert direction(name) == mode


AUC_GRID = """
from sweep_fns import scored as train
grid = {"x": [1, 2, 3]}
options = {"metric": "val_auc"}
"""


def test_a_maximised_metric_puts_the_best_first_everywhere(tmp_path):
    grid = write_grid(tmp_path, AUC_GRID)
    done = run_cli(grid, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    board = done.stdout.split("top 3 by val_auc (max):")[1].splitlines()
    assert board[2].split()[0] == "x=3" and board[4].split()[0] == "x=1"  # best (0.9) first
    folder = str(tmp_path / "out" / "grid")
    status = run_cli("status", folder)  # no --metric: the sweep's own
    assert "best so far: val_auc = 0.9 (max): x=3" in status.stdout, status.stdout
    report = run_cli("report", folder)
    assert report.stdout.splitlines()[0] == "top 3 by val_auc (max):", report.stdout
    assert report.stdout.splitlines()[2].split()[0] == "x=3"
    df = sweeper.load(folder)
    assert (df.attrs["metric"], df.attrs["mode"]) == ("val_auc", "max")


def test_f1_through_the_api_and_an_unknown_named_metric(tmp_path, capsys):
    df = sweeper.sweep(sweep_fns.scored, {"x": [1, 2]}, out=str(tmp_path), metric="f1")
    assert "top 2 by f1 (max)" in capsys.readouterr().out and len(df) == 2
    with pytest.raises(sweeper.SweepError, match="--mode max or --mode min"):
        sweeper.sweep(sweep_fns.scored, {"x": [1, 2]}, out=str(tmp_path), metric="value")
    done = run_cli(write_grid(tmp_path, "from sweep_fns import scored as train\ngrid = {'x': [1]}\n"),
                   "--metric", "value", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--mode" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_a_picked_metric_of_unknown_direction_is_said_and_nan_is_counted(tmp_path, capsys):
    sweeper.sweep(sweep_fns.nan_first, {"x": [1, 2, 3]}, out=str(tmp_path))
    out = capsys.readouterr().out
    assert "sweeper: not ranked: 'value' does not say by its name whether higher or lower is better" in out
    board = out.split("first 3 of 3 ok trials, in grid order (not ranked):")[1].splitlines()
    assert [line.split()[0] for line in board[2:5]] == ["x=1", "x=2", "x=3"]  # listed as they are
    sweeper.sweep(sweep_fns.nan_first, {"x": [1, 2, 3]}, out=str(tmp_path), mode="min")
    out = capsys.readouterr().out
    assert "1 ok trial had a NaN value, ranked last" in out
    board = out.split("top 3 by value (min):")[1].splitlines()
    assert [line.split()[0] for line in board[2:5]] == ["x=3", "x=2", "x=1"]  # the NaN one, last


# -- 2. a lossless table -----------------------------------------------------------------

def test_an_id_that_looks_like_a_number_stays_a_string(tmp_path):
    df = sweeper.sweep(sweep_fns.echo, {"x": [492]}, out=str(tmp_path), progress=False)
    assert df.trial_id[0] == "t3876061e3567"  # 3876061e3567 alone reads as a float (inf)
    plain = pd.read_csv(tmp_path / "sweep_fns" / "results.csv")  # no arguments at all
    assert plain.trial_id[0] == "t3876061e3567"
    assert pd.api.types.is_string_dtype(df.trial_id) and pd.api.types.is_string_dtype(plain.trial_id)


def test_dtypes_are_what_the_values_are(tmp_path):
    df = sweeper.sweep(sweep_fns.crash, {"how": ["ok", "raise"]}, out=str(tmp_path), progress=False)
    assert str(df.started_at.dtype).startswith("datetime64") and str(df.started_at.dt.tz) == "UTC"
    assert str(df.seed.dtype) == "Int64" and str(df.attempts.dtype) == "Int64"
    assert str(df.value.dtype) == "Float64" and df.value.isna().tolist() == [False, True]  # missing: <NA>
    assert pd.api.types.is_string_dtype(df.error) and df.error.isna().tolist() == [True, False]
    ints = sweeper.sweep(sweep_fns.int_or_fail, {"x": [1, 2]}, out=str(tmp_path), name="ints", progress=False)
    assert str(ints.n.dtype) == "Int64" and ints.n.isna().tolist() == [False, True]  # an int with a gap


# -- 3. one sweep per folder ---------------------------------------------------------------

def test_two_grid_sources_cannot_share_a_folder(tmp_path):
    py = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    assert run_cli(py, "--out", str(tmp_path / "out")).returncode == 0
    (tmp_path / "grid.json").write_text(json.dumps({"x": [1]}))
    script = os.path.join(HERE, "scripts", "argv_echo.py")
    other = run_cli("--command", f"{PY} {script} --x={{x}}", "--grid", str(tmp_path / "grid.json"),
                    "--name", "grid", "--out", str(tmp_path / "out"))
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert str(tmp_path / "out" / "grid") in other.stderr and "sweep_fns.echo" in other.stderr
    assert "--name" in other.stderr and "--fresh" in other.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()  # another grid.py with the same train: another source, also refused
    py2 = write_grid(elsewhere, "from sweep_fns import echo as train\ngrid = {'x': [1, 2]}\n")
    moved = run_cli(py2, "--out", str(tmp_path / "out"))
    assert moved.returncode == 2 and "were made from" in moved.stderr, moved.stderr
    changed = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1, 2]}\n")
    again = run_cli(changed, "--out", str(tmp_path / "out"))  # the same file, a new grid: a resume
    assert again.returncode == 0 and "resumed: 1 trials" in again.stdout, again.stdout + again.stderr


def test_status_counts_the_grid_last_run(tmp_path):
    sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3, 4]}, out=str(tmp_path), progress=False)
    sweeper.sweep(sweep_fns.echo, {"x": [1, 2]}, out=str(tmp_path), progress=False)
    status = run_cli("status", str(tmp_path / "sweep_fns"))
    assert "2 of 2 trials finished" in status.stdout, status.stdout


# -- 5. misuse, said plainly ---------------------------------------------------------------

def _script(tmp_path, body):
    path = tmp_path / "script.py"
    path.write_text(f"import sys\nsys.path.insert(0, {HERE!r})\nimport sweeper\n{body}")
    return subprocess.run([PY, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_script_without_the_main_guard_is_told_so(tmp_path):
    done = _script(tmp_path, "def train(params):\n    return {'acc': 1.0}\n\n"
                             f"sweeper.sweep(train, {{'x': [1, 2]}}, out={str(tmp_path)!r}, progress=False)\n")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "SweepError" in last and "if __name__ == \"__main__\":" in last, done.stderr
    assert "another sweep" not in done.stderr


def test_train_defined_under_the_main_guard_is_told_to_move(tmp_path):
    done = _script(tmp_path, "if __name__ == '__main__':\n    def train(params):\n        return {'acc': 1.0}\n"
                             f"    sweeper.sweep(train, {{'x': [1]}}, out={str(tmp_path)!r}, progress=False)\n")
    assert "move def train to the module's top level" in done.stderr.strip().splitlines()[-1], done.stderr


def test_dry_run_marks_the_trials_a_resume_keeps(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1, 2, 3]}\n")
    sweeper.sweep(sweep_fns.echo, {"x": [2]}, out=str(tmp_path / "out"), name="grid", progress=False)
    done = run_cli(grid, "--dry-run", "--workers", "1", "--gpus", "none", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    starts = [line.split()[-1] for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert starts == ["cpu", "kept", "queued"] and "(1 on record, kept)" in done.stdout
    plan = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, out=str(tmp_path / "out"), name="grid",
                         workers=1, gpus="none", dry_run=True)
    assert plan.first_slot.tolist() == ["cpu", "kept", "queued"]


def test_gpu_ids_where_no_gpu_can_be_found_are_refused(tmp_path, no_nvml):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    done = run_fake_cli(no_nvml, grid, "--gpus", "0", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "no GPU can be found" in done.stderr and "--gpus none" in done.stderr
    assert "gpu:0" not in done.stdout
    fallback = run_fake_cli(no_nvml, grid, "--gpus", "all", "--out", str(tmp_path / "out"))
    assert fallback.returncode == 0 and "running on the CPU" in fallback.stdout


def test_a_file_with_grid_and_space_is_refused(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\nfrom sweeper import uniform\n"
                                "grid = {'x': [1]}\nspace = {'x': uniform(0, 1)}\nsamples = 2\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "both grid and space" in done.stderr


# -- 6. conventions ------------------------------------------------------------------------

def test_version_subcommand_help_and_the_console_script(tmp_path):
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"python -m sweeper {sweeper.__version__}"
    for command in ("status", "report"):
        helped = run_cli(command, "--help")
        assert helped.returncode == 0 and f"sweeper {command}" in helped.stdout and "folder" in helped.stdout
    script = os.path.join(os.path.dirname(PY), "sweeper")
    if not os.path.exists(script):
        pytest.skip("the package is not installed with its console script here")
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"sweeper {sweeper.__version__}"


def test_the_api_says_sweepers_lines_unless_quiet(tmp_path, capsys, no_nvml):
    sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), name="a")
    out = capsys.readouterr().out
    assert "running on the CPU" in out, out  # the info line a CLI user sees too
    sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), name="b", progress=False)
    assert capsys.readouterr().out == ""


@pytest.mark.unit
def test_py_typed_is_shipped():
    assert os.path.exists(os.path.join(os.path.dirname(sweeper.__file__), "py.typed"))


def test_command_trials_run_without_tensorflow_or_keras(tmp_path):
    """The lean install: TensorFlow and Keras missing (they raise on import here)."""
    (tmp_path / "g.json").write_text(json.dumps({"x": [1, 2]}))
    script = os.path.join(HERE, "scripts", "argv_echo.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "blocked"), ROOT])}
    done = subprocess.run([PY, "-m", "sweeper", "--command", f"{PY} {script} --x={{x}}", "--grid",
                           str(tmp_path / "g.json"), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run([PY, "-c", "import tensorflow"], capture_output=True, text=True, env=env)
    assert "lean install" in check.stderr  # the block was in force


def test_numpy_candidates_are_the_values_they_stand_for(tmp_path):
    df = sweeper.sweep(sweep_fns.echo, {"x": [np.float32(0.1), 0.1]}, out=str(tmp_path), progress=False)
    assert len(df) == 1 and df.param_x[0] == 0.1


@pytest.mark.unit
def test_the_readme_one_liner_is_how_sweeper_reads_the_table():
    from sweeper.store.table import READ_CSV

    readme = open(os.path.join(ROOT, "README.md")).read()
    line = next(i for i, t in enumerate(readme.splitlines()) if t.startswith("df = pd.read_csv(\"results/"))
    call = " ".join(t.strip() for t in readme.splitlines()[line:line + 2])
    kwargs = eval("dict(" + call.split(".csv\",", 1)[1].rsplit(")", 1)[0] + ")")  # the README's own text
    assert kwargs == READ_CSV


def test_options_from_the_file_and_the_flags_are_checked_together(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import scored as train\ngrid = {'x': [1, 2]}\n"
                                "options = {'metric': 'value'}\n")
    done = run_cli(grid, "--mode", "max", "--out", str(tmp_path / "out"))  # the file names it, the flag ranks it
    assert done.returncode == 0, done.stdout + done.stderr
    assert "top 2 by value (max):" in done.stdout
    assert "best so far: value = 2 (max)" in run_cli("status", str(tmp_path / "out" / "grid")).stdout


def test_status_and_report_before_any_trial_has_the_metric(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import crash as train\ngrid = {'how': ['raise']}\n"
                                "options = {'metric': 'val_auc'}\n")
    assert run_cli(grid, "--out", str(tmp_path / "out")).returncode == 1
    folder = str(tmp_path / "out" / "grid")
    status = run_cli("status", folder)
    assert status.returncode == 0 and "1 error" in status.stdout, status.stdout + status.stderr
    report = run_cli("report", folder)
    assert report.returncode == 0 and "1 failed" in report.stdout, report.stdout + report.stderr


@pytest.mark.unit
@pytest.mark.parametrize("name", ["accuracy_drop", "reward_std", "loss_improvement"])
def test_a_name_whose_last_word_is_not_a_score_is_never_guessed(name):
    assert direction(name) is None
