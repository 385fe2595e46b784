"""Population-based training's segments, from the user's side: decisions go on after a member
finished early; each segment draws from a seed of its own (the trial's and the epoch it
resumes after), and a replay of a member that copied another follows its own lineage with
the same seeds, under its own name; exploration draws apart from the population's first
draw; ``--pbt KEY=VALUE`` changes its own key of the grid file's settings."""

from __future__ import annotations

import os
from typing import Any

import pandas as pd
import pytest

import sweeper
from conftest import ROOT, run_cli
from tests import pbt_fns

pytestmark = pytest.mark.slow


def run_pbt(tmp_path: Any, fn: Any, epochs: int = 8, **how: Any) -> pd.DataFrame:
    return sweeper.sweep(fn, {"lr": sweeper.loguniform(0.01, 0.5), "epochs": epochs}, search="pbt", metric="acc",
                         workers=2, out=str(tmp_path), name="pbt", progress=False,
                         pbt={"population": 4, "interval": 2, **how})


def test_decisions_go_on_after_a_member_finished_early(tmp_path):
    df = run_pbt(tmp_path, pbt_fns.stops_early, epochs=12, synch=True).set_index("trial")
    assert df.loc["member_0", "epoch_reached"] == 3 and set(df["status"]) == {"ok"}
    # the others paused at every decision's epoch, 2 to 12 (a plain loop does not say its last
    # epoch: it pauses there too, and its seventh process returns at once)
    assert [df.loc[f"member_{i}", "segments"] for i in (1, 2, 3)] == [7, 7, 7]
    # and the bottom one copied a top one at each of them but the last (synch: all compared),
    # on record at the epoch after it
    hist = pd.read_csv(tmp_path / "pbt" / "history.csv")
    copies = hist.dropna(subset=["copied_from"])
    assert sorted(copies["epoch"]) == [3, 5, 7, 9, 11], copies
    assert "member_0" not in set(copies[copies.epoch > 3]["trial"]) and set(copies["copied_from"]) <= set(df["trial_id"])


def test_a_replay_of_a_member_that_copied_follows_its_lineage_with_each_segments_seed(tmp_path):
    from sweeper.front import replay

    df = run_pbt(tmp_path, pbt_fns.noisy, synch=True)
    assert set(df["status"]) == {"ok"}
    hist = pd.read_csv(tmp_path / "pbt" / "history.csv")
    # each segment drew from a seed of its own: the trial's, then one of it and the epoch
    for name in df["trial"]:
        draws = [line.split() for line in open(tmp_path / "pbt" / "trials" / name / "draws.txt")]
        assert [int(d[0]) for d in draws] == [0, 2, 4, 6]
        assert len({d[1] for d in draws}) == len({d[2] for d in draws}) == 4, draws
    copier = hist.dropna(subset=["copied_from"]).iloc[-1].trial
    (done,) = replay.replay(str(tmp_path / "pbt"), [copier])
    assert done.statuses == ("ok",) and all(d.drift() == 0 for d in done.drifts), done.drifts
    (folder,) = done.folders
    replayed = pd.read_csv(os.path.join(folder, "results.csv"))
    assert list(replayed["trial"]) == [copier]  # named as in the sweep


def test_exploration_never_draws_the_populations_first_values_again(tmp_path):
    df = run_pbt(tmp_path, pbt_fns.climb, synch=True, resample=1.0)
    hist = pd.read_csv(tmp_path / "pbt" / "history.csv")
    first = set(hist[hist.epoch == 1]["param_lr"])
    explored = set(hist.dropna(subset=["copied_from"])["param_lr"])
    assert len(first) == 4 and explored and not (explored & first), (first, explored)
    assert set(df["status"]) == {"ok"}


def test_a_pbt_flag_changes_its_own_key_of_the_grid_files_settings(tmp_path):
    grid = tmp_path / "grid.py"
    grid.write_text("import sweeper\nfrom tests.pbt_fns import climb as train\n"
                    "space = {'lr': sweeper.loguniform(0.01, 0.5)}\n"
                    "options = {'search': 'pbt', 'metric': 'acc', 'pbt': {'population': 4, 'interval': 2}}\n")
    done = run_cli(str(grid), "--out", str(tmp_path / "out"), "--dry-run", "--pbt", "resample=1.0", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "population 4, a decision every 2 epochs" in done.stdout and "resample 1," in done.stdout, done.stdout


def test_the_report_draws_members_by_member_never_against_a_final_value(tmp_path):
    from sweeper.results import report, schedules

    run_pbt(tmp_path, pbt_fns.climb, synch=True)
    figures = report.figures(tmp_path / "pbt")
    assert not [k for k in figures if k.startswith("param:")]  # no member trained with its final lr alone
    (ax,) = figures["curves"].axes
    assert sorted(ax.get_legend_handles_labels()[1]) == [f"member_{i}" for i in range(4)]
    page = open(report.write_html(str(tmp_path / "pbt")), encoding="utf-8").read()
    assert schedules.NO_PARAM_PLOTS.replace("'", "&#x27;") in page
