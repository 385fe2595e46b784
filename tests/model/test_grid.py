"""Tests for sweeper.model.grid: grid expansion, point keys, random sampling."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from sweeper.errors import SweepError
from sweeper.model.grid import expand, point_key, sample
from sweeper.model.distributions import loguniform, randint, uniform
from conftest import ROOT


# Values that Python calls equal but that are different points (1, 1.0, True).
POOL = [0, 1, 2, 1.0, 0.5, 2.5, -3, "a", "b", "1", True, False, None, (1, 2), [3]]


def canon(point):
    """Type-sensitive text of a point, written independently of point_key."""
    return json.dumps(point, sort_keys=True)


def dedupe(points):
    """Keep the first of each canonically equal point."""
    seen, kept = set(), []
    for point in points:
        if canon(point) not in seen:
            seen.add(canon(point))
            kept.append(point)
    return kept


def random_dict(rng: random.Random, distinct: bool) -> dict:
    """A grid dict of 1-4 keys with 1-4 mixed-type values each."""
    names = rng.sample(["lr", "units", "act", "drop", "b", "Z", "layers"], rng.randint(1, 4))
    grid = {}
    for name in names:
        k = rng.randint(1, 4)
        if distinct:
            grid[name] = rng.sample(POOL, k)
        else:
            grid[name] = [rng.choice(POOL[:6]) for _ in range(k)]
    return grid


# ---------------------------------------------------------------- expand


@pytest.mark.unit
def test_expand_order_matches_parameter_grid():
    ParameterGrid = pytest.importorskip("sklearn.model_selection").ParameterGrid
    for seed in range(50):
        grid = random_dict(random.Random(seed), distinct=True)
        expected = [canon(p) for p in ParameterGrid(grid)]
        got = expand(grid)
        assert [canon(p) for p in got] == expected, grid
        assert len(got) == len(expected)  # 1, 1.0 and True all kept


@pytest.mark.unit
def test_expand_list_of_dicts_matches_deduped_parameter_grid():
    ParameterGrid = pytest.importorskip("sklearn.model_selection").ParameterGrid
    had_duplicates = 0
    for seed in range(50):
        rng = random.Random(1000 + seed)
        grid = [random_dict(rng, distinct=False) for _ in range(rng.randint(1, 3))]
        raw = list(ParameterGrid(grid))
        expected = [canon(p) for p in dedupe(raw)]
        had_duplicates += len(expected) < len(raw)
        assert [canon(p) for p in expand(grid)] == expected, grid
    assert had_duplicates > 5  # the comparison really exercised deduplication


@pytest.mark.unit
def test_expand_points_have_sorted_keys_and_no_tuples():
    points = expand({"b": [(1, 2)], "a": [1], "c": [[(3,), 4]]})
    assert points == [{"a": 1, "b": [1, 2], "c": [[3], 4]}]
    assert list(points[0]) == ["a", "b", "c"]
    assert type(points[0]["b"]) is list and type(points[0]["c"][0]) is list


@pytest.mark.unit
def test_scalar_is_fixed_setting():
    assert expand({"lr": 0.1, "opt": "adam", "units": [32, 64]}) == [
        {"lr": 0.1, "opt": "adam", "units": 32},
        {"lr": 0.1, "opt": "adam", "units": 64},
    ]
    assert expand({"flag": None}) == [{"flag": None}]


@pytest.mark.unit
def test_list_valued_setting():
    points = expand({"layers": [[64, 32], [128]], "act": ("relu",)})
    assert points == [{"act": "relu", "layers": [64, 32]}, {"act": "relu", "layers": [128]}]


@pytest.mark.unit
def test_points_share_no_lists():
    points = expand({"layers": [[64, 32]], "x": [1, 2]})
    points[0]["layers"].append(1)
    assert points[1]["layers"] == [64, 32]


@pytest.mark.unit
def test_empty_dict_gives_one_empty_point():
    assert expand({}) == [{}]
    assert expand([{}, {"a": 1}, {}]) == [{}, {"a": 1}]


@pytest.mark.unit
def test_dedupe_across_dicts_first_wins():
    grid = [{"a": [1, 2], "b": "x"}, {"b": ["x", "y"], "a": [2, 3]}]
    assert expand(grid) == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
        {"a": 3, "b": "x"},
        {"a": 3, "b": "y"},
    ]
    assert expand({"a": [1, 1, (1,), [1]]}) == [{"a": 1}, {"a": [1]}]


@pytest.mark.unit
def test_equal_but_different_kinds_stay_apart():
    points = expand({"a": [1, 1.0, True]})
    assert [type(p["a"]) for p in points] == [int, float, bool]


@pytest.mark.unit
def test_numpy_values_become_python():
    points = expand({"a": [np.int64(3), np.float32(0.5), np.bool_(True), np.str_("s")]})
    assert [p["a"] for p in points] == [3, 0.5, True, "s"]
    assert [type(p["a"]) for p in points] == [int, float, bool, str]
    arr = expand({"a": np.array([1, 2]), "b": np.float64(0.25), "c": [[np.int8(1)]]})
    assert arr == [{"a": 1, "b": 0.25, "c": [1]}, {"a": 2, "b": 0.25, "c": [1]}]
    assert type(arr[0]["a"]) is int and type(arr[0]["b"]) is float and type(arr[0]["c"][0]) is int


@pytest.mark.unit
def test_candidates_stand_for_the_json_values_they_are():
    # np.float32(0.1) is the trial 0.1, not a second one beside it
    assert expand({"lr": [np.float32(0.1), 0.1]}) == [{"lr": 0.1}]
    assert expand({"lr": np.array([0.1, 0.2], dtype=np.float32)}) == [{"lr": 0.1}, {"lr": 0.2}]
    # a list-valued candidate given as a tuple or an array is a list
    assert expand({"layers": [(64, 32), np.array([128])]}) == [{"layers": [64, 32]}, {"layers": [128]}]
    assert expand({"n": range(2)}) == [{"n": 0}, {"n": 1}]


class Adam:
    """Stands in for a Keras optimizer object."""


@pytest.mark.parametrize(
    ("grid", "needle"),
    [
        ("abc", "got str"),
        (42, "got int"),
        ([], "empty list"),
        ([{"a": [1]}, "x"], "grid[1]"),
        ({1: [2]}, "1"),
        ({"": [2]}, "''"),
        ({"lr": []}, "'lr'"),
        ({"lr": ()}, "'lr'"),
        ({"opt": Adam()}, "'opt'"),
        ({"opt": [Adam()]}, "'opt'"),
        ({"fn": [len]}, "'fn'"),
        ({"d": [{"a": 1}]}, "'d'"),
        ({"s": {1, 2}}, "'s'"),
        ({"raw": b"ab"}, "'raw'"),
        ({"deep": [[1, [2, object()]]]}, "'deep'"),
        ({"nan": float("nan")}, "'nan'"),
        ({"inf": [1.0, float("inf")]}, "'inf'"),
        ({"neg": [[-math.inf]]}, "'neg'"),
        ({"npnan": [np.float64("nan")]}, "'npnan'"),
        ({"arr": [np.array([{"x": 1}])]}, "'arr'"),
        ({"s": {0.1, 0.2}}, "set"),
        ({"cplx": [1j]}, "'cplx'"),
        ({"lr": loguniform(1e-4, 1e-1)}, "'lr'"),
    ],
)
@pytest.mark.unit
def test_expand_errors(grid, needle):
    with pytest.raises(SweepError) as info:
        expand(grid)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


@pytest.mark.unit
def test_error_messages_name_type_and_fix():
    with pytest.raises(SweepError, match=r"got str; e\.g\. grid = "):
        expand("lr")
    with pytest.raises(SweepError, match="parameter 'opt' has a value of type Adam that cannot"):
        expand({"opt": Adam()})
    with pytest.raises(SweepError, match="'lr' has an empty list of values; give at least one"):
        expand({"lr": []})
    with pytest.raises(SweepError, match="sample"):
        expand({"lr": uniform(0, 1)})


# ---------------------------------------------------------------- point_key


@pytest.mark.unit
def test_point_key_canonical():
    assert point_key({"b": 1, "a": "x"}) == '{"a":"x","b":1}'
    assert point_key({"a": (1, 2)}) == point_key({"a": [1, 2]})
    assert point_key({"a": np.int64(1)}) == point_key({"a": 1})
    keys = {point_key({"a": v}) for v in (1, 1.0, True, "1")}
    assert len(keys) == 4


@pytest.mark.unit
def test_point_key_errors():
    with pytest.raises(SweepError, match="'x'"):
        point_key({"x": object()})
    with pytest.raises(SweepError, match="dict"):
        point_key([("x", 1)])
    with pytest.raises(SweepError, match="'y'"):
        point_key({"y": float("nan")})


# ---------------------------------------------------------------- sample


SPACE = {
    "lr": loguniform(1e-4, 1e-1),
    "drop": uniform(0.1, 0.5),
    "units": randint(16, 129),
    "act": ["relu", "tanh", 1, 1.0],
    "epochs": 3,
}


@pytest.mark.unit
def test_sample_same_seed_same_points_different_seed_differs():
    first = sample(SPACE, 20, seed=7)
    assert first == sample(SPACE, 20, seed=7)
    assert [canon(p) for p in first] == [canon(p) for p in sample(SPACE, 20, seed=7)]
    assert first != sample(SPACE, 20, seed=8)
    assert sample(SPACE, 5) == sample(SPACE, 5, seed=0)


@pytest.mark.unit
def test_sample_independent_of_key_order():
    reordered = dict(reversed(list(SPACE.items())))
    assert sample(reordered, 10, seed=3) == sample(SPACE, 10, seed=3)


@pytest.mark.unit
def test_sample_values_in_bounds_and_plain_types():
    points = sample(SPACE, 300, seed=1)
    assert len(points) == 300
    assert len({canon(p) for p in points}) == 300
    for p in points:
        assert list(p) == sorted(SPACE)
        assert type(p["lr"]) is float and 1e-4 <= p["lr"] < 1e-1
        assert type(p["drop"]) is float and 0.1 <= p["drop"] < 0.5
        assert type(p["units"]) is int and 16 <= p["units"] < 129
        assert p["epochs"] == 3
    acts = [p["act"] for p in points]
    # choice keeps element types: 1 and 1.0 both appear, as int and float
    assert {canon(a) for a in acts} == {'"relu"', '"tanh"', "1", "1.0"}


@pytest.mark.unit
def test_loguniform_spreads_over_decades():
    points = sample({"lr": loguniform(1e-4, 1e-1)}, 2000, seed=2)
    logs = np.log10([p["lr"] for p in points])
    assert abs(np.median(logs) - (-2.5)) < 0.1
    counts = np.histogram(logs, bins=[-4, -3, -2, -1])[0]
    assert counts.min() > 500  # about 667 per decade; plain uniform would give ~20 below 1e-3


@pytest.mark.unit
def test_sample_accepts_scipy_distribution():
    stats = pytest.importorskip("scipy.stats")
    space = {"lr": stats.loguniform(1e-4, 1e-1), "k": stats.randint(0, 3)}
    points = sample(space, 30, seed=4)
    assert points == sample(space, 30, seed=4)
    assert len(points) == 30
    for p in points:
        assert type(p["lr"]) is float and 1e-4 <= p["lr"] <= 1e-1
        assert type(p["k"]) is int and p["k"] in (0, 1, 2)


@pytest.mark.unit
def test_sample_small_discrete_space_warns():
    space = {"a": [1, 2], "b": ("x", "y"), "c": True}
    with pytest.warns(UserWarning, match="only 4 distinct points"):
        points = sample(space, 10, seed=0)
    assert sorted(canon(p) for p in points) == sorted(canon(p) for p in expand(space))
    with pytest.warns(UserWarning, match="only 3 distinct"):
        assert len(sample({"u": randint(0, 3)}, 5)) == 3
    with pytest.warns(UserWarning):
        assert sample({}, 2) == [{}]


@pytest.mark.unit
def test_sample_unknown_size_stops_after_100n_draws():
    class Coin:
        def rvs(self, random_state=None):
            return int(random_state.integers(2))

    with pytest.warns(UserWarning, match="found only 2 distinct points in 500 draws"):
        points = sample({"c": Coin()}, 5, seed=0)
    assert sorted(p["c"] for p in points) == [0, 1]


@pytest.mark.unit
def test_sample_exact_space_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(sample({"a": [1, 2], "b": [3, 4]}, 4)) == 4


@pytest.mark.unit
@pytest.mark.parametrize("n", [0, -1, 1.5, True, "3", None])
def test_sample_rejects_bad_n(n):
    with pytest.raises(SweepError, match="n must be a positive int"):
        sample({"a": [1, 2]}, n)


@pytest.mark.parametrize(
    ("space", "needle"),
    [
        ([{"a": [1]}], "space must be a dict"),
        ({"a": []}, "'a'"),
        ({"opt": Adam()}, "'opt'"),
        ({"x": [1, float("nan")]}, "'x'"),
        ({3: [1]}, "3"),
    ],
)
@pytest.mark.unit
def test_sample_rejects_bad_space(space, needle):
    with pytest.raises(SweepError, match=needle):
        sample(space, 2)


@pytest.mark.unit
def test_sample_rejects_bad_seed_and_bad_draws():
    with pytest.raises(SweepError, match="seed"):
        sample({"a": [1]}, 1, seed=-1)

    class NanDist:
        def rvs(self, random_state=None):
            return float("nan")

    class NoState:
        def rvs(self):
            return 1.0

    with pytest.raises(SweepError, match="'w'"):
        sample({"w": NanDist()}, 1)
    with pytest.raises(SweepError, match="'w'"):
        sample({"w": NoState()}, 1)


# ---------------------------------------------------------------- distributions


@pytest.mark.parametrize(
    "make",
    [
        lambda: uniform(1, 1),
        lambda: uniform(2, 1),
        lambda: uniform(float("nan"), 1),
        lambda: uniform("0", 1),
        lambda: loguniform(0, 1),
        lambda: loguniform(-1, 1),
        lambda: loguniform(1e-1, 1e-4),
        lambda: randint(3, 3),
        lambda: randint(0.5, 3),
        lambda: randint(True, 3),
    ],
)
@pytest.mark.unit
def test_distribution_bad_bounds(make):
    with pytest.raises(SweepError, match="low|high"):
        make()


@pytest.mark.unit
def test_distribution_rvs_shapes_and_states():
    for dist in (uniform(-1, 1), loguniform(1e-3, 1e3), randint(-2, 2)):
        scalar = dist.rvs(random_state=0)
        assert type(scalar) in (float, int)
        assert dist.rvs(random_state=0) == scalar
        assert dist.rvs(random_state=np.random.default_rng(0)) == scalar
        assert isinstance(dist.rvs(random_state=np.random.RandomState(0)), (float, int))
        assert isinstance(dist.rvs(), (float, int))
        arr = dist.rvs(size=(50, 2), random_state=np.random.RandomState(1))
        assert isinstance(arr, np.ndarray) and arr.shape == (50, 2)
        assert (arr >= dist.low).all() and (arr < dist.high).all()
    assert set(randint(0, 3).rvs(size=200, random_state=0).tolist()) == {0, 1, 2}
    with pytest.raises(SweepError, match="random_state"):
        uniform(0, 1).rvs(random_state="seed")


@pytest.mark.unit
def test_distribution_bounds_normalised_and_repr():
    dist = uniform(np.int64(0), 1)
    assert type(dist.low) is float
    assert repr(loguniform(1e-4, 0.1)) == "loguniform(low=0.0001, high=0.1)"
    assert randint(np.int32(1), 4) == randint(1, 4)


def test_import_does_not_touch_numpy():
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('sweeper'); pkg.__path__ = [{str(Path(ROOT) / 'sweeper')!r}]\n"
        "sys.modules['sweeper'] = pkg\n"
        "import sweeper.model.grid as g\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "assert g.expand({'a': [1, 2]}) == [{'a': 1}, {'a': 2}]\n"
        "assert 'numpy' not in sys.modules, 'numpy imported by expand'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
