"""Trial functions for the tests of sweeps that share a machine (tests/placement/test_shared.py):
each takes its memory of a fake card (tests/fake_nvml.py) as its framework would."""

from __future__ import annotations

import os
import time


def tf_trial(params):
    """Takes ``need_mb`` of its fake card as ``framework`` (default TensorFlow: without
    memory growth, its whole cap the moment it starts), reports an epoch, holds it for
    ``busy_s`` (its training) and returns when it started and ended. With ``cue``, its
    first attempt makes that file and waits for ``<cue>.done`` before it allocates (a
    colleague's process takes memory meanwhile). With ``until``, it holds its memory until that
    file exists, then ``busy_s`` more."""
    import fake_nvml

    import sweeper

    cue = params.get("cue")
    if cue and not os.path.exists(cue + ".done"):
        open(cue, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(cue + ".done") and time.monotonic() < deadline:  # polls the colleague's file
            time.sleep(0.02)
    t0 = time.time()
    fake_nvml.allocate(params["board"], params["need_mb"], params.get("framework", "tensorflow"))
    sweeper.report(epoch=1, loss=1.0)
    until = params.get("until")  # the test lets go of it (a file): the card stays full meanwhile
    deadline = time.monotonic() + 60
    while until and not os.path.exists(until) and time.monotonic() < deadline:  # polls the test's file
        time.sleep(0.02)
    time.sleep(params.get("busy_s", 0.3))
    return {"t_start": t0, "t_end": time.time()}
