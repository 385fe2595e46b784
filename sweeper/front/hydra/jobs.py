"""A Hydra multirun's jobs as sweeper's points, and the book that numbers them for good.

Each job Hydra's sweeper hands the launcher is a list of overrides (``lr=0.1``,
``+extra=3``, ``model=resnet``). Its point is those overrides as parameters (the
override's key, its value as Hydra parses it), so ``results.csv`` has ``param_lr`` and
a resume finds the job's row by its point, whatever order the overrides came in.

The book (``<hydra.sweep.dir>/.sweeper_hydra/jobs.json``) gives each point its job number
once: the folder ``hydra.sweep.subdir`` names after it (``0``, ``1``, ...). The same
overrides keep their number in every later run in that folder; new ones take numbers no
job had and no folder there has, so a finished job's folder is never written again
(hydra#3328).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from sweeper.errors import SweepError
from sweeper.model.trial import params_key
from sweeper.model.values import normalise_value
from sweeper.store.paths import SweepPaths, atomic


@dataclass(frozen=True)
class Job:
    """One job of a multirun: its number, its overrides as given, its point."""

    num: int
    overrides: tuple[str, ...]
    params: dict[str, Any]

    @property
    def key(self) -> str:
        return params_key(self.params)


def params_of(overrides: Sequence[str]) -> dict[str, Any]:
    """A job's overrides as a point: ``lr=0.1`` is ``{"lr": 0.1}``; ``+x=1`` and ``++x=1`` are
    ``{"x": 1}``; ``~x`` is ``{"~x": None}``; a group's package stays in the name
    (``db@backup=mysql``). One line for an override Hydra cannot parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise SweepError(f"a job's overrides {' '.join(overrides)} do not parse: {exc}") from None
    params: dict[str, Any] = {}
    for o in parsed:
        name = o.key_or_group + (f"@{o.package}" if o.package else "")
        if o.type is OverrideType.DEL:
            name = "~" + name
        value = o.value()
        if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value)):
            raise SweepError(f"the override {o.input_line} gives {name} a dict, which sweeper's table cannot hold as "
                             f"one parameter; override its keys one by one ({name}.KEY=VALUE)")
        params[name] = normalise_value(value, name)  # a number that is no number (nan, inf): one line
    return params


class Book:
    """The job numbers of one sweep folder, read once and written whole."""

    def __init__(self, paths: SweepPaths, fresh: bool = False) -> None:
        self.path = paths.hydra_book
        self.folder = paths.folder
        self.entries: dict[str, dict[str, Any]] = {}  #: point key -> {"num": n, "overrides": [...]}
        self.retired: set[int] = set()  #: numbers a --fresh run set aside: never given again
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self.entries = dict(data.get("jobs", {}))
            self.retired = set(data.get("retired", []))
        if fresh:
            self.retired |= {int(e["num"]) for e in self.entries.values()}
            self.entries = {}

    def taken(self) -> set[int]:
        """Numbers no new job may have: the book's, and every numbered folder already there."""
        nums = {int(e["num"]) for e in self.entries.values()} | self.retired
        if os.path.isdir(self.folder):
            nums |= {int(n) for n in os.listdir(self.folder) if n.isdigit()}
        return nums

    def number(self, batch: Sequence[Sequence[str]], first: int) -> list[Job]:
        """Each job of a batch its number: the book's for overrides it has seen; else the
        job's place in the multirun (``first`` + its index, as Hydra's basic launcher
        numbers it), or the next number no job and no folder has."""
        taken = self.taken()
        jobs: list[Job] = []
        for i, overrides in enumerate(batch):
            params = params_of(overrides)
            key = params_key(params)
            entry = self.entries.get(key)
            if entry is None:
                num = first + i
                while num in taken:
                    num += 1
                taken.add(num)
                entry = self.entries[key] = {"num": num, "overrides": list(overrides)}
            else:  # the same job: its number; the overrides as given today
                entry["overrides"] = list(overrides)
            jobs.append(Job(int(entry["num"]), tuple(overrides), params))
        return jobs

    def save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with atomic(self.path, encoding="utf-8") as f:
            json.dump({"jobs": self.entries, "retired": sorted(self.retired)}, f, indent=1, sort_keys=True)

    @classmethod
    def job_of(cls, paths: SweepPaths, params: dict[str, Any]) -> Job:
        """The job a trial's point is (in the job's own process)."""
        book = cls(paths)
        entry = book.entries.get(params_key(params))
        if entry is None:
            raise SweepError(f"no job of {book.path} has the overrides {params}; run the multirun again")
        return Job(int(entry["num"]), tuple(entry["overrides"]), params)


def described(jobs: Iterable[Job]) -> list[str]:
    """Each job as Hydra's launchers log it: ``#3 : lr=0.1 units=32``."""
    return [f"\t#{job.num} : {' '.join(job.overrides)}" for job in jobs]
