"""Grid expansion and random sampling of hyperparameter points.

A *point* is a dict mapping parameter names to storable values: JSON scalars
(``None``, ``bool``, ``int``, finite ``float``, ``str``) or (nested) lists of
them. Points are what a sweep runs, stores and identifies by :func:`point_key`.

* :func:`expand` turns a grid (a dict of value lists, or a list of such dicts)
  into points, in the same order as scikit-learn's ``ParameterGrid``.
* :func:`sample` draws points at random from a space of value lists,
  distributions and fixed values.
* :class:`uniform`, :class:`loguniform` and :class:`randint` are small
  distributions for :func:`sample`, so scipy is not needed.

numpy is imported only inside the functions that draw random numbers, so
importing this module stays cheap.
"""

from __future__ import annotations

import itertools
import math
import numbers
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.distributions import is_numpy, is_numpy_scalar, loguniform, randint, uniform
from sweeper.model.text import CONTROL, printable
from sweeper.model.trial import canonical_json

__all__ = ["Points", "expand", "point_key", "sample", "uniform", "loguniform", "randint"]


class Points(list):  # type: ignore[type-arg,unused-ignore]
    """Points already drawn or expanded: :func:`expand` keeps each as one point.

    :func:`sample` returns this, so a sampled list-valued setting such as
    ``{"layers": [64, 32]}`` is one point, not the choices 64 and 32.
    """

_GRID_EXAMPLE = 'e.g. grid = {"lr": [0.01, 0.001]}'
_SPACE_EXAMPLE = 'e.g. space = {"lr": loguniform(1e-4, 1e-1), "units": [32, 64]}'
_STORABLE = "use JSON scalars (str, int, float, bool, None) or lists of them"


# --------------------------------------------------------------------------
# Values: validation and normalisation
# --------------------------------------------------------------------------


def _type_name(value: object) -> str:
    """Return the bare class name of ``value`` for messages."""
    return type(value).__name__


def _is_numpy_array(value: object) -> bool:
    """Tell whether ``value`` is a numpy array with at least one dimension."""
    return is_numpy(value) and hasattr(value, "tolist") and (getattr(value, "ndim", 0) or 0) >= 1


def _hint(value: object) -> str:
    """Suggest how to turn an unstorable ``value`` into a storable one."""
    if callable(getattr(value, "rvs", None)):
        return "distributions only work with sample(); for a grid list the values"
    if isinstance(value, Mapping):
        return "split it into separate parameters"
    if isinstance(value, (set, frozenset)):
        return "give a sorted list instead"
    if isinstance(value, (bytes, bytearray)):
        return "decode it to str"
    if _is_numpy_array(value):
        return "convert it with .tolist()"
    return "e.g. its name as a string"


def _unstorable(name: str, value: object) -> SweepError:
    """Build the error for a value of a type that cannot be stored."""
    return SweepError(
        f"parameter {name!r} has a value of type {_type_name(value)} that cannot be stored; "
        f"{_STORABLE}, {_hint(value)}"
    )


def normalise_value(value: Any, name: str) -> Any:
    """Return ``value`` as plain JSON data, or raise SweepError naming ``name``.

    numpy scalars become Python scalars, tuples become lists, subclasses of
    str/int/float (e.g. enums) become the plain type. nan and inf are refused.
    """
    if value is None or type(value) is bool:
        return value
    if is_numpy_scalar(value):
        item = value.item()
        if is_numpy(item):  # np.longdouble and the like: no Python type of their own
            item = float(item) if isinstance(item, numbers.Real) else str(item)
        if isinstance(item, float) and getattr(getattr(value, "dtype", None), "itemsize", 8) < 8:
            item = float(str(value))  # np.float32(0.1) is the 0.1 it was written as, not 0.10000000149011612
        return normalise_value(item, name)
    if _is_numpy_array(value):  # a list-valued candidate given as an array
        return [normalise_value(item, name) for item in value]
    if isinstance(value, str):
        if CONTROL.search(value):
            raise SweepError(
                f"parameter {name!r} has the value '{printable(value)}' with control characters, "
                "which would garble folder names, logs and the CSV; remove them"
            )
        return str.__str__(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SweepError(
                f"parameter {name!r} has the value {value!r}, which cannot be stored; "
                "use a finite number, or None for 'not set'"
            )
        return float(value)
    if isinstance(value, (list, tuple)):
        return [normalise_value(item, name) for item in value]
    raise _unstorable(name, value)


def _fresh(value: Any) -> Any:
    """Copy the lists inside a normalised value so points share no lists."""
    if isinstance(value, list):
        return [_fresh(item) for item in value]
    return value


def _check_name(name: object, where: str, example: str) -> str:
    """Return ``name`` if it is a non-empty str, else raise SweepError."""
    if not isinstance(name, str) or not name:
        raise SweepError(
            f"{where} has a parameter name {name!r} of type {_type_name(name)}; "
            f"parameter names must be non-empty strings, {example}"
        )
    if CONTROL.search(name):
        raise SweepError(f"{where} has a parameter name '{printable(name)}' with control characters, which "
                         "would garble the console, folder names and the CSV header; use a plain name")
    return name


def _as_list(value: Any) -> list[Any] | None:
    """Return the choices of a list/tuple/range/numpy array, else None (a scalar)."""
    if isinstance(value, (list, tuple, range)):
        return list(value)
    if _is_numpy_array(value):
        return list(value)  # NumPy scalars (or rows), each normalised as a candidate
    return None


def _choices(value: Any, name: str) -> list[Any]:
    """Return the normalised choices of one grid parameter (a scalar is one choice)."""
    items = _as_list(value)
    if items is None:
        return [normalise_value(value, name)]
    if not items:
        raise SweepError(
            f"parameter {name!r} has an empty list of values; give at least one value"
        )
    return [normalise_value(item, name) for item in items]


# --------------------------------------------------------------------------
# Grids
# --------------------------------------------------------------------------


def _grid_dicts(grid: Any) -> list[Mapping[Any, Any]]:
    """Return the dicts making up ``grid``, or raise SweepError."""
    if isinstance(grid, Mapping):
        return [grid]
    if not isinstance(grid, (list, tuple)):
        raise SweepError(
            "grid must be a dict of lists or a list of such dicts, "
            f"got {_type_name(grid)}; {_GRID_EXAMPLE}"
        )
    if not grid:
        raise SweepError(
            f"grid is an empty list; give at least one dict of parameter lists, {_GRID_EXAMPLE}"
        )
    for index, part in enumerate(grid):
        if not isinstance(part, Mapping):
            raise SweepError(
                f"grid[{index}] is a {_type_name(part)}, but a list grid must hold only "
                f"dicts of lists; {_GRID_EXAMPLE}"
            )
    return list(grid)


def _expand_one(part: Mapping[Any, Any]) -> Iterator[dict[str, Any]]:
    """Yield the points of one grid dict in ParameterGrid order."""
    names = sorted(_check_name(name, "grid", _GRID_EXAMPLE) for name in part)
    value_lists = [_choices(part[name], name) for name in names]
    for combo in itertools.product(*value_lists):
        yield {name: _fresh(value) for name, value in zip(names, combo)}


def expand(grid: Mapping[str, Any] | list[Mapping[str, Any]]) -> Points:
    """Expand a parameter grid into the list of its points.

    ``grid`` maps parameter names to a list (or tuple) of values to try, or
    to a scalar fixed setting; a list-valued setting is written as a list of
    lists, e.g. ``{"layers": [[64, 32], [128]]}``. ``grid`` may also be a
    non-empty list of such dicts, meaning their union.

    The order is that of ``sklearn.model_selection.ParameterGrid``: dict by
    dict, keys sorted, the last key varying fastest; an empty dict gives the
    single point ``{}``. Points equal under :func:`point_key` are kept once,
    at their first place. Raises SweepError for anything that cannot be
    expanded or stored.
    """
    parts = _grid_dicts(grid)
    if isinstance(grid, Points):
        expanded = [[{_check_name(k, "point", _GRID_EXAMPLE): normalise_value(v, k) for k, v in p.items()}
                     for p in parts]]
    else:
        expanded = [list(_expand_one(part)) for part in parts]  # validate all first
    points: list[dict[str, Any]] = []
    seen: set[str] = set()
    for point in itertools.chain.from_iterable(expanded):
        key = canonical_json(point)
        if key not in seen:
            seen.add(key)
            points.append(point)
    return Points(points)


def check_not_empty(grid: Any) -> None:
    """A sweep needs at least one setting: ``grid = {}`` is a mistake, not one default run.

    (:func:`expand` itself follows ``ParameterGrid``, where ``{}`` is the one empty point.)
    """
    if isinstance(grid, Mapping) and not isinstance(grid, Points) and not grid:
        raise SweepError(f"grid is empty; give at least one parameter, {_GRID_EXAMPLE}")


def point_key(params: Mapping[str, Any]) -> str:
    """Return the canonical JSON text of a point, used to compare points.

    Keys are sorted and separators compact; numpy scalars count as their
    Python value and tuples as lists. Values of different JSON kinds stay
    different even if Python calls them equal: ``1``, ``1.0`` and ``True``
    give three different keys.
    """
    if not isinstance(params, Mapping):
        raise SweepError(
            f"a point must be a dict of parameter values, got {_type_name(params)}; "
            'e.g. {"lr": 0.01}'
        )
    point = {
        _check_name(name, "point", 'e.g. {"lr": 0.01}'): normalise_value(value, name)
        for name, value in params.items()
    }
    return canonical_json(point)


# --------------------------------------------------------------------------
# Random search
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Axis:
    """One parameter of a sampling space: fixed, a list of choices, or a distribution."""

    name: str
    choices: tuple[Any, ...] = ()
    dist: Any = None

    def draw(self, rng: Any) -> Any:
        """Draw one normalised value with the numpy Generator ``rng``."""
        if self.dist is not None:
            return self._draw_dist(rng)
        if len(self.choices) == 1:
            return _fresh(self.choices[0])
        return _fresh(self.choices[int(rng.integers(len(self.choices)))])

    def _draw_dist(self, rng: Any) -> Any:
        """Call the distribution's ``rvs`` and normalise the result."""
        try:
            value = self.dist.rvs(random_state=rng)
        except TypeError as exc:
            raise SweepError(
                f"parameter {self.name!r}: {_type_name(self.dist)}.rvs(random_state=...) "
                f"failed ({exc}); use a scipy.stats distribution or "
                "sweeper.uniform/loguniform/randint"
            ) from exc
        return normalise_value(value, self.name)

    def distinct(self) -> int | None:
        """Number of distinct values this axis can give, or None if unknown."""
        if isinstance(self.dist, randint):
            return self.dist.high - self.dist.low
        if self.dist is not None:
            return None
        return len({canonical_json({"v": value}) for value in self.choices})


def _axis(name: str, value: Any) -> _Axis:
    """Build the sampling axis for one entry of a space."""
    if callable(getattr(value, "rvs", None)):
        return _Axis(name, dist=value)
    return _Axis(name, choices=tuple(_choices(value, name)))


def _space_axes(space: Any) -> list[_Axis]:
    """Validate ``space`` and return its axes in sorted name order."""
    if not isinstance(space, Mapping):
        raise SweepError(
            "space must be a dict mapping names to lists, distributions or fixed values, "
            f"got {_type_name(space)}; {_SPACE_EXAMPLE}"
        )
    names = sorted(_check_name(name, "space", _SPACE_EXAMPLE) for name in space)
    return [_axis(name, space[name]) for name in names]


def _space_size(axes: list[_Axis]) -> int | None:
    """Number of distinct points the axes allow, or None if unknown."""
    size = 1
    for axis in axes:
        count = axis.distinct()
        if count is None:
            return None
        size *= count
    return size


def _check_count(n: Any) -> int:
    """Return ``n`` as an int if it is a positive integer, else raise SweepError."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise SweepError(f"n must be a positive int (the number of points), got {n!r}; e.g. n=20")
    return int(n)


def _check_seed(seed: Any) -> int:
    """Return ``seed`` as an int if it is a non-negative integer, else raise SweepError."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise SweepError(f"seed must be a non-negative int, got {seed!r}; e.g. seed=0")
    return int(seed)


def _warn_short(found: int, n: int, draws: int, size: int | None) -> None:
    """Warn, on one line, that fewer than ``n`` distinct points were found."""
    if size is not None:
        message = (
            f"sample: the space has only {size} distinct points, fewer than n={n}; "
            f"returning the {found} found"
        )
    else:
        message = (
            f"sample: found only {found} distinct points in {draws} draws, fewer than n={n}; "
            "the space allows about that many, lower n or widen the space"
        )
    warnings.warn(message, UserWarning, stacklevel=3)


def sample(space: Mapping[str, Any], n: int, seed: int = 0) -> Points:
    """Draw ``n`` distinct random points from ``space`` (random search).

    ``space`` maps parameter names to a list or tuple (uniform choice among
    its elements, whose types are kept), a distribution with a
    scipy.stats-style ``rvs(random_state=...)`` method (scipy.stats frozen
    distributions, or :class:`uniform`, :class:`loguniform`,
    :class:`randint`), or a scalar fixed setting.

    One ``numpy.random.default_rng(seed)`` generator drives every draw,
    point by point with keys in sorted order, so the same seed gives the same
    points. Duplicate points are skipped; drawing stops at ``n`` distinct
    points, once every point of a finite space is found, or after ``100 * n``
    draws. Fewer than ``n`` points come back with a one-line UserWarning.
    """
    n = _check_count(n)
    seed = _check_seed(seed)
    axes = _space_axes(space)
    size = _space_size(axes)
    target = n if size is None else min(n, size)

    import numpy as np

    rng = np.random.default_rng(seed)
    points: list[dict[str, Any]] = []
    seen: set[str] = set()
    draws = 0
    while len(points) < target and draws < 100 * n:
        point = {axis.name: axis.draw(rng) for axis in axes}
        draws += 1
        key = canonical_json(point)
        if key not in seen:
            seen.add(key)
            points.append(point)
    if len(points) < n:
        _warn_short(len(points), n, draws, size)
    return Points(points)


