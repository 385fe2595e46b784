"""Read a finished (or interrupted) sweep folder back and summarise it.

A sweep folder ``<out>/<name>/`` holds ``ledger.sqlite`` (the record of every trial and
its per-epoch reports), ``results.csv`` and ``history.csv`` derived from it, and
``trials/<trial>/log.txt``. This module reads it back and writes ``report.html`` (what it
says of the rows, :mod:`sweeper.results.query` decides; its figures, :mod:`sweeper.results.plots`): one self-contained page (inline CSS, images as ``data:``
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

import html
import os
import urllib.parse
from typing import TYPE_CHECKING, Any, Iterable

from sweeper.errors import SweepError
from sweeper.model.trial import Status
from sweeper.results import schedules
from sweeper.results.plots import Plot, curves_column, data_uri, make_plots, png_bytes
from sweeper.results.query import (
    LOG_SCALE,
    STATUSES,
    TOP,
    choose,
    failed,
    failures,
    finished_ok,
    fixed_params,
    fmt_value,
    is_number_column,
    leaderboard,
    nothing_ranked,
    param_texts,
    status_of,
    stopped,
    unranked,
)
from sweeper.results.reading import read_folder
from sweeper.store import paths
from sweeper.store.paths import SweepPaths
from sweeper.store.table import param_columns

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure


_NEED_MPL = "the report needs matplotlib: pip install matplotlib"


# ---------------------------------------------------------------- the table


# ---------------------------------------------------------------- reading a folder


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

    Args:
        folder: the sweep's folder, ``<out>/<name>`` (read as ``load()`` reads it).
        metric: the metric to plot (by default, what the sweep ranked by).
        mode: ``"min"`` or ``"max"``, for a metric whose direction sweeper does not know.

    Returns:
        ``param:<name>`` for each hyperparameter that takes more than one value (table order),
        ``progress`` (a search's best so far), ``curves`` (the top trials' learning curves) and
        ``memory`` (peak GPU memory against reservation, ``per_gpu="auto"``), each only where
        the report has it.

    Raises:
        SweepError: no sweep folder there, or matplotlib is not installed (saying how).

    Example:
        A file ``figs.py``::

            import sweeper
            import sweeper.analysis

            def train(params):
                for epoch in range(1, 3):
                    sweeper.report(epoch=epoch, loss=params["lr"] / epoch)
                return {"loss": params["lr"] / 2}

            if __name__ == "__main__":
                sweeper.sweep(train, {"lr": [0.1, 0.01], "units": [16, 64]}, metric="loss", progress=False)
                figures = sweeper.analysis.figures("results/figs")
                print(sorted(figures))
                figures["param:lr"].savefig("lr.png")

        ``python figs.py`` prints::

            ['curves', 'param:lr', 'param:units']
    """
    folder = os.fspath(folder)
    df, history, searched = read_folder(folder)
    need_matplotlib()
    metric, mode = choose(df, metric, mode)
    return {p.key: p.figure for p in _plots(folder, df, history, metric, mode, searched)[0]}


def _plots(folder: str, df: "pandas.DataFrame", history: "pandas.DataFrame | None", metric: str | None,
           mode: Any, searched: bool) -> tuple[list[Plot], bool]:
    """The page's figures, and whether the sweep is population-based (its figures then by member:
    :func:`sweeper.results.schedules.shown`)."""
    plots = make_plots(df, history, metric, mode, searched)
    try:
        found = schedules.read(folder)
    except Exception:  # noqa: BLE001 - a folder of results.csv alone: no schedules
        found = {}
    return (schedules.shown(plots, found, history, curves_column(history, metric)), True) if found else (plots, False)


def need_matplotlib() -> None:
    """Raises SweepError (one line naming the install command) where matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401  (only to fail early with a clear message)
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise SweepError(_NEED_MPL) from None


def _front_section(df: "pandas.DataFrame", objectives: Any, plot: Plot | None, fixed: Any) -> list[str]:
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
        out.append(f'<figure><img class="pareto-plot" alt="{e(plot.caption)}" src="{data_uri(png_bytes(plot.figure))}">'
                   f"<figcaption>{e(plot.caption)}</figcaption></figure>")
    elif len(objectives.metrics) > 2:
        out.append(f'<p class="note">{len(objectives.metrics)} objectives: no plot (it is drawn for two).</p>')
    return out


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
    s = status_of(status)
    if s is Status.OK:
        return "status-ok"
    return "status-stopped" if s is not None and s.succeeded else "status-bad"


def _page(folder: str, df: "pandas.DataFrame", history: "pandas.DataFrame | None",
          metric: str | None, mode: str | None, searched: bool = False) -> str:
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
    plots, population = _plots(folder, df, history, metric, mode, searched)
    by_key = {p.key: p for p in plots}
    board = leaderboard(df, metric, mode, TOP)
    out += _leaderboard_section(df, board, metric, mode, fixed)
    objectives = df.attrs.get("objectives")
    if objectives is not None:
        out += _front_section(df, objectives, by_key.get("pareto"), fixed)
    out += (["<h2>Metric by hyperparameter</h2>", f'<p class="note">{e(schedules.NO_PARAM_PLOTS)}</p>'] if population
            else _param_section(df, [p for p in plots if p.key.startswith("param:")], metric))
    out += _importance_section(df, metric, mode, objectives)
    if "progress" in by_key:  # a search: the best so far, trial after trial
        out += ["<h2>Search progress</h2>", _figure_html("best-so-far", by_key["progress"])]
    out += _curves_section(df, history, by_key.get("curves"), board, metric)
    out += _schedule_section(folder, df)
    if "memory" in by_key:  # a packed sweep: what each trial took of what it was given
        out += ["<h2>GPU memory</h2>", _figure_html("memory", by_key["memory"])]
    out += _failures_section(df, folder)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _figure_html(css: str, plot: Any) -> str:
    """One figure of the page, its caption as its alt text too."""
    e = html.escape
    return (f'<figure><img class="{css}" alt="{e(plot.caption)}" src="{data_uri(png_bytes(plot.figure))}">'
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


def _leaderboard_section(df: "pandas.DataFrame", board: "pandas.DataFrame", metric: str | None,
                         mode: str | None, fixed: dict[str, Any]) -> list[str]:
    """The leaderboard (the fixed settings are said once, above it); with no mode, the first
    trials in grid order, none ranked, and how to rank them."""
    e = html.escape
    if metric is None:
        out = ["<h2>Leaderboard</h2>",
               '<p class="note">The results have no metric column, so the trials cannot be ranked.</p>']
    elif mode is None:
        out = [f"<h2>Leaderboard: not ranked (first {len(board)} trials, in grid order)</h2>",
               f'<p class="note">{e(unranked(metric)[0].upper() + unranked(metric)[1:])}.</p>']
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
                f'src="{data_uri(png_bytes(p.figure))}"><figcaption>{e(p.caption)}</figcaption></figure>'
            )
        out.append("</div>")
    return out


def _importance_section(df: "pandas.DataFrame", metric: str | None, mode: str | None,
                        objectives: Any) -> list[str]:
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
        out.append(f'<p class="note">No learning curves: the history has no {e(str(curves_column(history, metric)))} '
                   "values for the top trials.</p>")
    return out


def _schedule_section(folder: str, df: "pandas.DataFrame") -> list[str]:
    """Population-based training: each member's parameters against epochs, and its lineage."""
    try:
        found = schedules.read(folder)
    except Exception:  # noqa: BLE001 - a folder of results.csv alone: no schedules to show
        return []
    if not found:
        return []
    e = html.escape
    names = dict(zip(df["trial_id"], df["trial"]))
    last = {tid: int(v) for tid, v in zip(df["trial_id"], df.get("epoch_reached", [])) if v == v and v is not None}
    out = ["<h2>Population-based training</h2>"]
    fig = schedules.figure(found, names, last, set(df.attrs.get(LOG_SCALE, ())))
    if fig is not None:
        out.append(_figure_html("schedule", Plot("schedule", fig, "each member's parameters against epochs; x: "
                                                 "it copied another member's checkpoint there")))
    out.append("<pre>" + e("\n".join(line.strip() for line in schedules.lines(found, names))) + "</pre>")
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
    numeric = [is_number_column(df[c]) for c in df.columns]
    rows = [f'<table class="{e(cls)}"><tr>' + "".join(f"<th>{e(str(c))}</th>" for c in df.columns) + "</tr>"]
    shown = [param_texts(df[c]) if c in set(params) else [fmt_value(v) for v in df[c]] for c in df.columns]
    for texts in zip(*shown):
        cells = "".join(
            f'<td class="num">{e(text)}</td>' if num else f"<td>{e(text)}</td>"
            for text, num in zip(texts, numeric)
        )
        rows.append(f"<tr>{cells}</tr>")
    rows.append("</table>")
    return "\n".join(rows)
