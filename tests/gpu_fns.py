"""Trial functions for the GPU tier (test_gpu_tier.py): real allocations on a real card.

Each imports its framework inside the trial (the parent never does), allocates ``mb`` MB
on the GPU it was pinned to, and holds it until the test's NVML watcher, outside the
trial, has listed its process (``<board>/<pid>.seen``); then it says what it saw.
"""

from __future__ import annotations

import os
import time

#: How long a trial keeps its memory once the watcher has seen it: three of sweeper's
#: sampling periods (SAMPLE_EVERY, 0.5 s), so ``gpu_mem_peak_mb`` has its allocation too.
HOLD_S = 1.5


def _wait_seen(board: str, wait_for: str | None = None, bound: float = 30.0) -> float:
    """Hold until the watcher has seen this process (and, if given, ``wait_for`` exists):
    files the watcher makes, polled with a bound. 1.0 when seen, 0.0 when the bound passed."""
    pid = os.getpid()
    open(os.path.join(board, str(pid)), "w").close()  # "I hold my memory now"
    wanted = [os.path.join(board, f"{pid}.seen")] + ([os.path.join(board, wait_for)] if wait_for else [])
    deadline = time.monotonic() + bound
    while not all(os.path.exists(p) for p in wanted):
        if time.monotonic() > deadline:
            return 0.0
        time.sleep(0.02)
    return 1.0


def allocate(params):
    """``mb`` MB on the GPU with ``fw`` (tensorflow, jax or torch); beyond the cap this raises
    the framework's own out-of-memory error, which sweeper records as ``oom``."""
    fw, mb, board = params["fw"], int(params["mb"]), params["board"]
    if fw == "torch":
        import torch

        seen = torch.cuda.device_count()
        held = torch.ones(mb << 20, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
    elif fw == "jax":
        import jax
        import jax.numpy as jnp

        seen = len(jax.devices("gpu"))
        held = jnp.ones((mb << 18,), jnp.float32)
        held.block_until_ready()
    elif fw == "tensorflow":
        import tensorflow as tf

        seen = len(tf.config.list_logical_devices("GPU"))
        with tf.device("/GPU:0"):
            held = tf.ones((mb << 18,), tf.float32)
            float(tf.reduce_sum(held[:1]))
    else:
        raise ValueError(f"fw is {fw!r}; give tensorflow, jax or torch")
    watched = _wait_seen(board, params.get("wait_for"))
    time.sleep(HOLD_S)  # a measuring window for sweeper's own sampler, not a synchronisation
    del held
    return {"devices_seen": float(seen), "watched": watched, "pid": float(os.getpid())}
