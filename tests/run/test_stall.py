"""Stalls (``--stall``, ``stall=``): a trial that neither reports an epoch nor writes to its
log for that long is stopped and recorded ``stalled``, its own status (retryable), apart
from ``timeout``. The orderings are tested to the second in fake time
(tests/run/test_engine_clock.py); here, what a user sees with real processes, and the
durations the option takes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sweeper import Options, SweepError
from sweeper.model.options import duration
from sweeper.store.table import READ_CSV
from conftest import run_cli, write_grid


@pytest.mark.unit
@pytest.mark.parametrize("given, seconds", [("90", 90), ("90s", 90), ("10m", 600), ("1.5h", 5400), ("2d", 172800),
                                            (" 10M ", 600), (45, 45), (0.5, 0.5), (np.int64(7), 7)])
def test_a_duration_is_seconds_or_a_number_with_a_unit(given, seconds):
    assert duration(given) == seconds
    assert Options.build({"stall": given}).stall == seconds
    assert Options.build({"timeout": given}).timeout == seconds


@pytest.mark.unit
@pytest.mark.parametrize("given", ["ten", "10 minutes", "-1m", "0", 0, -3, True, "inf", "nan", "", [10], 10 ** 400])
def test_anything_else_is_refused_in_one_line_naming_the_option(given):
    with pytest.raises(SweepError) as caught:
        Options.build({"stall": given})
    message = str(caught.value)
    assert message.startswith("stall must be a positive number of seconds or a duration such as 90s, 10m")
    assert "\n" not in message


GRID = """import time
import sweeper


def train(params):
    if params["x"] == "silent":  # one line, then nothing: stalled
        print("loading", flush=True)
        time.sleep(600)
    elif params["x"] == "chatty":  # no epochs, but it keeps writing to its log for twice the stall
        for _ in range(100):
            print(".", flush=True)
            time.sleep(0.1)
    elif params["x"] == "epochs":  # nothing in its log, but an epoch every half second
        for epoch in range(1, 21):
            time.sleep(0.5)
            sweeper.report(epoch=epoch, loss=1.0 / epoch)
    return {"loss": 0.0}


grid = {"x": ["silent", "chatty", "epochs"]}
"""


def test_a_silent_trial_is_stalled_and_retried_and_live_ones_are_not(tmp_path):
    """Under the default start method (forkserver) only. The stall is the engine's alone: its
    deadline, the look at the log's age and the ``stalled`` row are the same code under spawn,
    and a stalled trial is stopped by the same cancel (SIGTERM to its group) as a timed-out
    one, which tests/run/test_failures.py runs under both start methods (the daemon and
    SIGTERM-ignoring cases). Only the fork server's watchdog looks at the stall (at half of
    it), so forkserver is the start method whose case is the stall's own."""
    grid = write_grid(tmp_path, GRID)
    # 5 s: a trial's own import of the grid file counts toward its stall, and this machine may be busy
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--workers", "3", "--stall", "5s", "--retries", "1",
                "--start-method", "forkserver", timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr  # a trial failed
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV).set_index("param_x")
    assert df.status.to_dict() == {"silent": "stalled", "chatty": "ok", "epochs": "ok"}, df.error.tolist()
    assert df.attempts["silent"] == 2  # stalled is retried, with a clock of its own
    assert "neither reported an epoch nor wrote to its log for 5s" in df.error["silent"]
    assert "1 stalled" in r.stdout


def test_a_bad_stall_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    grid = write_grid(tmp_path, GRID)
    r = run_cli(grid, "--out", str(tmp_path / "out"), "--stall", "ten minutes", timeout=60)
    assert r.returncode == 2
    assert "--stall: a positive number of seconds or a duration such as 90s, 10m" in r.stderr
    assert not (tmp_path / "out").exists()
