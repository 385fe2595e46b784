"""Population-based training's settings (``pbt={...}``, ``--pbt KEY=VALUE``), checked before
anything runs, each mistake one line; the space it explores, and how a copied member's
parameters are explored (:mod:`sweeper.search.pbt` is the scheduler that uses them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from sweeper.errors import SweepError
from sweeper.model.space import Choices, Custom, Fixed, Integers, LogUniform, Param, Space, Uniform

#: The settings, Ray Tune's names and defaults (``perturbation_interval`` is ``interval``,
#: in epochs; ``quantile_fraction``, ``resample_probability``, ``perturbation_factors``,
#: ``synch``, ``burn_in_period``), and ``population`` (Ray's ``num_samples``).
DEFAULTS: dict[str, Any] = {"population": 8, "interval": 4, "quantile": 0.25, "resample": 0.25,
                            "factors": (1.2, 0.8), "synch": False, "burn_in": 0}
_EXAMPLE = "e.g. pbt={'population': 8, 'interval': 4} (--pbt population=8 --pbt interval=4)"


@dataclass(frozen=True)
class PbtSettings:
    """How the population is trained; checked, each mistake one line (:func:`settings`)."""

    population: int = 8
    interval: int = 4  #: epochs between decisions
    quantile: float = 0.25  #: the bottom (and top) fraction of the population at a decision
    resample: float = 0.25  #: the chance a value is drawn again from the space when explored
    factors: tuple[float, float] = (1.2, 0.8)  #: what a continuous value is multiplied by when explored
    synch: bool = False  #: decisions wait until every live member reached the epoch
    burn_in: int = 0  #: no decision before this epoch


def settings(given: Any) -> PbtSettings:
    """The ``pbt`` option (a dict, or ``KEY=VALUE`` texts from ``--pbt``) as checked settings."""
    if given is None:
        given = {}
    if isinstance(given, (list, tuple)):
        given = _pairs(given)
    if not isinstance(given, Mapping):
        raise SweepError(f"pbt must be a dict of settings, got {type(given).__name__}; {_EXAMPLE}")
    unknown = [k for k in given if k not in DEFAULTS]
    if unknown:
        raise SweepError(f"pbt has no setting {unknown[0]!r}; it takes {', '.join(DEFAULTS)}")
    s = {**DEFAULTS, **given}
    for key in ("population", "interval", "burn_in"):
        value = s[key]
        low = {"population": 2, "interval": 1, "burn_in": 0}[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise SweepError(f"pbt {key} must be a whole number >= {low}, got {value!r}; {_EXAMPLE}")
    for key in ("quantile", "resample"):
        value = s[key]
        top = 0.5 if key == "quantile" else 1.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                (0 < value <= top) if key == "quantile" else (0 <= value <= top)):
            bounds = "in (0, 0.5]" if key == "quantile" else "in [0, 1]"
            raise SweepError(f"pbt {key} must be a number {bounds}, got {value!r}")
    factors = s["factors"]
    if isinstance(factors, (int, float)) and not isinstance(factors, bool):
        factors = (factors,)
    if (not isinstance(factors, (list, tuple)) or not factors or any(
            isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0
            for f in factors)):
        raise SweepError(f"pbt factors must be positive numbers, e.g. (1.2, 0.8), got {factors!r}")
    if not isinstance(s["synch"], bool):
        raise SweepError(f"pbt synch must be True or False, got {s['synch']!r}")
    return PbtSettings(population=s["population"], interval=s["interval"], quantile=float(s["quantile"]),
                       resample=float(s["resample"]), factors=tuple(float(f) for f in factors),  # type: ignore[arg-type]
                       synch=s["synch"], burn_in=s["burn_in"])


def overridden(given: Any, flags: Any) -> Any:
    """The grid file's ``pbt`` settings with the command line's ``--pbt KEY=VALUE`` flags
    over them, each flag changing its own key only (what is no dict of settings, or no flags,
    is returned as :func:`settings` will refuse or read it)."""
    if not isinstance(given, Mapping) or not isinstance(flags, (list, tuple)):
        return flags if flags is not None else given
    return {**given, **_pairs(flags)}


def _pairs(items: Any) -> dict[str, Any]:
    """``--pbt``'s ``KEY=VALUE`` texts as settings."""
    pairs: dict[str, Any] = {}
    for item in items:
        key, eq, value = str(item).partition("=")
        if not eq or not key:
            raise SweepError(f"--pbt takes KEY=VALUE, got {item!r}; {_EXAMPLE}")
        pairs[key.strip()] = _parsed(value.strip())
    return pairs


def _parsed(text: str) -> Any:
    """A ``--pbt`` value: a number, True/False, or a tuple of numbers (``1.2,0.8``)."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False}.get(text.lower(), text)


def check(space: Any, given: Any, options: Any) -> str:
    """Everything population-based training needs, before anything runs: its settings, a
    space it can explore, the metric and its direction (returned, ``max`` or ``min``), a
    backend that lets a member hear a pause, and none of a search's own settings."""
    from sweeper.model.metrics import direction

    settings(given)
    explorable(space)
    if options.backend != "local":
        raise SweepError(f"search='pbt' pauses each member at a report and resumes it later, which only the "
                         f"local backend can do yet (backend={options.backend!r}); run it with backend='local'")
    if options.retries:
        raise SweepError("search='pbt' replaces a member that fails with a copy of a top member; drop retries")
    if options.objectives is not None:
        raise SweepError("search='pbt' ranks its members by one metric; give one metric")
    if options.prune is not None:
        raise SweepError("search='pbt' decides for itself which members go on; drop prune")
    if options.trials is not None:
        raise SweepError(f"search='pbt' trains a population, not a number of trials: give "
                         f"pbt={{'population': {options.trials}}} (--pbt population={options.trials}) "
                         "instead of trials")
    if options.metric is None:
        raise SweepError("search='pbt' needs the metric its members are ranked by: give metric='val_accuracy' "
                         "(--metric val_accuracy)")
    how = options.ranked_mode or direction(options.ranked_by)
    if how is None:
        raise SweepError(f"search='pbt' ranks by {options.ranked_by!r}, whose name does not say whether higher "
                         "is better; give mode='max' or mode='min' (--mode)")
    return str(how)


def describe(space: Any, options: Any) -> str:
    """Population-based training in one line, for a dry run."""
    how = settings(options.pbt)
    names = ", ".join(p.name for p in explorable(space).params if not isinstance(p, Fixed))
    return (f"search: pbt over {names}; population {how.population}, a decision every {how.interval} epochs "
            f"(bottom {how.quantile:g} copies top {how.quantile:g}; resample {how.resample:g}, factors "
            f"{', '.join(f'{f:g}' for f in how.factors)}{', synchronous' if how.synch else ''}"
            f"{f', burn-in {how.burn_in}' if how.burn_in else ''}); {options.ranked_by} ({options.ranked_mode})")


def explorable(space: Any) -> Space:
    """The space, checked: each parameter a list of choices, a sweeper distribution or a value."""
    read = Space.searched(space)  # (no Optuna: population-based training needs none)
    for param in read.params:
        if isinstance(param, Custom):
            raise SweepError(f"parameter {param.name!r}: population-based training explores lists of "
                             "choices and sweeper.uniform, loguniform and randint, not "
                             f"{type(param.dist).__name__}; give one of those")
    if not any(not isinstance(p, Fixed) for p in read.params):
        raise SweepError("space has nothing to explore (every value is fixed); give a distribution or a list, "
                         "e.g. space = {'lr': sweeper.loguniform(1e-4, 1e-1)}")
    return read


def explore(params: Mapping[str, Any], space: Space, rng: Any, how: PbtSettings) -> dict[str, Any]:
    """A copied member's new parameters: each searched value drawn again from the space with
    ``resample``'s chance, else a continuous one multiplied by one of ``factors`` (kept within
    its bounds), an integer the same and rounded, a choice moved to a neighbour in its list."""
    out = dict(params)
    for param in space.params:
        if isinstance(param, Fixed):
            continue
        if rng.random() < how.resample or param.name not in params:
            out[param.name] = param.draw(rng)
        else:
            out[param.name] = _perturbed(param, params[param.name], rng, how.factors)
    return out


def _perturbed(param: Param, value: Any, rng: Any, factors: tuple[float, ...]) -> Any:
    factor = factors[int(rng.integers(len(factors)))]
    if isinstance(param, (Uniform, LogUniform)):
        low, high = param.dist.low, param.dist.high
        return float(min(max(float(value) * factor, low), math.nextafter(high, low)))
    if isinstance(param, Integers):
        low, high = param.dist.low, param.dist.high - 1
        moved = int(round(int(value) * factor))
        if moved == value:  # a small integer a factor cannot move: one step that way
            moved = value + (1 if factor > 1 else -1)
        return int(min(max(moved, low), high))
    if isinstance(param, Choices):
        choices = list(param.choices)
        try:
            at = choices.index(value)
        except ValueError:
            return param.draw(rng)
        step = 1 if rng.random() < 0.5 else -1
        if not 0 <= at + step < len(choices):
            step = -step
        return choices[min(max(at + step, 0), len(choices) - 1)]
    return param.draw(rng)
