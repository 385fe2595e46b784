"""GPU check: the GPU tier of the tests, then the packing benchmark, on this machine's card.

Run on a machine with an NVIDIA GPU (TensorFlow, or JAX/PyTorch with Keras on JAX)::

    python bench/gpu_check.py                 # tier + packing benchmark
    KERAS_BACKEND=jax python bench/gpu_check.py --quick

The tier is ``python -m pytest -m gpu -rs tests/system/test_gpu_tier.py`` (each trial sees its
own card, the cap holds for TensorFlow, JAX and PyTorch, --per-gpu 4 shares a card,
memory is released, ``free`` skips a held card, the Keras example trains on the GPU);
the benchmark is ``bench/gpu_pack.py``. Exit status: the first that failed, else 0; 2 when
there is no GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the benchmark at --per-gpu 1,4 only")
    ap.add_argument("--trials", type=int, default=16, help="trials per packing in the benchmark")
    args = ap.parse_args()
    from sweeper.system import gpus

    if not gpus.inventory():
        print(f"gpu_check: no GPU here ({gpus.unavailable or 'NVML lists none'}); nothing checked")
        return 2
    tier = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-rs", "-p", "no:cacheprovider",
                           os.path.join(ROOT, "tests", "system", "test_gpu_tier.py")], cwd=ROOT)
    pack = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_pack.py"),
                           "--trials", str(args.trials), *(["--per-gpu", "1,4"] if args.quick else [])], cwd=ROOT)
    print(f"gpu_check: tier exit {tier.returncode}, packing benchmark exit {pack.returncode}")
    return tier.returncode or pack.returncode


if __name__ == "__main__":
    sys.exit(main())
