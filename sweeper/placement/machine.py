"""The machine-wide place where sweeps (and ``run --`` jobs) tell each other what they hold.

One folder, two files per writer, no daemon, no root::

    $SWEEPER_MACHINE_DIR, else /dev/shm/sweeper-machine (else <tmp>/sweeper-machine)
      mode 1777, as /tmp: anyone may add a file, only its owner may replace or remove it
      lock                     flock'ed while a writer decides and publishes a reservation
      <uid>-<random>.json      one writer's record (:mod:`sweeper.placement.record`)
      <uid>-<random>.life      flock'ed by that writer for as long as it runs

The folder is used only where it is a real folder (never a link: one planted at its path
would have this process change another folder) that is this user's, or another's with the
sticky bit; else it is not used, said once. A writer's files are named with a random part
(nobody can make them first and keep it from publishing) and made readable by all
(``fchmod``, whatever the umask). A writer replaces its record whole (a temporary file of its
own, renamed over it), so a reader never sees half a record.

A record counts only where its file's owner is the user it names (and, where ``/proc`` shows
its process, that process's owner too): nobody publishes in another's name. Its writer lives
while it holds the lock on its ``.life`` file (a lock goes with its process, whatever kills
it, and needs no ``/proc``: a ``/proc`` mounted ``hidepid`` hides another user's process, not
its lock) and, where ``/proc`` shows its pid, while that pid is the process that wrote it
(:class:`~sweeper.placement.liveness.Life`: start tick, boot). A sweep that was SIGKILLed, taken
by the OOM killer or lost in a reboot blocks no one from the next read on (``/dev/shm`` is
emptied at boot anyway). A dead writer's files are removed by the next reader of the same
user in the same pid namespace; another user's, or another namespace's, are read, never
written or removed.

The lock serialises decisions: a sweep takes it, reads the others, checks that its trial
still fits beside what they reserve, publishes its reservation, lets go; so two sweeps never
both take the last room of a card. A lock held past :data:`LOCK_WAIT_S` (a stopped process)
is passed over, said once naming its holder, and not waited for again while that process
holds it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import stat
import tempfile
import time
from typing import Iterator

from sweeper.placement.liveness import Life, boot_id, command, owner, user_name
from sweeper.placement.record import Entry

log = logging.getLogger("sweeper")

#: The variable that names the folder (the default is /dev/shm's, else the temporary folder's).
ENV = "SWEEPER_MACHINE_DIR"
#: Seconds a writer waits for the lock before it decides without it (said once per holder).
LOCK_WAIT_S = 5.0
#: A record larger than this is no record of ours (skipped unread).
MAX_BYTES = 1 << 20
#: A folder changed this close before it was read may have changed again within the same
#: tick of the kernel's coarse clock, unseen by its time stamp: read again.
COARSE_NS = 50_000_000

_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC


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
        self.stem = f"{self.uid}-{secrets.token_hex(8)}"
        self.file = f"{self.stem}.json"  #: this writer's record, in the folder
        self.writable: bool | None = None  #: None until :meth:`open`
        self._life: int | None = None  #: the lock this writer holds for its lifetime
        self._said: set[str] = set()
        self._passed: int | None = None  #: a lock holder waited for in vain, not waited for again
        self._stamp: tuple[int, int, int] | None = None  #: the folder's (inode, mtime, when read), at the last read

    # -- the folder --------------------------------------------------------------------------

    def open(self) -> bool:
        """Make the folder (sticky, writable by all) where it is missing, and this writer's
        lifetime lock; whether this process can publish there. One that cannot is said once:
        the others do not see it."""
        with self._folder(create=True) as fd:
            self.writable = fd is not None and self._start(fd)
        if not self.writable and "refused" not in self._said:
            self._say("folder", f"cannot write {self.path}, where sweeps on this machine tell each other what they "
                                f"hold: other sweeps will not see this one; set {ENV} to a folder all of them can write")
        return self.writable

    def _start(self, fd: int) -> bool:
        """This writer's ``.life`` file, made and locked."""
        try:
            life = os.open(f"{self.stem}.life", os.O_RDONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o644, dir_fd=fd)
        except OSError:
            return False
        try:
            os.fchmod(life, 0o644)  # whatever the umask: every reader tests it
            fcntl.flock(life, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(life)
            return False
        self._life = life
        return True

    @contextlib.contextmanager
    def _folder(self, create: bool = False) -> Iterator[int | None]:
        """The folder, opened as itself (a link at its path is refused, not followed), or None
        where it is missing or not to be used (said once)."""
        made = False
        if create:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
            try:
                os.mkdir(self.path, 0o700)
                made = True
            except OSError:
                pass
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | _OPEN)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                self._refuse("is a link or a file, not a folder")
            yield None
            return
        try:
            yield fd if self._usable(fd, made) else None
        finally:
            os.close(fd)

    def _usable(self, fd: int, made: bool) -> bool:
        """Whether the folder may be used: this user's (made now: opened to all, sticky), or
        another's that is sticky (nobody else may replace or remove this user's files there)."""
        st = os.fstat(fd)
        if st.st_uid == self.uid:
            if made:
                with contextlib.suppress(OSError):
                    os.fchmod(fd, 0o1777)
            return True
        if st.st_mode & stat.S_ISVTX:
            return True
        self._refuse(f"is {user_name(st.st_uid)}'s and not sticky (anyone who may write there may remove "
                     "this user's records)")
        return False

    def _refuse(self, why: str) -> None:
        self._say("refused", f"{self.path} {why}: not used, so the sweeps on this machine do not see this one nor it "
                             f"them; remove it, or set {ENV} to another folder (mode 1777, the same for every sweep "
                             "that shares the cards)")

    def _say(self, key: str, words: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("sweeper: %s", words)

    # -- the lock -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The machine's lock, held while a decision is read, checked and published."""
        with self._folder() as folder:
            fd = self._lock_fd(folder) if folder is not None else None
        try:
            if fd is not None:
                self._acquire(fd)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # (closing lets go of the lock)

    def _lock_fd(self, folder: int) -> int | None:
        for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # another user's lock file: read-only is enough
            try:
                fd = os.open("lock", flags | _OPEN, 0o666, dir_fd=folder)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                st = os.fstat(fd)
                if st.st_uid == self.uid and stat.S_IMODE(st.st_mode) != 0o666:
                    os.fchmod(fd, 0o666)  # whatever the umask: every user's sweeps take it
            return fd
        with contextlib.suppress(OSError):
            st = os.stat("lock", dir_fd=folder, follow_symlinks=False)
            self._say("lock", f"{self.path}/lock, {user_name(st.st_uid)}'s (mode {stat.S_IMODE(st.st_mode):o}), "
                              "cannot be opened: this sweep decides without the machine's lock; its owner can "
                              "remove it (the next sweep makes it again, open to all)")
        return None

    def _acquire(self, fd: int) -> bool:
        """The lock, waited for up to :data:`LOCK_WAIT_S`, or not (whether it is held): a holder
        that did not let go in that time is said once, and not waited for again while it holds it."""
        if _try(fd):
            self._passed = None
            return True
        holder = _holder(fd)
        if holder is not None and holder == self._passed:
            return False
        # a holder no one can name is waited for briefly once one was passed over
        deadline = time.monotonic() + (LOCK_WAIT_S if self._passed is None else LOCK_WAIT_S / 50)
        while time.monotonic() < deadline:
            time.sleep(0.01)  # flock has no timeout of its own: a bounded wait for a lock held milliseconds
            if _try(fd):
                self._passed = None
                return True
        self._passed = holder if holder is not None else -1
        who = "a process /proc/locks does not name" if holder is None else _named(holder)
        self._say(f"held-{holder}", f"{self.path}/lock is held by {who} and was not let go for {LOCK_WAIT_S:g} s "
                                    "(stopped?); this sweep decides without it while that process holds it")
        return False

    # -- this writer's record --------------------------------------------------------------------

    def publish(self, entry: Entry) -> None:
        """This process's record, replaced whole."""
        if not self.writable:
            return
        with self._folder() as folder:
            if folder is None:
                return
            tmp = f"{self.stem}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o644, dir_fd=folder)
                with os.fdopen(fd, "w") as f:
                    os.fchmod(fd, 0o644)  # whatever the umask: every user's sweeps read it
                    f.write(entry.to_json())
                os.replace(tmp, self.file, src_dir_fd=folder, dst_dir_fd=folder)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)

    def withdraw(self) -> None:
        """This process's record removed (it holds and wants nothing any more), its lock let go."""
        with self._folder() as folder:
            if folder is not None:
                for name in (self.file, f"{self.stem}.life"):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=folder)
        if self._life is not None:
            os.close(self._life)
            self._life = None

    # -- the others' records --------------------------------------------------------------------

    def changed(self) -> bool:
        """Whether a record may have come, gone or changed since the last :meth:`read`."""
        if self._stamp is None:
            return True
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return True
        ino, mtime, at = self._stamp
        return (st.st_ino, st.st_mtime_ns) != (ino, mtime) or mtime >= at - COARSE_NS

    def read(self, mine: bool = False) -> list[Entry]:
        """The live writers' records (``mine``: this process's too), oldest writer first."""
        out = []
        with self._folder() as folder:
            if folder is None:
                return []
            st = os.fstat(folder)
            self._stamp = (st.st_ino, st.st_mtime_ns, time.time_ns())
            names = set(os.listdir(folder))
            for name in sorted(names):
                if name.endswith(".json") and (mine or name != self.file):
                    entry = self._entry(folder, name)
                    if entry is not None:
                        out.append(entry)
            self._tidy(folder, names)
        return sorted(out, key=lambda e: (e.life.start, e.life.pid))

    def _entry(self, folder: int, name: str) -> Entry | None:
        """A record, where it is authentic and its writer lives; a dead writer's removed, where it may be."""
        entry, uid = self._load(folder, name)
        if entry is None or uid != entry.uid or not name.startswith(f"{entry.uid}-"):
            return None  # another version's, damaged, or written in another user's name
        stem = name[:-len(".json")]
        verdict = self._lives(folder, stem, entry)
        if verdict is False:
            if entry.life.here() or entry.life.boot != boot_id():  # (another namespace's pids mean nothing here)
                self._clear(folder, stem, uid)
            return None
        return entry if verdict else None

    def _load(self, folder: int, name: str) -> tuple[Entry | None, int]:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _OPEN, dir_fd=folder)
        except PermissionError:
            with contextlib.suppress(OSError):
                uid = os.stat(name, dir_fd=folder, follow_symlinks=False).st_uid
                self._say(f"unreadable-{uid}", f"{self.path}/{name}, {user_name(uid)}'s, cannot be read: that sweep "
                                               "is not seen from here (another version of sweeper wrote it?)")
            return None, -1
        except OSError:
            return None, -1
        try:
            with os.fdopen(fd) as f:
                uid = os.fstat(fd).st_uid
                return Entry.from_json(f.read(MAX_BYTES)), uid
        except (OSError, UnicodeDecodeError):
            return None, -1

    def _lives(self, folder: int, stem: str, entry: Entry) -> bool | None:
        """Whether a record's writer lives: True, False (gone), or None (cannot be told: skipped, kept)."""
        held = _held(folder, f"{stem}.life", entry.uid)
        if held is False or entry.life.boot != boot_id():
            return False
        state = entry.life.state()
        if state is False:
            return False
        if state is None and not entry.life.here():  # another namespace: its lock alone tells
            return held
        who = owner(entry.life.pid) if state else None
        if who is not None and who[0] != entry.uid:  # a live process of another user: not its writer
            return None
        return True

    def _clear(self, folder: int, stem: str, uid: int) -> None:
        """A dead writer's files removed, where they are this user's (another's stay, read and skipped)."""
        if uid != self.uid:
            return
        for name in (f"{stem}.json", f"{stem}.life"):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)

    def _tidy(self, folder: int, names: set[str]) -> None:
        """This user's leftovers of dead writers: a lock file with no record, a temporary file."""
        for name in names:
            stem = name.split(".", 1)[0]
            if (not stem.startswith(f"{self.uid}-") or stem == self.stem or f"{stem}.json" in names
                    or not name.endswith((".tmp", ".life")) or _held(folder, f"{stem}.life", self.uid)):
                continue  # (a writer that holds its lock is publishing its first record)
            with contextlib.suppress(OSError):
                if os.stat(name, dir_fd=folder, follow_symlinks=False).st_uid == self.uid:
                    os.unlink(name, dir_fd=folder)


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _held(folder: int, name: str, uid: int) -> bool | None:
    """Whether a writer holds its ``.life`` file's lock: True, False (nobody: it is gone), or
    None (no such file of that user's, or it cannot be opened: cannot be told)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _OPEN, dir_fd=folder)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid != uid:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            return True if exc.errno in (errno.EAGAIN, errno.EACCES) else None
        return False
    finally:
        os.close(fd)


def _holder(fd: int) -> int | None:
    """The pid that holds the flock on ``fd``'s file, as ``/proc/locks`` names it (None: unnamed)."""
    st = os.fstat(fd)
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split()
        if "->" in words or len(words) < 6 or words[1] != "FLOCK":
            continue
        try:
            major, minor, ino = words[5].split(":")
            if (int(major, 16), int(minor, 16), int(ino)) == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino):
                return int(words[4])
        except ValueError:
            continue
    return None


def _named(pid: int) -> str:
    """A process in words: pid, user and command where ``/proc`` tells them."""
    who = owner(pid)
    words = ", ".join(w for w in (who[1] if who else "", command(pid)) if w)
    return f"pid {pid}" + (f" ({words})" if words else "")
