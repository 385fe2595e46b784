"""Population-based training's settings (``pbt={...}``, ``--pbt KEY=VALUE``), checked before
anything runs, each mistake one line; the space it explores, and how a copied member's
parameters are explored (:mod:`sweeper.search.pbt` is the scheduler that uses them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from sweeper.errors import SweepError
from sweeper.model.pbt import DEFAULTS, PbtSettings, overridden, settings  # noqa: F401 (the record, the model's)
from sweeper.model.space import Choices, Custom, Fixed, Integers, LogUniform, Param, Space, Uniform

if TYPE_CHECKING:
    from sweeper.model.settings import Scoring


def check(space: Any, options: Any, pauses: bool) -> str:
    """Everything population-based training needs, before anything runs, besides its settings
    (read with the options, :mod:`sweeper.model.settings`): a space it can explore, the metric and its direction (returned, ``max`` or ``min``), a
    backend that lets a member hear a pause (``pauses``: its registry entry says so), and none of a search's own settings."""
    from sweeper.model.metrics import direction

    explorable(space)
    if not pauses:
        raise SweepError(f"search='pbt' pauses each member at a report and resumes it later, which the "
                         f"{options.backend} backend cannot do (its trials do not hear a pause); run it with "
                         "backend='local' or backend='slurm'")
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
    way = options.ranked_mode or direction(options.ranked_by)
    if way is None:
        raise SweepError(f"search='pbt' ranks by {options.ranked_by!r}, whose name does not say whether higher "
                         "is better; give mode='max' or mode='min' (--mode)")
    return str(way)


def describe(space: Any, how: PbtSettings, scoring: Scoring) -> str:
    """Population-based training in one line, for a dry run."""
    names = ", ".join(p.name for p in explorable(space).params if not isinstance(p, Fixed))
    return (f"search: pbt over {names}; population {how.population}, a decision every {how.interval} epochs "
            f"(bottom {how.quantile:g} copies top {how.quantile:g}; resample {how.resample:g}, factors "
            f"{', '.join(f'{f:g}' for f in how.factors)}{', synchronous' if how.synch else ''}"
            f"{f', burn-in {how.burn_in}' if how.burn_in else ''}); {scoring.metric} ({scoring.mode})")


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
