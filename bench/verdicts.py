"""What waiting for the pruner's verdict costs per reported epoch.

In a search with a pruner every ``sweeper.report`` waits for the pruner's verdict (a round
trip over the trial's pipe through the sweep's loop and Optuna's ``should_prune``), so a
pruned trial stops at the very epoch it was judged at; without a pruner reports are
batched by a thread and cost next to nothing. This runs the same search both ways, one
trial at a time, each trial reporting as fast as it can, and prints the time ``report``
took per epoch inside the trials (median over trials), side by side.

    python bench/verdicts.py [--epochs 300] [--trials 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=300, help="epochs each trial reports")
    ap.add_argument("--trials", type=int, default=5, help="trials per way")
    args = ap.parse_args()
    import optuna

    import sweeper
    import trials

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory() as out:
        # a pruner that judges every epoch but never prunes (no trial completes before the
        # last): the round trip is paid every epoch, and every trial runs to its end
        never = optuna.pruners.MedianPruner(n_startup_trials=10**6)
        for label, prune in (("batched (no pruner)", None), ("verdict per epoch", never)):
            df = sweeper.sweep(trials.epochs, {"x": sweeper.uniform(0, 1), "epochs": args.epochs}, search="random",
                               trials=args.trials, prune=prune, metric="loss", mode="min", workers=1,
                               out=out, name=label.split()[0], progress=False)
            assert (df.status == "ok").all(), df.error.tolist()
            rows.append((label, statistics.median(df.per_epoch_ms), min(df.per_epoch_ms), max(df.per_epoch_ms)))
    print(f"{args.trials} trials x {args.epochs} epochs, one at a time; ms per sweeper.report inside the trial")
    print(f"{'reports':<22}{'median':>10}{'min':>10}{'max':>10}")
    for label, med, lo, hi in rows:
        print(f"{label:<22}{med:>10.3f}{lo:>10.3f}{hi:>10.3f}")
    print(f"cost of waiting for the verdict: {rows[1][1] - rows[0][1]:.3f} ms per epoch (median)")


if __name__ == "__main__":
    main()
