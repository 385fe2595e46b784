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


def epochs(params):
    """Reports ``params['epochs']`` epochs as fast as it can (no work between them); returns
    how long the reporting took inside the trial, per epoch, in ms."""
    import sweeper

    t0 = time.perf_counter()
    for epoch in range(1, int(params["epochs"]) + 1):
        sweeper.report(epoch=epoch, loss=1.0 / epoch + params["x"])
    per_epoch_ms = 1000 * (time.perf_counter() - t0) / int(params["epochs"])
    return stamp(time.time(), loss=1.0 / int(params["epochs"]) + params["x"], per_epoch_ms=per_epoch_ms)


def fake_gpu(params):
    """Takes ``need_mb`` of a simulated card (tests/fake_nvml.py's ``allocate``: OOM past its
    cap or the card's free memory, as a framework) and holds it until ``busy_s`` after it
    began (the wait for the parent's sampler to see it included), then returns. With
    ``epochs`` it reports that many epochs, evenly over ``busy_s``, as Keras's fit does
    through sweeper's callback."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    import fake_nvml

    import sweeper

    t0 = time.time()
    # as its framework would take it ("tensorflow": its whole cap at start without growth);
    # waits until the sampler has seen it
    fake_nvml.allocate(params["board"], params["need_mb"], params.get("framework", "exact"))
    epochs = int(params.get("epochs", 0))
    for epoch in range(1, epochs + 1):
        time.sleep(max(0.0, params["busy_s"] * epoch / epochs - (time.time() - t0)))
        sweeper.report(epoch=epoch, loss=1.0 / epoch)
    time.sleep(max(0.0, params["busy_s"] - (time.time() - t0)))  # busy_s in all, as a trial's run
    return stamp(t0)


def hog(params):
    """Holds ``mb`` MB of host memory (every page touched) for ``wait_s`` in all, as a trial
    that waits on its GPU holds its host memory."""
    t0 = time.time()
    data = bytearray(params["mb"] << 20)
    data[::4096] = b"\x01" * len(range(0, len(data), 4096))
    time.sleep(max(0.0, params["wait_s"] - (time.time() - t0)))
    return stamp(t0, held=float(len(data) >> 20))
