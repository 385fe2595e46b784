"""A sweep's target loaded where its trial runs: a grid file executed as the process's main
module, a command template made a :class:`~sweeper.child.command.Command`, a function unpickled
(the records are :mod:`sweeper.model.target`'s; executing the user's file is the child side's)."""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from types import ModuleType
from typing import Any, Callable

from sweeper.child.command import Command
from sweeper.errors import SweepError
from sweeper.model.callables import MAIN_NAME, name_of
from sweeper.model.target import FileTarget, Target


def load_file(path: str) -> ModuleType:
    """Import a grid file as this process's main module; its folder joins ``sys.path``.

    Only in a process of sweeper's own (a trial, the CLI's grid reader, a Ray task): it
    becomes ``__main__`` there, so a child that ``train`` starts under spawn or forkserver
    imports the file (not sweeper's bootstrap) and unpickles its functions by name. Its
    ``if __name__ == "__main__":`` block does not run, as in ``multiprocessing``'s children.
    """
    path = os.path.abspath(path)
    loaded = sys.modules.get(MAIN_NAME)
    if loaded is not None and getattr(loaded, "__file__", None) == path:
        return loaded
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(MAIN_NAME, path)
    if spec is None or spec.loader is None:
        raise SweepError(f"{path} is not a Python file; give a .py file that defines train and grid")
    module = importlib.util.module_from_spec(spec)
    saved = {name: sys.modules.get(name) for name in ("__main__", MAIN_NAME)}
    sys.modules["__main__"] = sys.modules[MAIN_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        raise
    # a script's __spec__ is None: multiprocessing then finds the main module by its path
    module.__spec__ = None
    return module


def load(target: Target) -> Callable[..., Any]:
    """What ``target`` names, loaded in this process: a file's ``train`` (or its ``command``,
    made a :class:`~sweeper.child.command.Command`), or the function pickled by reference."""
    if isinstance(target, FileTarget):
        value = getattr(load_file(target.path), target.attr)
        if target.attr == "command":
            return Command.of(value, target.shell)
        return value
    return pickle.loads(target.blob)


def describe(what: Any) -> str:
    """What a sweep runs, in words that stay the same between runs and ways of starting it.

    A function is named by :func:`sweeper.model.callables.name_of` (a grid file's, or the
    script's run as ``__main__``, after the file's stem, so ``python -m sweeper exp.py``
    and ``sweep(exp.train, ...)`` describe the same thing). A command is its template (or
    the function that builds its argv). Recorded in the ledger: a row is reused only for
    the same description (see :mod:`sweeper.run.runner`).
    """
    if isinstance(what, Command):
        return what.describe()
    return name_of(what)
