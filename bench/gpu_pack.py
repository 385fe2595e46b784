"""Packing benchmark: small Keras trials of three sizes on one GPU at --per-gpu 1, 2, 4 and
auto, side by side.

Run on a machine with an NVIDIA GPU (TensorFlow, or JAX with ``KERAS_BACKEND=jax``)::

    python bench/gpu_pack.py                      # 18 trials (3 sizes), per-gpu 1,2,4,auto
    KERAS_BACKEND=jax python bench/gpu_pack.py --trials 12 --per-gpu 1,auto --sizes 256,2048

For each packing it runs the same Keras trials (widths ``--sizes``, the same number of
each; under ``auto`` the width is the memory key) on one card and reports the
makespan, trials per minute (and the speed-up over --per-gpu 1), the median trial's
duration, each trial's cap and the most NVML showed any trial holding (from outside, by
tests/gpu_watch.py, and sweeper's own ``gpu_mem_peak_mb``), the busiest-card GPU
utilisation and the host CPU utilisation while it ran, and what bounds it:

* ``GPU``: the card was busy (utilisation >= 85%), more trials at once cannot help;
* ``host CPU``: the cores were (>= 85%): imports, Python and data feeding;
* ``start-up``: neither was: trials spend their time importing and compiling, which
  packing overlaps.

Targets: at least 2x the trials per minute of --per-gpu 1 at 4 per GPU; auto
faster than --per-gpu 1 with no trial lost to OOM; every trial under its own
cap plus the stated margin. Exit 1 when a trial failed or went over its cap, or NVML
never listed a trial (caps unchecked); 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # the outside watcher

import sweeper  # noqa: E402
from gpu_watch import MARGIN_MB, Watch  # noqa: E402


def train(params):
    """A small Keras MLP on random data: enough to allocate on the GPU and train."""
    import keras
    import numpy as np

    rng = np.random.default_rng(params["i"])
    x = rng.random((8192, 256), dtype=np.float32)
    y = rng.integers(0, 10, 8192)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(params["units"], activation="relu"),
                              keras.layers.Dense(params["units"], activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=params["epochs"], batch_size=256, verbose=0)
    return {"accuracy": float(history.history["accuracy"][-1]), "pid": float(os.getpid())}


def bound(gpu_util: float, cpu_util: float) -> str:
    if gpu_util >= 85:
        return "GPU"
    if cpu_util >= 85:
        return "host CPU"
    return "start-up"


def run_one(per_gpu: int | str, trials: int, gpu: int, epochs: int, sizes: list[int]) -> dict:
    import psutil

    grid = {"i": list(range(max(1, trials // len(sizes)))), "units": sizes, "epochs": epochs}
    auto = {"memory_keys": ["units"]} if per_gpu == "auto" else {}
    with tempfile.TemporaryDirectory() as out, Watch() as watch:
        psutil.cpu_percent()  # start the host CPU's clock
        t0 = time.monotonic()
        df = sweeper.sweep(train, grid, gpus=[gpu], per_gpu=per_gpu, out=out, name=f"pack{per_gpu}",
                           progress=False, **auto)
        makespan = time.monotonic() - t0
        cpu = psutil.cpu_percent()
    caps = df.gpu_mem_cap_mb.dropna()
    cap = int(caps.max()) if len(caps) else None
    outside = max(watch.peaks.values(), default=0)
    # each trial against its own cap (under auto each has its own)
    own = {int(p): c for p, c in zip(df.get("pid", []), df.gpu_mem_cap_mb) if p == p and c == c}
    over = [pid for pid, peak in watch.peaks.items() if pid in own and peak > own[pid] + MARGIN_MB]
    util = [u for u in watch.gpu_util if u >= 0]
    gpu_util = statistics.mean(util) if util else float("nan")
    return {
        "per_gpu": per_gpu, "makespan_s": makespan, "per_min": 60 * len(df) / makespan,
        "median_trial_s": float(df.duration_s.median()), "cap_mb": cap, "peak_mb": outside,
        "sweeper_peak_mb": int(df.gpu_mem_peak_mb.max()) if df.gpu_mem_peak_mb.notna().any() else None,
        "most_at_once": watch.most_at_once, "gpu_util": gpu_util, "cpu_util": cpu,
        "bound": bound(gpu_util, cpu), "ok": int((df.status == "ok").sum()), "n": len(df),
        "oom": int((df.status == "oom").sum()) + int((df.get("attempts", 1) > 1).sum()),
        "over_cap": bool(over),
        "unseen": not watch.peaks,  # NVML listed no trial: the caps went unchecked
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=18)
    ap.add_argument("--per-gpu", default="1,2,4,auto", help="packings to compare, e.g. 1,4,auto")
    ap.add_argument("--sizes", default="128,1024,4096", help="the models' widths (units), e.g. 256,2048")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--gpu", type=int, default=0, help="the card (index as nvidia-smi shows it)")
    args = ap.parse_args()
    from sweeper.system import gpus

    cards = gpus.inventory()
    card = next((g for g in cards if g.index == args.gpu), None)
    if card is None:
        print(f"gpu_pack: no GPU {args.gpu} here ({gpus.unavailable or f'NVML lists {len(cards)}'}); "
              "nothing measured")
        return 2
    import importlib.util

    # Keras's own default is TensorFlow; where it is missing, the first backend installed
    found = [fw for fw in ("tensorflow", "jax", "torch") if importlib.util.find_spec(fw)]
    backend = os.environ.setdefault("KERAS_BACKEND", found[0] if found else "tensorflow")
    print(f"gpu_pack: {card.name} ({card.total_mb} MB), Keras on {backend}, {args.trials} trials of "
          f"{args.epochs} epochs, {os.cpu_count()} cores; margin over a cap: {MARGIN_MB} MB")
    sizes = [int(u) for u in args.sizes.split(",")]
    rows = [run_one(k if k == "auto" else int(k), args.trials, args.gpu, args.epochs, sizes)
            for k in args.per_gpu.split(",")]
    base = next((r["per_min"] for r in rows if r["per_gpu"] == 1), rows[0]["per_min"])
    head = ("per-gpu", "makespan s", "trials/min", "vs 1", "median trial s", "cap MB", "peak MB",
            "sweeper peak", "at once", "GPU util %", "CPU util %", "bound", "ok", "oom runs")
    print("  ".join(f"{h:>12}" for h in head))
    failed = False
    for r in rows:
        failed |= r["over_cap"] or r["unseen"] or r["ok"] < r["n"]
        cells = (r["per_gpu"], f"{r['makespan_s']:.1f}", f"{r['per_min']:.1f}", f"{r['per_min'] / base:.2f}x",
                 f"{r['median_trial_s']:.1f}", r["cap_mb"], "unseen" if r["unseen"] else f"{r['peak_mb']}{' OVER' if r['over_cap'] else ''}",
                 r["sweeper_peak_mb"], r["most_at_once"], f"{r['gpu_util']:.0f}", f"{r['cpu_util']:.0f}",
                 r["bound"], f"{r['ok']}/{r['n']}", r["oom"])
        print("  ".join(f"{c!s:>12}" for c in cells))
    at4 = next((r for r in rows if r["per_gpu"] == 4), None)
    if at4 is not None:
        print(f"gpu_pack: --per-gpu 4 gives {at4['per_min'] / base:.2f}x the trials per minute of --per-gpu 1 "
              f"(target >= 2x); bound by {at4['bound']}")
    auto = next((r for r in rows if r["per_gpu"] == "auto"), None)
    if auto is not None:
        print(f"gpu_pack: auto gives {auto['per_min'] / base:.2f}x the trials per minute of --per-gpu 1, "
              f"{auto['oom']} trials ran out of memory (target: faster, none lost)")
    if any(r["unseen"] for r in rows):
        print("gpu_pack: NVML never listed a trial's process (a container whose NVML reports the host's "
              "pids?): the caps went unchecked")
    print("gpu_pack: FAIL" if failed else "gpu_pack: PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
