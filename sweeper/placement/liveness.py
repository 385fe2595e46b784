"""Whether a process that wrote a record is still the one that wrote it.

A pid alone is not an identity: once a process is gone its number is given to the next
process that asks for one, and after a reboot every number starts over. So a record names
its writer by three things, each read from ``/proc``: its pid, the moment it started (field
22 of ``/proc/<pid>/stat``, in clock ticks since the machine booted) and the machine's boot
(``/proc/sys/kernel/random/boot_id``, new at every boot). The writer lives while a process
of that pid started at that tick of that boot and is no zombie; anything else (it exited, was
SIGKILLed or taken by the OOM killer, the machine rebooted) is dead, whatever wrote the
record last. Reading ``/proc/<pid>/stat`` needs no permission: another user's process is
told alive or dead alike.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

_BOOT: str | None = None


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


@dataclass(frozen=True)
class Life:
    """A process as it names itself in a record: pid, start tick and boot."""

    pid: int
    start: int
    boot: str

    @classmethod
    def of(cls, pid: int | None = None) -> "Life":
        """This process (or ``pid``) now."""
        pid = pid or os.getpid()
        return cls(pid, started(pid) or 0, boot_id())

    def alive(self) -> bool:
        """Whether the process this names still runs (not a later one of the same pid)."""
        if self.boot != boot_id():
            return False
        fields = _stat(self.pid)
        return fields is not None and fields[:1] != ["Z"] and started(self.pid) == self.start


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
            words = [w.decode("utf-8", "replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return ""
    text = " ".join(words)
    return text if len(text) <= width else text[:width - 1] + "…"
