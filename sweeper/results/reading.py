"""A sweep folder read back for its report: the rows and per-epoch history, from the
ledger (as :func:`sweeper.load` reads it), or from ``results.csv`` and ``history.csv``
where a folder has only those.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sweeper.errors import SweepError
from sweeper.results.query import HISTORY_KEYS, LOG_SCALE, history_metrics, stopped
from sweeper.store import paths
from sweeper.store.paths import SweepPaths

if TYPE_CHECKING:
    import pandas


def load(path: str | os.PathLike[str], every: bool = False) -> "pandas.DataFrame":
    """A sweep folder's (or its ``results.csv``'s) results table, read from its ledger: the body
    of :func:`sweeper.load`, whose docstring says the rest. ``every``: every trial on record,
    not only the grid's last run there."""
    from sweeper.store import table
    from sweeper.store.folder import sweep_folder
    from sweeper.store.ledger import Ledger

    ledger = Ledger(sweep_folder(path), readonly=True)
    try:
        current = None if every else ledger.current()
        results = list((ledger.results() if current is None else current).values())
        metric, mode = ledger.ranking()
        objectives = ledger.objectives()
    finally:
        ledger.close()
    frame = table.dataframe(results, objectives)
    frame.attrs.update(metric=metric, mode=mode)  # what the sweep ranked by, for report and status
    return frame


def read_folder(folder: str | os.PathLike[str]) -> tuple["pandas.DataFrame", "pandas.DataFrame | None", bool]:
    """A sweep folder's results, per-epoch history (None when there is none) and whether
    it was a search (it has a search on record, or pruned trials).

    A sweep folder is read from its ledger as :func:`sweeper.load` reads it (the trials of
    the grid last run there), so a sweep stopped before ``results.csv`` was first written
    reads as one with no trial finished. A folder without a ledger is read from its
    ``results.csv`` and ``history.csv``.

    Raises:
        SweepError: the folder has neither a ledger nor a ``results.csv``, or the CSV is empty.
    """
    import pandas

    folder = os.fspath(folder)
    where = SweepPaths(folder)
    if where.exists():
        return _from_ledger(folder)
    if not os.path.isfile(where.results):
        raise SweepError(
            f"no {paths.LEDGER} or {paths.RESULTS} in {folder}: give the folder of one sweep, "
            "e.g. python -m sweeper report <out>/<name>"
        )
    try:
        df = pandas.read_csv(where.results)
    except pandas.errors.EmptyDataError:
        raise SweepError(f"{where.results} is empty: the sweep has not written any result yet") from None
    return df, _read_history(where.history), bool(stopped(df).any())


def _from_ledger(folder: str) -> tuple["pandas.DataFrame", "pandas.DataFrame | None", bool]:
    """What :func:`sweeper.load` reads, with the per-epoch reports of those trials: the
    same rows as ``results.csv`` and ``history.csv``, read at one moment."""
    import pandas

    from sweeper.store import table
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        with ledger.snapshot():
            current = ledger.current()
            results = table.ordered((ledger.results() if current is None else current).values())
            epochs = ledger.history()
            facts = ledger.facts()
            objectives = ledger.objectives()
    finally:
        ledger.close()
    df = table.dataframe(results, objectives)
    df.attrs[LOG_SCALE] = frozenset(facts.log_scale)
    where = {r.trial_id: (r.index, r.name) for r in results}
    rows = [{**metrics, "trial_id": tid, "trial": where[tid][1], "epoch": epoch}
            for tid, epoch, metrics in epochs if tid in where]
    rows.sort(key=lambda r: (where[r["trial_id"]][0], r["epoch"]))
    history = None
    if rows:
        frame = pandas.DataFrame(rows)
        history = _usable_history(frame[[*HISTORY_KEYS, *(c for c in frame.columns if c not in HISTORY_KEYS)]])
    return df, history, bool(facts.search) or bool(stopped(df).any())


def _read_history(path: str) -> "pandas.DataFrame | None":
    """history.csv, or None when it is missing, empty or has no per-epoch metric."""
    import pandas

    if not os.path.isfile(path):
        return None
    try:
        history = pandas.read_csv(path)
    except pandas.errors.EmptyDataError:
        return None
    return _usable_history(history)


def _usable_history(history: "pandas.DataFrame") -> "pandas.DataFrame | None":
    if history.empty or "trial" not in history.columns or not history_metrics(history):
        return None
    return history
