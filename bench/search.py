"""Benchmark of the adaptive search: what pruning saves, and memory over many trials.

    python bench/search.py              # full (~10 min on 2 cores): part a on seeds 0,1,2
    python bench/search.py --quick      # about 3 min: fewer trials, seed 0
    python bench/search.py --only a --seeds 0,1,2,3,4

a  compute to a good model, on the digits MLP of experiments/digits_mlp.py (the space of
   experiments/digits_search.py, 20 epochs fixed): random search with no pruning against
   TPE + ASHA, the same number of trials, the same seed, 2 workers. Per method: epochs
   trained (sum of epoch_reached), wall time, best val_accuracy among ok trials, trials
   pruned. The issue's target: TPE + ASHA's best within 0.005 of the full run's best with
   at most 40% of its epochs (checked per seed, as measured).
b  memory over trials: Optuna's own study.optimize training small Keras MLPs (digits,
   3 epochs) in one process, against sweeper running the same search (TPE, no pruning,
   1 worker), each trial a fresh process. RSS (psutil) of the in-process optimizer after
   every 5th trial, once as users usually write it and once with keras.backend.clear_session()
   after each trial; for sweeper the parent's RSS seen by each trial at its end, the
   trial's own RSS at its end and its peak (ru_maxrss).

Every measured run is a fresh ``python bench/search.py --role ...`` process under a
timeout (its process tree is ended if it runs over), so each RSS is its own and nothing
imported by one run is warm for the next. Sweeps write to a temporary folder; the figures
also go to bench/out/search.json. Only the standard library is imported at the top:
spawned trials re-import this file as ``__mp_main__``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXPERIMENTS = os.path.join(ROOT, "experiments")
for _p in (ROOT, EXPERIMENTS):  # sweeper, and digits_mlp (the model); trials inherit sys.path
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # every run the same; keeps trial logs small

EPOCHS_A = 20  #: epochs of a digits trial in a (what pruning can save)
EPOCHS_B = 3  #: epochs of a small trial in b (memory: many short trials)
TARGET_BEST = 0.005  #: the issue: best within this of the full run's best ...
TARGET_EPOCHS = 0.40  #: ... with at most this share of its epochs
MB = 1024 * 1024


# -- trials (run in spawned processes: imports inside) --------------------------------------

def train_digits(params: dict[str, Any]) -> dict[str, float]:
    """Part a's trial: experiments/digits_mlp.py's model, per-epoch reports for the pruner."""
    import sweeper.keras
    from digits_mlp import build_model, load_data

    x_train, x_val, y_train, y_val = load_data()
    model = build_model(params["units"], params["lr"])
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=params["epochs"],
                        batch_size=params["batch_size"], verbose=0, callbacks=[sweeper.keras.Report()])
    return {"val_accuracy": float(history.history["val_accuracy"][-1]),
            "val_loss": float(history.history["val_loss"][-1])}


def fit_small(params: dict[str, Any]) -> float:
    """Part b's work, the same in both runs: a Dense MLP on digits, a few epochs; val_accuracy."""
    from digits_mlp import build_model, load_data

    x_train, x_val, y_train, y_val = load_data()
    model = build_model(params["units"], params["lr"])
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=params["epochs"],
                        batch_size=params["batch_size"], verbose=0)
    return float(history.history["val_accuracy"][-1])


def train_small(params: dict[str, Any]) -> dict[str, float]:
    """Part b's sweeper trial: fit_small, then its own RSS now and at peak, and its parent's RSS."""
    import resource

    import psutil

    value = fit_small(params)
    parent = os.getppid()
    return {"val_accuracy": value,
            "rss_mb": psutil.Process().memory_info().rss / MB,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "parent_rss_mb": psutil.Process(parent).memory_info().rss / MB,
            "parent_is_sweep": float(str(parent) == os.environ.get("BENCH_SWEEP_PID"))}


def space_a() -> dict[str, Any]:
    import sweeper

    return {"lr": sweeper.loguniform(1e-4, 1e-1), "units": [16, 32, 64, 128], "batch_size": [32, 64, 128],
            "epochs": EPOCHS_A}


def space_b() -> dict[str, Any]:
    import sweeper

    return {"lr": sweeper.loguniform(1e-4, 1e-1), "units": [16, 32, 64, 128], "batch_size": [32, 64, 128],
            "epochs": EPOCHS_B}


# -- roles: one measured run each, in its own process ----------------------------------------

def role_sweep_a(spec: dict[str, Any]) -> dict[str, Any]:
    """One sweep of part a; its figures."""
    import sweeper

    t0 = time.perf_counter()
    frame = sweeper.sweep(train_digits, space_a(), search=spec["search"], prune=spec["prune"],
                          trials=spec["trials"], seed=spec["seed"], workers=2, metric="val_accuracy", mode="max",
                          out=spec["out"], name=spec["name"], progress=False)
    wall = time.perf_counter() - t0
    ok = frame[frame.status == "ok"]
    return {"wall_s": wall, "trials": len(frame), "epochs": int(frame.epoch_reached.fillna(0).sum()),
            "best": float(ok.val_accuracy.max()) if len(ok) else None,
            "pruned": int((frame.status == "pruned").sum()), "ok": len(ok),
            "other": int((~frame.status.isin(["ok", "pruned"])).sum()),
            "pruned_at": sorted(int(e) for e in frame.loc[frame.status == "pruned", "epoch_reached"].dropna())}


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / MB


def role_optuna(spec: dict[str, Any]) -> dict[str, Any]:
    """Part b in one process: Optuna's study.optimize, RSS after each trial."""
    import resource

    import keras
    import optuna

    from digits_mlp import load_data

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    load_data()  # what the trials import and read, loaded before the baseline
    before = _rss_mb()
    rss: list[float] = []

    def objective(trial: Any) -> float:
        params = {"lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
                  "units": trial.suggest_categorical("units", [16, 32, 64, 128]),
                  "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128]), "epochs": EPOCHS_B}
        value = fit_small(params)
        if spec["clear"]:
            import gc

            keras.backend.clear_session()
            gc.collect()
        return value

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=spec["seed"]))
    t0 = time.perf_counter()
    study.optimize(objective, n_trials=spec["trials"], callbacks=[lambda s, t: rss.append(_rss_mb())])
    return {"wall_s": time.perf_counter() - t0, "before_mb": before, "rss_mb": rss,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "best": study.best_value}


def role_sweep_b(spec: dict[str, Any]) -> dict[str, Any]:
    """Part b through sweeper: the same search, each trial a fresh process, 1 worker."""
    import resource

    import sweeper

    os.environ["BENCH_SWEEP_PID"] = str(os.getpid())  # trials check that their parent is this process
    before = _rss_mb()
    t0 = time.perf_counter()
    frame = sweeper.sweep(train_small, space_b(), search="tpe", prune=None, trials=spec["trials"],
                          seed=spec["seed"], workers=1, metric="val_accuracy", mode="max", out=spec["out"],
                          name="b_sweeper", progress=False)
    wall = time.perf_counter() - t0
    frame = frame.sort_values("started_at")  # 1 worker: start order is finish order
    ok = frame[frame.status == "ok"]
    return {"wall_s": wall, "before_mb": before, "after_mb": _rss_mb(),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "ok": len(ok), "trials": len(frame),
            "parent_rss_mb": [float(x) for x in frame.parent_rss_mb],
            "trial_rss_mb": [float(x) for x in frame.rss_mb], "trial_peak_mb": [float(x) for x in frame.peak_mb],
            "parent_is_sweep": bool(ok.parent_is_sweep.min() == 1.0) if len(ok) else False,
            "best": float(ok.val_accuracy.max()) if len(ok) else None}


ROLES = {"sweep_a": role_sweep_a, "optuna": role_optuna, "sweep_b": role_sweep_b}


def role_main(role: str, spec_path: str, result_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    result = ROLES[role](spec)
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


# -- the harness -----------------------------------------------------------------------------

def run_role(role: str, spec: dict[str, Any], tmp: str, timeout_s: float, label: str) -> dict[str, Any] | None:
    """``role`` in a fresh process of this file; its result, or None (said why) if it failed or ran over."""
    import psutil

    tag = f"{role}-{len(os.listdir(tmp))}"
    spec_path, result_path, log_path = (os.path.join(tmp, f"{tag}.{x}") for x in ("spec.json", "json", "log"))
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    print(f"  {label} ...", end="", flush=True)
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", role, spec_path, result_path],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            for p in tree:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            proc.wait()
            rc = None
    took = time.perf_counter() - t0
    if rc != 0 or not os.path.exists(result_path):
        why = f"ran over {timeout_s:.0f}s, killed" if rc is None else f"exit {rc}"
        print(f" FAILED ({why}, {took:.0f}s); log: {log_path}", flush=True)
        with open(log_path) as f:
            print("    " + "\n    ".join(f.read().splitlines()[-15:]))
        return None
    print(f" {took:.0f}s", flush=True)
    with open(result_path) as f:
        return json.load(f)


def part_a(seeds: list[int], trials: int, tmp: str) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": seeds, "trials": trials, "runs": {"random": [], "tpe+asha": []}}
    for seed in seeds:
        for method, search, prune in (("random", "random", None), ("tpe+asha", "tpe", "asha")):
            spec = {"search": search, "prune": prune, "trials": trials, "seed": seed, "out": tmp,
                    "name": f"a_{search}_{prune}_s{seed}"}
            res = run_role("sweep_a", spec, tmp, 120 + trials * 40, f"a  {method:<8} seed {seed}, {trials} trials")
            out["runs"][method].append(res)
    return out


def part_b(trials: int, tmp: str, seed: int = 0) -> dict[str, Any]:
    timeout = 120 + trials * 30
    return {"trials": trials,
            "optuna": run_role("optuna", {"trials": trials, "seed": seed, "clear": False}, tmp, timeout,
                               f"b  optuna in-process, {trials} trials"),
            "optuna_clear": run_role("optuna", {"trials": trials, "seed": seed, "clear": True}, tmp, timeout,
                                     f"b  optuna in-process + clear_session, {trials} trials"),
            "sweeper": run_role("sweep_b", {"trials": trials, "seed": seed, "out": tmp}, tmp, timeout,
                                f"b  sweeper, 1 worker, {trials} trials")}


# -- the table -------------------------------------------------------------------------------

def _f(fmt: str, x: Any) -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "-"


def _med(xs: list[Any]) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def _each(fmt: str, xs: list[Any]) -> str:
    """The median, and each seed's figure in brackets when there are several."""
    if len(xs) <= 1:
        return _f(fmt, xs[0] if xs else None)
    return f"{_f(fmt, _med(xs))} ({' '.join(_f(fmt, x) for x in xs)})"


def rows_a(a: dict[str, Any]) -> list[list[str]]:
    rows = []
    full, fast = a["runs"]["random"], a["runs"]["tpe+asha"]
    n = a["trials"]
    for label, runs in (("random, no pruning", full), ("tpe + asha", fast)):
        got = [r or {} for r in runs]
        rows.append(["a", label, "epochs trained", _each("{:.0f}", [r.get("epochs") for r in got])])
        rows.append(["a", label, "wall s", _each("{:.1f}", [r.get("wall_s") for r in got])])
        rows.append(["a", label, "best val_accuracy (ok)", _each("{:.4f}", [r.get("best") for r in got])])
        rows.append(["a", label, f"pruned of {n}", _each("{:.0f}", [r.get("pruned") for r in got])])
        if any(r.get("other") for r in got):
            rows.append(["a", label, "neither ok nor pruned (!)", _each("{:.0f}", [r.get("other") for r in got])])
        if label == "tpe + asha":
            at = [" ".join(str(e) for e in r.get("pruned_at", [])) or "-" for r in got]
            rows.append(["a", label, "pruned at epoch", " | ".join(at)])
    ratios, diffs, wall_ratios, verdicts = [], [], [], []
    for seed, r0, r1 in zip(a["seeds"], full, fast):
        if not r0 or not r1 or r0.get("best") is None or r1.get("best") is None:
            verdicts.append(f"seed {seed}: no figures")
            continue
        ratio, diff = r1["epochs"] / r0["epochs"], r1["best"] - r0["best"]
        ratios.append(ratio)
        diffs.append(diff)
        wall_ratios.append(r1["wall_s"] / r0["wall_s"])
        met = diff >= -TARGET_BEST and ratio <= TARGET_EPOCHS
        verdicts.append(f"seed {seed}: {'met' if met else 'NOT met'}")
    rows.append(["a", "tpe+asha / random", "epochs ratio", _each("{:.2f}x", ratios)])
    rows.append(["a", "tpe+asha / random", "wall ratio", _each("{:.2f}x", wall_ratios)])
    rows.append(["a", "tpe+asha - random", "best val_accuracy diff", _each("{:+.4f}", diffs)])
    rows.append(["a", f"target: best >= -{TARGET_BEST}, epochs <= {TARGET_EPOCHS:.0%}", "verdict", "; ".join(verdicts)])
    return rows


def _at5(xs: list[float]) -> list[float]:
    return [xs[i - 1] for i in range(5, len(xs) + 1, 5)]


def _series(xs: list[float]) -> str:
    return " ".join(f"{x:.0f}" for x in _at5(xs))


def _growth(xs: list[float]) -> str:
    """From the 5th trial to the last, in MB, and per trial."""
    if len(xs) < 10:
        return "-"
    d = xs[-1] - xs[4]
    return f"{d:+.0f} ({d / (len(xs) - 5):+.1f}/trial)"


def rows_b(b: dict[str, Any]) -> list[list[str]]:
    rows = []
    ticks = ",".join(str(i) for i in range(5, b["trials"] + 1, 5))
    for key, label in (("optuna", "optuna in-process"), ("optuna_clear", "optuna + clear_session")):
        r = b.get(key)
        if not r:
            rows.append(["b", label, "failed", "-"])
            continue
        rows.append(["b", label, f"RSS MB after trial {ticks}", _series(r["rss_mb"])])
        rows.append(["b", label, "RSS MB before trial 1; peak", f"{r['before_mb']:.0f}; {r['peak_mb']:.0f}"])
        rows.append(["b", label, "RSS growth MB, trial 5 -> last", _growth(r["rss_mb"])])
        rows.append(["b", label, "wall s; best val_accuracy", f"{r['wall_s']:.1f}; {r['best']:.4f}"])
    r = b.get("sweeper")
    if not r:
        rows.append(["b", "sweeper", "failed", "-"])
        return rows
    bad = "" if r["ok"] == r["trials"] == b["trials"] else f" (!: {r['ok']} ok of {r['trials']})"
    check = "" if r["parent_is_sweep"] else " (!: not the sweep's pid)"
    rows.append(["b", "sweeper parent", f"RSS MB at end of trial {ticks}", _series(r["parent_rss_mb"]) + check])
    rows.append(["b", "sweeper parent", "RSS MB before sweep; after; peak",
                 f"{r['before_mb']:.0f}; {r['after_mb']:.0f}; {r['peak_mb']:.0f}"])
    rows.append(["b", "sweeper parent", "RSS growth MB, trial 5 -> last", _growth(r["parent_rss_mb"])])
    rows.append(["b", "sweeper trial", f"own RSS MB at its end, trial {ticks}", _series(r["trial_rss_mb"])])
    rows.append(["b", "sweeper trial", f"own peak MB, trial {ticks}", _series(r["trial_peak_mb"])])
    rows.append(["b", "sweeper", "wall s; best val_accuracy", f"{r['wall_s']:.1f}; {_f('{:.4f}', r['best'])}{bad}"])
    return rows


def render(rows: list[list[str]], head: list[str]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows])


NOTES = """\
notes:
  a  epochs trained = sum of epoch_reached over all trials (a pruned trial counts every epoch it
     reported, those it finished between the pruner's call and its stop included). best = the
     highest final val_accuracy among ok trials (a pruned trial's number is from an unfinished
     run, so it does not count). Several seeds: the median, then each seed's figure in brackets.
     One run per seed: which points TPE picks and where ASHA cuts vary with the seed, and so do
     the figures. wall includes each trial's process start and TensorFlow import (~3-4 s of CPU),
     which pruning does not save: the wall ratio stays well above the epochs ratio.
  b  RSS = resident set (psutil). optuna in-process: one process imports TensorFlow once and
     trains every model; "+ clear_session" calls keras.backend.clear_session() and gc.collect()
     after each trial. sweeper parent: the process that called sweeper.sweep (no TensorFlow),
     read by each trial just before it returns; a trial's own RSS and peak (ru_maxrss) are those
     of its fresh process, which ends with it. psutil's RSS and ru_maxrss are read differently
     and can disagree by about 1 MB.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials, one seed (about 3 min on 2 cores)")
    ap.add_argument("--only", help="a or b (default both)")
    ap.add_argument("--seeds", help="comma-separated seeds for part a (default 0,1,2; quick 0)")
    ap.add_argument("--trials-a", type=int, help="trials per method in part a (default 20, quick 10)")
    ap.add_argument("--trials-b", type=int, help="trials per run in part b (default 30, quick 15)")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "search.json"), help="JSON of all figures")
    args = ap.parse_args(argv)
    parts = [p.strip().lower() for p in (args.only or "a,b").split(",") if p.strip()]
    if any(p not in ("a", "b") for p in parts):
        ap.error("--only takes a, b or a,b")
    seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
    trials_a = args.trials_a or (10 if args.quick else 20)
    trials_b = args.trials_b or (15 if args.quick else 30)
    if trials_a < 1 or trials_b < 1:
        ap.error("--trials-a and --trials-b must be >= 1")

    results: dict[str, Any] = {"meta": {"quick": args.quick, "cpus": os.cpu_count(), "python": sys.version.split()[0],
                                        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}}
    t0 = time.perf_counter()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        if "a" in parts:
            results["a"] = part_a(seeds, trials_a, tmp)
            rows += rows_a(results["a"])
        if "b" in parts:
            results["b"] = part_b(trials_b, tmp)
            rows += rows_b(results["b"])
    results["meta"]["total_s"] = time.perf_counter() - t0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print()
    print(f"bench/search.py{' --quick' if args.quick else ''}: {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - t0:.0f}s in all")
    print(render(rows, ["part", "method", "figure", "value"]))
    print(NOTES, end="")
    print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--role":
        sys.exit(role_main(*sys.argv[2:]))
    sys.exit(main())
