"""The durable record of a sweep: ``<out>/<name>/ledger.sqlite`` (:mod:`sweeper.store.paths`).

SQLite (standard library) in WAL mode with ``synchronous=FULL``, chosen over JSON lines
because:

* each finished trial is one transaction: durable (fsync) before its slot is reused,
  and never half-written, so no reader has to skip a torn line;
* a re-run finds a trial by id in O(1) and replaces its row (a retried or resumed trial
  shows once), where JSON lines would need a replay of the whole file;
* another process (``python -m sweeper status``, an analyst's notebook) can read it while
  the sweep writes: WAL lets readers and one writer work at once;
* writing a row costs the same with 10 or 100,000 rows.

The CSV is derived from the ledger (see :mod:`sweeper.store.table`), never the other way round.
Its tables, migrations and rows: :mod:`sweeper.store.schema`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
import urllib.parse
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, TypeVar

from sweeper.errors import SweepError
from sweeper.model.protocol import Began
from sweeper.model.trial import EXIT_FIELDS, TrialResult, TrialSpec, current_id
from sweeper.model.objectives import Objectives
from sweeper.store.facts import SweepFacts, encoded, run_key
from sweeper.store.paths import SweepPaths
from sweeper.store.schema import (
    COLUMNS,
    FIELDS,
    SCHEMA,
    SCHEMA_VERSION,
    STORED,
    foreign,
    migrate,
    readable,
    result_of,
)


class StorageError(SweepError):
    """The ledger could not be written: a full disk, a folder made read-only."""


_F = TypeVar("_F", bound=Callable[..., Any])


def _writes(method: _F) -> _F:
    """A ledger write that fails says so in one line naming the file (never a traceback)."""

    @functools.wraps(method)
    def wrapper(self: "Ledger", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(self.path, str(exc)) from None

    return wrapper  # type: ignore[return-value]


def storage_error(path: str, why: str) -> StorageError:
    """A file of the sweep could not be written: one line naming it, the fix, and resume."""
    text = why.lower()
    fix = ("free space" if "full" in text or "space" in text else
           "make the folder writable" if "readonly" in text or "read-only" in text or
           "permission" in text else "fix what the error names")
    return StorageError(f"cannot write to {path} ({why}); {fix}, then run the same command again "
                        "to resume (every trial recorded so far is kept)")


def _uri(path: str, mode: str) -> str:
    """SQLite's URI of a file, opened ``ro`` (read only) or ``rw`` (never created)."""
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode={mode}"


def _link(new: str, path: str) -> None:
    """``new`` becomes ``path`` (never over a file there), made durable in its folder."""
    try:
        os.link(new, path)
    except FileExistsError:
        return  # made meanwhile: that one is opened, and checked, instead
    except OSError:  # a file system without hard links
        os.rename(new, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Ledger:
    """One sweep folder's trials, finished and running. Used from one thread."""

    def __init__(self, folder: str, readonly: bool = False) -> None:
        self.path = SweepPaths(folder).ledger
        try:
            if not readonly and not os.path.lexists(self.path):
                self._create()
            self._open(readonly)
        except sqlite3.Error as exc:
            self.close()
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SweepError(
                f"{self.path} cannot be read as a sweep ledger ({said}); move it away, or start over "
                "with --fresh (fresh=True), which keeps the damaged file aside"
            ) from None
        except BaseException:
            self.close()
            raise

    @_writes
    def _create(self) -> None:
        """A new ledger appears whole: its schema is written to a file of its own, in one
        transaction, then linked in place. So a ``ledger.sqlite`` without sweeper's tables
        (an empty file, another program's database) is never one a sweep made, even one
        killed as it began, and is refused, never taken for a new sweep."""
        new = f"{self.path}.new{os.getpid()}"
        for extra in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(new + extra)
        try:
            db = sqlite3.connect(new, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(f"BEGIN IMMEDIATE;{SCHEMA}PRAGMA user_version = {SCHEMA_VERSION};COMMIT;")
            finally:
                db.close()
            _link(new, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(new)

    def _open(self, readonly: bool) -> None:
        if readonly:  # another process's sweep, perhaps still running: look, never write
            self._db = sqlite3.connect(_uri(self.path, "ro"), uri=True, isolation_level=None, timeout=30)
            self._check()
            self._select = readable(self._db)
            return
        # never created here (see _create), and checked before anything is written to it
        self._db = sqlite3.connect(_uri(self.path, "rw"), uri=True, isolation_level=None, timeout=30)
        self._check()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        migrate(self._db)
        self._select = readable(self._db)
        # Running marks, per-epoch reports and facts need no fsync of their own: losing the
        # last of them to a power cut costs nothing a re-run does not redo. They go through
        # a second connection without one (NORMAL in WAL mode survives a crash of sweeper).
        self._fast = sqlite3.connect(_uri(self.path, "rw"), uri=True, isolation_level=None, timeout=30)
        self._fast.execute("PRAGMA synchronous=NORMAL")

    def _check(self) -> None:
        """A damaged file, another program's, or one a newer release wrote, is found now, in
        one line, not as a traceback halfway through (nor, for a sweep, as a new ledger)."""
        verdict = self._db.execute("PRAGMA quick_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {verdict[0] if verdict else 'no answer'}")
        why = foreign(self._db, self.path)
        if why is not None:
            raise SweepError(f"{self.path} is not a sweep ledger ({why}); sweeper left it as it is: move it "
                             "away, or start the sweep over with --fresh (fresh=True), which keeps it aside")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"it was written by a newer sweeper (schema {version}); upgrade sweeper")

    def close(self) -> None:
        for name in ("_fast", "_db"):
            if hasattr(self, name):
                getattr(self, name).close()

    # -- finished trials --------------------------------------------------------------

    @_writes
    def record(self, result: TrialResult, durable: bool = True) -> None:
        """Store a trial's outcome, replacing any earlier row for it; fsynced unless told not
        to (an update of a row that is already durable)."""
        row = tuple(STORED[f.name](getattr(result, f.name)) if f.name in STORED else getattr(result, f.name)
                    for f in FIELDS)
        db = self._db if durable else self._fast
        with db:  # one transaction: the row and the end of its running mark
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                f"INSERT OR REPLACE INTO trials ({COLUMNS}, recorded_at) VALUES ({','.join('?' * (len(row) + 1))})",
                (*row, time.time()),
            )
            db.execute("DELETE FROM running WHERE trial_id = ?", (result.trial_id,))

    @_writes
    def measured(self, result: TrialResult) -> None:
        """What a trial's exit measured (:data:`EXIT_FIELDS`: its exit code, peak memory), into
        the row :meth:`record` wrote when its result came; its verdict is not written again.
        No fsync: the row is durable already, and these only add to it; its stamp is new, so
        what reads rows recorded since (the trackers) reads it again."""
        with self._fast as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(f"UPDATE trials SET {', '.join(f'{name} = ?' for name in EXIT_FIELDS)}, recorded_at = ? "
                       "WHERE trial_id = ?",
                       (*(getattr(result, name) for name in EXIT_FIELDS), time.time(), result.trial_id))
            db.execute("DELETE FROM running WHERE trial_id = ?", (result.trial_id,))

    @_writes
    def set_feasible(self, rows: Iterable[tuple[str, bool | None]]) -> None:
        """Whether kept trials meet the constraints of the run that keeps them (judged anew
        each run, as the constraints may have changed)."""
        with self._db:
            self._db.executemany("UPDATE trials SET feasible = ? WHERE trial_id = ?",
                                 [(None if f is None else int(f), tid) for tid, f in rows])

    def results(self) -> dict[str, TrialResult]:
        """Every finished trial on record, by id."""
        out = {}
        for row in self._db.execute(f"SELECT {self._select} FROM trials"):
            out[row[0]] = result_of(row)
        return out

    def current(self) -> dict[str, TrialResult] | None:
        """The finished trials of the grid last run here, in its order and with its names
        (what ``results.csv`` holds); None for a ledger that never recorded its grid."""
        try:
            grid = {current_id(tid): (idx, name)
                    for tid, idx, name in self._db.execute("SELECT trial_id, idx, name FROM grid")}
        except sqlite3.OperationalError:  # a ledger from before the grid was recorded, opened read-only
            return None
        if not grid:
            return None
        return {tid: replace(r, index=grid[tid][0], name=grid[tid][1])
                for tid, r in self.results().items() if tid in grid}

    def grid_names(self) -> dict[str, str]:
        """The names the grid last run here gave its trials, by id (finished or not)."""
        return {current_id(tid): name for tid, name in self._db.execute("SELECT trial_id, name FROM grid")}

    @_writes
    def set_grid(self, items: Iterable[tuple[str, int, str]]) -> None:
        """Record the grid this run sweeps: (trial id, position, name) per point."""
        with self._fast:
            self._fast.execute("BEGIN IMMEDIATE")
            self._fast.execute("DELETE FROM grid")
            self._fast.executemany("INSERT INTO grid VALUES (?,?,?)", list(items))

    # -- running trials (for status from another terminal) ----------------------------

    @_writes
    def mark_running(self, spec: TrialSpec, began: Began, started_at: str) -> None:
        """A trial reached its process: where it runs (``began.where``), what it reserved."""
        self._fast.execute(
            "INSERT OR REPLACE INTO running (trial_id, name, device, pid, attempt, started_at, reserved_mb, place) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (spec.trial_id, spec.name, spec.device, began.pid, spec.attempt, started_at, began.reserved_mb,
             began.where),
        )

    @_writes
    def not_running(self, trial_id: str) -> None:
        """A trial left its process unrecorded (paused): status no longer shows it running."""
        self._fast.execute("DELETE FROM running WHERE trial_id = ?", (trial_id,))

    @_writes
    def clear_running(self) -> None:
        """Forget running marks left by a sweep that was killed."""
        self._fast.execute("DELETE FROM running")

    def running(self) -> list[dict[str, Any]]:
        have = {r[1] for r in self._db.execute("PRAGMA table_info(running)")}
        older = [c if c in have else f"NULL AS {c}" for c in ("reserved_mb", "place")]  # an older ledger, read-only
        cur = self._db.execute(f"SELECT trial_id, name, device, pid, attempt, started_at, {', '.join(older)} "
                               "FROM running")
        keys = [d[0] for d in cur.description]
        return [dict(zip(keys, (current_id(row[0]), *row[1:]))) for row in cur]

    # -- per-epoch reports --------------------------------------------------------------

    @_writes
    def add_history(self, trial_id: str, items: list[dict[str, Any]]) -> None:
        """Store a batch of a trial's per-epoch reports (a later report of an epoch wins)."""
        with self._fast:
            self._fast.execute("BEGIN IMMEDIATE")
            self._fast.executemany(
                "INSERT OR REPLACE INTO history VALUES (?,?,?,?)",
                [(trial_id, int(i["epoch"]), json.dumps(i["metrics"]), i.get("t")) for i in items],
            )

    @_writes
    def clear_history(self, trial_id: str) -> None:
        """A trial starts again: its earlier epochs are not this attempt's."""
        self._fast.execute("DELETE FROM history WHERE trial_id = ?", (trial_id,))

    @_writes
    def clear_history_after(self, trial_id: str, epoch: int) -> None:
        """A trial goes on from ``epoch`` (a checkpoint of then): its later reports are not its curve."""
        self._fast.execute("DELETE FROM history WHERE trial_id = ? AND epoch > ?", (trial_id, int(epoch)))

    def history(self) -> list[tuple[str, int, dict[str, Any]]]:
        rows = self._db.execute("SELECT trial_id, epoch, metrics FROM history ORDER BY trial_id, epoch")
        return [(current_id(tid), epoch, json.loads(m)) for tid, epoch, m in rows]

    # -- population-based training's schedules -----------------------------------------------

    @_writes
    def set_schedule(self, trial_id: str, epoch: int, params: dict[str, Any], copied_from: str) -> None:
        """A trial's parameters from after ``epoch`` on (0: from its start), and the trial whose
        checkpoint it copied then ("" where none); durable (fsync) before it returns: a copy's
        journal entry is removed only once its row survives a power cut."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT OR REPLACE INTO schedule VALUES (?,?,?,?)",
                             (trial_id, int(epoch), json.dumps(params, sort_keys=True), copied_from))

    def schedule(self) -> dict[str, list[tuple[int, dict[str, Any], str]]]:
        """Each trial's schedule (population-based training): (epoch, params from after it, the
        trial copied then), in epoch order; {} for a sweep without one, or a ledger from before."""
        try:
            rows = self._db.execute("SELECT trial_id, epoch, params, copied_from FROM schedule "
                                    "ORDER BY trial_id, epoch").fetchall()
        except sqlite3.OperationalError:  # a read-only ledger from before schema 9
            return {}
        out: dict[str, list[tuple[int, dict[str, Any], str]]] = {}
        for tid, epoch, params, copied in rows:
            out.setdefault(current_id(tid), []).append((epoch, json.loads(params), copied))
        return out

    def epochs(self, trial_id: str, after: int | None = None) -> list[tuple[int, dict[str, Any], float | None]]:
        """One trial's reports after epoch ``after``: (epoch, metrics, time reported)."""
        ids = (trial_id, trial_id[1:] if trial_id.startswith("t") else trial_id)  # as an old ledger has it
        rows = self._db.execute(
            "SELECT epoch, metrics, t FROM history WHERE trial_id IN (?, ?) AND epoch > ? ORDER BY epoch",
            (*ids, -(2**62) if after is None else after))
        return [(epoch, json.loads(m), t) for epoch, m, t in rows]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see the ledger as it was at one moment (one read transaction)."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def changed(self) -> int:
        """A number that changes when another connection writes (``PRAGMA data_version``)."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def latest_epochs(self) -> dict[str, tuple[int, dict[str, Any]]]:
        """Each trial's last reported epoch and its metrics."""
        rows = self._db.execute(
            "SELECT h.trial_id, h.epoch, h.metrics FROM history h JOIN "
            "(SELECT trial_id, max(epoch) AS e FROM history GROUP BY trial_id) m "
            "ON h.trial_id = m.trial_id AND h.epoch = m.e"
        )
        return {current_id(tid): (epoch, json.loads(m)) for tid, epoch, m in rows}

    # -- facts about the sweep --------------------------------------------------------

    def ranking(self, metric: str | None = None, mode: str | None = None) -> tuple[str | None, str | None]:
        """The metric and mode to rank by: those given, else those the sweep ran with."""
        if metric is not None:
            return metric, mode
        facts = self.facts()
        return facts.metric or None, mode or facts.mode or None

    def objectives(self) -> Objectives | None:
        """The several objectives the sweep last ran with (None: one, or none)."""
        return Objectives.from_text(self.facts().objectives or None)

    def facts(self) -> SweepFacts:
        """The sweep's own record (:mod:`sweeper.store.facts`)."""
        return SweepFacts.read(self._get)

    def run_record(self, run_id: str) -> Any:
        """What one run of the sweep ran on and how it named ``train`` (None: not on record)."""
        text = self._get(run_key(run_id))
        return json.loads(text) if text else None

    @_writes
    def put_facts(self, one_run: tuple[str, Any] | None = None, **given: Any) -> None:
        """Some of the sweep's facts (:class:`~sweeper.store.facts.SweepFacts`' fields), in one
        transaction; ``one_run``: (a run's id, its own record) besides."""
        items = encoded(**given) + ([(run_key(one_run[0]), json.dumps(one_run[1], sort_keys=True))] if one_run else [])
        with self._fast:
            self._fast.execute("BEGIN IMMEDIATE")
            self._fast.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", items)

    def _get(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    # -- what changed, for readers that follow a sweep (the trackers' mirror) ---------------

    def recorded_since(self, since: float | None, stamps: dict[str, float]) -> tuple[dict[str, TrialResult],
                                                                                      float | None]:
        """Rows recorded at ``since`` or later (every row for None), but those whose time
        ``stamps`` already holds (read before, unchanged since), and the newest row's time.
        ``stamps`` is brought up to date."""
        if since is None:
            rows = self._db.execute(f"SELECT {self._select}, recorded_at FROM trials")
        else:
            rows = self._db.execute(f"SELECT {self._select}, recorded_at FROM trials WHERE recorded_at >= ?",
                                    (since,))
        out, newest = {}, None
        for row in rows:
            newest = row[-1] if newest is None or row[-1] > newest else newest
            tid = current_id(row[0])
            if since is not None and stamps.get(tid) == row[-1]:
                continue
            stamps[tid] = row[-1]
            out[tid] = result_of(row[:-1])
        return out, newest

    def rows_of(self, ids: Iterable[str]) -> dict[str, TrialResult]:
        """The rows of these trials, where they have one."""
        ids = list(ids)
        out: dict[str, TrialResult] = {}
        for i in range(0, len(ids), 400):
            chunk = [form for tid in ids[i:i + 400] for form in (tid, tid[1:])]  # as an old ledger has it
            rows = self._db.execute(f"SELECT {self._select} FROM trials WHERE trial_id IN "
                                    f"({','.join('?' * len(chunk))})", chunk)
            out.update((r.trial_id, r) for r in map(result_of, rows))
        return out

    def last_epochs(self) -> dict[str, int]:
        """Each trial's last reported epoch (what the trackers' mirror reads)."""
        rows = self._db.execute("SELECT trial_id, max(epoch) FROM history GROUP BY trial_id")
        return {current_id(tid): epoch for tid, epoch in rows}
