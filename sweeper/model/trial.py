"""What a trial is: its identity, its spec (what to run) and its result (what came back).

A point (one set of parameters) has a key; a trial has an id, given once by the plan and
then only carried, never derived again from its parameters:

* ``params_key``: ``t`` and the first 12 hex digits of the SHA-256 of the point's
  canonical JSON (sorted keys, shortest round-trip floats). Lossless: 0.001 and
  0.0010000001 differ; never read as a number by pandas or a spreadsheet. The same grid
  gives the same keys tomorrow, on another machine, in any order: a resume matches the
  rows on record to its points by key (:attr:`TrialResult.key`).
* ``trial_id``: given by :func:`new_id`: a point's first trial takes its key (so ids on
  record from earlier releases, which were keys, stay what they are); another trial of the
  same point (a copy that population-based training makes) gets ``<key>-2``, ``-3``, ...
  Nothing but the plan makes ids, so two trials may share parameters and stay apart.
* ``name``: a readable folder name (sorted keys, ``key=value`` joined by ``,``, floats in
  ``%g`` form with ``.`` replaced by ``_``), of the parameters that vary (:func:`fixed_keys`).
  Where two points of the sweep would share it (a rounded float, a string that reads as a
  number), or it is too long, ``~`` and the point's key are appended.
* ``seed``: derived from the sweep's seed and the trial id only, never from the order
  or the worker that ran it (a point's first trial: from its key).
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
from collections import Counter
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Collection, Container, Mapping, Sequence

#: Longest readable part of a trial name before it is cut and hashed.
MAX_NAME_LEN = 80
#: A trial's log and its checkpoint folder, in its own folder: named here, since its spec
#: tells where they are (:attr:`TrialSpec.log_path`, :attr:`TrialSpec.checkpoint`);
#: :mod:`sweeper.store.paths` names every other file.
LOG = "log.txt"
CHECKPOINT = "checkpoint"


class Status(str, enum.Enum):
    """The final state of a trial, as written in the ``status`` column (a ``str``: ``"ok"``).

    Attributes:
        OK, ERROR, OOM, CRASHED, TIMEOUT, STALLED, INTERRUPTED, PRUNED: the ways a trial ends,
            each said beside it below (README, "When things go wrong").
        retryable: whether running it again may end otherwise (``--retries`` runs those again).
        succeeded: ``ok``, or ``pruned`` by a search: not a failure.

    Example:
        >>> import sweeper
        >>> status = sweeper.Status("oom")
        >>> status.retryable, status.succeeded, status == "oom"
        (True, False, True)
    """

    OK = "ok"  #: ``fn`` returned metrics.
    ERROR = "error"  #: ``fn`` raised, or returned something that is not metrics.
    OOM = "oom"  #: out of memory (GPU or host); retried with ``retries``.
    CRASHED = "crashed"  #: the process died without a result; retried.
    TIMEOUT = "timeout"  #: ran past ``timeout``; its process group was killed; retried.
    STALLED = "stalled"  #: no epoch and no log line for ``stall``; its process group was killed; retried.
    INTERRUPTED = "interrupted"  #: the sweep was stopped (Ctrl-C, SIGTERM, SIGHUP) while it ran.
    PRUNED = "pruned"  #: a search's pruner stopped it early; not a failure, never retried.

    def __str__(self) -> str:
        return self.value

    @property
    def retryable(self) -> bool:
        """Whether running the trial again may give another outcome."""
        return self in (Status.OOM, Status.CRASHED, Status.TIMEOUT, Status.STALLED)

    @property
    def succeeded(self) -> bool:
        """Whether the trial ended as it should: trained to the end, or pruned by a search."""
        return self in (Status.OK, Status.PRUNED)

    # -- how each tool a sweep is shown in names it (one place, so they cannot disagree) --

    @property
    def tensorboard(self) -> str:
        """TensorBoard's session status: ok and pruned ended as asked (pruned trials show
        their last epoch's metrics and ``epoch_reached``), interrupted is unknown, the rest
        failed."""
        if self.succeeded:
            return "STATUS_SUCCESS"
        return "STATUS_UNKNOWN" if self is Status.INTERRUPTED else "STATUS_FAILURE"

    @property
    def mlflow(self) -> str:
        """MLflow's run status: ``FINISHED`` for ok and pruned, ``KILLED`` for interrupted,
        ``FAILED`` for the rest."""
        if self.succeeded:
            return "FINISHED"
        return "KILLED" if self is Status.INTERRUPTED else "FAILED"

    @property
    def optuna(self) -> str:
        """The name of Optuna's ``TrialState`` the study is told: ``COMPLETE`` for ok (with a
        finite value of the metric; else ``FAIL``), ``PRUNED``, ``FAIL`` for the rest."""
        return {Status.OK: "COMPLETE", Status.PRUNED: "PRUNED"}.get(self, "FAIL")


def canonical_json(params: Mapping[str, Any]) -> str:
    """The one string a point is known by: sorted keys, no spaces, round-trip floats."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=False)


#: Starts every trial id, so that no id can ever read as a number (``3876061e3567`` is a
#: float to pandas): a ``t`` and 12 hex digits. Ids from before it are the same without it.
ID_PREFIX = "t"


def params_key(params: Mapping[str, Any]) -> str:
    """The key of a point: depends on its parameters and nothing else (not a trial's id:
    see :func:`new_id`)."""
    import hashlib  # here, not at the top: trial processes import this module but never hash

    return ID_PREFIX + hashlib.sha256(canonical_json(params).encode()).hexdigest()[:12]


def new_id(key: str, taken: Container[str] = ()) -> str:
    """A trial id for a point of ``key`` that no trial in ``taken`` has: the key itself for
    the point's first trial, else ``<key>-2``, ``<key>-3``, ... (a second trial of the same
    parameters). The one place ids are made."""
    if key not in taken:
        return key
    n = 2
    while f"{key}-{n}" in taken:
        n += 1
    return f"{key}-{n}"


def current_id(tid: str) -> str:
    """An id as this release writes it (a ledger from before the prefix holds bare hex)."""
    return tid if tid.startswith(ID_PREFIX) else ID_PREFIX + tid


def _fmt(value: Any) -> str:
    """One value as a name shows it: ``0_001``, ``32_0`` (a float), ``relu``, ``64-32``."""
    if isinstance(value, float):
        text = "%g" % value
        if math.isfinite(value) and float(text) == value and not any(c in text for c in ".en"):
            text += ".0"  # keep 32.0 apart from the int 32
        return text.replace(".", "_")
    if isinstance(value, (list, tuple)):
        return "-".join(_fmt(v) for v in value) or "empty"
    return str(value)


def with_id(name: str, params: Mapping[str, Any]) -> str:
    """A name made unique by the point's key, after a ``~`` (no readable name has one)."""
    return f"{name}~{params_key(params)}"


def trial_name(params: Mapping[str, Any], fixed: Collection[str] = ()) -> str:
    """Readable, file-name-safe name of a point, e.g. ``batch_size=32,lr=0_001``: its
    parameters but those the sweep holds ``fixed`` (all of them where none is left).

    Unique within a sweep only through :func:`trial_names`, which appends the point's key
    where two points would share a name; a name longer than :data:`MAX_NAME_LEN` is cut
    and always has it.
    """
    shown = {k: v for k, v in params.items() if k not in fixed} or params
    if not shown:
        return "default"
    name = ",".join(f"{key}={_fmt(shown[key])}" for key in sorted(shown))
    safe = re.sub(r"[^A-Za-z0-9_.+\-=,]", "_", name)
    if len(safe) <= MAX_NAME_LEN:
        return safe
    return with_id(safe[:MAX_NAME_LEN].rstrip(","), params)


def fixed_keys(points: Sequence[Mapping[str, Any]]) -> set[str]:
    """The keys a grid's points all have, with one value: a name leaves them out."""
    if len(points) < 2:
        return set()
    first = points[0]
    return {k for k in first
            if all(k in p and canonical_json({"v": p[k]}) == canonical_json({"v": first[k]}) for p in points)}


def trial_names(points: Sequence[Mapping[str, Any]], fixed: Collection[str] | None = None) -> list[str]:
    """Each distinct point's name in a sweep: what varies (``fixed``: the keys left out,
    by default :func:`fixed_keys`), the point's key appended only where names would collide."""
    fixed = fixed_keys(points) if fixed is None else fixed
    names = [trial_name(p, fixed) for p in points]
    counts = Counter(names)
    return [with_id(n, p) if counts[n] > 1 else n for n, p in zip(names, points)]


def trial_seed(sweep_seed: int, tid: str) -> int:
    """A 31-bit seed from the sweep's seed and the trial id only."""
    import hashlib

    digest = hashlib.sha256(f"{int(sweep_seed)}:{tid.removeprefix(ID_PREFIX)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def segment_seed(seed: int, epoch: int) -> int:
    """The seed of a trial's process that resumes after ``epoch`` (a paused trial's next
    segment): its trial's seed where it starts from the beginning (0), else one from both,
    so a resumed segment's draws (a shuffle's order) are not its first segment's again."""
    if not epoch:
        return int(seed)
    import hashlib

    digest = hashlib.sha256(f"{int(seed)}@{int(epoch)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class TrialSpec:
    """One trial, as its process gets it (:func:`sweeper.current_trial`): made by the sweep.

    Attributes:
        trial_id: its id, the ``trial_id`` column; ``name``: its readable name and folder's.
        index: its position in the grid's order.
        params: its point, the parameters ``fn`` is called with.
        seed: its seed (from the sweep's seed and its id), set in every framework before ``fn``.
        dir: its own folder, ``<out>/<name>/trials/<trial>/``; ``checkpoint``: a folder there
            that lasts across its segments (a scheduler may pause it and resume it afresh).
        attempt, first_attempt: this attempt, counted over every run of the sweep; this run's first.
        device: ``cpu`` or ``gpu:<index>``; ``env``: the variables set in its process.
        verdicts: each report waits for the pruner's verdict (a search with a pruner).
        ran_before: the processes it ran in before this run of the sweep (``segments`` go on).

    Example:
        >>> import sweeper
        >>> spec = sweeper.TrialSpec(trial_id="t9c9ba942d8bb", name="lr=0_1", index=0, params={"lr": 0.1},
        ...                          seed=7, dir="results/quadratic/trials/lr=0_1")
        >>> spec.params["lr"], spec.key == spec.trial_id
        (0.1, True)
    """

    trial_id: str
    name: str
    index: int
    params: dict[str, Any] = field(hash=False)
    seed: int
    dir: str
    attempt: int = 1
    first_attempt: int = 1  #: ``retries`` more follow it at most
    device: str = "cpu"
    env: dict[str, str] = field(default_factory=dict, hash=False)
    verdicts: bool = False  #: (on a backend that can answer: a pruned trial stops at the epoch judged)
    ran_before: int = 0  #: (a population-based member resumed after Ctrl-C or a kill)

    @property
    def key(self) -> str:
        """Its point's key (:func:`params_key`): what a resume matches rows on record by."""
        return params_key(self.params)

    @property
    def log_path(self) -> str:
        return f"{self.dir}/{LOG}"

    @property
    def checkpoint(self) -> str:
        """A folder of its own that lasts across the trial's segments (a scheduler may pause
        it and resume it in a fresh process): save its state here before each report, and
        start from what is here (Keras: ``keras.callbacks.BackupAndRestore(checkpoint)``). Made
        when first asked for."""
        path = os.path.join(self.dir, CHECKPOINT)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:  # a read-only folder: said by whatever writes there
            pass
        return path

    @property
    def resumed_epoch(self) -> int:
        """The epoch it resumes after (0: it starts from the beginning)."""
        from sweeper.model.contract import RESUMED_EPOCH

        return int(self.env.get(RESUMED_EPOCH) or 0)


class Place(enum.Enum):
    """Where a :class:`TrialResult` field stands in ``results.csv``, in the CSV's order: a
    column of its own, or the columns it spreads into. The ledger stores every field."""

    FRONT = "front"  #: first, in every row
    PARAMS = "params"  #: one ``param_<name>`` column per hyperparameter
    METRICS = "metrics"  #: one column per metric
    BACK = "back"  #: after the metrics, in every row
    EPOCHS = "epochs"  #: when any trial reported epochs (a pruned trial's tells where it stopped)
    SEGMENTS = "segments"  #: when any trial ran in several processes (paused, then resumed: PBT)
    MEMORY = "memory"  #: when any trial's host memory was measured
    GPU = "gpu"  #: when any trial ran on a GPU
    CONSTRAINTS = "constraints"  #: when the sweep has constraints (``feasible``)
    DETERMINISM = "determinism"  #: when any trial ran with determinism asked for
    JOB = "job"  #: when any trial ran as a batch scheduler's job (``job_id``: Slurm's)
    LEDGER = "ledger"  #: in the ledger alone


def column(place: Place, csv: str | None = None) -> dict[str, Any]:
    """A :class:`TrialResult` field's metadata: its place in ``results.csv``, and the
    column's name there where it is not the field's."""
    return {"place": place, "csv": csv}


@dataclass(frozen=True)
class TrialResult:
    """What became of one trial: one row of the results table (README, "The results").

    Each field's metadata (:func:`column`) places it in ``results.csv``; :data:`RESULT_COLUMNS` follows.

    Attributes:
        trial_id, name, params, status, metrics, seed, device, error, attempts: the row's
            columns (``name`` is ``trial``; ``params`` the ``param_<name>`` columns; ``metrics``
            one column each); ``index``: its position in the grid's order (the CSV's row order).
        started_at, duration_s: ISO 8601 UTC when it began in its process ("": never); seconds
            from then to its end (None: it never began, as a task cancelled in Slurm's queue).
        gpu_uuid, gpu_mem_cap_mb, gpu_mem_peak_mb, gpu_mem_reserved_mb: its card, its cap, its peak
            as NVML saw it, the memory set aside for it (None or "" where there is none).
        epoch_reached, mem_peak_mb, segments, job_id: the last epoch it reported, its peak host
            memory (MB) over its process tree, the processes it ran in (paused and resumed), its
            batch job (Slurm's ``123_4``): None or "" where none.
        feasible, deterministic: whether an ok trial meets the sweep's constraints (False: never
            ranked); whether it ran with determinism asked for (None: not asked, no constraints).
        pid, exitcode, log, env: in the ledger alone: its process, exit, log, what it ran on.
        ok, ranked, key: it ended ok; it counts in a ranking (ok and feasible); its point's key.

    Example:
        >>> import sweeper
        >>> row = sweeper.TrialResult(trial_id="t9c9ba942d8bb", name="lr=0_1", index=0, params={"lr": 0.1},
        ...                           status=sweeper.Status.OK, metrics={"loss": 0.0081})
        >>> row.ok, row.ranked, row.key
        (True, True, 't9c9ba942d8bb')
    """

    trial_id: str = field(metadata=column(Place.FRONT))
    name: str = field(metadata=column(Place.FRONT, csv="trial"))
    index: int = field(metadata=column(Place.LEDGER))
    params: dict[str, Any] = field(hash=False, metadata=column(Place.PARAMS))
    status: Status = field(metadata=column(Place.FRONT))
    metrics: dict[str, float] = field(default_factory=dict, hash=False, metadata=column(Place.METRICS))
    seed: int = field(default=0, metadata=column(Place.BACK))
    device: str = field(default="", metadata=column(Place.BACK))
    started_at: str = field(default="", metadata=column(Place.BACK))
    duration_s: float | None = field(default=0.0, metadata=column(Place.BACK))
    error: str = field(default="", metadata=column(Place.BACK))
    attempts: int = field(default=1, metadata=column(Place.BACK))
    pid: int = field(default=0, metadata=column(Place.LEDGER))
    exitcode: int | None = field(default=None, metadata=column(Place.LEDGER))
    log: str = field(default="", metadata=column(Place.LEDGER))
    gpu_uuid: str = field(default="", metadata=column(Place.GPU))
    gpu_mem_cap_mb: int | None = field(default=None, metadata=column(Place.GPU))
    gpu_mem_peak_mb: int | None = field(default=None, metadata=column(Place.GPU))
    gpu_mem_reserved_mb: int | None = field(default=None, metadata=column(Place.GPU))
    epoch_reached: int | None = field(default=None, metadata=column(Place.EPOCHS))
    mem_peak_mb: int | None = field(default=None, metadata=column(Place.MEMORY))
    feasible: bool | None = field(default=None, metadata=column(Place.CONSTRAINTS))
    deterministic: bool | None = field(default=None, metadata=column(Place.DETERMINISM))
    env: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, metadata=column(Place.LEDGER))
    job_id: str = field(default="", metadata=column(Place.JOB))
    segments: int | None = field(default=None, metadata=column(Place.SEGMENTS))

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def ranked(self) -> bool:
        """Whether a ranking counts it: it finished ok, and meets the sweep's constraints."""
        return self.ok and self.feasible is not False

    @property
    def key(self) -> str:
        """Its point's key (:func:`params_key`), from the parameters it ran with."""
        return params_key(self.params)


#: A row's fields that its trial's exit may tell or correct (its exit code, its peak memory,
#: the device a backend says it ran on): added to a row recorded when its result came,
#: whose verdict stands (:meth:`sweeper.store.ledger.Ledger.measured`).
EXIT_FIELDS = ("pid", "exitcode", "device", "gpu_mem_cap_mb", "gpu_mem_peak_mb", "mem_peak_mb", "job_id")


def place_of(f: Field[Any]) -> Place:
    """Where a :class:`TrialResult` field stands in ``results.csv``."""
    place: Place = f.metadata["place"]
    return place


def csv_name(f: Field[Any]) -> str:
    """The ``results.csv`` column of a :class:`TrialResult` field (``name`` is ``trial``)."""
    return f.metadata["csv"] or f.name


#: :class:`TrialResult`'s fields in the order of ``results.csv``: by :class:`Place`, then
#: as the class has them; those of the ledger alone left out.
CSV_FIELDS: tuple[Field[Any], ...] = tuple(sorted(
    (f for f in fields(TrialResult) if place_of(f) is not Place.LEDGER), key=lambda f: list(Place).index(place_of(f))))


def csv_columns(*places: Place) -> tuple[str, ...]:
    """The fixed ``results.csv`` columns of these places, in the CSV's order."""
    return tuple(csv_name(f) for f in CSV_FIELDS if place_of(f) in places)


#: Columns every results table has, first and after the metrics; a metric may not take one.
FRONT_COLUMNS = csv_columns(Place.FRONT)
BACK_COLUMNS = csv_columns(Place.BACK)
#: Present when any trial reported epochs.
EPOCH_COLUMNS = csv_columns(Place.EPOCHS)
#: Present when any trial's host memory was measured.
MEMORY_COLUMNS = csv_columns(Place.MEMORY)
#: Present when any trial ran on a GPU.
GPU_COLUMNS = csv_columns(Place.GPU)
#: Present when the sweep has constraints.
CONSTRAINT_COLUMNS = csv_columns(Place.CONSTRAINTS)
#: Present when any trial ran with determinism asked for.
DETERMINISM_COLUMNS = csv_columns(Place.DETERMINISM)
JOB_COLUMNS = csv_columns(Place.JOB)
#: Present when any trial ran in several processes (population-based training's segments).
SEGMENT_COLUMNS = csv_columns(Place.SEGMENTS)
#: Present when the sweep has several objectives: whether the row is on their Pareto front,
#: judged from all the rows as the table is written, so no field of one result
#: (:mod:`sweeper.model.objectives`).
PARETO_COLUMNS = ("pareto",)
#: Every fixed column ``results.csv`` may have (neither a hyperparameter nor a metric), in its order.
RESULT_COLUMNS = tuple(csv_name(f) for f in CSV_FIELDS
                       if place_of(f) not in (Place.PARAMS, Place.METRICS)) + PARETO_COLUMNS


def keep_names(specs: Sequence[TrialSpec], recorded: Mapping[str, str]) -> list[TrialSpec]:
    """A trial on record keeps the folder it was recorded under (a name from an older
    release stays where its log and checkpoints are), and no other point may take a name
    on record: that one gets its trial id appended. So no folder ever holds two points."""
    taken = set(recorded.values())
    counts = Counter(recorded.values())
    out = []
    for spec in specs:
        name = recorded.get(spec.trial_id)
        if name is None or counts[name] > 1:  # not on record, or shared by an older release
            name = spec.name
            if name in taken and not name.endswith(spec.trial_id):  # (a copy of a point: its own id)
                name = f"{name.rsplit('~', 1)[0]}~{spec.trial_id}"
            taken.add(name)
        out.append(replace(spec, name=name, dir=os.path.join(os.path.dirname(spec.dir), name)))
    return out
