"""How a trial's process is launched: a fork of the sweep's fork server (:mod:`.server`)
once it has imported, else a spawn process; and the fallback to spawn, for the rest of
the sweep, whenever forking cannot be trusted.

The server starts with the first trial (a sweep with nothing to run starts none), after
the Python is checked (:func:`sweeper.backends.local.internals.refusal`). While it imports,
trials wait for it (at most ``SERVER_WAIT_S``). Spawn from then on, said in one line, when:
the Python is untested, the server cannot start or be used (its probe fork,
:func:`sweeper.child.preload.probe`, failed; on a GPU machine it also pins a card: a
hang, an error, a framework that sees no GPU in a fork, or memory the server holds on a
card after it), it dies, it imports for too long, or the
watchdog fires.

The watchdog: forking a process that has threads is safe only while none of them holds a
lock the child needs. A fork that has not reached ``train`` ``FORK_WATCHDOG_S`` after it
was handed its trial, and that has stopped computing, reads and writes nothing and sleeps
on a lock (:meth:`Launcher.stuck`), is taken for deadlocked: killed, a line in its trial's log says why (``WATCHDOG_MARK``), and its trial
runs again in a spawn process (:func:`rescue`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time
from typing import Any, Iterable, Sequence

from sweeper.backends.local.internals import refusal
from sweeper.backends.local.process import REAP_WAIT_S, Proc, join
from sweeper.backends.local.server import ForkServer
from sweeper.backends.local.standby import Spare, Standbys, spawn
from sweeper.child import bootstrap
from sweeper.model import contract
from sweeper.model.target import FileTarget, Target
from sweeper.placement.slots import Slot
from sweeper.system import procs

log = logging.getLogger("sweeper")

#: Seconds a forked trial may take from being handed its trial to calling ``train``: a fork
#: has everything imported, so it takes well under a second (a GPU's first ``cuInit`` a few).
#: Past this it is taken for deadlocked (a lock some thread held when the server forked):
#: killed, and its trial runs in a spawn process; the rest of the sweep uses spawn.
FORK_WATCHDOG_S = 30.0
#: Seconds trials wait for the fork server's import before they start as spawn processes.
SERVER_WAIT_S = 300.0
#: A fork not in train yet that used less CPU than this share of the watchdog's period
#: since its last look is taken for deadlocked.
STUCK_CPU = 0.05
#: The first words of the line a watchdog rescue writes into the trial's log.
WATCHDOG_MARK = "sweeper: fork watchdog:"


class Launcher:
    """Starts the sweep's worker processes, forks while forking can be trusted; holds the
    fork server."""

    def __init__(self, target: Target, tag: str, start_method: str, timeout: float | None,
                 early: ForkServer | None = None) -> None:
        self.target = target
        #: a server the CLI started before it read the grid file (:func:`early_server`): used if
        #: the sweep's slots want the environment it started with, else stopped
        self.early = early
        self.tag = tag
        #: A fork that has not reached train is looked at this long after it was handed its
        #: trial: before the trial's timeout could pass, however short.
        self.watch_s = min(FORK_WATCHDOG_S, timeout / 2) if timeout else FORK_WATCHDOG_S
        self.spawn_ctx = multiprocessing.get_context("spawn")
        self.fork_ctx = multiprocessing.get_context("forkserver")
        self.server: ForkServer | None = None
        self.no_forks = start_method != "forkserver"  #: spawn only (asked, or after a fallback)

    def open_server(self, slots: Sequence[Slot], pool: Standbys, running: Iterable[Proc]) -> None:
        """Start the fork server, if forks are wanted and it was not started yet."""
        if not self.no_forks and self.server is None:
            refused = refusal()  # multiprocessing's private names: untested here
            if refused is not None:
                self.stop_forking(refused, pool, running)
                return
            env, probe = common_env(slots), probe_env(slots)
            early, self.early = self.early, None
            if early is not None and early.fits(env, probe):
                self.server = early  # failed or dead: said below, and no second server tried
            else:  # now, not before: a sweep with nothing to run starts no server (its import)
                if early is not None:
                    early.stop()
                self.server = ForkServer(self.fork_ctx, preload_of(self.target), self.tag, env, probe)
            if self.server.state in ("failed", "dead"):
                self.stop_forking(self.server.why, pool, running)

    def close(self) -> None:
        """The sweep ends: its server ends, and one started early that it never used."""
        for server in (self.server, self.early):
            if server is not None:
                server.stop()
        self.early = None

    def starting(self) -> bool:
        """The server's import is under way (trials wait for it)."""
        return not self.no_forks and self.server is not None and self.server.state == "starting"

    def new_process(self, slot: Slot, standby: bool = False) -> Spare:
        """Start a worker process for a slot, with the slot's GPU and cap in its environment:
        a fork of the fork server once it is ready, else a spawn process."""
        forked = not self.no_forks and self.server is not None and self.server.serving()
        if forked:
            try:
                return self._start(slot, standby, forked=True)
            except (EOFError, OSError):  # it died just now: spawned instead; settled() says so
                pass
        return self._start(slot, standby, forked=False)

    def _start(self, slot: Slot, standby: bool, forked: bool) -> Spare:
        boot = bootstrap.Boot(os.getpid(), self.target, slot.env, standby, check_ppid=not forked,
                              warm=tuple(preload_of(self.target)) if standby and not forked else ())
        env = {**slot.env, contract.SWEEP: self.tag}
        sb = spawn(self.fork_ctx if forked else self.spawn_ctx, boot, env, f"sweeper-slot{slot.index}")
        sb.forked = forked
        return sb

    def settled(self, ready: set[Any], waiting: bool, pool: Standbys, running: Iterable[Proc]) -> bool:
        """The fork server's import ended (or it died, or is too slow): True when trials
        waiting for it (``waiting``) are to start now."""
        server = self.server
        if server is None:
            return False
        if server.check(ready) and server.state in ("failed", "dead"):
            self.stop_forking(server.why, pool, running)  # also once spawning already: it was still seen
        elif self.no_forks:
            return False
        elif server.state == "starting" and waiting and time.monotonic() - server.started >= SERVER_WAIT_S:
            self.stop_forking(f"the fork server has not imported train's module after {SERVER_WAIT_S:.0f} s",
                              pool, running)
        elif server.state == "starting":
            return False
        return True

    def stop_forking(self, why: str, pool: Standbys, running: Iterable[Proc]) -> None:
        """Spawn from now on: close forked standbys, end the server."""
        if not self.no_forks:  # slower from now on, never wrong: said once
            log.warning("sweeper: %s; trials start in fresh spawn processes", why)
        elif self.server is not None and self.server.state == "dead":
            log.warning("sweeper: %s", why)
        self.no_forks = True
        for sb in [sb for sb in pool.all() if sb.forked]:
            pool.drop(sb)
        # A fork's exit code comes through the server: while forks run, it stays (to close()).
        if self.server is not None and not any(p.forked for p in running):
            self.server.stop()

    def stuck(self, p: Proc, now: float) -> bool:
        """A fork not in train yet, looked at by the watchdog: stuck if since the last look it
        used almost no CPU, read and wrote nothing, and its main thread sleeps on a lock (a
        deadlock). One still importing the user's module computes, one that waits on a
        slow disk, a socket or a sleep at the module's top waits elsewhere: looked at again
        later (its trial's --timeout still holds). Where /proc cannot tell, the time decides."""
        stuck, p.cpu_s, p.io = stalled(p.process.pid, p.cpu_s, p.io, self.watch_s)
        if not stuck:
            p.watch_at = now + self.watch_s
        return stuck


def stalled(pid: int, cpu_s: float, io: int | None, window: float) -> tuple[bool, float, int | None]:
    """Whether a forked process stopped getting on (:meth:`Launcher.stuck`), given the CPU
    seconds and I/O it had used ``window`` s ago; and what it has used now, for the next look."""
    cpu, now_io, on_lock = procs.cpu_seconds(pid), procs.io_chars(pid), procs.waits_on_lock(pid)
    if cpu is None and now_io is None and on_lock is None:
        return True, cpu_s, io
    computing = cpu is not None and cpu - cpu_s >= STUCK_CPU * window
    moving = now_io is not None and io is not None and now_io != io
    if computing or moving or on_lock is False:
        return False, cpu if cpu is not None else cpu_s, now_io
    return True, cpu_s, io


def watched(p: Proc) -> bool:
    """A fork the watchdog looks at: not in train yet, no result, not cancelled."""
    return p.forked and not p.fn_started and not p.has_result and not p.cancelled


def rescue(p: Proc) -> str:
    """A forked trial has not reached train and stopped computing: take it for
    deadlocked, kill it, say why in its log; returns why. (Its trial then goes to a spawn
    process, Began again: :class:`sweeper.backends.local.backend.LocalBackend`.)"""
    pid, spec = p.process.pid, p.spec
    why = (f"its forked process (pid {pid}) had not reached train {time.monotonic() - p.handed:.0f} s after "
           "it was handed the trial, and was not computing (a lock held when the fork server forked?); it "
           "was killed and the trial runs again in a fresh spawn process, as do the rest of the sweep's "
           "trials")
    procs.kill_group_and_tree(pid, signal.SIGKILL)
    join(p.process, p.exit_fd, REAP_WAIT_S)
    try:
        os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
        with open(spec.log_path, "a") as f:
            f.write(f"{WATCHDOG_MARK} {why}\n")
    except OSError:
        pass
    return why


def preload_of(target: Target) -> list[str]:
    """What the fork server may import ahead for ``target`` (candidates; the server keeps
    the installed ones): the grid file's imports, noted where it was read, or the modules
    that ``train``'s module (imported here already) holds."""
    from sweeper.system import modules

    if isinstance(target, FileTarget):
        return list(target.preload)
    return modules.needed_by(sys.modules.get(target.module)) if target.module else []


def probe_env(slots: Sequence[Slot]) -> dict[str, str] | None:
    """The environment the fork server's probe fork takes on a GPU machine: a GPU slot's (its
    card pinned: the sweep's card with the most free memory) with a cap of
    ``capping.PROBE_CAP_MB``, as a packed trial's cap is given
    (:func:`sweeper.system.capping.trial_env`); None on the CPU."""
    on_gpus = [s for s in slots if s.gpu is not None]
    if not on_gpus:
        return None
    from sweeper.system import capping, gpus

    cards = {g.uuid: g for g in gpus.inventory()}
    # the sweep's card with the most free memory: a busy one would fail the probe by its neighbours
    slot = max(on_gpus, key=lambda s: cards[s.uuid].free_mb if s.uuid in cards else -1)
    env = {k: v for k, v in slot.env.items() if k != contract.SLOT}
    total = cards[slot.uuid].total_mb if slot.uuid in cards else None
    if total:
        env.update(capping.trial_env(capping.PROBE_CAP_MB, total))
    else:  # NVML cannot tell the card's size: TensorFlow's cap alone
        env[contract.MEMORY_LIMIT_MB] = str(capping.PROBE_CAP_MB)
    return env


def common_env(slots: Sequence[Slot]) -> dict[str, str]:
    """What every slot's environment sets alike (thread counts, device order): the fork
    server starts with it, as variables a framework reads at import must be set by then.
    What differs per slot (the GPU, the cap, the slot's number) each fork sets itself."""
    envs = [s.env for s in slots]
    common = dict(envs[0]) if envs else {}
    for env in envs[1:]:
        common = {k: v for k, v in common.items() if env.get(k) == v}
    common.pop(contract.SLOT, None)
    return common


def early_server(path: str, tag: str, slots: Sequence[Slot]) -> ForkServer | None:
    """A fork server started before the CLI reads its grid file: it imports the installed
    modules the grid file's own import statements name (:func:`sweeper.system.modules.imports_in`),
    and the grid reader is then a fork of it (:func:`sweeper.front.gridfile.read`), so the
    framework is imported once before the first trial, not twice side by side. ``slots``:
    the command line's (the :class:`Launcher` uses it only where the sweep's are alike).
    None where forks cannot be used here."""
    from sweeper.system import modules

    if refusal() is not None:
        return None
    server = ForkServer(multiprocessing.get_context("forkserver"), modules.imports_in(path), tag,
                        common_env(slots), probe_env(slots))
    if server.state == "failed":
        server.stop()
        return None
    return server
