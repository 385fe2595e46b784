"""What the console shows while a sweep runs.

* :class:`LiveView` on a terminal: one bar for the sweep (done/total, counts by status,
  elapsed, ETA, best so far) and one line per running trial (device, elapsed, epoch,
  latest metric), drawn by ``rich`` (already a dependency of Keras; it redraws in place
  without flicker and handles terminal width and colours). Finished trials scroll above.
* :class:`PlainLines` anywhere else (CI, ``nohup``, a pipe): one plain line per finished
  trial, no control characters.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import Counter
from typing import Any, Callable

from sweeper.model.metrics import default_metric, direction
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.model.lifecycle import Callback
from sweeper.store.paths import log_tail


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _ago(since: float | None) -> float:
    """Seconds since ``since`` (seconds since the epoch, as another machine told it; never
    negative: its clock may run ahead of ours); 0 for None."""
    return 0.0 if since is None else max(0.0, time.time() - since)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Tally:
    """Counts, durations, the trials running and the best metric so far: what both views
    report. ``done`` of ``to_run``: the trials this run has finished (retries not counted)
    of those it runs."""

    def __init__(self, metric: str | None, mode: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.metric, self.mode = metric, mode
        self.clock = clock
        self.to_run = 0
        self.done = 0
        self.counts: dict[str, int] = {}
        self.durations: list[float] = []
        self.best: TrialResult | None = None
        self.running: dict[str, float] = {}  #: trial id -> when its attempt started
        self.t0 = clock()

    def started(self, spec: TrialSpec, since: float | None = None) -> None:
        self.running[spec.trial_id] = self.clock() - _ago(since)

    def ended(self, result: TrialResult) -> None:
        """An attempt ended (its trial may run again)."""
        self.running.pop(result.trial_id, None)

    def add(self, result: TrialResult) -> None:
        """A trial finished (no retry follows)."""
        self.done += 1
        self.counts[result.status.value] = self.counts.get(result.status.value, 0) + 1
        if result.duration_s is not None:  # (one that never started has none)
            self.durations.append(result.duration_s)
        if not result.ranked or not result.metrics:  # an infeasible trial is never the best
            return
        if self.metric is None:  # none named: as the summary ranks (and says), a validation metric first
            self.metric = (default_metric(result.metrics) or (next(iter(result.metrics)), ""))[0]
        if self.mode is None:
            self.mode = direction(self.metric)
        if self.mode is None:  # its name does not say which way is better: nothing is the best
            return
        value = result.metrics.get(self.metric)
        if value is None or value != value:
            return
        if self.best is None or (value > self.best.metrics[self.metric] if self.mode == "max"
                                 else value < self.best.metrics[self.metric]):
            self.best = result

    def eta(self) -> float | None:
        """Seconds until the last trial ends, as the median finished trial goes: what the
        running trials have left of it, and the queued ones' whole, shared by as many places
        as run now. It counts down as they run; None before any trial finished."""
        if not self.durations:
            return None
        typical, now = statistics.median(self.durations), self.clock()
        queued = max(0, self.to_run - self.done - len(self.running))
        left = sum(max(0.0, typical - (now - t)) for t in self.running.values()) + queued * typical
        return left / max(1, len(self.running))

    def best_text(self) -> str:
        if self.best is None or self.metric is None:
            return ""
        return f"best {self.metric}={_fmt(self.best.metrics[self.metric])} ({self.best.name})"

    def counts_text(self) -> str:
        return ", ".join(f"{self.counts[s.value]} {s.value}" for s in Status if self.counts.get(s.value))


class PlainLines(Callback):
    """One plain line per finished trial on a stream: no control characters, pipe-friendly."""

    def __init__(self, metric: str | None = None, mode: str | None = None, stream: Any = None) -> None:
        self.tally = Tally(metric, mode)
        self.stream = stream or sys.stdout

    def begin(self, to_run: int, total: int) -> None:
        self.tally.to_run = to_run

    def started(self, spec: TrialSpec, since: float | None = None) -> None:
        self.tally.started(spec, since)

    def requeued(self, spec: TrialSpec, why: str) -> None:
        self.tally.running.pop(spec.trial_id, None)  # it waits again: not running, no clock (said in the log)

    def paused(self, spec: TrialSpec, why: str) -> None:
        self.tally.running.pop(spec.trial_id, None)
        print(f"[paused] {spec.name}: {why}", file=self.stream, flush=True)

    def reported(self, spec: TrialSpec, epoch: int, metrics: dict[str, Any]) -> None:
        pass

    def finished(self, result: TrialResult, retrying: bool, kept: bool = True) -> None:
        self.tally.ended(result)
        if not retrying:
            self.tally.add(result)
        print(self.line(result, retrying, kept), file=self.stream, flush=True)
        if not result.status.succeeded and not retrying:
            for line in failure_lines(result):
                print(line, file=self.stream)
            self.stream.flush()

    def line(self, result: TrialResult, retrying: bool, kept: bool = True) -> str:
        """``[2/8]``: trials finished of those this run runs; an attempt that runs again has
        ``[retry]`` and says which attempt comes next instead."""
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in list(result.metrics.items())[:4])
        count = "[retry]" if retrying else f"[{self.tally.done}/{self.tally.to_run}]"
        head = f"{count} {result.status.value:<11} {result.name}"
        tail = f"  {shown}" if shown else f"  {result.error}"
        again = f"  (attempt {result.attempts} failed; attempt {result.attempts + 1} starts)" if retrying else ""
        lost = "" if kept else "  NOT RECORDED: the ledger could not keep it; the next run runs it again"
        ran = "never started" if result.duration_s is None else f"{result.duration_s:.1f}s, {result.device}"
        return f"{head}{tail}  ({ran}){again}{lost}"

    def close(self) -> None:
        pass


def failure_lines(result: TrialResult, lines: int = 4) -> list[str]:
    if result.duration_s is None:  # it never began (it waited in a queue): no process, no log to point at
        return []
    if not os.path.exists(result.log):  # its process never wrote one: never point at nothing
        return ["    no log: its process ended before it wrote one"]
    out = [f"    log: {result.log}"]
    if result.status in (Status.CRASHED, Status.OOM, Status.ERROR, Status.STALLED):  # a stall: where it hung
        out += [f"    | {line}" for line in log_tail(result.log, lines, pid=result.pid)]
    return out


class LiveView(PlainLines):
    """The terminal view, redrawn in place by ``rich``; finished trials scroll above it."""

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__(metric, mode)
        self.console = Console(highlight=False)
        self.running: dict[str, dict[str, Any]] = {}
        self.waiting: dict[str, str] = {}  #: trial id -> why it waits in its backend's queue (Slurm's reason)
        self.live = Live(console=self.console, refresh_per_second=4, transient=True,
                         get_renderable=self._render, redirect_stdout=False, redirect_stderr=False)
        self.live.start()

    def started(self, spec: TrialSpec, since: float | None = None) -> None:
        super().started(spec, since)
        self.waiting.pop(spec.trial_id, None)
        self.running[spec.trial_id] = {"spec": spec, "t0": time.monotonic() - _ago(since), "epoch": None,
                                       "metrics": {}}

    def pending(self, spec: TrialSpec, why: str) -> None:
        self.waiting[spec.trial_id] = why

    def requeued(self, spec: TrialSpec, why: str) -> None:
        super().requeued(spec, why)
        self.running.pop(spec.trial_id, None)

    def paused(self, spec: TrialSpec, why: str) -> None:
        self.running.pop(spec.trial_id, None)
        self.tally.running.pop(spec.trial_id, None)
        self.console.print(f"[paused] {spec.name}: {why}", style="cyan", markup=False, highlight=False)

    def reported(self, spec: TrialSpec, epoch: int, metrics: dict[str, Any]) -> None:
        row = self.running.get(spec.trial_id)
        if row is not None:
            row["epoch"], row["metrics"] = epoch, metrics

    def finished(self, result: TrialResult, retrying: bool, kept: bool = True) -> None:
        self.running.pop(result.trial_id, None)
        self.waiting.pop(result.trial_id, None)
        self.tally.ended(result)
        if not retrying:
            self.tally.add(result)
        style = ("green" if result.ok and kept else "blue" if result.status is Status.PRUNED and kept
                 else "yellow" if retrying else "red")
        self.console.print(self.line(result, retrying, kept), style=style, markup=False, highlight=False)
        if not result.status.succeeded and not retrying:
            for line in failure_lines(result):
                self.console.print(line, markup=False, highlight=False, style="dim")

    def _render(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        t = self.tally
        elapsed = time.monotonic() - t.t0
        eta = t.eta()
        head = Table.grid(padding=(0, 1))
        head.add_row(
            Text("sweep", style="bold"),
            ProgressBar(total=max(1, t.to_run), completed=t.done, width=30),
            Text(f"{t.done}/{t.to_run} done"),
            Text(t.counts_text() or "starting", style="cyan"),
            Text(f"{_duration(elapsed)} elapsed" + (f", ETA {_duration(eta)}" if eta is not None else "")),
        )
        rows: list[Any] = [head]
        best = t.best_text()
        if best:
            rows.append(Text(f"  {best}", style="green"))
        trials = Table.grid(padding=(0, 2))
        for row in self.running.values():
            spec, metrics = row["spec"], row["metrics"]
            latest = next(iter(metrics.items()), None) if t.metric not in metrics else (t.metric, metrics[t.metric])
            trials.add_row(
                Text(f"  {spec.name}"), Text(spec.device, style="magenta"),
                Text(_duration(time.monotonic() - row["t0"])),
                Text(f"epoch {row['epoch']}" if row["epoch"] is not None else ""),
                Text(f"{latest[0]}={_fmt(latest[1])}" if latest else ""),
            )
        rows.append(trials)
        if self.waiting:  # in the backend's queue (Slurm's): how many, and why
            reasons = Counter(self.waiting.values()).most_common()
            rows.append(Text(f"  {len(self.waiting)} waiting in the queue: "
                             + ", ".join(f"{why} ({n})" for why, n in reasons), style="cyan"))
        return Group(*rows)

    def close(self) -> None:
        self.live.stop()


def choose_view(quiet: bool, metric: str | None, mode: str | None) -> PlainLines | None:
    """Live view on a terminal, plain lines elsewhere, nothing with ``quiet``."""
    if quiet:
        return None
    if sys.stdout.isatty():
        return LiveView(metric, mode)
    return PlainLines(metric, mode)
