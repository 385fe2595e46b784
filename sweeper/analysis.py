"""Read a finished (or interrupted) sweep folder back and summarise it.

A sweep folder ``<out>/<name>/`` holds ``results.csv`` (one row per trial),
``history.csv`` (one row per epoch per trial; may be missing or empty) and
``trials/<trial>/log.txt``. This module ranks the trials, lists the failures and
writes ``report.html``: one self-contained page (inline CSS, images as ``data:``
URIs) that opens anywhere, offline, and can be attached to a message as it is.

pandas and matplotlib are imported inside the functions that need them, so importing
:mod:`sweeper.report` is cheap; matplotlib is the optional extra ``sweeper[report]``.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import os
import urllib.parse
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from . import paths
from .errors import SweepError
from .paths import SweepPaths
from .metrics import direction

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

#: Columns of ``results.csv`` that are neither hyperparameters nor metrics.
FIXED_COLUMNS = (
    "trial_id", "trial", "status", "seed", "device", "started_at", "duration_s",
    "error", "attempts", "epoch_reached", "gpu_uuid", "gpu_mem_cap_mb", "gpu_mem_peak_mb",
)
#: Columns of ``history.csv`` that are not per-epoch metrics.
HISTORY_KEYS = ("trial_id", "trial", "epoch")
#: Trial statuses in the order the report lists them (others follow, sorted).
STATUSES = ("ok", "pruned", "error", "oom", "crashed", "timeout", "interrupted")
TOP = 5

_NEED_MPL = 'the report needs matplotlib: pip install "sweeper[report]" (or pip install matplotlib)'


# ---------------------------------------------------------------- the table


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


def param_columns(df: "pandas.DataFrame") -> list[str]:
    """The ``param_*`` columns of a results DataFrame, in the table's order."""
    return [str(c) for c in df.columns if str(c).startswith("param_")]


def choose(df: "pandas.DataFrame", metric: str | None = None, mode: str | None = None) -> tuple[str | None, str]:
    """The metric to rank by and its direction, ``(metric, "max" | "min")``.

    The metric defaults to the first metric column (None when the table has none); the
    mode defaults to the metric's direction by its name (:func:`sweeper.metrics.direction`:
    losses and errors ``min``, accuracy, AUC, F1, R², scores ``max``). A metric sweeper
    picked whose direction is unknown is ranked ``min``, with a warning saying so.

    Raises:
        SweepError: ``metric`` is not a metric column of ``df``; ``mode`` is neither
            "max" nor "min"; or ``metric`` was named and its direction is unknown.
    """
    metrics = metric_columns(df)
    picked = metric is None
    if metric is None:
        metric = metrics[0] if metrics else None
    elif metric not in metrics:
        have = ", ".join(metrics) if metrics else "none"
        raise SweepError(f"no metric {metric!r} in the results: give one of the metrics ({have})")
    if mode is None and metric is not None:
        mode = direction(metric)
        if mode is None and not picked:
            raise unknown_direction(metric)
        if mode is None:
            mode = "min"
            logging.getLogger("sweeper").warning(
                "sweeper: ranking by %r, the first metric; its name does not say whether higher is "
                "better, so lower is assumed: give --metric and --mode to choose", metric)
    elif mode not in (None, "max", "min"):
        raise SweepError(f"mode must be 'max' or 'min', not {mode!r}")
    return metric, mode or "min"


def unknown_direction(metric: str) -> SweepError:
    return SweepError(
        f"sweeper cannot tell from its name whether a higher or a lower {metric!r} is better; "
        "give --mode max or --mode min (mode='max' or 'min')"
    )


def leaderboard(df: "pandas.DataFrame", metric: str | None, mode: str, top: int = TOP) -> "pandas.DataFrame":
    """The best ``top`` trials that finished ok, best first.

    Columns: ``trial``, the metric, then the hyperparameters (``param_`` prefix
    dropped). Trials whose metric is NaN come last; ties keep the table's order.
    With ``metric=None`` the ok trials are listed in the table's order.
    """
    ok = df[df["status"] == "ok"] if "status" in df.columns else df.iloc[:0]
    params = param_columns(df)
    cols = ["trial", *([metric] if metric is not None else []), *params]
    if metric is not None:
        ok = ok.sort_values(metric, ascending=(mode == "min"), na_position="last", kind="stable")
    board = ok[cols].head(max(int(top), 0)).reset_index(drop=True)
    return board.rename(columns={p: p[len("param_"):] for p in params})


def leaderboard_lines(df: "pandas.DataFrame", metric: str | None, mode: str, top: int = TOP) -> list[str]:
    """The leaderboard as plain-text lines with aligned columns (no color codes).

    The first line says what is ranked, e.g. ``top 5 by val_accuracy (max):``.
    """
    board = leaderboard(df, metric, mode, top)
    what = f"by {metric} ({mode})" if metric is not None else "(no metric to rank by)"
    if board.empty:
        return [f"top {int(top)} {what}:", "  no trial finished ok"]
    head = [str(c) for c in board.columns]
    cells = [[_fmt(v) for v in row] for row in board.itertuples(index=False, name=None)]
    numeric = [_is_number_column(board[c]) for c in board.columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return ("  " + "  ".join(parts)).rstrip()

    return [f"top {len(cells)} {what}:", line(head), *(line(r) for r in cells)]


def failures(df: "pandas.DataFrame", folder: str | os.PathLike[str] | None = None) -> "pandas.DataFrame":
    """The trials that did not finish ok (nor were pruned by a search), in the table's order.

    Columns: ``trial``, ``status``, ``error`` (its first line, "" when there is
    none) and ``log`` (``<folder>/trials/<trial>/log.txt``; relative to the sweep
    folder when ``folder`` is None).
    """
    import pandas

    if "status" not in df.columns:
        return pandas.DataFrame(columns=["trial", "status", "error", "log"])
    bad = df[~df["status"].isin(["ok", "pruned"])]
    base = os.fspath(folder) if folder is not None else ""
    errors = bad["error"] if "error" in bad.columns else pandas.Series([""] * len(bad), index=bad.index)
    return pandas.DataFrame({
        "trial": [str(t) for t in bad["trial"]],
        "status": [str(s) for s in bad["status"]],
        "error": [_first_line(e) for e in errors],
        "log": [os.path.join(base, paths.trial_log(str(t))) for t in bad["trial"]],
    })


# ---------------------------------------------------------------- the page


def write_html(folder: str | os.PathLike[str], metric: str | None = None, mode: str | None = None) -> str:
    """Write ``<folder>/report.html`` and return its path.

    One self-contained page: the status counts, the leaderboard, one figure per
    hyperparameter (the metric against its values, ok trials only), the learning
    curves of the top trials from ``history.csv``, and the failed trials with the
    first line of their error and the path of their log. The file is written to a
    temporary name and renamed, so a reader never sees half a page.

    Raises:
        SweepError: there is no ``results.csv`` in ``folder``, the metric is not in
            it, or matplotlib is not installed.
    """
    import pandas

    folder = os.fspath(folder)
    where = SweepPaths(folder)
    results_path = where.results
    if not os.path.isfile(results_path):
        raise SweepError(
            f"no results.csv in {folder}: give the folder of one sweep, "
            "e.g. python -m sweeper report <out>/<name>"
        )
    try:
        df = pandas.read_csv(results_path)
    except pandas.errors.EmptyDataError:
        raise SweepError(f"{results_path} is empty: the sweep has not written any result yet") from None
    try:
        import matplotlib  # noqa: F401  (only to fail early with a clear message)
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise SweepError(_NEED_MPL) from None

    metric, mode = choose(df, metric, mode)
    history = _read_history(where.history)
    searched = "pruned" in set(df["status"].astype(str)) if "status" in df.columns else False
    if where.exists():
        from .ledger import Ledger

        ledger = Ledger(folder, readonly=True)
        try:
            searched = searched or bool(ledger.get("search"))
        finally:
            ledger.close()
    page = _page(folder, df, history, metric, mode, searched)
    with paths.atomic(where.report, encoding="utf-8") as f:
        f.write(page)
    return where.report


def _use_log_axis(values: Iterable[Any]) -> bool:
    """Whether to plot these values on a log axis: their positive values span 2 decades or more."""
    import numpy

    x = numpy.asarray(list(values), dtype=float)
    x = x[numpy.isfinite(x) & (x > 0)]
    return x.size >= 2 and float(x.max()) / float(x.min()) >= 100


def _read_history(path: str) -> "pandas.DataFrame | None":
    """history.csv, or None when it is missing, empty or has no per-epoch metric."""
    import pandas

    if not os.path.isfile(path):
        return None
    try:
        history = pandas.read_csv(path)
    except pandas.errors.EmptyDataError:
        return None
    if history.empty or "trial" not in history.columns or not _history_metrics(history):
        return None
    return history


def _history_metrics(history: "pandas.DataFrame") -> list[str]:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return [
        str(c) for c in history.columns
        if c not in HISTORY_KEYS and is_numeric_dtype(history[c]) and not is_bool_dtype(history[c])
    ]


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 margin:2rem auto;max-width:1200px;padding:0 1rem;color:#222;background:#fff;line-height:1.4}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f3f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafafa}
.status-ok{color:#137333}.status-bad{color:#b3261e}
.plots{display:flex;flex-wrap:wrap;gap:1rem}
figure{margin:0;flex:1 1 540px;max-width:580px}
figure img{width:100%;height:auto;border:1px solid #eee}
figcaption{color:#666;font-size:.85rem}
.note{color:#666;font-style:italic}
code{font-size:.85rem;word-break:break-all}
"""


def _page(folder: str, df: "pandas.DataFrame", history: "pandas.DataFrame | None",
          metric: str | None, mode: str, searched: bool = False) -> str:
    e = html.escape
    name = os.path.basename(os.path.normpath(os.path.abspath(folder)))
    ok = df[df["status"] == "ok"] if "status" in df.columns else df.iloc[:0]
    params = param_columns(df)
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(f'sweep report: {name}')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Sweep report: {e(name)}</h1>",
        f'<p class="sub">{e(os.path.abspath(folder))}</p>',
    ]

    # status counts
    counts: dict[str, int] = (
        {str(k): int(v) for k, v in df["status"].astype(str).value_counts().items()}
        if "status" in df.columns else {}
    )
    order = [s for s in STATUSES if s in counts] + sorted(s for s in counts if s not in STATUSES)
    out.append("<h2>Trials</h2>")
    out.append('<table class="counts"><tr><th>status</th><th>trials</th></tr>')
    for s in order:
        cls = "status-ok" if s == "ok" else "status-bad"
        out.append(f'<tr><td class="{cls}">{e(s)}</td><td class="num">{int(counts[s])}</td></tr>')
    out.append(f'<tr><th>total</th><th class="num">{len(df)}</th></tr></table>')

    # leaderboard
    board = leaderboard(df, metric, mode, TOP)
    if metric is None:
        out.append("<h2>Leaderboard</h2>")
        out.append('<p class="note">The results have no metric column, so the trials cannot be ranked.</p>')
    else:
        out.append(f"<h2>Leaderboard: top {len(board)} by {e(metric)} ({e(mode)})</h2>")
    if ok.empty:
        out.append('<p class="note">No trial finished ok: there is nothing to rank.</p>')
    elif metric is not None or not board.empty:
        out.append(_table(board, "leaderboard"))

    # one figure per hyperparameter
    out.append("<h2>Metric by hyperparameter</h2>")
    if not params:
        out.append('<p class="note">The results have no hyperparameter column (param_*), so there is nothing to plot.</p>')
    elif ok.empty:
        out.append('<p class="note">No trial finished ok, so there are no hyperparameter plots.</p>')
    elif metric is None:
        out.append('<p class="note">The results have no metric column, so there are no hyperparameter plots.</p>')
    else:
        missing = int(ok[metric].isna().sum())
        if missing:
            out.append(f'<p class="note">{missing} of {len(ok)} ok trials have no {e(metric)} value '
                       "and are left out of the plots.</p>")
        out.append('<div class="plots">')
        for col in params:
            p = col[len("param_"):]
            png, how = _param_figure(ok, col, metric, mode)
            out.append(
                f'<figure><img class="param-plot" data-param="{e(p)}" alt="{e(f"{metric} by {p}")}" '
                f'src="{_data_uri(png)}"><figcaption>{e(f"{metric} by {p} ({how})")}</figcaption></figure>'
            )
        out.append("</div>")

    # a search: the best so far, trial after trial
    if searched and metric is not None and not ok.empty:
        png = _best_so_far_figure(df, metric, mode)
        caption = f"best {metric} so far, by trial (pruned trials at their last reported value)"
        out.append("<h2>Search progress</h2>")
        out.append(f'<figure><img class="best-so-far" alt="{e(caption)}" src="{_data_uri(png)}">'
                   f"<figcaption>{e(caption)}</figcaption></figure>")

    # learning curves
    out.append("<h2>Learning curves</h2>")
    pruned = [str(t) for t in df.loc[df["status"] == "pruned", "trial"]] if searched else []
    out.append(_curves_html(board, history, metric, pruned))

    # failures
    bad = failures(df, folder)
    out.append(f"<h2>Failures ({len(bad)})</h2>")
    if bad.empty:
        out.append('<p class="note">Every trial finished ok.</p>')
    else:
        out.append('<table class="failures"><tr><th>trial</th><th>status</th><th>error</th><th>log</th></tr>')
        for row in bad.itertuples(index=False):
            href = urllib.parse.quote(paths.trial_log(str(row.trial)))
            out.append(
                f'<tr class="failure"><td>{e(row.trial)}</td><td class="status-bad">{e(row.status)}</td>'
                f"<td>{e(row.error)}</td>"
                f'<td><a href="{e(href)}"><code>{e(row.log)}</code></a></td></tr>'
            )
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _curves_html(board: "pandas.DataFrame", history: "pandas.DataFrame | None", metric: str | None,
                 pruned: list[str] | None = None) -> str:
    e = html.escape
    if history is None:
        return ('<p class="note">No learning curves: history.csv is missing or empty '
                "(the trials reported no per-epoch history).</p>")
    if board.empty:
        return '<p class="note">No learning curves: no trial finished ok.</p>'
    metrics = _history_metrics(history)
    column = metric if metric in metrics else metrics[0]
    trials = [str(t) for t in board["trial"]]
    png = _curves_figure(history, trials, column, pruned or [])
    if png is None:
        return (f'<p class="note">No learning curves: history.csv has no {e(column)} values '
                "for the top trials.</p>")
    caption = f"{column} per epoch, top {len(trials)} trials"
    if pruned:
        caption += f"; {len(pruned)} pruned trials in grey, x where each was stopped"
    return (f'<figure><img class="curves" alt="{e(caption)}" src="{_data_uri(png)}">'
            f"<figcaption>{e(caption)}</figcaption></figure>")


def _table(df: "pandas.DataFrame", cls: str) -> str:
    e = html.escape
    numeric = [_is_number_column(df[c]) for c in df.columns]
    rows = [f'<table class="{e(cls)}"><tr>' + "".join(f"<th>{e(str(c))}</th>" for c in df.columns) + "</tr>"]
    for values in df.itertuples(index=False, name=None):
        cells = "".join(
            f'<td class="num">{e(_fmt(v))}</td>' if num else f"<td>{e(_fmt(v))}</td>"
            for v, num in zip(values, numeric)
        )
        rows.append(f"<tr>{cells}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


# ---------------------------------------------------------------- figures


def _param_figure(ok: "pandas.DataFrame", col: str, metric: str, mode: str) -> tuple[bytes, str]:
    """A PNG of the metric against one hyperparameter, and a word on how it is drawn."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    name = col[len("param_"):]
    fig = _figure()
    ax = fig.add_subplot()
    y_all = ok[metric].astype(float)
    if is_numeric_dtype(ok[col]) and not is_bool_dtype(ok[col]):
        how = _scatter(ax, ok[col].astype(float), y_all, mode)
    else:
        how = _strip(ax, ok[col], y_all)
    ax.set_xlabel(name)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by {name}")
    ax.grid(True, alpha=0.3)
    return _png(fig), how


def _scatter(ax: Any, x: "pandas.Series", y: "pandas.Series", mode: str) -> str:
    import numpy

    keep = x.notna() & y.notna()
    xs, ys = x[keep].to_numpy(), y[keep].to_numpy()
    ax.scatter(xs, ys, s=36, alpha=0.8, color="#1f77b4", edgecolors="white", linewidths=0.5)
    if len(ys):
        i = int(numpy.argmax(ys) if mode == "max" else numpy.argmin(ys))
        ax.scatter([xs[i]], [ys[i]], s=160, marker="*", color="#d62728", zorder=3, label="best")
        ax.legend(loc="best", fontsize=8)
    if _use_log_axis(xs):
        if (xs <= 0).any():  # keep zeros and negatives visible
            ax.set_xscale("symlog", linthresh=float(xs[xs > 0].min()))
            return "symmetric log x axis"
        ax.set_xscale("log")
        return "log x axis"
    distinct = numpy.unique(xs)
    if 0 < distinct.size <= 10:
        ax.set_xticks(distinct)
        ax.set_xticklabels([_short(_fmt(v)) for v in distinct], rotation=30 if distinct.size > 5 else 0)
    return "linear x axis"


def _strip(ax: Any, x: "pandas.Series", y: "pandas.Series") -> str:
    import numpy

    labels = [_fmt(v) for v in x]
    cats: list[str] = []
    for label in labels:  # the table's (the grid's) order
        if label not in cats:
            cats.append(label)
    rng = numpy.random.default_rng(0)
    ys = y.to_numpy()
    groups = []
    for i, cat in enumerate(cats):
        vals = numpy.array([v for v, lab in zip(ys, labels) if lab == cat and not math.isnan(v)])
        groups.append(vals)
        if vals.size:
            jitter = rng.uniform(-0.12, 0.12, vals.size) if vals.size > 1 else numpy.zeros(1)
            ax.scatter(i + jitter, vals, s=30, alpha=0.8, color="#1f77b4", edgecolors="white",
                       linewidths=0.5, zorder=3)
    positions = [i for i, g in enumerate(groups) if g.size]
    if positions:
        ax.boxplot([groups[i] for i in positions], positions=positions, widths=0.5,
                   showfliers=False, medianprops={"color": "#d62728"},
                   boxprops={"color": "#888"}, whiskerprops={"color": "#888"}, capprops={"color": "#888"})
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels([_short(c) for c in cats], rotation=30 if len(cats) > 4 else 0,
                       ha="right" if len(cats) > 4 else "center")
    ax.set_xlim(-0.6, len(cats) - 0.4)
    return "one column per value"


def _curves_figure(history: "pandas.DataFrame", trials: list[str], column: str,
                   pruned: list[str] | None = None) -> bytes | None:
    fig = _figure()
    ax = fig.add_subplot()
    drawn = 0
    for trial in pruned or []:  # under the top trials: grey, an x where the pruner stopped it
        rows = history[history["trial"].astype(str) == trial]
        rows = rows[rows[column].notna()]
        if rows.empty:
            continue
        ax.plot(rows["epoch"], rows[column], color="#bbb", linewidth=0.8, zorder=1)
        ax.plot(rows["epoch"].iloc[-1:], rows[column].iloc[-1:], "x", color="#888", markersize=6, zorder=2)
    for trial in trials:
        rows = history[history["trial"].astype(str) == trial]
        rows = rows[rows[column].notna()]
        if rows.empty:
            continue
        x = rows["epoch"] if "epoch" in rows.columns else range(1, len(rows) + 1)
        ax.plot(x, rows[column], marker="o", markersize=3, label=_short(trial, 40))
        drawn += 1
    if not drawn:
        return None
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(column)
    ax.set_title(f"{column} per epoch (top {len(trials)} trials)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def _best_so_far_figure(df: "pandas.DataFrame", metric: str, mode: str) -> bytes:
    """Each trial's metric in the order trials started, ok ones as dots, pruned ones as
    crosses (at their last reported value), and the best ok value so far as a line."""
    import numpy

    fig = _figure()
    ax = fig.add_subplot()
    order = df.sort_values("started_at") if "started_at" in df.columns else df
    n = numpy.arange(1, len(order) + 1)
    values = order[metric].astype(float).to_numpy()
    is_ok = (order["status"] == "ok").to_numpy()
    is_pruned = (order["status"] == "pruned").to_numpy()
    ax.scatter(n[is_ok], values[is_ok], s=22, color="#1f77b4", label="ok", zorder=3)
    if is_pruned.any():
        ax.scatter(n[is_pruned], values[is_pruned], s=22, marker="x", color="#888", label="pruned", zorder=2)
    best, line = None, []
    for v, good in zip(values, is_ok):
        if good and not math.isnan(v) and (best is None or (v > best if mode == "max" else v < best)):
            best = v
        line.append(numpy.nan if best is None else best)
    ax.step(n, line, where="post", color="#d62728", label=f"best so far ({mode})", zorder=4)
    ax.set_xlabel("trial, in the order started")
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def _figure() -> "Figure":
    """A new figure drawn by the Agg canvas, outside pyplot: no global state, nothing to close."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 3.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: "Figure") -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    fig.clear()
    return buf.getvalue()


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# ---------------------------------------------------------------- text


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if _is_na(value):  # a missing or NaN value of a nullable column
        return "nan"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.6g}"
    try:
        import numpy

        if isinstance(value, numpy.floating):
            return _fmt(float(value))
        if isinstance(value, numpy.integer):
            return str(int(value))
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def _short(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _is_number_column(series: "pandas.Series") -> bool:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_numeric_dtype(series) and not is_bool_dtype(series)


def _is_na(value: Any) -> bool:
    try:
        import pandas

        return bool(pandas.isna(value)) if not isinstance(value, (list, tuple, dict)) else False
    except (TypeError, ValueError):
        return False


def _first_line(error: Any) -> str:
    if error is None or _is_na(error):
        return ""
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
