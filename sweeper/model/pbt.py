"""Population-based training's settings (``pbt={...}``, ``--pbt KEY=VALUE``) as a record, read
once, each mistake one line (:mod:`sweeper.search.pbt_settings` checks the rest of a population
against the space, :mod:`sweeper.search.pbt` is the scheduler that uses them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from sweeper.errors import SweepError

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
