"""Packing by measured memory on simulated cards: ``per_gpu="auto"`` against fixed ``per_gpu``.

    python bench/pack_sim.py                 # 32 trials, 2 fake cards of 16 GB, 3 seeds
    python bench/pack_sim.py --seeds 1 --methods auto,1

The machine is tests/fake_nvml.py's: two cards of 16 GB as NVML describes them; every other
part is real (the sweep, its processes, the sampler reading the fake NVML, the caps each
trial is given). A trial (``fake_gpu`` below) takes its need of its card as a framework
does (``fake_nvml.allocate``: a 300 MB context, the rest through an allocator capped at
the trial's cap, OOM past the cap or the card's free memory), holds it for its busy time,
and returns. Needs are drawn from 1-12 GB, one per model size (8 sizes, 4 trials each, or ``--sizes``:
``memory_keys=["size"]`` tells them apart), busy times from 2-5 s; trials come in a
shuffled order. Each seed draws its own.

Trials report 5 epochs, evenly over their busy time, as a Keras fit does through sweeper's
callback; the packer measures a new size at its first trial's first epoch.

Methods: ``auto`` (``per_gpu="auto", memory_keys=["size"]``, told nothing else),
``auto-silent`` (the same, with trials that report no epochs: each size measured at its
first trial's end), ``told``
(``per_gpu="auto"`` with each trial's true need as its ``gpu_memory`` hint: packing without
the learning), ``per_gpu`` 1, 2 and 4 (each trial capped at 0.95/k of its card), and ``hindsight``: the makespan of
a best-fit packing the bench computes from the true needs and busy times (no start-up,
no headroom, no margin; a trial whose need is larger waits for room, in the queue's
order with backfilling), and a lower bound (total need-seconds over the cards' memory,
or the longest trial), and ``hindsight+``: the same packing with auto's headroom and margin
(what knowing every need in advance would give under auto's safety rules). Columns: makespan (median over seeds), vs hindsight, OOM rows
(the table's, at the end; a re-run after an OOM counts once, as an attempt), trials not
``ok``, attempts beyond one, mean memory occupancy (need-seconds of ``ok`` trials over
the cards' memory times the makespan).

What it measures is packing: the fake cards have no kernels, so trials sharing a card do
not slow each other as real ones would (contention is bench/gpu_pack.py's, on a real GPU).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path.insert(0, TESTS)
sys.path.insert(0, HERE)

CARD_MB = 16384
CARDS = 2
#: Epochs each trial reports over its busy time (auto-silent: none).
EPOCHS = 5


def draw(seed: int, trials: int = 32, sizes: int = 8) -> list[dict]:
    rng = random.Random(seed)
    need = {f"s{i}": rng.randint(1024, 12 * 1024) for i in range(sizes)}
    points = [{"size": f"s{i % sizes}", "i": i, "need_mb": need[f"s{i % sizes}"],
               "busy_s": round(rng.uniform(2, 5), 2)} for i in range(trials)]
    rng.shuffle(points)
    return points


def hindsight(points: list[dict], cards: int = CARDS, card_mb: int = CARD_MB, headroom: float = 0.0) -> float:
    """Makespan of best-fit list scheduling with the true needs (plus ``headroom``) and durations."""
    points = [dict(p, need_mb=p["need_mb"] * (1 + headroom)) for p in points]
    free = [card_mb] * cards
    queue = list(points)
    running: list[tuple[float, int, int]] = []  # (end, card, mb)
    now = 0.0
    while queue or running:
        for p in list(queue):
            fits = [c for c in range(cards) if free[c] >= p["need_mb"]]
            if fits:
                c = min(fits, key=lambda c: free[c] - p["need_mb"])
                free[c] -= p["need_mb"]
                heapq.heappush(running, (now + p["busy_s"], c, p["need_mb"]))
                queue.remove(p)
        end, c, mb = heapq.heappop(running)
        now, free[c] = end, free[c] + mb
    return now


def lower_bound(points: list[dict], cards: int = CARDS, card_mb: int = CARD_MB) -> float:
    return max(sum(p["need_mb"] * p["busy_s"] for p in points) / (cards * card_mb),
               max(p["busy_s"] for p in points))


def run_one(method: str, points: list[dict], out: str) -> dict:
    """One sweep in a fresh process (this file with --run): its makespan and rows."""
    import subprocess

    spec = json.dumps({"method": method, "points": points, "out": out})
    proc = subprocess.run([sys.executable, __file__, "--run", spec], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{method}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run(spec: dict) -> None:
    from fake_nvml import Card, FakeNvml

    board = tempfile.mkdtemp(prefix="board-")
    fake = FakeNvml([Card(total_mb=CARD_MB) for _ in range(CARDS)], board=board)
    fake.install_for_good()
    os.environ["SWEEPER_FAKE_NVML"] = fake.to_json()
    import sweeper
    from trials import fake_gpu

    method = spec["method"]
    epochs = 0 if method == "auto-silent" else EPOCHS
    if method in ("auto", "auto-silent"):
        kw: dict = {"per_gpu": "auto", "memory_keys": ["size"]}
    elif method == "told":  # auto, given each trial's true need as its hint: packing without learning
        kw = {"per_gpu": "auto", "gpu_memory": lambda p: p["need_mb"]}
    else:
        kw = {"per_gpu": int(method)}
    points = [dict(p, board=board, epochs=epochs) for p in spec["points"]]
    t0 = time.monotonic()
    df = sweeper.sweep(fake_gpu, points, out=spec["out"], name=f"m{method}", progress=False, **kw)
    wall = time.monotonic() - t0
    rows = [{"need": int(r.param_need_mb), "busy": float(r.param_busy_s), "status": r.status,
             "attempts": int(r.attempts), "device": r.device} for r in df.itertuples()]
    print(json.dumps({"wall": wall, "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sizes", type=int, default=8, help="model sizes among the 32 trials (default 8)")
    ap.add_argument("--methods", default="auto,auto-silent,told,1,2,4")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        _run(json.loads(args.run))
        return
    methods = args.methods.split(",")
    results: dict[str, list[dict]] = {m: [] for m in methods}
    from sweeper.placement.packing import HEADROOM, MARGIN_MB

    bounds: list[tuple[float, float, float]] = []
    for seed in range(args.seeds):
        points = draw(seed, sizes=args.sizes)
        bounds.append((hindsight(points), lower_bound(points),
                       hindsight(points, card_mb=CARD_MB - MARGIN_MB, headroom=HEADROOM)))
        for m in methods:  # interleaved per seed: a busy machine's noise falls on each alike
            with tempfile.TemporaryDirectory() as out:
                r = run_one(m, points, out)
            ok = [row for row in r["rows"] if row["status"] == "ok"]
            r["ooms"] = sum(row["status"] == "oom" for row in r["rows"])
            r["failed"] = sum(row["status"] != "ok" for row in r["rows"])
            r["again"] = sum(row["attempts"] - 1 for row in r["rows"])
            r["occupancy"] = sum(row["need"] * row["busy"] for row in ok) / (CARDS * CARD_MB * r["wall"])
            results[m].append(r)
            print(f"seed {seed} {m}: {r['wall']:.1f}s, {r['failed']} not ok", file=sys.stderr)
    hind = statistics.median(b[0] for b in bounds)
    print(f"\n{len(draw(0))} trials on {CARDS} simulated cards of {CARD_MB // 1024} GB, needs 1-12 GB ({args.sizes} sizes), "
          f"busy 2-5 s; {args.seeds} seeds; medians")
    print(f"{'method':<12}{'makespan s':>11}{'vs hindsight':>14}{'oom rows':>10}{'not ok':>8}{'re-runs':>9}"
          f"{'occupancy':>11}")
    print(f"{'hindsight':<12}{hind:>11.1f}{1.0:>14.2f}{0:>10}{0:>8}{0:>9}{'':>11}")
    print(f"{'lower bound':<12}{statistics.median(b[1] for b in bounds):>11.1f}")
    margins = statistics.median(b[2] / b[0] for b in bounds)
    print(f"{'hindsight+':<12}{statistics.median(b[2] for b in bounds):>11.1f}{margins:>14.2f}"
          f"   (true needs plus auto's {HEADROOM:.0%} headroom and {MARGIN_MB} MB margin per card)")
    for m in methods:
        rs = results[m]
        name = m if m in ("auto", "auto-silent", "told") else f"per_gpu={m}"
        ratios = [r["wall"] / b[0] for r, b in zip(rs, bounds)]
        print(f"{name:<12}{statistics.median(r['wall'] for r in rs):>11.1f}{statistics.median(ratios):>14.2f}"
              f"{statistics.median(r['ooms'] for r in rs):>10g}{statistics.median(r['failed'] for r in rs):>8g}"
              f"{statistics.median(r['again'] for r in rs):>9g}"
              f"{statistics.median(r['occupancy'] for r in rs):>11.0%}")
    if "auto" in results and "1" in results:
        speed = [a["wall"] / b["wall"] for a, b in zip(results["1"], results["auto"])]
        print(f"\nauto is {statistics.median(speed):.2f}x faster than per_gpu=1 (median of per-seed ratios)")


if __name__ == "__main__":
    main()
