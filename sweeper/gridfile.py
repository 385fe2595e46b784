"""Reading a grid file (``python -m sweeper grid.py``) without importing it in the parent.

A grid file usually imports TensorFlow at its top. Importing it in the parent would cost
seconds and hundreds of MB for the whole sweep, and a stray ``list_physical_devices`` at
its top would initialise CUDA there and hold GPU memory until the sweep ends. So a
short-lived spawned process (with no GPU visible) imports it, checks it, expands the grid
into plain points and sends back only those and the options: JSON-like data.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any

from .errors import SweepError


#: Seconds a grid file may take to import (TensorFlow alone takes a few).
IMPORT_TIMEOUT = 300.0


@dataclass(frozen=True)
class GridFile:
    path: str
    points: list[dict[str, Any]]
    options: dict[str, Any]
    attr: str = "train"  #: or "command"
    shell: bool = False
    what: str = ""  #: what the sweep runs, in words (:func:`sweeper.target.describe`)


def read_data(path: str, seed: int | None) -> GridFile:
    """A grid given as data (``--grid grid.json`` or ``.yaml``) for ``--command``."""
    from .grid import expand, sample

    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise SweepError(f"grid file {path} does not exist; check the path")
    with open(path) as f:
        raw = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise SweepError(f"{path} is YAML, which needs PyYAML: pip install pyyaml (or give JSON)") from None
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise SweepError(f"{path} is not valid YAML ({str(exc).splitlines()[0]}); fix it") from None
    elif path.endswith(".json"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SweepError(f"{path} is not valid JSON ({exc}); fix it") from None
    else:
        raise SweepError(f"--grid {path}: give a .json or .yaml file holding the grid")
    if isinstance(data, dict) and "space" in data:
        points = sample(data["space"], data.get("samples", 0), seed=seed or 0)
    else:
        points = expand(data)
    return GridFile(path, [dict(p) for p in points], {}, "command")


def read(path: str, seed: int | None) -> GridFile:
    """Check and expand a grid file in a throwaway process. Raises SweepError."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise SweepError(f"grid file {path} does not exist; check the path (e.g. experiments/digits_mlp.py)")
    if not path.endswith(".py"):
        raise SweepError(f"grid file {path} is not a .py file; give a Python file that defines train and grid")
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    env = {"CUDA_VISIBLE_DEVICES": "-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        proc = ctx.Process(target=_inspect, args=(path, seed, there), daemon=True)
        proc.start()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    there.close()
    try:
        if not here.poll(IMPORT_TIMEOUT):
            proc.kill()
            raise SweepError(f"importing {path} took over {IMPORT_TIMEOUT:.0f} s; "
                             "does it wait for input or train at import time? Move that into train")
        kind, payload = here.recv()
    except EOFError:
        proc.join()
        raise SweepError(
            f"importing {path} killed its process (exit code {proc.exitcode}); "
            "run python on it directly to see why"
        ) from None
    finally:
        proc.join()
    if kind == "error":
        raise SweepError(payload)
    return GridFile(path, payload["points"], payload["options"], payload["attr"], payload["shell"],
                    payload["what"])


def _inspect(path: str, seed: int | None, conn: Any) -> None:
    """In the throwaway process: import, check, expand; reply with data or one error line."""
    log = tempfile.TemporaryFile()
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        conn.send(("ok", _examine(path, seed)))
    except SweepError as exc:
        conn.send(("error", str(exc)))
    except BaseException as exc:  # noqa: BLE001 - anything else is a bug to report plainly
        conn.send(("error", f"checking {path} failed: {_last_line(exc)}"))


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[-1]


def _examine(path: str, seed: int | None) -> dict[str, Any]:
    from .grid import check_not_empty, expand, sample
    from .options import Options
    from .target import check_signature, describe, load_file

    name = os.path.basename(path)
    try:
        module = load_file(path)
    except SyntaxError as exc:
        raise SweepError(f"{name} is not valid Python: {exc.msg} (line {exc.lineno}); fix it and run again") from None
    except BaseException as exc:  # noqa: BLE001
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == path), "")
        raise SweepError(f"{name} raised on import: {_last_line(exc)} ({where or 'in a module it imports'}); "
                         "fix it and run again") from None
    train = getattr(module, "train", None)
    command = getattr(module, "command", None)
    shell = bool(getattr(module, "shell", False))
    if train is None and command is None:
        raise SweepError(f"{name} defines no train; add def train(params): ... returning a dict of metrics "
                         "(or command = 'python train.py --lr={lr}')")
    if train is not None and command is not None:
        raise SweepError(f"{name} defines both train and command; keep one")
    if train is not None:
        check_signature(train, f"{name}")
    options = getattr(module, "options", {}) or {}
    if not isinstance(options, dict):
        raise SweepError(f"options in {name} is a {type(options).__name__}; make it a dict, e.g. options = {{'workers': 2}}")
    Options.build(options, where=name)
    if seed is None:
        seed = options.get("seed", 0)
    if hasattr(module, "grid") and hasattr(module, "space"):
        raise SweepError(f"{name} defines both grid and space; keep one (grid for every combination, "
                         "space with samples = N for random search)")
    if hasattr(module, "grid"):
        check_not_empty(module.grid)
        points = expand(module.grid)
    elif hasattr(module, "space"):
        samples = getattr(module, "samples", None)
        if not isinstance(samples, int) or isinstance(samples, bool):
            raise SweepError(f"{name} defines space but no samples = N; add e.g. samples = 20")
        points = sample(module.space, samples, seed=seed)
    else:
        raise SweepError(f"{name} defines no grid; add e.g. grid = {{'lr': [0.01, 0.001]}} "
                         "(or space = {...} with samples = N)")
    if command is not None:
        from .command import Command

        command = Command.of(command, shell)
        command.check(points)
    return {"points": [dict(p) for p in points], "options": dict(options),
            "attr": "train" if train is not None else "command", "shell": shell,
            "what": describe(train if train is not None else command)}

