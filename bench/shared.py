"""Sweeps that share one machine's cards, against the ideal: what each loses to the others.

    python bench/shared.py                          # every scenario, this checkout
    python bench/shared.py --before /tmp/old        # the same, side by side with another checkout
    python bench/shared.py --scenarios two-fixed,colleague --seeds 1

The machine is tests/fake_nvml.py's: one card of 16 GB (two for ``*-2cards``), as NVML
describes it; every other part is real. Each sweep is its own ``python -m sweeper`` process
(through ``tests/fake_nvml.py``), started at once with the others; each trial takes its
memory as TensorFlow does (``framework="tensorflow"`` of ``fake_nvml.allocate``: without
memory growth, its whole cap the moment it starts; under ``--per-gpu auto``, which grows,
what it needs), holds it for its busy time and returns. A colleague's process is
``fake_nvml.py --hold``: it holds memory and is no sweep's.

Scenarios (one per bullet of the issue's "Why", and the tests' list):

* ``two-fixed``: two sweeps at once, ``--per-gpu 2``, trials needing 5-6 GB;
* ``colleague``: one sweep (default ``per_gpu``) beside a process holding 10 GB for 15 s;
* ``two-default``: two sweeps at once, default ``per_gpu``;
* ``two-auto``: two sweeps at once, ``--per-gpu auto``, 6 GB trials of 4 s;
* ``three-fixed``, ``three-auto``: three sweeps at once;
* ``fair``: a sweep of 12 trials, then 2 s later a sweep of 3: how many of the first sweep's
  trials start between the second's launch and its first trial's start;
* ``context``: one sweep, ``--per-gpu 2``, beside a process holding 400 MB (an idle
  notebook's CUDA context) the whole time: two trials, each its cap and its context, no
  longer fit at once; the ideal counts one at a time.

Columns: the rows' statuses (all sweeps), OOM rows, the smallest ``gpu_mem_cap_mb`` any row
started with, the makespan (first launch to last exit, start-up included) against the
ideal (every trial's busy time over the trials the card holds at once; the colleague's
hold added where the card is his), and each sweep's share of the slot-time while all of
them had trials running (equal: 1/N each). Medians over seeds where there are several.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTS = os.path.join(ROOT, "tests")
sys.path.insert(0, TESTS)

CARD_MB = 16384

#: name -> (sweeps, trials each, per_gpu flag or None, (need low, need high) MB, busy s, colleague (MB, s) or None, cards)
SCENARIOS: dict[str, tuple[int, int, str | None, tuple[int, int], float, tuple[int, float] | None, int]] = {
    "two-fixed": (2, 4, "2", (5120, 6144), 3.0, None, 1),
    "colleague": (1, 3, None, (5120, 6144), 3.0, (10240, 15.0), 1),
    "two-default": (2, 3, None, (5120, 6144), 3.0, None, 1),
    "two-auto": (2, 6, "auto", (6144, 6144), 4.0, None, 1),
    "three-fixed": (3, 4, "2", (5120, 6144), 3.0, None, 1),
    "three-auto": (3, 4, "auto", (6144, 6144), 4.0, None, 1),
    "fair": (2, 0, "2", (5120, 6144), 2.0, None, 1),
    "context": (1, 4, "2", (5120, 6144), 3.0, (400, 0.0), 1),  # (a hold of 0 s: the whole run)
}

GRID = """\
import sys
sys.path.insert(0, {bench!r})
from trials import fake_gpu

grid = {{"i": list(range({trials}))}}


def train(params):
    need = {low} + (params["i"] * 337) % ({high} - {low} + 1)
    return fake_gpu({{**params, "need_mb": need, "busy_s": {busy}, "board": {board!r}, "framework": "tensorflow",
                     "epochs": 2}})
"""


def capacity(per_gpu: str | None, need_mb: int, held_mb: int = 0) -> int:
    """Trials one card holds at once under ``per_gpu``, of this need (auto: its need plus 5%
    headroom beside 512 MB margin), beside ``held_mb`` a colleague holds all along (a fixed
    per_gpu's trial maps its cap, 95% of the card over per_gpu, and a 300 MB context)."""
    if per_gpu == "auto":
        return max(1, int((CARD_MB - 512 - held_mb) // (need_mb * 1.05)))
    slots = int(per_gpu or 1)
    return max(1, min(slots, int((CARD_MB - held_mb) // (0.95 * CARD_MB / slots + 300))))


def launch(sweeper_path: str | None, env: dict[str, str], grid: str, out: str, name: str,
           per_gpu: str | None) -> subprocess.Popen:
    args = [sys.executable, os.path.join(TESTS, "fake_nvml.py"), grid, "--out", out, "--name", name, "--quiet"]
    if per_gpu:
        args += ["--per-gpu", per_gpu]
    run_env = dict(env)
    if sweeper_path:
        run_env["PYTHONPATH"] = sweeper_path
    return subprocess.Popen(args, cwd=ROOT, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def rows(out: str, name: str) -> list[dict]:
    path = os.path.join(out, name, "results.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def shares(per_sweep: list[list[dict]]) -> list[float]:
    """Each sweep's share of the slot-time of ok trials while every sweep had trials running."""
    spans = [[(float(r["t_start"]), float(r["t_end"])) for r in rs if r["status"] == "ok" and r.get("t_start")]
             for rs in per_sweep]
    if len(spans) < 2 or not all(spans):
        return []
    lo, hi = max(min(s for s, _ in sp) for sp in spans), min(max(e for _, e in sp) for sp in spans)
    if hi <= lo:
        return [0.0 for _ in spans]
    busy = [sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in sp) for sp in spans]
    total = sum(busy) or 1.0
    return [b / total for b in busy]


def fair_count(first: list[dict], second: list[dict], second_launch: float) -> int | None:
    """Trials of the first sweep that started after the second was launched and before its first trial."""
    starts = [float(r["t_start"]) for r in second if r.get("t_start")]
    if not starts:
        return None
    begin = min(starts)
    return sum(1 for r in first if r.get("t_start") and second_launch < float(r["t_start"]) < begin)


def scenario(name: str, sweeper_path: str | None) -> dict:
    from fake_nvml import Card, FakeNvml

    n, trials, per_gpu, (low, high), busy, colleague, cards = SCENARIOS[name]
    with tempfile.TemporaryDirectory(prefix="shared-") as tmp:
        board, machine = os.path.join(tmp, "board"), os.path.join(tmp, "machine")
        os.mkdir(board)
        fake = FakeNvml([Card(total_mb=CARD_MB) for _ in range(cards)], board=board)
        env = {**os.environ, "SWEEPER_FAKE_NVML": fake.to_json(), "SWEEPER_MACHINE_DIR": machine}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        sizes = [12, 3] if name == "fair" else [trials] * n
        grids = []
        for i, size in enumerate(sizes):
            grid = os.path.join(tmp, f"grid{i}.py")
            with open(grid, "w") as f:
                f.write(GRID.format(bench=HERE, trials=size, low=low, high=high, busy=busy, board=board))
            grids.append(grid)
        held = None
        t0 = time.monotonic()
        if colleague is not None:
            held = subprocess.Popen([sys.executable, os.path.join(TESTS, "fake_nvml.py"), "--hold", board,
                                     fake.cards[0].uuid, str(colleague[0]),
                                     *([str(colleague[1])] if colleague[1] else [])],
                                    stdout=subprocess.PIPE, text=True)
            assert held.stdout is not None and held.stdout.readline().strip() == "holding"
        procs, launched = [], []
        for i, grid in enumerate(grids):
            if name == "fair" and i == 1:
                time.sleep(2.0)  # the second sweep comes while the first runs
            launched.append(time.time())
            procs.append(launch(sweeper_path, env, grid, tmp, f"s{i}", per_gpu))
        outputs = [p.communicate(timeout=900)[0] for p in procs]
        wall = time.monotonic() - t0
        if held is not None:
            held.kill()
            held.wait()
        per_sweep = [rows(tmp, f"s{i}") for i in range(len(grids))]
    everything = [r for rs in per_sweep for r in rs]
    statuses = Counter(r["status"] for r in everything)
    caps = [int(float(r["gpu_mem_cap_mb"])) for r in everything if r.get("gpu_mem_cap_mb")]
    need_mid = (low + high) // 2
    always = colleague[0] if colleague and not colleague[1] else 0
    ideal = sum(sizes) * busy / (capacity(per_gpu, need_mid, always) * cards) + (colleague[1] if colleague else 0.0)
    return {"statuses": dict(statuses), "ooms": statuses.get("oom", 0), "rows": len(everything),
            "expected": sum(sizes), "min_cap": min(caps) if caps else None, "wall": wall, "ideal": ideal,
            "shares": shares(per_sweep), "again": sum(int(r["attempts"]) - 1 for r in everything),
            "fair": fair_count(per_sweep[0], per_sweep[1], launched[1]) if name == "fair" else None,
            "tails": [o.strip().splitlines()[-3:] for o in outputs]}


def line(label: str, rs: list[dict]) -> str:
    r = rs[0]
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
    wall = statistics.median(x["wall"] for x in rs)
    share = " / ".join(f"{s:.2f}" for s in r["shares"]) or "-"
    fair = "" if r["fair"] is None else f"{r['fair']}"
    return (f"  {label:<8}{statuses:<26}{r['ooms']:>5}{'' if r['min_cap'] is None else r['min_cap']:>9}"
            f"{r['again']:>8}{wall:>9.1f}{r['ideal']:>7.1f}{wall / r['ideal']:>7.2f}  {share:<18}{fair:>5}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="another checkout of sweeper to run side by side (its folder)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--seeds", type=int, default=1, help="runs of each (medians of the makespan)")
    ap.add_argument("--json", help="write every run's numbers here")
    args = ap.parse_args()
    sides = ([("before", args.before)] if args.before else []) + [("after", None)]
    results: dict[str, dict[str, list[dict]]] = {}
    for name in args.scenarios.split(","):
        results[name] = {label: [] for label, _ in sides}
        for _ in range(args.seeds):
            for label, path in sides:  # interleaved: a busy machine's noise falls on each alike
                r = scenario(name, path)
                results[name][label].append(r)
                print(f"{name} {label}: {r['wall']:.1f}s {r['statuses']}", file=sys.stderr)
    print(f"\n{'':<10}{'statuses (all sweeps)':<26}{'ooms':>5}{'min cap':>9}{'re-runs':>8}{'makespan':>9}"
          f"{'ideal':>7}{'ratio':>7}  {'shares':<18}{'fair':>5}")
    for name, by_side in results.items():
        n, trials, per_gpu, _, busy, colleague, cards = SCENARIOS[name]
        held = "" if not colleague else f", colleague {colleague[0]} MB for " + (f"{colleague[1]:g} s" if colleague[1]
                                                                               else "the whole run")
        print(f"{name}: {n} sweep(s), per_gpu {per_gpu or 'default'}{held}")
        for label, rs in by_side.items():
            print(line(label, rs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
