"""Whether a process that wrote a record is still the one that wrote it, as ``/proc`` tells.

A pid alone is not an identity: once a process is gone its number is given to the next
process that asks for one, and after a reboot every number starts over. So a record names
its writer by four things: its pid, the moment it started (field 22 of ``/proc/<pid>/stat``,
in clock ticks since the machine booted), the machine's boot
(``/proc/sys/kernel/random/boot_id``, new at every boot) and its pid namespace (the inode of
``/proc/self/ns/pid``: a pid means something only in its own namespace). Where ``/proc``
shows the process, it lives while a process of that pid started at that tick of that boot
and is no zombie. ``/proc`` may hide other users' processes (``hidepid``): then ``kill(pid,
0)`` says whether some process of that pid exists (``EPERM``: it does), not whether it is
the writer; :class:`sweeper.placement.machine.Machine` asks the writer's lifetime lock
first, which needs no ``/proc`` at all.
"""

from __future__ import annotations

import errno
import os
import pwd
from dataclasses import dataclass

from sweeper.model.text import printable

_BOOT: str | None = None
_NS: int | None = None


def boot_id() -> str:
    """This boot's id ("" where the kernel does not tell it)."""
    global _BOOT
    if _BOOT is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _BOOT = f.read().strip()
        except OSError:
            _BOOT = ""
    return _BOOT


def namespace() -> int:
    """This process's pid namespace, as the inode of ``/proc/self/ns/pid`` (0 where unreadable)."""
    global _NS
    if _NS is None:
        try:
            _NS = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            _NS = 0
    return _NS


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def started(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None: no such process)."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else None  # field 22 of proc_pid_stat(5)
    except (IndexError, ValueError):
        return None


def exists(pid: int) -> bool:
    """Whether some process of this pid exists, without ``/proc`` (``kill(pid, 0)``: ``EPERM``
    is another user's process, alive)."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


@dataclass(frozen=True)
class Life:
    """A process as it names itself in a record: pid, start tick, boot and pid namespace."""

    pid: int
    start: int
    boot: str
    ns: int  #: its pid namespace (:func:`namespace`): a pid means this process only there

    @classmethod
    def of(cls, pid: int | None = None) -> "Life":
        """This process (or ``pid``) now."""
        pid = pid or os.getpid()
        return cls(pid, started(pid) or 0, boot_id(), namespace())

    def here(self) -> bool:
        """Whether its pid means the same process here: the same boot, the same pid namespace."""
        return self.boot == boot_id() and self.ns == namespace()

    def state(self) -> bool | None:
        """Whether the process this names still runs, as ``/proc`` tells it: True, False (it
        is gone, a zombie, a later process of the same pid, or of a previous boot), or None
        where it cannot be told: ``/proc`` hides it (``hidepid``) while a process of that pid
        exists, or it lives in another pid namespace."""
        if self.boot != boot_id():
            return False
        if self.ns != namespace():  # its pid names another process here, or none
            return None
        fields = _stat(self.pid)
        if fields is None:
            return None if exists(self.pid) else False
        return fields[:1] != ["Z"] and started(self.pid) == self.start

    def alive(self) -> bool:
        """Whether the process this names still runs, by ``/proc`` alone (one it hides: alive)."""
        return self.state() is not False


def parent(pid: int) -> int | None:
    """The pid of ``pid``'s parent (None: gone)."""
    fields = _stat(pid)
    try:
        return int(fields[1]) if fields else None  # field 4 of proc_pid_stat(5)
    except (IndexError, ValueError):
        return None


def lineage(pid: int, depth: int = 8) -> list[int]:
    """``pid`` and its ancestors, nearest first, up to ``depth`` of them (init not included)."""
    out = [pid]
    while len(out) <= depth:
        up = parent(out[-1])
        if not up or up == 1:
            break
        out.append(up)
    return out


def owner(pid: int) -> tuple[int, str] | None:
    """(uid, user name) of a live process, from ``/proc`` (None: gone)."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    return uid, user_name(uid)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def command(pid: int, width: int = 80) -> str:
    """A process's command line as ``ps`` shows it, cut to ``width`` ("" where unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return said_command(f.read(), width)
    except OSError:
        return ""


def said_command(cmdline: bytes, width: int = 80) -> str:
    """A ``/proc/<pid>/cmdline`` as one line: its words, control characters escaped (a
    newline or an escape sequence in an argument would break the line), cut to ``width``."""
    text = printable(" ".join(w.decode("utf-8", "replace") for w in cmdline.split(b"\0") if w))
    return text if len(text) <= width else text[:width - 1] + "…"
