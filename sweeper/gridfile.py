"""Reading a grid file (``python -m sweeper grid.py``) without importing it in the parent.

A grid file usually imports TensorFlow at its top. Importing it in the parent would cost
seconds and hundreds of MB for the whole sweep, and a stray ``list_physical_devices`` at
its top would initialise CUDA there and hold GPU memory until the sweep ends. So a
spawned worker process imports it, checks it, expands the grid into plain points and
sends back only those and the options: JSON-like data. That process is started as the
first trial's would be (the slot's GPU and cap, the import hook), and then stands by to
run that trial: the file is imported once per CLI run, not twice.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .errors import SweepError
from .protocol import GridRead, GridRefused

if TYPE_CHECKING:
    from .backends.local import Spare
    from .target import FileTarget


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
    space: Any = None  #: ``space`` without ``samples``: searched (``search``)
    modules: tuple[str, ...] = ()  #: what importing the file imported (:mod:`sweeper.modules`)


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


def read(path: str, seed: int | None, env: dict[str, str] | None = None) -> tuple[GridFile, "Spare"]:
    """Check and expand a grid file in a worker process started with ``env`` (the
    environment of the slot its first trial will likely use; by default no GPU visible).

    Returns the grid and that process, which has the file imported and stands by: the
    local backend runs a trial in it when a slot with the same environment is free, so
    a CLI run pays the file's imports (TensorFlow's seconds) once. Whoever gets it ends
    it if it is not taken (``Spare.close``). Raises SweepError.
    """
    import multiprocessing

    from .backends.local import join, new_tag, spawn
    from .child.bootstrap import Boot
    from .procs import SWEEP_VAR

    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise SweepError(f"grid file {path} does not exist; check the path (e.g. experiments/digits_mlp.py)")
    if not path.endswith(".py"):
        raise SweepError(f"grid file {path} is not a .py file; give a Python file that defines train and grid")
    tag = new_tag()
    env = {**(env or {"CUDA_VISIBLE_DEVICES": "-1"}), SWEEP_VAR: tag}
    boot = Boot(os.getpid(), None, env, inspect=(path, seed))
    spare = spawn(multiprocessing.get_context("spawn"), boot, env, "sweeper-grid")
    spare.tag = tag
    try:
        if not spare.conn.poll(IMPORT_TIMEOUT):
            raise SweepError(f"importing {path} took over {IMPORT_TIMEOUT:.0f} s; "
                             "does it wait for input or train at import time? Move that into train")
        try:
            message = spare.conn.recv()
        except EOFError:
            join(spare.process, spare.exit_fd, 5.0)
            raise SweepError(
                f"importing {path} killed its process (exit code {spare.process.exitcode}); "
                "run python on it directly to see why"
            ) from None
        if isinstance(message, GridRefused):
            raise SweepError(message.error)
        if not isinstance(message, GridRead):
            raise SweepError(f"checking {path} failed: its process said {message!r}")
    except BaseException:
        spare.close()
        raise
    grid = GridFile(path, message.points, message.options, message.attr, message.shell, message.what,
                    message.space, tuple(message.modules))
    return grid, spare


def inspect(path: str, seed: int | None, send: Callable[[Any], Any]) -> "FileTarget | None":
    """In the CLI's first process: import, check, expand; send the grid as data, or one
    error line. The target to load ``train`` from, or None when the file is refused."""
    from .target import FileTarget

    try:
        data = _examine(path, seed)
    except SweepError as exc:
        send(GridRefused(str(exc)))
        return None
    except BaseException as exc:  # noqa: BLE001 - anything else is a bug to report plainly
        send(GridRefused(f"checking {path} failed: {_last_line(exc)}"))
        return None
    send(GridRead(**data))
    return FileTarget(path, data["attr"], data["shell"])


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[-1]


def _examine(path: str, seed: int | None) -> dict[str, Any]:
    import sys

    from .grid import Points, check_not_empty, expand, sample
    from .modules import imported_since
    from .options import Options
    from .target import check_signature, describe, load_file

    name = os.path.basename(path)
    before = list(sys.modules)
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
    for key in ("search", "trials", "prune"):  # a search's settings, also as top-level names
        if hasattr(module, key):
            options = {**options, key: getattr(module, key)}
    Options.build(options, where=name)
    if seed is None:
        seed = options.get("seed", 0)
    if hasattr(module, "grid") and hasattr(module, "space"):
        raise SweepError(f"{name} defines both grid and space; keep one (grid for every combination, "
                         "space with samples = N for random search)")
    space = None
    if hasattr(module, "grid"):
        check_not_empty(module.grid)
        points = expand(module.grid)
    elif hasattr(module, "space") and (options.get("search") is not None or not hasattr(module, "samples")):
        # searched (its checks are the search's, in the parent); without search = ..., the parent says what is missing
        points, space = Points(), (dict(module.space) if isinstance(module.space, dict) else module.space)
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
        command.check(points or [dict.fromkeys(space or {}, 0)])
    return {"points": [dict(p) for p in points], "options": dict(options), "space": space,
            "attr": "train" if train is not None else "command", "shell": shell,
            "what": describe(train if train is not None else command), "modules": imported_since(before)}

