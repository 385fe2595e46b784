"""Host memory as a resource: ``workers="auto"`` with a ``host_memory`` budget against fixed ``workers``.

    python bench/pack_host.py                 # 24 trials, budget 3 GB, 3 seeds
    python bench/pack_host.py --seeds 1 --budget 3GB --methods auto,2,8

Each trial (``hog`` below) takes real memory, 0.2-1.2 GB (one amount per model size, 6
sizes, 4 trials each: ``memory_keys=["size"]``), touches every page, then waits 2-4 s, as a
trial waiting on its GPU does. Methods: ``auto`` (``workers="auto", host_memory=<budget>``:
trials start while their predicted peak fits the budget and an idle core is measured),
``auto-free`` (``workers="auto"`` without a budget: the available memory less 1 GB, and
idle cores), and fixed ``workers`` N (no budget: N at once whatever they hold). Columns: makespan
(median over seeds), the most memory the trials held at once (the sum of the
``mem_peak_mb`` of trials running together, by their start and end stamps; the largest
over seeds), whether that stayed within the budget, and the median trial's own
``mem_peak_mb``. A machine with less free memory than a fixed method takes would swap or
kill: that is what the budget is for.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def draw(seed: int, trials: int = 24, sizes: int = 6) -> list[dict]:
    rng = random.Random(seed)
    mb = {f"s{i}": rng.randint(200, 1200) for i in range(sizes)}
    points = [{"size": f"s{i % sizes}", "i": i, "mb": mb[f"s{i % sizes}"], "wait_s": round(rng.uniform(2, 4), 2)}
              for i in range(trials)]
    rng.shuffle(points)
    return points


def _run(spec: dict) -> None:
    import sweeper
    from trials import hog

    method = spec["method"]
    if method == "auto":
        kw: dict = {"workers": "auto", "host_memory": spec["budget"], "memory_keys": ["size"]}
    elif method == "auto-free":  # no budget: the machine's available memory less 1 GB, and idle cores
        kw = {"workers": "auto", "memory_keys": ["size"]}
    else:
        kw = {"workers": int(method)}
    t0 = time.monotonic()
    df = sweeper.sweep(hog, spec["points"], out=spec["out"], name=f"m{method}", progress=False, **kw)
    wall = time.monotonic() - t0
    rows = [{"status": r.status, "start": float(r.t_start), "end": float(r.t_end), "mem": float(r.mem_peak_mb)}
            for r in df.itertuples()]
    print(json.dumps({"wall": wall, "rows": rows}))


def held_at_once(rows: list[dict]) -> float:
    """The most memory held together: at each trial's start, the peaks of those running then."""
    return max(sum(r["mem"] for r in rows if r["start"] <= t < r["end"]) for t in (r["start"] for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", default="3GB")
    ap.add_argument("--methods", default="auto,auto-free,2,4,8")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        _run(json.loads(args.run))
        return
    from sweeper.model.options import megabytes

    budget = megabytes(args.budget)
    methods = args.methods.split(",")
    results: dict[str, list[dict]] = {m: [] for m in methods}
    for seed in range(args.seeds):
        points = draw(seed)
        for m in methods:  # interleaved per seed
            with tempfile.TemporaryDirectory() as out:
                spec = json.dumps({"method": m, "points": points, "out": out, "budget": args.budget})
                proc = subprocess.run([sys.executable, __file__, "--run", spec], capture_output=True, text=True,
                                      timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(f"{m}: {proc.stderr[-2000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r["together"] = held_at_once(r["rows"])
            results[m].append(r)
            print(f"seed {seed} {m}: {r['wall']:.1f}s, {r['together']:.0f} MB at once", file=sys.stderr)
    print(f"\n24 trials of 0.2-1.2 GB (6 sizes) that each wait 2-4 s; budget {budget} MB; {args.seeds} seeds")
    print(f"{'method':<22}{'makespan s':>11}{'most held at once MB':>22}{'within budget':>15}{'trial peak MB':>15}")
    for m in methods:
        rs = results[m]
        name = {"auto": f"auto (budget {args.budget})", "auto-free": "auto (no budget)"}.get(m, f"workers={m}")
        most = max(r["together"] for r in rs)
        peak = statistics.median(row["mem"] for r in rs for row in r["rows"])
        print(f"{name:<22}{statistics.median(r['wall'] for r in rs):>11.1f}{most:>22.0f}"
              f"{'yes' if most <= budget else 'no':>15}{peak:>15.0f}")


if __name__ == "__main__":
    main()
