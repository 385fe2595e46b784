"""The results table, queried: which columns are metrics, the metric and its direction,
which rows finished ok, are ranked, stopped or failed, the leaderboard, the failures, the
parameters that vary; values as text. One home for what the closing summary, ``status``
and ``report`` say of a sweep's rows.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import HISTORY_COLUMNS, default_metric, direction, unknown_direction
from sweeper.model.trial import RESULT_COLUMNS, Status
from sweeper.store import paths
from sweeper.store.table import param_columns

if TYPE_CHECKING:
    import pandas


#: Columns of ``results.csv`` that are neither hyperparameters nor metrics.
FIXED_COLUMNS = RESULT_COLUMNS


#: Columns of ``history.csv`` that are not per-epoch metrics.
HISTORY_KEYS = HISTORY_COLUMNS


#: Trial statuses in the order the report lists them: those that succeeded first, each
#: group in :class:`~sweeper.model.trial.Status`' order (others follow, sorted).
STATUSES = tuple(s.value for s in sorted(Status, key=lambda s: not s.succeeded))


TOP = 5

#: ``df.attrs`` key of a search's parameters on a log scale (loguniform): drawn on a log axis, as
#: are those whose values span two decades (:func:`sweeper.results.studies.spans_decades`)
LOG_SCALE = "log_scale"


def metric_columns(df: "pandas.DataFrame") -> list[str]:
    """The metric columns of a results DataFrame, in the table's order.

    A metric column is a numeric (not boolean) column that is neither one of
    :data:`FIXED_COLUMNS` nor a ``param_*`` hyperparameter column.
    """
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return [
        str(c) for c in df.columns
        if c not in FIXED_COLUMNS and not str(c).startswith("param_")
        and is_numeric_dtype(df[c]) and not is_bool_dtype(df[c])
    ]


def choose(df: "pandas.DataFrame", metric: str | None = None,
           mode: str | None = None) -> tuple[str | None, str | None]:
    """The metric to rank by and its direction, ``(metric, "max" | "min" | None)``.

    The metric defaults to a validation metric where there is one, ``val_loss`` before
    ``loss``, else the first metric column (:func:`sweeper.model.metrics.default_metric`; None when
    the table has none); the mode defaults to the metric's direction by its name where the name is a known one
    (:func:`sweeper.model.metrics.direction`). A metric sweeper picked whose direction is unknown
    has no mode: it ranks nothing until a mode is given (:func:`unranked` says how), and
    nothing is called best; a direction is never guessed.

    Raises:
        SweepError: ``metric`` is not a metric column of ``df``; ``mode`` is neither
            "max" nor "min"; or ``metric`` was named and its direction is unknown.
    """
    metrics = metric_columns(df)
    picked = metric is None
    if metric is None:
        metric = (default_metric(metrics) or (None, ""))[0]
    elif metric not in metrics:
        have = ", ".join(metrics) if metrics else "none"
        raise SweepError(f"no metric {metric!r} in the results: give one of the metrics ({have})")
    if mode not in (None, "max", "min"):
        raise SweepError(f"mode must be 'max' or 'min', not {mode!r}")
    if mode is None and metric is not None:
        mode = direction(metric)
        if mode is None and not picked:
            raise unknown_direction(metric)
    return metric, mode


def unranked(metric: str) -> str:
    """The one line said where the metric ranked by has no direction (:func:`choose`): why
    nothing is ranked, and how to choose."""
    return (f"not ranked: {metric!r} does not say by its name whether higher or lower is better; give --mode max "
            "or --mode min (mode='max' or 'min') to rank by it, or --metric (metric=) to rank by another")


def status_of(value: Any) -> Status | None:
    """The :class:`~sweeper.model.trial.Status` a ``status`` cell names (None: missing or unknown)."""
    try:
        return Status(str(value))
    except ValueError:
        return None


def _statuses(df: "pandas.DataFrame") -> list[Status | None]:
    return [status_of(v) for v in df["status"]] if "status" in df.columns else [None] * len(df)


def _mask(df: "pandas.DataFrame", values: list[bool]) -> "pandas.Series":
    import pandas

    return pandas.Series(values, index=df.index, dtype=bool)


def finished_ok(df: "pandas.DataFrame") -> "pandas.Series":
    """Per row: the trial finished ok (the trials a ranking counts)."""
    return _mask(df, [s is Status.OK for s in _statuses(df)])


def ranked(df: "pandas.DataFrame") -> "pandas.Series":
    """Per row: a ranking counts it: it finished ok and, where the sweep has constraints,
    meets them (``feasible`` is not False)."""
    ok = finished_ok(df)
    if "feasible" not in df.columns:
        return ok
    return ok & _mask(df, [is_na(v) or bool(v) for v in df["feasible"]])  # NA: not judged


def stopped(df: "pandas.DataFrame") -> "pandas.Series":
    """Per row: the trial succeeded without finishing, as the CLI says (``pruned``): no failure."""
    return _mask(df, [s is not None and s.succeeded and s is not Status.OK for s in _statuses(df)])


def failed(df: "pandas.DataFrame") -> "pandas.Series":
    """Per row: the trial failed, as the CLI says (not :attr:`Status.succeeded`; an unknown
    status too). A table without a ``status`` column has no failures."""
    if "status" not in df.columns:
        return _mask(df, [False] * len(df))
    return _mask(df, [s is None or not s.succeeded for s in _statuses(df)])


def leaderboard(df: "pandas.DataFrame", metric: str | None, mode: str | None,
                top: int = TOP) -> "pandas.DataFrame":
    """The best ``top`` trials that finished ok (and meet the sweep's constraints), best first.

    Columns: ``trial``, the metric, then the hyperparameters (``param_`` prefix
    dropped, unless the bare name is the metric's or ``trial``: a parameter and a metric may
    share a name). Trials whose metric is NaN come last; ties keep the table's order.
    With ``metric=None``, or ``mode=None`` (a metric whose direction is unknown), the first
    ``top`` ok trials in the table's order: none is ranked.
    """
    ok = df[ranked(df)]
    params = param_columns(df)
    cols = ["trial", *([metric] if metric is not None else []), *params]
    if metric is not None and mode is not None:
        ok = ok.sort_values(metric, ascending=(mode == "min"), na_position="last", kind="stable")
    board = ok[cols].head(max(int(top), 0)).reset_index(drop=True)
    taken = {"trial", metric}
    return board.rename(columns={p: p[len("param_"):] for p in params if p[len("param_"):] not in taken})


def leaderboard_lines(df: "pandas.DataFrame", metric: str | None, mode: str | None,
                      top: int = TOP) -> list[str]:
    """The leaderboard as plain-text lines with aligned columns (no color codes).

    The first line says what is ranked, e.g. ``top 5 by val_accuracy (max):``; with no
    mode, that nothing is: ``first 5 of 8 ok trials, in grid order (not ranked):``.
    """
    board = leaderboard(df, metric, mode, top)
    unranked = metric is not None and mode is None
    what = f"by {metric} ({mode})" if metric is not None else "(no metric to rank by)"
    if board.empty:
        return ["not ranked:" if unranked else f"top {int(top)} {what}:", "  " + nothing_ranked(df)]
    n = int(ranked(df).sum())
    title = (f"first {len(board)} of {n} ok trial{'s' if n > 1 else ''}, in grid order (not ranked)" if unranked
             else f"top {len(board)} {what}")
    head = [str(c) for c in board.columns]
    params = set(board.columns[2 if metric is not None else 1:])  # after trial and the metric
    columns = [param_texts(board[c]) if c in params else [fmt_value(v) for v in board[c]] for c in board.columns]
    cells = [list(row) for row in zip(*columns)]
    numeric = [is_number_column(board[c]) for c in board.columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return ("  " + "  ".join(parts)).rstrip()

    return [f"{title}:", line(head), *(line(r) for r in cells)]


def nothing_ranked(df: "pandas.DataFrame") -> str:
    """Why a ranking is empty: no trial finished ok, or those that did missed the constraints."""
    n = int(finished_ok(df).sum())
    if not n:
        return "no trial finished ok"
    return f"{n} trial{'s' if n > 1 else ''} finished ok but none met the constraints"


def failures(df: "pandas.DataFrame", folder: str | os.PathLike[str] | None = None) -> "pandas.DataFrame":
    """The trials that did not finish ok (nor were pruned by a search), in the table's order.

    Columns: ``trial``, ``status``, ``error`` (its first line, "" when there is
    none) and ``log`` (``<folder>/trials/<trial>/log.txt``; relative to the sweep
    folder when ``folder`` is None).
    """
    import pandas

    if "status" not in df.columns:
        return pandas.DataFrame(columns=["trial", "status", "error", "log"])
    bad = df[failed(df)]
    base = os.fspath(folder) if folder is not None else ""
    errors = bad["error"] if "error" in bad.columns else pandas.Series([""] * len(bad), index=bad.index)
    return pandas.DataFrame({
        "trial": [str(t) for t in bad["trial"]],
        "status": [str(s) for s in bad["status"]],
        "error": [_first_line(e) for e in errors],
        "log": [os.path.join(base, paths.trial_log(str(t))) for t in bad["trial"]],
    })


def varying_params(df: "pandas.DataFrame") -> list[str]:
    """The ``param_*`` columns that take two or more values across the table: those the
    report draws a panel for (in the table's order)."""
    return [c for c in param_columns(df) if _distinct(df[c]) > 1]


def fixed_params(df: "pandas.DataFrame") -> dict[str, Any]:
    """The settings with one value in every trial that has them, by name (``param_``
    prefix dropped): the report lists them once instead of drawing a panel each."""
    out: dict[str, Any] = {}
    for c in param_columns(df):
        values = df[c].dropna()
        if _distinct(df[c]) == 1:
            out[c[len("param_"):]] = values.iloc[0]
    return out


def _distinct(series: "pandas.Series") -> int:
    return len({exact_text(v) for v in series.dropna()})


def exact_text(value: Any) -> str:
    """A text that tells two values apart exactly (floats by their round-trip repr)."""
    if is_na(value):
        return "\0na"
    if isinstance(value, float) or is_numpy_float(value):
        return repr(float(value))
    return f"{type(value).__name__}:{value}"


def is_numpy_float(value: Any) -> bool:
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, numpy.floating)


def history_metrics(history: "pandas.DataFrame") -> list[str]:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return [
        str(c) for c in history.columns
        if c not in HISTORY_KEYS and is_numeric_dtype(history[c]) and not is_bool_dtype(history[c])
    ]


def fmt_value(value: Any) -> str:
    if value is None:
        return ""
    if is_na(value):  # a missing or NaN value of a nullable column
        return "nan"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.6g}"
    try:
        import numpy

        if isinstance(value, numpy.floating):
            return fmt_value(float(value))
        if isinstance(value, numpy.integer):
            return str(int(value))
    except ImportError:  # pragma: no cover
        pass
    return str(value)


#: Texts that a reader (or pandas) takes for a missing value, a bool or a number: shown in quotes.
_NOT_BARE = frozenset({"", "none", "null", "nan", "-nan", "na", "n/a", "<na>", "nat", "#n/a", "#na", "#n/a n/a",
                       "-1.#ind", "1.#ind", "-1.#qnan", "1.#qnan", "true", "false"})


def param_texts(values: Iterable[Any]) -> list[str]:
    """A parameter's values as the console shows them, each telling its value exactly: a
    column of plain words bare; else each value as Python writes it (``'None'``, ``''``,
    ``'1'`` for texts, ``None`` for a missing value, ``True``, ``7``, floats by their
    round-trip ``repr``), so that "None" and None, "True" and True, "1" and 1 differ."""
    plain = [None if is_na(v) else v.item() if hasattr(v, "item") and not isinstance(v, str) else v
             for v in values]
    bare = all(isinstance(v, str) and _bare(v) for v in plain if v is not None)
    return [v if bare and isinstance(v, str) else repr(v) for v in plain]


def _bare(text: str) -> bool:
    """Whether a text shown as it is reads as that text: a word, not one that reads as
    missing, a bool or a number, without edge spaces, quotes or control characters."""
    if text.lower() in _NOT_BARE or text != text.strip() or not text.isprintable() or "  " in text:
        return False
    if text[0] in "'\"":
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


def shorten(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def is_number_column(series: "pandas.Series") -> bool:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_numeric_dtype(series) and not is_bool_dtype(series)


def is_na(value: Any) -> bool:
    try:
        import pandas

        return bool(pandas.isna(value)) if not isinstance(value, (list, tuple, dict)) else False
    except (TypeError, ValueError):
        return False


def _first_line(error: Any) -> str:
    if error is None or is_na(error):
        return ""
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
