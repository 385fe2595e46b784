"""The Ray backend on one machine: a local Ray instance with two logical GPUs.

Ray takes seconds to start, so one instance serves the whole module.
"""

from __future__ import annotations

import os
import sys

import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import HERE, assert_dead, run_cli
from frames import most_at_once

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def test_two_trials_per_logical_gpu(tmp_path):
    df = sweeper.sweep(sweep_fns.gpu_env, {"x": list(range(8)), "hold": 0.5}, backend="ray", per_gpu=2,
                       cpus_per_trial=0.5, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert (df.n_ids == 1).all() and set(df.cuda) == {0, 1}
    assert (df.device == "gpu:" + df.cuda.astype(int).astype(str)).all()
    assert most_at_once(df) <= 2
    assert (df.xla_fraction == 0.475).all() and (df.pci_order == 1).all()  # Ray's ids are nvidia-smi's
    pids = sweeper.load(str(tmp_path / "sweep_fns"))  # every trial in its own worker process
    logs = [open(os.path.join(str(tmp_path), "sweep_fns", "trials", t, "log.txt")).readline() for t in pids.trial]
    assert len({line.split(" pid ")[1].split(",")[0] for line in logs}) == 8


def test_same_table_as_the_local_backend(tmp_path):
    grid = {"x": [1, 2, 3]}
    local = sweeper.sweep(sweep_fns.draws, grid, out=str(tmp_path / "l"), progress=False)
    remote = sweeper.sweep(sweep_fns.draws, grid, backend="ray", gpus="none", out=str(tmp_path / "r"),
                           progress=False)
    cols = ["trial_id", "trial", "status", "param_x", "py", "np", "seed"]
    pd.testing.assert_frame_equal(local[cols], remote[cols])


def test_crash_timeout_and_resume(tmp_path):
    """A trial's clock starts when it begins on its worker, before it imports its module: the
    timeout leaves a busy machine room for that import (2 s did not: 'ok' timed out)."""
    grid = {"how": ["ok", "segv", "sleep", "raise", "exit3"]}
    df = sweeper.sweep(sweep_fns.crash, grid, backend="ray", gpus="none", timeout=8, out=str(tmp_path),
                       progress=False).set_index("param_how")
    assert df.status.to_dict() == {"ok": "ok", "segv": "crashed", "sleep": "timeout", "raise": "error",
                                   "exit3": "crashed"}
    assert "WorkerCrashedError" in df.loc["segv", "error"]
    assert "exit code 3" in df.loc["exit3", "error"]  # Ray says only that the worker died
    again = sweeper.sweep(sweep_fns.crash, grid, backend="ray", gpus="none", timeout=8, out=str(tmp_path),
                          progress=False).set_index("param_how")
    assert again.loc["ok", "started_at"] == df.loc["ok", "started_at"]  # kept, not re-run
    assert again.loc["raise", "started_at"] != df.loc["raise", "started_at"]


def test_reports_and_logs_come_back(tmp_path):
    sweeper.sweep(sweep_fns.reporter, {"x": [1]}, backend="ray", gpus="none", out=str(tmp_path), progress=False)
    history = pd.read_csv(tmp_path / "sweep_fns" / "history.csv")
    assert history.epoch.tolist() == [1, 2, 3]
    assert "=== sweeper: trial x=1" in (tmp_path / "sweep_fns" / "trials" / "x=1" / "log.txt").read_text()


def test_train_from_a_module_the_workers_cannot_import(tmp_path):
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "private_train.py").write_text("def train(params):\n    return {'twice': params['x'] * 2.0}\n")
    sys.path.insert(0, str(folder))
    try:
        import private_train

        df = sweeper.sweep(private_train.train, {"x": [1, 2]}, backend="ray", gpus="none",
                           out=str(tmp_path / "out"), progress=False)
    finally:
        sys.path.remove(str(folder))
    assert df.twice.tolist() == [2.0, 4.0], df.error.tolist()


def test_cli_opens_its_own_ray_and_ships_the_grid_folder(tmp_path):
    (tmp_path / "helper_mod.py").write_text("def double(x):\n    return 2.0 * x\n")
    grid = tmp_path / "shipped.py"
    grid.write_text("from helper_mod import double\n"
                    "def train(params):\n    return {'twice': double(params['x'])}\n"
                    "grid = {'x': [1, 2]}\n")
    done = run_cli(str(grid), "--backend", "ray", "--out", str(tmp_path / "out"), cwd=str(tmp_path.parent))
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "out" / "shipped" / "results.csv")
    assert df.twice.tolist() == [2.0, 4.0]


def test_command_trials_run_on_ray(tmp_path):
    script = os.path.join(HERE, "scripts", "argv_echo.py")
    df = sweeper.sweep(f"{sys.executable} {script} --text={{text}}", {"text": ["a b", "c;d"]}, backend="ray",
                       gpus="none", out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.n_args.tolist() == [1, 1]


@pytest.mark.timeout(120)  # a trial that is never ended would hold the sweep for ever
def test_a_trial_that_ignores_sigterm_times_out(tmp_path):
    """6 s: room for the trial and the Python child it starts to ignore SIGTERM on a busy
    machine (2 s was not, beside two CPU burners); then both sleep 600 s, ignoring it."""
    df = sweeper.sweep(sweep_fns.stubborn, {"x": [1], "pids_to": [str(tmp_path)]}, backend="ray", gpus="none",
                       timeout=6, out=str(tmp_path / "out"), progress=False)
    assert df.status.tolist() == ["timeout"], df.error.tolist()
    assert "timeout of 6s" in df.error[0]
    ignoring = tmp_path / "ignoring"
    assert ignoring.exists(), "the trial did not get to ignore SIGTERM within its 6 s"
    for pid in [int(p) for p in ignoring.read_text().split()]:  # the trial, then its child
        assert_dead(pid, timeout=10)


def test_a_search_on_ray_prunes_by_cancelling_the_task(tmp_path):
    df = sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0.0, 1.0), "pace": 0.1}, search="random",
                       trials=10, prune="median", metric="loss", seed=0, backend="ray", gpus="none",
                       cpus_per_trial=0.5, workers=2, out=str(tmp_path), progress=False)
    assert len(df) == 10 and set(df.status) <= {"ok", "pruned"}, df[["status", "error"]]
    pruned = df[df.status == "pruned"]
    # stopped before its last epoch (one running while the pruner's first five trials
    # completed may be judged, and stopped, late: as in test_search)
    assert (pruned.epoch_reached < 20).sum() >= 1, df[["param_x", "status", "epoch_reached"]]


def test_trackers_are_fed_from_the_ledger_on_ray_too(tmp_path):
    pytest.importorskip("mlflow")
    from tool_readers import local_uri, mlflow_runs, tb_sessions

    df = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.3]}, backend="ray", gpus="none", tensorboard=True,
                       mlflow=True, optuna=True, out=str(tmp_path), name="t", progress=False)
    assert df.status.tolist() == ["ok", "error"]
    from tool_readers import studies

    study = studies(tmp_path / "t" / "optuna.journal")["t"]  # an Optuna study too, each epoch in it
    assert sorted((t.state.name, len(t.intermediate_values)) for t in study.trials) == [("COMPLETE", 3), ("FAIL", 3)]
    _, sessions = tb_sessions(tmp_path / "t")
    assert {s["status"] for s in sessions.values()} == {"STATUS_SUCCESS", "STATUS_FAILURE"}
    assert all(len(s["scalars"]["epoch/loss"]) == 3 for s in sessions.values())
    _, runs = mlflow_runs(local_uri(tmp_path / "t"), "t")
    assert sorted(r.data.tags["status"] for r in runs) == ["error", "ok"]


def test_a_hydra_multirun_runs_its_jobs_as_ray_tasks(tmp_path):
    """hydra/launcher=sweeper with backend=ray: the app is a script, so each Ray
    worker loads it to find the task function under @hydra.main; its job folders as Hydra's."""
    pytest.importorskip("hydra", reason="hydra-core is not installed (pip install -e '.[hydra]')")
    import subprocess

    sweep = tmp_path / "sweep"
    done = subprocess.run([sys.executable, os.path.join(HERE, "hydra_app", "app.py"), "-m",
                           "hydra/launcher=sweeper", "lr=0.1,0.01", f"hydra.sweep.dir={sweep}",
                           "hydra.launcher.backend=ray"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    df = pd.read_csv(sweep / "results.csv")
    assert list(df.status) == ["ok", "ok"] and list(df.value) == pytest.approx([1.16, 0.26])
    for num in (0, 1):
        assert (sweep / str(num) / ".hydra" / "config.yaml").exists() and (sweep / str(num) / "app.log").exists()
