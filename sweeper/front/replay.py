"""Replay a trial: run it again as it ran, and say how far each metric drifts.

``python -m sweeper replay <folder> <trial or id> [--times N] [--tol X]`` (or
:func:`replay`) reads from the sweep's ledger what ran (:func:`record`, written at each
run: the grid file or ``train``, or the command, and the options that decide a slot) and
the trial's parameters and seed, runs it again through the same machinery (same start
method, same seed, determinism as recorded, a CPU slot or a free GPU of the same model)
into a folder of its own beside the sweep (``<folder>-replay/<time>``), never touching the
sweep's rows, then compares: per metric the recorded value, the replayed ones and the
largest drift, and what differs in the environment (:mod:`sweeper.system.environment`).

::

    ledger of <folder> ──► trials chosen, seed, target, options ──► run_shown (a sweep of
    those points into <folder>-replay/<time>[-k], N times) ──► rows ──► drift per metric
                                                                  └──► environment differences
"""

from __future__ import annotations

import fnmatch
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from sweeper.errors import SweepError
from sweeper.model.target import Target, target_of

#: The folder replays go to, beside the sweep's: ``results/digits_mlp-replay``.
SUFFIX = "-replay"
@dataclass(frozen=True)
class Drift:
    """One metric of one trial: what was recorded, what each replay gave, the largest
    difference, and whether it lies within the tolerance. A recorded NaN or infinity is
    matched only by the same; a metric the row lacks (one only the replay gave) never is."""

    metric: str
    recorded: float | None  #: None: the row has no such metric (the replay gave it)
    replayed: tuple[float | None, ...]  #: None: the replay did not give it (or not a number)

    def drift(self) -> float:
        """The largest absolute difference (inf where one side has no number, or a
        non-finite value the other does not share; 0 where both are the same NaN or inf)."""
        return max((_apart(self.recorded, v) for v in self.replayed), default=math.inf)

    def relative(self) -> float:
        d = self.drift()
        if d == 0:
            return 0.0
        return d / abs(self.recorded) if self.recorded and math.isfinite(self.recorded) else math.inf

    def within(self, tol: float) -> bool:
        """Within ``tol``, absolutely or relatively (0: exactly the same number)."""
        d = self.drift()
        return d <= tol or (math.isfinite(d) and self.relative() <= tol)


def _apart(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if math.isinf(a) or math.isinf(b):
        return 0.0 if a == b else math.inf
    return abs(b - a)


def drifts(recorded: dict[str, Any], replays: Sequence[Any]) -> tuple[Drift, ...]:
    """Each numeric metric of the row against the replays', then those only the replays gave."""
    out = [Drift(m, float(v), tuple(_number(r, m) for r in replays))
           for m, v in recorded.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    extra: dict[str, None] = {}
    for r in replays:
        for m in (r.metrics if r is not None and r.ok else {}):
            if m not in recorded:
                extra.setdefault(m, None)
    return tuple(out) + tuple(Drift(m, None, tuple(_number(r, m) for r in replays)) for m in extra)


@dataclass(frozen=True)
class Replay:
    """A trial replayed: its drifts, the replays' statuses, what differs in the environment."""

    trial: str
    trial_id: str
    device: str  #: where it ran in the sweep
    statuses: tuple[str, ...]  #: each replay's status
    errors: tuple[str, ...]
    drifts: tuple[Drift, ...]
    differences: tuple[str, ...] = ()  #: environment, recorded -> replayed
    folders: tuple[str, ...] = field(default=())
    job: str = ""  #: the batch scheduler's job it ran as in the sweep (Slurm's ``123_4``), if it did

    def within(self, tol: float) -> bool:
        return all(s == "ok" for s in self.statuses) and all(d.within(tol) for d in self.drifts)


def chosen(results: dict[str, Any], names: Sequence[str], every: bool) -> list[Any]:
    """The rows to replay: named (by name, id, or a pattern such as ``lr=0_01*``), or every
    ok one; refused in one line when none matches or a named one has no numbers to compare."""
    rows = sorted(results.values(), key=lambda r: r.index)
    if every:
        picked = [r for r in rows if r.ok]
        if not picked:
            raise SweepError("no ok trial to replay: replay compares the metrics of trials that finished ok")
        return picked
    if not names:
        raise SweepError("name the trial to replay (its name or id, as in results.csv), or give --all")
    picked = []
    for name in names:
        found = [r for r in rows if name in (r.name, r.trial_id) or fnmatch.fnmatchcase(r.name, name)
                 or fnmatch.fnmatchcase(r.trial_id, name)]
        if not found:
            import difflib

            near = difflib.get_close_matches(name, [r.name for r in rows], n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; the trials are in {len(rows)} rows of results.csv"
            raise SweepError(f"no trial {name!r} in this sweep{hint}")
        for r in found:
            if not r.ok:
                raise SweepError(f"trial {r.name} is {r.status.value}, with no final metrics to compare; replay "
                                 "an ok trial")
            if r not in picked:
                picked.append(r)
    return picked


#: What a row that predates the record of its run is compared with: nothing.
UNKNOWN = ("what this trial ran on was not recorded (its row predates that record): the code, packages and "
           "settings it ran with are unknown, so it replays with the sweep's last run's")


def replay(folder: str, names: Sequence[str] = (), every: bool = False, times: int = 1,
           deterministic: bool | None = None, quiet: bool = True) -> list[Replay]:
    """Replay the named trials of the sweep in ``folder`` (see the module docstring)
    ``times`` times each; ``deterministic``: None as each ran, True or False to change it.

    Each row names the run that made it (``env["run"]``), whose record (``run:<id>`` in
    the ledger: its environment, and how to run its trials) the replay follows, so a later
    run of the sweep with other code or options changes nothing about an earlier row's replay."""
    from sweeper.child.bootstrap import check_not_in_a_trial_bootstrap
    from sweeper.store.folder import sweep_folder

    check_not_in_a_trial_bootstrap()  # a script without a __main__ guard, re-imported by a spawned trial
    if not isinstance(times, int) or isinstance(times, bool) or times < 1:
        raise SweepError(f"--times must be a whole number >= 1, got {times!r}")
    folder = sweep_folder(folder)
    results, definition, last, runs = _recorded(folder)
    from sweeper.model.trial import trial_seed
    from sweeper.results.schedules import effective, read

    schedules = read(folder)
    rows = chosen(results, names, every)
    groups: dict[str, list[Any]] = {}
    for row in rows:  # one replay sweep per run the rows came from; a scheduled member on its own
        rid = row.env.get("run", "")
        key = rid if runs.get(rid) else ""
        groups.setdefault(f"{key}\0{row.trial_id}" if row.trial_id in schedules else key, []).append(row)
    done: dict[str, Replay] = {}
    for group_key, group in groups.items():
        rid, _, scheduled = group_key.partition("\0")
        record = runs[rid] if rid else last
        if not record.get("target"):
            raise SweepError(f"{folder} was run by a sweeper that did not record how to run its trials again, so "
                             "they cannot be replayed as they ran")
        source = (record.get("environment", {}).get("code") or {}).get("path") or definition.get("source") or ""
        target = target_of(record["target"], source)
        kept = dict(record["target"].get("options", {}))
        if not rid:  # no record of its run: the row says whether it ran deterministically
            kept["deterministic"] = any(r.deterministic for r in group)
        if deterministic is not None:
            kept["deterministic"] = deterministic
        env = record.get("environment") or {}
        # a population-based member: its model's segments from its very start, lineage followed
        # back, each with the seed of the member whose process trained it
        seed = int(definition.get("seed", kept.get("seed", 0)) or 0)
        followed = [(epoch, params, trial_seed(seed, by)) for epoch, params, by in effective(schedules, scheduled)] \
            if scheduled else None
        made = _runs(folder, target, group, kept, definition, env, times, quiet, source, followed)
        done.update((row.trial_id, _replayed(row, made, env if rid else None)) for row in group)
    return [done[r.trial_id] for r in rows]


def _recorded(folder: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What a replay takes from the sweep's ledger: its rows, its definition, the last
    run's target and environment, and the record of each run its rows came from."""
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        current = ledger.current()
        results = ledger.results() if current is None else current
        facts = ledger.facts()
        definition = facts.definition
        last = {"target": facts.target, "environment": facts.environment}
        runs = {rid: ledger.run_record(rid) for rid in {r.env.get("run") for r in results.values()} if rid}
    finally:
        ledger.close()
    return results, definition, last, runs


def _replayed(row: Any, made: list[Any], env: dict[str, Any] | None) -> "Replay":
    """One row's replay: its runs' statuses, errors and drifts, and what differed from
    where it ran (``env``, its run's recorded environment; None where none was recorded)."""
    replays = [run[1].get(row.trial_id) for run in made]
    said: list[str] = [UNKNOWN] if env is None else []
    if env is not None:
        from sweeper.system import environment

        for run_env, r in ((run[2], rep) for run, rep in zip(made, replays)):
            if r is not None:
                said += [d for d in environment.differences(
                    environment.flat(env, row.env, row.gpu_uuid),
                    environment.flat(run_env, r.env, r.gpu_uuid)) if d not in said]
    return Replay(row.name, row.trial_id, row.device,
                  tuple(r.status.value if r is not None else "not run" for r in replays),
                  tuple(r.error for r in replays if r is not None and r.error),
                  drifts(row.metrics, replays), tuple(said), tuple(run[0] for run in made), row.job_id)


def _number(result: Any, metric: str) -> float | None:
    if result is None or not result.ok:
        return None
    value = result.metrics.get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _runs(folder: str, target: Target, rows: list[Any], kept: dict[str, Any], definition: dict[str, Any],
          sweep_env: dict[str, Any], times: int, quiet: bool, source: str = "",
          followed: list[Any] | None = None) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Run the rows' points ``times`` times, each time a sweep of its own in a new folder
    beside the sweep's, from the folder the sweep ran in where it still exists (a command's
    relative paths, a grid file's data files); per run its folder, its rows by trial id and
    its environment. ``followed``: the one row's schedule, which its replay follows, its
    parameters changing after the epochs it says (population-based training)."""
    import contextlib
    import tempfile

    from sweeper.model.definition import Definition
    from sweeper.model.grid import Points
    from sweeper.model.options import Options
    from sweeper.front.shown import run_shown
    from sweeper.store.ledger import Ledger

    out_root = os.path.abspath(folder.rstrip(os.sep)) + SUFFIX
    os.makedirs(out_root, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    gpus = _gpus_like(rows, sweep_env)
    on_gpu = gpus != "none"
    per_gpu = kept.get("per_gpu") if on_gpu else None
    options = Options.build({
        "out": out_root, "seed": definition.get("seed", kept.get("seed", 0)), "gpus": gpus,
        "start_method": kept.get("start_method", "forkserver"), "deterministic": bool(kept.get("deterministic")),
        "per_gpu": None if per_gpu == "auto" else per_gpu,
        "memory_fraction": kept.get("memory_fraction") if on_gpu else None,
        "memory_growth": bool(kept.get("memory_growth")) and on_gpu, "timeout": kept.get("timeout"),
        "stall": kept.get("stall"), "progress": not quiet}, where="the sweep's record")
    what = definition.get("what") or ""
    cwd = sweep_env.get("cwd")
    runs = []
    for _ in range(times):
        # a folder no other replay has: two in the same second never share one (nor its rows)
        name = os.path.basename(tempfile.mkdtemp(prefix=f"{stamp}-", dir=out_root))
        opts = Options.build({**{f: getattr(options, f) for f in Options.names()}, "name": name})
        with contextlib.chdir(cwd) if cwd and os.path.isdir(cwd) else contextlib.nullcontext():
            points = Points([dict(followed[0][1])] if followed else [dict(r.params) for r in rows])
            again = Definition(target, opts, points, None, source or None, what, name,
                               schedules=(followed,) if followed else None,
                               names=(rows[0].name,) if followed else None)  # member_2, as in the sweep
            outcome = run_shown(again, closing=False)  # the view unless quiet (progress); the drift said after
        ledger = Ledger(outcome.folder, readonly=True)
        try:
            env = ledger.facts().environment
        finally:
            ledger.close()
        got = {r.trial_id: r for r in outcome.results}
        if followed:  # its one trial, whatever id its first parameters give it, is the row's
            got = {rows[0].trial_id: outcome.results[0]} if outcome.results else {}
        runs.append((os.path.abspath(outcome.folder), got, env))
    return runs


def _gpus_like(rows: list[Any], sweep_env: dict[str, Any]) -> Any:
    """Where the replay runs: on the CPU where the trials ran there; else on the free GPUs
    of the model(s) they ran on, or any free GPU where none of those is here (the
    replay's differences then name the model)."""
    if not any(r.device.startswith("gpu") for r in rows):
        return "none"
    from sweeper.system import gpus

    models = {(sweep_env.get("gpus") or {}).get(r.gpu_uuid) for r in rows if r.gpu_uuid}
    same = [g.index for g in gpus.inventory() if g.name in models and g.others_mb < gpus.FREE_THRESHOLD_MB]
    return same or "free"


def lines(replays: Sequence[Replay], tol: float, times: int) -> list[str]:
    """The console's account: a table of trial, metric, recorded, replayed, drift; then
    the environment's differences and the verdict."""
    table = [("trial", "metric", "recorded", "replayed" if times == 1 else f"replayed ({times} times)",
              "drift", "relative", "")]
    for r in replays:
        for d in r.drifts:
            replayed = " ".join("-" if v is None else f"{v:.10g}" for v in d.replayed)
            recorded = "-" if d.recorded is None else f"{d.recorded:.10g}"
            table.append((r.trial, d.metric, recorded, replayed, _g(d.drift()), _pct(d.relative()),
                          "ok" if d.within(tol) else "DRIFT"))
        if not r.drifts:
            table.append((r.trial, "(no metric)", "", "", "", "", ""))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out = ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    for r in replays:
        if r.job:  # it ran on a cluster's node; the replay runs on this machine
            out.append(f"sweeper: {r.trial}: ran as job {r.job} on {r.device}; replayed on this machine")
        bad = [s for s in r.statuses if s != "ok"]
        if bad:
            out.append(f"sweeper: {r.trial}: {len(bad)} of {len(r.statuses)} replays did not end ok ({', '.join(bad)})"
                       + (f": {r.errors[0].splitlines()[0]}" if r.errors else ""))
        if r.differences:
            out.append(f"sweeper: {r.trial}: what differs from when it ran:")
            out += [f"  {d}" for d in r.differences]
        else:
            out.append(f"sweeper: {r.trial}: the environment is the same as when it ran")
    tolerance = "0 (exact)" if tol == 0 else f"{tol:g}"
    drifted = [(r, d) for r in replays for d in r.drifts if not d.within(tol)]
    failed = [r for r in replays if any(s != "ok" for s in r.statuses)]
    if drifted or failed:
        words = [f"{r.trial} {d.metric} by {_g(d.drift())}" for r, d in drifted[:5]]
        out.append(f"sweeper: {len(drifted)} metric{'s' if len(drifted) != 1 else ''} drifted beyond the tolerance "
                   f"{tolerance}" + (f": {'; '.join(words)}" if words else "")
                   + (f"; {len(failed)} trial{'s' if len(failed) != 1 else ''} did not replay ok" if failed else ""))
    else:
        n = sum(len(r.drifts) for r in replays)
        out.append(f"sweeper: every metric ({n}) of {len(replays)} trial{'s' if len(replays) != 1 else ''} replayed "
                   f"within the tolerance {tolerance}")
    if replays and replays[0].folders:
        where = os.path.dirname(replays[0].folders[0])
        shown = os.path.relpath(where)
        out.append(f"sweeper: replays in {where if shown.startswith('..') else shown}")
    return out


def _g(value: float) -> str:
    return "none" if math.isinf(value) else f"{value:.3g}"


def _pct(value: float) -> str:
    return "" if math.isinf(value) else "0" if value == 0 else f"{value:.3%}"
