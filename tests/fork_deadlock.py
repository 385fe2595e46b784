"""A module that deadlocks forks made after it is imported, as a library does that holds a
lock in a thread of its own now and then when the process forks (the case the fork
watchdog is for).

At import a thread takes ``_lock`` and keeps it. In a sweep's processes (the fork server,
a trial) ``os.register_at_fork`` makes every fork but the first (the fork server's probe,
which this lock happens to miss) take ``_lock`` first thing: in such a fork the thread is
gone and the lock stays taken, so the child never reaches ``train``. A spawned process
imports this afresh (its own thread, its own lock) and never forks, so there ``train``
runs. Each process that imports it appends its pid to ``$FORK_DEADLOCK_MARKS`` (if set).
"""

import os
import threading
import time

_lock = threading.Lock()
_held = threading.Event()


def _hold() -> None:
    with _lock:
        _held.set()
        while True:
            time.sleep(3600)


threading.Thread(target=_hold, daemon=True).start()
_held.wait()
_forks = [0]


def _in_child() -> None:
    _forks[0] += 1  # the child's copy counts the forks before it, plus itself
    if _forks[0] > 1:
        _lock.acquire()


def _in_parent() -> None:
    _forks[0] += 1


if os.environ.get("SWEEPER_SWEEP"):  # only in a sweep's processes, never in the test's own
    os.register_at_fork(after_in_child=_in_child, after_in_parent=_in_parent)

if os.environ.get("FORK_DEADLOCK_MARKS"):
    with open(os.environ["FORK_DEADLOCK_MARKS"], "a") as f:
        f.write(f"{os.getpid()}\n")


def train(params):
    return {"value": float(params["x"]), "pid": os.getpid(), "ppid": os.getppid()}
