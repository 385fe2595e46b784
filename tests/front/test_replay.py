"""Replay: ``python -m sweeper replay <folder> <trial>`` runs a trial again as it ran, into
``<folder>-replay``, and says per metric how far it drifted and what differs in the
environment; exit 0 within ``--tol``, 1 beyond. The environment is recorded with each
sweep and trial, and ``--deterministic`` turns on each framework's deterministic mode."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys

import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import HERE, ROOT, run_cli, run_fake_cli, write_grid
from sweeper.store import table
from sweeper.errors import SweepError
from sweeper.store.ledger import Ledger
from sweeper.front.replay import Drift, chosen, drifts, replay
from sweeper.model.trial import Status, TrialResult

EXPERIMENTS = os.path.join(ROOT, "experiments")


def _table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The replay's table: (trial, metric) -> the rest of its line, split."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("  ") and not line.startswith("  trial "):
            words = line.split()
            if len(words) >= 4:
                rows[(words[0], words[1])] = words[2:]
    return rows


def test_the_keras_example_replays_with_zero_drift_when_deterministic(tmp_path):
    grid = write_grid(tmp_path, f"sys.path.insert(0, {EXPERIMENTS!r})\nfrom digits_mlp import train\n"
                                "grid = {'lr': [0.01], 'units': [16], 'batch_size': [64], 'epochs': [2]}\n")
    out = str(tmp_path / "out")
    done = run_cli(grid, "--out", out, "--deterministic", "--quiet")
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(os.path.join(out, "grid", "results.csv"), **table.READ_CSV)
    assert df.deterministic.tolist() == [True]  # the row says how it ran
    ledger = Ledger(os.path.join(out, "grid"), readonly=True)
    try:
        (row,) = ledger.results().values()
        recorded = ledger.facts().environment
    finally:
        ledger.close()
    assert row.env["deterministic"] == ["tensorflow"] and "tensorflow" in row.env["frameworks"]
    assert recorded["deterministic"] is True and recorded["code"]["path"] == grid
    assert "numpy" in recorded["packages"] and recorded["start_method"] == "forkserver"
    status = run_cli("status", os.path.join(out, "grid"))
    assert "determinism on" in status.stdout and "deterministic: tensorflow" in status.stdout, status.stdout
    replayed = run_cli("replay", os.path.join(out, "grid"), row.name)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    lines = _table(replayed.stdout)
    for metric in ("val_accuracy", "val_loss", "accuracy", "loss"):
        recorded_value, replayed_value, drift, relative, verdict = lines[(row.name, metric)]
        assert float(recorded_value) == float(replayed_value) and drift == "0" and verdict == "ok"
    assert "the environment is the same as when it ran" in replayed.stdout
    assert "every metric (6) of 1 trial replayed within the tolerance 0 (exact)" in replayed.stdout
    before = pd.read_csv(os.path.join(out, "grid", "results.csv"), **table.READ_CSV)
    pd.testing.assert_frame_equal(before, df)  # the sweep's rows are untouched
    assert sorted(os.listdir(out)) == ["grid", "grid-replay"]


def test_a_trial_that_reads_urandom_reports_its_drift_and_exits_1(tmp_path):
    sweeper.sweep(sweep_fns.urandom_score, {"x": [1, 2]}, out=str(tmp_path), name="s", progress=False)
    done = run_cli("replay", str(tmp_path / "s"), "x=2", "--times", "2", "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = _table(done.stdout)
    assert lines[("x=2", "steady")][-1] == "ok"  # seeded: the same
    assert lines[("x=2", "noise")][-1] == "DRIFT"
    assert len(lines[("x=2", "noise")]) == 6  # recorded, 2 replayed, drift, relative, verdict
    assert "1 metric drifted beyond the tolerance 0 (exact): x=2 noise by" in done.stdout
    wide = run_cli("replay", str(tmp_path / "s"), "x=2", "--tol", "1e10", "--quiet")
    assert wide.returncode == 0, wide.stdout  # within a tolerance that wide
    assert len(os.listdir(tmp_path / "s-replay")) == 3  # each replay a folder of its own


def test_a_command_trial_replays_and_an_edited_script_is_named(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import json, sys\nx = float(sys.argv[1].split('=')[1])\nprint(json.dumps({'y': x * 3}))\n")
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"x": [1, 2]}))
    out = str(tmp_path / "out")
    done = run_cli("--command", f"{sys.executable} {script} --x={{x}}", "--grid", str(grid), "--out", out,
                   "--name", "cmd", "--quiet")
    assert done.returncode == 0, done.stderr
    same = run_cli("replay", os.path.join(out, "cmd"), "--all", "--quiet")
    assert same.returncode == 0, same.stdout + same.stderr
    assert _table(same.stdout)[("x=2", "y")][:2] == ["6", "6"]
    script.write_text(script.read_text() + "# tidied\n")
    edited = run_cli("replay", os.path.join(out, "cmd"), "x=1", "--quiet")
    assert edited.returncode == 0, edited.stdout
    assert "train.py: sha256 " in edited.stdout and "what differs from when it ran" in edited.stdout


def test_an_edited_grid_file_is_named_a_row_replays_as_its_run_made_it_and_a_changed_package_is_said(tmp_path):
    """An edit of the grid file is named by replay and status. A later run that trains nothing
    (every row kept) but has other code and options leaves each row's record alone: the replay
    follows the run that made the row, and says the code changed since. A resume says which
    package versions changed since the last run.

    (Two tests once, each sweeping a grid file of its own and editing it: one sweep serves both,
    its file edited first by a comment, which replays within the tolerance, then in its code.)"""
    grid = write_grid(tmp_path, "def train(p):\n    return {'y': p['x'] * 3.0}\n"
                                "grid = {'x': [1, 2]}\n")
    out = str(tmp_path / "out")
    assert run_cli(grid, "--out", out, "--quiet").returncode == 0
    with open(grid, "a") as f:
        f.write("# a comment, nothing else\n")
    done = run_cli("replay", os.path.join(out, "grid"), "--all", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "code: grid.py was edited (sha256 " in done.stdout
    status = run_cli("status", os.path.join(out, "grid"))
    assert "(edited since: sha256 now " in status.stdout, status.stdout
    earlier = set(os.listdir(os.path.join(out, "grid-replay")))
    with open(grid) as f:
        text = f.read()
    with open(grid, "w") as f:
        f.write(text.replace("* 3.0", "* 4.0"))
    again = run_cli(grid, "--out", out, "--deterministic", "--start-method", "spawn")
    assert again.returncode == 0 and "0 run this time" in again.stdout, again.stdout
    status = run_cli("status", os.path.join(out, "grid"))
    assert "2 trials ran in an earlier run of the sweep: code: grid.py was edited" in status.stdout, status.stdout
    done = run_cli("replay", os.path.join(out, "grid"), "x=1", "--quiet")
    assert done.returncode == 1, done.stdout  # today's code gives 4.0, the row says 3.0
    assert _table(done.stdout)[("x=1", "y")][:2] == ["3", "4"]
    assert "code: grid.py was edited" in done.stdout
    (folder,) = set(os.listdir(os.path.join(out, "grid-replay"))) - earlier
    ledger = Ledger(os.path.join(out, "grid-replay", folder), readonly=True)
    try:
        env = ledger.facts().environment
    finally:
        ledger.close()
    assert env["start_method"] == "forkserver" and env["deterministic"] is False  # as the row's run, not the last
    with sqlite3.connect(os.path.join(out, "grid", "ledger.sqlite")) as db:  # as if numpy were older then
        env = json.loads(db.execute("SELECT value FROM meta WHERE key = 'environment'").fetchone()[0])
        now = env["packages"]["numpy"]
        env["packages"]["numpy"] = "0.0.1"
        db.execute("UPDATE meta SET value = ? WHERE key = 'environment'", (json.dumps(env),))
    again = run_cli(grid, "--out", out)
    assert again.returncode == 0
    assert f"package versions changed since the last run: numpy: 0.0.1 -> {now}" in again.stdout, again.stdout


def test_a_function_of_a_script_replays_as_it_ran_under_spawn(tmp_path):
    script = tmp_path / "exp.py"
    script.write_text("import random\nimport sweeper\n\n"
                      "def train(params):\n    return {'score': params['x'] + random.random()}\n\n"
                      "if __name__ == '__main__':\n"
                      f"    sweeper.sweep(train, {{'x': [1, 2]}}, out={str(tmp_path / 'out')!r}, start_method='spawn',"
                      " progress=False)\n")
    import subprocess

    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, capture_output=True, timeout=240)
    done = run_cli("replay", str(tmp_path / "out" / "exp"), "x=1")
    assert done.returncode == 0, done.stdout + done.stderr
    replayed = sweeper.load(str(tmp_path / "out" / "exp-replay" / os.listdir(tmp_path / "out" / "exp-replay")[0]))
    original = sweeper.load(str(tmp_path / "out" / "exp"))
    assert replayed.seed.tolist() == original.seed.tolist()[:1]  # the same seed, so the same draw
    assert replayed.score.tolist() == original.score.tolist()[:1]
    ledger = Ledger(str(tmp_path / "out" / "exp-replay" / os.listdir(tmp_path / "out" / "exp-replay")[0]),
                    readonly=True)
    try:
        assert ledger.facts().environment["start_method"] == "spawn"  # as it ran
    finally:
        ledger.close()


def test_what_cannot_be_replayed_is_one_line(tmp_path):
    sweeper.sweep(sweep_fns.tradeoff, {"units": [0, 4], "lr": [0.1]}, out=str(tmp_path), name="s", progress=False)
    for args, words in ((["nope"], "no trial 'nope' in this sweep"),
                        (["units=5"], "did you mean 'units=4'?"),  # lr is fixed: not in the names
                        (["units=0"], "trial units=0 is error, with no final metrics to compare"),
                        ([], "name the trial to replay"),
                        (["--all", "units=4"], "give trial names or --all, not both"),
                        (["--all", "--tol", "-1"], "--tol must be a number >= 0")):
        done = run_cli("replay", str(tmp_path / "s"), *args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert words in done.stderr, (args, done.stderr)
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(os.path.join(HERE, "data", "v0_ledger.sqlite"), old / "ledger.sqlite")
    done = run_cli("replay", str(old), "--all")
    assert done.returncode == 2 and "did not record how to run its trials again" in done.stderr, done.stderr


@pytest.mark.unit
def test_a_drift_is_within_a_tolerance_absolutely_or_relatively():
    exact = Drift("m", 0.5, (0.5, 0.5))
    assert exact.drift() == 0 and exact.within(0)
    off = Drift("m", 100.0, (100.0, 101.0))
    assert off.drift() == 1 and off.relative() == 0.01 and not off.within(0)
    assert off.within(0.01) and not off.within(0.009)  # 1% relative
    tiny = Drift("m", 0.0, (1e-9,))
    assert tiny.within(1e-8) and not tiny.within(0)  # near zero: absolute
    missing = Drift("m", 1.0, (1.0, None))  # a replay without the metric never passes
    assert not missing.within(1e9)


@pytest.mark.unit
def test_trials_are_chosen_by_name_id_or_pattern():
    rows = {f"t{i}": TrialResult(f"t{i}", f"x={i}", i, {"x": i}, Status.OK if i else Status.CRASHED, {"m": 1.0})
            for i in range(3)}
    assert [r.name for r in chosen(rows, ["x=2", "t1"], False)] == ["x=2", "x=1"]
    assert [r.name for r in chosen(rows, ["x=[12]"], False)] == ["x=1", "x=2"]
    assert [r.name for r in chosen(rows, ["t[2]"], False)] == ["x=2"]  # a pattern on ids too
    assert [r.name for r in chosen(rows, [], True)] == ["x=1", "x=2"]  # every ok one
    with pytest.raises(SweepError, match="trial x=0 is crashed"):
        chosen(rows, ["x=0"], False)


def test_a_gpu_trial_replays_on_a_card_of_its_model_or_names_the_other(tmp_path, monkeypatch):
    """Through the NVML fake: the sweep ran on an H100 (gpu:1); the replay takes the H100
    where there is one, and says so where only A100s are left."""
    from fake_nvml import Card, FakeNvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the fake's cards, not this machine's
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    a100, h100 = "NVIDIA Fake A100 16GB", "NVIDIA Fake H100 80GB"
    machine = FakeNvml([Card(name=a100), Card(name=h100, total_mb=81920)], board=str(tmp_path))
    grid = write_grid(tmp_path, "from sweep_fns import tradeoff as train\ngrid = {'units': [4], 'lr': [0.1]}\n")
    out = str(tmp_path / "out")
    done = run_fake_cli(machine, grid, "--gpus", "1", "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    assert sweeper.load(os.path.join(out, "grid")).device.tolist() == ["gpu:1"]
    same = run_fake_cli(machine, "replay", os.path.join(out, "grid"), "--all", "--quiet")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "the environment is the same as when it ran" in same.stdout
    (folder,) = os.listdir(os.path.join(out, "grid-replay"))
    assert sweeper.load(os.path.join(out, "grid-replay", folder)).device.tolist() == ["gpu:1"]  # the H100
    other = FakeNvml([Card(name=a100), Card(name=a100)], board=str(tmp_path))  # no H100 here
    moved = run_fake_cli(other, "replay", os.path.join(out, "grid"), "--all", "--quiet")
    assert moved.returncode == 0, moved.stdout + moved.stderr  # the numbers agree; the card is named
    assert f"gpu: {h100} -> {a100}" in moved.stdout, moved.stdout


@pytest.mark.unit
def test_every_metric_is_compared_nan_and_inf_included_and_one_only_the_replay_gave_drifts():
    def ok(metrics):
        return TrialResult("t1", "x=1", 0, {"x": 1}, Status.OK, metrics)

    same = drifts({"a": float("nan"), "b": float("inf"), "c": 1.0}, [ok({"a": float("nan"), "b": float("inf"),
                                                                        "c": 1.0})])
    assert [d.within(0) for d in same] == [True, True, True]
    apart = drifts({"a": float("nan"), "b": 1.0}, [ok({"a": 0.5, "b": float("inf"), "new": 3.0})])
    assert [(d.metric, d.within(1e9)) for d in apart] == [("a", False), ("b", False), ("new", False)]
    assert apart[-1].recorded is None  # only the replay has it: the code changed
    gone = drifts({"a": 1.0}, [None])  # the replay did not end with a row
    assert not gone[0].within(1e9)


def test_replays_started_in_the_same_second_never_share_a_folder(tmp_path):
    sweeper.sweep(sweep_fns.urandom_score, {"x": [1]}, out=str(tmp_path), name="s", progress=False)
    first = replay(str(tmp_path / "s"), ["x=1"])
    second = replay(str(tmp_path / "s"), ["x=1"])
    assert first[0].folders != second[0].folders
    assert first[0].drifts[1].replayed != second[0].drifts[1].replayed  # each ran: urandom differs


def test_a_function_of_a_packages_init_replays(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def train(params):\n    return {'y': params['x'] * 2.0}\n")
    script = tmp_path / "run.py"
    script.write_text("import sweeper, pkg\nif __name__ == '__main__':\n"
                      f"    sweeper.sweep(pkg.train, {{'x': [1]}}, out={str(tmp_path / 'out')!r}, name='p', "
                      "progress=False)\n")
    import subprocess

    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, capture_output=True, timeout=240)
    done = run_cli("replay", str(tmp_path / "out" / "p"), "--all", "--quiet")  # from the repository root
    assert done.returncode == 0, done.stdout + done.stderr
    assert _table(done.stdout)[("x=1", "y")][:2] == ["2", "2"], done.stdout  # recorded, then replayed: pkg.train ran
