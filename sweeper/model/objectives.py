"""Several objectives at once, and the Pareto front of a sweep's rows.

``metric=["val_accuracy", "params"], mode=["max", "min"]`` (``--metric val_accuracy,params
--mode max,min``) asks for the trials no other beats in every objective: the Pareto front.
A search then runs Optuna's multi-objective samplers; a grid sweep marks its front too.
The first objective stays what the leaderboard and "best so far" rank by.

A row stands on the front when it is ranked (ok, and feasible where the sweep has
constraints), every objective is a finite number in it, and no other such row is at least
as good in every objective and better in one. Rows with equal values stand together. The
``pareto`` column is judged from the rows as they are when the table is written, never
stored: a later trial may push a row off the front.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from sweeper.errors import SweepError
from sweeper.model.metrics import RESERVED, direction, finite
from sweeper.model.trial import PARETO_COLUMNS

if TYPE_CHECKING:
    import pandas

    from sweeper.model.trial import TrialResult

MODES = ("max", "min")
#: The ``results.csv`` column that says whether a row stands on the front.
COLUMN = PARETO_COLUMNS[0]


def split(value: Any, what: str) -> tuple[str, ...] | None:
    """A metric or mode option as its words: a text (several comma-separated) or a list of
    texts, each taken as it is (a metric named ``a,b`` is ``["a,b"]``); None stays None. A
    one-line error for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        words = tuple(w.strip() for w in value.split(","))
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        words = tuple(value)
    else:
        raise SweepError(f"{what} must be a name or a list of names, got {value!r}")
    if not words or not all(isinstance(w, str) and w.strip() for w in words):
        example = "'val_accuracy' or ['val_accuracy', 'params']" if what == "metric" else "'max' or ['max', 'min']"
        raise SweepError(f"{what} must be a non-empty name or a list of them, such as {example}; got {value!r}")
    return words


def given(metric: Any, mode: Any) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """The metrics and modes an option pair names, checked: modes are max or min, one per
    metric when several metrics are named, and no metric twice."""
    metrics, modes = split(metric, "metric"), split(mode, "mode")
    for m in modes or ():
        if m not in MODES:
            raise SweepError(f"mode must be 'max' or 'min' (one per metric), got {m!r}")
    for m in metrics or ():
        if m in RESERVED or m.startswith("param_"):
            raise SweepError(f"metric {m!r} is a column sweeper writes in results.csv, never a metric; name one "
                             "that train returns")
    if metrics is not None and len(set(metrics)) < len(metrics):
        twice = next(m for m in metrics if metrics.count(m) > 1)
        raise SweepError(f"metric names {twice!r} twice; each objective once")
    if modes is not None and len(modes) > 1 and metrics is None:
        raise SweepError(f"mode gives {len(modes)} directions but no metric is named; give metric=[...] with one "
                         "name per mode")
    if metrics is not None and modes is not None and len(modes) != len(metrics):
        example = (list(MODES) * len(metrics))[:len(metrics)]
        raise SweepError(f"metric names {len(metrics)} objectives ({', '.join(metrics)}) and mode gives "
                         f"{len(modes)} direction{'s' if len(modes) > 1 else ''}; give one per metric, such as "
                         f"--mode {','.join(example)} (mode={example})")
    return metrics, modes


@dataclass(frozen=True)
class Objectives:
    """Two or more metrics optimised at once, each with its direction."""

    metrics: tuple[str, ...]
    modes: tuple[str, ...]  #: "max" or "min", one per metric

    @classmethod
    def of(cls, metric: Any, mode: Any) -> "Objectives | None":
        """The objectives an option pair names, or None for one metric (or none). A mode
        left out comes from the metric's name; one it does not tell is a one-line error."""
        metrics, modes = given(metric, mode)
        if metrics is None or len(metrics) < 2:
            return None
        resolved = []
        for i, name in enumerate(metrics):
            how = modes[i] if modes is not None else direction(name)
            if how is None:
                raise SweepError(f"sweeper cannot tell from its name whether a higher or a lower {name!r} is better; "
                                 f"give one mode per metric, e.g. --mode {','.join(['max'] * len(metrics))} "
                                 f"(mode={['max'] * len(metrics)})")
            resolved.append(how)
        return cls(metrics, tuple(resolved))

    # -- as the ledger keeps them --------------------------------------------------------------

    def text(self) -> str:
        return json.dumps([list(p) for p in zip(self.metrics, self.modes)])

    @classmethod
    def from_text(cls, text: str | None) -> "Objectives | None":
        """What :meth:`text` wrote (None or "": one objective)."""
        if not text:
            return None
        pairs = json.loads(text)
        return cls(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))

    def __str__(self) -> str:
        return ", ".join(f"{m} ({how})" for m, how in zip(self.metrics, self.modes))

    # -- the front ---------------------------------------------------------------------------

    def point(self, metrics: dict[str, Any]) -> tuple[float, ...] | None:
        """A row's objectives, each as a number to maximise; None when one is missing or not finite."""
        out = []
        for name, how in zip(self.metrics, self.modes):
            value = finite(metrics.get(name))
            if value is None:
                return None
            out.append(value if how == "max" else -value)
        return tuple(out)

    def front(self, results: Iterable["TrialResult"]) -> set[str]:
        """The trial ids on the Pareto front (see the module docstring)."""
        points = {r.trial_id: p for r in results if r.ranked and (p := self.point(r.metrics)) is not None}
        return set(nondominated(points))

    def frame_front(self, df: "pandas.DataFrame") -> "pandas.DataFrame":
        """The rows of a results table on the front, best first by the first objective."""
        on = df[df[COLUMN].fillna(False).astype(bool)] if COLUMN in df else df.iloc[0:0]
        return on.sort_values(self.metrics[0], ascending=self.modes[0] == "min", kind="stable")

    def lines(self, df: "pandas.DataFrame", top: int = 10) -> list[str]:
        """The front as the console shows it: how many rows, each with its objectives."""
        front = self.frame_front(df)
        if not len(front):
            return [f"Pareto front of {self}: no ok trial has every objective yet"]
        out = [f"Pareto front of {self}: {len(front)} trial{'s' if len(front) != 1 else ''} "
               f"(no other trial is better in every objective)"]
        for _, row in front.head(top).iterrows():
            values = "  ".join(f"{m}={row[m]:.4g}" for m in self.metrics)
            out.append(f"  {values}  {row['trial']}")
        if len(front) > top:
            out.append(f"  ... and {len(front) - top} more (pareto=True in results.csv)")
        return out


def nondominated(points: dict[str, tuple[float, ...]]) -> list[str]:
    """The keys whose points no other point dominates (all to be maximised): sorted by the
    first value, best first, a point is kept unless one already kept is at least as good in
    every value and better in one (those before it are at least as good in the first)."""
    order = sorted(points, key=lambda k: tuple(-v for v in points[k]))
    kept: list[str] = []
    for key in order:
        p = points[key]
        if not any(all(a >= b for a, b in zip(points[k], p)) and points[k] != p for k in kept):
            kept.append(key)
    return kept
