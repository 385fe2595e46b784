"""A sweep as a front door shows it on the console: the live view while it runs
(:mod:`sweeper.front.progress`, told as the sweep's outputs are), then the closing summary.

Every front door runs a sweep through :func:`run_shown`: ``sweep()`` (:mod:`sweeper.api`), the
command line (:mod:`sweeper.front.cli`), the Hydra launcher (:mod:`sweeper.front.hydra.launcher`)
and a replay (:mod:`sweeper.front.replay`); each says only how it differs (its own words for the
options, who says the summary, its grid reader's tag and fork server). The run itself
(:func:`sweeper.run.runner.run`) shows nothing: the view attaches to it as a listener.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from sweeper.errors import SweepError
from sweeper.front.progress import choose_view
from sweeper.model.metrics import default_metric, direction
from sweeper.model.trial import Status
from sweeper.run import runner
from sweeper.store import table

if TYPE_CHECKING:
    from sweeper.backends.local.server import ForkServer
    from sweeper.model.definition import Definition
    from sweeper.run.runner import Outcome


def run_shown(definition: Definition, words: Callable[[str], str] = str, closing: bool | None = None, *,
              quiet: bool | None = None, tag: str | None = None, early: ForkServer | None = None,
              table: bool = True) -> Outcome:
    """:func:`sweeper.run.runner.run` as a front end shows it: the live view (plain lines where
    no terminal; none where ``quiet``, which is ``progress=False`` unless said), then the
    closing summary (its lines through ``words``: a front end's own names for the options;
    ``closing``: whether it is said now, as ``progress`` says unless told: False where the
    front end says it later). A dry run shows neither. ``tag``, ``early``: the command line's;
    ``table``: False where neither the summary nor the table is read after (:func:`sweeper.run.runner.run`)."""
    opts = definition.options
    quiet = not opts.progress if quiet is None else quiet
    listener = None if opts.dry_run else choose_view(quiet, opts.ranked_by, opts.ranked_mode)
    try:
        outcome = runner.run(definition, listener=listener, tag=tag, early=early, table=table)
    finally:
        if listener is not None:
            listener.close()
    if (opts.progress if closing is None else closing) and not opts.dry_run:
        for line in summary(outcome, opts.ranked_by, opts.ranked_mode):
            print(words(line), flush=True)
    return outcome


def summary(outcome: Outcome, metric: str | None, mode: str | None) -> list[str]:
    """The closing lines: counts, the top 5 with their parameters, failures, where the CSV is."""
    from sweeper.results import query

    counts = outcome.counts()
    parts = ", ".join(f"{counts[s.value]} {s.value}" for s in Status if counts[s.value])
    lines = [f"sweeper: {len(outcome.results)} of {len(outcome.specs)} trials on record: {parts or 'none'}"
             f" ({outcome.ran} run this time, {outcome.elapsed_s:.1f}s)"]
    lines += [f"sweeper: note: {n}" for n in outcome.notes]
    if outcome.results:
        frame = table.dataframe(outcome.results, outcome.objectives)
        picked = metric is None
        try:
            metric, mode = query.choose(frame, metric, mode)
        except SweepError as exc:  # a metric no trial has (yet): nothing to rank by
            if query.metric_columns(frame):
                lines.append(f"sweeper: {exc}")
            metric = None
        if picked and metric is not None:
            lines += picked_lines(query.metric_columns(frame), mode)
        if metric is not None and mode is None:  # a direction never guessed: listed, not ranked
            lines.append(f"sweeper: {query.unranked(metric)}")
        if metric is not None:
            lines += ["sweeper: " + line if i == 0 else line
                      for i, line in enumerate(query.leaderboard_lines(frame, metric, mode))]
            infeasible = int((frame["feasible"] == False).sum()) if "feasible" in frame else 0  # noqa: E712
            if infeasible:
                lines.append(f"sweeper: {infeasible} ok trial{'s' if infeasible > 1 else ''} did not meet the "
                             "constraints (feasible=False): not ranked")
            missing = int(frame.loc[frame.status == "ok", metric].isna().sum())
            if missing and mode is not None:
                lines.append(f"sweeper: {missing} ok trial{'s' if missing > 1 else ''} had a NaN {metric}, "
                             "ranked last")
        if outcome.objectives is not None:
            lines += ["sweeper: " + line if i == 0 else line for i, line in enumerate(outcome.objectives.lines(frame))]
        failed = [r for r in outcome.results if not r.status.succeeded]
        if failed:
            lines.append(f"sweeper: {len(failed)} not ok:")
            for r in failed:
                first = r.error.splitlines()[0] if r.error else ""
                lines.append(f"  {r.status.value:<11} {r.name}: {first}")
                if os.path.exists(r.log):  # never a path to nothing
                    lines.append(f"  {'':<11} log: {r.log}")
    if outcome.csv_path not in {path for path, _ in outcome.unwritten}:
        lines.append(f"sweeper: results: {outcome.csv_path}")
    lines += [f"sweeper: {hint}" for hint in outcome.shown]
    return lines + unwritten_lines(outcome)


def picked_lines(metrics: list[str], mode: str | None) -> list[str]:
    """With no metric named and several to choose from: which one ranks, which way, why and
    how to choose another (:func:`sweeper.model.metrics.default_metric`). One whose direction its
    name does not tell ranks nothing (:func:`sweeper.results.query.unranked` says so)."""
    picked = default_metric(metrics)
    if picked is None or len(metrics) < 2 or direction(picked[0]) is None:
        return []
    return [f"sweeper: ranking by {picked[0]} ({mode}), {picked[1]}; give --metric/--mode (metric=, mode=) "
            "to choose another"]


def unwritten_lines(outcome: Outcome) -> list[str]:
    """The last words when a table file could not be written: the sweep failed, its rows did not."""
    return [f"sweeper: FAILED: could not write {path} ({why}); every row is in the ledger: "
            f"python -m sweeper status {outcome.folder} or sweeper.load({outcome.folder!r}) shows them, and "
            "running the sweep again once the file can be written rewrites it" for path, why in outcome.unwritten]
