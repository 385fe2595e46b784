"""What a ledger keeps about the sweep itself (its ``meta`` table), as one typed record.

The table holds text by key; this module is the only one that knows the keys and how each
value is written (plain text, a number, JSON), so every reader gets the same types and a
missing key (a ledger from before the key existed) reads as the field's default.

=================  ==========================================================================
field              what it is, and who writes it
=================  ==========================================================================
uid                the sweep's id, kept across resumes (the planner; trackers find it by it)
started            when this run began, ISO 8601 UTC (the planner)
total              how many trials the sweep has (grid points, or a search's trials)
grid_fingerprint   the grid file's content hash, to tell a moved file from a changed one
definition         what made the trials: seed, what ran, the source file (the planner)
metric, mode       what ranks the trials, once settled (the ranking output, at the first ok result)
objectives         several metrics at once, as text (:class:`~sweeper.model.objectives.Objectives`)
search             a search's sampler and pruner, in words
log_scale          the parameters a search drew on a log scale (the report's log axes)
environment        what the last run ran on (:mod:`sweeper.system.environment`)
target             how the last run named ``train``
run                the last run's id; each run's own record is :meth:`Ledger.run_record`
=================  ==========================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Callable

#: Fields stored as JSON (the rest as their text).
_JSON = frozenset({"definition", "log_scale", "environment", "target"})


@dataclass(frozen=True)
class SweepFacts:
    """The sweep's own record in its ledger (see the module docstring)."""

    uid: str = ""
    started: str = ""
    total: int | None = None
    grid_fingerprint: str = ""
    definition: dict[str, Any] = field(default_factory=dict)
    metric: str = ""
    mode: str = ""
    objectives: str = ""
    search: str = ""
    log_scale: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    target: Any = None
    run: str = ""

    @classmethod
    def read(cls, get: Callable[[str], str | None]) -> SweepFacts:
        """The record from the table's values (``get(key)``; None where a key is missing)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            text = get(f.name)
            if not text:
                continue  # missing, or written empty: the default
            values[f.name] = json.loads(text) if f.name in _JSON else int(text) if f.name == "total" else text
        return cls(**values)


def encoded(**given: Any) -> list[tuple[str, str]]:
    """The table's (key, text) pairs for the fields given; a name that is no field is refused."""
    names = {f.name for f in fields(SweepFacts)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise TypeError(f"not facts of a sweep: {', '.join(unknown)}")
    return [(k, json.dumps(v, sort_keys=True) if k in _JSON else "" if v is None else str(v)) for k, v in given.items()]


def run_key(run_id: str) -> str:
    """The key of one run's own record (what it ran on and how it named ``train``)."""
    return f"run:{run_id}"
