"""The results table: one row per trial, as a CSV on disk and a pandas DataFrame.

Columns, in order: ``trial_id``, ``trial``, ``status``, one ``param_<name>`` per
hyperparameter (scikit-learn's ``cv_results_`` convention), one column per metric,
then ``seed``, ``device``, ``started_at``, ``duration_s``, ``error``, ``attempts``,
``epoch_reached`` when any trial reported epochs, ``mem_peak_mb`` when any trial's host
memory was measured, and, when any trial ran on a GPU, ``gpu_uuid``, ``gpu_mem_cap_mb``,
``gpu_mem_peak_mb``, ``gpu_mem_reserved_mb``; ``feasible`` when the sweep has constraints;
``deterministic`` when any trial ran with determinism asked for; ``pareto`` when it has
several objectives (judged as the table is written:
:mod:`sweeper.model.objectives`).
They come from :class:`~sweeper.model.trial.TrialResult`'s fields, each placed by its metadata
(:class:`~sweeper.model.trial.Place`).
Rows follow the grid's order. The CSV is written with the standard ``csv`` module (so
the parent need not import pandas while trials run), to a temporary file renamed over
the old one, so a reader never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from sweeper.model.metrics import HISTORY_COLUMNS
from sweeper.model.trial import CSV_FIELDS, Place, TrialResult, csv_name, place_of
from sweeper.model.objectives import COLUMN as PARETO
from sweeper.model.objectives import Objectives
from sweeper.store import paths

if TYPE_CHECKING:
    import pandas



#: The places whose columns appear only when some trial fills them, with the test per
#: row: epochs when a trial reported one, the GPU's when a trial ran on one.
_SOMETIMES: dict[Place, Callable[[TrialResult], bool]] = {
    Place.EPOCHS: lambda r: r.epoch_reached is not None,
    Place.MEMORY: lambda r: r.mem_peak_mb is not None,
    Place.GPU: lambda r: r.device.startswith("gpu"),
    Place.CONSTRAINTS: lambda r: r.feasible is not None,
    Place.DETERMINISM: lambda r: r.deterministic is not None,
    Place.JOB: lambda r: bool(r.job_id),
    Place.SEGMENTS: lambda r: bool(r.segments),
}
#: How a field's value is written, where not as it is.
_WRITTEN: dict[str, Callable[[Any], Any]] = {
    "status": lambda status: status.value,
    "duration_s": lambda seconds: None if seconds is None else round(seconds, 3),  # None: it never started
}


def columns(results: Sequence[TrialResult]) -> list[str]:
    """Column names for these results: fixed ones, params, metrics (first seen first)."""
    params: list[str] = sorted({k for r in results for k in r.params})
    metrics: dict[str, None] = {}
    for r in results:
        for k in r.metrics:
            metrics.setdefault(k, None)
    out: list[str] = []
    for f in CSV_FIELDS:
        place = place_of(f)
        if place is Place.PARAMS:
            out.extend(f"param_{p}" for p in params)
        elif place is Place.METRICS:
            out.extend(metrics)
        elif place not in _SOMETIMES or any(map(_SOMETIMES[place], results)):
            out.append(csv_name(f))
    return out


def row(result: TrialResult) -> dict[str, Any]:
    """One trial as a flat mapping from column name to value."""
    out: dict[str, Any] = {}
    for f in CSV_FIELDS:
        place, value = place_of(f), getattr(result, f.name)
        if place is Place.PARAMS:
            out.update((f"param_{k}", _param_cell(v)) for k, v in value.items())
        elif place is Place.METRICS:
            out.update(value)
        elif place not in _SOMETIMES or _SOMETIMES[place](result):
            out[csv_name(f)] = _WRITTEN[f.name](value) if f.name in _WRITTEN else value
    return out


def _param_cell(value: Any) -> Any:
    """A parameter's value in the table: lists as JSON, anything else as the sweep recorded it."""
    return json.dumps(value) if isinstance(value, (list, tuple)) else value


def param_columns(df: "pandas.DataFrame") -> list[str]:
    """The ``param_*`` columns of a results DataFrame, in the table's order."""
    return [str(c) for c in df.columns if str(c).startswith("param_")]


def ordered(results: Iterable[TrialResult]) -> list[TrialResult]:
    return sorted(results, key=lambda r: r.index)


def write_csv(results: Sequence[TrialResult], path: str, objectives: Objectives | None = None) -> None:
    """Write the table atomically: a temporary file, fsynced, renamed over ``path``;
    ``objectives``: several, whose Pareto front the ``pareto`` column marks."""
    with paths.atomic(path) as f:
        _write(results, f, objectives)


def _write(results: Sequence[TrialResult], f: Any, objectives: Objectives | None = None) -> None:
    results = ordered(results)
    front = objectives.front(results) if objectives is not None else None
    writer = csv.DictWriter(f, fieldnames=columns(results) + ([PARETO] if front is not None else []), restval="")
    writer.writeheader()
    for r in results:
        cells = {k: _cell(v) for k, v in row(r).items()}
        if front is not None:  # every row says: not on the front is False, not unknown
            cells[PARETO] = r.trial_id in front
        writer.writerow(cells)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back as the same float
    return value


#: How ``sweep()`` and ``load()`` read the table, and how an analyst reads ``results.csv`` to
#: get the same frame: ``pandas.read_csv(path, **READ_CSV)``. Nullable dtypes keep integers
#: integers and missing values missing (``<NA>``); ``started_at`` is a UTC datetime; the
#: text columns that may be empty in every row stay text. The ``param_*`` columns are the
#: exception: ``sweep()`` and ``load()`` give the values the sweep recorded (:func:`dataframe`),
#: which the CSV's text alone cannot always tell (``"nan"``, ``"None"``, ``""`` and ``None``).
READ_CSV: dict[str, Any] = {"dtype_backend": "numpy_nullable", "parse_dates": ["started_at"],
                            "dtype": {"trial": "string", "error": "string", "gpu_uuid": "string"}}


def dataframe(results: Sequence[TrialResult], objectives: Objectives | None = None) -> "pandas.DataFrame":
    """The table as a DataFrame: ``pandas.read_csv(path, **READ_CSV)`` of the CSV, with each
    ``param_*`` column holding the values the sweep recorded (:func:`param_series`).

    Built through the same CSV text, so the values and dtypes a script gets from
    ``sweep()`` are the ones an analyst gets from ``results.csv``, parameters aside: a text
    stays that text whatever it spells (``"nan"``, ``"NA"``, ``"None"``, ``""``, ``"1"``),
    ``None`` is missing, a bool a bool and an int an int.
    """
    import pandas

    text = io.StringIO()
    _write(results, text, objectives)
    text.seek(0)
    frame = pandas.read_csv(text, **READ_CSV)
    rows = ordered(results)  # the CSV's order
    for column in param_columns(frame):
        exact = param_series([r.params.get(column[len("param_"):]) for r in rows])
        if exact is not None:
            frame[column] = exact.set_axis(frame.index)
    if objectives is not None:
        frame.attrs["objectives"] = objectives  # what the pareto column judged, for summary, status and report
    return frame


def param_series(values: Sequence[Any]) -> "pandas.Series | None":
    """One parameter's recorded values (None: missing) as a column of the dtype they share:
    ``boolean``, ``Int64``, ``Float64`` (numbers of both kinds), ``string``, else ``object``
    holding each value as it is (``"True"``, ``True`` and ``1`` stay three values). None when
    no row has a value (the CSV's empty column stands)."""
    import pandas

    values = [_param_cell(v) for v in values]
    present = [v for v in values if v is not None]
    if not present:
        return None
    return pandas.Series(values, dtype=_dtype_of(present) or object)


def _dtype_of(values: Sequence[Any]) -> str | None:
    """The nullable dtype that holds every one of these values exactly, or None (object)."""
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if any(isinstance(v, bool) for v in values):
        return None
    if all(isinstance(v, int) for v in values):
        return "Int64" if all(-2**63 <= v < 2**63 for v in values) else None
    if all(isinstance(v, (int, float)) for v in values):  # ints beyond 2**53 are not exact as floats
        return "Float64" if all(isinstance(v, float) or abs(v) <= 2**53 for v in values) else None
    return "string" if all(isinstance(v, str) for v in values) else None


class Throttled:
    """Keeps a derived file current without rewriting it for every trial of a long sweep.

    ``write()`` regenerates the whole file; it runs at most once per
    ``max(min_interval, 20 x its last cost)``, so with thousands of rows the files cost a
    bounded share of the parent's time (about 5%) instead of a full rewrite per trial;
    ``flush`` writes now. The ledger, not these files, is what makes each result durable.
    """

    def __init__(self, write: Callable[[], None], min_interval: float = 1.0, path: str = "") -> None:
        self.write = write
        self.min_interval = min_interval
        self.path = path
        self._last_end = 0.0
        self._last_cost = 0.0
        self._dirty = False
        self.failure: str | None = None  #: why the last write failed; None once one succeeds

    def mark(self) -> None:
        self._dirty = True

    def flush(self) -> None:
        """Write now. A failure (a full disk) is said once and retried at the next due time:
        the ledger, not this file, holds the results, so the sweep goes on."""
        start = time.monotonic()
        try:
            self.write()
        except OSError as exc:
            if self.failure is None:
                logging.getLogger("sweeper").warning(
                    "sweeper: could not write %s (%s); it is retried later, and the ledger keeps "
                    "every result", self.path or "a table", exc.strerror or exc)
            self.failure = str(exc.strerror or exc)
            self._last_end = time.monotonic()
            self._last_cost = max(self._last_cost, 1.0)  # back off
            return
        self.failure = None
        self._last_end = time.monotonic()
        self._last_cost = self._last_end - start
        self._dirty = False

    def due_in(self) -> float | None:
        """Seconds until a pending rewrite is due, or None when the file is current."""
        if not self._dirty:
            return None
        wait = max(self.min_interval, 20 * self._last_cost)
        return max(0.0, self._last_end + wait - time.monotonic())

    def tick(self) -> float | None:
        """Write if due; seconds until the next check is needed, or None."""
        due = self.due_in()
        if due == 0.0:
            self.flush()
            return None
        return due




def write_history_csv(rows: Sequence[tuple[str, str, int, dict[str, Any]]], path: str,
                      schedule: Mapping[str, list[tuple[int, dict[str, Any], str]]] | None = None) -> None:
    """``history.csv`` in long format: ``trial_id``, ``trial``, ``epoch``, one column per metric;
    with a ``schedule`` (population-based training), each epoch's parameters in force
    (``param_<name>``) and, at the first epoch after a copy, the trial copied (``copied_from``)."""
    names: dict[str, None] = {}
    for *_, metrics in rows:
        for k in metrics:
            names.setdefault(k, None)
    keys: dict[str, None] = {}
    for segments in (schedule or {}).values():
        for _, params, _ in segments:
            keys.update(dict.fromkeys(params))
    with paths.atomic(path) as f:
        writer = csv.writer(f)
        extra = [*(f"param_{k}" for k in keys), "copied_from"] if schedule else []
        writer.writerow([*HISTORY_COLUMNS, *names, *extra])
        for tid, name, epoch, metrics in rows:
            row = [tid, name, epoch, *(_cell(metrics.get(k)) for k in names)]
            if schedule:
                row.extend(_in_force(schedule.get(tid, []), epoch, list(keys)))
            writer.writerow(row)


def _in_force(segments: list[tuple[int, dict[str, Any], str]], epoch: int, keys: list[str]) -> list[Any]:
    """An epoch's parameters under a schedule, and the trial copied just before it ("" if none)."""
    now = [seg for seg in segments if seg[0] < epoch]
    if not now:
        return [""] * len(keys) + [""]
    start, params, copied = now[-1]
    return [*(_param_cell(params.get(k)) for k in keys), copied if epoch == start + 1 else ""]
