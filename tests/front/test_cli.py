"""The command line as a new user meets it: a misspelled command, quick answers before the
grid file is imported, stopping on failures, and command sweeps' name, seed and braces."""

from __future__ import annotations

import json
import os
import random
import shlex
import sys

import pandas as pd
import pytest

from conftest import HERE, run_cli, write_grid
from sweeper.store.folder import SweepFolder

PY = shlex.quote(sys.executable)
ECHO = os.path.join(HERE, "scripts", "argv_echo.py")


def test_a_misspelled_command_is_named_as_one():
    done = run_cli("stauts", "results/x")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "did you mean status?" in done.stderr, done.stderr
    assert "unknown option" not in done.stderr


#: A grid file that says when it is imported: a marker file beside it.
MARKED = """import pathlib
pathlib.Path(__file__).with_name("imported").write_text("yes")

def train(params):
    return {{"loss": float(params["x"])}}

grid = {{"x": [1, 2]}}
{options}
"""


@pytest.fixture
def busy(tmp_path):
    """The folder ``<tmp>/out/busy`` held by a running sweep's lock (this process's)."""
    folder = SweepFolder(str(tmp_path / "out"), "busy")
    folder.prepare()
    with folder.locked("another-sweep"):
        yield folder


@pytest.mark.parametrize("options", ["", "options = {'workers': 1, 'seed': 0}"])
@pytest.mark.parametrize("dry", [True, False])
def test_a_busy_folder_is_refused_before_the_grid_file_is_imported(tmp_path, busy, options, dry):
    grid = write_grid(tmp_path, MARKED.format(options=options), name="busy.py")
    done = run_cli(grid, "--out", str(tmp_path / "out"), *(["--dry-run"] if dry else []))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"another sweep (pid {os.getpid()}) is running in {busy.path}" in done.stderr
    assert ("would be refused" in done.stderr) == dry
    assert not (tmp_path / "imported").exists()  # answered before the import


def test_options_that_may_name_another_folder_wait_for_the_import(tmp_path, busy):
    """A grid file whose options name the folder in code: only its import can tell, and the
    lock decides then; one that names another folder plainly runs there."""
    built = write_grid(tmp_path, MARKED.format(options="options = dict(workers=1)"), name="busy.py")
    done = run_cli(built, "--out", str(tmp_path / "out"), "--dry-run")
    assert done.returncode == 2 and "would be refused" in done.stderr, done.stdout + done.stderr
    assert (tmp_path / "imported").exists()
    (tmp_path / "imported").unlink()
    elsewhere = write_grid(tmp_path, MARKED.format(options="options = {'name': 'elsewhere'}"), name="busy.py")
    done = run_cli(elsewhere, "--out", str(tmp_path / "out"), "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(tmp_path / "out" / "elsewhere") in done.stdout


#: Seven trials: x=0 ok, x=1 fails one way, x=2 to 6 another.
FAILING = """def train(params):
    if params["x"] == 0:
        return {"loss": 0.0}
    raise ValueError(params["msg"])

grid = [{"x": [0]}, {"x": [1], "msg": ["other"]}, {"x": [2, 3, 4, 5, 6], "msg": ["boom"]}]
"""


@pytest.mark.parametrize("flag,kept,said", [
    (["--fail-fast"], ["ok", "error"],
     "ended error with 'ValueError: other', the first failure; 5 queued trials (or retries) not started, 0 running stopped"),
    (["--max-failures", "3"], ["ok", "error", "error", "error", "error"],
     "stopping: 3 trials in a row ended error with 'ValueError: boom'; 2 queued trials (or retries) not started, 0 running"),
])
def test_failures_stop_the_sweep(tmp_path, flag, kept, said):
    grid = write_grid(tmp_path, FAILING, name="fails.py")
    done = run_cli(grid, "--out", str(tmp_path), "--workers", "1", *flag)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "stopping:" in line]
    assert len(lines) == 1 and said in lines[0], done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "fails" / "results.csv")
    assert df.status.tolist() == kept
    assert df.param_x.tolist() == list(range(len(kept)))  # in grid order, none after the stop


def test_fail_fast_waits_for_a_crashed_trials_retries(tmp_path):
    grid = write_grid(tmp_path, "import os\ndef train(params):\n    os._exit(3)\ngrid = {'x': [1, 2, 3]}\n",
                      name="crash.py")
    done = run_cli(grid, "--out", str(tmp_path), "--workers", "1", "--retries", "1", "--fail-fast", "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stopping: trial x=1 ended crashed" in done.stdout + done.stderr  # said under --quiet too
    df = pd.read_csv(tmp_path / "crash" / "results.csv").set_index("param_x")
    assert df.loc[1, "attempts"] == 2 and (df.status == "crashed").all() and (df.attempts <= 2).all()


def test_a_command_sweep_is_named_after_its_script_and_seeded(tmp_path):
    (tmp_path / "grid.json").write_text(json.dumps({"how": ["ok"], "lr": [0.1, 0.2]}))
    done = run_cli("--command", f"{PY} {ECHO} --how={{how}} --lr={{lr}}", "--grid", str(tmp_path / "grid.json"),
                   "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "grid").exists()
    df = pd.read_csv(tmp_path / "argv_echo" / "results.csv")
    assert len(df) == 2 and df.seed.nunique() == 2
    for trial, seed in zip(df.trial, df.seed):
        seen = json.loads((tmp_path / "argv_echo" / "trials" / trial / "seen.json").read_text())
        assert seen["env"]["SWEEPER_SEED"] == str(seed)


SEEDED = """import json, random
import sweeper.worker
sweeper.worker.setup()
print(json.dumps({"draw": random.random()}))
"""


def test_setup_seeds_a_command_script_from_its_seed(tmp_path):
    script = tmp_path / "seeded.py"
    script.write_text(SEEDED)
    (tmp_path / "grid.json").write_text(json.dumps({"x": [1, 2]}))
    done = run_cli("--command", f"{PY} {script} --x={{x}}", "--grid", str(tmp_path / "grid.json"),
                   "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "seeded" / "results.csv")
    assert df.draw.tolist() == [random.Random(int(seed)).random() for seed in df.seed]


@pytest.mark.parametrize("words,shell,argv", [
    ("--config='{{\"lr\": {n}}}'", False, ['--config={"lr": 3}']),  # the README's example
    ("--text={{n}} --n={n}", True, ["--text={n}", "--n=3"]),
])
def test_doubled_braces_are_literal_braces(tmp_path, words, shell, argv):
    (tmp_path / "grid.json").write_text(json.dumps({"n": [3]}))
    done = run_cli("--command", f"{PY} {ECHO} {words}", "--grid", str(tmp_path / "grid.json"),
                   "--out", str(tmp_path), *(["--shell"] if shell else []))
    assert done.returncode == 0, done.stdout + done.stderr
    trial = pd.read_csv(tmp_path / "argv_echo" / "results.csv").trial[0]
    seen = json.loads((tmp_path / "argv_echo" / "trials" / trial / "seen.json").read_text())
    assert seen["argv"] == argv
