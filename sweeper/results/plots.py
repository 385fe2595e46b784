"""The report's figures, drawn with matplotlib: the metric against each parameter that
varies, the best so far, the Pareto front, learning curves, memory; as PNG bytes for the
page (:mod:`sweeper.results.report`). matplotlib is imported by the functions that draw.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import math
from typing import TYPE_CHECKING, Any, Sequence

from sweeper.results.query import (
    LOG_SCALE,
    TOP,
    exact_text,
    finished_ok,
    fmt_value,
    history_metrics,
    is_na,
    is_number_column,
    is_numpy_float,
    leaderboard,
    ranked,
    shorten,
    stopped,
    varying_params,
)
from sweeper.results.studies import spans_decades
from sweeper.store.table import param_columns

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure


#: The colours and marks of the figures: ok trials blue, the best a red star, pruned trials
#: (no failure) a neutral grey with an x where the pruner stopped them; ok trials that miss
#: the constraints hollow grey, and those off a Pareto front grey: drawn, never dropped.
_OK_COLOUR, _BEST_COLOUR, _PRUNED_COLOUR, _PRUNED_LINE = "#1f77b4", "#d62728", "#777", "#bbb"


@dataclasses.dataclass
class Plot:
    key: str  #: ``param:<name>``, ``progress``, ``curves``, ``pareto`` or ``memory``
    figure: "Figure"
    caption: str


def make_plots(df: "pandas.DataFrame", history: "pandas.DataFrame | None", metric: str | None, mode: str | None,
           searched: bool) -> list[Plot]:
    """Every figure of the page, in its order (the page says why one is missing). Each caption
    says which trials the figure shows and which of them are grey."""
    ok = df[finished_ok(df)]
    out: list[Plot] = []
    if metric is not None and not ok.empty:
        for col in varying_params(df):
            name = col[len("param_"):]
            log = name in df.attrs.get(LOG_SCALE, ()) or spans_decades(df[col])
            fig, how, marks = _param_figure(ok, col, metric, mode, log)
            out.append(Plot(f"param:{name}", fig, f"{metric} by {name} ({how}): {_drawn(ok, metric)}; {marks}"))
        if searched and mode is not None:
            out.append(Plot("progress", _best_so_far_figure(df, metric, mode), _progress_caption(df, metric)))
    curves = _curves_plot(df, history, metric, mode)
    if curves is not None:
        out.append(curves)
    front = _pareto_figure(df)
    if front is not None:
        out.append(front)
    memory = _memory_figure(df)
    if memory is not None:
        out.append(Plot("memory", memory, "each trial with a peak and a reservation (per_gpu auto): its peak GPU "
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
                 mode: str | None) -> Plot | None:
    """The learning curves of the top trials (no mode: the first, none ranked), the pruned ones grey under them."""
    board = leaderboard(df, metric, mode, TOP)
    column = curves_column(history, metric)
    if history is None or column is None or board.empty:
        return None
    trials = [str(t) for t in board["trial"]]
    pruned = [str(t) for t in df.loc[stopped(df), "trial"]]
    curves, grey = _curves_figure(history, df, trials, column, pruned)
    if curves is None:
        return None
    caption = (f"{column} per epoch of the first {len(trials)} trials (not ranked)" if metric and mode is None
               else f"{column} per epoch of the top {len(trials)} trials" + (f" by {metric}" if metric else ""))
    if "feasible" in df.columns:
        caption += " among those that meet the constraints"
    if grey:
        caption += f"; grey: the {grey} pruned trials, x where each was stopped"
    return Plot("curves", curves, caption)


def _pareto_figure(df: "pandas.DataFrame") -> Plot | None:
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
    return Plot("pareto", fig, caption)


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


def curves_column(history: "pandas.DataFrame | None", metric: str | None) -> str | None:
    if history is None:
        return None
    metrics = history_metrics(history)
    return metric if metric in metrics else (metrics[0] if metrics else None)


_GREY = "#9e9e9e"


#: The legend's word for the ok trials that miss the constraints (feasible=False).
_MISSED = "misses the constraints"


def _hollow(ax: Any, xs: Any, ys: Any) -> None:
    """The ok trials that miss the constraints: hollow grey circles, under the others."""
    ax.scatter(xs, ys, s=30, facecolors="none", edgecolors=_GREY, linewidths=1.0, zorder=2,
               label=f"{_MISSED} ({len(xs)})")


def _param_figure(ok: "pandas.DataFrame", col: str, metric: str, mode: str | None,
                  log: bool) -> tuple["Figure", str, str]:
    """The metric against one hyperparameter over the ok trials (those that miss the
    constraints hollow grey), a word on the axis, and one on the marks."""
    import numpy

    name = col[len("param_"):]
    fig = _figure()
    ax = fig.add_subplot()
    y = ok[metric].to_numpy(dtype=float, na_value=numpy.nan)
    good = ranked(ok).to_numpy()
    if is_number_column(ok[col]):
        how = _scatter(ax, ok[col].to_numpy(dtype=float, na_value=numpy.nan), y, good, mode, log)
        marks = "red star: the best" + (" that meets them" if not good.all() else "") if mode else "no best marked"
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


def _scatter(ax: Any, x: Any, y: Any, good: Any, mode: str | None, log: bool) -> str:
    """Blue dots (the best a red star, where ``mode`` tells it) and hollow grey ones; ``log``: a search's
    loguniform parameter, or values that span two decades over every trial of the sweep (see :data:`LOG_SCALE`)."""
    import numpy
    from matplotlib.ticker import MaxNLocator

    keep = ~numpy.isnan(x) & ~numpy.isnan(y)
    blue, grey = keep & good, keep & ~good
    if grey.any():
        _hollow(ax, x[grey], y[grey])
    ax.scatter(x[blue], y[blue], s=36, alpha=0.8, color=_OK_COLOUR, edgecolors="white", linewidths=0.5, zorder=3)
    if blue.any() and mode is not None:
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
        ax.set_xticklabels([shorten(fmt_value(v)) for v in distinct], rotation=30 if distinct.size > 5 else 0)
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

    labels = [fmt_value(v) for v in x]
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
    ax.set_xticklabels([shorten(c) for c in cats], rotation=30 if len(cats) > 4 else 0,
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
    differ = ([c for c in params if len({exact_text(r.get(c)) for r in shown}) > 1] if len(trials) > 1
              else varying_params(df))
    labels: dict[str, str] = {}
    for digits in (3, 4, 6, 10, 17):
        labels = {t: ", ".join(f"{c[len('param_'):]}={_value_text(r.get(c), digits)}"
                               for c in differ if not is_na(r.get(c)))
                  for t, r in zip(trials, shown)}
        if all(labels.values()) and len(set(labels.values())) == len(labels):
            return labels
    seen: dict[str, int] = {}
    for text in labels.values():
        seen[text] = seen.get(text, 0) + 1
    out = {}
    for t, r in zip(trials, shown):
        tid = str(r.get("trial_id", "")) if not is_na(r.get("trial_id")) else ""
        ident = tid or t
        text = labels[t]
        out[t] = text if text and seen[text] == 1 else (f"{text} ({ident})" if text else ident)
    return out


def _value_text(value: Any, digits: int) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) or is_numpy_float(value):
        return f"{float(value):.{digits}g}"
    return shorten(fmt_value(value), 32)


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
    ax.set_title(f"{column} per epoch ({len(trials)} trials)")
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


def png_bytes(fig: "Figure") -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    fig.clear()
    return buf.getvalue()


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
