"""A sweep's plan: its trials, their names, what a resume keeps, and a search's resume.

::

    grid ──expand──> points ──plan()──> TrialSpec per distinct point (grid order)
                                              │
    ledger (rows on record, the definition) ──┤ Plan.resume():
                                              │   check_definition: same function, file, seed, or refused
                                              │   a search rebuilt from its rows (its space's only)
                                              │   on_record: each point's trial on record, by key
                                              │   keep_names: a trial keeps the folder it has
                                              │   keeps(): a row kept, or its trial run again
                                              v
                                  Plan: specs, todo, kept rows, notes, the ledger's facts

The plan's :meth:`Plan.scheduler` is what the engine asks for trials
(:mod:`sweeper.search.schedulers`): the trials to run, or a search's, asked for as places free,
each asked point a spec of the plan and a row of the ledger's grid.

Ids are made here only (:func:`sweeper.model.trial.new_id`); rows on record are found by
their point's key, so a trial's id is never re-derived from its parameters.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import direction
from sweeper.model.settings import Settings
from sweeper.model.protocol import Scheduler
from sweeper.model.trial import (
    Status,
    TrialResult,
    TrialSpec,
    keep_names,
    new_id,
    params_key,
    trial_names,
    trial_seed,
)
from sweeper.search.schedulers import Listed, Searching
from sweeper.store.folder import SweepFolder, default_uid
from sweeper.store.ledger import Ledger
from sweeper.store.paths import SweepPaths

if TYPE_CHECKING:
    from sweeper.search.pbt import Population
    from sweeper.search.sampling import Search


def plan(points: Sequence[Mapping[str, Any]], folder: str, seed: int,
         fixed: Collection[str] | None = None, taken: set[str] | None = None,
         names: Sequence[str] | None = None) -> list[TrialSpec]:
    """A spec per distinct point, in grid order (a point listed twice runs once), named by
    what varies among them (``fixed``: the keys names leave out; by default those all the
    points share, :func:`sweeper.model.trial.fixed_keys`) or by ``names`` (each point's, in
    order: a front end's own), each given an id none in ``taken`` has (the ids given are added to it)."""
    distinct: dict[str, Mapping[str, Any]] = {}
    given_names: dict[str, str] = {}
    for i, p in enumerate(points):
        key = params_key(p)
        distinct.setdefault(key, p)
        if names is not None:
            given_names.setdefault(key, names[i])
    names = list(given_names.values()) if names is not None else trial_names(list(distinct.values()), fixed)
    given = taken if taken is not None else set()
    ids = []
    for key in distinct:
        ids.append(new_id(key, given))
        given.add(ids[-1])
    return [TrialSpec(trial_id=tid, name=name, index=i, params=dict(p), seed=trial_seed(seed, tid),
                      dir=SweepPaths(folder).trial(name))
            for i, (tid, p, name) in enumerate(zip(ids, distinct.values(), names))]


def on_record(specs: Sequence[TrialSpec], previous: Mapping[str, TrialResult], seed: int) -> list[TrialSpec]:
    """Each point's trial on record is the spec's trial: found by the point's key (never by
    an id made from parameters), the spec takes that trial's id and seed, one row for one
    spec; a point not on record gets an id no row has."""
    by_key: dict[str, list[str]] = {}
    for tid, row in previous.items():
        by_key.setdefault(row.key, []).append(tid)
    taken = set(previous)
    out = []
    for spec in specs:
        ids = by_key.get(spec.key, [])
        tid = spec.trial_id if spec.trial_id in ids else (ids[0] if ids else new_id(spec.key, taken))
        if tid in ids:
            ids.remove(tid)
        taken.add(tid)
        out.append(spec if tid == spec.trial_id else replace(spec, trial_id=tid, seed=trial_seed(seed, tid)))
    return out


def fingerprint(path: str | None) -> str | None:
    from sweeper.system.environment import digest

    return digest(path) if path else None


def keeps(old: TrialResult | None, skip_failed: bool) -> bool:
    """Whether a resume keeps a trial's row instead of running it again."""
    return old is not None and (
        old.status.succeeded or (skip_failed and old.status is not Status.INTERRUPTED))


def check_definition(ledger: Ledger, previous: Mapping[str, TrialResult], seed: int, what: str,
                     folder: str, source: str | None = None) -> None:
    """One sweep per folder, and a row reused only where the same thing would run: the same
    parameters (the trial id), the same sweep seed, the same function or command
    (``what``) from the same file (``source``: the grid file, or the file defining
    ``train``). A folder whose rows came from anything else is refused, never mixed.

    A file that moved but did not change (the same fingerprint) is the same file. Ledgers
    from before this record have no definition: their seed is checked through the rows'
    own seeds, and what they ran is taken to be what runs now.
    """
    facts = ledger.facts()
    recorded = facts.definition
    source = os.path.abspath(source) if source else ""
    if previous:
        old_seed = recorded.get("seed")
        if old_seed is None:
            mismatch = [r for r in previous.values() if r.seed != trial_seed(seed, r.trial_id)]
            old_seed = "another" if mismatch else seed
        old_what = recorded.get("what") or what
        old_source = recorded.get("source") or source
        moved_only = fingerprint(source) == facts.grid_fingerprint
        changes = []
        if old_what != what and what:
            changes.append(f"were made by {old_what}, not {what}")
        elif old_source != source and source and not moved_only:
            changes.append(f"were made from {old_source}, not {source}")
        if old_seed != seed:
            changes.append(f"were made with seed {old_seed}, not {seed}")
        if changes:
            raise SweepError(
                f"the {len(previous)} trials on record in {folder} {' and '.join(changes)}, so none "
                "of them can stand for this run; give this run another --name (name=...), or start "
                "over with --fresh (fresh=True), which keeps the old ledger beside the new one"
            )
    ledger.put_facts(definition={"seed": seed, "what": what or recorded.get("what", ""),
                                 "source": source or recorded.get("source", "")})


def kept_and_todo(specs: Sequence[TrialSpec], previous: Mapping[str, TrialResult], settings: Settings,
                  settled: Collection[str]) -> tuple[dict[str, TrialResult], list[TrialSpec]]:
    """The rows on record a resume keeps (by trial id), and the trials it runs, in order."""
    kept: dict[str, TrialResult] = {}
    todo: list[TrialSpec] = []
    judge = settings.scoring.constraints
    for spec in specs:
        old = previous.get(spec.trial_id)
        if old is not None and (keeps(old, settings.folder.skip_failed) or spec.key in settled):
            # today's grid order, and today's constraints (they may have changed)
            kept[spec.trial_id] = replace(old, index=spec.index, name=spec.name,
                                          feasible=judge.feasible(old) if judge is not None else None)
        elif spec.key in settled:  # settled but never started (the sweep stopped first): not run now
            continue
        elif old is not None:  # run again: its attempts go on counting (its log says which)
            attempt = old.attempts if old.duration_s is None else old.attempts + 1  # one that never began was none
            todo.append(replace(spec, attempt=attempt, first_attempt=attempt))
        else:
            todo.append(spec)
    return kept, todo


@dataclass
class Plan:
    """What this run of a sweep does, decided from its trials and the folder's ledger."""

    specs: list[TrialSpec]  #: the sweep's trials (a search's grow as they are asked)
    todo: list[TrialSpec]  #: to run, in order (a search asks for more through ``feed``)
    kept: dict[str, TrialResult]  #: rows on record a resume keeps, by trial id
    wanted: set[str]  #: the ids of this sweep's trials (results.csv shows only these)
    total: int  #: trials in the sweep (a search: its budget)
    uid: str  #: the sweep's id (trackers find their runs by it)
    mode: str  #: min or max for the metric ranked by, or ""
    facts: dict[str, Any]  #: what the ledger records of this run (:class:`~sweeper.store.facts.SweepFacts`' fields)
    notes: list[str]  #: said after the sweep, with its summary
    search: Search | None = None
    feed: Searching | None = None  #: a search's scheduler
    population: Population | None = None  #: population-based training's scheduler
    #: said before any trial runs: how many trials on record a resume keeps, how many run
    resumed: str = ""

    def scheduler(self, asking: bool = True) -> Scheduler:
        """What the engine asks for trials: a search's (which asks its sampler for more unless
        told not to: ``asking``), else the trials to run."""
        if self.population is not None:
            return self.population
        if self.feed is None:
            return Listed(self.todo)
        self.feed.asking = asking
        return self.feed

    @property
    def to_run(self) -> int:
        """Trials this run will start, a search's still to ask for included."""
        return len(self.todo) + (self.feed.remaining if self.feed is not None else 0)

    @classmethod
    def resume(cls, ledger: Ledger, settings: Settings, specs: list[TrialSpec], space: Any, folder: SweepFolder,
               source_file: str | None, what: str, settled: Collection[str] = ()) -> Plan:
        """The plan against the ledger: the definition checked, a search rebuilt from its
        rows, each trial's name kept, rows kept or run again (``settled``: the keys of points
        whose rows stand whatever their status); the ledger's grid set."""
        notes: list[str] = []
        ledger.clear_running()
        previous = ledger.results()
        seed, scoring = settings.launching.seed, settings.scoring
        check_definition(ledger, previous, seed, what, folder.path, source_file)
        search = None
        if space is not None and settings.search.pbt is not None:  # a population: its members on record, or drawn
            return cls._population(ledger, settings, space, folder, previous, source_file)
        if space is not None:  # a search: the trials on record are its own, the rest it asks for
            search, specs = _search(space, settings, folder.path, ledger, previous)
        specs = on_record(specs, previous, seed)
        # names on record: the last run's grid's (a trial it started may have left a folder), each row's
        recorded = {**ledger.grid_names(), **{tid: r.name for tid, r in previous.items()}}
        specs = keep_names(specs, recorded)
        ledger.set_grid((s.trial_id, s.index, s.name) for s in specs)
        print_, recorded_facts = fingerprint(source_file), ledger.facts()
        if print_ and recorded_facts.grid_fingerprint and print_ != recorded_facts.grid_fingerprint and previous:
            notes.append(f"the grid file changed since the last run ({len(previous)} trials on record)")
        total = search.total if search is not None else len(specs)
        uid = recorded_facts.uid or (default_uid(folder.path) if previous else uuid.uuid4().hex)
        facts: dict[str, Any] = {"grid_fingerprint": print_ or "", "total": total, "uid": uid,
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if search is not None:
            facts["search"] = f"{search.sampler_name}, prune {search.pruner_name}"
        # the parameters searched on a log scale (loguniform): the report draws them on a log axis
        logs = sorted(k for k, d in search.dists.items() if getattr(d, "log", False)) if search is not None else []
        facts["log_scale"] = logs
        mode = scoring.mode or (direction(scoring.metric) if scoring.metric else None) or ""

        wanted = {s.trial_id for s in specs}
        kept, todo = kept_and_todo(specs, previous, settings, settled)
        changed = [(tid, r.feasible) for tid, r in kept.items() if r.feasible != previous[tid].feasible]
        if changed:  # what status, report and load() read says the same
            ledger.set_feasible(changed)
        feed = Searching(search, todo, specs, wanted, ledger, recorded) if search is not None else None
        made = cls(specs, todo, kept, wanted, total, uid, mode, facts, notes, search, feed)
        resumed = [s for s in specs if s.trial_id in kept and s.key not in settled]  # not this run's own
        if resumed:
            made.resumed = f"resumed: {len(resumed)} trials already on record were kept; {made.to_run} to run"
        others = len(set(previous) - wanted)
        if others:
            this = "search's space" if search is not None else "grid"
            notes.append(f"{others} trials on record here are not in this {this}, and count for nothing in this "
                         f"run; results.csv shows this {this}'s (load(folder, every=True) shows all)")
        return made


    @classmethod
    def _population(cls, ledger: Ledger, settings: Settings, space: Any, folder: SweepFolder,
                    previous: Mapping[str, TrialResult], source_file: str | None) -> Plan:
        """Population-based training's plan (:mod:`sweeper.search.members`): its members, each a
        trial; one failed for good is replaced by a new trial, which joins the plan's specs
        and the ledger's grid as it is made."""
        from sweeper.search import pbt
        from sweeper.search.members import members

        how = settings.search.pbt
        assert how is not None  # (a population: its settings parsed with the options)
        seed = settings.launching.seed
        specs: list[TrialSpec] = []
        wanted: set[str] = set()
        taken = set(previous) | set(ledger.schedule())

        def make_spec(params: Mapping[str, Any], name: str, trial_id: str | None = None) -> TrialSpec:
            made = plan([params], folder.path, seed, taken=taken if trial_id is None else set())[0]
            tid = trial_id or made.trial_id
            spec = replace(made, trial_id=tid, name=name, seed=trial_seed(seed, tid),
                           dir=folder.paths.trial(name), index=len(specs))
            os.makedirs(spec.checkpoint, exist_ok=True)
            if trial_id is None and tid not in wanted:  # a new member (a replacement, as it runs)
                specs.append(spec)
                wanted.add(tid)
                ledger.set_grid((s.trial_id, s.index, s.name) for s in specs)
            return spec

        metric = settings.scoring.metric or ""
        mode = settings.scoring.mode or direction(metric) or "max"
        population, mine, todo, kept = members(space, how, metric=metric, mode=mode, folder=folder.path,
                                               seed=seed, ledger=ledger, previous=previous,
                                               make_spec=make_spec)
        specs[:] = [*mine, *(s for s in specs if s.trial_id not in {m.trial_id for m in mine})]
        wanted.update(s.trial_id for s in specs)
        ledger.set_grid((s.trial_id, s.index, s.name) for s in specs)
        recorded = ledger.facts()
        print_ = fingerprint(source_file)
        uid = recorded.uid or (default_uid(folder.path) if previous else uuid.uuid4().hex)
        facts: dict[str, Any] = {"grid_fingerprint": print_ or "", "total": how.population, "uid": uid,
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "search": f"pbt, population {how.population}, interval {how.interval}",
                                 "log_scale": sorted(p.name for p in pbt.explorable(space).params
                                                     if type(p).__name__ == "LogUniform")}
        made = cls(specs, todo, kept, wanted, how.population, uid, settings.scoring.mode or mode, facts, [],
                   population=population)
        if kept:
            made.resumed = f"resumed: {len(kept)} members already on record were kept; {len(todo)} to run"
        return made


def _search(space: Any, settings: Settings, folder: str, ledger: Ledger,
            previous: Mapping[str, TrialResult]) -> tuple[Search, list[TrialSpec]]:
    """The study, rebuilt from the ledger, and the specs of the trials on record (kept, or
    interrupted and to run again first)."""
    from sweeper.search.sampling import Search

    fixed: set[str] = set()  #: the space's keys with one value, which names leave out
    taken = set(previous)  #: ids given: a point asked for never takes one on record

    def make_spec(params: Mapping[str, Any], index: int) -> TrialSpec:
        return replace(plan([params], folder, seed, fixed, taken)[0], index=index)

    seed, asked, scoring = settings.launching.seed, settings.search, settings.scoring
    search = Search(space, search=asked.sampler or asked.name, prune=asked.pruner or asked.prune,
                    trials=asked.trials or 0, constraints=scoring.constraints, seed=seed,
                    metric=scoring.metric or "", mode=scoring.mode or "min", objectives=scoring.objectives,
                    make_spec=make_spec)
    fixed.update(search.fixed, (k for k, d in search.dists.items() if d.single()))
    history: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for tid, epoch, metrics in ledger.history():
        history.setdefault(tid, []).append((epoch, metrics))
    kept, again = search.resume(previous, history, lambda r: keeps(r, settings.folder.skip_failed))
    specs = [replace(plan([r.params], folder, seed, fixed)[0], index=r.index, name=r.name,
                     trial_id=r.trial_id, seed=trial_seed(seed, r.trial_id)) for r in [*kept.values(), *again]]
    return search, specs
