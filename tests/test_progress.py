"""Seeing the sweep: per-epoch history, the console views, and status from another terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pandas as pd

import sweeper
import sweep_fns
from conftest import ROOT, run_cli, write_grid
from test_failures import _start_waiting_sweep


def test_reports_land_in_history_csv_one_row_per_epoch(tmp_path):
    df = sweeper.sweep(sweep_fns.reporter, {"x": [1, 2]}, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all()
    history = pd.read_csv(tmp_path / "sweep_fns" / "history.csv")
    assert list(history.columns) == ["trial_id", "trial", "epoch", "loss", "acc"]
    assert len(history) == 6 and history.groupby("trial_id").epoch.apply(list).tolist() == [[1, 2, 3]] * 2
    assert history[history.trial == "x=2"].acc.tolist() == [2.0, 4.0, 6.0]


def test_reporting_outside_a_trial_does_nothing():
    sweeper.report(epoch=1, loss=0.5)  # train() run by hand must not fail
    assert sweeper.current_trial() is None


def test_plain_lines_one_per_finished_trial(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import reporter as train\ngrid = {'x': [1, 2, 3]}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--metric", "acc")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("[") for line in lines) == 3
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    assert "sweeper: top 3 by acc (max):" in done.stdout
    quiet = run_cli(grid, "--out", str(tmp_path / "out"), "--fresh", "--quiet")
    assert not any(line.startswith("[") for line in quiet.stdout.splitlines())
    assert "results:" in quiet.stdout


def test_live_view_on_a_terminal(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import reporter as train\ngrid = {'x': [1, 2, 3]}\n")
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out")],
                            cwd=ROOT, stdin=follower, stdout=follower, stderr=follower,
                            env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the other end closed: the sweep is over
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "x=3" in screen and "results:" in screen and "top 3 by acc" in screen


def test_status_from_another_terminal_while_it_runs(tmp_path):
    proc, hold = _start_waiting_sweep(tmp_path)
    try:
        shown = run_cli("status", str(tmp_path / "out" / "grid"))
        assert shown.returncode == 0, shown.stderr
        assert f"running (pid {proc.pid})" in shown.stdout
        assert "1 of 4 trials finished: 1 ok; 2 running" in shown.stdout
        assert shown.stdout.count("  running  ") == 2
    finally:
        hold.touch()
        proc.communicate(timeout=120)
    assert proc.returncode == 0
    after = run_cli("status", str(tmp_path / "out" / "grid"))
    assert "not running" in after.stdout and "4 of 4 trials finished: 4 ok; 0 running" in after.stdout


def test_report_command_writes_the_page(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import reporter as train\ngrid = {'x': [1, 2, 3]}\n")
    assert run_cli(grid, "--out", str(tmp_path / "out")).returncode == 0
    done = run_cli("report", str(tmp_path / "out" / "grid"))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "grid" / "report.html").read_text()
    assert page.count('class="param-plot"') == 1 and page.count('class="curves"') == 1
    assert "top 3 by acc (max):" in done.stdout
    missing = run_cli("report", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not a sweep folder" in missing.stderr
