"""A trial in the engine: where it is (:class:`Phase`, moved only along :data:`MOVES`), its deadline (:class:`Due`), and what the engine gathered of it (:class:`TrialState`), from which the judge makes its row.

Deadlines, one per running trial, of four kinds (:class:`Due`):

* ``TIMEOUT``: ``timeout`` seconds after the trial reached its process (:class:`~sweeper.model.protocol.Began`,
  the same moment on both backends); then the trial is stopped (``timeout``) and cancelled;
* ``STALL``: ``stall`` seconds after its last sign of life (its start, an epoch report);
  then its log is looked at: written since, the deadline moves on from that write; else
  the trial is stopped (``stalled``) and cancelled. Whichever of these two comes first is
  the running trial's deadline;
* ``EXIT``: ``EXIT_GRACE`` after it sent its result, by when its process should be gone;
  then it is cancelled (its result stands);
* ``KILL``: ``TERM_GRACE`` after a cancel (SIGTERM locally), by when it should have
  stopped; then it is cancelled hard (SIGKILL to everything it started).

A trial is in one :class:`Phase` from its start to its end, moved only along :data:`MOVES`
(any other move is a bug in the engine, refused with :class:`PhaseError`)::

           ┌──────────── moved ◀─────────┐   Began again before train (the fork watchdog):
           ▼                             │   at once on to RUNNING, with a new clock
      STARTING ──────── Began ────────▶ RUNNING
           │                             │
           ├──────────▶ STOPPING ◀───────┤   cancel (SIGTERM): timeout, exit grace, pruned, Ctrl-C
           │               │             │
           │               ▼             │
           └──────────▶ KILLED ◀─────────┘   cancel hard (SIGKILL): the grace ran out, a second
                                             Ctrl-C (two at once: from STARTING or RUNNING)

      STARTING, RUNNING, STOPPING, KILLED ──── Exited ───▶ ENDED   its process is gone (or the
                                                                  backend closed): no move on
      RUNNING, STOPPING, KILLED ── Exited, the scheduler answered PAUSE ──▶ PAUSED   unrecorded
      PAUSED ── given again ──▶ STARTING (a fresh process)     PAUSED ── the sweep ends ──▶ ENDED

The phase says where a trial is, not how it ended: its result (which may come in any phase
before ``ENDED``) and the stop the engine asked for are what the judge reads. A trial
stopped before it began (its files could not be written) stays ``STARTING``: no clock.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from sweeper.model import contract, outcome
from sweeper.model.protocol import Began, Exited, Result
from sweeper.model.trial import EXIT_FIELDS, Status, TrialResult, TrialSpec
from sweeper.model.constraints import Constraints
from sweeper.store.paths import log_tail
from sweeper.system import hostmem

log = logging.getLogger("sweeper")

#: Seconds between a cancel (SIGTERM) and a hard cancel (SIGKILL) of a trial.
TERM_GRACE = 5.0
#: Seconds a process may take to exit after it sent its result.
EXIT_GRACE = 10.0


class Due(enum.Enum):
    """What happens when a trial's deadline passes."""

    TIMEOUT = "timeout"  #: it ran too long: stop it as ``timeout``, cancel it
    STALL = "stall"  #: no sign of life for ``stall`` seconds (if its log says none either): ``stalled``
    EXIT = "exit"  #: it sent its result but has not exited: cancel it
    KILL = "kill"  #: it was cancelled but has not stopped: cancel it hard


class Phase(enum.Enum):
    """Where a trial is, from its start to its end (the judge, not the phase, says how it
    ended); moved only along :data:`MOVES`."""

    STARTING = "starting"  #: started; its process has not begun (no clock yet)
    RUNNING = "running"  #: it reached its process (Began): its clock and timeout run
    STOPPING = "stopping"  #: cancelled (SIGTERM): cancelled hard if not gone after TERM_GRACE
    KILLED = "killed"  #: cancelled hard (SIGKILL): its end is due
    PAUSED = "paused"  #: the scheduler paused it and its process is gone: unrecorded, its place free
    ENDED = "ended"  #: its process is gone: judged and recorded (unless the sweep failed)

    @property
    def cancelled(self) -> bool:
        """Whether the engine has cancelled it (asked it to stop, or ended it hard)."""
        return self in (Phase.STOPPING, Phase.KILLED)


#: The moves a trial may make, from each phase (see the module's diagram).
MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.STARTING: frozenset({Phase.RUNNING, Phase.STOPPING, Phase.KILLED, Phase.ENDED}),
    Phase.RUNNING: frozenset({Phase.STARTING, Phase.STOPPING, Phase.KILLED, Phase.PAUSED, Phase.ENDED}),
    Phase.STOPPING: frozenset({Phase.KILLED, Phase.PAUSED, Phase.ENDED}),
    Phase.KILLED: frozenset({Phase.PAUSED, Phase.ENDED}),
    Phase.PAUSED: frozenset({Phase.STARTING, Phase.ENDED}),  # resumed in a fresh process, or the sweep ended
    Phase.ENDED: frozenset(),
}


class PhaseError(AssertionError):
    """A trial was moved where :data:`MOVES` does not allow: a bug in the engine, not in
    the sweep."""


@dataclass
class TrialState:
    """The engine's view of one running trial."""

    spec: TrialSpec
    started_at: str  #: ISO 8601, when it began in its process (as that process told it); "" until it did
    t0: float  #: monotonic; when it reached its process (from Began), else when started
    sign: float = 0.0  #: monotonic; its last sign of life (Began, an epoch report, a write to its log)
    phase: Phase = Phase.STARTING  #: where it is; moved by :meth:`to` only
    began: Began | None = None  #: where it was placed (once it began, or was stopped before)
    due: Due | None = None
    deadline: float | None = None
    stop: Status | None = None  #: the status the engine decided when it stopped it
    why: str = ""
    t1: float | None = None  #: monotonic; when its result came or it was stopped (its duration's end)
    result: Result | None = None
    early: TrialResult | None = None  #: its row, judged when its result arrived
    recorded: bool = False  #: that row is in the ledger (its exit only adds what it measured)
    pausing: str | None = None  #: why the scheduler paused it (its process is to leave, unrecorded)
    ran: float = 0.0  #: seconds it ran in its earlier processes (paused, then given again)
    segments: int = 1  #: the processes it was given to (paused, then given again: one more each time)
    reported: bool = False  #: sent per-epoch reports (then a returned History is not used)
    restarts: bool = False  #: its backend requeued it: its next Began starts it again, its start anew
    epoch: int | None = None  #: the last epoch it reported
    epoch_metrics: dict[str, Any] = field(default_factory=dict)  #: what it reported then

    def to(self, phase: Phase) -> None:
        """Move it to ``phase``; a move :data:`MOVES` does not allow is refused."""
        if phase not in MOVES[self.phase]:
            raise PhaseError(f"trial {self.spec.trial_id} ({self.spec.name}) cannot move from "
                             f"{self.phase.name} to {phase.name}: a bug in sweeper's engine, "
                             "please report it")
        self.phase = phase

    def set_deadline(self, due: Due | None, at: float | None) -> None:
        self.due, self.deadline = due, at

    def reached(self, began: Began, now: float, timeout: float | None, stall: float | None) -> bool:
        """It reached its process: its clock starts now; True if it runs from now on. Told
        again with ``moved``: it was moved to a new process before ``train`` began there
        (the fork watchdog), so its clock starts again and the move is said."""
        if began.moved and self.phase is Phase.RUNNING and self.stop is None:
            log.warning("sweeper: trial %s: %s", self.spec.name, began.moved)
            self.to(Phase.STARTING)
            self.began = None
            self.set_deadline(None, None)
        if self.phase is not Phase.STARTING or self.stop is not None:
            if self.began is None:  # stopped before it began: where it was placed, no clock
                self.began = began
                self.spec = replace(self.spec, device=began.device)
            return False
        self.to(Phase.RUNNING)
        wall = time.time()
        at = began.at if began.at is not None and began.at <= wall else wall  # a clock ahead of ours: ours
        if not self.started_at or self.restarts:  # (one paused and resumed keeps its first start)
            self.started_at, self.restarts = iso(at), False
        self.began, self.t0 = began, now - (wall - at)
        self.sign = self.t0
        self.spec = replace(self.spec, device=began.device)
        if self.due is None:
            self.watch(timeout, stall)
        return True

    def requeued(self) -> bool:
        """It waits in its backend's queue again (Slurm requeued its job): back to ``STARTING``,
        no clock, no deadline, until it begins again (:meth:`reached`). False where it was not
        running (stopped already, or waiting): nothing changes."""
        if self.phase is not Phase.RUNNING or self.stop is not None:
            return False
        self.to(Phase.STARTING)
        self.began, self.restarts = None, True
        self.set_deadline(None, None)
        return True

    def paused(self, now: float) -> None:
        """Its process left, paused: unrecorded, its place free, its time so far kept."""
        self.to(Phase.PAUSED)
        self.ran += now - self.t0
        self.t0 = self.t1 = now  # (it runs no more until it is given again)
        self.set_deadline(None, None)

    def resume(self, spec: TrialSpec, now: float) -> None:
        """Given again after a pause, to a fresh process: its clock from now; its epochs, its
        first start and the time it ran before stand."""
        self.to(Phase.STARTING)
        self.spec, self.t0, self.sign, self.began = spec, now, 0.0, None
        self.stop, self.why, self.t1, self.result, self.early, self.pausing = None, "", None, None, None, None
        self.recorded = False
        self.segments += 1

    def note_epochs(self, items: list[dict[str, Any]]) -> None:
        """Its per-epoch reports: the last epoch, and what it reported then."""
        for item in items:
            if self.epoch is None or item["epoch"] >= self.epoch:
                self.epoch, self.epoch_metrics = item["epoch"], dict(item["metrics"])

    def stirred(self, now: float, log_age: float | None, stall: float) -> bool:
        """Whether it showed a sign of life in the last ``stall`` seconds: an epoch report,
        or a write to its log (``log_age`` seconds ago; None: no log here to look at)."""
        if log_age is not None:
            self.sign = max(self.sign, now - max(log_age, 0.0))
        return now - self.sign < stall

    def watch(self, timeout: float | None, stall: float | None) -> None:
        """Its deadline while it runs: its timeout or its stall, whichever comes first."""
        due: list[tuple[float, Due]] = []
        if timeout:
            due.append((self.t0 + timeout, Due.TIMEOUT))
        if stall:
            due.append((self.sign + stall, Due.STALL))
        at, what = min(due, key=lambda d: d[0]) if due else (None, None)
        self.set_deadline(what, at)

    def measures(self, how: Exited) -> dict[str, Any]:
        """What its row says of its process (:data:`~sweeper.model.trial.EXIT_FIELDS`): from its
        exit where that tells it, else from :class:`Began` (its exit code and peak memory only
        an exit tells)."""
        began = self.began or Began(0, "")
        return {"pid": how.pid if how.pid is not None else began.pid, "exitcode": how.exitcode,
                "device": (how.device if how.device is not None else began.device) or "",  # "": it never had one
                "gpu_mem_cap_mb": how.cap_mb if how.cap_mb is not None else began.cap_mb,
                "gpu_mem_peak_mb": how.peak_mb, "job_id": (how.job if how.job is not None else began.job) or "",
                "mem_peak_mb": hostmem.peak(how.mem_peak_mb, self.result.mem_peak_mb if self.result else None)}

    def final(self, how: Exited, now: float, run_id: str, constraints: Constraints | None) -> TrialResult:
        """Its row once its process is gone: the row recorded when its result came (judged then,
        once: nothing after a result changes a verdict), with what the exit measured; else
        judged now. One exit tells more of a verdict: an ``oom`` the kernel's OOM killer then
        ended, whose hint names the host's memory (judged again, the same status)."""
        if self.early is None or ((how.oom_killed or how.crowded) and self.early.status is Status.OOM):
            return self.row(how, now, run_id, constraints)
        return replace(self.early, **self.measures(how))

    def adds_only_measures(self, row: TrialResult) -> bool:
        """Whether ``row`` is the one recorded when its result came, and in the ledger, with
        only its exit's measures added (then those are all there is to write)."""
        return self.recorded and self.early is not None and row == replace(self.early, **{
            name: getattr(row, name) for name in EXIT_FIELDS})

    def row(self, how: Exited, now: float, run_id: str, constraints: Constraints | None) -> TrialResult:
        """Its row: the judge's verdict, and where and how long it ran (``now``: the engine's
        clock, for a trial stopped without a result; ``run_id``: the run's record it names)."""
        trial, spec = self, self.spec
        began = trial.began or Began(0, "")
        measured = self.measures(how)
        pid = measured["pid"]
        tail: tuple[str, ...] = ()
        if trial.result is None and trial.stop is None:  # a crash: its last words
            tail = tuple(log_tail(spec.log_path, pid=pid)) if pid else ()  # this attempt's part
        verdict = outcome.judge(outcome.Ending(began, how, trial.result, trial.stop, trial.why, tail,
                                               trial.epoch_metrics))
        duration: float | None = (trial.t1 if trial.t1 is not None else now) - trial.t0
        if trial.stop is None and trial.result is not None and trial.result.duration_s is not None:
            duration = trial.result.duration_s
        elif not trial.started_at:  # it never began (cancelled while it waited in a queue): no duration
            duration = None
        if duration is not None:
            duration += trial.ran
        row = TrialResult(
            trial_id=spec.trial_id, name=spec.name, index=spec.index, params=spec.params,
            status=verdict.status, metrics=verdict.metrics, seed=spec.seed,
            started_at=trial.started_at, duration_s=duration, error=verdict.error, attempts=spec.attempt,
            log=spec.log_path, gpu_uuid=began.gpu_uuid,
            gpu_mem_reserved_mb=began.reserved_mb, epoch_reached=trial.epoch, **measured,
            env={**(trial.result.env if trial.result is not None else {}), **({"run": run_id} if run_id else {})},
            deterministic=True if spec.env.get(contract.DETERMINISTIC) == "1" else None,
            segments=segments if (segments := trial.segments - (trial.began is None)) > 1 else None,
        )
        return row if constraints is None else replace(row, feasible=constraints.feasible(row))


def log_file_age(spec: TrialSpec) -> float | None:
    """Seconds since the trial's log was last written (None: it has none here, as a Ray
    trial's, written when it ends)."""
    try:
        return time.time() - os.stat(spec.log_path).st_mtime
    except OSError:
        return None


def now_iso() -> str:
    return iso(time.time())


def iso(seconds: float) -> str:
    """Seconds since the epoch as ISO 8601, UTC, to the millisecond (``...Z``)."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
