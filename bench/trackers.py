"""Trackers against no tracker: the same instant trials with and without ``--tensorboard`` / ``--mlflow`` /
``--optuna``.

    python bench/trackers.py                  # 3,000 trials, 3 repeats (~15 min on 2 cores)
    python bench/trackers.py --quick          # 500 trials, 1 repeat (~2 min)
    python bench/trackers.py --n 1000 --repeats 5 --out /tmp/trackers.json
    python bench/trackers.py --only plain,--optuna --repeats 4   # the Optuna study alone

Each run is ``sweeper.sweep(trials.noop, {"x": range(n)})`` (bench/trials.py: a trial that
returns at once; default workers, no progress display, a fresh folder), in a fresh
driver process (this file with ``--run``), timed from just before ``sweep()`` to its
return: the trackers' end included (the sweep waits for the last outcomes to be sent).
Configurations: plain, ``tensorboard=True``, ``mlflow=True`` (the local SQLite store in
the sweep folder), both, and ``optuna=True`` (the journal file in the sweep folder; with
``mode="max"``, as an Optuna study needs a direction and the trials' one number, ``t_start``,
does not say it). They are interleaved within a repeat, the order rotating per
repeat, to spread the noise of a shared machine; figures are medians over repeats.

Columns: wall s (median), vs plain (median wall / plain's median wall), of which end wait
(the sweep's wait for its trackers' last outcomes, as its debug line says), CPU s (median
user+sys of the driver and every process it waited for: the engine, the trials, the
trackers' process; less noisy than wall on a shared machine), of which trackers (the
trackers' process's own, as it reports it in a debug line), and per tracker the trials
it shows by the sweep's end, read back after it with each tool's own reader (TensorBoard:
runs with a session end, by its event multiplexer; MLflow: trial runs that ended, by its
client; Optuna: trials that ended, by ``optuna.load_study`` on the journal), the fewest over repeats. A sweep that left some unsent says so in one line,
naming the export that finishes them: shown in the last column (the count of runs with one).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = {"plain": {}, "--tensorboard": {"tensorboard": True}, "--mlflow": {"mlflow": True},
           "--tensorboard --mlflow": {"tensorboard": True, "mlflow": True}, "--optuna": {"optuna": True, "mode": "max"}}


# -- one run (a fresh driver process) --------------------------------------------------------

def _cpu() -> float:
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def run_one(config: str, n: int) -> dict[str, Any]:
    """One sweep; its wall and CPU time, and what each tracker shows by its end."""
    import io
    import logging

    import sweeper
    import trials

    options = CONFIGS[config]
    said = io.StringIO()
    handler = logging.StreamHandler(said)
    logging.getLogger("sweeper").addHandler(handler)  # the application's handler: sweeper adds none
    logging.getLogger("sweeper").setLevel(logging.DEBUG)  # the trackers' process's CPU time
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-trackers-") as out:
        cpu0, t0 = _cpu(), time.perf_counter()
        frame = sweeper.sweep(trials.noop, {"x": list(range(n))}, out=out, name="bench", progress=False,
                              fresh=True, **options)
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
        folder = os.path.join(out, "bench")
        result: dict[str, Any] = {"config": config, "n": n, "wall_s": wall, "cpu_s": cpu,
                                  "n_ok": int((frame.status == "ok").sum())}
        if options.get("tensorboard"):
            result["tensorboard_shown"] = tensorboard_shown(folder)
        if options.get("mlflow"):
            result["mlflow_shown"] = mlflow_shown(folder)
        if options.get("optuna"):
            result["optuna_shown"] = optuna_shown(folder)
    lines = said.getvalue().splitlines()
    result["export_lines"] = [ln for ln in lines if "export" in ln]
    result["trackers_cpu_s"] = next((float(ln.split("used ")[1].split(" s")[0]) for ln in lines
                                     if "their process used" in ln), None)
    result["end_wait_s"] = next((float(ln.split("waited ")[1].split(" s")[0]) for ln in lines
                                 if "the sweep waited" in ln), None)
    return result


def tensorboard_shown(folder: str) -> int:
    """Trials whose session ended, as TensorBoard's event multiplexer reads the folder."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import metadata

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(os.path.join(folder, "tensorboard"))
    mux.Reload()
    content = mux.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    return sum(1 for tags in content.values() if metadata.SESSION_END_INFO_TAG in tags)


def mlflow_shown(folder: str) -> int:
    """Trial runs that ended (not RUNNING), as MLflow's client finds them."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{os.path.join(folder, 'mlflow.db')}")
    experiment = client.get_experiment_by_name("bench")
    if experiment is None:
        return 0
    ended, token = 0, None
    while True:
        page = client.search_runs([experiment.experiment_id], max_results=1000, page_token=token)
        ended += sum(1 for r in page if "mlflow.parentRunId" in r.data.tags and r.info.status != "RUNNING")
        token = page.token
        if not token:
            return ended


def optuna_shown(folder: str) -> int:
    """Trials that ended, as Optuna reads the sweep's journal (each trial's latest attempt)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(os.path.join(folder, "optuna.journal")))
    study = optuna.load_study(study_name="bench", storage=storage)
    return len({t.user_attrs.get("trial_id") for t in study.get_trials(deepcopy=False) if t.state.is_finished()})


# -- the harness -------------------------------------------------------------------------------

def measure(config: str, n: int, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--run={config}", "--n", str(n),
                               "--result", path], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            return {"config": config, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
        with open(path) as f:
            return json.load(f)
    except subprocess.TimeoutExpired:
        return {"config": config, "error": f"timed out after {timeout:.0f}s"}
    finally:
        os.unlink(path)


def table(results: dict[str, list[dict[str, Any]]], n: int) -> str:
    ok = {c: [r for r in rs if "error" not in r] for c, rs in results.items()}
    plain = statistics.median(r["wall_s"] for r in ok["plain"]) if ok.get("plain") else None
    head = ["trackers", "wall s", "vs plain", "of which end wait", "CPU s", "of which trackers",
            "TensorBoard shows", "MLflow shows", "Optuna shows", "export line"]
    rows = []
    for config, runs in ok.items():
        if not runs:
            rows.append([config, "-", "-", "-", "-", "-", "-", "-", "-",
                         "; ".join(str(r.get("error")) for r in results[config])])
            continue
        wall = statistics.median(r["wall_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        theirs = [r["trackers_cpu_s"] for r in runs if r.get("trackers_cpu_s") is not None]
        waits = [r["end_wait_s"] for r in runs if r.get("end_wait_s") is not None]
        shown = []
        for key in ("tensorboard_shown", "mlflow_shown", "optuna_shown"):
            got = [r[key] for r in runs if key in r]
            shown.append(f"{min(got):,}/{n:,}" if got else "-")
        said = sum(1 for r in runs if r.get("export_lines"))
        rows.append([config, f"{wall:.1f}", f"{wall / plain:.2f}x" if plain else "-",
                     f"{statistics.median(waits):.1f}" if waits else "-", f"{cpu:.1f}",
                     f"{statistics.median(theirs):.1f}" if theirs else "-", *shown,
                     f"{said} of {len(runs)} runs"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [head, *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 trials, 1 repeat")
    ap.add_argument("--n", type=int, help="instant trials per sweep (default 3000, quick 500)")
    ap.add_argument("--repeats", type=int, help="repeats (default 3, quick 1); medians are shown")
    ap.add_argument("--only", help="comma-separated configurations among: " + ", ".join(CONFIGS))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "trackers.json"), help="JSON of every run")
    ap.add_argument("--run", help=argparse.SUPPRESS)  # a driver: one run of this configuration
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.n or (500 if args.quick else 3000)
    if args.run:
        with open(args.result, "w") as f:
            json.dump(run_one(args.run, n), f)
        return 0
    repeats = args.repeats or (1 if args.quick else 3)
    configs = [c.strip() for c in args.only.split(",")] if args.only else list(CONFIGS)
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown configuration(s) {bad}; choose among {', '.join(CONFIGS)}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, ROOT, *filter(None, [env.get("PYTHONPATH")])])
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    started = time.time()
    for rep in range(repeats):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for config in order:
            r = measure(config, n, timeout=max(600.0, n * 0.5), env=env)
            results[config].append(r)
            print(f"[{rep + 1}/{repeats}] {config}: " + (f"{r['wall_s']:.1f} s" if "wall_s" in r else str(r)),
                  file=sys.stderr, flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"n": n, "repeats": repeats, "cpus": os.cpu_count(), "runs": results,
                   "elapsed_s": time.time() - started}, f, indent=1)
    print(f"\ntrackers: {n:,} instant trials (bench/trials.py noop), default workers, {os.cpu_count()} CPUs; "
          f"medians of {repeats} repeat(s)\n")
    print(table(results, n))
    print(f"\nfigures: {args.out}; took {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
