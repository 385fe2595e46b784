"""The typed space: one reading of the user's dict, by which a grid expands,
a sample draws and a search gets Optuna's distributions. Tables: each kind (what it is read as,
its size, what it draws, what Optuna gets), each mistake (its one line), and the points a seed
gave before the space existed (``sweeper.model.grid.sample`` is now a caller of it)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import ROOT
from sweeper.errors import SweepError
from sweeper.model.distributions import loguniform, randint, uniform
from sweeper.model.grid import Points, expand, sample
from sweeper.model.space import Choices, Custom, Fixed, Integers, LogUniform, Space, Uniform

class Coin:
    """A scipy-style distribution of the user's: 0 or 1."""

    def rvs(self, random_state=None):
        return int(random_state.integers(2))


class NoState:
    """An ``rvs`` that takes no random_state: refused when drawn."""

    def rvs(self):
        return 1.0


# -- each kind --------------------------------------------------------------------------------

#: (the value in the dict, the kind read, its distinct values (None: unknown), what Optuna gets:
#: "fixed", (class name, its fields) or "refused", a check of a drawn value)
KINDS = [
    (5, Fixed, 1, "fixed", lambda v: v == 5),
    ("relu", Fixed, 1, "fixed", lambda v: v == "relu"),
    (None, Fixed, 1, "fixed", lambda v: v is None),
    (np.float32(0.1), Fixed, 1, "fixed", lambda v: v == 0.1 and type(v) is float),
    ([32, 64], Choices, 2, ("CategoricalDistribution", {"choices": (32, 64)}), lambda v: v in (32, 64)),
    ((True, False, True), Choices, 2, ("CategoricalDistribution", {"choices": (True, False, True)}),
     lambda v: type(v) is bool),
    ([1, 1.0, True], Choices, 3, ("CategoricalDistribution", {"choices": (1, 1.0, True)}),
     lambda v: repr(v) in ("1", "1.0", "True")),
    (["only"], Choices, 1, ("CategoricalDistribution", {"choices": ("only",)}), lambda v: v == "only"),
    (uniform(0.1, 0.5), Uniform, None, ("FloatDistribution", {"low": 0.1, "high": 0.5, "log": False}),
     lambda v: type(v) is float and 0.1 <= v < 0.5),
    (loguniform(1e-4, 1e-1), LogUniform, None, ("FloatDistribution", {"low": 1e-4, "high": 1e-1, "log": True}),
     lambda v: type(v) is float and 1e-4 <= v < 1e-1),
    (randint(1, 4), Integers, 3, ("IntDistribution", {"low": 1, "high": 3, "step": 1}), lambda v: v in (1, 2, 3)),
    (Coin(), Custom, None, "refused", lambda v: v in (0, 1)),
]


@pytest.mark.parametrize(("value", "kind", "distinct", "searched", "drawn"), KINDS,
                         ids=[type(k[0]).__name__ for k in KINDS])
@pytest.mark.unit
def test_each_kind_is_read_sized_drawn_and_searched(value, kind, distinct, searched, drawn):
    space = Space.of({"p": value})
    (param,) = space.params
    assert type(param) is kind and param.name == "p"
    assert param.distinct() == distinct and space.size == distinct
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a small space: fewer points than asked, with a warning
        points = space.sample(30, seed=1)
    assert points and all(set(p) == {"p"} and drawn(p["p"]) for p in points)
    assert len(points) == (2 if kind is Custom else 30 if distinct is None else min(30, distinct))
    pytest.importorskip("optuna")
    if searched == "refused":
        with pytest.raises(SweepError, match=r"space\['p'\] is Coin, a distribution a search cannot model"):
            space.optuna()
    elif searched == "fixed":  # a fixed value alone leaves nothing to search
        assert Space.of({"p": value, "q": [1, 2]}).optuna()[1] == {"p": points[0]["p"]}
    else:
        dists, fixed = space.optuna()
        name, fields = searched
        assert fixed == {} and type(dists["p"]).__name__ == name
        assert {k: getattr(dists["p"], k) for k in fields} == fields


@pytest.mark.unit
def test_an_optuna_distribution_is_searched_as_it_is_and_cannot_be_sampled():
    optuna = pytest.importorskip("optuna")
    given = optuna.distributions.FloatDistribution(0.0, 2.0, step=0.5)
    space = Space.searched({"o": given, "n": 3})
    assert [type(p) for p in space.params] == [Custom, Fixed]
    assert space.optuna() == ({"o": given}, {"n": 3})
    with pytest.raises(SweepError, match="parameter 'o' has a value of type FloatDistribution that cannot"):
        space.sample(1)
    with pytest.raises(SweepError, match="parameter 'o' has a value of type FloatDistribution that cannot"):
        Space.of({"o": given})  # sample's reader refuses it up front, as it always did


@pytest.mark.unit
def test_the_readers_differ_where_they_always_did():
    # a range or a numpy array lists choices to a grid and a sample; to a search an array is one
    # (list-valued) fixed setting and a range cannot be stored
    for read in (Space.grid, Space.of):
        assert read({"r": range(3), "a": np.array([4, 5])}).params == (Choices("r", (0, 1, 2)), Choices("a", (4, 5)))
    assert Space.searched({"a": np.array([4, 5])}).params == (Fixed("a", [4, 5]),)
    with pytest.raises(SweepError, match="parameter 'r' has a value of type range"):
        Space.searched({"r": range(3)})
    # a grid lists no distribution; a sample draws from it
    with pytest.raises(SweepError, match=r"distributions only work with sample\(\)"):
        Space.grid({"lr": uniform(0, 1)})
    assert Space.of({"lr": uniform(0, 1)}).params == (Uniform("lr", uniform(0, 1)),)


@pytest.mark.unit
def test_a_space_is_frozen_and_keeps_the_order_given():
    space = Space.of({"zz": uniform(0, 1), "aa": [1, 2], "mm": 3})
    assert [p.name for p in space.params] == ["zz", "aa", "mm"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.params = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.params[0].name = "x"  # type: ignore[misc]
    pytest.importorskip("optuna")
    dists, fixed = Space.searched({"zz": uniform(0, 1), "mm": 3, "aa": [1, 2]}).optuna()
    assert list(dists) == ["zz", "aa"] and fixed == {"mm": 3}  # a sampler asks in the order given


# -- size and expansion -----------------------------------------------------------------------


@pytest.mark.parametrize(("given", "size"), [
    ({}, 1),
    ({"a": [1, 2], "b": ("x", "y", "z"), "c": True}, 6),
    ({"a": [1, 2], "u": randint(0, 5)}, 10),
    ({"a": [1, 2], "u": uniform(0, 1)}, None),
    ({"a": [1, 2], "c": Coin()}, None),
    ({"d": [[1, 2], [1, 2], (1, 2)]}, 1),  # one list-valued setting, given thrice
])
@pytest.mark.unit
def test_the_size_is_the_product_of_distinct_values(given, size):
    assert Space.of(given).size == size


@pytest.mark.unit
def test_points_are_every_combination_in_parameter_grid_order_sharing_no_list():
    points = list(Space.grid({"b": [[1], [2]], "a": [1, 2], "c": "x"}).points())
    assert points == [{"a": 1, "b": [1], "c": "x"}, {"a": 1, "b": [2], "c": "x"},
                      {"a": 2, "b": [1], "c": "x"}, {"a": 2, "b": [2], "c": "x"}]
    points[0]["b"].append(9)
    assert points[2]["b"] == [1]
    assert list(Space.grid({}).points()) == [{}]
    with pytest.raises(SweepError, match=r"parameter 'u' has a value of type uniform.*only work with sample"):
        Space.of({"u": uniform(0, 1)}).points()


# -- the same points as before ----------------------------------------------------------------

SPACE = {"lr": loguniform(1e-4, 1e-1), "drop": uniform(0.1, 0.5), "units": randint(16, 129),
         "act": ["relu", "tanh"], "epochs": 3, "layers": [[64, 32], [128]]}

#: (space, n, seed, the points grid.sample gave before the space existed: the draws, in order)
DRAWN_BEFORE = [
    (SPACE, 3, 0, [
        {"act": "tanh", "drop": 0.20791468550554815, "epochs": 3, "layers": [128], "lr": 0.0001327151712530881,
         "units": 24},
        {"act": "relu", "drop": 0.42530809568010897, "epochs": 3, "layers": [128], "lr": 0.0066055247980503174,
         "units": 119},
        {"act": "tanh", "drop": 0.3174499965861691, "epochs": 3, "layers": [128], "lr": 0.06385828802382956,
         "units": 47},
    ]),
    ({"units": randint(1, 4), "opt": ["adam", "sgd", None]}, 4, 5,
     [{"opt": None, "units": 3}, {"opt": "adam", "units": 3}, {"opt": "sgd", "units": 2}, {"opt": "sgd", "units": 1}]),
    ({"x": uniform(0, 1)}, 2, 1, [{"x": 0.5118216247002567}, {"x": 0.9504636963259353}]),
    ({"z": [1, 2], "a": ["only"], "u": uniform(0, 1)}, 3, 2,  # a list of one among them
     [{"a": "only", "u": 0.2616121342493164, "z": 1}, {"a": "only", "u": 0.8142257405942803, "z": 1},
      {"a": "only", "u": 0.0919159421350969, "z": 1}]),
]


@pytest.mark.unit
@pytest.mark.parametrize(("given", "n", "seed", "before"), DRAWN_BEFORE)
def test_a_seed_draws_the_points_it_drew_before(given, n, seed, before):
    assert Space.of(given).sample(n, seed) == before
    assert sample(given, n, seed=seed) == before and isinstance(sample(given, n, seed=seed), Points)
    reordered = dict(reversed(list(given.items())))  # the dict's order changes nothing
    assert Space.of(reordered).sample(n, seed) == before


@pytest.mark.unit
def test_a_short_sample_warns_once_naming_the_callers_line():
    with pytest.warns(UserWarning, match="only 2 distinct points, fewer than n=5") as caught:
        Space.of({"a": [1, 2]}).sample(5)
    with pytest.warns(UserWarning, match="found only 2 distinct points in 500 draws") as again:
        sample({"c": Coin()}, 5)
    assert [w.filename for w in caught] == [__file__] == [w.filename for w in again]


# -- each mistake, in one line ----------------------------------------------------------------

#: (the reader, what it is given, the start of its one line, or a piece of it)
MISTAKES = [
    (Space.of, "lr", "space must be a dict mapping names to lists, distributions or fixed values, got str"),
    (Space.of, {3: [1]}, "space has a parameter name 3 of type int; parameter names must be non-empty strings"),
    (Space.of, {"": [1]}, "space has a parameter name '' of type str"),
    (Space.of, {"a\x01": [1]}, "space has a parameter name 'a\\x01' with control characters"),
    (Space.of, {"a": []}, "parameter 'a' has an empty list of values; give at least one value"),
    (Space.of, {"x": [1, float("nan")]}, "parameter 'x' has the value nan, which cannot be stored"),
    (Space.of, {"s": "a\x02b"}, "parameter 's' has the value 'a\\x02b' with control characters"),
    (Space.of, {"opt": object()}, "parameter 'opt' has a value of type object that cannot be stored"),
    (Space.of, {"d": {"k": 1}}, "parameter 'd' has a value of type dict that cannot be stored; use JSON scalars"),
    (Space.of, {"b": [float("nan")], "a": []}, "parameter 'a' has an empty list"),  # sorted: 'a' says first
    (Space.of, {"a": [], 3: [1]}, "space has a parameter name 3"),  # every name before any value
    (Space.grid, {"lr": uniform(0, 1)}, "parameter 'lr' has a value of type uniform that cannot be stored"),
    (Space.grid, {3: [1]}, "grid has a parameter name 3 of type int"),
    (Space.searched, "lr", "a search needs space = {name: distribution or list}, got a str"),
    (Space.searched, Points([{"a": 1}]), "a search needs space = {name: distribution or list}, got a grid"),
    (Space.searched, {3: [1]}, "space has the key 3; parameter names are non-empty strings"),
    (Space.searched, {"x": []}, "space['x'] is an empty list; give at least one choice"),
    (Space.searched, {"x": [[1, 2], [3]]}, "space['x'] lists [1, 2]; a search chooses among numbers"),
    (Space.searched, {"c": Coin()}, "space['c'] is Coin, a distribution a search cannot model"),
    (Space.searched, {"b": [float("nan")], "a": []}, "parameter 'b' has the value nan"),  # in the order given
]


@pytest.mark.unit
@pytest.mark.parametrize(("read", "given", "needle"), MISTAKES)
def test_each_mistake_is_refused_in_one_line(read, given, needle):
    with pytest.raises(SweepError) as info:
        read(given)
    assert needle in str(info.value) and "\n" not in str(info.value)


#: (the space, what is asked of it, the start of its one line)
ASKED = [
    ({"a": [1, 2]}, lambda s: s.sample(0), "n must be a positive int (the number of points), got 0"),
    ({"a": [1, 2]}, lambda s: s.sample(True), "n must be a positive int"),
    ({"a": [1, 2]}, lambda s: s.sample(2, seed=-1), "seed must be a non-negative int, got -1"),
    ({"w": NoState()}, lambda s: s.sample(1), "parameter 'w': NoState.rvs(random_state=...) failed"),
    ({}, lambda s: s.optuna(), "a search's space is empty; give each parameter a distribution or a list"),
    ({"e": 1, "f": "g"}, lambda s: s.optuna(), "space has nothing to search (every value is fixed)"),
    ({"x": [[1, 2], [3]]}, lambda s: s.optuna(), "space['x'] lists [1, 2]; a search chooses among numbers"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("given", "ask", "needle"), ASKED)
def test_each_mistake_in_what_is_asked_is_refused_in_one_line(given, ask, needle):
    if "search" in needle or "space[" in needle:
        pytest.importorskip("optuna")
    with pytest.raises(SweepError) as info:
        ask(Space.of(given))
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)


@pytest.mark.unit
def test_the_callers_say_what_the_space_says():
    optuna = pytest.importorskip("optuna")
    from sweeper.search.sampling import distributions

    given = {"lr": loguniform(1e-4, 1e-1), "units": randint(16, 129), "act": ["relu", "tanh"], "epochs": 3}
    assert distributions(given) == Space.searched(given).optuna() == (
        {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True),
         "units": optuna.distributions.IntDistribution(16, 128),
         "act": optuna.distributions.CategoricalDistribution(["relu", "tanh"])},
        {"epochs": 3})
    with pytest.raises(SweepError, match="space has the key 3"):
        distributions({3: [1]})
    assert sample(given, 7, seed=4) == Space.of(given).sample(7, 4)
    assert expand({"a": [1, 2], "b": 3}) == list(Space.grid({"a": [1, 2], "b": 3}).points())


def test_reading_a_space_imports_neither_numpy_nor_optuna():
    code = ("import sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from sweeper.model.space import Space\n"
            "from sweeper.model.distributions import uniform\n"
            "s = Space.of({'a': [1, 2], 'u': uniform(0, 1)}); Space.searched({'a': [1, 2]})\n"
            "assert s.size is None and list(Space.grid({'a': [1, 2]}).points()) == [{'a': 1}, {'a': 2}]\n"
            "assert 'numpy' not in sys.modules and 'optuna' not in sys.modules, sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
