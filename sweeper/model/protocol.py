"""What a trial process tells its sweep, and what a backend tells the engine.

Trial → parent (over a pipe locally, over a Ray queue on a cluster), in this order::

    GridRead?     (the CLI's first process) the grid file's points and options
    Ready?        a standby imported what train needs and waits for its trial
    LoadFailed    train could not be imported: the sweep's problem, not a trial's
    Placed        (Ray) the trial began on its worker: pid, device, memory cap
    TrainStarted  train() is called: its imports are done
    Reports*      per-epoch metrics, batched
    Exiting?      (Ray) it calls os._exit(code), which Ray would not tell
    Result        status, metrics, error, duration: sent once, before it exits

Backend → engine: the trial's messages, plus :class:`Began` (the trial reached its
process: its clock starts) and :class:`Exited` (its process is gone; what is known of how).

And the seams the engine (:mod:`sweeper.run.engine`) runs trials through: a
:class:`Backend` (where trials run: :mod:`sweeper.backends`), an :class:`Admission`
(which queued trial may start now: :mod:`sweeper.placement.policy`), and a :class:`Scheduler`
(which trial runs next, and what each report is answered: :mod:`sweeper.search.schedulers`).

Small frozen records, picklable by reference, so both ends agree on every field. Light:
trial processes import it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, Union

from sweeper.model.trial import Status, TrialResult, TrialSpec


@dataclass(frozen=True)
class Ready:
    """A standby has imported ``train``; it waits for a trial."""


@dataclass(frozen=True)
class LoadFailed:
    """``train`` could not be imported (the exception's last line)."""

    error: str


@dataclass(frozen=True)
class Unwritable:
    """A file of the trial's (its log, ``result.json``) could not be written: the folder
    became read-only, or the disk is full. The sweep starts no new trial."""

    path: str
    error: str  #: the system's words (``strerror``)


class Decision(enum.Enum):
    """A scheduler's answer to a trial's reports."""

    CONTINUE = "continue"  #: train on
    STOP = "stop"  #: end it now, ``pruned``
    PAUSE = "pause"  #: end its process now; it may resume later, in a fresh process


@dataclass(frozen=True)
class Answer:
    """(Parent to trial) the scheduler's answer to the trial's last batch of reports: go on,
    stop (pruned) or pause, for ``why``."""

    decision: Decision = Decision.CONTINUE
    why: str = ""


@dataclass(frozen=True)
class TrainStarted:
    """``train`` was called: the trial's imports are behind it."""


@dataclass(frozen=True)
class Reports:
    """A batch of per-epoch reports: ``{"epoch": int, "metrics": {...}, "t": float}`` each."""

    items: list[dict[str, Any]]


@dataclass(frozen=True)
class Result:
    """How ``train`` ended, as the trial process judged it (see :mod:`sweeper.model.outcome`)."""

    status: Status
    metrics: dict[str, int | float] = field(default_factory=dict)
    error: str = ""
    duration_s: float | None = None  #: from the trial reaching its process to the end of train
    history: list[dict[str, Any]] = field(default_factory=list)  #: a returned Keras History's epochs
    mem_peak_mb: int | None = None  #: the process's own peak resident memory when train returned
    env: dict[str, Any] = field(default_factory=dict)  #: what it ran on (:func:`sweeper.system.environment.of_trial`)

    def to_json(self, trial_id: str) -> dict[str, Any]:
        """What ``result.json`` holds."""
        return {"trial_id": trial_id, "status": self.status.value, "metrics": self.metrics,
                "error": self.error, "history": self.history, "duration_s": self.duration_s,
                "mem_peak_mb": self.mem_peak_mb, "env": self.env}


@dataclass(frozen=True)
class Placed:
    """(Ray) The trial began on its worker."""

    pid: int
    device: str
    cap_mb: int | None = None
    host: str = ""  #: the worker's host name
    at: float | None = None  #: when it began there: seconds since the epoch, by that machine's clock


@dataclass(frozen=True)
class Exiting:
    """(Ray) The trial calls ``os._exit(code)``."""

    code: int


@dataclass(frozen=True)
class GridRead:
    """(The CLI's first process) the grid file, checked and expanded into plain points."""

    points: list[dict[str, Any]]
    options: dict[str, Any]
    attr: str  #: "train" or "command"
    shell: bool
    what: str  #: what the sweep runs, in words
    space: Any = None  #: a search's space (then points is empty)
    modules: list[str] = field(default_factory=list)  #: what importing it imported (a fork server's preload)


@dataclass(frozen=True)
class GridRefused:
    """(The CLI's first process) the grid file is not usable: one line saying why and the fix."""

    error: str


#: What a trial process sends.
Message = Union[Ready, LoadFailed, Unwritable, TrainStarted, Reports, Result, Placed, Exiting, GridRead,
                GridRefused]


@dataclass(frozen=True)
class Began:
    """The trial reached its process (its timeout counts from now), and where it runs."""

    pid: int
    device: str
    gpu_uuid: str = ""
    cap_mb: int | None = None
    fraction: str | None = None  #: the memory fraction it runs under, when no MB cap is known
    #: Why the trial began again in another process, when it did (the fork watchdog's words).
    moved: str = ""
    reserved_mb: int | None = None  #: the GPU memory set aside for it on its card
    packed: bool = False  #: placed by the memory it was predicted to need (per_gpu="auto")
    #: packed after two OOMs: the MB of the card it has to itself, the largest (an OOM there: no card can hold it)
    alone_mb: int | None = None
    #: Where it runs, in its backend's words (``pid 4242`` here; ``node-3, pid 77`` on a cluster;
    #: a batch scheduler's job): what ``status`` shows. The engine reads no other place: ``pid``
    #: (0 where the backend knows none) only finds this attempt's part of the trial's log.
    where: str = ""
    #: its batch scheduler's job id (Slurm's ``123`` or ``123_4`` for an array task): the
    #: ``job_id`` column; "" where trials are no jobs
    job: str = ""
    #: when it began, seconds since the epoch, where its process told it (a cluster's node):
    #: its ``started_at`` and its clock count from then, not from when the driver heard; None: now
    at: float | None = None


@dataclass(frozen=True)
class Exited:
    """The trial's process is gone. Fields left ``None`` keep what :class:`Began` said."""

    exitcode: int | None = None  #: negative: the signal that ended it
    note: str = ""  #: the backend's own words on how it ended (Ray's exception)
    cancelled: bool = False  #: the backend cancelled it (nothing else is known)
    peak_mb: int | None = None  #: its peak GPU memory, where it could be seen
    mem_peak_mb: int | None = None  #: its tree's peak resident host memory, as the parent sampled it
    pid: int | None = None
    device: str | None = None
    cap_mb: int | None = None
    #: the kernel's OOM killer ended it (SIGKILL while the memory cgroup's oom_kill count rose)
    oom_killed: str = ""
    #: processes that are not its sweep's took memory of its card its sweep had reserved, while
    #: it ran: who, and what follows (an OOM then is theirs, not the trial's: :mod:`sweeper.placement.crowd`)
    crowded: str = ""
    #: a batch scheduler's own time limit ended it (its words: "Slurm's time limit, 00:01:00")
    time_limit: str = ""
    #: its batch scheduler's job id, where :class:`Began` could not say it (it never began)
    job: str | None = None


@dataclass(frozen=True)
class Broken:
    """A fault of the whole sweep, not of one trial (one line: what and the fix)."""

    error: str


#: What a backend hands the engine, with the trial's id.
@dataclass(frozen=True)
class Requeued:
    """A trial that began waits in its backend's queue again, to begin anew (a batch scheduler
    requeued its job: its node failed, it was preempted): its clock stops until its next
    :class:`Began`, which starts it again. Not an end: no row, no attempt counted."""

    why: str


@dataclass(frozen=True)
class Pending:
    """A trial started waits in its backend's queue (a batch scheduler's), for ``why``: the
    scheduler's own word (Slurm's reason: ``Resources``, ``Priority``, ``PartitionConfig``).
    Told when it changes; not an end."""

    why: str


Event = Union[Message, Began, Exited, Broken, Requeued, Pending]


@dataclass(frozen=True)
class Traits:
    """What a backend is, for the engine: fixed once it is made."""

    capacity: int  #: how many trials may run at once
    stop_word: str = "killed"  #: what a timeout does to a trial, in the error column ("killed", "cancelled")
    #: whether :meth:`Backend.tell` reaches a running trial (then a report may wait for its answer)
    answers: bool = False
    #: whether it keeps a queue of its own (a batch scheduler's: Slurm's): then every trial
    #: queued ahead is started at once and ``capacity`` is the most it lets run at a time (the
    #: backend's to hold); a scheduler is asked for a new trial only while fewer than
    #: ``capacity`` are started. A trial counts as running (the console) from its :class:`Began`.
    queues: bool = False


class Backend(Protocol):
    """Where trials run. The engine calls these from its one thread, in this order:
    ``open``; then ``start``, ``wait``, ``drain``, ``tell`` and ``cancel`` as trials come
    and go; ``close`` once, on every way out. Trials are named by their trial id.

    Every started trial must end in exactly one :class:`Exited` event (unless ``close``
    drops it), after any messages it sent. Which trial may start, and in what order, is not
    the backend's to say: the engine asks an :class:`Admission`.
    """

    traits: Traits

    def open(self) -> None:
        """Before the first trial."""

    def start(self, spec: TrialSpec) -> Began | None:
        """Start a trial; its :class:`Began` now, or None to send it later as an event."""

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Event]]:
        """Events of running trials; return early once ``wake`` (a descriptor) is readable.
        ``queued`` more trials will start soon (a backend may prepare processes for them).
        May raise :class:`~sweeper.errors.SweepError` for a fault of the whole sweep."""

    def drain(self, trial_id: str) -> list[tuple[str, Event]]:
        """What a trial has sent already, without waiting (read before it is stopped)."""

    def cancel(self, trial_id: str, hard: bool) -> None:
        """Stop a trial: ``hard=False`` asks (SIGTERM), ``hard=True`` ends it (SIGKILL)."""

    def tell(self, trial_id: str, message: Any) -> None:
        """Send a running trial a message (the answer to its reports), where ``traits.answers``."""

    def close(self) -> list[tuple[str, Event]]:
        """End everything still running; the events of trials that ended meanwhile."""


class Admission(Protocol):
    """Which queued trial may start now, in what order, and whether one runs again on other
    terms: the placement policy the engine asks (:mod:`sweeper.placement.policy`)."""

    def admits(self, spec: TrialSpec) -> bool:
        """Whether this trial may start now. A policy packing trials by memory says no while
        it fits nowhere; the engine then tries the next queued one (a later call may say yes)."""

    def ranked(self, queued: Sequence[TrialSpec]) -> list[int] | None:
        """The order in which to offer the queued trials (indices), None for the queue's own
        (packing: a shape not measured yet first, so what it needs is known early)."""

    def again(self, result: TrialResult) -> bool | None:
        """Whether this attempt runs again on other terms, retries or not (True; packing: an
        OOM), as ``retries`` say (False), or never (None; packing: an OOM with the largest
        card to itself, which a retry would repeat)."""

    @property
    def exhausted(self) -> str | None:
        """Why no trial can start any more (every place stopped taking them), else None; the
        sweep then lets running trials end, starts no more, and fails with this."""


class Scheduler(Protocol):
    """Which trial runs next, and what each report is answered: the one interface the engine
    asks, behind which a grid, a search's sampler and its pruner sit
    (:mod:`sweeper.search.schedulers`). A trial it paused (:attr:`Decision.PAUSE`) is its to
    give again from :meth:`next`; one it never gives again is recorded ``interrupted`` when
    the sweep ends (it runs on resume)."""

    #: Whether it may answer a report other than CONTINUE: then each report waits for its
    #: answer, where the backend answers (:attr:`Traits.answers`).
    waits: bool

    def ahead(self) -> list[TrialSpec]:
        """The trials known before any runs (a grid's points, a search's trials to run
        again), queued at once so the placement may order them; asked once."""

    @property
    def remaining(self) -> int:
        """How many more :meth:`next` may give (paused trials included); 0 once it is done."""

    def next(self) -> TrialSpec | None:
        """A place is free: the next trial to start (a paused one: resumed), or None for now."""

    def reported(self, spec: TrialSpec, items: list[dict[str, Any]]) -> Answer:
        """A running trial's per-epoch reports (``{"epoch", "metrics", "t"}``, in order)."""

    def paused(self, spec: TrialSpec, epoch: int | None) -> None:
        """The trial it paused has left its process (at ``epoch``, its last reported)."""

    def finished(self, result: TrialResult, retrying: bool) -> None:
        """A trial's recorded result (``retrying``: an attempt, which runs again)."""
