"""A trial's peak resident host memory (``mem_peak_mb``), over its whole process tree.

Two measurements, the larger recorded (:func:`peak`):

* the parent samples each running trial's tree (:class:`HostSampler`, with the GPU
  sampler's period): the sum of the resident memory of the trial's process and of every
  process below it (a command trial's script, a ``train``'s workers), as ``/proc`` shows
  it; a peak shorter than the period can fall between two samples;
* the trial's process measures its own high-water mark when ``train`` returns
  (:func:`own_peak_mb`, the kernel's ``ru_maxrss`` of the process and of the largest
  child it waited for): exact for one process, sent with its result, so a trial shorter
  than the period is measured too. A trial that dies without a result has the samples
  alone.

Resident memory counts the pages a process shares: a fork of the fork server counts the
libraries the server imported (shared by every fork, copied only when written), so the
figure is what the trial had in memory, not what it alone added. Linux; elsewhere the
samples are empty and the own measure is taken as the platform reports it.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Iterable

from . import procs

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MB = 1 << 20


def rss_mb(pids: Iterable[int]) -> int | None:
    """The resident memory of these processes together, MB (None: none could be read)."""
    total, seen = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
            seen = True
        except (OSError, IndexError, ValueError):
            continue
    return round(total / _MB) if seen else None


def own_peak_mb() -> int:
    """This process's peak resident memory, or that of the largest child it waited for if
    larger, MB (``ru_maxrss``: kilobytes on Linux, bytes on macOS)."""
    unit = 1 if sys.platform == "darwin" else 1024
    most = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return round(most * unit / _MB)


def peak(*measured: int | None) -> int | None:
    """The largest of the measurements taken (None: none was)."""
    known = [m for m in measured if m is not None]
    return max(known) if known else None


class HostSampler:
    """Peak resident memory per running trial, over its process tree, sampled by the parent."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}  #: trial pid -> most MB its tree held at one sample

    def sample(self, pids: Iterable[int]) -> None:
        for pid in pids:
            held = rss_mb([pid, *procs.descendants(pid)])
            if held is not None and held > self.peaks.get(pid, -1):
                self.peaks[pid] = held
