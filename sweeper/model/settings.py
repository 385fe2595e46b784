"""The options parsed once, into frozen typed groups: what users type stays :class:`~sweeper.model
.options.Options` (its keywords, flags, help texts), and what a sweep runs by is :class:`Settings`,
one group per subsystem, each handed only the group(s) it needs.

::

    Options (checked) ──parse()──> Settings
                                     ├─ folder     Folder      the sweep folder, its naming, resume and dry run
                                     ├─ resources  Resources   GPUs (GpuSelection), per_gpu, the MemoryPolicy,
                                     │                         workers, host memory in MB, what packs by memory
                                     ├─ launching  Launching   the backend's name, start method, prefetch,
                                     │                         determinism, the seed
                                     ├─ limits     Limits      timeout, stall, retries, failures in a row
                                     ├─ scoring    Scoring     the metric ranked by, its mode, the objectives,
                                     │                         the constraints parsed
                                     ├─ search     SearchSettings  the search's name or sampler, the pruner,
                                     │                         trials, population-based training's settings
                                     ├─ outputs    Outputs     the live view and the trackers
                                     └─ backend    the backend's own options group (``backend_options``)

Every raw option is parsed here and nowhere else: the GPU selection
(:func:`~sweeper.model.devices.parse_gpus`), the memory policy
(:func:`~sweeper.model.devices.resolve`), the constraints (:func:`~sweeper.model.constraints.parse`),
population-based training's settings (:func:`~sweeper.model.pbt.settings`) and sizes
(:func:`~sweeper.model.units.megabytes`); ``tests/model/test_settings.py`` holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Literal, Union

from sweeper.model import constraints as _constraints
from sweeper.model import pbt as _pbt
from sweeper.model.constraints import Constraints
from sweeper.model.devices import GpuSelection, MemoryPolicy, resolve
from sweeper.model.objectives import Objectives
from sweeper.model.pbt import PbtSettings
from sweeper.model.units import megabytes

if TYPE_CHECKING:  # Optuna is imported only by a search, in the function that runs it
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler

    from sweeper.model.options import Options

#: How each trial's process starts (the ``start_method`` option).
StartMethod = Literal["forkserver", "spawn"]
#: Which way a metric is better.
Mode = Literal["max", "min"]
#: ``per_gpu``: trials per card, ``"auto"`` (as many as fit by measured memory), or None (the default).
PerGpu = Union[int, Literal["auto"], None]
#: ``gpu_memory`` read: MB each trial needs on its card, or a function of the point giving it
#: (its value is read as a size when the trial is placed, :mod:`sweeper.placement.packing`).
GpuMemory = Union[int, Callable[[dict[str, object]], object], None]
#: A tracker's target: True (its default place in the sweep folder), a URI or path, or off.
TrackerTarget = Union[bool, str, None]


@dataclass(frozen=True)
class Folder:
    """Where the sweep's folder is and what a run does with what is there."""

    out: str
    name: str | None  #: None: the front end's default name
    fresh: bool  #: set the old ledger aside
    skip_failed: bool  #: keep failed rows instead of running them again
    dry_run: bool  #: say what would run; run nothing


@dataclass(frozen=True)
class Resources:
    """Where trials run on this machine and how much of it they may take."""

    gpus: GpuSelection
    per_gpu: PerGpu
    memory: MemoryPolicy  #: each trial's GPU memory cap (per_gpu, memory_fraction, memory_growth)
    workers: int | None  #: trials at once (None: the default, or decided as trials run with ``auto_workers``)
    auto_workers: bool  #: ``workers="auto"``: by measured idle cores and host memory
    host_memory_mb: int | None  #: the host memory budget of the trials at once
    memory_keys: tuple[str, ...] | None  #: the parameters that decide a trial's memory
    gpu_memory: GpuMemory  #: what a trial needs on its card, a first guess until measured

    @property
    def slots_workers(self) -> int | Literal["auto"] | None:
        """``workers`` as :func:`sweeper.placement.slots.place` takes it: a count, ``"auto"``, or None."""
        return "auto" if self.auto_workers else self.workers

    @property
    def packs_host(self) -> bool:
        """Trials start by the host memory they need (``workers="auto"`` or a budget)."""
        return self.auto_workers or self.host_memory_mb is not None


@dataclass(frozen=True)
class Launching:
    """How each trial's process is started."""

    backend: str  #: the backend's name (:mod:`sweeper.backends.registry`)
    start_method: StartMethod
    prefetch: bool  #: each slot's next process started ahead
    deterministic: bool  #: each framework's deterministic mode in every trial
    seed: int  #: the sweep's seed


@dataclass(frozen=True)
class Limits:
    """How long a trial may run, how often it is run again, when the sweep gives up."""

    timeout: float | None = None  #: seconds a trial may run
    stall: float | None = None  #: seconds a trial may go without a sign of life
    retries: int = 0  #: runs again after a crash, OOM, timeout or stall
    failure_limit: int | None = None  #: trials in a row failing the same way that stop the sweep (1: fail_fast)


@dataclass(frozen=True)
class Scoring:
    """What ranks the trials, and what an ok trial must meet to be ranked."""

    metric: str | None  #: the metric the leaderboard ranks by (the first of several); None: picked later
    mode: Mode | None  #: its direction as given (None: from its name)
    objectives: Objectives | None  #: several metrics optimised at once; None for one
    constraints: Constraints | None


@dataclass(frozen=True)
class SearchSettings:
    """A search over a space: what samples it, what prunes it, how many trials; or a population."""

    name: str | None  #: the search as named (``tpe``, ``pbt``, ...), a sampler's class name, or None: none
    sampler: "BaseSampler | None"  #: an Optuna sampler given in code
    prune: str | None  #: the pruner as named, with its keywords, or a pruner's class name
    pruner: "BasePruner | None"  #: an Optuna pruner given in code
    trials: int | None
    pbt: PbtSettings | None  #: a search that trains a population (``pbt``): its settings


@dataclass(frozen=True)
class Outputs:
    """What the sweep shows and feeds as it runs, besides its folder's files."""

    progress: bool
    tensorboard: bool
    mlflow: TrackerTarget
    optuna: TrackerTarget


@dataclass(frozen=True)
class Settings:
    """A sweep's options, parsed once: one group per subsystem."""

    folder: Folder
    resources: Resources
    launching: Launching
    limits: Limits
    scoring: Scoring
    search: SearchSettings
    outputs: Outputs
    backend: object | None = None  #: the backend's own options group (``Options.backend_options``)

    def ranked(self, options: "Options") -> "Settings":
        """The settings once a search's check has decided the direction(s) it optimises
        (``options``: with that mode; the constraints are this group's, read once)."""
        return replace(self, scoring=Scoring(options.ranked_by, _mode(options.ranked_mode), options.objectives,
                                             self.scoring.constraints))


def _mode(value: object) -> Mode | None:
    return "max" if value == "max" else "min" if value == "min" else None


def check(options: "Options") -> None:
    """The options' parses that can fail, as :meth:`Options.checked` runs them (in its order):
    the GPUs, the memory policy, the constraints."""
    GpuSelection.of(options.gpus)
    _memory(options)
    _constraints.parse(options.constraints)


def _memory(options: "Options") -> MemoryPolicy:
    return resolve(options.per_gpu, options.memory_fraction, bool(options.memory_growth))


def parse(options: "Options", population: bool = False) -> Settings:
    """``options`` (checked) as :class:`Settings`; population-based training's settings read
    where the search trains a ``population`` (the search registry says which, a floor above the
    model: :func:`sweeper.search.registry.of`), each mistake one line, before anything runs."""
    return Settings(folder=Folder(options.out, options.name, options.fresh, options.skip_failed, options.dry_run),
                    resources=resources(options), launching=launching(options), limits=limits(options),
                    scoring=scoring(options), search=search(options, population), outputs=outputs(options),
                    backend=options.backend_options)


def host_memory_mb(options: "Options") -> int | None:
    """``host_memory`` in MB (None: no budget)."""
    return None if options.host_memory is None else megabytes(options.host_memory, "host_memory")


def gpu_memory(options: "Options") -> GpuMemory:
    """``gpu_memory`` in MB, or the function that gives it (None: none given)."""
    given = options.gpu_memory
    return given if given is None or callable(given) else megabytes(given, "gpu_memory")


def resources(options: "Options") -> Resources:
    auto = options.workers == "auto"
    per_gpu: PerGpu = "auto" if options.per_gpu == "auto" else (
        options.per_gpu if isinstance(options.per_gpu, int) else None)
    return Resources(gpus=GpuSelection.of(options.gpus), per_gpu=per_gpu, memory=_memory(options),
                     workers=None if auto else options.worker_count, auto_workers=auto,
                     host_memory_mb=host_memory_mb(options),
                     memory_keys=None if options.memory_keys is None else tuple(options.memory_keys),
                     gpu_memory=gpu_memory(options))


def launching(options: "Options") -> Launching:
    method: StartMethod = "spawn" if options.start_method == "spawn" else "forkserver"
    return Launching(options.backend, method, bool(options.prefetch), bool(options.deterministic), options.seed)


def limits(options: "Options") -> Limits:
    return Limits(options.timeout, options.stall, options.retries, options.failure_limit)


def scoring(options: "Options") -> Scoring:
    return Scoring(options.ranked_by, _mode(options.ranked_mode), options.objectives,
                   _constraints.parse(options.constraints))


def search(options: "Options", population: bool = False) -> SearchSettings:
    given, prune = options.search, options.prune
    name = given if given is None or isinstance(given, str) else type(given).__name__
    return SearchSettings(name=name, sampler=None if given is None or isinstance(given, str) else given,
                          prune=prune if prune is None or isinstance(prune, str) else type(prune).__name__,
                          pruner=None if prune is None or isinstance(prune, str) else prune,
                          trials=options.trials, pbt=_pbt.settings(options.pbt) if population else None)


def outputs(options: "Options") -> Outputs:
    return Outputs(bool(options.progress), bool(options.tensorboard), options.mlflow, options.optuna)

