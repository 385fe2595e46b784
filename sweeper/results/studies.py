"""A sweep's rows as an Optuna study: each parameter's distribution as its values show it,
each row an Optuna trial with its state, value and per-epoch intermediate values. Used by
:mod:`sweeper.results.importance` (an in-memory study of the ok rows), and by the Optuna
study a sweep keeps or ``python -m sweeper export <folder> --optuna [URL]`` writes
(:mod:`sweeper.tracking.optuna_terms`: a grid's parameters are read by the same rule).

A distribution from values: whole numbers make an integer range; other numbers a float
range, on a log scale where all are positive and span two decades or more; anything else
(texts, bools, None, values of several kinds) a choice among the values themselves, so a
bool is read back a bool, None None and "None" a text. Where two of them are one to Optuna
(which finds a choice by ``==``: 1, 1.0 and True), a choice among their ``repr`` instead.
A search's own space is not in the ledger; the values are.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import TYPE_CHECKING, Any, Callable, Iterable

from sweeper.errors import SweepError
from sweeper.model.metrics import finite as number

if TYPE_CHECKING:
    import pandas

#: Prefixes Optuna's trials carry the row's other columns under, as user attributes.
METRIC_ATTR = "metric:"


def plain(value: Any) -> Any:
    """A table cell as Optuna takes a parameter: numpy scalars as Python's, NaN and pandas'
    missing value as None, anything else not a number, text or bool by its ``repr``."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if (isinstance(value, float) and math.isnan(value)) or type(value).__name__ == "NAType":
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def distribution(optuna: Any, values: Iterable[Any]) -> tuple[Any, Callable[[Any], Any]]:
    """The distribution the (plain) values show (see the module docstring), and how a
    value is written as its parameter: as it is, or for a choice among values Optuna
    cannot tell apart, each one's ``repr``."""
    values = list(values)
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    # whole numbers beyond 2**53 (seeds, hashes) do not survive Optuna's floats: a choice
    if numbers and len(numbers) == len(values) and all(abs(v) < 2**53 for v in numbers):
        low, high = min(numbers), max(numbers)
        if all(isinstance(v, int) for v in numbers):
            return optuna.distributions.IntDistribution(int(low), int(high)), int
        log = low > 0 and spans_decades(numbers)
        return optuna.distributions.FloatDistribution(float(low), float(high), log=log), float
    distinct = sorted({(type(v).__name__, repr(v)): v for v in values}.values(), key=_choice_order)
    if len(set(distinct)) == len(distinct):  # no two equal to Optuna (1 == 1.0 == True)
        return optuna.distributions.CategoricalDistribution(distinct), _same
    return optuna.distributions.CategoricalDistribution(sorted({repr(v) for v in values})), repr


def spans_decades(values: Iterable[Any]) -> bool:
    """Whether numbers read best on a log scale: their positive finite values span two decades
    or more. The one rule for a study's float ranges (above) and the report's axes."""
    x = [float(v) for v in values if isinstance(v, Real) and not isinstance(v, bool)]
    x = [v for v in x if math.isfinite(v) and v > 0]
    return len(x) >= 2 and max(x) / min(x) >= 100


def _same(value: Any) -> Any:
    return value


def _choice_order(value: Any) -> tuple[int, Any]:
    """None first, then bools, numbers and texts, each kind in its own order."""
    kind = _KINDS.get(type(value), len(_KINDS))
    return (kind, value) if 0 < kind < len(_KINDS) else (kind, repr(value))


#: The order of a choice's kinds (a plain value is one of these).
_KINDS: dict[type, int] = {type(None): 0, bool: 1, int: 2, float: 2, str: 3}


def need_optuna(what: str, sklearn: bool = False) -> Any:
    """Optuna (and scikit-learn, for fANOVA), or one line saying how to install them."""
    from importlib.util import find_spec

    if find_spec("optuna") is None or (sklearn and find_spec("sklearn") is None):
        both = "Optuna and scikit-learn" if sklearn else "Optuna"
        raise SweepError(f"{what} needs {both}: pip install \"sweeper[search]\" (or pip install "
                         f"optuna{' scikit-learn' if sklearn else ''})")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def frame_study(optuna: Any, rows: "pandas.DataFrame", params: list[str], metric: str, mode: str | None) -> Any:
    """An in-memory study of table rows (``param_*`` columns ``params``, all present), each
    a COMPLETE trial valued by ``metric`` (:mod:`sweeper.results.importance`; its shares of
    variance are the same either way, so a metric of unknown direction, ``mode=None``, has them too)."""
    dists = {c: distribution(optuna, [plain(v) for v in rows[c]]) for c in params}
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
    study.add_trials([
        optuna.trial.create_trial(
            params={c[len("param_"):]: dists[c][1](plain(row[c])) for c in params},
            distributions={c[len("param_"):]: d for c, (d, _) in dists.items()},
            value=number(row[metric]))
        for _, row in rows.iterrows()
    ])
    return study
