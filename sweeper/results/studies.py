"""A sweep's rows as an Optuna study: each parameter's distribution as its values show it,
each row an Optuna trial with its state, value and per-epoch intermediate values. Used by
:mod:`sweeper.results.importance` (an in-memory study of the ok rows) and by ``python -m sweeper
export <folder> --optuna URL`` (every row, into an Optuna storage: :func:`export`).

A distribution from values: whole numbers make an integer range; other numbers a float
range, on a log scale where all are positive and span two decades or more; anything else
(texts, bools, None, values of several kinds) a choice among the values themselves, so a
bool is read back a bool, None None and "None" a text. Where two of them are one to Optuna
(which finds a choice by ``==``: 1, 1.0 and True), a choice among their ``repr`` instead.
A search's own space is not in the ledger; the values are.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import default_metric
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


def export(folder: str, url: str, mode: str | None = None) -> tuple[str, int]:
    """Write the sweep in ``folder`` (every row of its ledger: ok, pruned, failed, with its
    per-epoch values) into the Optuna storage ``url`` as a study named after the folder,
    replacing one an earlier export wrote; returns the study's name and its trial count.
    Parameters with one value in every row are the study's ``fixed`` user attribute, not
    trial parameters (as a search's fixed values are). ``mode``: the study's direction where
    the sweep recorded none and its metric's name does not say it (else a one-line error)."""
    import os

    from sweeper.run.search import direction

    optuna = need_optuna("export --optuna")
    results, history, metric, recorded, several = _recorded(folder)
    mode = mode or recorded
    if not results:
        raise SweepError(f"{folder} has no finished trial yet: nothing to export")
    if not metric:  # a grid sweep that named none: what its summary ranked by
        metric = (default_metric(dict.fromkeys(k for r in results for k in r.metrics)) or ("", ""))[0]
    if not metric:
        raise SweepError(f"the trials in {folder} have no metric: an Optuna study needs one")
    mode = mode or direction(metric) or ""
    if not mode and several is None:
        raise SweepError(f"the sweep's metric {metric!r} does not say whether higher is better, and the study "
                         "needs a direction: give --mode max or --mode min")
    targets, modes = (several.metrics, several.modes) if several is not None else ((metric,), (mode,))
    names = sorted({k for r in results for k in r.params})
    # a parameter with one value in every row is fixed (as a search's fixed values): not searched
    fixed = {k: plain(results[0].params[k]) for k in names
             if all(k in r.params for r in results) and len({repr(plain(r.params[k])) for r in results}) == 1}
    dists = {k: distribution(optuna, [plain(r.params[k]) for r in results if k in r.params])
             for k in names if k not in fixed}  # name -> (distribution, how a value is written)
    name = os.path.basename(os.path.normpath(os.path.abspath(folder)))
    try:  # every trial first: nothing is written or deleted unless all of them can be
        trials = [_trial(optuna, r, dists, targets, history.get(r.trial_id, [])) for r in results]
    except (TypeError, ValueError) as exc:
        raise SweepError(f"the sweep in {folder} cannot be written as an Optuna study: "
                         f"{str(exc).splitlines()[0]}") from None
    here = os.path.abspath(folder)
    study = _new_study(optuna, url, name, here, modes)
    with warnings.catch_warnings():  # experimental in Optuna: said here, not to the user
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(list(targets))
    study.set_user_attr("sweeper_folder", here)
    study.set_user_attr("metric", metric)
    study.set_user_attr("fixed", fixed)
    study.add_trials(trials)
    return name, len(results)


def _recorded(folder: str) -> tuple[list[Any], dict[str, list[tuple[int, dict[str, Any]]]], str, str, Any]:
    """What an export takes from a sweep's ledger: its rows in grid order, each trial's
    per-epoch values, the metric and mode it recorded ("" where none), its objectives."""
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        current = ledger.current()
        results = sorted((ledger.results() if current is None else current).values(), key=lambda r: r.index)
        history: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for tid, epoch, metrics in ledger.history():
            history.setdefault(tid, []).append((epoch, metrics))
        facts = ledger.facts()
        return results, history, facts.metric, facts.mode, ledger.objectives()
    finally:
        ledger.close()


def _new_study(optuna: Any, url: str, name: str, here: str, modes: Sequence[str]) -> Any:
    """An empty study ``name`` in the storage ``url``, replacing an earlier export of the
    folder ``here`` (never doubled), never another study of that name."""
    try:
        storage = optuna.storages.get_storage(url)
    except Exception as exc:  # noqa: BLE001 - a bad URL, a driver missing: Optuna's words, one line
        raise SweepError(f"--optuna {url}: Optuna cannot open that storage ({str(exc).splitlines()[0]}); "
                         "give a database URL such as sqlite:///study.db") from None
    summaries = {s.study_name: s for s in optuna.get_all_study_summaries(storage)}
    if name in summaries:
        if summaries[name].user_attrs.get("sweeper_folder") != here:
            raise SweepError(f"{url} already has a study named {name!r} that is not an export of {here}; "
                             "give another storage (or rename the sweep folder)")
        optuna.delete_study(study_name=name, storage=storage)
    return optuna.create_study(storage=storage, study_name=name,
                               directions=["maximize" if m == "max" else "minimize" for m in modes])


def _trial(optuna: Any, result: Any, dists: Mapping[str, tuple[Any, Callable[[Any], Any]]],
           targets: tuple[str, ...], epochs: list[tuple[int, dict[str, Any]]]) -> Any:
    state = result.status.optuna
    values = [number(result.metrics.get(t)) for t in targets]
    if state == "COMPLETE" and None in values:
        state = "FAIL"  # ok, but without a number to optimise
    # Optuna keeps intermediate values for one objective only
    intermediate = {e: v for e, m in epochs if len(targets) == 1 and (v := number(m.get(targets[0]))) is not None}
    attrs: dict[str, Any] = {"trial": result.name, "trial_id": result.trial_id, "status": result.status.value,
                             "device": result.device, "seed": result.seed}
    if result.duration_s is not None:
        attrs["duration_s"] = result.duration_s
    if result.error:
        attrs["error"] = result.error.splitlines()[0][:500]
    attrs.update({f"{METRIC_ATTR}{k}": v for k, v in result.metrics.items() if number(v) is not None})
    from sweeper.run.search import trial_constraints

    told: dict[str, Any] = {}
    if result.feasible is not None:  # the sweep's verdict on its constraints, as Optuna reads one (<= 0: met)
        met = {"feasible": 0.0 if result.feasible else 1.0}
        told = ({"constraints": met} if trial_constraints(optuna)
                else {"system_attrs": {"constraints": list(met.values())}})
    trial = optuna.trial.create_trial(
        params={k: dists[k][1](plain(v)) for k, v in result.params.items() if k in dists},
        distributions={k: dists[k][0] for k in result.params if k in dists},
        values=values if state == "COMPLETE" else None,
        state=optuna.trial.TrialState[state], intermediate_values=intermediate, user_attrs=attrs, **told)
    if result.started_at:  # when it ran, not when it was exported (Optuna's timeline)
        from datetime import datetime, timedelta

        # Optuna keeps naive local times (datetime.now()); the row's is UTC
        start = datetime.fromisoformat(result.started_at.replace("Z", "+00:00")).astimezone().replace(tzinfo=None)
        trial.datetime_start = start
        trial.datetime_complete = start + timedelta(seconds=result.duration_s or 0.0)
    return trial


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
