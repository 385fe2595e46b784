"""Population-based training (sweeper.search.pbt): its settings and exploration, each decision
of its scheduler played by hand (no processes), and whole sweeps of real processes: pauses,
copies of checkpoints, a member that dies, a Ctrl-C and the same command again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sweeper
from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.protocol import Decision
from sweeper.model.space import Space
from sweeper.model.trial import Status, TrialResult
from sweeper.search import pbt
from sweeper.run.planning import plan
from tests import pbt_fns
import pbt_scenarios
from conftest import ROOT


# -- settings and exploration -------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("given, says", [
    ({"population": 1}, "population must be a whole number >= 2"),
    ({"population": 4.0}, "population must be a whole number"),
    ({"interval": 0}, "interval must be a whole number >= 1"),
    ({"quantile": 0.6}, "quantile must be a number in (0, 0.5]"),
    ({"quantile": 0}, "quantile must be a number in (0, 0.5]"),
    ({"resample": 1.5}, "resample must be a number in [0, 1]"),
    ({"factors": (1.2, -1)}, "factors must be positive numbers"),
    ({"factors": ()}, "factors must be positive numbers"),
    ({"synch": "yes"}, "synch must be True or False"),
    ({"burn_in": -1}, "burn_in must be a whole number >= 0"),
    ({"perturbation_interval": 4}, "pbt has no setting 'perturbation_interval'"),
    (["population"], "--pbt takes KEY=VALUE"),
    ("population=4", "pbt must be a dict"),
])
def test_each_mistake_in_the_settings_is_one_line(given, says):
    with pytest.raises(SweepError) as err:
        pbt.settings(given)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.unit
def test_settings_from_the_command_line_and_ray_tunes_defaults():
    assert pbt.settings(None) == pbt.PbtSettings(8, 4, 0.25, 0.25, (1.2, 0.8), False, 0)
    got = pbt.settings(["population=6", "interval=2", "factors=1.5,0.5", "synch=true", "burn_in=4"])
    assert got == pbt.PbtSettings(6, 2, 0.25, 0.25, (1.5, 0.5), True, 4)


@pytest.mark.unit
def test_bounds_in_the_wrong_order_are_refused_before_anything_runs():
    with pytest.raises(SweepError, match="low"):
        pbt.explorable({"lr": sweeper.loguniform(0.1, 0.001)})


@pytest.mark.unit
def test_a_search_setting_with_pbt_is_refused_in_one_line(tmp_path):
    fit = pbt_fns.climb
    base = dict(search="pbt", metric="acc", out=str(tmp_path))
    for extra, says in [({"prune": "asha"}, "drop prune"), ({"trials": 8}, "population"),
                        ({"retries": 1}, "drop retries"), ({"metric": None}, "needs the metric"),
                        ({"metric": "zeta"}, "mode"), ({"backend": "ray"}, "ray backend cannot do")]:
        with pytest.raises(SweepError, match=says):
            sweeper.sweep(fit, {"lr": sweeper.loguniform(1e-3, 1.0)}, **{**base, **extra})
    with pytest.raises(SweepError, match="go with search='pbt'"):
        sweeper.sweep(fit, {"lr": [0.1]}, pbt={"population": 4}, out=str(tmp_path))


@pytest.mark.unit
def test_explore_keeps_each_value_in_its_bounds_and_moves_a_choice_to_a_neighbour():
    import numpy as np

    space = Space.searched({"lr": sweeper.loguniform(1e-3, 0.1), "units": sweeper.randint(1, 4),
                            "act": ["relu", "tanh", "gelu"], "fixed": 7})
    rng = np.random.default_rng(0)
    how = pbt.PbtSettings(resample=0.0, factors=(10.0, 0.01))
    for _ in range(200):
        out = pbt.explore({"lr": 0.05, "units": 2, "act": "tanh", "fixed": 7}, space, rng, how)
        assert 1e-3 <= out["lr"] < 0.1 and out["lr"] != 0.05
        assert out["units"] in (1, 3) and out["act"] in ("relu", "gelu") and out["fixed"] == 7
    edge = {pbt.explore({"lr": 0.05, "units": 1, "act": "relu", "fixed": 7}, space, rng, how)["act"]
            for _ in range(50)}
    assert edge == {"tanh"}  # the first choice's one neighbour


# -- the scheduler's decisions, played by hand ----------------------------------------------------

class Notes(list):
    def __call__(self, tid: str, epoch: int, params: dict[str, Any], copied: str) -> None:
        self.append((tid, epoch, params, copied))


def population(tmp_path, n=4, **how: Any) -> tuple[pbt.Population, list[Any], Notes]:
    specs = plan([{"lr": 0.01 * (i + 1)} for i in range(n)], str(tmp_path), seed=0)
    specs = [s.__class__(**{**s.__dict__, "name": f"member_{i}", "dir": str(tmp_path / f"member_{i}")})
             for i, s in enumerate(specs)]
    notes = Notes()
    made: list[Any] = []

    def make_spec(params, name):
        spec = plan([params], str(tmp_path), seed=0, taken={s.trial_id for s in specs + made})[0]
        spec = spec.__class__(**{**spec.__dict__, "name": name, "dir": str(tmp_path / name)})
        made.append(spec)
        return spec

    settings = pbt.PbtSettings(**{"population": n, "interval": 2, **how})
    space = Space.searched({"lr": sweeper.loguniform(1e-3, 1.0)})
    pop = pbt.Population(specs, space, settings, "acc", "max", str(tmp_path / ".pbt"), 0, notes, make_spec)
    pop.ahead()
    return pop, specs, notes


def segment(pop: pbt.Population, spec: Any, epoch: int, acc: float, saved: str | None = "state") -> Any:
    """A member reports ``epoch`` having saved ``saved`` in its checkpoint; the answer."""
    if saved is not None:
        os.makedirs(spec.checkpoint, exist_ok=True)
        Path(spec.checkpoint, "state").write_text(f"{spec.name}@{epoch}:{saved}")
    return pop.reported(spec, [{"epoch": epoch, "metrics": {"acc": acc}, "t": 0.0}])


def row(spec: Any, status: Status, epoch: int = 8) -> TrialResult:
    return TrialResult(trial_id=spec.trial_id, name=spec.name, index=spec.index, params=spec.params, status=status,
                       metrics={}, epoch_reached=epoch)


@pytest.mark.unit
def test_a_member_pauses_at_each_interval_and_a_bottom_one_copies_a_top_ones_checkpoint(tmp_path):
    pop, specs, notes = population(tmp_path)
    assert segment(pop, specs[0], 1, 0.1).decision is Decision.CONTINUE
    for i, acc in ((1, 0.9), (2, 0.5), (3, 0.4), (0, 0.1)):  # each leaves as it reports (async)
        assert segment(pop, specs[i], 2, acc).decision is Decision.PAUSE
        pop.paused(specs[i], 2)
    # member_0, the worst at epoch 2, waits (holding no place) until epoch 2 is known not to be
    # the last: a copy there would make its row another member's result; the others go on
    resumed = {}
    while (spec := pop.next()) is not None:
        resumed[spec.name] = spec
    assert set(resumed) == {"member_1", "member_2", "member_3"} and pop.remaining == 1
    assert resumed["member_1"].params == specs[1].params
    segment(pop, resumed["member_1"], 3, 0.95, saved="later")  # epoch 3 exists: member_0 copies
    # a copy of member_1's checkpoint as it left it at epoch 2 (published then, in a folder of
    # its own: what member_1 wrote since changes nothing), and member_1's parameters, explored
    assert Path(specs[0].checkpoint, "state").read_text() == "member_1@2:state"
    assert notes[-1][0] == specs[0].trial_id and notes[-1][1] == 2 and notes[-1][3] == specs[1].trial_id
    given = pop.next()
    assert given is not None and given.trial_id == specs[0].trial_id
    assert given.params["lr"] != specs[0].params["lr"] and given.params == notes[-1][2]


@pytest.mark.unit
def test_a_bottom_member_at_the_last_epoch_copies_nothing(tmp_path):
    pop, specs, notes = population(tmp_path, synch=True)
    for i, acc in ((1, 0.9), (2, 0.5), (3, 0.4), (0, 0.1)):
        segment(pop, specs[i], 2, acc)
        pop.paused(specs[i], 2)
    given = [pop.next() for _ in range(3)]
    assert {g.name for g in given} == {"member_1", "member_2", "member_3"}
    for g in given:  # each resumed after its last epoch and returned at once: 2 was the end
        pop.finished(row(g, Status.OK, 2), retrying=False)
    last = pop.next()
    assert last is not None and last.trial_id == specs[0].trial_id and last.params == specs[0].params
    assert Path(specs[0].checkpoint, "state").read_text() == "member_0@2:state"
    assert [n for n in notes if n[3]] == []


@pytest.mark.unit
def test_no_member_is_exploited_that_saved_no_checkpoint(tmp_path):
    pop, specs, _ = population(tmp_path)
    segment(pop, specs[0], 2, 0.1, saved=None)
    with pytest.raises(SweepError, match="nothing in its checkpoint folder.*BackupAndRestore"):
        pop.paused(specs[0], 2)


@pytest.mark.unit
def test_a_member_that_fails_is_replaced_by_a_copy_of_a_top_member(tmp_path):
    pop, specs, notes = population(tmp_path)
    for i, acc in ((1, 0.9), (2, 0.5), (3, 0.4), (0, 0.1)):
        segment(pop, specs[i], 2, acc)
        pop.paused(specs[i], 2)
    while pop.next() is not None:
        pass
    pop.finished(row(specs[2], Status.CRASHED, 3), retrying=False)
    assert pop.remaining == 2  # member_0 and the replacement wait until epoch 2 is known not the last
    segment(pop, specs[1], 3, 0.95)
    given = [pop.next(), pop.next()]
    assert pop.next() is None
    new = next(g for g in given if g is not None and g.trial_id not in {s.trial_id for s in specs})
    assert new.env[contract.RESUMED_EPOCH] == "2"  # it goes on from the copy's epoch
    assert Path(new.checkpoint, "state").read_text() == "member_1@2:state"
    live = [m for m in pop.members.values() if m.state != "done"]
    assert len(live) == 4  # the population never shrinks
    assert notes[-1][3] == specs[1].trial_id


@pytest.mark.unit
def test_synchronous_mode_with_a_burn_in_never_waits_forever(tmp_path):
    """Two places for four members, synch, burn-in 4, interval 2: played until every member
    finished; each decision waits for every live member (one of which fails), never longer."""
    pop, specs, _ = population(tmp_path, synch=True, burn_in=4)
    queue, running, done, rounds = list(specs), {}, set(), 0
    epochs = {s.trial_id: 0 for s in specs}
    while len(done) < len(pop.members):
        rounds += 1
        assert rounds < 500, "the population waits forever"
        while len(running) < 2 and (queue or pop.remaining):
            spec = queue.pop(0) if queue else pop.next()
            if spec is None:
                break
            running[spec.trial_id] = spec
            epochs.setdefault(spec.trial_id, int(spec.env.get(contract.RESUMED_EPOCH, 0)))
        assert running, f"nothing runs and nothing is given: {[m.state for m in pop.members.values()]}"
        tid, spec = next(iter(running.items()))
        if epochs[tid] == 8:  # resumed after its last epoch: it returns at once
            del running[tid]
            pop.finished(row(spec, Status.OK), retrying=False)
            done.add(tid)
            continue
        epochs[tid] += 1
        if spec.name == "member_3" and epochs[tid] == 5:  # it dies: its replacement takes over
            del running[tid]
            pop.finished(row(spec, Status.CRASHED, 5), retrying=False)
            done.add(tid)
            continue
        answer = segment(pop, spec, epochs[tid], 0.1 * epochs[tid] + 0.01 * spec.index)
        if answer.decision is Decision.PAUSE:
            assert epochs[tid] >= 4
            del running[tid]
            pop.paused(spec, epochs[tid])
        elif epochs[tid] == 8:
            del running[tid]
            pop.finished(row(spec, Status.OK), retrying=False)
            done.add(tid)
    assert len(pop.members) == 5


@pytest.mark.unit
def test_no_decision_falls_on_a_members_last_epoch_and_one_that_finished_early_ends_none(tmp_path):
    pop, specs, _ = population(tmp_path)
    answer = pop.reported(specs[0], [{"epoch": 4, "metrics": {"acc": 0.1}, "t": 0.0, "last": 4}])
    assert answer.decision is Decision.CONTINUE  # Keras told its last epoch
    pop.finished(row(specs[1], Status.OK, 3), retrying=False)  # it stopped early (EarlyStopping, say)
    for epoch in (4, 6):  # the others' decisions go on
        assert segment(pop, specs[2], epoch, 0.3).decision is Decision.PAUSE
        pop.paused(specs[2], epoch)
        assert pop.next() is not None


# -- whole sweeps, real processes -------------------------------------------------------------------

def run_pbt(tmp_path, fn=pbt_fns.climb, **how: Any) -> pd.DataFrame:
    return sweeper.sweep(fn, {"lr": sweeper.loguniform(0.01, 0.5)}, search="pbt", metric="acc", workers=2,
                         out=str(tmp_path), name="pbt", pbt={"population": 4, "interval": 2, **how})


def test_each_member_is_one_row_and_history_carries_its_schedule(tmp_path):
    scheduled_sweep(tmp_path)


def scheduled_sweep(tmp_path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A synchronous population of 4 run to its end, its table and history checked; both."""
    df = run_pbt(tmp_path, synch=True)
    assert list(df["status"]) == ["ok"] * 4 and len(df) == 4
    # every segment started from the epoch its checkpoint held (the trial raises otherwise)
    # epochs 2, 4, 6 and 8 ended a segment (no member had finished to tell 8 was the last, and a
    # plain loop does not say it; Keras's fit does); the fifth returned at once
    assert set(df["segments"]) == {5}
    assert set(df["attempts"]) == {1}  # a pause is no attempt
    hist = pd.read_csv(tmp_path / "pbt" / "history.csv")
    assert list(hist.columns) == ["trial_id", "trial", "epoch", "acc", "param_lr", "copied_from"]
    for tid, part in hist.groupby("trial_id"):
        assert list(part["epoch"]) == list(range(1, 9))  # one continuous curve
        final = df.set_index("trial_id").loc[tid]
        assert part["param_lr"].iloc[-1] == pytest.approx(final["param_lr"])  # the row: its end's
        assert part["acc"].iloc[-1] == pytest.approx(final["acc"])
    copies = hist.dropna(subset=["copied_from"])
    assert len(copies) >= 2 and set(copies["epoch"]) <= {3, 5, 7}  # synch: each decision a bottom member copies
    assert set(copies["copied_from"]) <= set(df["trial_id"])
    # the copy's curve goes on from its source's at that epoch
    for _, c in copies.iterrows():
        source = hist[(hist.trial_id == c.copied_from) & (hist.epoch == c.epoch - 1)]["acc"].item()
        assert c.acc == pytest.approx(source + c.param_lr * (1 - source))
    again = run_pbt(tmp_path, synch=True)  # the same command: nothing to run, the same table
    pd.testing.assert_frame_equal(again, df)
    return df, hist


def test_status_and_the_report_show_schedules_and_lineage_and_replay_follows_one(tmp_path, capsys):
    from sweeper.front.subcommands import status_main
    from sweeper.results import report
    from sweeper.front import replay

    df, hist = scheduled_sweep(tmp_path)
    capsys.readouterr()
    status_main([str(tmp_path / "pbt")])
    said = capsys.readouterr().out
    assert "population-based training, each member's parameters by epoch:" in said
    copy = hist.dropna(subset=["copied_from"]).iloc[0]
    names = dict(zip(df["trial_id"], df["trial"]))
    line = next(li for li in said.splitlines() if li.strip().startswith(f"{copy.trial}:"))
    assert f"from epoch {copy.epoch}: lr " in line and f"(copied {names[copy.copied_from]})" in line
    for member, part in hist.groupby("trial"):  # a change per copy: a segment that went on as it was is no change
        said_of = next(li for li in said.splitlines() if li.strip().startswith(f"{member}:"))
        assert said_of.count("from epoch") == part["copied_from"].notna().sum(), said_of
    page = open(report.write_html(str(tmp_path / "pbt")), encoding="utf-8").read()
    assert "<h2>Population-based training</h2>" in page and "x: it copied" in page
    # the copying member's model, replayed from its first epoch as its lineage trained it
    # (the copied member's parameters, then its own): the same number, this loop being exact
    (done,) = replay.replay(str(tmp_path / "pbt"), [copy.trial])
    assert done.statuses == ("ok",) and all(d.drift() == 0 for d in done.drifts), done.drifts


@pytest.mark.unit
def test_a_schedule_followed_back_through_copies_that_cross():
    from sweeper.results.schedules import effective

    schedules = {"a": [(0, {"lr": 1}, ""), (4, {"lr": 2}, "b")],
                 "b": [(0, {"lr": 10}, ""), (2, {"lr": 20}, "a"), (6, {"lr": 30}, "a")]}
    # a's model: b's until epoch 4, which was a's own until 2 (b copied a there), then b's lr 20;
    # each segment with the member whose process trained it (whose seed it drew)
    assert effective(schedules, "a") == [(0, {"lr": 1}, "a"), (2, {"lr": 20}, "b"), (4, {"lr": 2}, "a")]
    assert effective(schedules, "b") == [(0, {"lr": 1}, "a"), (2, {"lr": 20}, "b"), (4, {"lr": 2}, "a"),
                                         (6, {"lr": 30}, "b")]


def test_a_member_that_saves_nothing_stops_the_sweep_saying_how_to_save(tmp_path):
    with pytest.raises(SweepError, match="current_trial\\(\\).checkpoint"):
        run_pbt(tmp_path, fn=pbt_fns.forgetful)


@pytest.mark.parametrize("burn_in", [0, 4])
def test_a_member_that_dies_is_replaced_and_its_row_stays(tmp_path, burn_in):
    # synchronous: each decision waits for every live member; the one that died holds none,
    # its replacement joins at its copy's epoch, and the burn-in holds no decision forever
    df = run_pbt(tmp_path, fn=pbt_fns.crashes_once, synch=True, burn_in=burn_in)
    by = df.set_index("trial")
    assert by.loc["member_1", "status"] == "crashed"
    assert "member_1.r1" in by.index and by.loc["member_1.r1", "status"] == "ok"
    assert (by["status"] == "ok").sum() == 4  # the population never shrank


def test_ctrl_c_with_paused_members_then_the_same_command_resumes_them_from_their_checkpoints(tmp_path):
    pbt_scenarios.ctrl_c_then_the_same_command(tmp_path)


def test_a_failed_members_replacement_still_to_make_is_made_by_the_resume(tmp_path):
    """member_1 (top at epoch 2) dies as its second segment starts; its replacement waits until
    another member reports an epoch after 2, and member_0 holds at epoch 3 before it does
    (member_2, the bottom, waits to copy): Ctrl-C then. The same command makes the
    replacement: the population never shrinks across a resume."""
    import sqlite3

    hold = tmp_path / "hold"
    grid = tmp_path / "grid.py"
    grid.write_text(
        "import sweeper\nfrom tests.pbt_fns import ranked as train\n"
        f"space = {{'lr': sweeper.loguniform(0.01, 0.5), 'hold': {str(hold)!r}}}\n"
        "options = {'search': 'pbt', 'metric': 'rank', 'mode': 'max', 'workers': 3,\n"
        "           'pbt': {'population': 3, 'interval': 2, 'synch': True}}\n")  # (all ranked at 2)
    command = [sys.executable, "-m", "sweeper", str(grid), "--out", str(tmp_path / "out"), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ledger = tmp_path / "out" / "grid" / "ledger.sqlite"

    def crashed() -> bool:
        if not ledger.exists():
            return False
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as db:
            return bool(db.execute("SELECT 1 FROM trials WHERE name = 'member_1' AND status = 'crashed'").fetchall())

    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (hold.exists() and crashed()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # member_0 holds at epoch 3 (its sentinel), member_1's row says crashed
        assert hold.exists() and crashed(), proc.communicate(timeout=30)
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = sweeper.load(tmp_path / "out" / "grid").set_index("trial")
    assert dict(first["status"]) == {"member_0": "interrupted", "member_1": "crashed",
                                     "member_2": "interrupted"}  # no replacement yet
    hold.unlink()
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 1 and "3 ok, 1 crashed (3 run this time" in again.stdout, again.stdout + again.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv").set_index("trial")
    assert dict(df["status"]) == {"member_0": "ok", "member_1": "crashed", "member_2": "ok",
                                  "member_1.r1": "ok"}, df["error"]
    hist = pd.read_csv(tmp_path / "out" / "grid" / "history.csv")
    new = hist[hist.trial == "member_1.r1"]
    assert list(new["epoch"]) == list(range(3, 9)) and new.iloc[0].copied_from in set(df["trial_id"])


@pytest.mark.unit
def test_the_published_checkpoints_are_said_removed_only_once_they_are(tmp_path, monkeypatch, caplog):
    import logging

    pop, specs, _ = population(tmp_path, n=2)
    for spec in specs:
        segment(pop, spec, 2, 0.5)
        pop.paused(spec, 2)
    while pop.next() is not None:
        pass
    published = str(tmp_path / ".pbt")
    rmdir = os.rmdir

    def refused(path, *args, **kwargs):  # a folder this user may not remove
        if str(path) in (published, ".pbt"):
            raise PermissionError(13, "Permission denied")
        return rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", refused)
    with caplog.at_level(logging.INFO, logger="sweeper"):
        for spec in specs:
            pop.finished(row(spec, Status.OK), retrying=False)
    said = [r.getMessage() for r in caplog.records if "published" in r.getMessage()]
    assert os.path.isdir(published) and len(said) == 1, said
    assert "could not all be removed" in said[0] and "Permission denied" in said[0] and "are removed" not in said[0]


@pytest.mark.unit
def test_population_based_training_needs_no_optuna(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    space = pbt.explorable({"lr": sweeper.loguniform(1e-3, 0.1), "act": ["relu", "tanh"], "epochs": 8})
    assert [p.name for p in space.params] == ["lr", "act", "epochs"]
    with pytest.raises(SweepError, match="nothing to explore"):
        pbt.explorable({"epochs": 8})


@pytest.mark.unit
def test_each_link_in_a_checkpoint_is_copied_as_it_must_be(tmp_path):
    from sweeper.search import pbt_checkpoints

    sweep = tmp_path / "sweep"
    ckpt = sweep / "trials" / "member_0" / "checkpoint"
    (ckpt / "real").mkdir(parents=True)
    (ckpt / "real" / "weights").write_text("its own")
    (ckpt / "weights").symlink_to(ckpt / "real" / "weights")  # absolute, into its own folder
    data = tmp_path / "data.csv"
    data.write_text("shared, never written")
    (ckpt / "data").symlink_to(data)  # outside the sweep
    target = sweep / ".pbt" / "t1" / "2"
    pbt_checkpoints.copy(str(ckpt), str(target), "member_0's checkpoint", str(sweep))
    assert os.readlink(target / "weights") == os.path.join("real", "weights")  # the copy's own file
    assert (target / "weights").read_text() == "its own" and os.readlink(target / "data") == str(data)
    (sweep / "trials" / "member_0" / "model.keras").write_text("written on")
    (ckpt / "model").symlink_to(sweep / "trials" / "member_0" / "model.keras")  # beside its folder
    with pytest.raises(SweepError, match=r"holds a link, model -> .*save the file itself") as err:
        pbt_checkpoints.copy(str(ckpt), str(sweep / ".pbt" / "t1" / "4"), "member_0's checkpoint", str(sweep))
    assert "\n" not in str(err.value) and not (sweep / ".pbt" / "t1" / "4").exists()
    assert [p.name for p in (sweep / ".pbt" / "t1").iterdir()] == ["2"]  # nothing half-built left
