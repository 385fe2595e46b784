"""The local backend: one fresh process per trial on this machine, watched until it is gone.

Why not a pool: the stdlib ``Pool`` hangs for ever when a worker is killed, and
``ProcessPoolExecutor`` fails every running task when one process dies. Here each trial
has its own process, a fork of the sweep's fork server (which imported the user's module
once; :mod:`.server`) or a ``spawn`` process; its death is seen through a pidfd and judged
alone, so one trial's segfault is that trial's ``crashed`` row and nothing else. Processes
are not daemonic (a trial may start its own workers), so this backend kills whatever is
left of each trial's process group, and of its descendants, itself, on every way out.

The parts, each a module (lower ones never import higher ones)::

    backend    LocalBackend: the Backend protocol's methods, tying the parts together
      ├─ fork      the launcher: a fork of the server or a spawn process; the fallback to
      │            spawn; the watchdog for a fork that never reaches train; the preload list
      │    └─ server     the fork server of one sweep (multiprocessing's forkserver, made to fit)
      ├─ standby   Spare (a process before its trial), and the standby pool: how many, by
      │            idle cores and memory (sweeper.system.headroom)
      ├─ reaper    the subreaper: a trial's orphans found (/proc), ended and reaped
      ├─ process   a trial's process (Proc), its pipe's messages, pidfds, join
      └─ internals every use of multiprocessing's private names; the Pythons they were tested on
"""

from __future__ import annotations

from sweeper.backends.local.backend import LocalBackend
from sweeper.backends.local.fork import WATCHDOG_MARK
from sweeper.backends.local.process import join
from sweeper.backends.local.standby import Spare, spawn

__all__ = ["LocalBackend", "Spare", "WATCHDOG_MARK", "join", "spawn"]
