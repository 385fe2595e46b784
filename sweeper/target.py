"""How the parent names ``train`` so that a freshly spawned child can load it.

Under the spawn start method a child starts from an empty interpreter, so the
function must be found again by import. Two kinds of target:

* :class:`FunctionTarget` for ``sweep(fn, ...)``: ``fn`` pickled by reference
  (module and qualified name), checked in the parent before anything runs;
* :class:`FileTarget` for ``python -m sweeper grid.py``: the grid file loaded as a
  module under a stable name, with its folder on ``sys.path`` (never ``runpy`` as
  ``__main__``, which a spawned child could not import).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from .errors import SweepError


GRID_MODULE_PREFIX = "_sweeper_grid_"


def module_name_for(path: str) -> str:
    """The stable module name a grid file is loaded under, in the parent and in children."""
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    return f"{GRID_MODULE_PREFIX}{stem}"


def load_file(path: str) -> ModuleType:
    """Import a Python file as a module with a stable name; its folder joins ``sys.path``."""
    path = os.path.abspath(path)
    name = module_name_for(path)
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
        return sys.modules[name]
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SweepError(f"{path} is not a Python file; give a .py file that defines train and grid")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@dataclass(frozen=True)
class FileTarget:
    """``attr`` of the Python file at ``path``: its ``train``, or its ``command``."""

    path: str
    attr: str = "train"
    shell: bool = False  #: for a command template: run it through /bin/sh

    def load(self) -> Callable[..., Any]:
        value = getattr(load_file(self.path), self.attr)
        if self.attr == "command":
            from .command import Command

            return Command.of(value, self.shell)
        return value


@dataclass(frozen=True)
class FunctionTarget:
    """A module-level function, pickled by reference."""

    blob: bytes
    label: str
    module: str = ""  #: the module defining it (a fork server imports it ahead)

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> "FunctionTarget":
        check_main_importable()
        label = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        if getattr(fn, "__module__", None) == "__main__":
            main = sys.modules.get("__main__")
            if not getattr(main, "__file__", None):
                raise SweepError(
                    f"train {label} is defined interactively, and a spawned worker cannot import it; "
                    "put it in a .py file and import it from there"
                )
        try:
            blob = pickle.dumps(fn)
        except Exception as exc:
            raise SweepError(
                f"train {label} cannot be sent to a worker ({exc}); define it with def at the "
                "top level of a module (no lambda, no nested function)"
            ) from None
        return cls(blob, label, getattr(fn, "__module__", "") or "")

    def load(self) -> Callable[..., Any]:
        return pickle.loads(self.blob)


Target = FileTarget | FunctionTarget


def describe(what: Any) -> str:
    """What a sweep runs, in words that stay the same between runs and ways of starting it.

    A function is ``module.qualname``; a function in a grid file or in the script run as
    ``__main__`` is named after the file's stem, so ``python -m sweeper exp.py`` and
    ``sweep(exp.train, ...)`` describe the same thing. A command is its template (or the
    function that builds its argv). Recorded in the ledger: a row is reused only for the
    same description (see :mod:`sweeper.runner`).
    """
    import functools

    from .command import Command

    if isinstance(what, Command):
        return what.describe()
    if isinstance(what, functools.partial):
        bound = [repr(a) for a in what.args] + [f"{k}={v!r}" for k, v in sorted(what.keywords.items())]
        return f"functools.partial({', '.join([describe(what.func), *bound])})"
    module = getattr(what, "__module__", None) or "?"
    if module == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None) or "__main__"
        module = os.path.splitext(os.path.basename(main_file))[0]
    elif module.startswith(GRID_MODULE_PREFIX):
        module = module[len(GRID_MODULE_PREFIX):]
    return f"{module}.{getattr(what, '__qualname__', type(what).__name__)}"


def check_main_importable() -> None:
    """Spawned children re-import the parent's ``__main__`` file; it must exist."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file and not os.path.isfile(main_file):
        raise SweepError(
            f"the calling program ({main_file}) is not a file that spawned workers can import; "
            "save the script to a .py file and run that"
        )


def check_signature(fn: Any, label: str) -> None:
    """Refuse a ``train`` that is not callable as ``train(params)``."""
    import inspect

    if not callable(fn):
        raise SweepError(f"train ({label}) is a {type(fn).__name__}, not a function; define def train(params): ...")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind({})
    except TypeError:
        raise SweepError(
            f"train ({label}) has signature {sig} but is called as train(params) with one dict; "
            "define def train(params): ..."
        ) from None
