"""GPU check: do trials stay under their memory cap, share the GPU, and release it?

Run on a machine with an NVIDIA GPU (TensorFlow, or JAX with ``KERAS_BACKEND=jax``)::

    python bench/gpu_check.py            # 8 small Keras trials, --per-gpu 4
    KERAS_BACKEND=jax python bench/gpu_check.py

While the sweep runs, a thread samples NVML every 50 ms: each trial process's GPU
memory, and how many trial processes are on each GPU at once. After the sweep it checks
that no trial process still holds GPU memory. Exit status 1 when a trial exceeded its
cap (plus the CUDA context, which the frameworks' caps do not cover) or memory was left
held; 2 when there is no GPU to check on.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np

import sweeper

#: NVML counts a process's CUDA context too; no framework cap covers it.
CONTEXT_ALLOWANCE_MB = 1024


def train(params):
    """A small Keras MLP on random data: enough to allocate on the GPU and train."""
    import keras

    rng = np.random.default_rng(0)
    x = rng.random((4096, 256), dtype=np.float32)
    y = rng.integers(0, 10, 4096)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(params["units"], activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=params["epochs"], batch_size=256, verbose=0)
    return {"accuracy": float(history.history["accuracy"][-1]), "backend": float(keras.backend.backend() == "jax")}


def _trial_pid(log: str) -> int:
    """The pid of a trial's last attempt, from the header line sweeper writes in its log."""
    with open(log) as f:
        heads = [line for line in f if line.startswith("=== sweeper:")]
    return int(heads[-1].split(" pid ")[1].split(",")[0])


def _children() -> set[int]:
    me, kids = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        kids.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return kids


class Watch(threading.Thread):
    """Samples NVML: peak MB per trial process, most trial processes on one GPU at once."""

    def __init__(self, nvml) -> None:
        super().__init__(daemon=True)
        self.nvml = nvml
        self.peaks: dict[int, int] = {}
        self.most_at_once = 0
        self.stop = threading.Event()

    def held_by_trials(self, trial_pids: set[int]) -> dict[int, int]:
        held = {}
        for i in range(self.nvml.nvmlDeviceGetCount()):
            handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
            for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if p.pid in trial_pids:
                    held[p.pid] = (p.usedGpuMemory or 0) >> 20
        return held

    def run(self) -> None:
        while not self.stop.is_set():
            kids = _children()
            for i in range(self.nvml.nvmlDeviceGetCount()):
                handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
                on_gpu = [p for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in kids]
                self.most_at_once = max(self.most_at_once, len(on_gpu))
                for p in on_gpu:
                    self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), (p.usedGpuMemory or 0) >> 20)
            self.stop.wait(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--per-gpu", type=int, default=4)
    ap.add_argument("--start-method", default=None, help="spawn (default) or forkserver, if supported")
    args = ap.parse_args()
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        print(f"gpu_check: no NVML/GPU here ({exc}); nothing checked")
        return 2
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    watch = Watch(pynvml)
    watch.start()
    grid = {"units": [64, 128, 256, 512][: max(1, args.trials // 2)], "epochs": [2, 3]}
    extra = {"start_method": args.start_method} if args.start_method else {}
    with tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        df = sweeper.sweep(train, grid, per_gpu=args.per_gpu, out=out, name="check", progress=False, **extra)
        wall = time.monotonic() - t0
        pid_of = {name: _trial_pid(os.path.join(out, "check", "trials", name, "log.txt")) for name in df.trial}
    watch.stop.set()
    watch.join()
    time.sleep(0.5)  # let the driver drop the last exited process from its list
    left = watch.held_by_trials(set(pid_of.values()))
    print(f"gpu_check: backend {backend}, {len(df)} trials, per_gpu {args.per_gpu}, {wall:.1f}s, statuses "
          f"{df.status.value_counts().to_dict()}")
    print(f"{'trial':<24} {'device':<7} {'cap MB':>8} {'peak MB':>8} {'sweeper saw':>12}")
    bad = 0
    for row in df.itertuples():
        cap = getattr(row, "gpu_mem_cap_mb", float("nan"))
        peak = watch.peaks.get(pid_of[row.trial], 0)
        seen = getattr(row, "gpu_mem_peak_mb", float("nan"))
        over = cap == cap and peak > cap + CONTEXT_ALLOWANCE_MB
        bad += over
        print(f"{row.trial:<24} {row.device:<7} {cap:>8.0f} {peak:>8} {seen:>12}{'  OVER CAP' if over else ''}")
    print(f"gpu_check: most trial processes on one GPU at once: {watch.most_at_once} (per_gpu {args.per_gpu})")
    print(f"gpu_check: trial processes still holding GPU memory after the sweep: {left or 'none'}")
    failed = bad or left or (df.status != "ok").any() or watch.most_at_once > args.per_gpu
    print("gpu_check: FAIL" if failed else "gpu_check: PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
