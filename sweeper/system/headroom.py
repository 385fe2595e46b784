"""Headroom, measured: whether this machine can afford one more process importing now.

Standby processes (:mod:`sweeper.backends.local`) import ``train``'s module (TensorFlow:
seconds of one core) while trials run. One per busy slot always pays off; more pay off only
when cores are idle (trials that sleep, wait on a GPU or on I/O), and would steal time from
trials that use the CPU. So the backend asks :class:`IdleCpu` how many cores were idle
since it last asked:

* the cores this process may run on (``sched_getaffinity``), from ``/proc/stat``: the
  whole machine counts, colleagues' jobs included;
* capped by the cgroup's CPU quota where one is set (``cpu.max``, a container's limit),
  less what the cgroup used (``cpu.stat``).

Where neither can be read (not Linux), it says None and no extra standby starts. Memory
counts too: :func:`available_mb` (``MemAvailable``), so standbys never crowd out trials.
"""

from __future__ import annotations

import os
import time

#: Seconds a measurement spans at least; shorter spans are noise.
WINDOW_S = 0.5


class IdleCpu:
    """Idle cores over the last window, refreshed when asked after ``WINDOW_S``."""

    def __init__(self) -> None:
        self._cpus = _allowed_cpus()
        self._last: tuple[float, float, float, float | None] | None = None  # t, idle, total, cgroup usage
        self.cores: float | None = None  #: idle cores in the last full window; None until one has passed
        self.measured_at = 0.0  #: monotonic, when ``cores`` was last refreshed
        self.sample()

    def sample(self) -> float | None:
        """Refresh ``cores`` when a window has passed since the last refresh; return it."""
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < WINDOW_S:
            return self.cores
        idle, total = _proc_stat(self._cpus)
        usage = _cgroup_usage_s()
        if self._last is not None and total > self._last[2]:
            t0, idle0, total0, usage0 = self._last
            share = (idle - idle0) / (total - total0)  # of the allowed cores' time
            cores = share * len(self._cpus)
            quota = _cgroup_quota()
            if quota is not None and usage is not None and usage0 is not None and now > t0:
                cores = min(cores, quota - (usage - usage0) / (now - t0))
            self.cores, self.measured_at = max(0.0, cores), now
        self._last = (now, idle, total, usage)
        return self.cores


def _allowed_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _proc_stat(cpus: set[int]) -> tuple[float, float]:
    """Idle (idle + iowait) and total jiffies of the given CPUs; (0, 0) if unreadable."""
    idle = total = 0.0
    try:
        with open("/proc/stat") as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                name, *fields = line.split()
                if int(name[3:]) not in cpus:
                    continue
                values = [float(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
                idle += values[3] + values[4]
                total += sum(values)
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    return idle, total


def _cgroup_quota() -> float | None:
    """Cores this cgroup may use (cgroup v2 ``cpu.max``), None when unlimited or unknown."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else float(quota) / float(period)
    except (OSError, ValueError):
        return None


def _cgroup_usage_s() -> float | None:
    usec = _number("/sys/fs/cgroup/cpu.stat", "usage_usec ")
    return None if usec is None else usec / 1e6


def _number(path: str, key: str) -> float | None:
    """The number after ``key`` on its line of a /proc or /sys file, None if not there."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_mb() -> float | None:
    """Memory the kernel could give without swapping (``MemAvailable``), None if unknown."""
    kb = _number("/proc/meminfo", "MemAvailable:")
    return None if kb is None else kb / 1024


def rss_mb(pid: int) -> float | None:
    """A process's resident memory, None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None
