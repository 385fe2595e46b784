"""What a sweep's outputs hear from it: one lifecycle interface, as Ray Tune's ``Callback``.

::

    Engine ──begin(to_run, total)──────────────> Callbacks ──> each output, in order:
           ──started(spec, since)──────────────>               TableFiles   (results.csv, history.csv)
           ──reported(spec, epoch, metrics)────>               packing      (what trials need)
           ──history()  (epochs in the ledger)─>               Live         (the console)
           ──recorded(result) (row in ledger)──>               Trackers     (their own process)
           ──finished(result, retrying)────────>
           ──paused(spec, why)─────────────────>
           ──pending(spec, why), requeued(...)─>  (a batch scheduler's queue)
           ──tick() -> seconds until due───────>
    Sweep  ──end(state)────────────────────────>

The outputs are told; none writes the ledger or steers the sweep (what runs next is the
scheduler's, :mod:`sweeper.search.schedulers`; what the folder ranks by, :mod:`sweeper.run.ranking`).

Every method has a default that does nothing, so an output says only what it hears.
``recorded`` comes when a trial's row is in the ledger (a retry's too), ``finished``
after it with whether the trial runs again; ``end`` once, with how the sweep ended
(:class:`SweepEnd`), whatever happened (the outputs flush and close there).
"""

from __future__ import annotations

import enum
from typing import Any, Sequence

from sweeper.model.trial import TrialResult, TrialSpec


class SweepEnd(enum.Enum):
    """How a sweep ended: what its outputs hear last (:meth:`Callback.end`), what
    :class:`~sweeper.run.runner.Outcome` says, and what the front ends make of it (the
    command's exit status, ``sweep()``'s exception, Hydra's summary, a tracker's last word)."""

    FINISHED = "finished"  #: every trial it gave ran to its end (each row says how that went)
    INTERRUPTED = "interrupted"  #: a stop signal (Ctrl-C, SIGTERM, SIGHUP) stopped it: it resumes where it stopped
    FAILED = "failed"  #: it stopped itself (failures in a row, an unwritable ledger, a fault of the whole sweep)


class Callback:
    """One output of a sweep; override what it needs."""

    def begin(self, to_run: int, total: int) -> None:
        """The engine starts: ``to_run`` trials to run of ``total`` in the sweep."""

    def started(self, spec: TrialSpec, since: float | None = None) -> None:
        """A trial started (an attempt of it); ``since``: when it began in its process, seconds
        since the epoch, where that was earlier than now (a batch scheduler's task, heard of
        later; one a killed driver left, taken over)."""

    def pending(self, spec: TrialSpec, why: str) -> None:
        """A trial started waits in its backend's queue, for ``why`` (the scheduler's word)."""

    def requeued(self, spec: TrialSpec, why: str) -> None:
        """A trial that began waits in its backend's queue again (its job was requeued): it is
        not running until it starts again (``started``)."""

    def reported(self, spec: TrialSpec, epoch: int, metrics: dict[str, Any]) -> None:
        """A trial reported epochs; its last one."""

    def history(self) -> None:
        """Per-epoch reports are in the ledger."""

    def recorded(self, result: TrialResult) -> None:
        """A trial's result is in the ledger."""

    def finished(self, result: TrialResult, retrying: bool, kept: bool = True) -> None:
        """A trial's attempt ended with ``result``; ``retrying``: it runs again; ``kept``: the
        ledger holds it (False on a full disk or a read-only folder: the next run runs it again)."""

    def paused(self, spec: TrialSpec, why: str) -> None:
        """The scheduler paused a trial: its process is gone, its place free; it may start
        again later (``started``), or end ``interrupted`` with the sweep."""

    def tick(self) -> float | None:
        """Periodic work, done now if due; seconds until it is next due (None: nothing waits)."""
        return None

    def end(self, state: SweepEnd) -> None:
        """The sweep ended (``state`` says how): flush and close."""


class Callbacks(Callback):
    """Several outputs as one, told in order; ``end`` reaches each even when one raises
    (the first error is raised after)."""

    def __init__(self, each: Sequence[Callback] = ()) -> None:
        self.each = list(each)

    def begin(self, to_run: int, total: int) -> None:
        for c in self.each:
            c.begin(to_run, total)

    def started(self, spec: TrialSpec, since: float | None = None) -> None:
        for c in self.each:
            c.started(spec, since)

    def pending(self, spec: TrialSpec, why: str) -> None:
        for c in self.each:
            c.pending(spec, why)

    def requeued(self, spec: TrialSpec, why: str) -> None:
        for c in self.each:
            c.requeued(spec, why)

    def reported(self, spec: TrialSpec, epoch: int, metrics: dict[str, Any]) -> None:
        for c in self.each:
            c.reported(spec, epoch, metrics)

    def history(self) -> None:
        for c in self.each:
            c.history()

    def recorded(self, result: TrialResult) -> None:
        for c in self.each:
            c.recorded(result)

    def finished(self, result: TrialResult, retrying: bool, kept: bool = True) -> None:
        for c in self.each:
            c.finished(result, retrying, kept)

    def paused(self, spec: TrialSpec, why: str) -> None:
        for c in self.each:
            c.paused(spec, why)

    def tick(self) -> float | None:
        waits = [w for w in (c.tick() for c in self.each) if w is not None]
        return min(waits) if waits else None

    def end(self, state: SweepEnd) -> None:
        error: BaseException | None = None
        for c in self.each:
            try:
                c.end(state)
            except BaseException as exc:  # the others still flush and close
                error = error or exc
        if error is not None:
            raise error
