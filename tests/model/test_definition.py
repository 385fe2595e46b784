"""The rules about grid, space, samples and search, in one place:
sweeper.model.definition.shape, which sweep(), a grid file's reader, a JSON/YAML grid and the
command line all ask. A table: what is given, and the points, the space or the one line."""

from __future__ import annotations

import pytest

import sweeper
from sweeper.errors import SweepError
from sweeper.model.definition import ABSENT, shape
from sweeper.model.grid import Points

pytestmark = pytest.mark.unit

SPACE = {"lr": sweeper.loguniform(1e-4, 1e-1), "units": [32, 64]}

#: (what is given, what comes out: "points N", "space", or the start of the error)
CASES = [
    (dict(grid={"lr": [0.1, 0.01], "units": [32]}), "points 2"),
    (dict(grid=[{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.1}]), "points 2"),  # a point listed twice runs once
    (dict(grid={"lr": [0.1]}, samples=5), "points 1"),  # samples go with a space only
    (dict(grid={"lr": [0.1]}, search="tpe"), "space"),  # sweep(fn, space, search=...)
    (dict(grid={"lr": [0.1]}, search="tpe", where="grid.py", later=True), "points 1"),  # the reader expands it
    (dict(grid=Points([{"lr": 0.1}]), search="tpe", where="grid.py"), "points searched"),  # the search refuses
    (dict(space=SPACE, samples=4, where="grid.py"), "points 4"),
    (dict(space=SPACE, search="tpe", where="grid.py"), "space"),
    (dict(space=SPACE, samples=4, search="tpe", where="grid.py"), "space"),  # a search searches it
    (dict(space=SPACE, where="grid.py"), "grid.py defines space but neither samples = N nor a search"),
    (dict(space=SPACE, where="grid.py", later=True), "space"),  # the reader: --search may come
    (dict(space=SPACE, samples="4", where="grid.py"), "grid.py defines space but no samples = N"),
    (dict(space=SPACE, samples=True, where="grid.py"), "grid.py defines space but no samples = N"),
    (dict(grid={"lr": [0.1]}, space=SPACE, where="grid.py"), "grid.py defines both grid and space"),
    (dict(where="grid.py"), "grid.py defines no grid"),
    (dict(grid={}), "grid is empty"),
    (dict(grid=None, where="grid.py"), "grid must be"),
]


@pytest.mark.parametrize("given, out", CASES, ids=[str(i) for i in range(len(CASES))])
def test_each_front_ends_input_has_one_shape(given, out):
    if out.startswith("points") or out == "space":
        points, space = shape(**given)
        if out == "space":
            assert points is None and isinstance(space, dict) and not isinstance(space, Points)
        elif out == "points searched":  # handed to the search, whose check says it got a grid
            assert points is None and isinstance(space, Points)
        else:
            assert space is None and len(points) == int(out.split()[1])
    else:
        with pytest.raises(SweepError) as caught:
            shape(**given)
        assert str(caught.value).startswith(out) and "\n" not in str(caught.value), str(caught.value)


def test_samples_are_drawn_with_the_seed():
    a, _ = shape(space=SPACE, samples=3, seed=1, where="g.py")
    b, _ = shape(space=SPACE, samples=3, seed=1, where="g.py")
    c, _ = shape(space=SPACE, samples=3, seed=2, where="g.py")
    assert a == b != c


def test_absent_is_not_none():
    assert ABSENT is not None and repr(ABSENT) == "ABSENT"
