"""Read a finished (or interrupted) sweep folder back and summarise it.

A sweep folder ``<out>/<name>/`` holds ``ledger.sqlite`` (the record of every trial and
its per-epoch reports), ``results.csv`` and ``history.csv`` derived from it, and
``trials/<trial>/log.txt``. This module ranks the trials, lists the failures and
writes ``report.html``: one self-contained page (inline CSS, images as ``data:``
URIs) that opens anywhere, offline, and can be attached to a message as it is. The page
reads the ledger, as :func:`sweeper.load` does, so a sweep stopped before its first
row has a report too; a folder with only a ``results.csv`` (and ``history.csv``) is
read from those.

Statuses are judged as the command line judges them (:attr:`sweeper.model.trial.Status.succeeded`):
``ok`` and ``pruned`` are no failure; a pruned trial is drawn in a neutral grey, never in
the failure colour.

pandas and matplotlib are imported inside the functions that need them, so importing
:mod:`sweeper.results.report` is cheap; matplotlib is the optional extra ``sweeper[report]``.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import logging
import math
import os
import urllib.parse
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import HISTORY_COLUMNS, default_metric, direction
from sweeper.model.trial import RESULT_COLUMNS, Status
from sweeper.results.studies import spans_decades
from sweeper.store import paths
from sweeper.store.paths import SweepPaths
from sweeper.store.table import param_columns

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

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

_NEED_MPL = "the report needs matplotlib: pip install matplotlib"


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




def choose(df: "pandas.DataFrame", metric: str | None = None, mode: str | None = None) -> tuple[str | None, str]:
    """The metric to rank by and its direction, ``(metric, "max" | "min")``.

    The metric defaults to a validation metric where there is one, ``val_loss`` before
    ``loss``, else the first metric column (:func:`sweeper.model.metrics.default_metric`; None when
    the table has none); the mode defaults to the metric's direction by its name where the name is a known one
    (:func:`sweeper.model.metrics.direction`). A metric sweeper picked whose direction is unknown
    is ranked ``min``, with a warning saying so (a display default: a named one needs ``mode``).

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


def _status_of(value: Any) -> Status | None:
    """The :class:`~sweeper.model.trial.Status` a ``status`` cell names (None: missing or unknown)."""
    try:
        return Status(str(value))
    except ValueError:
        return None


def _statuses(df: "pandas.DataFrame") -> list[Status | None]:
    return [_status_of(v) for v in df["status"]] if "status" in df.columns else [None] * len(df)


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
    return ok & _mask(df, [_is_na(v) or bool(v) for v in df["feasible"]])  # NA: not judged


def stopped(df: "pandas.DataFrame") -> "pandas.Series":
    """Per row: the trial succeeded without finishing, as the CLI says (``pruned``): no failure."""
    return _mask(df, [s is not None and s.succeeded and s is not Status.OK for s in _statuses(df)])


def failed(df: "pandas.DataFrame") -> "pandas.Series":
    """Per row: the trial failed, as the CLI says (not :attr:`Status.succeeded`; an unknown
    status too). A table without a ``status`` column has no failures."""
    if "status" not in df.columns:
        return _mask(df, [False] * len(df))
    return _mask(df, [s is None or not s.succeeded for s in _statuses(df)])


def leaderboard(df: "pandas.DataFrame", metric: str | None, mode: str, top: int = TOP) -> "pandas.DataFrame":
    """The best ``top`` trials that finished ok (and meet the sweep's constraints), best first.

    Columns: ``trial``, the metric, then the hyperparameters (``param_`` prefix
    dropped, unless the bare name is the metric's or ``trial``: a parameter and a metric may
    share a name). Trials whose metric is NaN come last; ties keep the table's order.
    With ``metric=None`` the ok trials are listed in the table's order.
    """
    ok = df[ranked(df)]
    params = param_columns(df)
    cols = ["trial", *([metric] if metric is not None else []), *params]
    if metric is not None:
        ok = ok.sort_values(metric, ascending=(mode == "min"), na_position="last", kind="stable")
    board = ok[cols].head(max(int(top), 0)).reset_index(drop=True)
    taken = {"trial", metric}
    return board.rename(columns={p: p[len("param_"):] for p in params if p[len("param_"):] not in taken})


def leaderboard_lines(df: "pandas.DataFrame", metric: str | None, mode: str, top: int = TOP) -> list[str]:
    """The leaderboard as plain-text lines with aligned columns (no color codes).

    The first line says what is ranked, e.g. ``top 5 by val_accuracy (max):``.
    """
    board = leaderboard(df, metric, mode, top)
    what = f"by {metric} ({mode})" if metric is not None else "(no metric to rank by)"
    if board.empty:
        return [f"top {int(top)} {what}:", "  " + nothing_ranked(df)]
    head = [str(c) for c in board.columns]
    params = set(board.columns[2 if metric is not None else 1:])  # after trial and the metric
    columns = [param_texts(board[c]) if c in params else [_fmt(v) for v in board[c]] for c in board.columns]
    cells = [list(row) for row in zip(*columns)]
    numeric = [_is_number_column(board[c]) for c in board.columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return ("  " + "  ".join(parts)).rstrip()

    return [f"top {len(cells)} {what}:", line(head), *(line(r) for r in cells)]


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
    return len({_exact(v) for v in series.dropna()})


def _exact(value: Any) -> str:
    """A text that tells two values apart exactly (floats by their round-trip repr)."""
    if _is_na(value):
        return "\0na"
    if isinstance(value, float) or _is_numpy_float(value):
        return repr(float(value))
    return f"{type(value).__name__}:{value}"


def _is_numpy_float(value: Any) -> bool:
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, numpy.floating)


# ---------------------------------------------------------------- reading a folder


def read_folder(folder: str | os.PathLike[str]) -> tuple["pandas.DataFrame", "pandas.DataFrame | None", bool]:
    """A sweep folder's results, per-epoch history (None when there is none) and whether
    it was a search (it has a search on record, or pruned trials).

    A sweep folder is read from its ledger as :func:`sweeper.load` reads it (the trials of
    the grid last run there), so a sweep stopped before ``results.csv`` was first written
    reads as one with no trial finished. A folder without a ledger is read from its
    ``results.csv`` and ``history.csv``.

    Raises:
        SweepError: the folder has neither a ledger nor a ``results.csv``, or the CSV is empty.
    """
    import pandas

    folder = os.fspath(folder)
    where = SweepPaths(folder)
    if where.exists():
        return _from_ledger(folder)
    if not os.path.isfile(where.results):
        raise SweepError(
            f"no {paths.LEDGER} or {paths.RESULTS} in {folder}: give the folder of one sweep, "
            "e.g. python -m sweeper report <out>/<name>"
        )
    try:
        df = pandas.read_csv(where.results)
    except pandas.errors.EmptyDataError:
        raise SweepError(f"{where.results} is empty: the sweep has not written any result yet") from None
    return df, _read_history(where.history), bool(stopped(df).any())


def _from_ledger(folder: str) -> tuple["pandas.DataFrame", "pandas.DataFrame | None", bool]:
    """What :func:`sweeper.load` reads, with the per-epoch reports of those trials: the
    same rows as ``results.csv`` and ``history.csv``, read at one moment."""
    import pandas

    from sweeper.store import table
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        with ledger.snapshot():
            current = ledger.current()
            results = table.ordered((ledger.results() if current is None else current).values())
            epochs = ledger.history()
            search = ledger.get("search")
            objectives = ledger.objectives()
            logs = ledger.get("log_scale")
    finally:
        ledger.close()
    df = table.dataframe(results, objectives)
    df.attrs[LOG_SCALE] = frozenset(json.loads(logs or "[]"))
    where = {r.trial_id: (r.index, r.name) for r in results}
    rows = [{**metrics, "trial_id": tid, "trial": where[tid][1], "epoch": epoch}
            for tid, epoch, metrics in epochs if tid in where]
    rows.sort(key=lambda r: (where[r["trial_id"]][0], r["epoch"]))
    history = None
    if rows:
        frame = pandas.DataFrame(rows)
        history = _usable_history(frame[[*HISTORY_KEYS, *(c for c in frame.columns if c not in HISTORY_KEYS)]])
    return df, history, bool(search) or bool(stopped(df).any())


def _read_history(path: str) -> "pandas.DataFrame | None":
    """history.csv, or None when it is missing, empty or has no per-epoch metric."""
    import pandas

    if not os.path.isfile(path):
        return None
    try:
        history = pandas.read_csv(path)
    except pandas.errors.EmptyDataError:
        return None
    return _usable_history(history)


def _usable_history(history: "pandas.DataFrame") -> "pandas.DataFrame | None":
    if history.empty or "trial" not in history.columns or not _history_metrics(history):
        return None
    return history


def _history_metrics(history: "pandas.DataFrame") -> list[str]:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return [
        str(c) for c in history.columns
        if c not in HISTORY_KEYS and is_numeric_dtype(history[c]) and not is_bool_dtype(history[c])
    ]


# ---------------------------------------------------------------- the page


def write_html(folder: str | os.PathLike[str], metric: str | None = None, mode: str | None = None) -> str:
    """Write ``<folder>/report.html`` and return its path.

    One self-contained page: the status counts (``pruned`` apart from the failures, as the
    CLI counts it), the settings fixed in every trial, the leaderboard, one figure per
    hyperparameter that varies (the metric against its values, ok trials only), a
    search's best so far, the learning curves of the top trials, and the failed trials
    with the first line of their error and the path of their log. The sweep is read by
    :func:`read_folder` (from the ledger, as :func:`sweeper.load` reads it). The file is
    written to a temporary name and renamed, so a reader never sees half a page.

    Raises:
        SweepError: ``folder`` has neither a ledger nor a ``results.csv``, the metric is
            not in the results, or matplotlib is not installed.
    """
    folder = os.fspath(folder)
    df, history, searched = read_folder(folder)
    need_matplotlib()
    metric, mode = choose(df, metric, mode)
    page = _page(folder, df, history, metric, mode, searched)
    path = SweepPaths(folder).report
    with paths.atomic(path, encoding="utf-8") as f:
        f.write(page)
    return path


def figures(folder: str | os.PathLike[str], metric: str | None = None,
            mode: str | None = None) -> "dict[str, Figure]":
    """The figures ``report.html`` shows, by name, as matplotlib figures not yet drawn to PNG.

    ``param:<name>`` for each hyperparameter that takes more than one value (table
    order), ``progress`` (a search's best so far), ``curves`` (the learning curves of
    the top trials) and ``memory`` (peak GPU memory against reservation, per_gpu="auto"),
    each only where the page has it. The folder, ``metric`` and ``mode``
    are read as :func:`write_html` reads them.
    """
    folder = os.fspath(folder)
    df, history, searched = read_folder(folder)
    need_matplotlib()
    metric, mode = choose(df, metric, mode)
    return {p.key: p.figure for p in _plots(df, history, metric, mode, searched)}


def need_matplotlib() -> None:
    """Raises SweepError (one line naming the install command) where matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401  (only to fail early with a clear message)
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise SweepError(_NEED_MPL) from None


@dataclasses.dataclass
class _Plot:
    key: str  #: ``param:<name>``, ``progress``, ``curves``, ``pareto`` or ``memory``
    figure: "Figure"
    caption: str


def _plots(df: "pandas.DataFrame", history: "pandas.DataFrame | None", metric: str | None, mode: str,
           searched: bool) -> list[_Plot]:
    """Every figure of the page, in its order (the page says why one is missing). Each caption
    says which trials the figure shows and which of them are grey."""
    ok = df[finished_ok(df)]
    out: list[_Plot] = []
    if metric is not None and not ok.empty:
        for col in varying_params(df):
            name = col[len("param_"):]
            log = name in df.attrs.get(LOG_SCALE, ()) or spans_decades(df[col])
            fig, how, marks = _param_figure(ok, col, metric, mode, log)
            out.append(_Plot(f"param:{name}", fig, f"{metric} by {name} ({how}): {_drawn(ok, metric)}; {marks}"))
        if searched:
            out.append(_Plot("progress", _best_so_far_figure(df, metric, mode), _progress_caption(df, metric)))
    curves = _curves_plot(df, history, metric, mode)
    if curves is not None:
        out.append(curves)
    front = _pareto_figure(df)
    if front is not None:
        out.append(front)
    memory = _memory_figure(df)
    if memory is not None:
        out.append(_Plot("memory", memory, "each trial with a peak and a reservation (per_gpu auto): its peak GPU "
                                           "memory against what was reserved for it; red x: out of memory; on the "
                                           "line: it took all it was given"))
    return out


def _drawn(ok: "pandas.DataFrame", metric: str) -> str:
    """Which of the ok trials a figure of ``metric`` shows, and which are grey."""
    has = ok[metric].notna()
    text = f"each ok trial with a value of {metric} ({int(has.sum())})"
    missed = int((has & ~ranked(ok)).sum())
    if missed:
        text += f": blue those that meet the constraints, hollow grey the {missed} that miss them (feasible=False)"
    return text


def _progress_caption(df: "pandas.DataFrame", metric: str) -> str:
    ok, pruned = finished_ok(df), stopped(df)
    text = f"{metric} of each trial in the order started: ok trials ({int(ok.sum())}) in blue"
    missed = int((ok & ~ranked(df)).sum())
    if missed:
        text += f", hollow grey the {missed} that miss the constraints"
    if pruned.any():
        text += f", grey x the {int(pruned.sum())} pruned (at their last reported value)"
    return text + "; the line: the best so far" + (" that meets the constraints" if missed else "")


def _curves_plot(df: "pandas.DataFrame", history: "pandas.DataFrame | None", metric: str | None,
                 mode: str) -> _Plot | None:
    """The learning curves of the top trials, the pruned ones grey under them."""
    board = leaderboard(df, metric, mode, TOP)
    column = _curves_column(history, metric)
    if history is None or column is None or board.empty:
        return None
    trials = [str(t) for t in board["trial"]]
    pruned = [str(t) for t in df.loc[stopped(df), "trial"]]
    curves, grey = _curves_figure(history, df, trials, column, pruned)
    if curves is None:
        return None
    caption = f"{column} per epoch of the top {len(trials)} trials" + (f" by {metric}" if metric else "")
    if "feasible" in df.columns:
        caption += " among those that meet the constraints"
    if grey:
        caption += f"; grey: the {grey} pruned trials, x where each was stopped"
    return _Plot("curves", curves, caption)


def _front_section(df: "pandas.DataFrame", objectives: Any, plot: _Plot | None, fixed: Any) -> list[str]:
    """The report's Pareto front: its trials (every objective, then what varies), and the
    plot for two objectives."""
    e = html.escape
    front = objectives.frame_front(df)
    out = [f"<h2>Pareto front: {len(front)} trial{'s' if len(front) != 1 else ''} ({e(str(objectives))})</h2>"]
    if front.empty:
        out.append('<p class="note">No ok trial has a value of every objective yet.</p>')
        return out
    out.append('<p class="note">No other trial is at least as good in every objective and better in one '
               "(infeasible trials are left out); <code>pareto</code> in results.csv marks them.</p>")
    shown = ["trial", *objectives.metrics, *(c for c in param_columns(df) if c[len("param_"):] not in fixed)]
    out.append(_table(front[shown], "pareto", shown[1 + len(objectives.metrics):]))
    if plot is not None and len(objectives.metrics) == 2:
        out.append(f'<figure><img class="pareto-plot" alt="{e(plot.caption)}" src="{_data_uri(_png(plot.figure))}">'
                   f"<figcaption>{e(plot.caption)}</figcaption></figure>")
    elif len(objectives.metrics) > 2:
        out.append(f'<p class="note">{len(objectives.metrics)} objectives: no plot (it is drawn for two).</p>')
    return out


def _pareto_figure(df: "pandas.DataFrame") -> _Plot | None:
    """Two objectives: every ok trial with both, the front joined and marked in red, the
    trials off it grey (hollow: those that miss the constraints); None otherwise."""
    objectives = df.attrs.get("objectives")
    if objectives is None or len(objectives.metrics) != 2 or "pareto" not in df:
        return None
    (x, y), (mx, my) = objectives.metrics, objectives.modes
    rows = df[finished_ok(df)]
    rows = rows[rows[x].notna() & rows[y].notna()]
    if rows.empty:
        return None
    import numpy

    good = ranked(rows).to_numpy()
    on = rows.pareto.fillna(False).astype(bool).to_numpy() & good
    xs, ys = rows[x].to_numpy(dtype=float, na_value=numpy.nan), rows[y].to_numpy(dtype=float, na_value=numpy.nan)
    off, missed = good & ~on, ~good
    fig = _figure()
    ax = fig.add_subplot()
    if off.any():
        ax.scatter(xs[off], ys[off], s=22, color=_GREY, label=f"not on the front ({int(off.sum())})", zorder=2)
    if missed.any():
        _hollow(ax, xs[missed], ys[missed])
    order = numpy.argsort(xs[on], kind="stable")
    fx, fy = xs[on][order], ys[on][order]
    ax.step(fx, fy, where="post" if (mx == "max") == (my == "max") else "pre", color=_BEST_COLOUR, linewidth=1,
            zorder=3)
    if on.any():
        ax.scatter(fx, fy, s=40, color=_BEST_COLOUR, zorder=4, label=f"Pareto front ({int(on.sum())})")
    for axis, name, how in ((ax.set_xlabel, x, mx), (ax.set_ylabel, y, my)):
        axis(f"{name} ({'higher' if how == 'max' else 'lower'} is better)")
    if spans_decades(xs) and bool((xs > 0).all()):  # a log axis would hide zeros and negatives
        ax.set_xscale("log")
    if spans_decades(ys) and bool((ys > 0).all()):
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    caption = (f"{y} against {x}: each ok trial with both ({len(rows)}); red: the Pareto front ({int(on.sum())}: "
               f"no other trial is at least as good in both and better in one); grey: the {int(off.sum())} off it")
    if missed.any():
        caption += f"; hollow grey: the {int(missed.sum())} that miss the constraints (never on the front)"
    return _Plot("pareto", fig, caption)


def _memory_figure(df: "pandas.DataFrame") -> "Figure | None":
    """Peak against reservation, per trial that has both (a packed sweep), None otherwise."""
    if "gpu_mem_reserved_mb" not in df or "gpu_mem_peak_mb" not in df:
        return None
    rows = df[df.gpu_mem_reserved_mb.notna() & df.gpu_mem_peak_mb.notna()]
    if rows.empty:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    oom = rows.status == "oom"
    ax.scatter(rows.gpu_mem_reserved_mb[~oom], rows.gpu_mem_peak_mb[~oom], s=18, color=_OK_COLOUR, label="trial")
    if oom.any():
        ax.scatter(rows.gpu_mem_reserved_mb[oom], rows.gpu_mem_peak_mb[oom], s=30, marker="x", color="#c0392b",
                   label="oom")
    top = float(max(rows.gpu_mem_reserved_mb.max(), rows.gpu_mem_peak_mb.max())) * 1.05
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8, linestyle="--", label="peak = reserved")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("reserved, MB")
    ax.set_ylabel("peak, MB (NVML)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


def _curves_column(history: "pandas.DataFrame | None", metric: str | None) -> str | None:
    if history is None:
        return None
    metrics = _history_metrics(history)
    return metric if metric in metrics else (metrics[0] if metrics else None)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 margin:2rem auto;max-width:1200px;padding:0 1rem;color:#222;background:#fff;line-height:1.4}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f3f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafafa}
.status-ok{color:#137333}.status-stopped{color:#5f6368}.status-bad{color:#b3261e}
.plots{display:flex;flex-wrap:wrap;gap:1rem}
figure{margin:0;flex:1 1 540px;max-width:580px}
figure img{width:100%;height:auto;border:1px solid #eee}
figcaption{color:#666;font-size:.85rem}
.note{color:#666;font-style:italic}
code{font-size:.85rem;word-break:break-all}
"""


def _status_class(status: str) -> str:
    """The CSS class of a status: ok green, pruned (succeeded, not finished) grey, a failure red."""
    s = _status_of(status)
    if s is Status.OK:
        return "status-ok"
    return "status-stopped" if s is not None and s.succeeded else "status-bad"


def _page(folder: str, df: "pandas.DataFrame", history: "pandas.DataFrame | None",
          metric: str | None, mode: str, searched: bool = False) -> str:
    e = html.escape
    name = os.path.basename(os.path.normpath(os.path.abspath(folder)))
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(f'sweep report: {name}')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Sweep report: {e(name)}</h1>",
        f'<p class="sub">{e(os.path.abspath(folder))}</p>',
    ]
    out += _trials_section(df)
    if df.empty:  # nothing to rank, plot or list yet
        out.append("</body></html>")
        return "\n".join(out) + "\n"
    fixed = fixed_params(df)
    plots = _plots(df, history, metric, mode, searched)
    by_key = {p.key: p for p in plots}
    board = leaderboard(df, metric, mode, TOP)
    out += _leaderboard_section(df, board, metric, mode, fixed)
    objectives = df.attrs.get("objectives")
    if objectives is not None:
        out += _front_section(df, objectives, by_key.get("pareto"), fixed)
    out += _param_section(df, [p for p in plots if p.key.startswith("param:")], metric)
    out += _importance_section(df, metric, mode, objectives)
    if "progress" in by_key:  # a search: the best so far, trial after trial
        out += ["<h2>Search progress</h2>", _figure_html("best-so-far", by_key["progress"])]
    out += _curves_section(df, history, by_key.get("curves"), board, metric)
    if "memory" in by_key:  # a packed sweep: what each trial took of what it was given
        out += ["<h2>GPU memory</h2>", _figure_html("memory", by_key["memory"])]
    out += _failures_section(df, folder)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _figure_html(css: str, plot: Any) -> str:
    """One figure of the page, its caption as its alt text too."""
    e = html.escape
    return (f'<figure><img class="{css}" alt="{e(plot.caption)}" src="{_data_uri(_png(plot.figure))}">'
            f"<figcaption>{e(plot.caption)}</figcaption></figure>")


def _trials_section(df: "pandas.DataFrame") -> list[str]:
    """Status counts: ok, then the trials that succeeded without finishing (pruned), then failures."""
    e = html.escape
    counts: dict[str, int] = (
        {str(k): int(v) for k, v in df["status"].astype(str).value_counts().items()}
        if "status" in df.columns else {}
    )
    order = [s for s in STATUSES if s in counts] + sorted(s for s in counts if s not in STATUSES)
    order.sort(key=lambda s: ("status-ok", "status-stopped", "status-bad").index(_status_class(s)))
    out = ["<h2>Trials</h2>"]
    if df.empty:
        out.append('<p class="note">No trial has finished yet: the sweep is running, or was stopped '
                   "before its first result. <code>python -m sweeper status</code> shows the trials "
                   "running; a sweep stopped resumes when run again.</p>")
        return out
    out.append('<table class="counts"><tr><th>status</th><th>trials</th></tr>')
    for s in order:
        out.append(f'<tr><td class="{_status_class(s)}">{e(s)}</td><td class="num">{int(counts[s])}</td></tr>')
    out.append(f'<tr><th>total</th><th class="num">{len(df)}</th></tr></table>')
    n_ok, n_stopped, n_failed = int(finished_ok(df).sum()), int(stopped(df).sum()), int(failed(df).sum())
    parts = [f"{n_ok} ok"]
    if n_stopped:
        parts.append(f"{n_stopped} pruned (stopped early by the search: no failure)")
    parts.append(f"{n_failed} failed")
    out.append(f'<p class="summary">{e(", ".join(parts))}.</p>')
    fixed = fixed_params(df)
    if fixed:
        settings = ", ".join(f"{k}={param_texts([v])[0]}" for k, v in fixed.items())
        out.append(f'<p class="fixed">Fixed in every trial: <code>{e(settings)}</code></p>')
    return out


def _leaderboard_section(df: "pandas.DataFrame", board: "pandas.DataFrame", metric: str | None, mode: str,
                         fixed: dict[str, Any]) -> list[str]:
    """The leaderboard (the fixed settings are said once, above it)."""
    e = html.escape
    if metric is None:
        out = ["<h2>Leaderboard</h2>",
               '<p class="note">The results have no metric column, so the trials cannot be ranked.</p>']
    else:
        out = [f"<h2>Leaderboard: top {len(board)} by {e(metric)} ({e(mode)})</h2>"]
    if df[finished_ok(df)].empty:
        out.append('<p class="note">No trial finished ok: there is nothing to rank.</p>')
    elif board.empty:
        out.append(f'<p class="note">{e(nothing_ranked(df).capitalize())}: there is nothing to rank.</p>')
    else:
        shown = [c for c in board.columns if c not in fixed or c in ("trial", metric)]
        out.append(_table(board[shown], "leaderboard", shown[1 + (metric is not None):]))  # after trial, metric
    return out


def _param_section(df: "pandas.DataFrame", param_plots: list[Any], metric: str | None) -> list[str]:
    """One figure per hyperparameter that varies, or why there is none."""
    e = html.escape
    ok = df[finished_ok(df)]
    out = ["<h2>Metric by hyperparameter</h2>"]
    if not param_columns(df):
        out.append('<p class="note">The results have no hyperparameter column (param_*), so there is nothing to plot.</p>')
    elif ok.empty:
        out.append('<p class="note">No trial finished ok, so there are no hyperparameter plots.</p>')
    elif metric is None:
        out.append('<p class="note">The results have no metric column, so there are no hyperparameter plots.</p>')
    elif not param_plots:
        out.append('<p class="note">Every hyperparameter has one value in every trial, so there is '
                   "nothing to plot.</p>")
    else:
        missing = int(ok[metric].isna().sum())
        if missing:
            out.append(f'<p class="note">{missing} of {len(ok)} ok trials have no {e(metric)} value '
                       "and are left out of the plots.</p>")
        out.append('<div class="plots">')
        for p in param_plots:
            param = p.key[len("param:"):]
            out.append(
                f'<figure><img class="param-plot" data-param="{e(param)}" alt="{e(f"{metric} by {param}")}" '
                f'src="{_data_uri(_png(p.figure))}"><figcaption>{e(p.caption)}</figcaption></figure>'
            )
        out.append("</div>")
    return out


def _importance_section(df: "pandas.DataFrame", metric: str | None, mode: str, objectives: Any) -> list[str]:
    """Which parameters mattered (fANOVA), or why that cannot be told."""
    e = html.escape
    out = ["<h2>Which parameters mattered</h2>"]
    if metric is None:
        out.append('<p class="note">The results have no metric column, so nothing can be compared.</p>')
        return out
    from sweeper.results.importance import METHOD, importance

    each = list(zip(objectives.metrics, objectives.modes)) if objectives is not None else [(metric, mode)]
    for target, how in each:  # several objectives: a table for each
        try:
            imp = importance(df[finished_ok(df)], target, how)
        except SweepError as exc:
            out.append(f'<p class="note">{e(str(exc))}</p>')
            continue
        out.append(f'<p class="note">Each parameter\'s share of the variance of {e(target)}, alone '
                   f"({METHOD}, Optuna's, over {imp.trials} ok trials).</p>")
        out.append(f'<table class="importance" data-metric="{e(target)}"><tr><th>parameter</th><th>share</th></tr>')
        for name, share in imp.shares:
            out.append(f'<tr data-param="{e(name)}"><td>{e(name)}</td><td class="num">{share:.1%}</td></tr>')
        out.append("</table>")
        if imp.left_out:
            out.append(f'<p class="note">Not compared (some trials lack them): {e(", ".join(imp.left_out))}.</p>')
    return out


def _curves_section(df: "pandas.DataFrame", history: "pandas.DataFrame | None", curves: Any,
                    board: "pandas.DataFrame", metric: str | None) -> list[str]:
    """The top trials' learning curves, or why there are none."""
    e = html.escape
    out = ["<h2>Learning curves</h2>"]
    if curves is not None:
        out.append(_figure_html("curves", curves))
    elif history is None:
        out.append('<p class="note">No learning curves: the trials reported no per-epoch history '
                   "(history.csv is missing or empty).</p>")
    elif board.empty:
        out.append(f'<p class="note">No learning curves: {e(nothing_ranked(df))}.</p>')
    else:
        out.append(f'<p class="note">No learning curves: the history has no {e(str(_curves_column(history, metric)))} '
                   "values for the top trials.</p>")
    return out


def _failures_section(df: "pandas.DataFrame", folder: str) -> list[str]:
    """The failed trials with their error and log (pruned trials are none)."""
    e = html.escape
    bad = failures(df, folder)
    out = [f"<h2>Failures ({len(bad)})</h2>"]
    if bad.empty:
        n_stopped = int(stopped(df).sum())
        if n_stopped:
            out.append(f'<p class="note">No trial failed; {n_stopped} were pruned by the search '
                       "(stopped early, which is no failure).</p>")
        else:
            out.append('<p class="note">Every trial finished ok.</p>')
        return out
    out.append('<table class="failures"><tr><th>trial</th><th>status</th><th>error</th><th>log</th></tr>')
    for row in bad.itertuples(index=False):
        href = urllib.parse.quote(paths.trial_log(str(row.trial)))
        out.append(
            f'<tr class="failure"><td>{e(row.trial)}</td><td class="status-bad">{e(row.status)}</td>'
            f"<td>{e(row.error)}</td>"
            f'<td><a href="{e(href)}"><code>{e(row.log)}</code></a></td></tr>'
        )
    out.append("</table>")
    return out


def _table(df: "pandas.DataFrame", cls: str, params: Iterable[str] = ()) -> str:
    """An HTML table; the columns ``params`` hold parameters, shown by :func:`param_texts`."""
    e = html.escape
    numeric = [_is_number_column(df[c]) for c in df.columns]
    rows = [f'<table class="{e(cls)}"><tr>' + "".join(f"<th>{e(str(c))}</th>" for c in df.columns) + "</tr>"]
    shown = [param_texts(df[c]) if c in set(params) else [_fmt(v) for v in df[c]] for c in df.columns]
    for texts in zip(*shown):
        cells = "".join(
            f'<td class="num">{e(text)}</td>' if num else f"<td>{e(text)}</td>"
            for text, num in zip(texts, numeric)
        )
        rows.append(f"<tr>{cells}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


# ---------------------------------------------------------------- figures

#: The colours and marks of the figures: ok trials blue, the best a red star, pruned trials
#: (no failure) a neutral grey with an x where the pruner stopped them; ok trials that miss
#: the constraints hollow grey, and those off a Pareto front grey: drawn, never dropped.
_OK_COLOUR, _BEST_COLOUR, _PRUNED_COLOUR, _PRUNED_LINE = "#1f77b4", "#d62728", "#777", "#bbb"
_GREY = "#9e9e9e"
#: The legend's word for the ok trials that miss the constraints (feasible=False).
_MISSED = "misses the constraints"


def _hollow(ax: Any, xs: Any, ys: Any) -> None:
    """The ok trials that miss the constraints: hollow grey circles, under the others."""
    ax.scatter(xs, ys, s=30, facecolors="none", edgecolors=_GREY, linewidths=1.0, zorder=2,
               label=f"{_MISSED} ({len(xs)})")


def _param_figure(ok: "pandas.DataFrame", col: str, metric: str, mode: str,
                  log: bool) -> tuple["Figure", str, str]:
    """The metric against one hyperparameter over the ok trials (those that miss the
    constraints hollow grey), a word on the axis, and one on the marks."""
    import numpy

    name = col[len("param_"):]
    fig = _figure()
    ax = fig.add_subplot()
    y = ok[metric].to_numpy(dtype=float, na_value=numpy.nan)
    good = ranked(ok).to_numpy()
    if _is_number_column(ok[col]):
        how = _scatter(ax, ok[col].to_numpy(dtype=float, na_value=numpy.nan), y, good, mode, log)
        marks = "red star: the best" + (" that meets them" if not good.all() else "")
    else:
        how = _strip(ax, ok[col], y, good)
        marks = "boxes: the quartiles of the " + ("blue ones" if not good.all() else "trials")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    ax.set_xlabel(name)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by {name}")
    ax.grid(True, alpha=0.3)
    return fig, how, marks


def _scatter(ax: Any, x: Any, y: Any, good: Any, mode: str, log: bool) -> str:
    """Blue dots (the best a red star) and hollow grey ones; ``log``: a search's loguniform
    parameter, or values that span two decades over every trial of the sweep (see :data:`LOG_SCALE`)."""
    import numpy
    from matplotlib.ticker import MaxNLocator

    keep = ~numpy.isnan(x) & ~numpy.isnan(y)
    blue, grey = keep & good, keep & ~good
    if grey.any():
        _hollow(ax, x[grey], y[grey])
    ax.scatter(x[blue], y[blue], s=36, alpha=0.8, color=_OK_COLOUR, edgecolors="white", linewidths=0.5, zorder=3)
    if blue.any():
        i = int(numpy.argmax(y[blue]) if mode == "max" else numpy.argmin(y[blue]))
        ax.scatter([x[blue][i]], [y[blue][i]], s=160, marker="*", color=_BEST_COLOUR, zorder=4, label="best")
    xs = x[keep]
    if log and (xs > 0).any():  # matplotlib's log locators: a tick per decade
        if (xs <= 0).any():  # keep zeros and negatives visible
            ax.set_xscale("symlog", linthresh=float(xs[xs > 0].min()))
            return "symmetric log x axis"
        ax.set_xscale("log")
        return "log x axis"
    distinct = numpy.unique(xs)
    if _tick_each_value(distinct):  # a grid's few round values: one tick each
        ax.set_xticks(distinct)
        ax.set_xticklabels([_short(_fmt(v)) for v in distinct], rotation=30 if distinct.size > 5 else 0)
    else:  # sampled values (or many): a numeric axis with a few round ticks
        whole = bool(distinct.size) and bool(numpy.all(distinct == numpy.round(distinct)))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 5, 10], integer=whole))
    return "linear x axis"


def _tick_each_value(values: Any) -> bool:
    """Whether an axis of these (sorted, distinct) values reads best with one tick per value:
    a few round values, as a grid lists them, far enough apart for their labels. Sampled
    values (0.3745401188...) get a numeric axis instead."""
    import numpy

    if not 0 < values.size <= 8:
        return False
    if not all(float(f"{v:.4g}") == v for v in values):
        return False
    span = float(values[-1] - values[0])
    return values.size == 1 or float(numpy.diff(values).min()) >= span / 12


def _strip(ax: Any, x: "pandas.Series", ys: Any, good: Any) -> str:
    """One column per value: the trials' dots (jittered; hollow grey: those that miss the
    constraints) over a box of the blue ones."""
    import numpy

    labels = [_fmt(v) for v in x]
    cats = list(dict.fromkeys(labels))  # the table's (the grid's) order
    column = numpy.array([cats.index(label) for label in labels], dtype=int)
    shown = ~numpy.isnan(ys)
    crowded = numpy.bincount(column[shown], minlength=len(cats))[column] > 1  # a lone dot stays centred
    xs = column + numpy.where(crowded, numpy.random.default_rng(0).uniform(-0.12, 0.12, len(labels)), 0.0)
    blue, grey = shown & good, shown & ~good
    if grey.any():
        _hollow(ax, xs[grey], ys[grey])
    ax.scatter(xs[blue], ys[blue], s=30, alpha=0.8, color=_OK_COLOUR, edgecolors="white", linewidths=0.5, zorder=3)
    groups = [ys[blue & (column == i)] for i in range(len(cats))]
    positions = [i for i, g in enumerate(groups) if g.size]
    if positions:
        ax.boxplot([groups[i] for i in positions], positions=positions, widths=0.5,
                   showfliers=False, medianprops={"color": _BEST_COLOUR},
                   boxprops={"color": "#888"}, whiskerprops={"color": "#888"}, capprops={"color": "#888"})
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels([_short(c) for c in cats], rotation=30 if len(cats) > 4 else 0,
                       ha="right" if len(cats) > 4 else "center")
    ax.set_xlim(-0.6, len(cats) - 0.4)
    return "one column per value"


def _curve_labels(df: "pandas.DataFrame", trials: Sequence[str]) -> dict[str, str]:
    """Legend labels for these trials (names of ``df["trial"]``), each one different.

    A label is ``name=value`` for each hyperparameter that differs between these trials
    (``lr=0.0012, units=64``; for one trial alone, those that vary in the sweep), floats
    with as few significant digits as keep the labels apart. Where that is not enough (no
    such parameter, or values that print alike), the trial id is added.
    """
    rows: dict[str, dict[str, Any]] = {}
    for record in df.to_dict("records"):
        rows.setdefault(str(record.get("trial")), record)
    trials = [str(t) for t in trials]
    shown = [rows.get(t, {}) for t in trials]
    params = param_columns(df)
    differ = ([c for c in params if len({_exact(r.get(c)) for r in shown}) > 1] if len(trials) > 1
              else varying_params(df))
    labels: dict[str, str] = {}
    for digits in (3, 4, 6, 10, 17):
        labels = {t: ", ".join(f"{c[len('param_'):]}={_value_text(r.get(c), digits)}"
                               for c in differ if not _is_na(r.get(c)))
                  for t, r in zip(trials, shown)}
        if all(labels.values()) and len(set(labels.values())) == len(labels):
            return labels
    seen: dict[str, int] = {}
    for text in labels.values():
        seen[text] = seen.get(text, 0) + 1
    out = {}
    for t, r in zip(trials, shown):
        tid = str(r.get("trial_id", "")) if not _is_na(r.get("trial_id")) else ""
        ident = tid or t
        text = labels[t]
        out[t] = text if text and seen[text] == 1 else (f"{text} ({ident})" if text else ident)
    return out


def _value_text(value: Any, digits: int) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) or _is_numpy_float(value):
        return f"{float(value):.{digits}g}"
    return _short(_fmt(value), 32)


def _curves_figure(history: "pandas.DataFrame", df: "pandas.DataFrame", trials: list[str], column: str,
                   pruned: list[str] | None = None) -> tuple["Figure | None", int]:
    """The top trials' curves (labelled by :func:`_curve_labels`) over the pruned trials'
    (grey, an x where the pruner stopped each); None when no top trial has a value. The
    second item is the number of pruned curves drawn."""
    from matplotlib.lines import Line2D

    fig = _figure()
    ax = fig.add_subplot()
    labels = _curve_labels(df, trials)
    drawn = grey = 0
    for trial in pruned or []:  # under the top trials
        rows = history[history["trial"].astype(str) == trial]
        rows = rows[rows[column].notna()]
        if rows.empty:
            continue
        ax.plot(rows["epoch"], rows[column], color=_PRUNED_LINE, linewidth=0.8, zorder=1)
        ax.plot(rows["epoch"].iloc[-1:], rows[column].iloc[-1:], "x", color=_PRUNED_COLOUR, markersize=6,
                zorder=2)
        grey += 1
    handles = []
    for trial in trials:
        rows = history[history["trial"].astype(str) == trial]
        rows = rows[rows[column].notna()]
        if rows.empty:
            continue
        x = rows["epoch"] if "epoch" in rows.columns else range(1, len(rows) + 1)
        handles += ax.plot(x, rows[column], marker="o", markersize=3, label=labels[trial], zorder=3)
        drawn += 1
    if not drawn:
        return None, 0
    if grey:
        handles.append(Line2D([], [], color=_PRUNED_LINE, marker="x", markeredgecolor=_PRUNED_COLOUR,
                              label=f"pruned ({grey}), x where stopped"))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(column)
    ax.set_title(f"{column} per epoch (top {len(trials)} trials)")
    ax.grid(True, alpha=0.3)
    ax.legend(handles=handles, loc="best", fontsize=8)
    return fig, grey


def _best_so_far_figure(df: "pandas.DataFrame", metric: str, mode: str) -> "Figure":
    """Each trial's metric in the order trials started, ok ones as dots (hollow grey: those
    that miss the constraints), pruned ones as grey crosses (at their last reported value),
    and the best value so far of those a ranking counts as a line."""
    import numpy

    fig = _figure()
    ax = fig.add_subplot()
    order = df.sort_values("started_at", kind="stable") if "started_at" in df.columns else df
    n = numpy.arange(1, len(order) + 1)
    values = order[metric].to_numpy(dtype=float, na_value=numpy.nan)
    is_ok, counted = finished_ok(order).to_numpy(), ranked(order).to_numpy()
    is_pruned = stopped(order).to_numpy()
    ax.scatter(n[counted], values[counted], s=22, color=_OK_COLOUR, label="ok", zorder=3)
    if (is_ok & ~counted).any():
        _hollow(ax, n[is_ok & ~counted], values[is_ok & ~counted])
    if is_pruned.any():
        ax.scatter(n[is_pruned], values[is_pruned], s=22, marker="x", color=_PRUNED_COLOUR, label="pruned",
                   zorder=2)
    best, line = None, []
    for v, good in zip(values, counted):  # the best among the trials a ranking counts
        if good and not math.isnan(v) and (best is None or (v > best if mode == "max" else v < best)):
            best = v
        line.append(numpy.nan if best is None else best)
    ax.step(n, line, where="post", color=_BEST_COLOUR, label=f"best so far ({mode})", zorder=4)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trial 3, never trial 2.5
    ax.set_xlabel("trial, in the order started")
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


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


#: Texts that a reader (or pandas) takes for a missing value, a bool or a number: shown in quotes.
_NOT_BARE = frozenset({"", "none", "null", "nan", "-nan", "na", "n/a", "<na>", "nat", "#n/a", "#na", "#n/a n/a",
                       "-1.#ind", "1.#ind", "-1.#qnan", "1.#qnan", "true", "false"})


def param_texts(values: Iterable[Any]) -> list[str]:
    """A parameter's values as the console shows them, each telling its value exactly: a
    column of plain words bare; else each value as Python writes it (``'None'``, ``''``,
    ``'1'`` for texts, ``None`` for a missing value, ``True``, ``7``, floats by their
    round-trip ``repr``), so that "None" and None, "True" and True, "1" and 1 differ."""
    plain = [None if _is_na(v) else v.item() if hasattr(v, "item") and not isinstance(v, str) else v
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
