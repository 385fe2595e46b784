"""Population-based training against the best fixed learning rate, on Ray Tune's PBT example
problem (its ``pbt_function``): accuracy grows fastest at a learning rate that rises, then
falls, with the accuracy itself, so a fixed one gets stuck. Population 4, interval 4, 200
steps; the fixed rates are a grid of 8 over the same range; each seed both ways, side by side.

    python bench/pbt.py [--seeds 5] [--steps 200]

Prints the median final accuracy of each, their ratio and the wall time per step. Ray Tune's
own PopulationBasedTraining on the same problem is not run here yet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sweeper  # noqa: E402

STEPS = 200


def climb(params):
    """Ray Tune's ``pbt_function``: one step per epoch, its state in the trial's checkpoint."""
    import random

    import numpy as np

    trial = sweeper.current_trial()
    path = os.path.join(trial.checkpoint, "state.json") if trial is not None else None
    state = {"step": 0, "acc": 0.0, "rng": None}
    if path and os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    rng = random.Random(params.get("seed", 0) * 100003 + state["step"])
    nrng = np.random.default_rng(params.get("seed", 0) * 100003 + state["step"])
    lr, acc, midpoint = params["lr"], state["acc"], 100
    steps = params.get("steps", STEPS)
    while state["step"] < steps:
        optimal = 0.01 * acc / midpoint if acc < midpoint else 0.01 - 0.01 * (acc - midpoint) / midpoint
        optimal = min(0.01, max(0.001, optimal))
        q_err = max(lr, optimal) / min(lr, optimal)
        if q_err < 3:
            acc += (1.0 / q_err) * rng.random()
        elif lr > optimal:
            acc -= (q_err - 3) * rng.random()
        acc = max(0.0, acc + 2 * float(nrng.normal()))
        state["step"] += 1
        state["acc"] = acc
        if path:
            with open(path + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(path + ".tmp", path)
        sweeper.report(mean_accuracy=acc)
    return {"mean_accuracy": acc}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    rows = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as out:
            t0 = time.monotonic()
            df = sweeper.sweep(climb, {"lr": sweeper.uniform(0.0001, 0.02), "seed": seed, "steps": args.steps},
                               search="pbt", metric="mean_accuracy", mode="max", out=out, name="pbt", seed=seed,
                               workers=2, progress=False, pbt={"population": 4, "interval": 4})
            pbt_wall = time.monotonic() - t0
            pbt_best = float(df["mean_accuracy"].max())
            t0 = time.monotonic()
            grid = [0.0001 + i * (0.02 - 0.0001) / 7 for i in range(8)]
            fixed = sweeper.sweep(climb, {"lr": grid, "seed": [seed], "steps": [args.steps]}, metric="mean_accuracy", mode="max",
                                  out=out, name="fixed", seed=seed, workers=2, progress=False)
            fixed_wall = time.monotonic() - t0
            fixed_best = float(fixed["mean_accuracy"].max())
        rows.append((seed, pbt_best, fixed_best, pbt_wall, fixed_wall))
        print(f"seed {seed}: pbt {pbt_best:.1f} ({pbt_wall:.1f} s), best fixed lr {fixed_best:.1f} "
              f"({fixed_wall:.1f} s)", flush=True)
    pbt_med = statistics.median(r[1] for r in rows)
    fixed_med = statistics.median(r[2] for r in rows)
    steps = 4 * args.steps
    print()
    print("| | median final accuracy | vs best fixed lr | wall per member-step |")
    print("| --- | --- | --- | --- |")
    print(f"| sweeper pbt (population 4, interval 4) | {pbt_med:.1f} | {pbt_med / fixed_med:.2f}x | "
          f"{1000 * statistics.median(r[3] for r in rows) / steps:.1f} ms |")
    print(f"| best of 8 fixed lrs | {fixed_med:.1f} | 1.00x | "
          f"{1000 * statistics.median(r[4] for r in rows) / (8 * args.steps):.1f} ms |")


if __name__ == "__main__":
    main()
