"""Constraints on a trial's results (``constraints=``, ``--constraints``): what a trial must
meet to be ranked, and what a search's sampler is told.

Given as a mapping from a metric (or parameter) to a bound, ``{"params": ("<=", 1e6),
"val_accuracy": (">=", 0.9)}``; on the command line and in a grid file's options as text,
``"params<=1e6, val_accuracy>=0.9"``; or as a function of a trial's row (its parameters and
metrics, one dict) returning the values that must each be <= 0, Optuna's convention. Each
bound becomes such a value (``x <= b``: ``x - b``; ``x >= b``: ``b - x``), so the sampler
learns how far a point is from feasible, not only whether it is.

A name that is both a parameter and a metric of a trial means the metric; ``param_NAME``
(its results.csv column) always means the parameter. Where a trial has both, sweeper says
so once per sweep (:meth:`Constraints.values`).

Judged in the parent once a trial ends ok (:meth:`Constraints.feasible`): its row's
``feasible`` column. A value the row lacks, or that is no finite number, makes it
infeasible: what cannot be checked is not met. Rows a re-run keeps are judged again
under the run's constraints, which may have changed. An infeasible trial is never ranked
(:attr:`sweeper.model.trial.TrialResult.ranked`).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from sweeper.errors import SweepError
from sweeper.model.metrics import finite as _finite
from sweeper.model.trial import Status, TrialResult

#: The comparisons a bound may use.
OPS = ("<=", ">=")
_TEXT = re.compile(r"^\s*([A-Za-z_][\w.\-/]*)\s*(<=|>=)\s*(\S+)\s*$")
_EXAMPLE = "e.g. constraints={'params': ('<=', 1e6)} or --constraints 'params<=1e6,val_accuracy>=0.9'"


@dataclass(frozen=True)
class Constraints:
    """Bounds on named values, or a function of the row (see the module docstring)."""

    bounds: tuple[tuple[str, str, float], ...] = ()
    fn: Callable[[dict[str, Any]], Any] | None = None
    #: names already said to be both a parameter and a metric (said once)
    said: set[str] = field(default_factory=set, compare=False, repr=False)

    def describe(self) -> str:
        if self.fn is not None:
            return f"constraints: {getattr(self.fn, '__name__', 'a function')}(row) <= 0"
        return "constraints: " + ", ".join(f"{name} {op} {bound:g}" for name, op, bound in self.bounds)

    def values(self, params: Mapping[str, Any], metrics: Mapping[str, Any],
               say: bool = True) -> tuple[float, ...] | None:
        """Each constraint's value (<= 0: met), or None where one cannot be computed. A name
        that is both a parameter and a metric is the metric; ``param_NAME`` the parameter."""
        row = {**params, **metrics, **{f"param_{k}": v for k, v in params.items()}}
        if say:  # the judge says it; a search's sampler, told the same values, does not again
            self._say_both(params, metrics)
        if self.fn is not None:
            try:
                got = self.fn(dict(row))
            except Exception:  # noqa: BLE001 - the user's function failed on this row: not met
                return None
            items = list(got) if isinstance(got, (list, tuple)) else [got]
            out = [_finite(v) for v in items]
            return None if not out or any(v is None for v in out) else tuple(v for v in out if v is not None)
        out_b: list[float] = []
        for name, op, bound in self.bounds:
            value = _finite(row.get(name))
            if value is None:
                return None
            out_b.append(value - bound if op == "<=" else bound - value)
        return tuple(out_b)

    def _say_both(self, params: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
        """One line, once per name, where a bound name (any name, for a function) is both."""
        bound = {name for name, _, _ in self.bounds} if self.fn is None else set(params)
        for name in sorted(bound & set(params) & set(metrics) - self.said):
            self.said.add(name)
            logging.getLogger("sweeper").warning(
                "sweeper: %r is both a parameter and a metric of a trial: a constraint on %s bounds the "
                "metric; name param_%s to bound the parameter", name, name, name)

    def named(self, params: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, float]:
        """The values by name, as Optuna's trials carry them (``"score <= 25"``, or ``c0``,
        ``c1``... for a function's); 1.0 each (not met) where they cannot be computed."""
        names = ([f"{name} {op} {bound:g}" for name, op, bound in self.bounds] if self.fn is None else None)
        values = self.values(params, metrics, say=False)
        if values is None:
            return {n: 1.0 for n in (names or ["c0"])}
        return dict(zip(names or [f"c{i}" for i in range(len(values))], values))

    def feasible(self, result: TrialResult) -> bool | None:
        """Whether an ok trial meets every constraint; None for a trial that is not ok."""
        if result.status is not Status.OK:
            return None
        values = self.values(result.params, result.metrics)
        return values is not None and all(v <= 0 for v in values)


def parse(value: Any) -> Constraints | None:
    """The constraints an option gives, or None; one line naming the fix when malformed."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, Constraints):
        return value
    if callable(value):
        return Constraints(fn=value)
    if isinstance(value, str):
        items: list[tuple[str, str, float]] = []
        for part in value.split(","):
            m = _TEXT.match(part)
            number = _number(m.group(3)) if m else None
            if m is None or number is None:
                raise SweepError(f"constraint {part.strip()!r} is not NAME<=NUMBER or NAME>=NUMBER; {_EXAMPLE}")
            items.append((m.group(1), m.group(2), number))
        return Constraints(tuple(items))
    if isinstance(value, Mapping):
        bounds: list[tuple[str, str, float]] = []
        for name, spec in value.items():
            ok = isinstance(spec, (list, tuple)) and len(spec) == 2 and spec[0] in OPS
            bound = _finite(spec[1]) if ok else None
            if not isinstance(name, str) or bound is None:
                raise SweepError(f"constraints[{name!r}] is {spec!r}; give (op, number) with op one of "
                                 f"{', '.join(OPS)}; {_EXAMPLE}")
            bounds.append((name, spec[0], bound))
        return Constraints(tuple(bounds))
    raise SweepError(f"constraints is {value!r}; give a mapping, a text or a function of the row; {_EXAMPLE}")


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
