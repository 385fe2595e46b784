"""Reading a grid file (``python -m sweeper grid.py``) without importing it in the parent.

A grid file usually imports TensorFlow at its top. Importing it in the parent would cost
seconds and hundreds of MB for the whole sweep, and a stray ``list_physical_devices`` at
its top would initialise CUDA there and hold GPU memory until the sweep ends. So a
worker process (a fork of the sweep's fork server once that has imported the framework,
else a spawned one) imports it, checks it, expands the grid into plain points and
sends back only those and the options: JSON-like data. That process then ends: its
import ran before any trial's seed was set (what the file draws at its top would be
nobody's), and no GPU is visible in it. Each trial imports the file again, after its
seed. What that process does with the file is :mod:`sweeper.child.gridcheck`.
"""

from __future__ import annotations

import ast
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.protocol import GridRead, GridRefused

#: Seconds a grid file may take to import (TensorFlow alone takes a few).
IMPORT_TIMEOUT = 300.0


@dataclass(frozen=True)
class GridFile:
    path: str
    points: list[dict[str, Any]]
    options: dict[str, Any]
    attr: str = "train"  #: or "command"
    shell: bool = False
    what: str = ""  #: what the sweep runs, in words (:func:`sweeper.model.target.describe`)
    space: Any = None  #: ``space`` without ``samples``: searched (``search``)
    modules: tuple[str, ...] = ()  #: what importing the file imported (:mod:`sweeper.system.modules`)


def read_data(path: str, seed: int | None) -> GridFile:
    """A grid given as data (``--grid grid.json`` or ``.yaml``) for ``--command``."""
    from sweeper.model.definition import ABSENT, shape

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
    spaced = isinstance(data, dict) and "space" in data
    points, _ = shape(grid=ABSENT if spaced else data, space=data["space"] if spaced else ABSENT,
                      samples=data.get("samples", 0) if spaced else None, seed=seed or 0,
                      where=os.path.basename(path))
    return GridFile(path, [dict(p) for p in points or ()], {}, "command")


def read(path: str, seed: int | None, tag: str, server: Any = None) -> GridFile:
    """Check and expand a grid file in a worker process of the sweep ``tag`` (no GPU
    visible in it), which ends once it has told. Raises SweepError. With the sweep's fork
    server (``server``, started before: :func:`sweeper.backends.local.fork.early_server`),
    that process is a fork of it once it has imported, so the framework the file imports
    is imported once before the first trial, not twice side by side; a server that fails
    or dies means a spawn process, as for the trials."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise SweepError(f"grid file {path} does not exist; check the path (e.g. experiments/digits_mlp.py)")
    if not path.endswith(".py"):
        raise SweepError(f"grid file {path} is not a .py file; give a Python file that defines train and grid")
    from sweeper.backends.local.fork import SERVER_WAIT_S

    if server is not None and server.settle(SERVER_WAIT_S):
        message = _ask(path, seed, tag, server)
        if message is not None:
            return _grid(path, message, server.preload)
    message = _ask(path, seed, tag, None)
    assert message is not None
    return _grid(path, message, [])


def _grid(path: str, message: GridRead, preloaded: list[str]) -> GridFile:
    modules = list(dict.fromkeys([*preloaded, *message.modules]))  # a fork imported only what the server had not
    return GridFile(path, message.points, message.options, message.attr, message.shell, message.what,
                    message.space, tuple(modules))


def _ask(path: str, seed: int | None, tag: str, server: Any) -> GridRead | None:
    """What the reader said: a fork of ``server``, or a spawn process where it is None.
    None where the fork stopped getting on before it told (the server is then failed)."""
    import multiprocessing

    from sweeper.backends.local import fork, join, spawn
    from sweeper.child.bootstrap import Boot
    from sweeper.model import contract

    env = {"CUDA_VISIBLE_DEVICES": "-1", contract.SWEEP: tag}
    boot = Boot(os.getpid(), None, env, check_ppid=server is None, inspect=(path, seed))
    ctx = multiprocessing.get_context("spawn" if server is None else "forkserver")
    reader = spawn(ctx, boot, env, "sweeper-grid")
    reader.tag = tag
    try:
        deadline = time.monotonic() + IMPORT_TIMEOUT
        cpu_s, io = 0.0, None
        while not reader.conn.poll(min(fork.FORK_WATCHDOG_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                raise SweepError(f"importing {path} took over {IMPORT_TIMEOUT:.0f} s; "
                                 "does it wait for input or train at import time? Move that into train")
            if server is not None:  # a fork that stopped computing before it told: deadlocked
                stuck, cpu_s, io = fork.stalled(reader.process.pid, cpu_s, io, fork.FORK_WATCHDOG_S)
                if stuck:
                    server.fail(f"the fork that read {os.path.basename(path)} stopped getting on "
                                "(a lock held when the fork server forked?)")
                    return None
        try:
            message = reader.conn.recv()
        except EOFError:
            join(reader.process, reader.exit_fd, 5.0)
            raise SweepError(
                f"importing {path} killed its process (exit code {reader.process.exitcode}); "
                "run python on it directly to see why"
            ) from None
        if isinstance(message, GridRefused):
            raise SweepError(message.error)
        if not isinstance(message, GridRead):
            raise SweepError(f"checking {path} failed: its process said {message!r}")
    finally:
        reader.close()
    return message


#: Names through which a grid file could set ``options`` without an assignment that shows it.
_HIDDEN = frozenset({"*", "globals", "vars", "locals", "exec", "eval", "setattr", "__import__", "__getattr__",
                     "__dict__", "modules"})
#: A key of a plain ``options`` whose value is no literal: known to be there, not what it holds.
UNKNOWN = object()


def plain_options(path: str) -> dict[str, Any] | None:
    """What a grid file's ``options`` hold, read from its source without importing it, where
    the source says it plainly: ``{}`` when it never names ``options``; the dict when its
    only mentions are ``options = {...}`` at its top with literal keys (a value that is no
    literal is :data:`UNKNOWN`); None when it cannot tell (``options`` built, changed,
    imported, or a name such as ``globals`` that could set it). For what the CLI checks
    before the import; the import then decides."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    found: dict[str, Any] = {}
    plain = [n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "options" and isinstance(n.value, ast.Dict)]
    for node in plain:
        assert isinstance(node.value, ast.Dict)
        found = {}  # the last one holds
        for k, v in zip(node.value.keys, node.value.values):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                return None
            try:
                found[k.value] = ast.literal_eval(v)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                found[k.value] = UNKNOWN
    shown = {id(n.targets[0]) for n in plain}
    for each in ast.walk(tree):
        for attr in ("id", "attr", "name", "asname", "arg", "rest"):
            named = getattr(each, attr, None)
            if named in _HIDDEN or (named == "options" and id(each) not in shown):
                return None
    return found
