"""Which parameters mattered: Optuna's fANOVA over a sweep's ``ok`` trials, grid or search
alike, computed in the parent from the results table (the ledger's rows).

Each parameter that varies among the ok trials becomes an Optuna distribution as its
values show it (whole numbers: an integer range; other numbers: a float range, on a log
scale where all are positive and span two decades or more; anything else: a choice
among the values seen), each trial an Optuna trial with the metric as its value, and
Optuna's :class:`~optuna.importance.FanovaImportanceEvaluator` (a seeded random forest:
the same table gives the same shares) tells what share of the metric's variance each
parameter explains, alone. Shown by ``python -m sweeper status --importance`` and in the
report; :func:`importance` for code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import SweepError

if TYPE_CHECKING:
    import pandas

#: Fewer ok trials than this tell nothing about importance (a forest over four points).
MIN_TRIALS = 5
#: How the shares are computed, in the lines that show them.
METHOD = "fANOVA"


@dataclass(frozen=True)
class Importance:
    """Each varying parameter's share of the metric's variance, largest first (sums to 1)."""

    metric: str
    mode: str
    trials: int  #: the ok trials with the metric that it was computed from
    shares: tuple[tuple[str, float], ...]  #: (parameter, share), the ``param_`` prefix dropped
    left_out: tuple[str, ...] = ()  #: parameters some of those trials lack: not compared

    def lines(self) -> list[str]:
        head = (f"which parameters mattered for {self.metric} ({METHOD} over {self.trials} ok trials; "
                "each one's share of the metric's variance):")
        width = max(len(name) for name, _ in self.shares)
        out = [head] + [f"  {name:<{width}}  {share:6.1%}  {'#' * round(share * 40)}" for name, share in self.shares]
        if self.left_out:
            out.append(f"  not compared (some trials lack them): {', '.join(self.left_out)}")
        return out


def importance(df: "pandas.DataFrame", metric: str, mode: str) -> Importance:
    """The importance of each parameter for ``metric`` over the ``ok`` rows of ``df`` (a
    results table); a :class:`SweepError` says in one line why it cannot be told."""
    from .analysis import finished_ok, param_columns
    from .search import _optuna

    if metric not in df.columns:
        raise SweepError(f"no trial has {metric!r}: importance needs the metric; give --metric")
    ok = df[finished_ok(df)]
    values = [_number(v) for v in ok[metric]]
    ok = ok[[v is not None for v in values]]
    if len(ok) < MIN_TRIALS:
        raise SweepError(f"which parameters mattered needs at least {MIN_TRIALS} ok trials with {metric}; "
                         f"there {'is' if len(ok) == 1 else 'are'} {len(ok)}")
    varying = [c for c in param_columns(ok) if len({repr(_plain(v)) for v in ok[c]}) > 1]
    complete = [c for c in varying if ok[c].notna().all()]
    if not complete:
        raise SweepError(f"no parameter varies among the {len(ok)} ok trials"
                         + (" that all of them have" if varying else "") + ": nothing to compare")
    from importlib.util import find_spec

    if find_spec("optuna") is None or find_spec("sklearn") is None:  # fANOVA is Optuna's; its forest sklearn's
        raise SweepError("which parameters mattered needs Optuna and scikit-learn: pip install \"sweeper[search]\" "
                         "(or pip install optuna scikit-learn)")
    optuna = _optuna()
    dists = {c: _distribution(optuna, [_plain(v) for v in ok[c]]) for c in complete}
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
    study.add_trials([
        optuna.trial.create_trial(
            params={c[len("param_"):]: _as(optuna, dists[c], _plain(row[c])) for c in complete},
            distributions={c[len("param_"):]: d for c, d in dists.items()},
            value=_number(row[metric]))
        for _, row in ok.iterrows()
    ])
    shares = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0), normalize=True)
    ordered = sorted(((str(k), float(v)) for k, v in shares.items()), key=lambda kv: (-kv[1], kv[0]))
    return Importance(metric, mode, len(ok), tuple(ordered),
                      tuple(c[len("param_"):] for c in varying if c not in complete))


def _number(value: Any) -> float | None:
    """A finite metric value as a float, else None (text, NaN, infinity, a bool)."""
    if isinstance(value, (bool, str, bytes)) or value is None:  # a number stored as text is no number
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _plain(value: Any) -> Any:
    """A table cell as Optuna takes a parameter: numpy scalars as Python's, NaN as None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _distribution(optuna: Any, values: list[Any]) -> Any:
    """The distribution the values show: a range of numbers, or a choice among them (each
    by its ``repr``, so that 1, 1.0, True and "1" stay four choices)."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values):
        low, high = min(numbers), max(numbers)
        if all(isinstance(v, int) for v in numbers):
            return optuna.distributions.IntDistribution(int(low), int(high))
        log = low > 0 and high / low >= 100
        return optuna.distributions.FloatDistribution(float(low), float(high), log=log)
    return optuna.distributions.CategoricalDistribution(sorted({repr(v) for v in values}))


def _as(optuna: Any, dist: Any, value: Any) -> Any:
    """A value as its distribution holds it."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return repr(value)
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return float(value)
    return int(value)
