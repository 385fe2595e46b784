"""The machine-wide place where sweeps (and ``run --`` jobs) tell each other what they hold.

One folder, one file per writer, no daemon, no root::

    $SWEEPER_MACHINE_DIR, else /dev/shm/sweeper-machine (else <tmp>/sweeper-machine)
      mode 1777, as /tmp: anyone may add a file, only its owner may replace or remove it
      lock                        flock'ed while a writer decides and publishes a reservation
      <uid>-<pid>-<start>.json    one writer's record (:mod:`sweeper.placement.record`)

A writer replaces its own file whole (a temporary file of its own, renamed over it), so a
reader never sees half a record. Readers take every other file, and keep the records whose
writer lives (:class:`~sweeper.placement.liveness.Life`: pid, start tick, boot): a sweep that
was SIGKILLed, taken by the OOM killer or lost in a reboot blocks no one from the next read
on (``/dev/shm`` is emptied at boot anyway). A dead writer's file is removed by the next
reader of the same user; another user's is read, never written or removed (the sticky bit
forbids it too). The lock serialises decisions: a sweep takes it, reads the others, checks
that its trial still fits beside what they reserve, publishes its reservation, lets go; so
two sweeps never both take the last room of a card. A lock held by a stopped process is
waited on for :data:`LOCK_WAIT_S` at most, then passed over, said once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import tempfile
import time
from typing import Iterator

from sweeper.placement.liveness import Life
from sweeper.placement.record import Entry

log = logging.getLogger("sweeper")

#: The variable that names the folder (the default is /dev/shm's, else the temporary folder's).
ENV = "SWEEPER_MACHINE_DIR"
#: Seconds a writer waits for the lock before it decides without it (said once).
LOCK_WAIT_S = 5.0
#: A record larger than this is no record of ours (skipped unread).
MAX_BYTES = 1 << 20


def where() -> str:
    """The folder: ``$SWEEPER_MACHINE_DIR``, else ``sweeper-machine`` in ``/dev/shm`` (memory,
    emptied at boot) where it is writable, else in the temporary folder."""
    given = os.environ.get(ENV)
    if given:
        return os.path.abspath(given)
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else tempfile.gettempdir()
    return os.path.join(base, "sweeper-machine")


class Machine:
    """This process's view of the folder: its own record written, the others' read."""

    def __init__(self, path: str | None = None, life: Life | None = None) -> None:
        self.path = path or where()
        self.me = life or Life.of()
        self.uid = os.getuid()
        self.file = os.path.join(self.path, f"{self.uid}-{self.me.pid}-{self.me.start}.json")
        self.writable: bool | None = None  #: None until :meth:`open`
        self._told = False

    def open(self) -> bool:
        """Make the folder (sticky, writable by all) where it is missing; whether this process
        can publish there. One that cannot is said once: the others do not see it."""
        try:
            os.makedirs(self.path, exist_ok=True)
            if os.stat(self.path).st_uid == self.uid:
                os.chmod(self.path, 0o1777)
            self.writable = os.access(self.path, os.W_OK | os.X_OK)
        except OSError:
            self.writable = False
        if not self.writable:
            log.warning("sweeper: cannot write %s, where sweeps on this machine tell each other what they hold: "
                        "other sweeps will not see this one; set %s to a folder all of them can write", self.path,
                        ENV)
        return self.writable

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The machine's lock, held while a decision is read, checked and published."""
        fd = self._lock_fd()
        try:
            if fd is not None:
                self._acquire(fd)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # (closing lets go of the lock)

    def _lock_fd(self) -> int | None:
        path = os.path.join(self.path, "lock")
        for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # another user's lock file: read-only is enough
            try:
                return os.open(path, flags | os.O_NOFOLLOW, 0o644)
            except OSError:
                continue
        return None

    def _acquire(self, fd: int) -> None:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    if not self._told:
                        self._told = True
                        log.warning("sweeper: %s is locked by a process that does not let go (stopped?); deciding "
                                    "without it", os.path.join(self.path, "lock"))
                    return
            time.sleep(0.01)  # flock has no timeout of its own: a bounded wait for a lock held milliseconds

    def publish(self, entry: Entry) -> None:
        """This process's record, replaced whole."""
        if not self.writable:
            return
        tmp = f"{self.file}.{time.monotonic_ns()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(entry.to_json())
            os.replace(tmp, self.file)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def withdraw(self) -> None:
        """This process's record removed (it holds and wants nothing any more)."""
        with contextlib.suppress(OSError):
            os.unlink(self.file)

    def read(self, mine: bool = False) -> list[Entry]:
        """The live writers' records (``mine``: this process's too), oldest writer first."""
        try:
            names = sorted(os.listdir(self.path))
        except OSError:
            return []
        out = []
        for name in names:
            path = os.path.join(self.path, name)
            if not name.endswith(".json") or (path == self.file and not mine):
                continue
            entry = _load(path)
            if entry is None:  # another version's, or damaged: skipped, left as it is
                continue
            if entry.life.alive():
                out.append(entry)
            else:
                self._clear(path)
        return sorted(out, key=lambda e: (e.life.start, e.life.pid))

    def _clear(self, path: str) -> None:
        """A dead writer's file removed, where it is this user's (another's stays, read and skipped)."""
        with contextlib.suppress(OSError):
            if os.stat(path).st_uid == self.uid:
                os.unlink(path)


def _load(path: str) -> Entry | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd) as f:
            return Entry.from_json(f.read(MAX_BYTES))
    except (OSError, UnicodeDecodeError):
        return None
