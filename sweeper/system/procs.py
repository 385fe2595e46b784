"""Finding everything a trial started, so that none of it outlives the trial.

A trial leads its own process group, and killing the group ends what stayed in it. A
daemon escapes the group: it double-forks and calls ``setsid``, and its parent exits, so
it is re-parented and leads a session of its own. Two things bring it back within reach:

* the sweep's process is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``, Linux) while
  trials run: an orphan anywhere below it is re-parented to it, not to init;
* every trial process starts with ``SWEEPER_SWEEP`` (this sweep's tag) and ``SWEEPER_SLOT``
  in its environment, which forks and execs inherit, so an adopted orphan is attributed
  to this sweep and to the slot whose trial made it. ``/proc/<pid>/environ`` shows the
  environment a process was *started* with: a fork of the fork server shows the server's,
  so the server starts with a placeholder slot (``SLOT_PLACEHOLDER``) that each fork
  overwrites in place with its own (:func:`tag_slot`) before the trial's code runs; its
  forks copy that memory, and whatever it execs gets ``os.environ``, slot included.

So a trial is stopped by signalling its group, every process below its own (a live
tree, walked through ``/proc``) and every adopted orphan of its slot. Linux only; on
other systems the group kill alone remains.

A sweep that is itself killed (SIGKILL, the OOM killer) ends nothing: its *guardian* does
(:func:`guarded`), a small process in a session of its own that waits for the sweep's end
on a pipe and then kills every process that carries the sweep's tag, wherever it was
re-parented. Should the guardian be killed too, the next run of the same sweep ends them
(:func:`end_tagged`, with the tag the folder's lock file kept).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from typing import Iterable, Iterator

from sweeper.model import contract

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: The fork server's slot: room for a fork to write its own slot into (:func:`tag_slot`).
SLOT_PLACEHOLDER = "-" * 12


def tag_slot(slot: str) -> bool:
    """In a fork of the fork server: make ``/proc/self/environ`` (and so that of every fork
    of this process) show ``SWEEPER_SLOT=<slot>``, by writing it over the placeholder the
    server started with, in the memory that file shows. False where that cannot be done."""
    key = f"{contract.SLOT}={SLOT_PLACEHOLDER}".encode()
    value = slot.encode().ljust(len(SLOT_PLACEHOLDER), b" ")
    if len(value) > len(SLOT_PLACEHOLDER):
        return False
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        env_start, env_end = int(fields[47]), int(fields[48])  # fields 50, 51 of proc_pid_stat(5)
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except (OSError, IndexError, ValueError):
        return False
    if not env_start or env_end - env_start != len(block):  # not the memory that file shows
        return False
    if block.startswith(key + b"\0"):
        at = 0
    else:
        at = block.find(b"\0" + key + b"\0") + 1
        if at == 0:
            return False
    ctypes.memmove(env_start + at + len(contract.SLOT) + 1, value, len(value))
    return True


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (empty when it is gone or /proc cannot tell)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children."""
    seen: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.append(child)
        todo += children(child)
    return seen


def tags(pid: int) -> dict[str, str]:
    """The sweep and slot tags a process was started (or exec'd) with."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return {}
    out = {}
    for item in env.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key in (contract.SLOT.encode(), contract.SWEEP.encode()):
            out[key.decode()] = value.decode(errors="replace").rstrip()
    return out


def strays(sweep_tags: Iterable[str], slot: int | None, known: Iterable[int]) -> list[int]:
    """Orphans adopted by this process that came from this sweep (one of ``sweep_tags``):
    from a trial of ``slot``, or from any of its trials if ``slot`` is None; each with
    everything below it. ``known`` are this process's own workers, never strays."""
    skip, mine = set(known), set(sweep_tags)
    out: list[int] = []
    for child in children(os.getpid()):
        if child in skip:
            continue
        tag = tags(child)
        if tag.get(contract.SWEEP) not in mine:
            continue
        if slot is not None and tag.get(contract.SLOT) != str(slot):
            continue
        out += [child, *descendants(child)]
    return out


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process has used (all its threads), or None if /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


def io_chars(pid: int) -> int | None:
    """Bytes a process has read and written through any call (all its threads: ``rchar`` and
    ``wchar`` of ``/proc/<pid>/io``), or None if /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/io") as f:
            counts = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        return int(counts["rchar"]) + int(counts["wchar"])
    except (OSError, KeyError, ValueError):
        return None


#: The futex system call's number, where ``/proc/<pid>/wchan`` does not name the wait.
_FUTEX = {"x86_64": 202, "aarch64": 98}


def waits_on_lock(pid: int) -> bool | None:
    """Whether the main thread of a process sleeps on a lock (a futex): how a deadlocked
    fork waits, where one that sleeps, reads a file or a socket waits elsewhere, and one
    that runs, or waits for a core on a busy machine, waits on nothing. None if /proc
    cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "R":  # running, or runnable
                return False
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
        if wchan and wchan != "0":
            return "futex" in wchan
        with open(f"/proc/{pid}/syscall") as f:
            call = f.read().split()[0]
    except (OSError, IndexError):
        return None
    if call == "running":  # it ran between the two reads
        return False
    futex = _FUTEX.get(os.uname().machine)
    if futex is None or not call.lstrip("-").isdigit():  # an unknown machine
        return None
    return int(call) == futex


def end_strays(sweep_tags: Iterable[str], wait: float = 5.0) -> None:
    """Kill the orphans of these sweeps that came back to this process, and reap them."""
    tags = set(sweep_tags)
    if not tags:
        return
    left = strays(tags, None, ())
    signal_all(left, signal.SIGKILL)
    reap(left, wait=wait)


def zombies(pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` that have exited and wait to be reaped."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            out.append(pid)
    return out


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap(pids: Iterable[int], wait: float = 0.0) -> set[int]:
    """Collect adopted orphans that have exited, so none stays a zombie; waits at most
    ``wait`` seconds for them. Returns those of this process's children still running
    (pids that are not its children, or no longer exist, are dropped)."""
    import time

    left = set(pids)
    deadline = time.monotonic() + wait
    while True:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except (ChildProcessError, OSError):
                done = pid
            if done:
                left.discard(pid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Make this process the child subreaper of everything below it while the block runs."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        old = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(old), 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        yield
        return
    try:
        yield
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, old.value, 0, 0, 0)


def kill_group_and_tree(leader: int, sig: int = signal.SIGKILL) -> None:
    """Signal a process group led by ``leader`` and every process below ``leader``."""
    below = descendants(leader)
    try:
        os.killpg(leader, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leader, sig)
    except PermissionError:
        pass
    signal_all(below, sig)


@contextlib.contextmanager
def environ(extra: dict[str, str]) -> Iterator[None]:
    """Set variables for a child about to be spawned (it copies them when it starts)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def leave_signals_to_the_main_thread() -> None:
    """Called first in a thread of the sweep's process: Ctrl-C, SIGTERM and SIGHUP are the main
    thread's (Python runs their handlers there anyway). Blocked here, a signal sent to the
    process while the main thread holds it back (as it does while it starts a child) waits
    for the main thread, instead of landing here and being lost."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def new_tag() -> str:
    """A tag for one sweep's processes (``SWEEPER_SWEEP``), unique on this machine."""
    return f"{os.getpid()}-{os.urandom(4).hex()}"


def tagged(tag: str) -> list[int]:
    """Every process of this machine (that this user may look at) started with the sweep
    tag ``tag``, this one excepted."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and tags(int(entry)).get(contract.SWEEP) == tag:
            out.append(int(entry))
    return out


def end_tagged(tag: str, rounds: int = 5) -> list[int]:
    """Kill every process started with the tag ``tag`` (again while a dying one's children
    appear); the pids killed."""
    import time

    ended: list[int] = []
    for _ in range(rounds):
        left = [pid for pid in tagged(tag) if pid not in ended or not _gone(pid)]
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        ended += [pid for pid in left if pid not in ended]
        time.sleep(0.05)  # a process killed between its fork and its child's exec: once more
    return ended


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@contextlib.contextmanager
def guarded(tag: str) -> Iterator[None]:
    """While the block runs, a guardian watches this process: once it ends, however (a
    SIGKILL too), the guardian kills whatever still carries ``tag``, then ends itself. It
    runs in a session of its own (no terminal's Ctrl-C or hang-up reaches it); on a normal
    end it is waited for, so it never outlives the sweep either."""
    read, write = os.pipe()  # not inherited by what this process starts (O_CLOEXEC)
    env = {k: v for k, v in os.environ.items() if k not in (contract.SWEEP, contract.SLOT)}
    try:
        guardian = subprocess.Popen([sys.executable, "-c", "from sweeper.system.procs import guard; guard()", tag],
                                    stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True, env=env)
    except OSError:  # no guardian: the next run of the sweep still ends what is left
        guardian = None
    finally:
        os.close(read)
    try:
        yield
    finally:
        os.close(write)
        if guardian is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                guardian.wait(timeout=30)


def guard() -> None:
    """The guardian's body (:func:`guarded`): wait for the sweep's end, then end its tag."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    end_tagged(sys.argv[1])
