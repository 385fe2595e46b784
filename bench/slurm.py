"""sweeper's Slurm backend against submitit 1.5.4, side by side on the same one-node Slurm.

    python bench/slurm.py                 # 40 trials of 0.5 s, and one that dies, each way (~2 min)
    python bench/slurm.py --n 20 --wait 120

Starts the tests' one-node Slurm (tests/slurm_cluster.py: no accounting, as many clusters;
as root, with Debian's slurm-wlm and munge), then, in turn:

* **sweeper**: ``sweeper.sweep(fn, {"x": range(n)}, backend="slurm", workers=2)``;
* **submitit**: ``AutoExecutor(...).map_array(fn, range(n))`` with
  ``slurm_array_parallelism=2``, each job's result read as soon as ``job.done()`` says so
  (looked at every 0.25 s: more often than ``job.result()``'s own 1 s);

and the same for one trial that dies without a result (``os._exit(1)`` after 0.5 s).

Columns: makespan (submission to the last result known), and, per trial, the seconds from
its function's end (its own clock, returned, or written to a file as it dies) to its result
or status being known to the driver: sweeper's ledger stamp (``recorded_at``), submitit's
first ``done()``. A status not known after ``--wait`` seconds says so.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def work(x: int) -> dict[str, float]:
    """A short trial: half a second, then its end on its own clock."""
    time.sleep(0.5)
    return {"x": float(x), "end": time.time()}


def dies(x: int) -> None:
    """Half a second, its death's time written beside it, then gone without a result."""
    time.sleep(0.5)
    with open(os.environ["BENCH_DEATH"], "w") as f:
        f.write(repr(time.time()))
    os._exit(1)


def sweeper_train(params):
    return work(params["x"]) if params["x"] >= 0 else dies(params["x"])


def run_sweeper(n: int, folder: str) -> tuple[float, list[float]]:
    import sweeper

    t0 = time.time()
    df = sweeper.sweep(sweeper_train, {"x": list(range(n))}, backend="slurm", workers=2, out=folder,
                       name="s", progress=False)
    makespan = time.time() - t0
    with sqlite3.connect(os.path.join(folder, "s", "ledger.sqlite")) as db:
        stamps = dict(db.execute("SELECT trial_id, recorded_at FROM trials"))
    return makespan, [stamps[t] - end for t, end in zip(df.trial_id, df.end)]


def run_sweeper_death(folder: str) -> float:
    import sweeper

    sweeper.sweep(sweeper_train, {"x": [-1]}, backend="slurm", out=folder, name="d", progress=False)
    with sqlite3.connect(os.path.join(folder, "d", "ledger.sqlite")) as db:
        ((stamp, status),) = db.execute("SELECT recorded_at, status FROM trials")
    assert status == "crashed", status
    return stamp - float(open(os.environ["BENCH_DEATH"]).read())


def run_submitit(fn, xs: list[int], folder: str, wait: float) -> tuple[float, list[float | None]]:
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(slurm_array_parallelism=2, timeout_min=10)
    t0 = time.time()
    jobs = executor.map_array(fn, xs)
    known: dict[int, float] = {}
    while len(known) < len(jobs) and time.time() - t0 < wait:
        for i, job in enumerate(jobs):
            if i not in known and job.done():
                known[i] = time.time()
        time.sleep(0.25)
    makespan = time.time() - t0
    lags: list[float | None] = []
    for i, job in enumerate(jobs):
        if i not in known:
            lags.append(None)
            continue
        try:
            lags.append(known[i] - job.result()["end"])
        except Exception:  # it died: its death's time is in the file it wrote
            lags.append(known[i] - float(open(os.environ["BENCH_DEATH"]).read()))
    return makespan, lags


def _med(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "never"
    text = f"{statistics.median(got):.2f} s (max {max(got):.2f})"
    return text + (f"; {len(values) - len(got)} never" if len(got) < len(values) else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for a status before giving up")
    args = parser.parse_args()
    import slurm_cluster

    why = slurm_cluster.missing()
    if why:
        sys.exit(f"bench/slurm.py: {why}")
    try:
        import submitit
    except ImportError:
        sys.exit("bench/slurm.py: pip install submitit==1.5.4 (only this benchmark needs it)")
    with tempfile.TemporaryDirectory() as root, slurm_cluster.one_node(os.path.join(root, "slurm")):
        os.environ["BENCH_DEATH"] = os.path.join(root, "death")
        rows = []
        span, lags = run_sweeper(args.n, os.path.join(root, "sweeper"))
        died = run_sweeper_death(os.path.join(root, "sweeper"))
        rows.append(("sweeper (slurm backend)", f"{span:.1f} s", _med(lags), f"{died:.2f} s"))
        span, sublags = run_submitit(work, list(range(args.n)), os.path.join(root, "submitit"), args.wait)
        _, dead = run_submitit(dies, [0], os.path.join(root, "submitit-d"), args.wait)
        rows.append((f"submitit {submitit.__version__} (map_array)", f"{span:.1f} s", _med(sublags),
                     "never" if dead[0] is None else f"{dead[0]:.2f} s"))
    head = ("", f"makespan, {args.n} trials", "job end -> result known", "death -> status known")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    print(f"one-node Slurm, 2 CPUs, no accounting; trials of 0.5 s, 2 at a time; waited up to {args.wait:g} s")
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    main()
