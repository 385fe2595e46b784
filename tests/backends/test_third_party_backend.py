"""A backend from outside sweeper: ``tests/toy_backend.py`` registered
through the public registry, from code and as an installed package's entry point, runs
real sweeps, its rows as the local backend's would be; the names a sweep may use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import sweep_fns
import sweeper
import toy_backend
import toy_batch_backend
from conftest import HERE, ROOT, install_module, run_cli, write_grid
from sweeper.backends import GROUP, register, registry


@pytest.fixture
def toy():
    register("toy", toy_backend.factory, places_trials=True)
    yield "toy"
    registry._BACKENDS.pop("toy", None)


def test_a_sweep_runs_on_a_backend_registered_from_outside(tmp_path, toy):
    grid = [{"how": how} for how in ("ok", "raise", "exit3", "segv")]
    df = sweeper.sweep(sweep_fns.crash, grid, backend=toy, out=str(tmp_path), name="s", progress=False)
    assert df.status.tolist() == ["ok", "error", "crashed", "crashed"], df.error.tolist()
    assert df.value.tolist()[0] == 1.0 and df.error[1] == "ValueError: boom from the trial"
    assert df.error.tolist()[2:] == ["died with exit code 3 before returning a result",
                                     "died with SIGSEGV before returning a result"]
    on_disk = pd.read_csv(tmp_path / "s" / "results.csv")
    assert on_disk.status.tolist() == df.status.tolist()
    folder = tmp_path / "s" / "trials" / df.trial[0]
    with open(folder / "result.json") as f:
        assert json.load(f)["metrics"] == {"value": 1.0}  # the files a local trial leaves
    with open(folder / "log.txt") as f:
        assert f.readline().startswith("=== sweeper: trial how=ok ")  # its log, with the header


def test_a_sweep_runs_as_batch_jobs_that_share_only_files_with_it(tmp_path):
    """The file channel a batch scheduler's job needs: each trial a
    process started with ``python -m sweeper.child.batch <trial dir>``, its messages and
    result through files; a timeout cancels the job; the rows are as the local backend's."""
    register("toy_batch", toy_batch_backend.factory, places_trials=True)
    try:
        grid = [{"how": how} for how in ("ok", "raise", "exit3", "segv", "sleep")]
        df = sweeper.sweep(sweep_fns.crash, grid, backend="toy_batch", workers=5, timeout=6, out=str(tmp_path),
                           name="s", progress=False)
    finally:
        registry._BACKENDS.pop("toy_batch", None)
    assert df.status.tolist() == ["ok", "error", "crashed", "crashed", "timeout"], df.error.tolist()
    assert df.value[0] == 1.0 and df.error[1] == "ValueError: boom from the trial"
    assert df.error[2] == "died with exit code 3 before returning a result"
    assert df.error[4] == "ran past the timeout of 6s and was cancelled"
    folder = tmp_path / "s" / "trials" / df.trial[0]
    assert sorted(os.listdir(folder / ".job")) == ["answers", "job.pkl", "messages", "returned.pkl"]
    with open(folder / "result.json") as f:
        assert json.load(f)["metrics"] == {"value": 1.0}


def test_its_trials_run_in_their_own_processes_with_their_seeds(tmp_path, toy):
    df = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, backend=toy, workers=2, out=str(tmp_path),
                       progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.value.tolist() == [2.0, 4.0, 6.0]
    assert len(set(df.pid)) == 3 and os.getpid() not in set(df.pid)  # what echo saw: its own pid
    assert df.seed_seen.tolist() == df.seed.tolist()


def test_an_unknown_backend_is_one_line_naming_the_known_ones(tmp_path):
    with pytest.raises(sweeper.SweepError) as caught:
        sweeper.sweep(sweep_fns.echo, {"x": [1]}, backend="slurmm", out=str(tmp_path), progress=False)
    said = str(caught.value)
    assert "\n" not in said and "'slurmm' is unknown" in said and "local, ray" in said and GROUP in said
    assert not os.listdir(tmp_path)  # refused before anything was made


@pytest.mark.unit
def test_a_name_is_registered_once():
    register("toy_once", toy_backend.factory)
    try:
        register("toy_once", toy_backend.factory)  # the same again: fine
        with pytest.raises(sweeper.SweepError, match="registered already"):
            register("toy_once", lambda launch: None)  # type: ignore[arg-type,return-value]
        with pytest.raises(sweeper.SweepError, match="not a plain name"):
            register("my backend", toy_backend.factory)
        assert "toy_once" in registry.names()
    finally:
        registry._BACKENDS.pop("toy_once", None)


def test_an_installed_packages_entry_point_adds_a_backend_to_the_command_line(tmp_path):
    """A package that declares ``toy = toy_backend:factory`` in the ``sweeper.backends``
    group: ``--backend toy`` runs on it; no line of sweeper's names it."""
    site = install_module(tmp_path / "site", "toy_backend_dist", None)
    with open(os.path.join(site, "toy_backend_dist-1.0.dist-info", "entry_points.txt"), "w") as f:
        f.write(f"[{GROUP}]\ntoy = toy_backend:factory\n")
    (tmp_path / "grid.py").write_text("from sweep_fns import echo as train\ngrid = {'x': [1, 2]}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, HERE, ROOT])}
    done = subprocess.run([sys.executable, "-m", "sweeper", str(tmp_path / "grid.py"), "--backend", "toy",
                           "--out", str(tmp_path / "out"), "--quiet"], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert rows.status.tolist() == ["ok", "ok"] and rows.value.tolist() == [2.0, 4.0]
    wrong = subprocess.run([sys.executable, "-m", "sweeper", str(tmp_path / "grid.py"), "--backend", "toyy",
                            "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=240)
    assert wrong.returncode == 2 and "'toyy' is unknown; use one of local, ray, slurm, toy" in wrong.stderr + wrong.stdout


def test_a_backend_owns_its_options_and_no_other_takes_them(tmp_path):
    """Each backend owns and checks its own options group: given as
    keywords, they reach its factory as ``launch.options.backend_options``; a bad value is its
    one-line error; another backend refuses them, naming the one they go with."""
    register("toy_lanes", toy_backend.with_lanes, places_trials=True, options=toy_backend.ToyOptions)
    try:
        df = sweeper.sweep(sweep_fns.echo, {"x": [1, 2, 3]}, backend="toy_lanes", lanes=1, out=str(tmp_path),
                           name="s", progress=False)
        assert (df.status == "ok").all() and df.value.tolist() == [2.0, 4.0, 6.0], df.error.tolist()
        assert toy_backend.MADE_WITH == [toy_backend.ToyOptions(lanes=1)]
        with pytest.raises(sweeper.SweepError, match=r"^lanes must be a whole number >= 1, got 0$"):
            sweeper.sweep(sweep_fns.echo, {"x": [1]}, backend="toy_lanes", lanes=0, out=str(tmp_path))
        with pytest.raises(sweeper.SweepError, match=r"^lanes goes with backend='toy_lanes' \(--backend "
                                                     r"toy_lanes --lanes \.\.\.\)$"):
            sweeper.sweep(sweep_fns.echo, {"x": [1]}, lanes=1, out=str(tmp_path))
        with pytest.raises(sweeper.SweepError, match=r"unknown option 'lane' in sweep\(\); did you mean 'lanes'"):
            sweeper.sweep(sweep_fns.echo, {"x": [1]}, backend="toy_lanes", lane=1, out=str(tmp_path))
    finally:
        registry._BACKENDS.pop("toy_lanes", None)


@pytest.mark.unit
def test_rays_settings_are_its_own_group():
    opts = registry.options({"backend": "ray", "address": "auto", "cpus_per_trial": 0.5})
    assert (opts.backend_options.address, opts.backend_options.cpus_per_trial) == ("auto", 0.5)
    assert registry.options({"backend": "ray"}).backend_options == registry.RayOptions()
    assert registry.options({}).backend_options is None  # the local backend has none
    with pytest.raises(sweeper.SweepError, match=r"^address goes with backend='ray' \(--backend ray --address"):
        registry.options({"address": "auto"})
    with pytest.raises(sweeper.SweepError, match="cpus_per_trial must be a positive number, got -1"):
        registry.options({"backend": "ray", "cpus_per_trial": -1})
    assert registry.options({"address": None}).backend_options is None  # None: not given
    # the command line's flags alone: the grid file may name the backend they go with
    registry.options({"cpus_per_trial": 0.5}, where="the command line", partial=True)
    with pytest.raises(sweeper.SweepError, match="backend_options is sweeper's own; give the backend's settings"):
        registry.options({"backend": "ray", "backend_options": {"address": "auto"}})


def test_a_backends_flag_goes_with_the_backend_the_grid_file_names(tmp_path):
    # --cpus-per-trial alone on the command line, backend="ray" in the file: taken (planned only)
    path = write_grid(tmp_path, 'from sweep_fns import echo as train\ngrid = {"x": [1]}\noptions = {"backend": "ray"}\n')
    r = run_cli(path, "--cpus-per-trial", "0.5", "--dry-run", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    r = run_cli(path, "--cpus-per-trial", "0.5", "--backend", "local", "--dry-run", "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "cpus_per_trial goes with backend='ray'" in r.stderr, r.stderr



@pytest.mark.unit
def test_status_says_where_a_trial_runs_in_its_backends_words(tmp_path, capsys):
    """Where a trial runs is the backend's string (a node, a batch job),
    not a pid the engine reads; ``status`` shows it as said."""
    from sweeper.front.subcommands import _print_running
    from sweeper.model.protocol import Began
    from sweeper.run.planning import plan
    from sweeper.store.ledger import Ledger

    (spec,) = plan([{"x": 1}], str(tmp_path), 0)
    ledger = Ledger(str(tmp_path))
    try:
        ledger.mark_running(spec, Began(0, "cpu", where="node-3, slurm job 123_4"), "2026-12-05T00:00:00Z")
        running = ledger.running()
    finally:
        ledger.close()
    assert [r["place"] for r in running] == ["node-3, slurm job 123_4"]
    _print_running(running, {})
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("  running  x=1  cpu  node-3, slurm job 123_4  "), line


@pytest.mark.unit
def test_a_ledger_from_before_places_reads_and_migrates(tmp_path):
    """Schema 6 had no place for a running trial: read as it is, a running trial's place is
    None (status shows its pid); a sweep that opens it adds the column."""
    import sqlite3

    from sweeper.model.protocol import Began
    from sweeper.run.planning import plan
    from sweeper.store.ledger import SCHEMA_VERSION, Ledger

    (spec,) = plan([{"x": 1}], str(tmp_path), 0)
    ledger = Ledger(str(tmp_path))
    ledger.mark_running(spec, Began(4242, "cpu", where="pid 4242"), "2026-12-05T00:00:00Z")
    ledger.close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:  # as the previous release left it
        db.execute("ALTER TABLE running DROP COLUMN place")
        db.execute("PRAGMA user_version = 6")
    old = Ledger(str(tmp_path), readonly=True)
    try:
        assert [(r["pid"], r["place"]) for r in old.running()] == [(4242, None)]
    finally:
        old.close()
    Ledger(str(tmp_path)).close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        assert "place" in {r[1] for r in db.execute("PRAGMA table_info(running)")}
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
