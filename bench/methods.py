"""How each compared method runs the same trials: sweeper (and its variants), a naive
spawn loop, ``multiprocessing.Pool(maxtasksperchild=1)``, joblib/loky and Ray Tune.

Every runner has the signature ``run(fn, points, k, timeout, **extra) -> dict`` and
returns ``{"wall_s", "trials": [...], "n_ok", ...}`` or ``{"na": reason}`` when the method
(or an option of it) is not available. Each trial record holds what the trial returned
(``t_start``, ``t_end``, ``pid``, ``slot``) plus, where the method tells,
``started_at`` (epoch seconds when the parent started its process) and ``duration_s``.

Only the standard library at the top: spawned children import this module.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import tempfile
import time
import traceback
from collections import deque
from datetime import datetime
from typing import Any, Callable

Points = list[dict[str, Any]]
TIMING_KEYS = ("t_start", "t_end", "pid", "slot", "accuracy", "sklearn")


def _record(value: Any, **extra: Any) -> dict[str, Any]:
    out = {k: value.get(k) for k in TIMING_KEYS if isinstance(value, dict) and k in value}
    out.update(extra)
    return out


class ByName:
    """``module:function``, imported where it is first called (in the child), not here.

    The baselines do not need the user's module in their parent, and the import would
    only cost the driver seconds before its clock starts. A child pays the import at the
    same point as with a function pickled by reference (before ``fn`` starts).
    """

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, params: dict) -> Any:
        import importlib

        return getattr(importlib.import_module(self.module), self.name)(params)


# -- sweeper -------------------------------------------------------------------------------

def run_sweeper(fn: Callable, points: Points, k: int, timeout: float, grid: dict | None = None,
                **options: Any) -> dict[str, Any]:
    """``sweeper.sweep`` with default options plus ``options`` (e.g. prefetch=False)."""
    import sweeper

    with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as out:
        t0 = time.perf_counter()
        try:
            frame = sweeper.sweep(fn, grid if grid is not None else points, workers=k, out=out,
                                  name="bench", progress=False, fresh=True, **options)
        except sweeper.SweepError as exc:
            if "unknown option" in str(exc) and options:
                return {"na": f"this sweeper has no option {', '.join(options)} ({exc})"}
            raise
        wall = time.perf_counter() - t0
        fired = _watchdog_fired(out)
    trials = []
    for row in frame.to_dict("records"):
        started = row.get("started_at")
        trials.append(_record(row, status=row.get("status"), started_at=_epoch(started),
                              duration_s=_float(row.get("duration_s")),
                              slot=_int(row.get("slot", -1))))
    n_ok = sum(1 for t in trials if t["status"] == "ok")
    return {"wall_s": wall, "trials": trials, "n_ok": n_ok, "watchdog_fired": fired,
            "slot_env": any(t.get("slot", -1) >= 0 for t in trials)}


def run_sweeper_cli(fn: Callable, points: Points, k: int, timeout: float, grid: dict | None = None,
                    **_: Any) -> dict[str, Any]:
    """``python -m sweeper grid.py --workers k``, as a user types it: a grid file that
    imports the trial's module at its top (its TensorFlow with it) and names the same grid.
    The clock runs from just before the command to its exit: the grid's read, the fork
    server's import and every trial."""
    import csv
    import os
    import subprocess
    import sys

    module, name = getattr(fn, "module", None) or fn.__module__, getattr(fn, "name", None) or fn.__name__
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as out:
        path = os.path.join(out, "bench.py")
        with open(path, "w") as f:
            f.write(f"import sys\nsys.path.insert(0, {here!r})\nfrom {module} import {name} as train\n"
                    f"grid = {grid if grid is not None else points!r}\n")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "sweeper", path, "--workers", str(k), "--out", out, "--quiet"],
                              cwd=os.path.dirname(here), capture_output=True, text=True,
                              timeout=timeout * max(1, len(points)) + 300)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"sweeper exited {done.returncode}: {done.stderr[-300:]}")
        with open(os.path.join(out, "bench", "results.csv")) as f:
            rows = list(csv.DictReader(f))
        fired = _watchdog_fired(out)
    trials = [_record({k: _float(v) for k, v in row.items() if k in TIMING_KEYS}, status=row.get("status"),
                      started_at=_epoch(row.get("started_at")), duration_s=_float(row.get("duration_s")),
                      slot=_int(_float(row.get("slot")))) for row in rows]
    return {"wall_s": wall, "trials": trials, "n_ok": sum(t["status"] == "ok" for t in trials),
            "watchdog_fired": fired, "slot_env": any(t.get("slot", -1) >= 0 for t in trials)}


def _watchdog_fired(out: str) -> int:
    """Trials whose log says the fork watchdog fired (it writes its line there)."""
    import glob

    from sweeper.backends.local import WATCHDOG_MARK

    fired = 0
    for path in glob.glob(f"{out}/*/trials/*/log.txt"):
        with open(path, errors="replace") as f:
            fired += WATCHDOG_MARK in f.read()
    return fired


def _epoch(iso: Any) -> float | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _float(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _int(x: Any) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return -1


# -- naive: k spawned Processes, one per trial ---------------------------------------------

def _naive_child(fn: Callable, params: dict, conn: Any) -> None:
    try:
        conn.send(("ok", fn(params)))
    except BaseException as exc:  # noqa: BLE001
        conn.send(("error", repr(exc)))
    conn.close()


def run_naive(fn: Callable, points: Points, k: int, timeout: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    pending = deque(enumerate(points))
    running: dict[int, tuple] = {}  # sentinel -> (process, conn, index, start epoch, start perf)
    trials: list[dict | None] = [None] * len(points)
    t0 = time.perf_counter()
    deadline = t0 + timeout * max(1, len(points))
    try:
        while pending or running:
            while pending and len(running) < k:
                i, p = pending.popleft()
                here, there = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_naive_child, args=(fn, p, there))
                started, perf = time.time(), time.perf_counter()
                proc.start()
                there.close()
                running[proc.sentinel] = (proc, here, i, started, perf)
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError("naive loop ran past its deadline")
            # Results are small (well under a pipe's buffer), so waiting for exits is enough.
            for s in multiprocessing.connection.wait(list(running), timeout=left):
                proc, here, i, started, perf = running.pop(s)
                msg = here.recv() if here.poll() else ("error", f"exit code {proc.exitcode}")
                end = time.perf_counter()
                proc.join()
                here.close()
                trials[i] = _record(msg[1], status="ok" if msg[0] == "ok" else "error",
                                    started_at=started, duration_s=end - perf)
    finally:
        for proc, here, *_ in running.values():
            proc.kill()
            proc.join(5)
    wall = time.perf_counter() - t0
    done = [t for t in trials if t is not None]
    return {"wall_s": wall, "trials": done, "n_ok": sum(t["status"] == "ok" for t in done)}


# -- pool: multiprocessing.Pool(k, maxtasksperchild=1) -------------------------------------

def _pool_call(job: tuple[Callable, dict]) -> tuple[str, Any]:
    fn, params = job
    try:
        return "ok", fn(params)
    except BaseException as exc:  # noqa: BLE001
        return "error", repr(exc)


def run_pool(fn: Callable, points: Points, k: int, timeout: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    trials = []
    t0 = time.perf_counter()
    pool = ctx.Pool(k, maxtasksperchild=1)
    try:
        it = pool.imap_unordered(_pool_call, [(fn, p) for p in points])
        for _ in points:
            kind, value = it.next(timeout)
            trials.append(_record(value, status=kind))
        wall = time.perf_counter() - t0
        pool.close()
        pool.join()
    finally:
        pool.terminate()
    return {"wall_s": wall, "trials": trials, "n_ok": sum(t["status"] == "ok" for t in trials)}


# -- loky: joblib's reusable executor; workers are reused --------------------------------

def run_loky(fn: Callable, points: Points, k: int, timeout: float) -> dict[str, Any]:
    """loky's executor itself, not ``joblib.Parallel``: with ``n_jobs=1`` Parallel runs every
    call in the calling process (no worker at all), which would not be a rival's figure."""
    from joblib.externals.loky import get_reusable_executor

    t0 = time.perf_counter()
    ex = get_reusable_executor(max_workers=k, timeout=timeout)
    try:
        out = list(ex.map(_pool_call, [(fn, p) for p in points], timeout=timeout * max(1, len(points))))
        wall = time.perf_counter() - t0
    finally:
        try:
            ex.shutdown(wait=True, kill_workers=True)
        except Exception:  # noqa: BLE001 - the driver kills leftovers anyway
            traceback.print_exc()
    trials = [_record(v, status=kind) for kind, v in out]
    return {"wall_s": wall, "trials": trials, "n_ok": sum(t["status"] == "ok" for t in trials)}


# -- Ray Tune (only when installed) ----------------------------------------------------------

def run_ray(fn: Callable, points: Points, k: int, timeout: float) -> dict[str, Any]:
    try:
        import ray
        from ray import tune
    except ImportError:
        return {"na": "not installed"}
    # Untested here: Ray Tune (pip install "ray[tune]") was not installed where this was written.
    ray.init(num_cpus=k, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        def trainable(config: dict) -> dict:
            return _pool_call((fn, config["p"]))[1]

        with tempfile.TemporaryDirectory(prefix="ray-bench-") as out:
            tuner = tune.Tuner(
                tune.with_resources(trainable, {"cpu": 1}),
                param_space={"p": tune.grid_search(points)},
                tune_config=tune.TuneConfig(reuse_actors=False, max_concurrent_trials=k),
                run_config=tune.RunConfig(storage_path=out, verbose=0),
            )
            t0 = time.perf_counter()
            grid = tuner.fit()
            wall = time.perf_counter() - t0
        trials = [_record(r.metrics or {}, status="ok" if r.error is None else "error") for r in grid]
    finally:
        ray.shutdown()
    return {"wall_s": wall, "trials": trials, "n_ok": sum(t["status"] == "ok" for t in trials)}


RUNNERS: dict[str, tuple[Callable, dict[str, Any]]] = {
    "sweeper": (run_sweeper, {}),
    "sweeper --no-prefetch": (run_sweeper, {"prefetch": False}),
    "sweeper spawn": (run_sweeper, {"start_method": "spawn"}),
    "sweeper cli": (run_sweeper_cli, {}),
    "naive": (run_naive, {}),
    "pool": (run_pool, {}),
    "loky": (run_loky, {}),
    "ray tune": (run_ray, {}),
}
