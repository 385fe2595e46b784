"""Scenario B: a trial whose module imports TensorFlow at top level, then only sleeps.

The sleep is the "useful" work; the import is what a fresh process per trial pays again.
"""

import time

import tensorflow  # noqa: F401  (the point: a heavy top-level import)

from trials import stamp


def train(p):
    t0 = time.time()
    time.sleep(float(p["s"]))
    return stamp(t0)
