"""A ledger's SQL: its tables (:data:`SCHEMA`, version :data:`SCHEMA_VERSION`), the
migrations that bring an earlier release's ledger up to it, what tells a sweep's ledger
from another program's database, and how a :class:`~sweeper.model.trial.TrialResult` is a
row of its ``trials`` table and back (a column per field, generated from the fields).
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import MISSING, Field, fields
from typing import Any, Callable

from sweeper.model.text import printable
from sweeper.model.trial import Status, TrialResult, current_id

#: ``PRAGMA user_version`` of the ledgers this release writes. 0: before versions (trial
#: ids without their ``t``, no ``grid`` table); 1: ids with it; 2: ``epoch_reached``; 3:
#: ``mem_peak_mb``; 4: ``gpu_mem_reserved_mb``; 5: ``feasible``; 6: ``env``, ``deterministic``; 7: a
#: running trial's ``place`` (where it runs, in its backend's words); 8: ``job_id`` (a batch
#: scheduler's job, Slurm's); 9: ``segments`` (the processes a paused trial ran in) and the
#: ``schedule`` table (a population-based member's parameters by epoch, and what it copied). Older ledgers are migrated
#: when a sweep opens them, and read as migrated by ``load()`` and ``status``.
SCHEMA_VERSION = 9

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    trial_id TEXT PRIMARY KEY,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    metrics TEXT NOT NULL,
    seed INTEGER,
    device TEXT,
    started_at TEXT,
    duration_s REAL,
    error TEXT,
    attempts INTEGER,
    pid INTEGER,
    exitcode INTEGER,
    log TEXT,
    gpu_uuid TEXT,
    gpu_mem_cap_mb INTEGER,
    gpu_mem_peak_mb INTEGER,
    recorded_at REAL NOT NULL,
    epoch_reached INTEGER,
    mem_peak_mb INTEGER,
    gpu_mem_reserved_mb INTEGER,
    feasible INTEGER,
    env TEXT,
    deterministic INTEGER,
    job_id TEXT,
    segments INTEGER
);
CREATE TABLE IF NOT EXISTS running (
    trial_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    device TEXT,
    pid INTEGER,
    attempt INTEGER,
    started_at TEXT,
    reserved_mb INTEGER,
    place TEXT
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS grid (
    trial_id TEXT PRIMARY KEY,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS schedule (
    trial_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    params TEXT NOT NULL,
    copied_from TEXT NOT NULL,
    PRIMARY KEY (trial_id, epoch)
);
CREATE TABLE IF NOT EXISTS history (
    trial_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    t REAL,
    PRIMARY KEY (trial_id, epoch)
);
"""

#: The tables every ledger has had since sweeper 0.1.0 (schema 0), with the columns each
#: had then: a file without them is not a sweep's ledger, whatever else it holds.
SIGNATURE = {
    "trials": {"trial_id", "idx", "name", "params", "status", "metrics", "recorded_at"},
    "running": {"trial_id", "name", "device", "pid", "attempt", "started_at"},
    "meta": {"key", "value"},
    "history": {"trial_id", "epoch", "metrics", "t"},
}

#: The trials table's name for a :class:`TrialResult` field where it is not the field's
#: (``index`` is a word of SQL's). The table has a column per field, and ``recorded_at``.
_SQL_NAMES = {"index": "idx"}
FIELDS = fields(TrialResult)
COLUMNS = ", ".join(_SQL_NAMES.get(f.name, f.name) for f in FIELDS)
#: How a field's value is stored, where not as it is, and read back.
STORED: dict[str, Callable[[Any], Any]] = {
    "params": lambda params: json.dumps(params, sort_keys=True),
    "status": lambda status: status.value,
    "metrics": json.dumps,
    "env": lambda env: json.dumps(env, sort_keys=True),
}
_READ: dict[str, Callable[[Any], Any]] = {
    "trial_id": current_id,
    "params": json.loads,
    "status": Status,
    "metrics": json.loads,
    "feasible": lambda value: None if value is None else bool(value),
    "deterministic": lambda value: None if value is None else bool(value),
    "env": lambda value: json.loads(value) if value else {},  # rows from before schema 6: none
    "duration_s": lambda value: value,  # NULL: the trial never began (it waited in a queue)
}


def migrate(db: sqlite3.Connection) -> None:
    """Bring a ledger written by an earlier release up to :data:`SCHEMA_VERSION`."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    with db:
        db.execute("BEGIN IMMEDIATE")
        if version < 1:  # trial ids gain their "t"
            for table in ("trials", "running", "history", "grid"):
                db.execute(f"UPDATE {table} SET trial_id = 't' || trial_id WHERE trial_id NOT LIKE 't%'")
        have = {r[1] for r in db.execute("PRAGMA table_info(trials)")}
        # 2: the epoch a trial reached (pruned trials stop early); 3: its peak host memory;
        # 4: the GPU memory reserved for it; 5: whether it met the sweep's constraints;
        # 6: what it ran on (its environment), and whether it ran deterministically; 8: its
        # batch scheduler's job (7 changed only the running table); 9: its segments (the
        # schedule table comes with SCHEMA, created where missing)
        added = (("epoch_reached", "INTEGER"), ("mem_peak_mb", "INTEGER"), ("gpu_mem_reserved_mb", "INTEGER"),
                 ("feasible", "INTEGER"), ("env", "TEXT"), ("deterministic", "INTEGER"), ("job_id", "TEXT"),
                 ("segments", "INTEGER"))
        for column, kind in added[max(version - 1, 0):]:
            if column not in have:
                db.execute(f"ALTER TABLE trials ADD COLUMN {column} {kind}")
        running = {r[1] for r in db.execute("PRAGMA table_info(running)")}
        if "reserved_mb" not in running:
            db.execute("ALTER TABLE running ADD COLUMN reserved_mb INTEGER")  # 4: what a running trial reserved
        if "place" not in running:
            db.execute("ALTER TABLE running ADD COLUMN place TEXT")  # 7: where it runs, in its backend's words
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

def readable(db: sqlite3.Connection) -> str:
    """The trials' columns to select: a ledger opened read-only is not migrated, and a
    column it lacks (one a later schema added) reads as NULL."""
    have = {r[1] for r in db.execute("PRAGMA table_info(trials)")}
    return ", ".join(c if c in have else "NULL" for c in COLUMNS.split(", "))


def foreign(db: sqlite3.Connection, path: str) -> str | None:
    """Why this database is not a sweep's ledger: it lacks a table (or a column) every
    ledger has had since sweeper 0.1.0; None where it is one."""
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if not tables:
        return "an empty file" if os.path.getsize(path) == 0 else "a database without tables"
    if not set(tables) & set(SIGNATURE):
        shown = ", ".join(printable(t[:40]) for t in sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
        return f"another program's database: its tables are {shown}"
    for table, columns in SIGNATURE.items():
        have = {row[0] for row in db.execute("SELECT name FROM pragma_table_info(?)", (table,))}
        if not have:
            return f"it has no table {table}"
        if not columns <= have:
            return f"its table {table} has no column {', '.join(sorted(columns - have))}"
    return None


def _reader(f: Field[Any]) -> Callable[[Any], Any] | None:
    """How a trials column is read back into its field: as :data:`_READ` says; a NULL or
    empty value of a field with a default (a column a later schema added) as that default."""
    if f.name in _READ:
        return _READ[f.name]
    default = f.default
    if default is None or default is MISSING:
        return None
    return lambda value: value or default


_READERS = [(f.name, _reader(f)) for f in FIELDS]


def result_of(row: tuple[Any, ...]) -> TrialResult:
    """A trials row (its columns as :data:`COLUMNS` names them) as the result it stores."""
    return TrialResult(**{name: value if read is None else read(value)
                          for (name, read), value in zip(_READERS, row, strict=True)})
