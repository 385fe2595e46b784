"""Replay a trial: run it again as it ran, and say how far each metric drifts.

``python -m sweeper replay <folder> <trial or id> [--times N] [--tol X]`` (or
:func:`replay`) reads from the sweep's ledger what ran (:func:`record`, written at each
run: the grid file or ``train``, or the command, and the options that decide a slot) and
the trial's parameters and seed, runs it again through the same machinery (same start
method, same seed, determinism as recorded, a CPU slot or a free GPU of the same model)
into a folder of its own beside the sweep (``<folder>-replay/<time>``), never touching the
sweep's rows, then compares: per metric the recorded value, the replayed ones and the
largest drift, and what differs in the environment (:mod:`sweeper.environment`).

::

    ledger of <folder> ──► trials chosen, seed, target, options ──► runner.run (a sweep of
    those points into <folder>-replay/<time>[-k], N times) ──► rows ──► drift per metric
                                                                  └──► environment differences
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import SweepError
from .metrics import finite
from .target import Target, target_of

#: The folder replays go to, beside the sweep's: ``results/digits_mlp-replay``.
SUFFIX = "-replay"
@dataclass(frozen=True)
class Drift:
    """One metric of one trial: what was recorded, what each replay gave, the largest
    difference, and whether it lies within the tolerance."""

    metric: str
    recorded: float
    replayed: tuple[float | None, ...]  #: None: the replay did not give it (or not a number)

    def drift(self) -> float:
        """The largest absolute difference (inf where a replay gave no number)."""
        return max((math.inf if v is None else abs(v - self.recorded) for v in self.replayed), default=math.inf)

    def relative(self) -> float:
        d = self.drift()
        return 0.0 if d == 0 else (d / abs(self.recorded) if self.recorded else math.inf)

    def within(self, tol: float) -> bool:
        """Within ``tol``, absolutely or relatively (0: exactly the same number)."""
        d = self.drift()
        return d <= tol or (math.isfinite(d) and self.relative() <= tol)


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
        found = [r for r in rows if name in (r.name, r.trial_id) or fnmatch.fnmatchcase(r.name, name)]
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


def replay(folder: str, names: Sequence[str] = (), every: bool = False, times: int = 1,
           deterministic: bool | None = None, quiet: bool = True) -> list[Replay]:
    """Replay the named trials of the sweep in ``folder`` (see the module docstring)
    ``times`` times each; ``deterministic``: None as the sweep ran, True or False to change it."""
    from .folder import sweep_folder
    from .ledger import Ledger

    if not isinstance(times, int) or isinstance(times, bool) or times < 1:
        raise SweepError(f"--times must be a whole number >= 1, got {times!r}")
    folder = sweep_folder(folder)
    ledger = Ledger(folder, readonly=True)
    try:
        current = ledger.current()
        results = ledger.results() if current is None else current
        definition = json.loads(ledger.get("definition") or "{}")
        recorded_target = ledger.get("target")
        sweep_env = json.loads(ledger.get("environment") or "{}")
    finally:
        ledger.close()
    rows = chosen(results, names, every)
    if not recorded_target:
        raise SweepError(f"{folder} was run by a sweeper that did not record how to run its trials again; run the "
                         "sweep once with this version (its rows are kept, nothing trains again), then replay")
    recorded = json.loads(recorded_target)
    source = definition.get("source") or ""
    target = target_of(recorded, source)
    kept = recorded.get("options", {})
    if deterministic is not None:
        kept["deterministic"] = deterministic
    runs = _runs(folder, target, rows, kept, definition, sweep_env, times, quiet)
    out = []
    for row in rows:
        replays = [run[1].get(row.trial_id) for run in runs]
        drifts = tuple(Drift(m, float(v), tuple(_number(r, m) for r in replays))
                       for m, v in row.metrics.items() if finite(v) is not None)
        said: list[str] = []
        if sweep_env:
            from . import environment

            for run_env, r in ((run[2], rep) for run, rep in zip(runs, replays)):
                if r is None:
                    continue
                said += [d for d in environment.differences(
                    environment.flat(sweep_env, row.env, row.gpu_uuid),
                    environment.flat(run_env, r.env, r.gpu_uuid)) if d not in said]
        else:
            said.append("the sweep recorded no environment (run by an earlier sweeper): nothing to compare")
        out.append(Replay(row.name, row.trial_id, row.device,
                          tuple(r.status.value if r is not None else "not run" for r in replays),
                          tuple(r.error for r in replays if r is not None and r.error),
                          drifts, tuple(said), tuple(run[0] for run in runs)))
    return out


def _number(result: Any, metric: str) -> float | None:
    return None if result is None or not result.ok else finite(result.metrics.get(metric))


def _runs(folder: str, target: Target, rows: list[Any], kept: dict[str, Any], definition: dict[str, Any],
          sweep_env: dict[str, Any], times: int, quiet: bool) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Run the rows' points ``times`` times, each time a sweep of its own beside the
    sweep's folder; per run its folder, its rows by trial id and its environment."""
    from . import runner
    from .grid import Points
    from .ledger import Ledger
    from .options import Options
    from .progress import choose_view

    out_root = os.path.abspath(folder.rstrip(os.sep)) + SUFFIX
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
    runs = []
    for k in range(times):
        name = stamp if times == 1 else f"{stamp}-{k + 1}"
        opts = Options.build({**{f: getattr(options, f) for f in Options.names()}, "name": name})
        listener = None if quiet else choose_view(False, None, None)
        try:
            outcome = runner.run(target, Points([dict(r.params) for r in rows]), opts, default_name=name,
                                 source_file=definition.get("source") or None, listener=listener, what=what)
        finally:
            if listener is not None:
                listener.close()
        ledger = Ledger(outcome.folder, readonly=True)
        try:
            env = json.loads(ledger.get("environment") or "{}")
        finally:
            ledger.close()
        runs.append((outcome.folder, {r.trial_id: r for r in outcome.results}, env))
    return runs


def _gpus_like(rows: list[Any], sweep_env: dict[str, Any]) -> Any:
    """Where the replay runs: on the CPU where the trials ran there; else on the free GPUs
    of the model(s) they ran on, or any free GPU where none of those is here (the
    replay's differences then name the model)."""
    if not any(r.device.startswith("gpu") for r in rows):
        return "none"
    from . import gpus

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
            table.append((r.trial, d.metric, f"{d.recorded:.10g}", replayed, _g(d.drift()), _pct(d.relative()),
                          "ok" if d.within(tol) else "DRIFT"))
        if not r.drifts:
            table.append((r.trial, "(no metric)", "", "", "", "", ""))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out = ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    for r in replays:
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
