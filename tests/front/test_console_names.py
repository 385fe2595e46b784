"""What the console says, said plainly.

* a trial's name holds the parameters that vary in its sweep, and the trial id only where
  two of the sweep's points would otherwise share a name;
* a resume says what it keeps before any trial's line, and keeps the names on record;
* ``[2/8]`` counts finished trials; an attempt that runs again says so without a counter;
* the ETA counts down while trials run, not only when one ends.
"""

from __future__ import annotations

import re
import sqlite3

import pandas as pd
import pytest

import sweeper
from conftest import run_cli, write_grid
from sweeper.store.folder import SweepFolder
from sweeper.model.grid import expand, sample
from sweeper.store.ledger import Ledger
from sweeper.model.options import Options
from sweeper.model.settings import parse
from sweeper.run.planning import Plan, plan
from sweeper.front.progress import PlainLines, Tally
from sweeper.store.table import READ_CSV
from sweeper.model.trial import Status, TrialResult, TrialSpec, params_key

SAFE = re.compile(r"^[A-Za-z0-9_.+\-=,~]+$")


def _names(points):
    return [s.name for s in plan(points, "/f", seed=0)]


# -- names: what varies, the id only where two would collide --------------------------------

@pytest.mark.unit
def test_a_random_sample_is_named_by_what_varies_without_an_id():
    """The issue's noisy name was ``dropout=0_390265,epochs=30,lr=0_0216008,units=16~t...``."""
    space = {"dropout": sweeper.uniform(0.0, 0.5), "lr": sweeper.loguniform(1e-3, 1e-1), "epochs": 30, "units": 16}
    names = _names(sample(space, 8, seed=0))
    assert len(set(names)) == 8, names
    for name in names:
        assert re.fullmatch(r"dropout=[\d_e-]+,lr=[\d_e-]+", name), name
        assert "epochs" not in name and "units" not in name and "~" not in name and SAFE.match(name), name


@pytest.mark.unit
def test_a_grid_names_its_keys_of_more_than_one_value():
    grid = {"lr": [0.01, 0.001], "units": [16, 64], "epochs": 8, "act": ["relu"]}
    assert _names(expand(grid)) == ["lr=0_01,units=16", "lr=0_01,units=64", "lr=0_001,units=16",
                                    "lr=0_001,units=64"]
    # a list of grids: a key some points lack varies; one every point has alike does not
    assert _names([{"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 3}]) == ["b=2", "b=3,c=3"]
    assert _names([{"a": 1}, {"a": 1, "c": 3}]) == ["a=1", "c=3"]  # nothing of its own varies: all it has
    # nothing varies in a one-point sweep: its name says all its values
    assert _names([{"epochs": 8, "lr": 0.01}]) == ["epochs=8,lr=0_01"]


@pytest.mark.unit
def test_only_points_that_would_share_a_name_get_the_id():
    a, b, c = {"lr": 0.001, "u": 1}, {"lr": 0.0010000001, "u": 1}, {"lr": 0.5, "u": 1}
    assert _names([a, b, c]) == [f"lr=0_001~{params_key(a)}", f"lr=0_001~{params_key(b)}", "lr=0_5"]
    # a lossy float alone is shown as it rounds: no other point of the sweep reads the same
    assert _names([{"lr": 0.0216008123, "u": 1}, {"lr": 0.1, "u": 1}]) == ["lr=0_0216008", "lr=0_1"]
    # file-name-safe: an unsafe character becomes "_", and where that makes two alike, each has its id
    names = _names([{"p": "a/b"}, {"p": "a_b"}, {"p": "c d"}])
    assert names[:2] == [f"p=a_b~{params_key({'p': 'a/b'})}", f"p=a_b~{params_key({'p': 'a_b'})}"]
    assert names[2] == "p=c_d" and all(SAFE.match(n) for n in names)
    # a string that reads as a number beside that number
    assert _names([{"x": 1}, {"x": "1"}, {"x": 2}]) == [f"x=1~{params_key({'x': 1})}", f"x=1~{params_key({'x': '1'})}",
                                                        "x=2"]


@pytest.mark.unit
def test_a_search_names_what_it_searches(tmp_path):
    """Optuna asks each point alone: its fixed values (a scalar, a list of one) are left out."""
    pytest.importorskip("optuna")
    space = {"lr": sweeper.loguniform(1e-4, 1e-1), "units": [32, 64], "epochs": 30, "act": ["relu"]}
    folder = SweepFolder(str(tmp_path), "s")
    folder.prepare()
    ledger = Ledger(folder.path)
    try:
        options = Options.build({"search": "random", "trials": 6, "metric": "loss", "mode": "min"})
        made = Plan.resume(ledger, parse(options), [], space, folder, None, "fn")
        specs = [made.feed.next() for _ in range(6)]
    finally:
        ledger.close()
    names = [s.name for s in specs]
    assert len(set(names)) == 6, names
    for name in names:
        assert re.fullmatch(r"lr=[\d_e-]+,units=(32|64)", name) and SAFE.match(name), name


@pytest.mark.unit
def test_a_name_on_record_is_never_another_points(tmp_path):
    """A point of the last run's grid that left no row (its sweep was killed) still owns its
    folder: a point named alike in a changed grid gets the id, never that folder."""
    folder = SweepFolder(str(tmp_path), "s")
    folder.prepare()
    ledger = Ledger(folder.path)
    try:
        ledger.set_grid([(params_key({"x": 1, "y": 1}), 0, "x=1"), (params_key({"x": 2, "y": 1}), 1, "x=2")])
        specs = plan(expand({"x": [1, 2], "y": 2}), folder.path, 0)  # y changed: named x=1 and x=2 too
        made = Plan.resume(ledger, parse(Options.build({})), specs, None, folder, None, "fn")
    finally:
        ledger.close()
    assert [s.name for s in made.specs] == [f"x=1~{params_key({'x': 1, 'y': 2})}", f"x=2~{params_key({'x': 2, 'y': 2})}"]


# -- the console: short names, the resume line first, the retry line ------------------------

GRID = "from sweep_fns import echo as train\ngrid = {{'x': {xs}, 'epochs': 30, 'lr': [0.0216008123]}}\n"
COUNTER = re.compile(r"^\[(\d+)/(\d+)\] ")


def _trial_lines(stdout):
    return [line for line in stdout.splitlines() if COUNTER.match(line) or line.startswith("[retry]")]


def test_the_console_shows_short_names_and_a_resume_says_so_first_and_keeps_names(tmp_path):
    out = tmp_path / "out"
    first = run_cli(write_grid(tmp_path, GRID.format(xs=[1, 2])), "--out", str(out), "--workers", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    lines = _trial_lines(first.stdout)
    assert [line.split()[:3] for line in lines] == [["[1/2]", "ok", "x=1"], ["[2/2]", "ok", "x=2"]], first.stdout
    assert not [line for line in lines if "epochs" in line or "~" in line], first.stdout
    # as an older release named it: the row and its folder keep that name
    folder = out / "grid"
    old = "epochs=30,lr=0_0216008,x=1~" + params_key({"x": 1, "epochs": 30, "lr": 0.0216008123})
    with sqlite3.connect(folder / "ledger.sqlite") as db:
        db.execute("UPDATE trials SET name = ? WHERE name = 'x=1'", (old,))
    (folder / "trials" / "x=1").rename(folder / "trials" / old)
    before = pd.read_csv(folder / "results.csv", **READ_CSV).set_index("param_x")

    again = run_cli(write_grid(tmp_path, GRID.format(xs=[1, 2, 3])), "--out", str(out), "--workers", "1")
    assert again.returncode == 0, again.stdout + again.stderr
    said = again.stdout.splitlines()
    resumed = [i for i, line in enumerate(said) if "resumed: 2 trials already on record were kept; 1 to run" in line]
    trials = [i for i, line in enumerate(said) if COUNTER.match(line)]
    assert resumed and trials and resumed[0] < trials[0], again.stdout  # first, not at the end
    assert len(resumed) == 1, again.stdout  # said once
    assert [said[i].split()[:3] for i in trials] == [["[1/1]", "ok", "x=3"]], again.stdout
    after = pd.read_csv(folder / "results.csv", **READ_CSV).set_index("param_x")
    assert after.trial.to_dict() == {1: old, 2: "x=2", 3: "x=3"}  # kept as recorded, the new one short
    assert (after.started_at[[1, 2]] == before.started_at[[1, 2]]).all()  # not run again
    assert (folder / "trials" / old / "log.txt").exists() and not (folder / "trials" / "x=1").exists()


def test_a_retry_says_retry_not_a_repeated_counter(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import flaky as train\ngrid = {'x': [1, 2], 'units': 16}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--retries", "1", "--workers", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _trial_lines(done.stdout)
    retries = [line for line in lines if line.startswith("[retry]")]
    assert len(retries) == 2, done.stdout  # each trial's first attempt dies
    for line in retries:
        assert line.split()[1] == "crashed" and "attempt 1 failed; attempt 2 starts" in line, line
        assert not COUNTER.match(line), line
    counted = [COUNTER.match(line).groups() for line in lines if COUNTER.match(line)]
    assert counted == [("1", "2"), ("2", "2")], done.stdout  # finished of those to run, each once
    assert sorted(line.split()[2] for line in lines) == ["x=1", "x=1", "x=2", "x=2"], done.stdout


# -- the counter and the ETA, in fake time -----------------------------------------------------

def _spec(x):
    return TrialSpec(trial_id=params_key({"x": x}), name=f"x={x}", index=x, params={"x": x}, seed=0, dir="/f")


def _result(x, status=Status.OK, duration=10.0, attempts=1):
    return TrialResult(trial_id=params_key({"x": x}), name=f"x={x}", index=x, params={"x": x}, status=status,
                       metrics={"loss": 1.0} if status is Status.OK else {}, duration_s=duration,
                       attempts=attempts, error="" if status is Status.OK else "exit code 7", device="cpu")


@pytest.mark.unit
def test_the_eta_counts_down_while_trials_run():
    now = [0.0]
    tally = Tally("loss", "min", clock=lambda: now[0])
    tally.to_run = 4
    tally.started(_spec(0))
    tally.started(_spec(1))
    assert tally.eta() is None  # nothing finished: no estimate
    now[0] = 10.0
    tally.ended(_result(0))
    tally.add(_result(0))  # a trial takes 10 s
    tally.started(_spec(2))
    at_10 = tally.eta()
    now[0] = 13.0
    at_13 = tally.eta()
    now[0] = 16.0
    at_16 = tally.eta()
    assert at_10 > at_13 > at_16 > 0, (at_10, at_13, at_16)  # it moves with time, between finished trials
    # two places: x=1 is due now, x=2 in 10 s, one queued trial of 10 s: (0 + 10 + 10) / 2
    assert at_10 == 10.0 and at_13 == 8.5 and at_16 == 7.0
    now[0] = 100.0  # running past the estimate: never below nothing
    assert tally.eta() == 5.0  # the queued trial, shared by the two places


@pytest.mark.unit
def test_a_plain_line_counts_finished_trials_and_a_retry_says_which_attempt_comes(capsys):
    view = PlainLines("loss", "min")
    view.begin(2, 2)
    view.started(_spec(1))
    view.finished(_result(1, Status.CRASHED, attempts=1), retrying=True)
    view.started(_spec(1))
    view.finished(_result(1, attempts=2), retrying=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("    ")]
    assert lines[0].startswith("[retry] crashed") and "attempt 1 failed; attempt 2 starts" in lines[0], lines
    assert lines[1].startswith("[1/2] ok          x=1"), lines
