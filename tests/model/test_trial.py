"""Trial identity: ids, names and seeds depend on the parameters alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sweeper.run.planning import plan
from sweeper.model.trial import Status, params_key, trial_name, trial_names, trial_seed
from conftest import ROOT, write_grid


@pytest.mark.unit
def test_ids_are_fixed_forever():
    # Written down once: a changed id would orphan every ledger row users have.
    assert params_key({"lr": 0.001, "batch_size": 32}) == params_key({"batch_size": 32, "lr": 0.001})
    # "t" + sha256 of {"batch_size":32,"lr":0.001}: the "t" keeps it from ever reading as a number
    assert params_key({"lr": 0.001, "batch_size": 32}) == "td710199e0a73"
    # seeds come from the hex part, as before the "t": the same trial draws the same numbers
    assert trial_seed(0, "td710199e0a73") == trial_seed(0, "d710199e0a73")


@pytest.mark.unit
def test_ids_tell_apart_what_names_round():
    a, b = {"lr": 0.001}, {"lr": 0.0010000001}
    assert params_key(a) != params_key(b)
    assert trial_name(a) == trial_name(b) == "lr=0_001"  # alone, each reads as it is shown
    assert trial_names([a, b]) == ["lr=0_001~" + params_key(a), "lr=0_001~" + params_key(b)]  # together: told apart
    assert params_key({"x": 1}) != params_key({"x": 1.0}) != params_key({"x": True})
    assert trial_name({"x": 1}) != trial_name({"x": 1.0})


@pytest.mark.parametrize(
    "params,name",
    [
        ({"batch_size": 32, "lr": 0.001}, "batch_size=32,lr=0_001"),
        ({"lr": 1e-5}, "lr=1e-05"),
        ({"act": "relu", "layers": [64, 32]}, "act=relu,layers=64-32"),
        ({"flag": True, "drop": None}, "drop=None,flag=True"),
        ({}, "default"),
    ],
)
@pytest.mark.unit
def test_readable_names(params, name):
    assert trial_name(params) == name


@pytest.mark.parametrize("params", [{"path": "a/b"}, {"s": "x y"}, {"k": "a,b=c"}, {"x": "é"},
                                    {"long": "x" * 200}])
@pytest.mark.unit
def test_unsafe_or_long_names_are_file_names(params):
    name = trial_name(params)
    assert "/" not in name and " " not in name and len(name) <= 100 and name.isascii()
    assert name.endswith("~" + params_key(params)) == (len(str(params)) > 80)  # only a cut name has the id


@pytest.mark.unit
def test_seed_depends_on_sweep_seed_and_id_only():
    # Written down once: a changed seed would make a resumed or repeated sweep draw other
    # numbers for the same trial. sha256 of "<sweep seed>:<id without its t>", first 31 bits.
    tid = params_key({"x": 1})
    assert tid == "t5041bf1f713d"
    assert [trial_seed(s, tid) for s in (0, 1, 3, 12345)] == [550562660, 202902576, 959672180, 1432106169]
    assert trial_seed(0, "td710199e0a73") == 970629211
    assert 0 <= trial_seed(2**40, tid) < 2**31
    forward = plan([{"x": 1}, {"x": 2}], "/f", seed=3)
    backward = plan([{"x": 2}, {"x": 1}], "/f", seed=3)
    assert {s.trial_id: s.seed for s in forward} == {s.trial_id: s.seed for s in backward}
    assert {s.trial_id: s.seed for s in forward} == {"t5041bf1f713d": 959672180, "t5e2b030a4a0f": 1496800709}


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_seeds_are_the_same_in_a_fresh_interpreter(tmp_path, hash_seed):
    """What the dry run shows, from a new process whose str hashes differ (PYTHONHASHSEED)."""
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [2, 1]}\n")
    done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--dry-run", "--seed", "3",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONHASHSEED": hash_seed})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.startswith("#")) + 1:]]
    assert {row[1]: int(row[3]) for row in rows} == {"t5041bf1f713d": 959672180, "t5e2b030a4a0f": 1496800709}


@pytest.mark.unit
def test_name_clashes_in_one_grid_are_made_unique():
    specs = plan([{"x": "True"}, {"x": True}], "/f", seed=0)
    assert len({s.name for s in specs}) == 2
    assert specs[0].dir == "/f/trials/" + specs[0].name


# Points that once shared a folder: one sweep's names never coincide.
LOOKALIKES = [
    [{"x": 1}, {"x": "1"}, {"x": 1.0}, {"x": [1]}, {"x": "1_0"}],
    [{"x": True}, {"x": "True"}, {"x": "true"}],
    [{"x": None}, {"x": "None"}],
    [{"x": [1, 2]}, {"x": "1-2"}, {"x": [1, -2]}, {"x": [[1, 2]]}, {"x": [[1], 2]}],
    [{"x": []}, {"x": "empty"}],
    [{"x": 1e-05}, {"x": [1, "e-05"]}, {"x": "1e-05"}],
    [{"a": 1, "b": 2}, {"a": "1,b=2"}],
]


@pytest.mark.unit
@pytest.mark.parametrize("points", LOOKALIKES)
def test_distinct_points_never_share_a_name(points):
    names = [s.name for s in plan(points, "/f", seed=0)]
    assert len(set(names)) == len(points), names


@pytest.mark.unit
def test_long_names_stay_distinct_in_a_large_grid():
    # 200,000 points of long values that agree in their first 80 characters
    points = [{"a": "v" * 90, "i": i} for i in range(200_000)]
    names = {trial_name(p) for p in points}
    assert len(names) == len(points)
    assert all(len(n) <= 100 and n.count("~") == 1 for n in list(names)[:100])


@pytest.mark.unit
def test_a_point_listed_twice_runs_once():
    specs = plan([{"x": 1}, {"x": 2}, {"x": 1}], "/f", seed=0)
    assert [s.params for s in specs] == [{"x": 1}, {"x": 2}] and [s.index for s in specs] == [0, 1]


@pytest.mark.unit
def test_each_status_names_itself_once_for_every_tool():
    """What a status means to TensorBoard, MLflow and Optuna lives on Status (the report,
    the CLI and each tracker read it there): success and failure agree across them."""
    from tensorboard.plugins.hparams import api_pb2

    for s in Status:
        assert (s.tensorboard == "STATUS_SUCCESS") == s.succeeded == (s.mlflow == "FINISHED")
        assert (s.optuna == "FAIL") == (not s.succeeded)
        api_pb2.Status.Value(s.tensorboard)  # a name TensorBoard knows
    assert (Status.INTERRUPTED.tensorboard, Status.INTERRUPTED.mlflow) == ("STATUS_UNKNOWN", "KILLED")
    assert (Status.PRUNED.optuna, Status.OK.optuna) == ("PRUNED", "COMPLETE")
