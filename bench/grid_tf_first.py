"""Scenario E's grid file: TensorFlow imported at its top, as a user's grid file does, and a
train that does nothing but note when it started.

``train`` appends ``time.time()`` (taken as its first statement) to the file named by
``SWEEPER_BENCH_STAMPS``, one line per call, so bench/run.py can tell when the first
trial's ``train`` began without reading sweeper's own records. The number of trials
comes from ``SWEEPER_BENCH_TRIALS`` (default 2): every process that imports this file
(the CLI's check, each trial, a resume) sees the same environment, hence the same grid.

``python bench/grid_tf_first.py`` imports it once, appends ``time.time()`` once its top
level has run, and exits: scenario E's unit, one import (interpreter start included).
"""

import os
import time

import tensorflow  # noqa: F401  (the point: a heavy top-level import)

grid = {"i": list(range(int(os.environ.get("SWEEPER_BENCH_TRIALS", "2"))))}


def train(params):
    t0 = time.time()
    _stamp(t0, f"train{params['i']}")
    return {"t_start": t0, "t_end": time.time()}


def _stamp(t, what):
    path = os.environ.get("SWEEPER_BENCH_STAMPS")
    if path:
        with open(path, "a") as f:  # one short line per write, O_APPEND: lines never interleave
            f.write(f"{t!r} {what} {os.getpid()}\n")


if __name__ == "__main__":  # the unit: everything above has been imported
    _stamp(time.time(), "imported")
