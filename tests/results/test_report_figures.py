"""The report's figures tell the story the CLI tells, tested from the
user's side: real sweeps, then ``python -m sweeper report`` (or ``sweeper.results.report``).

* ``pruned`` is no failure: its own neutral colour, counted apart from the failures;
* the learning curves' legend labels are unique (the parameters that differ);
* a sampled float parameter gets a numeric axis with a few readable ticks;
* a parameter with one value in every trial gets no panel (it is listed once);
* a sweep stopped before its first row of ``results.csv`` has a report, from the ledger.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import psutil
import pytest

import sweeper
import sweep_fns
from conftest import ROOT, run_cli, write_grid
from sweeper.results import query
from sweeper.results import report as analysis

pytest.importorskip("matplotlib")

#: A random search of the synthetic ``descent`` (tests/sweep_fns.py): points with x >= 0.5
#: stay bad and the median pruner stops them; ``fail_once`` trials raise (status error);
#: lr spans three decades; ``units`` is a grid's pair; the rest is fixed in every trial, and
#: makes every trial's name start alike ("activation=relu,batch_size=128,dropout=0_25,...").
SPACE = {"x": sweeper.uniform(0.0, 1.0), "lr": sweeper.loguniform(1e-4, 1e-1), "units": [32, 64],
         "fail_once": [False, True], "activation": "relu", "batch_size": 128, "dropout": 0.25,
         "epochs": 8, "pace": 0.02}
FIXED = {"activation", "batch_size", "dropout", "epochs", "pace"}


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    """One finished search: its folder, its table and its report page."""
    out = tmp_path_factory.mktemp("story")
    df = sweeper.sweep(sweep_fns.descent, SPACE, search="random", trials=20, prune="median", metric="loss",
                       workers=2, seed=0, out=str(out), name="search", progress=False)
    counts = df.status.value_counts().to_dict()
    assert counts.get("pruned", 0) >= 1 and counts.get("error", 0) >= 1 and counts.get("ok", 0) >= 3, counts
    folder = str(out / "search")
    done = run_cli("report", folder)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(folder, "report.html"), encoding="utf-8") as f:
        page = f.read()
    return folder, df, page


def _status_classes(page: str) -> dict[str, str]:
    """The class of each status's cell in the page's table of counts."""
    table = re.search(r'<table class="counts">.*?</table>', page, re.S).group(0)
    return dict((status, cls) for cls, status in re.findall(r'<td class="([^"]*)">([a-z]+)</td>', table))


def test_pruned_is_drawn_and_counted_apart_from_the_failures(search):
    folder, df, page = search
    n_pruned, n_error = int((df.status == "pruned").sum()), int((df.status == "error").sum())
    classes = _status_classes(page)
    assert classes["pruned"] != classes["error"], classes  # not in the failure colour
    assert classes["pruned"] != classes["ok"], classes  # its own
    summary = re.search(r'<p class="summary">(.*?)</p>', page)
    assert summary, "the page says how many trials failed, apart from the pruned ones"
    assert f"{n_pruned} pruned" in summary.group(1) and f"{n_error} failed" in summary.group(1), summary.group(1)
    assert f"<h2>Failures ({n_error})</h2>" in page
    listed = re.findall(r'<tr class="failure"><td>([^<]*)</td>', page)
    assert sorted(listed) == sorted(df.trial[df.status == "error"]), listed
    # what the CLI counts as failed (not Status.succeeded) is what the report counts
    assert query.failed(df).sum() == n_error and query.stopped(df).sum() == n_pruned


def test_the_learning_curves_legend_tells_the_trials_apart(search):
    folder, df, _ = search
    legend = analysis.figures(folder)["curves"].axes[0].get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    top = [label for label in labels if not label.startswith("pruned")]
    assert len(top) == min(5, int((df.status == "ok").sum())), labels
    assert len(set(top)) == len(top), labels  # unique
    for label in top:  # the parameters that differ, not the names' common start
        assert "x=" in label and "activation" not in label and "…" not in label, label
    assert any(label.startswith("pruned") for label in labels), labels  # the grey curves say what they are


def _ticks(ax):
    """The major ticks shown on the x axis (inside its limits) and their labels, as drawn."""
    ax.figure.canvas.draw()
    lo, hi = sorted(ax.get_xlim())
    ticks = [t for t in ax.xaxis.get_major_ticks() if lo <= t.get_loc() <= hi and t.label1.get_visible()]
    return [t.get_loc() for t in ticks], [t.label1 for t in ticks]


def test_a_sampled_float_gets_a_numeric_axis_with_a_few_readable_ticks(search):
    from matplotlib.ticker import MaxNLocator

    folder, df, _ = search
    figs = analysis.figures(folder)
    ax = figs["param:x"].axes[0]
    xs = df.param_x[df.status == "ok"].astype(float)
    assert ax.get_xscale() == "linear"
    assert isinstance(ax.xaxis.get_major_locator(), MaxNLocator)  # a numeric axis, not one tick per value
    locs, labels = _ticks(ax)
    texts = [label.get_text() for label in labels]
    assert 2 <= len(locs) <= 7, texts
    assert all(len(t) <= 5 for t in texts), texts  # round numbers, not 0.374540
    assert not set(locs) & set(xs), (locs, list(xs))
    boxes = [label.get_window_extent() for label in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), texts
    # values over decades: a log axis; a grid's few values: one tick each
    assert figs["param:lr"].axes[0].get_xscale() == "log"
    if "param:units" in figs:
        locs, _ = _ticks(figs["param:units"].axes[0])
        assert sorted(locs) == sorted(set(df.param_units[df.status == "ok"].astype(float))), locs


def test_a_parameter_with_one_value_gets_no_panel(search):
    folder, df, page = search
    panels = set(re.findall(r'class="param-plot" data-param="([^"]+)"', page))
    assert panels and not panels & FIXED, panels
    assert {"x", "lr"} <= panels, panels
    fixed = re.search(r'<p class="fixed">(.*?)</p>', page, re.S)
    assert fixed, "the settings fixed in every trial are said once"
    for name in FIXED:
        assert f"{name}=" in fixed.group(1), fixed.group(1)
    assert not {f"param:{name}" for name in FIXED} & set(analysis.figures(folder)), "a figure for a fixed setting"


def test_report_reads_the_ledger_when_results_csv_is_not_there(tmp_path):
    df = sweeper.sweep(sweep_fns.descent, {"x": [0.1, 0.2, 0.3], "epochs": 3, "pace": 0.0}, out=str(tmp_path),
                       name="nocsv", workers=1, progress=False)
    folder = tmp_path / "nocsv"
    os.remove(folder / "results.csv")
    os.remove(folder / "history.csv")
    done = run_cli("report", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "top 3 by loss (min)" in done.stdout, done.stdout
    page = (folder / "report.html").read_text()
    assert '<table class="leaderboard">' in page
    for name in df.trial:
        assert name in page
    assert 'class="curves"' in page  # the per-epoch reports, from the ledger
    assert set(re.findall(r'data-param="([^"]+)"', page)) == {"x"}


KILLED_GRID = """from sweep_fns import held_reporter as train
grid = {"x": [2]}
options = {"workers": 1}
"""


def test_report_of_a_sweep_killed_before_its_first_row(tmp_path):
    """``kill -9`` of a sweep whose only trial is still running: status, load() and report
    all read the folder (a ledger, no results.csv)."""
    grid = write_grid(tmp_path, KILLED_GRID)
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = tmp_path / "out" / "grid"
    reported = folder / "trials" / "x=2" / "reported"
    deadline = time.monotonic() + 120
    while not reported.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the trial's own sentinel file
    assert reported.exists(), proc.poll()
    trial_procs = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.communicate(timeout=30)
    psutil.wait_procs(trial_procs, timeout=15)  # each trial ends its own group when its parent dies
    assert not (folder / "results.csv").exists()

    assert len(sweeper.load(folder)) == 0
    status = run_cli("status", str(folder))
    assert status.returncode == 0, status.stdout + status.stderr
    done = run_cli("report", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no results.csv" not in done.stdout + done.stderr
    page = (folder / "report.html").read_text()
    assert "No trial has finished yet" in page
