"""The child half of reading a grid file: in the CLI's first trial process, import the
file, check it and expand its grid, and send the parent plain data or one error line
(the parent half, which starts this process and waits for it, is :mod:`sweeper.front.gridfile`)."""

from __future__ import annotations

import os
import traceback
from typing import TYPE_CHECKING, Any, Callable

from sweeper.errors import SweepError
from sweeper.model.outcome import last_line
from sweeper.model.protocol import GridRead, GridRefused
from sweeper.model.text import printable

if TYPE_CHECKING:
    from sweeper.model.target import FileTarget


def inspect(path: str, seed: int | None, send: Callable[[Any], Any]) -> "FileTarget | None":
    """In the CLI's first process: import, check, expand; send the grid as data, or one
    error line. The target to load ``train`` from, or None when the file is refused."""
    from sweeper.model.target import FileTarget

    try:
        data = _examine(path, seed)
    except SweepError as exc:
        send(GridRefused(str(exc)))
        return None
    except BaseException as exc:  # noqa: BLE001 - anything else is a bug to report plainly
        send(GridRefused(f"checking {path} failed: {printable(last_line(exc))}"))
        return None
    send(GridRead(**data))
    return FileTarget(path, data["attr"], data["shell"])


def _examine(path: str, seed: int | None) -> dict[str, Any]:
    import sys

    from sweeper.child.loading import describe, load_file
    from sweeper.model.target import check_signature
    from sweeper.system.modules import imported_since

    name = os.path.basename(path)
    before = list(sys.modules)
    try:
        module = load_file(path)
    except SyntaxError as exc:  # in the grid file, or in a module it imports: the file it is in is named
        bad = name if not exc.filename or os.path.abspath(exc.filename) == path else exc.filename
        raise SweepError(f"{bad} is not valid Python: {exc.msg} (line {exc.lineno}); fix it and run again") from None
    except BaseException as exc:  # noqa: BLE001
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == path), "")
        raise SweepError(f"{name} raised on import: {printable(last_line(exc))} ({where or 'in a module it imports'}); "
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
    options = _options_of(module, name)
    points, space = _points_of(module, name, options, options.get("seed", 0) if seed is None else seed)
    options = _evaluated(options, [dict(p) for p in points])
    if command is not None:
        from sweeper.child.command import Command

        command = Command.of(command, shell)
        command.check(points or [dict.fromkeys(space or {}, 0)])
    return {"points": [dict(p) for p in points], "options": dict(options), "space": space,
            "attr": "train" if train is not None else "command", "shell": shell,
            "what": describe(train if train is not None else command), "modules": imported_since(before)}


def _options_of(module: Any, name: str) -> dict[str, Any]:
    """The grid file's ``options``, with a search's settings given as top-level names, checked."""
    from sweeper.model.options import Options

    options = getattr(module, "options", {}) or {}
    if not isinstance(options, dict):
        raise SweepError(f"options in {name} is a {type(options).__name__}; make it a dict, e.g. options = {{'workers': 2}}")
    for key in ("search", "trials", "prune"):  # a search's settings, also as top-level names
        if hasattr(module, key):
            options = {**options, key: getattr(module, key)}
    # a backend's own settings, and names no option has, are the sweep's to refuse (with the
    # nearest name: sweeper.backends.registry.options); this process knows no backend
    Options.build({k: v for k, v in options.items() if k in Options.names()}, where=name)
    return options


#: Options that may be a function of the point in a grid file: evaluated here for each point,
#: as the parent never imports the file (:class:`~sweeper.model.grid.ByPoint`).
POINT_FUNCTIONS = ("slurm_resources",)


def _evaluated(options: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any]:
    """The grid file's options, each function of the point among them evaluated for its points."""
    from sweeper.model.grid import ByPoint

    out = dict(options)
    for key in POINT_FUNCTIONS:
        if callable(out.get(key)):
            out[key] = ByPoint.of(key, out[key], points)
    return out


def _points_of(module: Any, name: str, options: dict[str, Any], seed: int) -> tuple[Any, Any]:
    """The grid's points, or a space's samples, or (no points, the space) for a search: as
    :func:`sweeper.model.definition.shape` says (a space without a search or samples is given
    back as it is: the command line may add ``--search``)."""
    from sweeper.model.definition import ABSENT, shape
    from sweeper.model.grid import Points

    points, space = shape(grid=getattr(module, "grid", ABSENT), space=getattr(module, "space", ABSENT),
                          samples=getattr(module, "samples", None), search=options.get("search"), seed=seed,
                          where=name, later=True)
    return (Points() if points is None else points), space

