"""Light trial functions for the benchmark (imported by spawned children: nothing heavy here).

Every trial returns the same timing record, so every method's gaps can be computed:
``t_start``/``t_end`` (``time.time()`` at fn start and just before return), ``pid`` and
``slot`` (``SWEEPER_SLOT`` when sweeper sets it, else -1).
"""

from __future__ import annotations

import os
import time


def stamp(t_start: float, **extra: float) -> dict:
    """The record every benchmark trial returns (numbers only: sweeper wants metrics)."""
    try:
        slot = int(os.environ.get("SWEEPER_SLOT", -1))
    except ValueError:
        slot = -1
    return {"t_start": t_start, "t_end": time.time(), "pid": os.getpid(), "slot": slot, **extra}


def noop(params):
    """Does nothing: what is measured is the machinery around it."""
    return stamp(time.time())


def sleep(params):
    """Sleeps ``params['s']`` seconds without importing anything heavy."""
    t0 = time.time()
    time.sleep(float(params["s"]))
    return stamp(t0)
