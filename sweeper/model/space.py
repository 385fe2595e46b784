"""A parameter space, read once into types: a :class:`Space` holds one
:class:`Param` per name, of one kind: a :class:`Fixed` value, :class:`Choices`, a
:class:`Uniform`, :class:`LogUniform` or :class:`Integers` range, or a :class:`Custom`
distribution (scipy-style ``rvs``, or Optuna's). A space expands (every combination: a grid),
samples (a random search), tells its size and converts to Optuna's distributions (an adaptive
search), so the rules for the user's dict live here, not in each caller. It is read by one of
three readers, whose wording (which tests and users know) and few differences are kept:

* :meth:`Space.grid`: one dict of a grid (``expand``): values and lists of values only;
* :meth:`Space.of`: a space to sample (``sample``): distributions too; a range or a numpy
  array lists choices;
* :meth:`Space.searched`: a search's space (``space[...]`` messages, the order given kept):
  Optuna distributions too; choices are a list or tuple of scalars, a numpy array is a fixed
  value, and other ``rvs`` objects are refused.

numpy and Optuna are imported only inside the functions that need them.
"""

from __future__ import annotations

import itertools
import numbers
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.distributions import loguniform, randint, uniform
from sweeper.model.text import CONTROL, printable
from sweeper.model.trial import canonical_json
from sweeper.model.values import fresh, is_numpy_array, normalise_value, type_name, unstorable

GRID_EXAMPLE = 'e.g. grid = {"lr": [0.01, 0.001]}'
_SPACE_EXAMPLE = 'e.g. space = {"lr": loguniform(1e-4, 1e-1), "units": [32, 64]}'
_SEARCH_EXAMPLE = "e.g. space = {'lr': sweeper.loguniform(1e-4, 1e-1), 'units': [32, 64]}"

# -- Checks ---------------------------------------------------------------------------------


def check_name(name: object, where: str, example: str) -> str:
    """Return ``name`` if it is a non-empty str, else raise SweepError."""
    if not isinstance(name, str) or not name:
        raise SweepError(
            f"{where} has a parameter name {name!r} of type {type_name(name)}; "
            f"parameter names must be non-empty strings, {example}"
        )
    if CONTROL.search(name):
        raise SweepError(f"{where} has a parameter name '{printable(name)}' with control characters, which "
                         "would garble the console, folder names and the CSV header; use a plain name")
    return name


def check_count(n: Any) -> int:
    """Return ``n`` as an int if it is a positive integer, else raise SweepError."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise SweepError(f"n must be a positive int (the number of points), got {n!r}; e.g. n=20")
    return int(n)


def check_seed(seed: Any) -> int:
    """Return ``seed`` as an int if it is a non-negative integer, else raise SweepError."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise SweepError(f"seed must be a non-negative int, got {seed!r}; e.g. seed=0")
    return int(seed)


def _is_optuna(value: object) -> bool:
    """Whether ``value`` is an Optuna distribution, without importing Optuna (none exists before)."""
    module = sys.modules.get("optuna.distributions")
    return module is not None and isinstance(value, module.BaseDistribution)


# -- Parameters, by kind ----------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One parameter of a space; each kind says how it is drawn, counted, listed and searched."""

    name: str

    def draw(self, rng: Any) -> Any:
        """One normalised value, drawn with the numpy Generator ``rng``."""
        raise NotImplementedError

    def distinct(self) -> int | None:
        """How many distinct values this parameter can take; None: unknown (a continuous one)."""
        return None

    def values(self) -> tuple[Any, ...]:
        """Every value, for a grid."""
        raise NotImplementedError

    def optuna(self) -> Any:
        """The Optuna distribution a search asks this parameter from (imports Optuna)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(Param):
    """One value every point takes: a scalar (or a list-valued setting) in the dict."""

    value: Any

    def draw(self, rng: Any) -> Any:
        return fresh(self.value)

    def distinct(self) -> int | None:
        return 1

    def values(self) -> tuple[Any, ...]:
        return (self.value,)

    def optuna(self) -> Any:
        """None: a fixed value is not searched (:meth:`Space.optuna` passes it on as it is)."""
        return None


@dataclass(frozen=True)
class Choices(Param):
    """Values to choose among, each equally likely (a list in the dict); their types are kept."""

    choices: tuple[Any, ...]

    def draw(self, rng: Any) -> Any:
        if len(self.choices) == 1:  # no draw: the generator moves on as for a fixed value
            return fresh(self.choices[0])
        return fresh(self.choices[int(rng.integers(len(self.choices)))])

    def distinct(self) -> int | None:
        return len({canonical_json({"v": value}) for value in self.choices})

    def values(self) -> tuple[Any, ...]:
        return self.choices

    def optuna(self) -> Any:
        from optuna.distributions import CategoricalDistribution

        _searchable(self.name, self.choices)
        return CategoricalDistribution(list(self.choices))


@dataclass(frozen=True)
class Drawn(Param):
    """A parameter drawn from a distribution: sweeper's own kinds below, or the user's."""

    dist: Any

    def draw(self, rng: Any) -> Any:
        """Call the distribution's ``rvs`` and normalise the result."""
        if not callable(getattr(self.dist, "rvs", None)):  # an Optuna distribution: nothing to call
            raise unstorable(self.name, self.dist)
        try:
            value = self.dist.rvs(random_state=rng)
        except TypeError as exc:
            raise SweepError(
                f"parameter {self.name!r}: {type_name(self.dist)}.rvs(random_state=...) "
                f"failed ({exc}); use a scipy.stats distribution or "
                "sweeper.uniform/loguniform/randint"
            ) from exc
        return normalise_value(value, self.name)

    def values(self) -> tuple[Any, ...]:
        """None to list: a grid refuses a distribution, as it refuses any value it cannot store."""
        raise unstorable(self.name, self.dist)


@dataclass(frozen=True)
class Custom(Drawn):
    """A distribution of the user's: scipy-style (``rvs(random_state=...)``), or Optuna's (which a
    search takes as it is, and sampling cannot draw from)."""

    def optuna(self) -> Any:
        if _is_optuna(self.dist):
            return self.dist
        raise _cannot_model(self.name, self.dist)


@dataclass(frozen=True)
class Uniform(Drawn):
    """A float on ``[low, high)``, every value as likely (:class:`sweeper.uniform`)."""

    dist: uniform

    def optuna(self) -> Any:
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.dist.low, self.dist.high)


@dataclass(frozen=True)
class LogUniform(Drawn):
    """A float on ``[low, high)``, every decade as likely (:class:`sweeper.loguniform`)."""

    dist: loguniform

    def optuna(self) -> Any:
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.dist.low, self.dist.high, log=True)


@dataclass(frozen=True)
class Integers(Drawn):
    """An int on ``[low, high)``, ``high`` excluded (:class:`sweeper.randint`)."""

    dist: randint

    def distinct(self) -> int | None:
        return self.dist.high - self.dist.low

    def optuna(self) -> Any:
        from optuna.distributions import IntDistribution

        return IntDistribution(self.dist.low, self.dist.high - 1)  # Optuna's high is included


def _searchable(name: str, choices: tuple[Any, ...]) -> None:
    """Refuse choices a search cannot choose among (a list-valued one)."""
    bad = [c for c in choices if not (c is None or isinstance(c, (bool, int, float, str)))]
    if bad:
        raise SweepError(f"space[{name!r}] lists {bad[0]!r}; a search chooses among numbers, strings, "
                         "booleans and None: give those (e.g. [32, 64, 128])")


def _cannot_model(name: str, value: object) -> SweepError:
    return SweepError(
        f"space[{name!r}] is {type_name(value)}, a distribution a search cannot model; use "
        "sweeper.uniform, sweeper.loguniform, sweeper.randint, a list of choices, or an Optuna "
        "distribution")


def _ranged(name: str, value: Any) -> Param | None:
    """The typed kind of one of sweeper's own distributions, else None."""
    if isinstance(value, uniform):
        return Uniform(name, value)
    if isinstance(value, loguniform):
        return LogUniform(name, value)
    if isinstance(value, randint):
        return Integers(name, value)
    return None


def _listed(name: str, value: Any) -> Param:
    """A grid's (and a sample's) value: a list, tuple, range or numpy array lists choices."""
    if isinstance(value, (list, tuple, range)) or is_numpy_array(value):
        items = list(value)
        if not items:
            raise SweepError(f"parameter {name!r} has an empty list of values; give at least one value")
        return Choices(name, tuple(normalise_value(item, name) for item in items))
    return Fixed(name, normalise_value(value, name))


def _sampled(name: str, value: Any) -> Param:
    """A sample's value: a distribution (anything with a callable ``rvs``), else as a grid's."""
    if callable(getattr(value, "rvs", None)):
        return _ranged(name, value) or Custom(name, value)
    return _listed(name, value)


def _searched(name: str, value: Any) -> Param:
    """A search's value: sweeper's or Optuna's distributions, a list or tuple of scalars, a fixed value."""
    if (ranged := _ranged(name, value)) is not None:
        return ranged
    if _is_optuna(value):
        return Custom(name, value)
    if isinstance(value, (list, tuple)):
        choices = tuple(normalise_value(v, name) for v in value)
        if not choices:
            raise SweepError(f"space[{name!r}] is an empty list; give at least one choice")
        _searchable(name, choices)
        return Choices(name, choices)
    if hasattr(value, "rvs"):
        raise _cannot_model(name, value)
    return Fixed(name, normalise_value(value, name))


# -- The space --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    """A space, checked once: its parameters in the order given. Sampling and expansion go by
    sorted name (so the dict's key order changes nothing), a search by the order given."""

    params: tuple[Param, ...]

    @classmethod
    def grid(cls, part: Mapping[Any, Any]) -> Space:
        """One dict of a grid: values and lists of values (``expand``)."""
        return cls._read(part, "grid", GRID_EXAMPLE, _listed)

    @classmethod
    def of(cls, space: Any) -> Space:
        """A space to sample: lists of choices, distributions and fixed values (``sample``)."""
        if not isinstance(space, Mapping):
            raise SweepError(
                "space must be a dict mapping names to lists, distributions or fixed values, "
                f"got {type_name(space)}; {_SPACE_EXAMPLE}"
            )
        return cls._read(space, "space", _SPACE_EXAMPLE, _sampled)

    @classmethod
    def _read(cls, given: Mapping[Any, Any], where: str, example: str,
              read: Callable[[str, Any], Param]) -> Space:
        """Every name checked, then each value read in sorted name order (the first mistake says)."""
        names = sorted(check_name(name, where, example) for name in given)
        params = {name: read(name, given[name]) for name in names}
        return cls(tuple(params[name] for name in given))

    @classmethod
    def searched(cls, space: Any) -> Space:
        """A search's space, name by name in the order given (an Optuna sampler asks in it)."""
        if not isinstance(space, Mapping):
            what = ("a grid (a search reads space = {...}, not grid or samples)"
                    if type(space).__name__ == "Points" else f"a {type(space).__name__}")
            raise SweepError(f"a search needs space = {{name: distribution or list}}, got {what}; {_SEARCH_EXAMPLE}")
        params: list[Param] = []
        for name, value in space.items():
            if not isinstance(name, str) or not name:
                raise SweepError(f"space has the key {name!r}; parameter names are non-empty strings")
            params.append(_searched(name, value))
        return cls(tuple(params))

    def _sorted(self) -> list[Param]:
        return sorted(self.params, key=lambda param: param.name)

    @property
    def size(self) -> int | None:
        """Number of distinct points the space allows, or None if unknown (a continuous parameter)."""
        size = 1
        for param in self.params:
            count = param.distinct()
            if count is None:
                return None
            size *= count
        return size

    def points(self) -> Iterator[dict[str, Any]]:
        """Every combination, in ``ParameterGrid`` order: names sorted, the last varying fastest;
        a distribution has no values to list (SweepError). ``{}`` gives the one point ``{}``."""
        ordered = self._sorted()
        lists = [param.values() for param in ordered]
        return ({p.name: fresh(v) for p, v in zip(ordered, combo)} for combo in itertools.product(*lists))

    def sample(self, n: int, seed: int = 0, *, stacklevel: int = 2) -> list[dict[str, Any]]:
        """Draw ``n`` distinct random points (random search), as :func:`sweeper.model.grid.sample`
        documents; ``stacklevel``: where the warning of fewer points points, as ``warnings.warn``
        counts from this method (2: its caller)."""
        n, seed = check_count(n), check_seed(seed)
        ordered = self._sorted()
        size = self.size
        target = n if size is None else min(n, size)

        import numpy as np

        rng = np.random.default_rng(seed)
        points: list[dict[str, Any]] = []
        seen: set[str] = set()
        draws = 0
        while len(points) < target and draws < 100 * n:
            point = {param.name: param.draw(rng) for param in ordered}
            draws += 1
            key = canonical_json(point)
            if key not in seen:
                seen.add(key)
                points.append(point)
        if len(points) < n:
            _warn_short(len(points), n, draws, size, stacklevel + 1)
        return points

    def optuna(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Optuna's distributions for the searched parameters, and the fixed values, in the order
        given; refuses what a search cannot model, and a space with nothing to search."""
        if not self.params:
            raise SweepError(f"a search's space is empty; give each parameter a distribution or a list, "
                             f"{_SEARCH_EXAMPLE}")
        dists: dict[str, Any] = {}
        fixed: dict[str, Any] = {}
        for param in self.params:
            if isinstance(param, Fixed):
                fixed[param.name] = fresh(param.value)
            else:
                dists[param.name] = param.optuna()
        if not dists:
            raise SweepError("space has nothing to search (every value is fixed); give a distribution or a list")
        return dists, fixed


def _warn_short(found: int, n: int, draws: int, size: int | None, stacklevel: int) -> None:
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
    warnings.warn(message, UserWarning, stacklevel=stacklevel)
