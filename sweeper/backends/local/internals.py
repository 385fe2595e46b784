"""Every use of multiprocessing's private names, in one place, and the Pythons they were
tested on.

The fork server (:mod:`.server`) needs what multiprocessing does not offer publicly: the
pid and lifeline of its fork server (to see it die, to kill it mid-import, to clear its
record once reaped elsewhere) and the folder its socket goes in; the reaper
(:mod:`.reaper`) needs the pids of multiprocessing's helpers (the resource tracker, the
fork server), so as never to take them for a trial's orphans.

Private names may change in any Python release. On a Python outside :data:`TESTED` the
sweep does not start the fork server, says so in one line (:func:`refusal`), and spawns
its trials: slower, never wrong. The helpers' pids are read defensively, on any Python.
"""

from __future__ import annotations

import sys
from typing import Any

#: The first and last Python (major, minor) the fork server's use of multiprocessing's
#: private names was tested on: tests/backends/test_forkserver.py passes on 3.11 and 3.12; on 3.13
#: the server's preload is not what the forks came from (the library was imported in every
#: trial). Widen it once that file passes on another.
TESTED: tuple[tuple[int, int], tuple[int, int]] = ((3, 11), (3, 12))
#: The Python this runs on (read by :func:`refusal`).
PYTHON: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)


def refusal() -> str | None:
    """None on a tested Python; else why the fork server is not used (one line)."""
    first, last = TESTED
    if first <= PYTHON <= last:
        return None
    tested = f"{first[0]}.{first[1]}" + (f"-{last[0]}.{last[1]}" if last != first else "")
    return f"the fork server is not used on Python {PYTHON[0]}.{PYTHON[1]} (tested on {tested})"


class MpForkServer:
    """multiprocessing's record of its fork server (one per process): its pid, its
    lifeline, and its own ways to start and to stop it."""

    def __init__(self) -> None:
        import multiprocessing.forkserver

        self._server: Any = getattr(multiprocessing.forkserver, "_forkserver")  # its pid and _stop: private

    @property
    def pid(self) -> int | None:
        pid: int | None = self._server._forkserver_pid
        return pid

    @property
    def alive_fd(self) -> int | None:
        fd: int | None = self._server._forkserver_alive_fd
        return fd

    def ensure_running(self) -> None:
        self._server.ensure_running()

    def stop(self) -> None:
        """multiprocessing's own stop: closes the lifeline, reaps the server."""
        self._server._stop()

    def forget(self) -> None:
        """multiprocessing's record of a server that is gone, cleared as its own code does."""
        import contextlib
        import os

        with contextlib.suppress(OSError, TypeError):
            os.close(self._server._forkserver_alive_fd)
        self._server._forkserver_pid = self._server._forkserver_alive_fd = None
        self._server._forkserver_address = None


def own_mp_temp(folder: str) -> str | None:
    """Have multiprocessing put its own temporary files (the server's socket) in the sweep's
    folder, so a SIGKILL leaves no ``pymp-*`` folder of its own behind. Returns a marker to
    undo it with, or None where multiprocessing has its folder already."""
    from multiprocessing import process

    config: dict[str, Any] = getattr(process.current_process(), "_config")  # private: get_temp_dir()'s folder
    if config.get("tempdir") is not None:
        return None
    config["tempdir"] = folder
    return folder


def restore_mp_temp(marker: str | None) -> None:
    from multiprocessing import process

    config: dict[str, Any] = getattr(process.current_process(), "_config")
    if marker is not None and config.get("tempdir") == marker:
        del config["tempdir"]


def mp_helpers() -> set[int]:
    """multiprocessing's resource tracker and fork server: children of this process."""
    from multiprocessing import forkserver, resource_tracker

    pids = {getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None),
            getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)}
    return {pid for pid in pids if pid}
