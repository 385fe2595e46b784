"""Which modules a fork server may import ahead of the trials: installed ones, never the user's.

A fork of a process that imported the user's module shares what that module made at import
(its random generators, ids, threads, connections, locks), so under the fork server every
trial runs the user's module itself, as a spawned one does. What may come ahead is what
the module imports from elsewhere: the standard library and *installed* distributions
(TensorFlow, Keras, NumPy, ...), the seconds of a trial's start. A distribution installed
in editable mode is the user's own code under development, and is not preloaded either.

Candidates are found without importing the user's code where it was not imported anyway:
the CLI's fork server starts before the grid file is read, from the modules its import
statements, and those of the user's modules it imports, name (:func:`imports_in`, by their
source); the grid reader then notes what importing the file added (:func:`imported_since`); for
``sweep(train, ...)`` the parent, which imported ``train``'s module already, looks through
the names that module and the user's modules it imports hold (:func:`needed_by`). The fork
server keeps those that are :func:`installed` (reading the installed distributions takes
a few hundred ms: there, not in the parent).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from types import ModuleType
from typing import Any, Iterable


@functools.lru_cache(maxsize=1)
def _installed() -> frozenset[str]:
    """Top-level import names of the installed distributions that are not editable."""
    from importlib import metadata

    tops: set[str] = set()
    for dist in metadata.distributions():
        try:
            editable = json.loads(dist.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")
        except Exception:  # noqa: BLE001 - unreadable metadata: not a reason to fail a sweep
            editable = False
        if editable:
            continue
        names = (dist.read_text("top_level.txt") or "").split()
        if not names:  # no top_level.txt: the top-level entries of its files
            names = [str(f).split("/")[0].removesuffix(".py") for f in (dist.files or [])
                     if not str(f).startswith(("..", "/")) and ".dist-info" not in str(f)
                     and ".egg-info" not in str(f)]
        tops.update(n for n in names if n.isidentifier())
    return frozenset(tops)


def installed(name: str) -> bool:
    """Whether module ``name`` comes from the standard library or an installed,
    non-editable distribution (never the user's own files)."""
    top = name.partition(".")[0]
    if top in ("__main__", "__mp_main__", "sweeper"):
        return False
    return top in sys.stdlib_module_names or top in _installed()


def imported_since(before: Iterable[str]) -> list[str]:
    """The modules imported since ``before`` (names of ``sys.modules``), in the order they
    were imported: candidates, the user's own among them."""
    seen = set(before)
    return [name for name in list(sys.modules) if name not in seen]


def needed_by(module: ModuleType | None) -> list[str]:
    """The modules a module uses, through the names it holds (``import numpy as np``,
    ``from sklearn.datasets import load_digits``) and those of the modules it holds that
    lie outside the library folders (the user's own), followed as deep as they go."""
    out: dict[str, None] = {}
    todo = [module] if module is not None else []
    seen: set[int] = set()
    libraries = _library_folders()
    while todo:
        mod = todo.pop()
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        for value in list(vars(mod).values()):
            name = _module_of(value)
            held = sys.modules.get(name) if name else None
            if held is None or name.startswith(("sweeper", "__")):
                continue
            out.setdefault(name, None)
            where = getattr(held, "__file__", None)
            if where and not where.startswith(libraries):
                todo.append(held)
    return list(out)


def _library_folders() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    folders = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(getattr(site, "getsitepackages", lambda: [])())
    return tuple(f for f in folders if f)


def _module_of(value: Any) -> str:
    if isinstance(value, ModuleType):
        return value.__name__
    try:
        name = getattr(value, "__module__", None)
    except Exception:  # noqa: BLE001 - a proxy object that refuses attribute lookups
        return ""
    return name if isinstance(name, str) else ""


def warm(names: Iterable[str]) -> None:
    """Import the installed modules among ``names`` (in this order), skipping the rest:
    what a fork server or a standby imports ahead of its trials. One that fails to import
    is left to the trial, which says why the usual way."""
    from importlib import import_module

    for name in names:
        if name in sys.modules or not installed(name):
            continue
        try:
            import_module(name)
        except BaseException:  # noqa: BLE001 - an alias or a private module: the trial imports it
            continue


def imports_in(path: str, limit: int = 40) -> list[str]:
    """The modules a Python file's top-level import statements name, read without running
    it (not those inside its functions, which run in the trial), and those of the user's
    own modules it imports, followed (files beside it, on ``sys.path``, or on a literal
    ``sys.path.insert``/``append`` of its own; at most ``limit`` files): candidates for a
    fork server started before the file is imported (``from a import b`` names ``a`` and
    ``a.b``). A grid file that imports ``train`` from a module beside it so names that
    module's TensorFlow."""
    out: dict[str, None] = {}
    dirs = [os.path.dirname(os.path.abspath(path))]
    seen = {os.path.abspath(path)}
    todo = [path]
    user_paths = _user_paths()
    tops: dict[str, list[str]] = {}
    while todo and len(seen) <= limit:
        names, added = _top_level_imports(todo.pop(0))
        dirs += [d for d in added if d not in dirs]
        for name in names:
            out.setdefault(name, None)
            parts = name.split(".")
            if parts[0] in sys.stdlib_module_names:
                continue
            for i in range(1, len(parts) + 1):  # a package's __init__ runs before its module
                found = _source_of(".".join(parts[:i]), [*dirs, *user_paths])
                if found is None:  # a package of the user's installed in editable mode (its finder says where)
                    if parts[0] not in tops:
                        tops[parts[0]] = _editable_folders(parts[0])
                    found = _source_of(".".join(parts[:i]), tops[parts[0]])
                if found is not None and found not in seen:
                    seen.add(found)
                    todo.append(found)
    return list(out)


def _top_level_imports(path: str) -> tuple[list[str], list[str]]:
    """The modules a file's top-level import statements name, and the folders it adds to
    ``sys.path`` by literal ``sys.path.insert(i, "...")`` or ``sys.path.append("...")``."""
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):  # the reader says what is wrong with it
        return [], []
    out: dict[str, None] = {}
    dirs: list[str] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Import):
            out.update(dict.fromkeys(alias.name for alias in node.names))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out[node.module] = None
            out.update(dict.fromkeys(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"))
        elif isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue  # a script's own block: imported, the file does not run it
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            todo += node.orelse  # for type checkers only: never imported when the file runs
        elif isinstance(node, (ast.If, ast.Try, ast.With)):  # still the module's top level
            for block in ("body", "orelse", "finalbody"):
                todo += getattr(node, block, [])
            todo += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            folder = _sys_path_added(node.value)
            if folder is not None:
                dirs.append(os.path.abspath(folder))
    return list(out), dirs


def _sys_path_added(call: Any) -> str | None:
    """The folder of ``sys.path.insert(i, "literal")`` or ``sys.path.append("literal")``."""
    import ast

    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in ("insert", "append") and isinstance(f.value, ast.Attribute)
            and f.value.attr == "path" and isinstance(f.value.value, ast.Name) and f.value.value.id == "sys"):
        return None
    arg = call.args[-1] if call.args and len(call.args) == (2 if f.attr == "insert" else 1) else None
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _user_paths() -> list[str]:
    """The folders of ``sys.path`` that are not the standard library's or installed
    packages' (the installed ones are the fork server's to import, not to read here)."""
    import sysconfig

    libs = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return [d for d in sys.path if d not in libs and not d.endswith((".zip", "lib-dynload"))
            and "site-packages" not in d and "dist-packages" not in d]


def _editable_folders(top: str) -> list[str]:
    """The folder holding the user's package (or module) ``top`` where an import finder other
    than ``sys.path`` places it outside the library folders (an editable install's finder),
    found without running it; else none."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finders only, no module code runs
    except (ImportError, ValueError, AttributeError):
        return []
    origin = getattr(spec, "origin", None)
    if not origin or not os.path.isfile(origin) or origin.startswith(_library_folders()):
        return []
    # the folder above the package (pkg/__init__.py) or beside the module (mod.py)
    return [os.path.dirname(os.path.dirname(origin)) if os.path.basename(origin) == "__init__.py"
            else os.path.dirname(origin)]


def _source_of(name: str, dirs: Iterable[str]) -> str | None:
    """The user's source file of module ``name`` in the first of ``dirs`` that holds it."""
    rel = name.replace(".", os.sep)
    for d in dirs:
        for candidate in (os.path.join(d or ".", rel + ".py"), os.path.join(d or ".", rel, "__init__.py")):
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
    return None
