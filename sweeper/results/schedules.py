"""Population-based training's schedules read back (the ledger's ``schedule`` table): each
member's parameters against epochs and its lineage, as lines for ``status`` and as a figure
for the report (:mod:`sweeper.results.report`), with its members' learning curves by member
in place of the figures that draw a metric by a parameter's one value, and each member's
effective schedule, its lineage followed back, for ``replay`` (:mod:`sweeper.front.replay`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

#: A member's schedule as the ledger keeps it: (epoch, the parameters from after it, the trial copied then).
Schedule = list[tuple[int, dict[str, Any], str]]


def read(folder: str) -> dict[str, Schedule]:
    """The sweep's schedules by trial id ({} for a sweep without population-based training)."""
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        return ledger.schedule()
    finally:
        ledger.close()


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def lines(schedules: Mapping[str, Schedule], names: Mapping[str, str]) -> list[str]:
    """A line per member: its first parameters, then each change with its epoch and, at a copy,
    the member it copied (``names``: trial id -> name)."""
    out = []
    every = [p for segments in schedules.values() for _, p, _ in segments]
    keys = list(dict.fromkeys(k for p in every for k in p))
    varying = [k for k in keys if len({repr(p.get(k)) for p in every}) > 1] or keys  # what the population explores
    for tid, segments in sorted(schedules.items(), key=lambda kv: names.get(kv[0], kv[0])):
        first = segments[0][1]
        parts = [", ".join(f"{k} {_shown(first.get(k))}" for k in varying)]
        before = first
        for epoch, params, copied in segments[1:]:
            if params == before and not copied:  # a segment that goes on as it was (a pause)
                continue
            before = params
            change = ", ".join(f"{k} {_shown(params.get(k))}" for k in varying)
            source = f" (copied {names.get(copied, copied)})" if copied else ""
            parts.append(f"from epoch {epoch + 1}: {change}{source}")
        start = f" (a copy of {names.get(segments[0][2], segments[0][2])} at epoch {segments[0][0]})" \
            if segments[0][2] else ""
        out.append(f"  {names.get(tid, tid)}{start}: " + "; ".join(parts))
    return out


def effective(schedules: Mapping[str, Schedule], trial_id: str, before: int | None = None) -> Schedule:
    """The segments a member's model trained in, from its very start (epochs up to
    ``before``): its lineage followed back, since before a copy at epoch e the model was the
    copied member's; as (epoch, params from after it, the member whose process trained
    from there: whose seed it drew, :func:`~sweeper.model.trial.segment_seed`)."""
    out: Schedule = []
    for epoch, params, source in schedules.get(trial_id, []):
        if before is not None and epoch >= before:
            break
        if source:  # up to here, the model was the copied member's (each step back is earlier)
            out = effective(schedules, source, epoch)
        out.append((epoch, params, trial_id))
    return out


def figure(schedules: Mapping[str, Schedule], names: Mapping[str, str], last: Mapping[str, int],
           log: set[str] | frozenset[str] = frozenset()) -> "Figure | None":
    """Each numeric parameter against epochs, a step line per member (``last``: its last epoch,
    where its line ends); a cross where it copied another."""
    keys: list[str] = []
    for segments in schedules.values():
        for _, params, _ in segments:
            keys += [k for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                     and k not in keys]
    keys = [k for k in keys if len({s[1].get(k) for segs in schedules.values() for s in segs}) > 1]
    if not keys:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 2.6 * len(keys)), layout="constrained")
    axes = fig.subplots(len(keys), 1, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys):
        for tid, segments in sorted(schedules.items(), key=lambda kv: names.get(kv[0], kv[0])):
            xs: list[float] = []
            ys: list[Any] = []
            end = last.get(tid, segments[-1][0] + 1)
            for i, (epoch, params, copied) in enumerate(segments):
                until = segments[i + 1][0] if i + 1 < len(segments) else end
                xs += [epoch, until]
                ys += [params.get(key), params.get(key)]
                if copied:
                    ax.plot([epoch], [params.get(key)], "x", color="black", markersize=6)
            ax.plot(xs, ys, drawstyle="steps-post", label=names.get(tid, tid), linewidth=1.2)
        ax.set_ylabel(key)
        if key in log:
            ax.set_yscale("log")
    axes[-1].set_xlabel("epoch")
    axes[0].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))  # beside, not over, the lines
    return fig


#: What a population-based sweep's report says where another sweep's draws a metric by parameter.
NO_PARAM_PLOTS = ("Population-based training: each member's parameters changed as it trained (its schedule is "
                  "drawn below), so no member's metric is drawn against one value of a parameter.")


def shown(plots: list[Any], schedules: Mapping[str, Schedule], history: "pandas.DataFrame | None",
          column: str | None) -> list[Any]:
    """A population-based sweep's report figures (:func:`sweeper.results.plots.make_plots`'):
    none that draws a member against one value of a parameter (it trained with a schedule),
    and the learning curves of every member, labelled by member, a cross at each copy."""
    from sweeper.results.plots import Plot

    kept = [p for p in plots if not p.key.startswith("param:") and p.key != "curves"]
    fig = curves(history, column, schedules) if history is not None and column else None
    if fig is not None:
        kept.append(Plot("curves", fig, f"{column} per epoch of each member, by member (its parameters changed as "
                                        "it trained: see its schedule); x: the first epoch after it copied "
                                        "another member's checkpoint"))
    return kept


def curves(history: "pandas.DataFrame", column: str, schedules: Mapping[str, Schedule]) -> "Figure | None":
    """Each member's curve of ``column`` against epochs, labelled by its name; a cross at the
    first epoch after each copy it took (its lineage)."""
    from matplotlib.figure import Figure

    rows = history.dropna(subset=[column])
    if rows.empty:
        return None
    fig = Figure(figsize=(6.4, 3.8), layout="constrained")
    ax = fig.subplots()
    for (tid, name), part in rows.groupby(["trial_id", "trial"], sort=False):
        ax.plot(part["epoch"], part[column], marker="o", markersize=3, linewidth=1.2, label=str(name))
        after = {epoch + 1 for epoch, _, copied in schedules.get(str(tid), []) if copied}
        at = part[part["epoch"].isin(after)]
        ax.plot(at["epoch"], at[column], "x", color="black", markersize=7, zorder=4)
    ax.set_xlabel("epoch")
    ax.set_ylabel(column)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig
