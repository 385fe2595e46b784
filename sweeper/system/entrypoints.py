"""Plugins installed on this machine: the entry points of a group, found by name and loaded.

The backends' and the searches' registries read their groups (``sweeper.backends``,
``sweeper.search``) here, so a package that declares one, and one that fails to import, are
said alike.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TypeVar

from sweeper.errors import SweepError

T = TypeVar("T")


def add(table: MutableMapping[str, T], name: str, entry: T, kind: str, same: Callable[[T, T], bool]) -> None:
    """Put ``entry`` in a registry's ``table`` as ``name``: the rule both registries keep (a plain
    name; a name taken by another only where ``same(known, entry)``, the same factory again).
    Raises SweepError in one line saying the fix (``kind``: "backend", "search")."""
    if not name.isidentifier():
        raise SweepError(f"{kind} name {name!r} is not a plain name; use letters, digits and _")
    known = table.get(name)
    if known is not None and not same(known, entry):
        raise SweepError(f"a {kind} named {name!r} is registered already; register yours under another name")
    table[name] = entry


def names(group: str) -> list[str]:
    """The names the installed packages declare in ``group``, sorted."""
    from importlib.metadata import entry_points

    return sorted(e.name for e in entry_points(group=group))


def load(group: str, name: str, kind: str) -> object | None:
    """What the first entry point ``name`` of ``group`` names, imported; None where no installed
    package declares one. Raises SweepError, naming the entry point and the fix, where it does not
    import (``kind`` is what it is to the user: "backend", "search")."""
    from importlib.metadata import entry_points

    for point in entry_points(group=group, name=name):
        try:
            return point.load()
        except Exception as exc:
            raise SweepError(f"{kind} {name!r} ({point.value}, an entry point of {group!r}) did not import: "
                             f"{type(exc).__name__}: {exc}; fix or uninstall the package that declares it") from None
    return None
