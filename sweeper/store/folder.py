"""A sweep's folder as one thing: made writable, held by one sweep at a time, set aside.

Every name in it comes from :class:`sweeper.store.paths.SweepPaths`; this module adds what a
sweep does with the folder: :meth:`SweepFolder.prepare` (made, and shown writable before
anything runs), :meth:`SweepFolder.locked` (one sweep per folder: a second one would run
the same trials twice), :meth:`SweepFolder.set_aside` (``--fresh``), and, for the
commands that read a folder, :func:`sweep_folder`, :func:`holder` and :func:`default_uid`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import time
from typing import Iterator

from sweeper.errors import SweepError
from sweeper.store import paths
from sweeper.store.paths import SweepPaths


class SweepFolder:
    """``<out>/<name>``, absolute."""

    def __init__(self, out: str, name: str) -> None:
        self.path = os.path.abspath(os.path.join(out, name))
        self.paths = SweepPaths(self.path)

    def prepare(self) -> None:
        """Made, with its ``trials/``, and shown writable (one line naming the folder if not)."""
        try:
            os.makedirs(self.paths.trials, exist_ok=True)
            probe = os.path.join(self.path, f".probe{os.getpid()}")
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError as exc:
            raise SweepError(f"cannot write to {self.path} ({exc.strerror}); choose another --out") from None

    @contextlib.contextmanager
    def locked(self, tag: str = "") -> Iterator[str | None]:
        """Held by this sweep (its pid and tag in the lock file) until the block ends; a
        second sweep here is refused in one line naming the first one's pid. Yields the
        tag the last run here wrote (its processes carry it), or None."""
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = (os.pread(fd, 64, 0).decode(errors="replace").split() or ["?"])[0]
                raise busy(self.path, other) from None
            earlier = os.pread(fd, 64, 0).decode(errors="replace").split()[1:2]
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {tag}".encode(), 0)
            shutil.rmtree(os.path.join(self.path, paths.OLD_STANDBY), ignore_errors=True)
            yield earlier[0] if earlier else None
        finally:
            os.close(fd)

    def set_aside(self) -> None:
        """``--fresh``: the old ledger and CSV kept beside the new ones, renamed with a time stamp."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for name in (paths.LEDGER, paths.RESULTS):
            paths.set_aside(os.path.join(self.path, name), stamp)



def busy(folder: str, pid: object, dry_run: bool = False) -> SweepError:
    """The one line that refuses a second sweep in a folder another one holds."""
    said = ", so this sweep would be refused" if dry_run else ""
    return SweepError(f"another sweep (pid {pid}) is running in {folder}{said}; wait for it (python -m sweeper "
                      f"status {folder} shows it), or give this one another --name")


def refuse_busy(folder: str, dry_run: bool = False) -> None:
    """Refuse a sweep into ``folder`` now if another sweep holds it (the CLI asks this before
    it imports the grid file; :meth:`SweepFolder.locked` is what decides)."""
    pid = holder(folder)
    if pid is not None:
        raise busy(os.path.abspath(folder), pid if pid > 0 else "?", dry_run)


def default_uid(folder: str) -> str:
    """The id of a sweep whose ledger has none (written by an older release)."""
    return hashlib.sha256(os.path.abspath(folder).encode()).hexdigest()[:32]


def holder(folder: str) -> int | None:
    """The pid of the sweep running in a folder (it holds the lock :meth:`SweepFolder.locked`
    takes), or None."""
    try:
        fd = os.open(SweepPaths(folder).lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = (os.pread(fd, 64, 0).decode(errors="replace").split() or [""])[0]
        return int(text) if text.isdigit() else -1
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def sweep_folder(path: "str | os.PathLike[str]") -> str:
    """The sweep folder a user named (``<out>/<name>`` or its ``results.csv``; a string or a
    ``pathlib.Path``), checked."""
    path = os.fspath(path)
    folder = os.path.dirname(path) if path.endswith(".csv") else path
    if not SweepPaths(folder).exists():
        raise SweepError(f"{folder} is not a sweep folder (no {paths.LEDGER}); give <out>/<name>, "
                         "e.g. results/digits_mlp")
    return folder
