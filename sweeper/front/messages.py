"""sweeper's own lines (no GPU found, a full disk, ...), for the CLI and ``sweep()`` alike."""

from __future__ import annotations

import logging
import sys
from typing import Any


class _Stdout(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """Writes to whatever ``sys.stdout`` is at the time (a notebook or a test may replace it)."""

    @property  # type: ignore[override,unused-ignore]
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def show_messages(info: bool = True) -> None:
    """sweeper's own lines (no GPU found, a full disk, ...) through the ``logging`` logger
    ``sweeper``, printed as they are on stdout; info lines only when ``info``. Used by the
    CLI and by ``sweep()`` alike; an application that configured the logger keeps its own."""
    log = logging.getLogger("sweeper")
    mine = [h for h in log.handlers if getattr(h, "_sweeper", False)]
    if log.handlers and not mine:  # the application routes the "sweeper" logger itself
        return
    if not mine:
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._sweeper = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.INFO if info else logging.WARNING)
