"""TensorBoard and MLflow, fed from the ledger: read back with each tool's own reader.

The synthetic ``tracked`` (tests/sweep_fns.py) reports three epochs and fails for
lr >= 0.3 (once only, with ``fail_once``). No TensorFlow in the trials.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import ROOT, run_cli, run_cli_here, write_grid
from tool_readers import local_uri, mlflow_runs, tb_sessions

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

GRID = {"lr": [0.1, 0.2, 0.3], "act": ["relu", "tanh"]}


# -- reading back, with the tools' own readers ----------------------------------------------


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow import MlflowClient

    return sorted((m.step, m.value) for m in MlflowClient(tracking_uri=uri).get_metric_history(run_id, key))


def ledger_epochs(folder) -> dict[str, list[tuple[int, dict]]]:
    frame = pd.read_csv(os.path.join(folder, "history.csv"))
    out: dict[str, list] = {}
    for row in frame.itertuples():
        out.setdefault(row.trial, []).append((row.epoch, {"loss": row.loss, "acc": row.acc}))
    return out


def pairs(got, want, rel: float = 1e-6) -> bool:
    """(step, value) lists equal: the same steps, values equal to ``rel`` (events hold float32).
    A point given twice (a result equal to its last epoch's report) counts once."""
    got, want = _once(got), _once(want)
    return [s for s, _ in got] == [s for s, _ in want] and all(
        v == pytest.approx(w, rel=rel) for (_, v), (_, w) in zip(got, want))


def _once(points):
    out = []
    for step, value in sorted(points):
        if not out or out[-1][0] != step or out[-1][1] != pytest.approx(value, rel=1e-12):
            out.append((step, value))
    return out


# -- what each tool shows ---------------------------------------------------------------------


def test_an_unreachable_tracking_server_is_one_warning_and_a_fresh_sweep_keeps_the_old_tensorboard_folder(
        tmp_path, caplog):
    """Two tests once, on one sweep (a sweep each before, the same grid and TensorBoard): a
    tracking server that cannot be reached is one warning, naming the export that finishes
    it, and the sweep goes on, as does its other tracker. Then ``--fresh`` is a new sweep: its
    TensorBoard folder starts empty, and the old one is kept beside it under a stamped name
    (as the old ledger is), whole."""
    uri = f"http://127.0.0.1:{_closed_port()}"
    opts = dict(tensorboard=True, out=str(tmp_path), name="f", progress=False)
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        df = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2]}, mlflow=uri, **opts)
    assert (df.status == "ok").all()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert uri in warnings[0] and f"python -m sweeper export {tmp_path / 'f'} --mlflow {uri}" in warnings[0]
    folder = tmp_path / "f"
    _, sessions = tb_sessions(folder)  # the other tracker went on
    assert len(sessions) == 2
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.3]}, fresh=True, **opts)
    (old,) = [n for n in os.listdir(folder) if n.startswith("tensorboard.")]
    assert len(tb_sessions(folder, old)[1]) == 2  # the first sweep's trials, kept whole
    _, sessions = tb_sessions(folder)
    assert [s["hparams"]["lr"] for s in sessions.values()] == [0.3]


def test_tensorboard_shows_every_trial_and_mlflow_has_one_parent_run_and_a_nested_run_per_trial(tmp_path):
    """Each tool's view of one sweep (two tests once, on the same grid: a sweep each before):
    TensorBoard shows every trial, its parameters, status, epochs and result; MLflow has one
    parent run and a nested run per trial, with its artifacts."""
    grid = write_grid(tmp_path, "from sweep_fns import tracked as train\n"
                                f"grid = {GRID!r}\noptions = {{'tensorboard': True}}\n")
    proc = run_cli("--mlflow", grid, "--out", str(tmp_path), "--name", "m", "--workers", "2")  # the file, not a URI
    assert proc.returncode == 1, proc.stderr  # two trials failed
    folder = tmp_path / "m"
    uri = local_uri(folder)
    assert f"mlflow ui --backend-store-uri {uri}" in proc.stdout
    assert f"tensorboard --logdir {folder}" in proc.stdout  # asked for by the grid file's options
    df = sweeper.load(str(folder))
    # TensorBoard
    assert sorted(df.status) == ["error", "error", "ok", "ok", "ok", "ok"]
    experiment, sessions = tb_sessions(folder)
    assert len(sessions) == 6
    assert set(sessions) == set(df.trial)  # every trial, failed ones too
    info = {h.name: h for h in experiment.hparam_infos}
    assert [v.number_value for v in info["lr"].domain_discrete.values] == [0.1, 0.2, 0.3]
    assert [v.string_value for v in info["act"].domain_discrete.values] == ["relu", "tanh"]
    assert {m.name.tag for m in experiment.metric_infos} == {"acc", "loss", "epoch_reached"}
    epochs = ledger_epochs(folder)
    for row in df.itertuples():
        shown = sessions[row.trial]
        assert shown["hparams"] == {"lr": row.param_lr, "act": row.param_act}
        assert shown["status"] == ("STATUS_SUCCESS" if row.status == "ok" else "STATUS_FAILURE")
        want = [(e, m["loss"]) for e, m in epochs[row.trial]]
        assert pairs(shown["scalars"]["epoch/loss"], want)
        # a failed trial's row carries its last epoch's metrics, as every row does
        assert pairs(shown["scalars"]["acc"], [(3, row.acc)])
    # MLflow
    parents, children = mlflow_runs(uri, "m")
    assert len(parents) == 1 and len(children) == len(df) == 6
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.info.run_name == "m"
    by_trial = {r.data.tags["trial_id"]: r for r in children}
    for row in df.itertuples():
        run = by_trial[row.trial_id]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.run_name == row.trial
        assert run.data.params == {"lr": str(row.param_lr), "act": row.param_act}
        assert run.data.tags["status"] == row.status
        assert run.data.tags["seed"] == str(row.seed) and run.data.tags["device"] == row.device == "cpu"
        assert run.info.status == ("FINISHED" if row.status == "ok" else "FAILED")
        assert run.data.tags["sweeper_final"] and run.data.tags["sweeper_epoch"] == "3"
        want = [(e, m["acc"]) for e, m in epochs[row.trial]]
        if row.status == "ok":  # the result's metric at the last epoch, after the epochs' own
            assert pairs(history(uri, run.info.run_id, "acc"), sorted(want + [(3, row.acc)]), rel=1e-12)
            assert run.data.metrics["loss"] == pytest.approx(row.loss)
        else:
            assert pairs(history(uri, run.info.run_id, "acc"), want, rel=1e-12)
            assert run.data.tags["error"] == row.error == "ValueError: lr too high"
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["log.txt"]
        text = open(client.download_artifacts(run.info.run_id, "log.txt", str(tmp_path / "dl"))).read()
        assert text == open(folder / "trials" / row.trial / "log.txt").read()


def test_a_resume_updates_the_same_runs_and_a_rerun_keeps_one(tmp_path):
    """Resumed with more trials: the kept trials' runs are the same runs, untouched; the
    trial that failed and runs again has one run, of its new attempt only; nothing twice."""
    opts = dict(tensorboard=True, mlflow=True, out=str(tmp_path), name="r", progress=False, workers=1)
    first = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.3], "fail_once": [True]}, **opts)
    assert first.status.tolist() == ["ok", "error"]
    folder = tmp_path / "r"
    uri = local_uri(folder)
    parents1, runs1 = mlflow_runs(uri, "r")
    before = {r.data.tags["trial_id"]: r for r in runs1}
    second = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2, 0.3], "fail_once": [True]}, **opts)
    assert second.status.tolist() == ["ok", "ok", "ok"]
    parents2, runs2 = mlflow_runs(uri, "r")
    after = {r.data.tags["trial_id"]: r for r in runs2}
    assert [p.info.run_id for p in parents2] == [p.info.run_id for p in parents1]  # the same sweep run
    assert len(runs2) == len(after) == 3  # one run per trial
    kept, rerun = first.trial_id[0], first.trial_id[1]
    assert after[kept].info.run_id == before[kept].info.run_id
    assert after[kept].data.to_dictionary() == before[kept].data.to_dictionary()  # untouched
    assert after[rerun].data.tags["status"] == "ok" and after[rerun].info.status == "FINISHED"
    assert pairs(history(uri, after[rerun].info.run_id, "loss"),
                 [(1, 1 / 0.3), (2, 1 / 0.6), (3, 1 / 0.9), (3, 1 / 0.9)])  # this attempt's epochs, its result
    _, deleted = mlflow_runs(uri, "r", deleted=True)
    assert [r.data.tags["trial_id"] for r in deleted] == [rerun]  # the failed attempt's run, replaced
    # TensorBoard: one session per trial, the rerun's status now success
    _, sessions = tb_sessions(folder)
    assert set(sessions) == set(second.trial)
    assert {s["status"] for s in sessions.values()} == {"STATUS_SUCCESS"}
    assert all(len(s["scalars"]["epoch/loss"]) == 3 for s in sessions.values())
    # a third run with nothing to do changes nothing
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2, 0.3], "fail_once": [True]}, **opts)
    _, runs3 = mlflow_runs(uri, "r")
    assert ({r.info.run_id: r.data.to_dictionary() for r in runs3} ==
            {r.info.run_id: r.data.to_dictionary() for r in runs2})


def test_a_retried_trial_has_one_run_of_its_last_attempt(tmp_path):
    """The mirror at each step of a retry, the ledger written as the engine writes it: the
    first attempt shows (running, its epochs, failed), then the retry replaces it."""
    from sweeper.store.ledger import Ledger
    from sweeper.run.planning import plan
    from sweeper.tracking import SweepInfo, domains_of_points
    from sweeper.tracking.chosen import make
    from sweeper.tracking.mirror import Mirror
    from sweeper.model.options import Options
    from sweeper.model.protocol import Began
    from sweeper.model.lifecycle import SweepEnd
    from sweeper.model.trial import Status, TrialResult

    folder = str(tmp_path / "f")
    os.makedirs(folder)
    spec = plan([{"lr": 0.4}], folder, seed=0)[0]
    ledger = Ledger(folder)
    info = SweepInfo(name="f", folder=folder, uid="u1", domains=domains_of_points([spec.params]))
    mirror = Mirror(folder, make(Options(tensorboard=True, mlflow=True), folder), info,
                    lambda tid: spec if tid == spec.trial_id else None, strict=True)
    uri = local_uri(folder)

    def attempt(n, started, status, epochs):
        ledger.clear_history(spec.trial_id)
        ledger.mark_running(replace(spec, attempt=n), Began(100 + n, "cpu"), started)
        assert mirror.sync()
        running = [r for r in mlflow_runs(uri, "f")[1] if r.info.status == "RUNNING"]
        assert len(running) == 1 and running[0].data.tags["attempt"] == str(n)
        ledger.add_history(spec.trial_id, [{"epoch": e, "metrics": {"loss": v}, "t": 1.0 + e} for e, v in epochs])
        ledger.record(TrialResult(spec.trial_id, spec.name, 0, spec.params, status,
                                  {"loss": epochs[-1][1]} if status is Status.OK else {}, started_at=started,
                                  attempts=n, duration_s=1.0, epoch_reached=epochs[-1][0],
                                  error="" if status is Status.OK else "crashed: exit code 3"))
        assert mirror.sync()
        return mlflow_runs(uri, "f")[1]

    first = attempt(1, "2026-01-01T00:00:00.000Z", Status.CRASHED, [(1, 9.0), (2, 8.0)])
    assert len(first) == 1 and first[0].info.status == "FAILED" and first[0].data.tags["status"] == "crashed"
    assert history(uri, first[0].info.run_id, "loss") == [(1, 9.0), (2, 8.0)]
    runs = attempt(2, "2026-01-01T00:00:05.000Z", Status.OK, [(1, 3.0), (2, 2.0), (3, 1.0)])
    assert len(runs) == 1 and runs[0].info.run_id != first[0].info.run_id
    assert runs[0].info.status == "FINISHED" and runs[0].data.tags["attempt"] == "2"
    assert pairs(history(uri, runs[0].info.run_id, "loss"), [(1, 3.0), (2, 2.0), (3, 1.0)])  # none of attempt 1's
    assert not mirror.sync()  # nothing new: nothing sent
    # the same attempt's row recorded again with another outcome (it sent its result, then
    # did not exit cleanly): shown anew, with its epochs, never half of each
    ledger.record(TrialResult(spec.trial_id, spec.name, 0, spec.params, Status.CRASHED, {"loss": 1.0},
                              started_at="2026-01-01T00:00:05.000Z", attempts=2, duration_s=1.0, epoch_reached=3,
                              error="crashed: exit code 3 after it sent its result"))
    assert mirror.sync()
    [run] = mlflow_runs(uri, "f")[1]
    assert (run.info.status, run.data.tags["status"]) == ("FAILED", "crashed")
    assert pairs(history(uri, run.info.run_id, "loss"), [(1, 3.0), (2, 2.0), (3, 1.0)])
    mirror.end(SweepEnd.FINISHED)
    ledger.close()
    _, sessions = tb_sessions(folder)
    assert len(sessions) == 1
    [shown] = sessions.values()
    assert shown["status"] == "STATUS_FAILURE" and shown["scalars"]["epoch/loss"] == [(1, 3.0), (2, 2.0), (3, 1.0)]


def test_a_search_shows_its_ranges_and_its_pruned_trials(tmp_path):
    pytest.importorskip("optuna")
    df = sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0.0, 1.0), "pace": 0.04}, search="tpe",
                       trials=12, prune="median", metric="loss", workers=2, tensorboard=True, mlflow=True,
                       out=str(tmp_path), name="s", progress=False)
    assert (df.status == "pruned").sum() >= 2, df[["status", "epoch_reached"]]
    experiment, sessions = tb_sessions(tmp_path / "s")
    info = {h.name: h for h in experiment.hparam_infos}
    assert (info["x"].domain_interval.min_value, info["x"].domain_interval.max_value) == (0.0, 1.0)
    assert [v.number_value for v in info["pace"].domain_discrete.values] == [0.04]
    _, runs = mlflow_runs(local_uri(tmp_path / "s"), "s")
    by_trial = {r.data.tags["trial_id"]: r for r in runs}
    assert len(runs) == 12
    for row in df.itertuples():
        run, shown = by_trial[row.trial_id], sessions[row.trial]
        assert run.data.tags["status"] == row.status and run.info.status == "FINISHED"
        assert run.data.tags["epoch_reached"] == str(row.epoch_reached)
        assert len(history(local_uri(tmp_path / "s"), run.info.run_id, "loss")) >= row.epoch_reached
        assert shown["status"] == "STATUS_SUCCESS"  # pruned ended as the search meant: not a failure
        assert shown["scalars"]["epoch_reached"][-1][1] == row.epoch_reached
        assert len(shown["scalars"]["epoch/loss"]) == row.epoch_reached


def test_ctrl_c_shows_running_trials_then_interrupted_and_a_resume_finishes_them(tmp_path):
    """While trials run, MLflow shows them running (the live view); Ctrl-C ends the parent
    run and theirs as KILLED, status interrupted; the resume replaces them, one run each."""
    import signal
    import time

    release = tmp_path / "release"
    grid = write_grid(tmp_path, "from sweep_fns import wait_for_file as train\n"
                                f"grid = {{'x': [1, 2], 'release': [{str(release)!r}]}}\n")
    args = [sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path), "--name", "i", "--workers", "2",
            "--mlflow", "--tensorboard"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    uri = local_uri(tmp_path / "i")
    deadline, running = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None and len(running) < 2:
        if os.path.exists(tmp_path / "i" / "mlflow.db"):
            try:
                running = [r for r in mlflow_runs(uri, "i")[1] if r.info.status == "RUNNING"]
            except Exception:  # the store is being created
                running = []
        time.sleep(0.2)  # polling the tracker itself: what a user watching it sees
    assert len(running) == 2 and all(r.data.tags["status"] == "running" for r in running), proc.poll()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    parents, runs = mlflow_runs(uri, "i")
    assert parents[0].info.status == "KILLED"
    assert {(r.info.status, r.data.tags["status"]) for r in runs} == {("KILLED", "interrupted")} and len(runs) == 2
    _, sessions = tb_sessions(tmp_path / "i")
    assert {s["status"] for s in sessions.values()} == {"STATUS_UNKNOWN"}
    release.touch()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    parents, runs = mlflow_runs(uri, "i")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(runs) == 2 and {(r.info.status, r.data.tags["status"]) for r in runs} == {("FINISHED", "ok")}
    _, sessions = tb_sessions(tmp_path / "i")
    assert {s["status"] for s in sessions.values()} == {"STATUS_SUCCESS"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def test_a_new_local_store_appears_whole_and_is_a_copy_of_the_empty_store_mlflow_made_once(tmp_path, monkeypatch):
    """MLflow's migrations take seconds per new store: the first sweep keeps the store they
    made, emptied, in the user's cache, and later stores are copies of it; a template that
    is not whole is made again, never used.

    And a second client opening mlflow.db the moment it exists (mlflow ui, a watching script)
    finds it whole: were it made in place, both would make its tables and one would fail.
    Watched: store b, copied from the template, as nearly every store is (the sweep that test
    ran on its own found the template an earlier sweep of the run had kept); once a test of
    its own, its sweep is now this test's (each watch spins a core while the store is made)."""
    import sqlite3
    import threading

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "sweeper"

    def tables(db) -> set[str]:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return {r[0] for r in con.execute("select name from sqlite_master where type='table'")}

    def swept(name: str, watched: bool = False) -> None:
        db, seen, done = tmp_path / name / "mlflow.db", [], threading.Event()

        def tables_at_first_sight() -> None:
            while not done.is_set() and not db.exists():
                pass  # no sleep: the file must not be caught between its creation and its tables
            if db.exists():
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                    seen.append({r[0] for r in con.execute("select name from sqlite_master where type='table'")})

        watcher = threading.Thread(target=tables_at_first_sight)
        if watched:
            watcher.start()
        try:
            df = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2]}, mlflow=True, out=str(tmp_path), name=name,
                               progress=False)
        finally:
            done.set()
            if watched:
                watcher.join()
        assert (df.status == "ok").all()
        if watched:
            assert seen == [tables(db)], (seen, tables(db))
            assert not [p for p in os.listdir(db.parent) if p.endswith(".part")]
        parents, runs = mlflow_runs(local_uri(tmp_path / name), name)
        assert len(parents) == 1 and len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}

    swept("a")
    [template] = cache.iterdir()
    assert template.name.startswith("mlflow-store-") and template.suffix == ".db"
    with sqlite3.connect(template) as con:
        assert con.execute("select count(*) from experiments").fetchone() == (0,)
        assert con.execute("select count(*) from alembic_version").fetchone() == (1,)
        con.execute("create table sweeper_mark (x)")  # a store copied from it has this too
    assert tables(template) - {"sweeper_mark"} == tables(tmp_path / "a" / "mlflow.db")
    swept("b", watched=True)
    assert "sweeper_mark" in tables(tmp_path / "b" / "mlflow.db")
    template.write_bytes(b"not a database")  # a broken template: made again, and the store whole
    swept("c")
    assert "sweeper_mark" not in tables(tmp_path / "c" / "mlflow.db")
    assert tables(template) == tables(tmp_path / "c" / "mlflow.db")
    assert sorted(p.name for p in cache.iterdir()) == [template.name]  # nothing half made left

    from sweeper.tracking.mlflow_runs import _create_whole

    def experiments(db) -> list[tuple[int, str]]:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute("select experiment_id, name from experiments").fetchall()

    _create_whole(str(tmp_path / "d" / "mlflow.db"))  # as it appears: whole, its Default experiment made
    assert experiments(tmp_path / "d" / "mlflow.db") == [(0, "Default")]
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # no cache folder: made by the migrations
    monkeypatch.chdir(tmp_path)
    _create_whole(str(tmp_path / "e" / "mlflow.db"))
    assert experiments(tmp_path / "e" / "mlflow.db") == [(0, "Default")]
    assert not (tmp_path / "relative").exists()


def test_export_replays_a_sweep_into_another_store_twice_is_once_and_leaves_nothing_in_the_current_folder(
        tmp_path):
    """Two tests once, on one sweep and its exports (each an interpreter importing MLflow):
    an export replays the sweep and a second one adds nothing; exporting into another
    store writes nothing where it is run (no mlruns/), its artifacts in the sweep folder.
    The second export is the same command run in this process (``main``, as the CLI calls it;
    MLflow imported here already): a fresh interpreter in that folder is the first's."""
    sweeper.sweep(sweep_fns.tracked, GRID, out=str(tmp_path), name="e", progress=False, workers=2)
    folder = str(tmp_path / "e")
    assert not os.path.exists(os.path.join(folder, "tensorboard"))
    here = tmp_path / "caller"
    here.mkdir()
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    for run in (run_cli, run_cli_here):
        proc = run("export", folder, "--mlflow", uri, "--tensorboard", cwd=str(here))
        assert proc.returncode == 0, proc.stderr
        assert f"6 trials shown in MLflow at {uri}" in proc.stdout
        assert os.listdir(here) == []  # no mlruns/, nothing
    logs = _artifact_files(uri, "e")
    assert len(logs) == 6
    assert all(path.startswith(os.path.join(folder, "mlartifacts") + os.sep) for path in logs.values()), logs
    parents, children = mlflow_runs(uri, "e")
    assert len(parents) == 1 and len(children) == 6
    assert sorted(r.data.tags["status"] for r in children) == ["error", "error", "ok", "ok", "ok", "ok"]
    _, sessions = tb_sessions(folder)
    assert len(sessions) == 6
    assert all(len(os.listdir(os.path.join(folder, "tensorboard", t))) == 1 for t in sessions)  # not twice


def test_command_trials_are_shown_too(tmp_path):
    """Fed from the ledger: a command trial's metrics.json and its reports reach both tools."""
    script = os.path.join(ROOT, "tests", "scripts", "argv_echo.py")
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"lr": [0.1, 0.2]}))
    proc = run_cli("--command", f"{sys.executable} {script} --lr={{lr}}", "--grid", str(grid), "--out",
                   str(tmp_path), "--name", "c", "--tensorboard", "--mlflow")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, sessions = tb_sessions(tmp_path / "c")
    assert len(sessions) == 2 and all(s["scalars"]["epoch/loss"] for s in sessions.values())
    _, children = mlflow_runs(local_uri(tmp_path / "c"), "c")
    assert sorted(float(r.data.params["lr"]) for r in children) == [0.1, 0.2]
    assert all(r.data.metrics["from_stdout"] == 1.0 for r in children)
    # the epochs, then the row's loss (its last epoch's, as every row carries) as the result
    assert all(history(local_uri(tmp_path / "c"), r.info.run_id, "loss")[:2] == [(1, 0.5), (2, 0.25)]
               for r in children)


# -- hostile input, bad input ---------------------------------------------------------------------


def test_hostile_names_and_values_and_a_result_unlike_its_last_epoch_reach_both_tools(tmp_path, caplog):
    """Two tests once, on one sweep (a sweep each before, each an interpreter importing MLflow):
    hostile parameter names and values reach both tools; and a result unlike its last epoch (a
    restored best checkpoint), a metric too big for a float, two names MLflow would make one
    key: each run shows the result, nothing is lost (``final_differs`` reports the same for
    any parameters: each of the grid's two trials is such a result)."""
    grid = {"drop out/rate": [0.5], "a:b..": [None], "../up": ["x" * 7000], "layers": [[64, 32]],
            "flag": [True, False]}
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        df = sweeper.sweep(sweep_fns.final_differs, grid, tensorboard=True, mlflow=True, out=str(tmp_path),
                           name="h", progress=False)
    assert df.status.tolist() == ["ok", "ok"] and not caplog.records, [r.getMessage() for r in caplog.records]
    _, children = mlflow_runs(local_uri(tmp_path / "h"), "h")
    assert len(children) == 2
    params = children[0].data.params
    assert params["drop out/rate"] == "0.5" and params["a:b.."] == "null" and params["_/up"].endswith("...")
    assert params["layers"] == "[64, 32]"
    for run in children:
        assert run.data.metrics["acc"] == 0.99  # not 0.3, the last epoch's
        assert (run.data.metrics["a_b"], run.data.metrics["a_b_2"]) in [(1.0, 2.0), (2.0, 1.0)]
        assert "huge" not in run.data.metrics
    _, sessions = tb_sessions(tmp_path / "h")
    assert sorted(s["hparams"]["flag"] for s in sessions.values()) == [False, True]
    assert {s["hparams"]["layers"] for s in sessions.values()} == {"[64, 32]"}
    for shown in sessions.values():
        assert shown["scalars"]["acc"][-1][1] == pytest.approx(0.99)


def test_export_waits_for_a_running_sweep_to_end(tmp_path):
    import fcntl

    folder = tmp_path / "e"
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1]}, out=str(tmp_path), name="e", progress=False)
    with open(folder / ".lock", "w") as lock:  # as a sweep running there holds it
        lock.write(str(os.getpid()))
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = run_cli("export", str(folder), "--tensorboard")
    assert proc.returncode == 2 and f"a sweep (pid {os.getpid()}) is running in" in proc.stderr
    assert not os.path.exists(folder / "tensorboard")


@pytest.mark.parametrize("option, value, says", [
    ("tensorboard", "yes", "tensorboard must be True or False"),
    ("mlflow", "", "mlflow must be True"),
    ("mlflow", 5, "mlflow must be True"),
])
def test_bad_tracker_options_are_one_line(tmp_path, option, value, says):
    with pytest.raises(sweeper.SweepError, match=says):
        sweeper.sweep(sweep_fns.echo, {"x": [1]}, out=str(tmp_path), **{option: value})


@pytest.mark.parametrize("flag, extra", [("--tensorboard", "sweeper[tensorboard]"), ("--mlflow", "sweeper[mlflow]")])
def test_a_tracker_that_is_not_installed_names_its_extra(tmp_path, flag, extra):
    """As on a machine without the package: the CLI refuses before any trial, naming the extra."""
    grid = write_grid(tmp_path, "from sweep_fns import echo as train\ngrid = {'x': [1]}\n")
    module = flag[2:]
    code = (f"import sys; sys.modules[{module!r}] = None; from sweeper.front.cli import main; "
            f"sys.exit(main({[grid, '--out', str(tmp_path), flag]!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(f"pip install '{extra}'") and len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "grid")  # nothing ran


def test_export_needs_a_tracker_and_a_sweep_folder(tmp_path):
    proc = run_cli("export", str(tmp_path))
    assert proc.returncode == 2 and "export needs --tensorboard, --mlflow [URI] and/or --optuna [URL]" in proc.stderr
    proc = run_cli("export", str(tmp_path), "--tensorboard")
    assert proc.returncode == 2 and "is not a sweep folder" in proc.stderr


# -- where a tracker writes -------------------------------------------------------------------


def _artifact_files(uri: str, experiment: str) -> dict[str, str]:
    """Each trial's run: the local path of its log.txt, as MLflow's client downloads it."""
    from mlflow import MlflowClient
    from mlflow.utils.file_utils import local_file_uri_to_path

    _, children = mlflow_runs(uri, experiment)
    client = MlflowClient(tracking_uri=uri)
    out = {}
    for run in children:
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["log.txt"]
        out[run.data.tags["trial_id"]] = os.path.join(local_file_uri_to_path(run.info.artifact_uri), "log.txt")
    return out


@pytest.mark.parametrize("store", ["sqlite-file", "folder"])
def test_a_tracker_writes_only_in_the_sweep_and_the_store_named(tmp_path, store):
    """``--mlflow sqlite:///...`` put every trial's log.txt into mlruns/ of the caller's
    folder; ``--mlflow <folder>`` made a file: store that MLflow 3 refuses (the tracker was
    always dropped). Now: a folder is a SQLite store in it, with its artifacts beside; any
    other database keeps the artifacts of the experiment it makes in the sweep folder."""
    grid = write_grid(tmp_path, f"from sweep_fns import tracked as train\ngrid = {{'lr': [0.1, 0.2]}}\n")
    here = tmp_path / "caller"
    here.mkdir()
    given = f"sqlite:///{tmp_path / 'db' / 'm.db'}" if store == "sqlite-file" else str(tmp_path / "store")
    proc = run_cli(grid, "--out", str(tmp_path / "out"), "--mlflow", given, "--quiet", cwd=str(here))
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert all(ln.startswith(("sweeper:", "  ")) for ln in said), said  # sweeper's summary, none of MLflow's
    assert os.listdir(here) == []  # no mlruns/, nothing
    uri = given if store == "sqlite-file" else f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    under = tmp_path / "out" / "grid" / "mlartifacts" if store == "sqlite-file" else tmp_path / "store" / "mlartifacts"
    logs = _artifact_files(uri, "grid")
    assert len(logs) == 2
    assert all(path.startswith(str(under) + os.sep) for path in logs.values()), logs
    trials = tmp_path / "out" / "grid" / "trials"
    assert sorted(open(p).read() for p in logs.values()) == sorted(
        (trials / t / "log.txt").read_text() for t in os.listdir(trials))
    assert sorted(os.listdir(tmp_path)) == sorted(["caller", "grid.py", "out", "db" if store == "sqlite-file" else "store"])


def test_quiet_with_a_tracking_server_prints_none_of_mlflows_lines(tmp_path):
    """MLflow's client prints "View run ... at: http://..." for each run it ends on a
    server: with --quiet the sweep said only its summary, not 3 of those lines."""
    import time
    import urllib.request

    port = _closed_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 's.db'}",
         "--artifacts-destination", str(tmp_path / "served"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:  # the server says it is up by answering /health
            try:
                urllib.request.urlopen(uri + "/health", timeout=5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.5)
        grid = write_grid(tmp_path, "from sweep_fns import tracked as train\ngrid = {'lr': [0.1, 0.2, 0.3]}\n")
        here = tmp_path / "caller"
        here.mkdir()
        proc = run_cli(grid, "--out", str(tmp_path / "out"), "--mlflow", uri, "--quiet", cwd=str(here))
        assert proc.returncode == 1, proc.stderr  # lr=0.3 fails
        said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        assert all(ln.startswith(("sweeper:", "  ")) for ln in said), said
        assert os.listdir(here) == []
        _, children = mlflow_runs(uri, "grid")
        assert sorted(r.data.tags["status"] for r in children) == ["error", "ok", "ok"]
    finally:
        os.killpg(server.pid, 9)
        server.wait()


# -- MLflow through its public client only ----------------------------------------------------


def test_mlflow_is_written_through_its_public_client_only():
    """No reach into MLflow's store, its table models or its client's private parts: the
    tracker imports only ``mlflow`` (its client) and ``mlflow.entities``."""
    import ast

    from sweeper.tracking import mlflow_runs

    tree = ast.parse(open(mlflow_runs.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.split(".")[0] == "mlflow"} == {"mlflow", "mlflow.entities"}
    private = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and n.attr.startswith("_") and not n.attr.startswith("__") and "client" in ast.unparse(n.value)]
    assert private == []
    assert not os.path.exists(os.path.join(os.path.dirname(mlflow_runs.__file__), "mlflow_batch.py"))


class _Client:
    """MLflow's client as the tracker calls it: each call recorded, nothing more (an object
    without MLflow's private parts)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.made = 0

    def create_run(self, experiment_id, start_time=None, tags=None, run_name=None):
        from types import SimpleNamespace

        self.made += 1
        self.calls.append(("create_run", run_name, dict(tags)))
        return SimpleNamespace(info=SimpleNamespace(run_id=f"run{self.made}"))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append((name, *args, kwargs))


def _tracker(tmp_path):
    from sweeper.tracking.mlflow_runs import MlflowRuns

    tracker = MlflowRuns(local_uri(tmp_path), None, str(tmp_path))
    tracker.client, tracker.experiment, tracker.parent = _Client(), "1", "parent"
    return tracker


def _attempt(n: int = 1, params=None):
    from sweeper.tracking import Attempt

    return Attempt("t1", "trial_1", params or {"lr": 0.1}, 7, "cpu", f"2024-01-01T00:00:0{n}Z", n)


def test_a_trial_seen_ended_is_five_client_calls_ended_after_its_numbers_its_marks_last(tmp_path):
    from sweeper.model.trial import Status, TrialResult

    log = tmp_path / "log.txt"
    log.write_text("hello\n")
    tracker = _tracker(tmp_path)
    attempt = _attempt()
    result = TrialResult("t1", "trial_1", 0, {"lr": 0.1}, Status.OK, {"loss": float("nan")}, seed=7, device="cpu",
                         started_at=attempt.started_at, duration_s=2.0, log=str(log), epoch_reached=1)
    tracker.start(attempt, None)
    tracker.epochs(attempt, [(0, {"loss": 1.0}, None), (1, {"loss": 0.5}, None)], 1)
    tracker.finish(attempt, result, "abc")
    assert tracker.client.calls == []  # nothing before the look's flush
    tracker.flush()
    calls = tracker.client.calls
    # no reader ever sees the run FINISHED without its numbers, nor marked final before it ended
    assert [c[0] for c in calls] == ["create_run", "log_artifact", "log_batch", "set_terminated", "log_batch"]
    assert calls[0][1:] == ("trial_1", {"mlflow.parentRunId": "parent", "trial_id": "t1", "seed": "7",
                                        "device": "cpu", "status": "ok", "attempt": "1", "epoch_reached": "1"})
    assert calls[1][1:3] == ("run1", str(log))
    batch = calls[2][2]
    assert [(p.key, p.value) for p in batch["params"]] == [("lr", "0.1")]
    assert [(m.key, m.step) for m in batch["metrics"]] == [("loss", 0), ("loss", 1), ("loss", 1)]
    assert [m.value for m in batch["metrics"][:2]] == [1.0, 0.5] and math.isnan(batch["metrics"][2].value)
    assert not batch["tags"]
    assert calls[3][1] == "run1" and calls[3][2] == {"status": "FINISHED", "end_time": 1704067201000 + 2000}
    marks = calls[4][2]
    assert {t.key: t.value for t in marks["tags"]} == {"sweeper_key": attempt.key, "sweeper_epoch": "1",
                                                       "sweeper_final": "abc"}
    assert "metrics" not in marks and "params" not in marks
    assert tracker.runs == {"t1": "run1"} and tracker.due == {}

    tracker.client.calls.clear()  # a later look: another attempt replaces the run
    tracker.start(_attempt(2), None)
    tracker.flush()
    assert [c[:2] for c in tracker.client.calls[:2]] == [("delete_run", "run1"), ("create_run", "trial_1")]
    assert tracker.runs == {"t1": "run2"}


def test_each_log_batch_stays_within_mlflows_limits_and_the_marks_come_last(tmp_path):
    from sweeper.tracking.mlflow_runs import MAX_ENTITIES, MAX_PARAMS, MAX_TAGS, _calls

    tracker = _tracker(tmp_path)
    attempt = _attempt(params={f"p{i}": i for i in range(250)})
    tracker.start(attempt, None)
    tracker.epochs(attempt, [(e, {f"m{i}": float(i) for i in range(30)}, None) for e in range(100)], 99)
    tracker.flush()
    batches = [c[2] for c in tracker.client.calls if c[0] == "log_batch"]
    assert len(batches) == 4
    for b in batches:
        assert len(b["params"]) <= MAX_PARAMS and len(b["tags"]) <= MAX_TAGS
        assert len(b["params"]) + len(b["tags"]) + len(b["metrics"]) <= MAX_ENTITIES
    assert sum(len(b["params"]) for b in batches) == 250 and sum(len(b["metrics"]) for b in batches) == 3000
    assert [[t.key for t in b["tags"]] for b in batches] == [[], [], [], ["sweeper_key", "sweeper_epoch"]]
    # a full last call: the marks in one of their own
    full = _calls([], [], list(range(MAX_ENTITIES)), ["mark"])
    assert [tuple(map(len, c)) for c in full] == [(0, 0, MAX_ENTITIES), (0, 1, 0)]
    assert _calls([], [], [], ["mark"]) == [([], ["mark"], [])]


def test_a_run_whose_last_call_failed_is_not_taken_as_holding_its_attempt(tmp_path):
    """Made, but its parameters and marks never written (the process died between the two
    calls): a resume finds the run without its attempt's key, so it is made anew."""
    from sweeper.tracking import SweepInfo
    from sweeper.tracking.mlflow_runs import MlflowRuns

    info = SweepInfo(name="k", folder=str(tmp_path), uid="u1")
    tracker = MlflowRuns(local_uri(tmp_path), str(tmp_path / "mlartifacts"), str(tmp_path))
    assert tracker.begin(info) == {}
    tracker.start(_attempt(), None)

    def dies(*args, **kwargs):
        raise RuntimeError("gone")

    tracker.client.log_batch = dies
    with pytest.raises(RuntimeError):
        tracker.flush()
    again = MlflowRuns(local_uri(tmp_path), str(tmp_path / "mlartifacts"), str(tmp_path))
    held = again.begin(info)
    assert list(held) == ["t1"] and held["t1"].key == "" and held["t1"].final is None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_making_the_local_store_leaves_no_connection_to_its_part_file(tmp_path):
    """MLflow keeps its engines for the life of the process: the one on the part file is
    closed through SQLAlchemy's own API, not MLflow's private store."""
    from sweeper.tracking.mlflow_runs import _create_whole

    def open_parts():
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                out.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
        return [p for p in out if str(tmp_path) in p and ".part" in p]

    for name in ("a", "b"):  # made by MLflow's migrations, then copied from their template
        _create_whole(str(tmp_path / name / "mlflow.db"))
        assert os.path.exists(tmp_path / name / "mlflow.db") and open_parts() == []


class _Seen:
    """A tracker that notes the attempts it is shown (the Tracker protocol, nothing written)."""

    label, flag, hint = "a test's tracker", "--none", ""

    def __init__(self) -> None:
        self.started: list[str] = []

    def begin(self, sweep):
        return {}

    def start(self, attempt, held):
        self.started.append(attempt.trial_id)

    def metrics_known(self, names): pass
    def epochs(self, attempt, rows, last): pass
    def finish(self, attempt, result, final): pass
    def flush(self): pass
    def end(self, state): pass


@pytest.mark.unit
def test_a_running_trial_whose_parameters_come_after_the_ledgers_last_change_is_shown(tmp_path):
    """A running mark has no parameters: the trackers' process asks the sweep for them, and the
    answer may come after the ledger's last change (the other trials done, this one training
    on): the next look shows the trial, without waiting for another change."""
    from sweeper.model.protocol import Began
    from sweeper.run.planning import plan
    from sweeper.store.ledger import Ledger
    from sweeper.tracking import SweepInfo
    from sweeper.tracking.mirror import Mirror

    folder = str(tmp_path / "w")
    os.makedirs(folder)
    spec = plan([{"lr": 0.1}], folder, seed=0)[0]
    ledger = Ledger(folder)
    told: dict = {}
    seen = _Seen()
    mirror = Mirror(folder, [seen], SweepInfo(name="w", folder=folder, uid="u"), told.get)
    ledger.mark_running(spec, Began(7, "cpu"), "2026-01-01T00:00:00.000Z")
    assert mirror.sync() and seen.started == []  # running, its parameters not known here yet
    told[spec.trial_id] = spec  # the sweep's answer; the ledger does not change again
    assert mirror.sync() and seen.started == [spec.trial_id]
    assert not mirror.sync()  # shown: nothing more to look at
    ledger.close()
