"""A sweep's trials in Optuna's terms: the study's objectives, each parameter's distribution,
and a trial's parameters, state, values, intermediate values and user attributes. The one
place both the live study (:mod:`sweeper.tracking.optuna_study`) and ``export --optuna`` (the
same tracker, run once over a finished sweep) take them from, so the two cannot disagree.

* **Objectives**: several metrics where the sweep has them, each with its mode; else the
  metric it ranks by (a sweep that names none: the one its rows' names pick, as ``status``
  ranks), with its mode (given, recorded, or the name's known direction). An Optuna study
  needs a direction and sweeper never guesses one: a metric whose name does not say it and
  that no mode was given for is one line naming ``--mode``.
* **Distributions**: a search's (or population-based training's) parameter keeps its own
  Optuna distribution; a grid's, read from its values by the rule of
  :func:`sweeper.results.studies.distribution` (whole numbers an integer range, other numbers a
  float range, on a log scale where they span two decades, anything else a choice among the
  values); a value on record outside a search's range (a resumed sweep whose space changed)
  widens it. A parameter with one value in every trial is the study's ``fixed`` attribute.
* **State**: ``ok`` is ``COMPLETE`` with its metric as the value (``FAIL`` without a finite
  one), ``pruned`` ``PRUNED`` (valued as Optuna's own ``tell`` values one: its last
  intermediate value), the rest ``FAIL``; intermediate values are the metric per epoch (one
  objective only: Optuna keeps none for several).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import default_metric, direction
from sweeper.model.metrics import finite as number
from sweeper.model.trial import TrialResult
from sweeper.results.studies import METRIC_ATTR, distribution, plain
from sweeper.tracking import Attempt, Domain, SweepInfo


@dataclass(frozen=True)
class Targets:
    """What the study optimises: its metrics, each with ``max`` or ``min``."""

    metrics: tuple[str, ...]
    modes: tuple[str, ...]

    @property
    def directions(self) -> list[str]:
        return ["maximize" if m == "max" else "minimize" for m in self.modes]

    @property
    def single(self) -> bool:
        return len(self.metrics) == 1


def targets(info: SweepInfo, names: Iterable[str]) -> Targets | None:
    """The study's objectives (see the module's docstring); ``names``: the metrics of the rows
    on record, in grid order. None while no metric is known yet (a sweep that names none,
    before a row has one)."""
    if info.objectives:
        return Targets(tuple(m for m, _ in info.objectives), tuple(d for _, d in info.objectives))
    metric = info.metric or (default_metric(list(dict.fromkeys(names))) or ("", ""))[0]
    if not metric:
        return None
    mode = info.mode or direction(metric) or ""
    if not mode:
        raise SweepError(f"the sweep's metric {metric!r} does not say whether higher is better, and an Optuna "
                         "study needs a direction: give --mode max or --mode min")
    return Targets((metric,), (mode,))


@dataclass(frozen=True)
class Params:
    """The study's parameters: each searched one's distribution and how a value is written
    as its parameter (as it is, or for a choice among values Optuna cannot tell apart, its
    ``repr``); and the fixed ones, with their one value."""

    dists: Mapping[str, tuple[Any, Callable[[Any], Any]]]
    fixed: Mapping[str, Any]

    def of(self, point: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A trial's parameters as Optuna takes them, and their distributions; a value its
        distribution does not hold is a ValueError naming it."""
        params = {str(k): self.dists[str(k)][1](plain(v)) for k, v in point.items() if str(k) in self.dists}
        dists = {k: self.dists[k][0] for k in params}
        for k, v in params.items():
            if not holds(dists[k], v):
                raise ValueError(f"the value {v!r} of parameter {k!r} is not in its distribution {dists[k]}")
        return params, dists


def params_of(optuna: Any, domains: Mapping[str, Domain], points: Sequence[Mapping[str, Any]]) -> Params:
    """The study's parameters from the sweep's domains and the parameters of the trials on
    record (``points``: a resume's rows, an export's), whose values may lie outside them."""
    from optuna.distributions import json_to_distribution

    values: dict[str, list[Any]] = {k: [plain(v) for v in d.values] for k, d in domains.items() if not d.optuna}
    own = {k: json_to_distribution(d.optuna) for k, d in domains.items() if d.optuna}
    partial = {k for k, d in domains.items() if d.partial}
    for point in points:
        partial.update(k for k in [*values, *own] if k not in point)
        for k, v in point.items():
            values.setdefault(str(k), []).append(plain(v))
    dists: dict[str, tuple[Any, Callable[[Any], Any]]] = {}
    fixed: dict[str, Any] = {}
    for k, dist in own.items():
        dists[k] = _widened(optuna, dist, values.pop(k, []))
    for k, vs in values.items():
        if k not in partial and len({repr(v) for v in vs}) == 1:
            fixed[k] = vs[0]  # one value in every trial (a grid's setting, a search's fixed value)
        elif vs:
            dists[k] = distribution(optuna, vs)
    return Params(dists, fixed)


def _widened(optuna: Any, dist: Any, values: list[Any]) -> tuple[Any, Callable[[Any], Any]]:
    """A search's own distribution, widened to hold every value on record (a range's bounds),
    or where a choice lacks one, a choice read from its choices and the values."""
    outside = [v for v in values if not holds(dist, v)]
    if not outside:
        return dist, _same
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return distribution(optuna, [*dist.choices, *values])
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in outside):
        low, high = min(dist.low, *outside), max(dist.high, *outside)
        if dist.log and low <= 0:
            return distribution(optuna, values)
        if isinstance(dist, optuna.distributions.IntDistribution):
            return optuna.distributions.IntDistribution(int(low), int(high), log=dist.log), int
        return optuna.distributions.FloatDistribution(float(low), float(high), log=dist.log), float
    return distribution(optuna, values)


def _same(value: Any) -> Any:
    return value


def holds(dist: Any, value: Any) -> bool:
    """Whether a distribution holds a parameter's value (a choice among its choices, a number
    within its bounds)."""
    if hasattr(dist, "choices"):
        return any(type(c) is type(value) and c == value for c in dist.choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return dist.low <= value <= dist.high


def started_attrs(attempt: Attempt, replaces: int | None) -> dict[str, Any]:
    """A trial's user attributes as it starts: its name, id, status, device, seed, attempt and
    log; ``sweeper_key`` names the attempt (a resume finds it again); ``replaces``: the
    Optuna trial of its earlier attempt (Optuna cannot delete one)."""
    attrs: dict[str, Any] = {"trial": attempt.name, "trial_id": attempt.trial_id, "status": "running",
                             "device": attempt.device, "seed": attempt.seed, "attempt": attempt.attempt,
                             "sweeper_key": attempt.key}
    if attempt.log:
        attrs["log"] = attempt.log
    if replaces is not None:
        attrs["replaces"] = replaces
    return attrs


def finished_attrs(result: TrialResult, final: str, epoch: int | None) -> dict[str, Any]:
    """What its end adds: status, device, attempt, duration, error (its first line), the
    metrics (``metric:<name>``, finite ones), its log; ``sweeper_final`` and ``sweeper_epoch``
    say what the study was told (a resume compares them with the ledger)."""
    attrs: dict[str, Any] = {"status": result.status.value, "device": result.device, "attempt": result.attempts,
                             "sweeper_final": final}
    if result.duration_s is not None:
        attrs["duration_s"] = result.duration_s
    if result.error:
        attrs["error"] = result.error.splitlines()[0][:500]
    if result.log:
        attrs["log"] = result.log
    if epoch is not None:
        attrs["sweeper_epoch"] = epoch
    attrs.update({f"{METRIC_ATTR}{k}": v for k, v in result.metrics.items() if number(v) is not None})
    return attrs


def intermediate(epochs: Iterable[tuple[int, Mapping[str, Any]]], goal: Targets) -> dict[int, float]:
    """The metric at each epoch (one objective only; finite values)."""
    if not goal.single:
        return {}
    return {int(e): v for e, m in epochs if (v := number(m.get(goal.metrics[0]))) is not None}


def outcome(result: TrialResult, goal: Targets, steps: Mapping[int, float]) -> tuple[str, list[float] | None]:
    """The name of its ``TrialState`` and its values: a pruned one valued by its last
    intermediate value, as Optuna's ``tell`` values one."""
    state = result.status.optuna
    values = [number(result.metrics.get(t)) for t in goal.metrics]
    if state == "COMPLETE":
        if None in values:
            return "FAIL", None  # ok, but without a number to optimise
        return state, [float(v) for v in values if v is not None]
    if state == "PRUNED" and steps and goal.single:
        return state, [steps[max(steps)]]
    return state, None


def constraints(result: TrialResult) -> dict[str, float]:
    """The sweep's verdict on its constraints, as Optuna reads one (<= 0: met); {} without."""
    return {} if result.feasible is None else {"feasible": 0.0 if result.feasible else 1.0}


def local_time(stamp: str) -> datetime | None:
    """An engine time stamp (ISO 8601, UTC) as Optuna keeps times: naive, local."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone().replace(tzinfo=None)
    except ValueError:
        return None


def finished(optuna: Any, params: Params, goal: Targets, attempt: Attempt, result: TrialResult,
             point: Mapping[str, Any], epochs: Sequence[tuple[int, Mapping[str, Any]]], final: str,
             extra: Mapping[str, Any]) -> Any:
    """A trial seen only once it ended, whole (``Study.add_trial``), with when it ran."""
    from sweeper.search.sampling import trial_constraints

    steps = intermediate(epochs, goal)
    state, values = outcome(result, goal, steps)
    epoch = max((e for e, _ in epochs), default=None)
    attrs = {**started_attrs(attempt, extra.get("replaces")), **finished_attrs(result, final, epoch),
             **{k: v for k, v in extra.items() if k != "replaces"}}
    met = constraints(result)
    told: dict[str, Any] = {}
    if met:
        told = {"constraints": met} if trial_constraints(optuna) else {"system_attrs": {"constraints": [*met.values()]}}
    values_, dists = params.of(point)
    trial = optuna.trial.create_trial(params=values_, distributions=dists, values=values,
                                      state=optuna.trial.TrialState[state], intermediate_values=steps,
                                      user_attrs=json.loads(json.dumps(attrs, default=str)), **told)
    start = local_time(result.started_at) if result.started_at else None
    if start is not None:  # when it ran, not when it was written (Optuna's timeline)
        trial.datetime_start = start
        trial.datetime_complete = start + timedelta(seconds=result.duration_s or 0.0)
    return trial
