"""A function named as it stays the same between runs and ways of starting it: the
words the ledger records for what a sweep runs (:func:`sweeper.model.target.describe`)."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

def source_of(fn: Any) -> str | None:
    """The file that defines ``fn``, or None (a builtin, a callable object without source)."""
    import inspect

    try:
        return inspect.getsourcefile(fn)
    except TypeError:
        return None


#: What a grid file's module is called in a trial process: the name ``multiprocessing``
#: gives a script in its children, so theirs import the file again and find what it defines.
MAIN_NAME = "__mp_main__"


def name_of(what: Any) -> str:
    """``module.qualname``; a function in a grid file or in the script run as ``__main__``
    is named after the file's stem; a ``functools.partial`` names its function and what
    it binds."""
    if isinstance(what, functools.partial):
        bound = [repr(a) for a in what.args] + [f"{k}={v!r}" for k, v in sorted(what.keywords.items())]
        return f"functools.partial({', '.join([name_of(what.func), *bound])})"
    module = getattr(what, "__module__", None) or "?"
    if module in ("__main__", MAIN_NAME):
        main_file = getattr(sys.modules.get(module), "__file__", None) or "__main__"
        module = os.path.splitext(os.path.basename(main_file))[0]
    return f"{module}.{getattr(what, '__qualname__', type(what).__name__)}"
