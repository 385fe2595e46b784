"""How the parent names ``train`` so that a freshly spawned child can load it (records only:
the child loads them, :mod:`sweeper.child.loading`).

Under the spawn start method a child starts from an empty interpreter, so the
function must be found again by import. Two kinds of target:

* :class:`FunctionTarget` for ``sweep(fn, ...)``: ``fn`` pickled by reference
  (module and qualified name), checked in the parent before anything runs;
* :class:`FileTarget` for ``python -m sweeper grid.py``: the grid file loaded in the
  trial process as its main module (``__mp_main__``, aliased as ``__main__``, as
  ``multiprocessing`` loads a script in its children), with its folder on ``sys.path``;
  so ``train`` may start processes of its own (``Pool``, ``ProcessPoolExecutor``, any
  start method) whose children find its functions again, as in a plain script.

Each names the installed modules ``train`` needs (``preload``): a fork server imports
those ahead, never the user's own code (:mod:`sweeper.system.modules`).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from sweeper.errors import SweepError


@dataclass(frozen=True)
class FileTarget:
    """``attr`` of the Python file at ``path``: its ``train``, or its ``command``."""

    path: str
    attr: str = "train"
    shell: bool = False  #: for a command template: run it through /bin/sh
    #: Installed modules the file imports (found where it was read): a fork server's preload.
    preload: tuple[str, ...] = field(default=(), compare=False, repr=False)


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


Target = FileTarget | FunctionTarget


#: The options a replay takes from the sweep (how its slots were made).
_KEPT = ("start_method", "deterministic", "per_gpu", "memory_fraction", "memory_growth", "timeout", "stall", "seed")


def record(target: Target, options: Any) -> str:
    """How to run the sweep's trials again, as the ledger keeps it (``target``), for
    :mod:`sweeper.front.replay`."""
    if isinstance(target, FileTarget):
        what: dict[str, Any] = {"kind": "file", "path": os.path.abspath(target.path), "attr": target.attr,
                                "shell": target.shell}
    else:
        what = {"kind": "function", "blob": base64.b64encode(target.blob).decode("ascii"), "label": target.label,
                "module": target.module}
    what["options"] = {k: getattr(options, k) for k in _KEPT}
    return json.dumps(what, sort_keys=True)


def target_of(recorded: dict[str, Any], source: str) -> Target:
    """The target a record names, loadable from this process's children: a grid file as
    it was; a function of a script run as ``__main__`` from that script (``source``); any
    other function by its module, whose folder joins ``sys.path``."""
    if recorded["kind"] == "file":
        return FileTarget(recorded["path"], recorded["attr"], recorded["shell"])
    module = recorded.get("module") or ""
    label = recorded.get("label") or ""
    if module == "__main__":
        name = label[len("__main__."):]
        if not source or "." in name or "<" in name:
            raise SweepError(f"train {label} was defined in a script that cannot be found again ({source or 'no file'})"
                             "; replay needs the script's top-level function")
        return FileTarget(source, name)
    if source and module and not module.startswith("sweeper."):
        root = os.path.dirname(os.path.abspath(source))
        if os.path.basename(source) == "__init__.py":  # a package's own module: its folder is the package
            root = os.path.dirname(root)
        for _ in module.split(".")[1:]:
            root = os.path.dirname(root)
        if root not in sys.path:  # the children of spawn and the fork server take the parent's path
            sys.path.insert(0, root)
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return FunctionTarget(base64.b64decode(recorded["blob"]), label, module)


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
