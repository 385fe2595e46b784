"""The Keras digits MLP of experiments/digits_pbt.py: population-based training over its
learning rate against random search over the same space, at equal epochs (8 members of 24
epochs against 8 random points of 24 epochs: 192 each), 2 workers, each seed both ways.

    python bench/pbt_keras.py [--seeds 3]

Prints per method the median over seeds of the best final val_accuracy (each seed's too), the
median over members, and the wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "experiments")):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sweeper  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    from digits_pbt import options, space, train

    rows = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as out:
            t0 = time.monotonic()
            pbt = sweeper.sweep(train, space, **{**options, "seed": seed, "out": out, "name": "pbt", "workers": 2,
                                                 "progress": False})
            pbt_wall = time.monotonic() - t0
            t0 = time.monotonic()
            points = sweeper.sample(space, 8, seed=seed)
            rnd = sweeper.sweep(train, points, metric="val_accuracy", seed=seed, out=out, name="random", workers=2,
                                progress=False)
            rnd_wall = time.monotonic() - t0
        rows.append((pbt["val_accuracy"].max(), pbt["val_accuracy"].median(), pbt_wall,
                     rnd["val_accuracy"].max(), rnd["val_accuracy"].median(), rnd_wall))
        print(f"seed {seed}: pbt best {rows[-1][0]:.4f} ({pbt_wall:.0f} s), random best {rows[-1][3]:.4f} "
              f"({rnd_wall:.0f} s)", flush=True)
    med = statistics.median
    print(f"\nbench/pbt_keras.py: {args.seeds} seeds, 8 x 24 epochs each way, 2 workers\n")
    print("| method | best val_accuracy, median (each seed) | median member | wall (median) |")
    print("| --- | --- | --- | --- |")
    for label, at in (("sweeper `search=\"pbt\"` (population 8, interval 4)", 0), ("random search, 8 points", 3)):
        best = [r[at] for r in rows]
        print(f"| {label} | {med(best):.4f} ({' '.join(f'{b:.4f}' for b in best)}) | "
              f"{med(r[at + 1] for r in rows):.4f} | {med(r[at + 2] for r in rows):.0f} s |")


if __name__ == "__main__":
    main()
