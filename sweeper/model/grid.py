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
* :class:`ByPoint` is a function of the point evaluated ahead for each point (a grid
  file's, in the process that reads it), to be called as the function was.

Both read their dicts through :class:`sweeper.model.space.Space`, where the rules about
a space's values live. numpy is imported only inside the functions that draw random
numbers, so importing this module stays cheap.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from sweeper.errors import SweepError
from sweeper.model.distributions import loguniform, randint, uniform
from sweeper.model.space import GRID_EXAMPLE, Space, check_count, check_name, check_seed
from sweeper.model.trial import canonical_json
from sweeper.model.values import normalise_value, type_name

__all__ = ["Points", "expand", "point_key", "sample", "uniform", "loguniform", "randint"]


class Points(list):  # type: ignore[type-arg,unused-ignore]
    """Points already drawn or expanded: a list of parameter dicts that :func:`expand` (and a
    sweep) takes point by point, never as a grid.

    :func:`sample` returns this, so a sampled list-valued setting such as
    ``{"layers": [64, 32]}`` stays one point, not the two choices 64 and 32. Wrap a list of
    points of your own in it to sweep exactly those.

    Attributes:
        (a list's): each item a point, a dict of parameter names to values.

    Example:
        >>> import sweeper
        >>> sweeper.expand(sweeper.Points([{"layers": [64, 32]}, {"layers": [128]}]))
        [{'layers': [64, 32]}, {'layers': [128]}]
        >>> sweeper.expand({"layers": [64, 32]})  # a grid: two choices
        [{'layers': 64}, {'layers': 32}]
    """


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
            f"got {type_name(grid)}; {GRID_EXAMPLE}"
        )
    if not grid:
        raise SweepError(
            f"grid is an empty list; give at least one dict of parameter lists, {GRID_EXAMPLE}"
        )
    for index, part in enumerate(grid):
        if not isinstance(part, Mapping):
            raise SweepError(
                f"grid[{index}] is a {type_name(part)}, but a list grid must hold only "
                f"dicts of lists; {GRID_EXAMPLE}"
            )
    return list(grid)


def expand(grid: Mapping[str, Any] | list[Mapping[str, Any]]) -> Points:
    """Expand a parameter grid into the list of its points, as a sweep runs them.

    The order is that of ``sklearn.model_selection.ParameterGrid``: dict by dict, keys
    sorted, the last key varying fastest; an empty dict gives the single point ``{}``.
    Points equal as stored (``np.float32(0.1)`` and ``0.1``) are kept once, at their first place.

    Args:
        grid: a dict mapping each parameter name to a list (or tuple, ``range``, 1-D array)
            of values to try, or to a scalar, a fixed setting (a list-valued setting is a
            list of lists: ``{"layers": [[64, 32], [128]]}``); or a non-empty list of such
            dicts, their union; or :class:`Points`, taken point by point.

    Returns:
        The points, each a dict of names to plain JSON values (a :class:`Points`).

    Raises:
        SweepError: anything that cannot be expanded or stored (a set, NaN, an object...),
            naming the parameter.

    Example:
        >>> import sweeper
        >>> sweeper.expand({"lr": [0.1, 0.01], "units": [16, 64], "epochs": 8})[:2]
        [{'epochs': 8, 'lr': 0.1, 'units': 16}, {'epochs': 8, 'lr': 0.1, 'units': 64}]
        >>> sweeper.expand([{"opt": ["sgd"], "lr": [0.1]}, {"opt": ["adam"]}])
        [{'lr': 0.1, 'opt': 'sgd'}, {'opt': 'adam'}]
    """
    parts = _grid_dicts(grid)
    if isinstance(grid, Points):
        expanded = [[{check_name(k, "point", GRID_EXAMPLE): normalise_value(v, k) for k, v in p.items()}
                     for p in parts]]
    else:
        expanded = [list(Space.grid(part).points()) for part in parts]  # validate all first
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
        raise SweepError(f"grid is empty; give at least one parameter, {GRID_EXAMPLE}")


def point_key(params: Mapping[str, Any]) -> str:
    """Return the canonical JSON text of a point, used to compare points.

    Keys are sorted and separators compact; numpy scalars count as their
    Python value and tuples as lists. Values of different JSON kinds stay
    different even if Python calls them equal: ``1``, ``1.0`` and ``True``
    give three different keys.
    """
    if not isinstance(params, Mapping):
        raise SweepError(
            f"a point must be a dict of parameter values, got {type_name(params)}; "
            'e.g. {"lr": 0.01}'
        )
    point = {
        check_name(name, "point", 'e.g. {"lr": 0.01}'): normalise_value(value, name)
        for name, value in params.items()
    }
    return canonical_json(point)


@dataclass(frozen=True)
class ByPoint:
    """A function of the point (an option such as ``slurm_resources``) evaluated ahead for each
    point where the function cannot travel: a grid file's, read in a process of its own (the
    sweep's parent never imports the file). Called as the function was: its value for that
    point; a point it was not evaluated for (a search's) is one line naming the way that works."""

    option: str
    values: dict[str, Any] = field(default_factory=dict)  #: by the point's key

    @classmethod
    def of(cls, option: str, function: Callable[[dict[str, Any]], Any], points: list[dict[str, Any]]) -> ByPoint:
        values = {}
        for point in points:
            try:
                values[point_key(point)] = function(dict(point))
            except Exception as exc:  # noqa: BLE001 (the user's function: its error, in one line)
                raise SweepError(f"{option} raised {type(exc).__name__}: {exc} for the point {point}; fix it") from None
        return cls(option, values)

    def __call__(self, params: Mapping[str, Any]) -> Any:
        key = point_key(params)
        if key not in self.values:
            raise SweepError(f"{self.option}, a function in a grid file, is evaluated for the file's points as it is "
                             f"read; {dict(params)} is none of them (a search asks for its points as it runs): give "
                             f"{self.option} from sweep() in a script, where it is called for each point")
        return self.values[key]


# --------------------------------------------------------------------------
# Random search
# --------------------------------------------------------------------------


def sample(space: Mapping[str, Any], n: int, seed: int = 0) -> Points:
    """Draw ``n`` distinct random points from ``space`` (random search).

    One ``numpy.random.default_rng(seed)`` generator drives every draw, point by point with
    keys in sorted order, so the same seed gives the same points. Duplicate points are
    skipped; drawing stops at ``n`` distinct points, once every point of a finite space is
    found, or after ``100 * n`` draws; fewer than ``n`` come back with a one-line UserWarning.

    Args:
        space: maps each parameter name to a list or tuple (a uniform choice among its
            elements, whose types are kept), a distribution with a scipy.stats-style
            ``rvs(random_state=...)`` (:class:`uniform`, :class:`loguniform`,
            :class:`randint`, or scipy.stats' frozen ones), or a scalar, a fixed setting.
        n: how many points, at least 1.
        seed: the generator's seed, a non-negative int.

    Returns:
        The points, a :class:`Points`: give them to :func:`sweeper.sweep` as its grid.

    Raises:
        SweepError: a bad ``n``, ``seed`` or value of ``space``, naming it.

    Example:
        >>> import sweeper
        >>> space = {"lr": sweeper.loguniform(1e-4, 1e-1), "units": [16, 64], "epochs": 8}
        >>> points = sweeper.sample(space, 3, seed=0)
        >>> [(round(p["lr"], 5), p["units"], p["epochs"]) for p in points]
        [(0.00814, 64, 8), (0.00013, 16, 8), (0.00011, 16, 8)]
    """
    n, seed = check_count(n), check_seed(seed)  # before the space: the first mistake says
    return Points(Space.of(space).sample(n, seed, stacklevel=3))


