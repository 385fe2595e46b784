"""A trial's peak resident host memory (``mem_peak_mb``), over its whole process tree.

Two measurements, the larger recorded (:func:`peak`):

* the parent samples each running trial's tree (:class:`HostSampler`, with the GPU
  sampler's period): the resident memory of the trial's process, plus what each process
  below it holds privately (a command trial's script, a ``train``'s workers: their pages
  shared with the trial, copied-on-write after a fork, are counted once, in the trial's);
  a peak shorter than the period can fall between two samples;
* the trial's process measures its own high-water mark from just before ``train`` to its
  return (:func:`reset_own_peak`, then :func:`own_peak_mb`: ``VmHWM``, and the kernel's
  ``ru_maxrss`` of the largest child it waited for), sent with its result, so a trial
  shorter than the period is measured too. A trial that dies without a result has the
  samples alone. The reset leaves out a peak of how the process was made (an import that
  allocated and freed).

Resident memory counts the pages a process has mapped, shared ones included, so the
figure is what the trial had in memory, not what it alone added; and it depends on how the
process was made: a fork of the fork server maps the libraries' pages it touches, while
the process that read a grid file (which runs a CLI sweep's first trial) has all of its
mapped: 752 MB against 394 MB for the same Keras example training. Linux (``/proc``);
elsewhere the samples are empty and the own measure is ``ru_maxrss`` as the platform
reports it.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Iterable

from sweeper.system import procs

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MB = 1 << 20


def _status_kb(pid: int | str, field: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``), None where unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field.encode() + b":"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def _private_bytes(pid: int) -> int | None:
    """What ``pid`` holds that no other process shares (``smaps_rollup``'s private pages)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.startswith((b"Private_Clean:",
                                                                                    b"Private_Dirty:")))
    except (OSError, IndexError, ValueError):
        return _rss_bytes(pid)  # an older kernel: its resident memory, shared pages and all


def tree_mb(pid: int, below: Iterable[int] = ()) -> int | None:
    """The resident memory of ``pid`` plus what each process in ``below`` holds privately,
    MB (None: ``pid`` could not be read)."""
    own = _rss_bytes(pid)
    if own is None:
        return None
    return round((own + sum(_private_bytes(q) or 0 for q in below)) / _MB)


def reset_own_peak() -> bool:
    """Start this process's high-water mark afresh at its present resident memory (Linux
    4.0 and later: ``/proc/self/clear_refs``); False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "wb") as f:
            f.write(b"5")
        return True
    except OSError:
        return False


def own_peak_mb() -> int:
    """This process's peak resident memory, or that of the largest child it waited for if
    larger, MB. On Linux the process's own is ``VmHWM``: ``ru_maxrss`` carries the
    high-water mark of the process that spawned this one across exec (a sweep whose
    parent once held 600 MB would give every spawned trial 600 MB)."""
    unit = 1 if sys.platform == "darwin" else 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * unit
    own_kb = _status_kb("self", "VmHWM")
    own = own_kb * 1024 if own_kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    return round(max(own, children) / _MB)


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup
    (v2 ``memory.events``, v1 ``memory.oom_control``: ``oom_kill N``), None where unreadable.
    A trial killed by SIGKILL while this count rose was, in all likelihood, one of them."""
    for path in _oom_files():
        try:
            with open(path, "rb") as f:
                for line in f:
                    if line.startswith(b"oom_kill "):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return None


def _oom_files() -> list[str]:
    """Where this process's memory cgroup counts OOM kills: its own folder, then the root of
    what this container sees (a namespaced cgroup shows itself as the root)."""
    places: list[str] = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":  # v2
                    places.append(f"/sys/fs/cgroup{path.rstrip('/')}/memory.events")
                elif "memory" in controllers.split(","):
                    places.append(f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control")
    except (OSError, ValueError):
        pass
    return [*places, "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]


def peak(*measured: int | None) -> int | None:
    """The largest of the measurements taken (None: none was)."""
    known = [m for m in measured if m is not None]
    return max(known) if known else None


class HostSampler:
    """Peak resident memory per running trial, over its process tree, sampled by the parent."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}  #: trial pid -> most MB its tree held at one sample
        self.now: dict[int, int] = {}  #: trial pid -> MB its tree held at the last sample

    def sample(self, pids: Iterable[int]) -> None:
        self.now = {}
        for pid in pids:
            held = tree_mb(pid, procs.descendants(pid))
            if held is not None:
                self.now[pid] = held
            if held is not None and held > self.peaks.get(pid, -1):
                self.peaks[pid] = held
