"""Seeing the sweep: per-epoch history, the console views, and status from another terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import ROOT, run_cli, write_grid
from waiting_sweep import start_waiting_sweep


def test_reports_land_in_history_csv_one_row_per_epoch(tmp_path):
    df = sweeper.sweep(sweep_fns.reporter, {"x": [1, 2]}, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all()
    history = pd.read_csv(tmp_path / "sweep_fns" / "history.csv")
    assert list(history.columns) == ["trial_id", "trial", "epoch", "loss", "acc"]
    assert len(history) == 6 and history.groupby("trial_id").epoch.apply(list).tolist() == [[1, 2, 3]] * 2
    assert history[history.trial == "x=2"].acc.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.unit
def test_reporting_outside_a_trial_does_nothing(capsys, tmp_path, monkeypatch):
    import threading

    monkeypatch.chdir(tmp_path)
    threads = {t.ident for t in threading.enumerate()}
    assert sweeper.report(epoch=1, loss=0.5) is None  # train() run by hand must not fail
    assert sweeper.current_trial() is None
    # nothing else happened: no batching thread, nothing printed, no file written
    assert {t.ident for t in threading.enumerate()} == threads
    assert capsys.readouterr() == ("", "")
    assert list(tmp_path.iterdir()) == []


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


LIVE_GRID = "from sweep_fns import held_reporter as train\ngrid = {'x': [1, 2, 3]}\noptions = {'workers': 1}\n"
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours, cursor moves, line erases
BAR_LINE = re.compile(r"^sweep [━╺╸-]{30} \d/3 .*\d+:\d\d elapsed")  # the bar is 30 cells wide
RUNNING_ROW = re.compile(r"^  x=2  \S+  \d+:\d\d  epoch 1  acc=2$")  # name, device, elapsed, epoch, metric


def _screen_lines(raw: bytes) -> list[str]:
    """What the terminal was sent, as lines of text without escape sequences."""
    text = CSI.sub("", raw.decode("utf-8", errors="replace"))
    return [line.rstrip() for line in re.split(r"\r\n|\r|\n", text)]


def _read_pty(leader: int, chunks: list[bytes], until, timeout: float) -> bool:
    """Read what the sweep writes to the terminal until ``until(raw)`` holds (True), the
    sweep closes its end (False) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if until(b"".join(chunks)):
            return True
        if select.select([leader], [], [], 0.1)[0]:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the other end closed, the sweep is over
                return False
            if not data:
                return False
            chunks.append(data)
    return until(b"".join(chunks))


def test_live_view_on_a_terminal(tmp_path):
    """On a terminal the sweep draws a bar and a row per running trial in place, and the
    finished trials' lines scroll above. Trial x=2 holds after its epoch 1 until the test
    has seen its row on the terminal."""
    grid = write_grid(tmp_path, LIVE_GRID)
    held = tmp_path / "out" / "grid" / "trials" / "x=2"
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out")],
                            cwd=ROOT, stdin=follower, stdout=follower, stderr=follower,
                            env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    os.close(follower)
    chunks: list[bytes] = []
    try:
        def row_shown(raw: bytes) -> bool:
            return any(RUNNING_ROW.match(line) for line in _screen_lines(raw))

        # the trial writes "reported" after its epoch 1 is sent; the view redraws 4 times a second
        seen = _read_pty(leader, chunks, lambda raw: row_shown(raw) or (held / "reported").exists(), 120)
        seen = seen and _read_pty(leader, chunks, row_shown, 10)
        held.mkdir(parents=True, exist_ok=True)
        (held / "release").touch()
        _read_pty(leader, chunks, lambda raw: False, 120)  # the rest, until the sweep closes the terminal
    finally:
        os.close(leader)
        (held / "release").touch()
        proc.kill()  # nothing if it has ended
    assert proc.wait(timeout=30) == 0
    raw = b"".join(chunks)
    lines = _screen_lines(raw)
    shown = "\n".join(lines)
    assert seen, f"no row 'x=2 ... epoch 1' for the running trial on the terminal:\n{shown}"
    assert any(BAR_LINE.match(line) for line in lines), f"no progress bar line:\n{shown}"
    # drawn in place: cursor hidden while it runs, then up a line and erase it to redraw
    assert b"\x1b[?25l" in raw and b"\x1b[1A\x1b[2K" in raw, raw
    assert b"\x1b[?25h" in raw  # the cursor is given back
    # finished trials are printed once each, above the view: x=1's line precedes the row of x=2
    finished = [i for i, line in enumerate(lines) if re.match(r"^\[\d/3\] ok +x=\d", line)]
    assert [lines[i].split()[2] for i in finished] == ["x=1", "x=2", "x=3"], shown
    first_row = next(i for i, line in enumerate(lines) if RUNNING_ROW.match(line))
    assert finished[0] < first_row < finished[1]
    assert any(BAR_LINE.match(line) for line in lines[finished[0]:first_row])  # redrawn below it
    summary = shown[shown.rindex("[3/3]"):]
    assert "results:" in summary and "top 3 by acc" in summary


def test_status_from_another_terminal_while_it_runs(tmp_path):
    proc, hold = start_waiting_sweep(tmp_path)
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
