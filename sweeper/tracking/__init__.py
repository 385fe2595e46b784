"""Trackers: a sweep shown where users already look (TensorBoard's HParams dashboard, MLflow,
an Optuna study for optuna-dashboard).

Fed from the ledger, never by the trial processes: what a tracker shows is
what the ledger holds, crashed, timed-out and pruned trials included, for function and
command trials, local and Ray alike. The ledger stays the source of truth; a tracker that
fails is said once and left, and ``python -m sweeper export`` replays a sweep later.

Each tracker keeps, per trial, the attempt it shows, the last epoch it was sent and the
outcome it was told (:class:`Held`), in its own store (MLflow: the run's tags;
TensorBoard: a small state file), so a resumed sweep or a second export updates what is
there instead of adding to it. :mod:`sweeper.tracking.chosen` makes the trackers a sweep's
options ask for; :mod:`sweeper.tracking.mirror` decides what to send;
while a sweep runs it does so in a process of its own (:mod:`sweeper.tracking.process`),
so the trackers' work never shares the engine's interpreter. The trackers themselves:
:mod:`sweeper.tracking.tb` (TensorBoard), :mod:`sweeper.tracking.mlflow_runs` (MLflow,
through its public client only) and :mod:`sweeper.tracking.optuna_study` (an Optuna study,
through Optuna's public API only; also what ``export --optuna`` writes), with
:mod:`sweeper.tracking.optuna_terms`: a trial, its parameters and its outcome in Optuna's terms.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, Protocol, Sequence

from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import TrialResult


@dataclass(frozen=True)
class Attempt:
    """One attempt of a trial, as the ledger has it (running, or its recorded row's)."""

    trial_id: str
    name: str
    params: Mapping[str, Any]
    seed: int
    device: str
    started_at: str  #: ISO 8601, UTC, as the engine stamps it
    attempt: int
    log: str = ""

    @property
    def key(self) -> str:
        """Names this attempt: a retry or a rerun has another, and replaces what was shown."""
        return f"{self.attempt}@{self.started_at}"


@dataclass
class Held:
    """What a tracker shows of one trial."""

    key: str  #: the attempt (:attr:`Attempt.key`)
    epoch: int | None = None  #: the last epoch it was sent
    final: str | None = None  #: the outcome it was told (:func:`digest`)


@dataclass(frozen=True)
class Domain:
    """The values a hyperparameter takes: listed (a grid, a choice) or a range (a search)."""

    values: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    #: a search's own distribution, as Optuna's JSON (``distribution_to_json``); "" for listed values
    optuna: str = ""
    #: True: some points of the sweep lack the parameter (a grid given as a list of dicts)
    partial: bool = False

    @functools.cached_property
    def kind(self) -> str:
        """``bool``, ``number`` or ``string``: how a tracker types the parameter (asked per
        trial: worked out once)."""
        if self.low is not None:
            return "number"
        if self.values and all(isinstance(v, bool) for v in self.values):
            return "bool"
        if self.values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values):
            return "number"
        return "string"


@dataclass(frozen=True)
class SweepInfo:
    """The sweep a tracker shows: its name, where it is, what varies and what it ranks by."""

    name: str
    folder: str
    uid: str  #: one sweep (a ``--fresh`` start is another): finds its MLflow parent run again
    domains: Mapping[str, Domain] = field(default_factory=dict)
    metric: str = ""
    mode: str = ""
    search: str = ""
    #: several metrics optimised at once, each with its mode (``(("acc", "max"), ("size", "min"))``)
    objectives: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The sweep as JSON, for the trackers' process (:meth:`from_json` reads it)."""
        return {"name": self.name, "folder": self.folder, "uid": self.uid, "metric": self.metric,
                "mode": self.mode, "search": self.search, "objectives": [list(o) for o in self.objectives],
                "domains": {k: [list(d.values), d.low, d.high, d.optuna, d.partial] for k, d in self.domains.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepInfo:
        """The sweep :meth:`to_json` wrote."""
        domains = {k: Domain(values=tuple(values), low=low, high=high, optuna=optuna, partial=partial)
                   for k, (values, low, high, optuna, partial) in data["domains"].items()}
        return cls(name=data["name"], folder=data["folder"], uid=data["uid"], domains=domains,
                   metric=data["metric"], mode=data["mode"], search=data["search"],
                   objectives=tuple((m, d) for m, d in data["objectives"]))


class Tracker(Protocol):
    """A place a sweep is shown. Methods may raise: the mirror says so once and drops it."""

    label: str  #: e.g. "MLflow at http://host:5000", for messages
    flag: str  #: what ``export`` takes to replay into it, e.g. "--mlflow http://host:5000"
    hint: str  #: how to look, e.g. "tensorboard --logdir results/digits_mlp/tensorboard"

    def begin(self, sweep: SweepInfo) -> dict[str, Held]:
        """Open the sweep (parent run, experiment); what it already shows, by trial id."""

    def metrics_known(self, names: Sequence[str]) -> None:
        """The trials' result metrics seen so far (TensorBoard declares them as columns)."""

    def start(self, attempt: Attempt, held: Held | None) -> None:
        """A new attempt: it replaces whatever was shown for the trial (``held``)."""

    def epochs(self, attempt: Attempt, rows: list[tuple[int, dict[str, Any], float | None]], last: int) -> None:
        """Per-epoch reports, in order, after those already sent; ``last`` is noted as sent."""

    def finish(self, attempt: Attempt, result: TrialResult, final: str) -> None:
        """The trial's recorded outcome; ``final`` (its digest) is noted as told."""

    def flush(self) -> None:
        """What was sent since the last flush is kept (written in one go, where the tracker
        batches its writes); called after each look at the ledger."""

    def end(self, state: SweepEnd) -> None:
        """The sweep stops here (``state`` says how it ended); what is left is flushed."""


def seconds(stamp: str) -> float:
    """An engine time stamp (ISO 8601, UTC, ``Z``) as seconds since the epoch."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def digest(result: TrialResult) -> str:
    """What a tracker was told of an outcome: its status and metrics, in a few characters."""
    text = f"{result.status.value} {sorted(result.metrics.items())!r} {result.epoch_reached}"
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def attempt_of(result: TrialResult) -> Attempt:
    return Attempt(result.trial_id, result.name, result.params, result.seed, result.device,
                   result.started_at, result.attempts, result.log)


def attempt_running(row: Mapping[str, Any], params: Mapping[str, Any], seed: int, log: str) -> Attempt:
    """A running mark (``Ledger.running``) of a trial whose parameters, seed and log are known
    (from the sweep's spec, or from a row of an earlier attempt)."""
    return Attempt(row["trial_id"], row["name"], params, seed, row.get("device") or "",
                   row["started_at"] or "", row.get("attempt") or 1, log)


def numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics a tracker can plot: numbers (NaN and infinities kept), not text or None."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        try:
            out[str(k)] = float(v)
        except OverflowError:  # an int too big for a float: no tracker can plot it
            continue
    return out


def domains_of_points(points: Iterable[Mapping[str, Any]]) -> dict[str, Domain]:
    """Each parameter's values across points (a grid, or the trials on record), each once
    (the same type and equal); in time linear in the points for hashable values."""
    seen: dict[str, list[Any]] = {}
    hashed: dict[str, set[tuple[type, Any]]] = {}
    listed: dict[str, list[Any]] = {}  # unhashable values (lists): compared one by one
    count: dict[str, int] = {}  # in how many points each parameter is
    n = 0
    for n, p in enumerate(points, 1):
        for k, v in p.items():
            count[str(k)] = count.get(str(k), 0) + 1
            values = seen.setdefault(str(k), [])
            try:
                key = (type(v), v)
                if key in hashed.setdefault(str(k), set()):
                    continue
                hashed[str(k)].add(key)
            except TypeError:
                others = listed.setdefault(str(k), [])
                if any(_same(v, w) for w in others):
                    continue
                others.append(v)
            values.append(v)
    return {k: Domain(values=tuple(_sorted(vs)), partial=count[k] < n) for k, vs in seen.items()}


def domains_of_space(space: Any) -> dict[str, Domain]:
    """A search's parameters: ranges for distributions, the choices for lists."""
    from optuna.distributions import distribution_to_json

    from sweeper.search.sampling import distributions

    dists, fixed = distributions(space)
    out: dict[str, Domain] = {}
    for name, dist in dists.items():
        if hasattr(dist, "choices"):
            out[name] = Domain(values=tuple(_sorted(list(dist.choices))), optuna=distribution_to_json(dist))
        else:
            out[name] = Domain(low=float(dist.low), high=float(dist.high), optuna=distribution_to_json(dist))
    for name, value in fixed.items():
        out[name] = Domain(values=(value,))
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _sorted(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # mixed types: as first seen
        return values


def key_name(name: str) -> str:
    """A name MLflow takes as a param or metric key (letters, digits, ``_ - . / space``)."""
    out = re.sub(r"[^\w.\- /:]", "_", str(name))
    out = "/".join(part if part not in ("", ".", "..") else "_" for part in out.split("/"))
    return out[:250]
