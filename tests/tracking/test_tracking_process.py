"""The trackers run in a process of their own, not in the sweep's: every trial still reaches
TensorBoard and MLflow by the end, the sweep's interpreter never imports either, and the
process ends with the sweep, however the sweep ends. Timing belongs in bench/trackers.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time

import psutil
import pytest

import sweeper
import sweep_fns
from conftest import HERE, ROOT, run_cli_here, write_grid

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

from tool_readers import local_uri, mlflow_runs, tb_sessions  # noqa: E402  (after the skips)


def _writers(folder) -> set[int]:
    """The pids that wrote the TensorBoard event files (``events.out.tfevents.<t>.<host>.<pid>.<n><suffix>``)."""
    pids = set()
    for _, _, files in os.walk(os.path.join(folder, "tensorboard")):
        pids.update(int(f.split(".")[-3]) for f in files if f.startswith("events.out.tfevents."))
    return pids


def _trackers_process(sweep_pid: int, timeout: float = 120) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in psutil.Process(sweep_pid).children():
            try:
                if "sweeper.tracking.process" in " ".join(p.cmdline()):
                    return p
            except psutil.Error:
                continue
        time.sleep(0.1)
    raise AssertionError("no trackers' process started")


@contextlib.contextmanager
def _blocked_sweep(tmp_path, name):
    """A CLI sweep with both trackers whose two trials wait for a release file, given once
    MLflow shows both running with their parameters (which the trackers' process, reading
    a ledger that has none for a running trial, asked the sweep for); released and ended
    on the way out, whatever happened."""
    release = tmp_path / "release"
    grid = write_grid(tmp_path, "from sweep_fns import wait_for_file as train\n"
                                f"grid = {{'x': [1, 2], 'release': [{str(release)!r}]}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path), "--name", name,
                             "--workers", "2", "--tensorboard", "--mlflow"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    family = []
    try:
        uri, deadline, running = local_uri(tmp_path / name), time.monotonic() + 120, []
        while time.monotonic() < deadline and proc.poll() is None and len(running) < 2:
            with contextlib.suppress(psutil.Error):
                family = psutil.Process(proc.pid).children(recursive=True) or family
            if os.path.exists(tmp_path / name / "mlflow.db"):
                try:
                    running = [r for r in mlflow_runs(uri, name)[1]  # a run is made, then its parameters logged
                               if r.info.status == "RUNNING" and "x" in r.data.params]
                except Exception:  # the store is being created
                    running = []
            time.sleep(0.2)
        assert len(running) == 2, proc.poll()
        assert sorted(r.data.params["x"] for r in running) == ["1", "2"]
        yield proc, release
    finally:
        release.touch()
        if proc.returncode is None:  # not already waited for by the test
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        _, alive = psutil.wait_procs(family, timeout=60)
        for p in alive:
            p.kill()


def test_every_trial_reaches_both_trackers_and_the_sweep_never_imports_them_nor_a_framework(tmp_path):
    """Hundreds of instant trials: each one in TensorBoard's files and in MLflow's store by
    the end of the sweep, sent by another process than the sweep's, which imports neither,
    nor any framework for its trackers (TensorFlow, PyTorch, JAX, Keras: once a test of its own
    in test_tracking.py, whose sweep in an interpreter of its own was this one's, smaller)."""
    n = 300
    code = ("import os, sys, sweeper, sweep_fns\n"
            f"df = sweeper.sweep(sweep_fns.const, {{'x': list(range({n}))}}, tensorboard=True, mlflow=True, "
            f"out={str(tmp_path)!r}, name='p', progress=False)\n"
            "print(int((df.status == 'ok').sum()))\n"
            "print(os.getpid())\n"
            "print(sorted(m for m in ('tensorboard', 'mlflow', 'sqlalchemy', 'google.protobuf') if m in sys.modules))\n"
            "print(sorted(m for m in ('tensorflow', 'torch', 'jax', 'keras') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ok, pid, imported, frameworks = proc.stdout.strip().splitlines()[-4:]
    assert int(ok) == n
    assert imported == "[]"  # the sweep's interpreter: no TensorBoard, no MLflow
    assert frameworks == "[]"  # nor a framework
    folder = tmp_path / "p"
    writers = _writers(folder)
    assert writers and int(pid) not in writers  # written from elsewhere
    _, sessions = tb_sessions(folder)
    assert len(sessions) == n
    assert {s["status"] for s in sessions.values()} == {"STATUS_SUCCESS"}
    assert sorted(s["hparams"]["x"] for s in sessions.values()) == list(range(n))
    parents, runs = mlflow_runs(local_uri(folder), "p")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(runs) == n and {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(int(r.data.params["x"]) for r in runs) == list(range(n))
    assert all(r.data.metrics["value"] == 1.0 for r in runs)


def test_the_trackers_process_yields_to_the_trials_and_ends_with_a_killed_sweep(tmp_path):
    with _blocked_sweep(tmp_path, "k") as (proc, release):
        trackers = _trackers_process(proc.pid)
        if hasattr(os, "SCHED_IDLE"):  # Linux: an idle task, which the trials' wake-ups always preempt
            assert os.sched_getscheduler(trackers.pid) == os.SCHED_IDLE
        else:
            assert trackers.nice() >= 19
        proc.kill()  # SIGKILL: the sweep says nothing to anyone
        gone, alive = psutil.wait_procs([trackers], timeout=60)
        assert not alive, "the trackers' process outlived the sweep"


def test_a_trackers_process_that_dies_is_one_warning_and_the_sweep_goes_on(tmp_path):
    with _blocked_sweep(tmp_path, "d") as (proc, release):
        _trackers_process(proc.pid).kill()
        release.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    warnings = [line for line in out.splitlines() if "warning" in line]
    assert len(warnings) == 1, out
    folder = tmp_path / "d"
    assert "the trackers' process was killed by signal 9" in warnings[0]  # said as it went, or at the end
    assert warnings[0].endswith(f"python -m sweeper export {folder} --tensorboard --mlflow")
    # the export it names, run here (not in an interpreter importing MLflow again)
    assert run_cli_here("export", str(folder), "--tensorboard", "--mlflow").returncode == 0
    _, runs = mlflow_runs(local_uri(folder), "d")
    assert sorted((r.data.params["x"], r.info.status) for r in runs) == [("1", "FINISHED"), ("2", "FINISHED")]


class _Said(logging.Handler):
    """sweeper's lines, as an application's own handler on its logger gets them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _sweep_saying(tmp_path, name: str) -> tuple[list[str], object]:
    """20 instant trials with MLflow through ``sweep()``: sweeper's warnings, as an
    application's own handler on its logger gets them, and the table."""
    said = _Said()
    logging.getLogger("sweeper").addHandler(said)
    try:
        df = sweeper.sweep(sweep_fns.const, {"x": list(range(20))}, mlflow=True, out=str(tmp_path), name=name,
                           progress=False)
    finally:
        logging.getLogger("sweeper").removeHandler(said)
    assert (df.status == "ok").all()
    return said.lines, df


def test_what_is_not_sent_when_the_wait_ends_is_one_line_naming_the_export_that_finishes_it(tmp_path, monkeypatch):
    import sweeper.tracking.process as process

    monkeypatch.setattr(process, "END_WAIT_S", 0.0)  # the end's wait is over before MLflow is imported
    warnings, _ = _sweep_saying(tmp_path, "w")
    folder = tmp_path / "w"
    assert len(warnings) == 1, warnings
    assert " of 20 trials sent" in warnings[0] and "no headway in 0s" in warnings[0]
    assert warnings[0].endswith(f"finish it with: python -m sweeper export {folder} --mlflow")
    assert not [f for f in os.listdir(folder) if f.endswith(".part")]  # nothing left half made
    proc = run_cli_here("export", str(folder), "--mlflow")  # the export it names, run here
    assert proc.returncode == 0, proc.stderr
    parents, runs = mlflow_runs(local_uri(folder), "w")
    assert len(parents) == 1 and len(runs) == 20 and {r.info.status for r in runs} == {"FINISHED"}


def test_the_end_waits_for_a_trackers_process_that_still_works_however_long(tmp_path, monkeypatch):
    """The end's wait runs out only while the trackers' process makes no headway: one that is
    still importing MLflow and sending (its CPU time grows) is waited for, past the patience.
    A wait of a fixed minute left MLflow's runs RUNNING in this suite beside two CPU burners."""
    import sweeper.tracking.process as process

    monkeypatch.setattr(process, "END_WAIT_S", 2.0)  # under MLflow's import alone (2.3 s of a core)
    monkeypatch.setattr(process, "WORKING_CPU_S", 0.05)  # a twentieth of a core over that: still working
    warnings, _ = _sweep_saying(tmp_path, "s")
    assert warnings == []
    parents, runs = mlflow_runs(local_uri(tmp_path / "s"), "s")
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert sorted((int(r.data.params["x"]), r.info.status) for r in runs) == [(x, "FINISHED") for x in range(20)]


@contextlib.contextmanager
def _server_that_never_answers():
    """A tracking server that says it is up (``/health``) and then never answers: the
    trackers' process cannot finish sending, however fast the machine is, until the test
    ends (an event, not a time)."""
    import http.server
    import threading

    done = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server's name
            if self.path.rstrip("/").endswith("/health"):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"OK")
                return
            done.wait(300)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        done.set()
        server.shutdown()
        server.server_close()


def test_ctrl_c_during_the_end_wait_ends_it(tmp_path):
    """Ctrl-C while the sweep waits for its trackers at its end (a server that never answers
    holds them up): the wait ends, in one line naming the export that finishes what was
    not sent."""
    grid = write_grid(tmp_path, "from sweep_fns import const as train\ngrid = {'x': [1]}\n")
    with _server_that_never_answers() as uri:
        code = ("import signal, threading, sys\n"
                "import sweeper.tracking.process as p\n"
                "p.END_WAIT_S = 600.0\n"
                "close = p.TrackerProcess.close\n"
                "def ctrl_c_in_the_wait(self, state):\n"
                "    threading.Timer(0.5, signal.raise_signal, [signal.SIGINT]).start()\n"
                "    close(self, state)\n"
                "p.TrackerProcess.close = ctrl_c_in_the_wait\n"
                "from sweeper.front.cli import main\n"
                f"sys.exit(main({[grid, '--out', str(tmp_path), '--name', 'c', '--mlflow', uri]!r}))\n")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT]), "MLFLOW_HTTP_REQUEST_TIMEOUT": "600",
               "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [line for line in proc.stdout.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "ended by Ctrl-C" in warnings[0], proc.stdout
    assert warnings[0].endswith(f"python -m sweeper export {tmp_path / 'c'} --mlflow {uri}")


@pytest.mark.unit
def test_what_a_killed_trackers_process_left_half_made_is_removed(tmp_path):
    # the local MLflow store is made in mlflow.db.<pid>.<thread>.part (mlflow_runs): the end
    # of the wait removed only mlflow.db.<pid>.part, so a trackers' process killed while it
    # made the store left its part file (seen: the .part test above, once, on a busy machine)
    from sweeper.tracking.process import TrackerProcess

    (tmp_path / "tensorboard").mkdir()
    left = [tmp_path / "mlflow.db.4242.139653509265088.part", tmp_path / "mlflow.db.4242.part",
            tmp_path / "tensorboard" / "state.json.tmp4242",
            tmp_path / "optuna.journal.lock", tmp_path / "optuna.journal.lock0c5e.rename"]  # Optuna's, mid-write
    kept = [tmp_path / "mlflow.db.4243.139653509265088.part", tmp_path / "mlflow.db", tmp_path / "results.csv",
            tmp_path / "optuna.journal"]
    for path in left + kept:
        path.write_text("")
    process = TrackerProcess.__new__(TrackerProcess)  # the tidying alone: no process started
    process.folder = str(tmp_path)
    process._tidy(4242)
    assert [p.name for p in left if p.exists()] == [] and all(p.exists() for p in kept)
