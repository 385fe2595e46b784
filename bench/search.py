"""Benchmark of the adaptive search: what pruning saves, and memory over many trials.

    python bench/search.py              # full (~10 min on 2 cores): parts a and b, a on seeds 0,1,2
    python bench/search.py --quick      # about 3 min: fewer trials, seed 0
    python bench/search.py --only a --seeds 0,1,2,3,4
    python bench/search.py --only c     # search at equal compute (see c below for its time)
    python bench/search.py --only c --quick --problems diabetes   # a few minutes: a check that it runs

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
c  search at equal compute: every method gets the same budget in epochs, those of BUDGET_C
   full trials (20 x 20 = 400 epochs), on two problems with a real signal: the digits MLP of
   a (val_accuracy, max) and a small Keras MLP regressing scikit-learn's bundled diabetes
   data, inputs and target standardised (val_loss, min; 1-3 layers). Methods: random with no
   pruning (every trial to its last epoch), random + ASHA, TPE, TPE + ASHA, TPE + Hyperband
   (Optuna's defaults for both pruners), and TPE + ASHA tuned (PRUNE_TUNED: the epoch from
   which a pilot's learning curves rank as they end, see there). 2 workers per sweep.
   How the budget is kept: each sweep runs as a fresh role process (trials=budget+50, more
   than can fit); a thread there polls the sweep's ledger (per-epoch reports, written as the
   trials send them, about every 0.25 s) and sends the process SIGTERM once the epochs on
   record reach the budget (not SIGINT: see role_sweep_c); the sweep records running trials
   ``interrupted`` and stops.
   Then every per-epoch report, each stamped with the time its trial sent it, is put in
   time order over all trials, and the run is cut at the budget's epoch: epochs past it
   (trained by trials running at the cut, in the moments before the stop took effect) are
   cut, not counted (the table shows them as "overshoot"), and a trial counts as finished
   only if its last epoch came within the budget. A sweep stopped by a signal that was not
   its budget's is not counted (said in a line). Random and TPE start from the same points
   (TPE's first 10 are random, seeded alike), as random with and without ASHA do. Anytime
   curve per run: x = epochs spent so far by all trials, y = the best metric of a trial that
   finished (ran all its epochs, not pruned) by then. Per method: the median over seeds of
   the best at the budget (and each seed's), the epochs at which it first reached random's
   median best at the budget (median over seeds; a seed that never did counts as not
   reached), trials run, pruned and cut at the budget. Figures and raw reports go to
   bench/out/search_compute.json, the curves (median and min-max over seeds) to
   bench/out/search_compute.png. Each sweep's result is also kept, as it ends, in
   bench/out/search_compute_runs/; a later run with the same settings takes it from there
   (it says so) instead of running it again, so a run stopped halfway resumes (--fresh-c:
   run them all).

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

EPOCHS_C = 20  #: epochs of a full trial in c, both problems
BUDGET_C = 20  #: c's budget per sweep: the epochs of this many full trials (20 x 20 = 400)
SEEDS_C = "0,1,2"  #: c's seeds by default (one seed of its 12 sweeps: ~16 min here; 5 would be ~80)
POLL_C = 0.2  #: seconds between looks at a sweep's epochs on record (c)
#: c's methods: label, sampler, pruner ("tuned": the problem's PRUNE_TUNED).
METHODS_C = (("random", "random", None), ("random + asha", "random", "asha"), ("tpe", "tpe", None),
             ("tpe + asha", "tpe", "asha"), ("tpe + hyperband", "tpe", "hyperband"),
             ("tpe + asha tuned", "tpe", "tuned"), ("tpe + asha settled", "tpe", "asha(min_resource='auto')"))
#: c's problems: the metric and its direction.
PROBLEMS_C = {"digits": ("val_accuracy", "max"), "diabetes": ("val_loss", "min")}
#: The tuned ASHA of c, per problem: min_resource = the first epoch from which a pilot's
#: learning curves ranked nearly as they ended (30 random points of the space, 20 epochs
#: each, run apart from this benchmark; Spearman rank correlation of the metric at epoch e
#: with the final one >= 0.85: digits 0.73-0.79 at epochs 1-6, 0.85 at 8; diabetes -0.35 to
#: -0.17 at epochs 1-4 (fast starters overfit), 0.54 at 8, 0.88 at 12), reduction_factor=3:
#: keep a third at the rung, not Optuna's quarter. c prints the same correlations measured
#: on its own random runs. The pilot's 600 epochs per problem are not in the budget.
PRUNE_TUNED = {"digits": "asha(min_resource=8, reduction_factor=3)",
               "diabetes": "asha(min_resource=12, reduction_factor=3)"}


# -- trials (run in spawned processes: imports inside) --------------------------------------

def train_digits(params: dict[str, Any]) -> dict[str, float]:
    """Part a's trial: experiments/digits_mlp.py's model, per-epoch reports for the pruner
    (part c's, imported here in the trial: this module's top stays standard library, so
    part a's fork server preloads no Keras, as when its figures were measured)."""
    import search_models

    return search_models.train_digits(params)


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


def space_c(problem: str) -> dict[str, Any]:
    import sweeper

    if problem == "digits":
        return {**space_a(), "epochs": EPOCHS_C}
    return {"lr": sweeper.loguniform(1e-4, 1e-1), "units": [16, 32, 64, 128], "batch_size": [16, 32, 64],
            "layers": sweeper.randint(1, 4), "epochs": EPOCHS_C}


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


def role_sweep_c(spec: dict[str, Any]) -> dict[str, Any]:
    """One sweep of part c, stopped by SIGTERM once its epochs on record reach the budget; every
    trial's row and per-epoch reports (metric, and when the trial sent it)."""
    import signal
    import sqlite3
    import threading

    import sweeper
    from sweeper.store.ledger import Ledger

    from search_models import train_diabetes, train_digits  # Keras at its top: the fork server preloads it

    metric, mode = PROBLEMS_C[spec["problem"]]
    train = train_digits if spec["problem"] == "digits" else train_diabetes
    folder = os.path.join(spec["out"], spec["name"])
    budget = spec["budget"]
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        # SIGTERM, not SIGINT: while the sweep starts a trial its main thread blocks and ignores
        # SIGINT (sweeper.backends.local.process.sigint_ignored), and a process-directed SIGINT
        # then lands on a thread that does not block it (this one, or one of TensorFlow's,
        # imported here with search_models) and is dropped: seen here, a sweep ran on to its
        # trial count. SIGTERM takes the same way out (running trials recorded interrupted)
        # and is never ignored. This thread blocks both, leaving them to the main thread.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        ledger = None
        while not done.wait(POLL_C):
            try:
                ledger = ledger or Ledger(folder, readonly=True)
                count = len(ledger.history())
            except (sweeper.SweepError, sqlite3.Error):  # not there yet, or busy: look again
                continue
            if count >= budget:
                seen.update(epochs=count, at_s=time.perf_counter() - t0)
                os.kill(os.getpid(), signal.SIGTERM)  # the sweep's own handling stops it
                return

    t0 = time.perf_counter()
    watcher = threading.Thread(target=watch, name="budget", daemon=True)
    watcher.start()
    stopped = True
    try:
        sweeper.sweep(train, space_c(spec["problem"]), search=spec["search"], prune=spec["prune"],
                      trials=budget + 50, seed=spec["seed"], workers=2, metric=metric, mode=mode,
                      out=spec["out"], name=spec["name"], progress=False)
        stopped = False  # the trial count ran out first (not expected: each trial costs an epoch)
    except sweeper.SweepInterrupted:  # from our SIGTERM
        pass
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    ledger = Ledger(folder, readonly=True)
    trials = []
    for tid, row in sorted(ledger.results().items(), key=lambda kv: kv[1].index):
        trials.append({"id": tid, "status": row.status.value, "params": row.params,
                       "epoch_reached": row.epoch_reached, "value": row.metrics.get(metric),
                       "reports": [[e, m.get(metric), t] for e, m, t in ledger.epochs(tid)]})
    ledger.close()
    return {"wall_s": wall, "stopped": stopped, "seen": seen, "trials": trials}


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


ROLES = {"sweep_a": role_sweep_a, "optuna": role_optuna, "sweep_b": role_sweep_b, "sweep_c": role_sweep_c}


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


def part_c(seeds: list[int], budget_trials: int, problems: list[str], tmp: str, keep: str | None,
           methods: list[str] | None = None) -> dict[str, Any]:
    """Every sweep of c (``methods``: those labels only; random always). ``keep``: a folder where each sweep's result is kept as it ends, and
    taken from on a later run with the same spec (c is long: a run stopped halfway resumes)."""
    budget = budget_trials * EPOCHS_C
    out: dict[str, Any] = {"seeds": seeds, "budget_trials": budget_trials, "budget_epochs": budget,
                           "epochs": EPOCHS_C, "workers": 2, "problems": {}, "kept": 0}
    for problem in problems:
        metric, mode = PROBLEMS_C[problem]
        chosen = [m for m in METHODS_C if methods is None or m[0] in methods or m[0] == "random"]
        runs: dict[str, list[Any]] = {label: [] for label, _, _ in chosen}
        prunes = {label: PRUNE_TUNED[problem] if prune == "tuned" else prune for label, _, prune in chosen}
        out["problems"][problem] = {"metric": metric, "mode": mode, "prune": prunes, "runs": runs}
        for seed in seeds:
            for label, search, _ in chosen:
                name = f"c_{problem}_{label.replace(' ', '')}_s{seed}"
                spec = {"problem": problem, "search": search, "prune": prunes[label], "seed": seed, "budget": budget,
                        "out": tmp, "name": name}
                what = f"c  {problem:<8} {label:<16} seed {seed}, {budget} epochs"
                kept = os.path.join(keep, f"{name}_{budget}.json") if keep else None
                res = None
                if kept and os.path.exists(kept):
                    with open(kept) as f:
                        got = json.load(f)
                    if {**got["spec"], "out": tmp} == spec:
                        res = got["result"]
                        out["kept"] += 1
                        print(f"  {what} ... kept from an earlier run ({kept})", flush=True)
                if res is None:
                    res = run_role("sweep_c", spec, tmp, 300 + budget * 6, what)
                    if res is not None and res["stopped"] and not res["seen"]:  # a signal from elsewhere
                        print("    stopped by a signal from outside before its budget: not counted", flush=True)
                        res = None
                    if res is not None and kept and keep:
                        os.makedirs(keep, exist_ok=True)
                        with open(kept, "w") as f:
                            json.dump({"spec": spec, "result": res}, f)
                runs[label].append(res if res is None else {**res, **cut_c(res["trials"], budget, mode)})
    return out


def _better(mode: str) -> Any:
    return (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)


def cut_c(trials: list[dict[str, Any]], budget: int, mode: str) -> dict[str, Any]:
    """A run of c cut at ``budget`` epochs: its anytime curve (the best finished trial after
    each epoch spent, None before the first) and its counts, all within the budget."""
    import math

    better = _better(mode)
    reports = sorted((t, i, e, v) for i, trial in enumerate(trials) for e, v, t in trial["reports"])
    within = reports[:budget]
    curve: list[float | None] = []
    best = None
    last_in: dict[int, int] = {}  # trial -> its last epoch within the budget
    mismatch = 0
    for _t, i, epoch, value in within:
        last_in[i] = epoch
        trial = trials[i]
        if epoch == EPOCHS_C and trial["status"] != "pruned" and isinstance(value, (int, float)) \
                and math.isfinite(value):  # it ran all its epochs: finished, with this value
            if trial["status"] == "ok" and trial["value"] != value:
                mismatch += 1
            best = value if best is None or better(value, best) else best
        curve.append(best)
    finished = {i for i, e in last_in.items() if e == EPOCHS_C and trials[i]["status"] != "pruned"}
    pruned = {i for i, e in last_in.items() if trials[i]["status"] == "pruned" and e == trials[i]["epoch_reached"]}
    failed = {i for i in last_in if trials[i]["status"] == "failed"}
    return {"spent": len(reports), "curve": curve, "final": best, "trials_run": len(last_in),
            "finished": len(finished), "pruned": len(pruned), "failed": len(failed),
            "cut": len(last_in) - len(finished) - len(pruned) - len(failed),
            "overshoot": max(0, len(reports) - budget), "value_mismatch": mismatch,
            "pruned_at": sorted(trials[i]["epoch_reached"] for i in pruned)}


def _reached(curve: list[float | None], target: float, mode: str) -> int | None:
    """The epochs spent when the curve first reached ``target`` (None: never)."""
    better = _better(mode)
    for x, y in enumerate(curve, 1):
        if y is not None and (y == target or better(y, target)):
            return x
    return None


def _spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (sweeper's own, which the settled pruner uses); None under 3 pairs."""
    from sweeper.search.pruners import spearman

    return spearman(xs, ys) if len(xs) >= 3 else None


CORR_EPOCHS_C = (1, 2, 4, 8, 12, 16)  #: epochs whose ranking c compares with the final one


def summary_c(c: dict[str, Any]) -> None:
    """Per problem: random's median best at the budget (the target), per method its medians,
    epochs to reach the target, counts; the targets' verdicts; and, from random's full trials,
    how well each epoch's ranking foretells the final one. Added to ``c`` in place."""
    import math

    for problem, pc in c["problems"].items():
        mode = pc["mode"]
        base = [r["final"] for r in pc["runs"]["random"] if r and r["final"] is not None]
        target = statistics.median(base) if base else None
        pc["target"] = target
        pc["summary"] = {}
        for label, runs in pc["runs"].items():
            got = [r or {} for r in runs]
            finals = [r.get("final") for r in got]
            reach = [_reached(r["curve"], target, mode) if r and target is not None else None for r in got]
            # a seed that never reached counts as later than any that did
            mid = statistics.median([math.inf if x is None else x for x in reach]) if reach else math.inf
            pc["summary"][label] = {
                "final_median": _med(finals), "finals": finals, "reach": reach,
                "reach_median": None if math.isinf(mid) else mid,
                **{k: [r.get(k) for r in got] for k in ("trials_run", "finished", "pruned", "cut", "failed",
                                                        "overshoot", "spent", "wall_s", "value_mismatch")}}
        # the evidence for the tuned ASHA: random's full trials, epoch e's ranking against the final one
        xs: dict[int, list[float]] = {e: [] for e in CORR_EPOCHS_C}
        finals_all: list[float] = []
        for r in pc["runs"]["random"]:
            for trial in (r or {}).get("trials", []):
                by_epoch = {e: v for e, v, _t in trial["reports"] if isinstance(v, (int, float))}
                if trial["status"] == "ok" and all(e in by_epoch for e in (*CORR_EPOCHS_C, EPOCHS_C)):
                    finals_all.append(by_epoch[EPOCHS_C])
                    for e in CORR_EPOCHS_C:
                        xs[e].append(by_epoch[e])
        pc["spearman_vs_final"] = {"trials": len(finals_all),
                                   **{str(e): _spearman(xs[e], finals_all) for e in CORR_EPOCHS_C}}
    c["targets"] = targets_c(c)


def targets_c(c: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, for TPE + ASHA (defaults) and the tuned row: median best at the
    budget at least random's on every problem; random's best reached with at most half the
    budget on at least one."""
    half = c["budget_epochs"] / 2
    out = {}
    for label in ("tpe + asha", "tpe + asha tuned", "tpe + asha settled"):
        if any(label not in pc["summary"] for pc in c["problems"].values()):
            continue
        as_good, fast = {}, {}
        for problem, pc in c["problems"].items():
            mine, base = pc["summary"][label]["final_median"], pc["summary"]["random"]["final_median"]
            as_good[problem] = (mine is not None and base is not None
                                and (mine == base or _better(pc["mode"])(mine, base)))
            reach = pc["summary"][label]["reach_median"]
            fast[problem] = reach is not None and reach <= half
        out[label] = {"as_good_as_random": as_good, "half_budget": fast,
                      "met_1": all(as_good.values()), "met_2": any(fast.values())}
    return out


def rows_c(c: dict[str, Any]) -> dict[str, list[list[str]]]:
    """A table per problem."""
    tables = {}
    for problem, pc in c["problems"].items():
        fmt = "{:.4f}"
        rows = []
        for label, sm in pc["summary"].items():
            reach = sm["reach"]
            reach_txt = ("not reached" if sm["reach_median"] is None else f"{sm['reach_median']:.0f}")
            if len(reach) > 1:
                reach_txt += " (" + " ".join("-" if x is None else str(x) for x in reach) + ")"
            prune = pc["prune"][label]
            rows.append([label if label != "tpe + asha tuned" else f"tpe + {prune}", _each(fmt, sm["finals"]),
                         reach_txt, _each("{:.0f}", sm["trials_run"]), _each("{:.0f}", sm["finished"]),
                         _each("{:.0f}", sm["pruned"]), _each("{:.0f}", sm["cut"]),
                         _each("{:.0f}", sm["overshoot"]), _each("{:.0f}", sm["wall_s"])])
            if any(sm["failed"]):
                rows[-1][0] += f" (failed: {sm['failed']})"
        tables[problem] = rows
    return tables


def render_c(c: dict[str, Any]) -> str:
    head = ["method", "best at budget", "epochs to random's best", "trials", "finished", "pruned", "cut",
            "overshoot", "wall s"]
    parts = []
    for problem, rows in rows_c(c).items():
        pc = c["problems"][problem]
        target = _f("{:.4f}", pc["target"])
        parts.append(f"c  {problem}: {pc['metric']} ({pc['mode']}), budget {c['budget_epochs']} epochs "
                     f"= {c['budget_trials']} trials x {c['epochs']}, seeds {','.join(map(str, c['seeds']))}; "
                     f"random's median best at the budget: {target}")
        parts.append(render(rows, head))
        for label, runs in pc["runs"].items():
            at: dict[int, int] = {}
            for r in runs:
                for e in (r or {}).get("pruned_at", []):
                    at[e] = at.get(e, 0) + 1
            if at:
                parts.append(f"   {label}: pruned at epoch (all seeds, within the budget): "
                             + ", ".join(f"{e}: {n}" for e, n in sorted(at.items())))
        sp = pc["spearman_vs_final"]
        parts.append(f"   rank correlation (Spearman) of {pc['metric']} at epoch e with the final one, over "
                     f"random's {sp['trials']} full trials: "
                     + ", ".join(f"e={e} {_f('{:+.2f}', sp[str(e)])}" for e in CORR_EPOCHS_C))
        parts.append("")
    for label, t in c["targets"].items():
        a = ", ".join(f"{p} {'yes' if v else 'no'}" for p, v in t["as_good_as_random"].items())
        b = ", ".join(f"{p} {'yes' if v else 'no'}" for p, v in t["half_budget"].items())
        parts.append(f"target 1, {label}: median best at the budget >= random's on both problems: "
                     f"{'met' if t['met_1'] else 'NOT met'} ({a})")
        parts.append(f"target 2, {label}: random's median best reached within half the budget "
                     f"({c['budget_epochs'] // 2} epochs) on one problem at least: "
                     f"{'met' if t['met_2'] else 'NOT met'} ({b})")
    return "\n".join(parts)


NOTES_C = """\
notes:
  c  best at budget: the best final metric of a trial that ran all its epochs within the budget;
     the median over seeds, then each seed's. epochs to random's best: epochs spent (all trials,
     in time order) when the run's best first reached random's median best at the budget; the
     median over seeds (a seed that never reached it counts as later than all), then each seed's
     (- never). trials: trials that trained an epoch within the budget; finished: of those, ran
     all their epochs; pruned: stopped by the pruner within it; cut: still running at the budget
     (their later epochs are not counted). overshoot: epochs trained after the budget, before
     the stop took effect (cut, not counted). wall s: the sweep's wall time up to its stop, which
     counts each trial's process start (many more trials when pruning) and whatever else ran on
     the machine; the budget is epochs, not seconds. With 2 workers, which point TPE asks for
     next depends on which trial ends first, so runs with one seed are not exactly repeatable.
"""


def plot_c(c: dict[str, Any], path: str) -> None:
    """One panel per problem: each method's anytime curve, median and min-max over seeds."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = list(c["problems"])
    fig, axes = plt.subplots(1, len(problems), figsize=(7 * len(problems), 6.2), squeeze=False)
    budget = c["budget_epochs"]
    colours = dict(zip([m[0] for m in METHODS_C], plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for ax, problem in zip(axes[0], problems):
        pc = c["problems"][problem]
        worst = -math.inf if pc["mode"] == "max" else math.inf
        finals = []
        for label, runs in pc["runs"].items():
            curves = [r["curve"] + [r["curve"][-1] if r["curve"] else None] * (budget - len(r["curve"]))
                      for r in runs if r]
            if not curves:
                continue
            xs, med, lo, hi = [], [], [], []
            for x in range(1, budget + 1):
                ys = sorted(worst if cv[x - 1] is None else cv[x - 1] for cv in curves)
                m = statistics.median(ys)
                xs.append(x)
                med.append(None if math.isinf(m) else m)
                lo.append(None if math.isinf(ys[0]) else ys[0])
                hi.append(None if math.isinf(ys[-1]) else ys[-1])
            finals += [y for y in (lo[-1], hi[-1]) if y is not None]
            name = label if label != "tpe + asha tuned" else f"tpe + {pc['prune'][label]}"
            nan = float("nan")
            ax.plot(xs, [nan if y is None else y for y in med], label=name, color=colours[label], lw=1.6)
            ax.fill_between(xs, [nan if y is None else y for y in lo], [nan if y is None else y for y in hi],
                            color=colours[label], alpha=0.07, lw=0)
        if pc.get("target") is not None:
            ax.axhline(pc["target"], color="k", ls="--", lw=0.8, label="random's median best at the budget")
        ax.axvline(budget / 2, color="grey", ls=":", lw=0.8, label="half the budget")
        if finals:
            lo_f, hi_f = min(finals), max(finals)
            pad = max(hi_f - lo_f, 1e-3)
            ax.set_ylim(lo_f - 1.5 * pad, hi_f + 0.5 * pad) if pc["mode"] == "max" else \
                ax.set_ylim(lo_f - 0.5 * pad, hi_f + 1.5 * pad)
        ax.set_xlim(0, budget)
        ax.set_xlabel("epochs spent (all trials, in time order)")
        ax.set_ylabel(f"best {pc['metric']} of a finished trial ({pc['mode']})")
        n = len(c["seeds"])
        ax.set_title(f"{problem}, {c['budget_epochs']} epochs: median and min-max over {n} seed{'s' * (n > 1)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
    ap.add_argument("--only", help="a, b or c, or several (a,c); default a,b (c is long)")
    ap.add_argument("--seeds", help=f"comma-separated seeds for parts a and c (default a 0,1,2, c {SEEDS_C}; "
                                    "quick 0)")
    ap.add_argument("--trials-a", type=int, help="trials per method in part a (default 20, quick 10)")
    ap.add_argument("--trials-b", type=int, help="trials per run in part b (default 30, quick 15)")
    ap.add_argument("--budget-c", type=int, help=f"part c's budget, in full trials of {EPOCHS_C} epochs "
                                                 f"(default {BUDGET_C}, quick 6)")
    ap.add_argument("--problems", help=f"part c's problems (default {','.join(PROBLEMS_C)})")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "search.json"), help="JSON of a's and b's figures")
    ap.add_argument("--out-c", default=os.path.join(HERE, "out", "search_compute.json"),
                    help="JSON of c's figures (its plot beside it, .png; each sweep's result in _runs/, "
                         "which a later run with the same settings takes instead of running it again)")
    ap.add_argument("--fresh-c", action="store_true", help="run every sweep of c, taking none from _runs/")
    ap.add_argument("--methods", help="part c's methods by label, comma-separated (random always runs); default all")
    args = ap.parse_args(argv)
    parts = [p.strip().lower() for p in (args.only or "a,b").split(",") if p.strip()]
    if any(p not in ("a", "b", "c") for p in parts):
        ap.error("--only takes a, b, c or several of them (a,b)")
    seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
    seeds_c = [int(s) for s in (args.seeds or ("0" if args.quick else SEEDS_C)).split(",")]
    trials_a = args.trials_a or (10 if args.quick else 20)
    trials_b = args.trials_b or (15 if args.quick else 30)
    budget_c = args.budget_c or (6 if args.quick else BUDGET_C)
    problems = [p.strip() for p in (args.problems or ",".join(PROBLEMS_C)).split(",") if p.strip()]
    if trials_a < 1 or trials_b < 1 or budget_c < 1:
        ap.error("--trials-a, --trials-b and --budget-c must be >= 1")
    if any(p not in PROBLEMS_C for p in problems):
        ap.error(f"--problems takes {', '.join(PROBLEMS_C)}")

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
        if "c" in parts:
            c = part_c(seeds_c, budget_c, problems, tmp,
                       None if args.fresh_c else os.path.splitext(args.out_c)[0] + "_runs",
                       [m.strip() for m in args.methods.split(",")] if args.methods else None)
            summary_c(c)
    results["meta"]["total_s"] = time.perf_counter() - t0
    if rows:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if "c" in parts:
        png = os.path.splitext(args.out_c)[0] + ".png"
        os.makedirs(os.path.dirname(os.path.abspath(args.out_c)), exist_ok=True)
        with open(args.out_c, "w") as f:
            json.dump({"meta": results["meta"], "c": c}, f)
        plot_c(c, png)
    print()
    print(f"bench/search.py{' --quick' if args.quick else ''}: {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - t0:.0f}s in all")
    if rows:
        print(render(rows, ["part", "method", "figure", "value"]))
        print(NOTES, end="")
        print(f"figures: {args.out}")
    if "c" in parts:
        print(render_c(c))
        print(NOTES_C, end="")
        print(f"figures: {args.out_c}; plot: {png}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--role":
        sys.exit(role_main(*sys.argv[2:]))
    sys.exit(main())
