"""One sweep from start to end: its folder, its plan, its outputs, the engine between them.

Shared by every front door (``sweep()``, the command line, the Hydra launcher, a replay), so all
behave the same; each shows it through :func:`sweeper.front.shown.run_shown`, whose live view
is one more of the outputs (a listener), so the run itself imports no front end.

::

    run(target, grid, options)
      └─ Sweep ── folder: SweepFolder   made, locked, set aside (--fresh)        sweeper.store.folder
               ── plan:   Plan          specs, names, definition check, resume   sweeper.run.planning
               ── outputs: Callbacks    TableFiles, packing's learning, the      sweeper.run.outputs
                                        front end's listener, Trackers
               ── Engine(backend, ledger, outputs) runs what plan.scheduler() gives, records each
                  result, and what it settles of the ranking (Ranking)           sweeper.run.ranking
               └─ Outcome: the rows (grid order), notes, what ran, where to look

A result reaches ``results.csv`` through one path: the engine records it in the ledger,
then tells the outputs (:meth:`sweeper.model.lifecycle.Callback.recorded`);
:class:`sweeper.run.outputs.TableFiles` makes it a row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sweeper.backends.registry import Launch, abandoning, lookup
from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.definition import Definition
from sweeper.model.settings import Settings, parse
from sweeper.model.protocol import Admission, Backend
from sweeper.model.target import record
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.model.objectives import Objectives
from sweeper.run.engine import Engine
from sweeper.placement.hostroom import HostRoom
from sweeper.model.lifecycle import Callback, Callbacks, SweepEnd
from sweeper.run.outputs import TableFiles, Trackers
from sweeper.placement.breaker import Breaker
from sweeper.placement.packing import Needs, Packer
from sweeper.placement.neighbours import Neighbours
from sweeper.placement.crowd import beside
from sweeper.placement.policy import Anywhere, SlotPlacement
from sweeper.run.planning import Plan, keeps, plan
from sweeper.run.ranking import Ranking
from sweeper.placement.slots import Placement, Slot, place
from sweeper.run.closing import Interrupted
from sweeper.search import registry as searches
from sweeper.store.folder import SweepFolder, refuse_busy
from sweeper.store.ledger import Ledger
from sweeper.store.paths import SweepPaths
from sweeper.system import environment, procs
from sweeper.tracking import chosen

if TYPE_CHECKING:
    from sweeper.backends.local.server import ForkServer

log = logging.getLogger("sweeper")


@dataclass
class Outcome:
    """What a sweep left behind: its results (grid order), where they are, and notes."""

    folder: str
    results: list[TrialResult]
    specs: list[TrialSpec]
    placement: Placement
    notes: list[str] = field(default_factory=list)
    ran: int = 0
    elapsed_s: float = 0.0
    interrupted: int | None = None  #: the signal that stopped the sweep, if one did
    end: SweepEnd = SweepEnd.FINISHED  #: how it ended (a dry run: FINISHED)
    kept: set[str] = field(default_factory=set)  #: a dry run: ids a resume would keep
    shown: list[str] = field(default_factory=list)  #: where else the sweep can be seen (trackers)
    #: What the folder records as its ranking (metric, mode), as load() reads it.
    ranking: tuple[str | None, str | None] = (None, None)
    #: Several objectives, whose Pareto front the table marks (None: one, or none).
    objectives: Objectives | None = None
    #: The table files that could not be written at the end, with why: the sweep failed.
    unwritten: list[tuple[str, str]] = field(default_factory=list)
    settings: Settings | None = None  #: the options it ran by, parsed (a dry run's plan reads them)

    def first_slots(self) -> list[str]:
        """A dry run: where each trial would start (``kept``, a slot's device, or ``queued``)."""
        out, free = [], iter(self.slots)
        for spec in self.specs:
            if spec.trial_id in self.kept:
                out.append("kept")
            else:
                slot = next(free, None)
                out.append(slot.device if slot else "queued")
        return out

    @property
    def slots(self) -> list[Slot]:
        return self.placement.slots

    @property
    def csv_path(self) -> str:
        return SweepPaths(self.folder).results

    def counts(self) -> Counter[str]:
        return Counter(r.status.value for r in self.results)


def run(
    definition: Definition,
    *,
    listener: Callback | None = None,
    tag: str | None = None,
    early: "ForkServer | None" = None,
    table: bool = True,
) -> Outcome:
    """Plan, resume and run a sweep (its :class:`~sweeper.model.definition.Definition`, from any front end). Raises SweepError for bad input, before any trial, or
    for a named metric the first ok trial did not return (the sweep stops there, rows kept).

    ``listener``: told what the outputs are (the console's view of it, :mod:`sweeper.front.shown`). ``tag``: the sweep's (:mod:`sweeper.system.procs`),
    where the CLI's grid reader carried it already (and guards it, :func:`sweeper.system.procs.guarded`).
    ``early``: a fork server the CLI started before it read the grid file (the caller stops it).
    ``table``: whether the caller reads the table once the sweep ends (a summary, ``sweep()``'s
    DataFrame), so pandas is imported while the trials run; False where nothing will (a quiet
    Hydra multirun), which then never imports it (half a second of a core per run)."""
    sweep = Sweep(definition)
    sweep.early, sweep.table = early, table
    if tag is not None or definition.options.dry_run:
        return sweep.run(listener, tag)
    tag = procs.new_tag()
    with procs.guarded(tag):
        return sweep.run(listener, tag)


def _summary_imported() -> threading.Thread:
    """pandas, which the closing summary and ``sweep()``'s table need, imported in a thread
    of its own while the first trials start, instead of after the last one ended (a quarter
    of a second on the sweep's end otherwise). Joined before the sweep returns: no import is
    under way when the interpreter ends."""

    def imported() -> None:
        with contextlib.suppress(Exception):
            import pandas  # noqa: F401

    warming = threading.Thread(target=imported, name="sweeper-import-pandas", daemon=True)
    warming.start()
    return warming


def _end_leftovers(earlier: str | None) -> None:
    """What an earlier run of this sweep left running, found by its tag, is ended: that
    run was killed before it, and its guardian, could end them."""
    if earlier is None:
        return
    left = procs.end_tagged(earlier)
    if left:
        shown = ", ".join(map(str, left[:8])) + (", ..." if len(left) > 8 else "")
        log.warning("sweeper: ended %d process%s an earlier run of this sweep left running (it was killed "
                    "before it could end them): pid %s", len(left), "es" if len(left) > 1 else "", shown)


class Sweep:
    """One sweep: its folder, its trials, where they run; :meth:`run` plans, resumes and runs it.

    Made from the user's input, checked (a bad grid, a bad option: one line, before any
    trial or file)."""

    def __init__(self, definition: Definition) -> None:
        self.began = time.monotonic()
        target, options, source_file, what = (definition.target, definition.options, definition.source_file,
                                              definition.what)
        #: a fork server the CLI started before it read the grid file, for the local backend
        self.early: ForkServer | None = None
        self.table = True  #: whether the table is read once the sweep ends (pandas warmed meanwhile)
        searches.check_settings(options)
        options.check_ranking()
        chosen.check(options)
        self.backend = lookup(options.backend)  #: where the trials run (an unknown name: one line, now)
        self.folder = SweepFolder(options.out, options.name or definition.default_name)
        self.space: Any = definition.space
        population = searches.of(options.search).pauses
        settings = parse(options, population)  # the options parsed once, by group: each part gets its own
        if definition.points is None:  # a search: trials are asked for as places free
            if population:
                from sweeper.search.pbt import check as check_population

                mode = check_population(self.space, options, self.backend.pauses)
            else:
                from sweeper.search.sampling import check

                mode = check(self.space, options.search, options.prune, options.trials, options.metric,
                             options.mode)
            options = replace(options, mode=mode)
            settings, self.specs = settings.ranked(options), []
        else:
            self.specs = plan(definition.points, self.folder.path, settings.launching.seed, names=definition.names)
        self.target, self.options, self.source_file, self.what = target, options, source_file, what
        self.settings, resources = settings, settings.resources
        self.schedules = definition.schedules
        self.settled = definition.settled
        if self.backend.places_trials:  # a cluster's scheduler places them (Ray on its own nodes' GPUs)
            self.placement = Placement([], [], resources.memory)
        else:
            self.placement = place(resources.gpus.chosen, resources.memory, resources.slots_workers)
        gpus = list(dict.fromkeys(s.gpu for s in self.placement.slots if s.gpu is not None))
        #: closes a card where trials crash, under any per_gpu (none on the CPU or under Ray)
        self.breaker = Breaker(gpus) if gpus else None
        self.packer = self._packer()
        self.host_room = self._host_room()

    def _host_room(self) -> HostRoom | None:
        """workers="auto" or a host_memory budget: trials start by the host memory they need."""
        resources = self.settings.resources
        if not resources.packs_host:
            return None
        return HostRoom(Needs(resources.memory_keys, host=True), resources.host_memory_mb,
                        watch_cores=resources.auto_workers)

    def _packer(self) -> Packer | None:
        """per_gpu="auto" on GPUs: the packer (on the CPU the option changes nothing)."""
        resources, placement = self.settings.resources, self.placement
        if placement.policy is None or not placement.policy.auto:
            return None
        if not placement.gpus:
            from sweeper.system import gpus

            raise SweepError(f"per_gpu='auto' packs trials by the free memory NVML reports, and NVML cannot "
                             f"tell ({gpus.unavailable or 'it lists none of these GPUs'}); give --per-gpu N")
        keys = resources.memory_keys
        if keys is not None and self.specs:
            named = {k for s in self.specs for k in s.params}
            unknown = [k for k in keys if k not in named]
            if unknown:
                raise SweepError(f"memory_keys names {', '.join(map(repr, unknown))}, which no point of the grid "
                                 f"has; choose among {', '.join(sorted(named)) or 'none'}")
        return Packer(Needs(keys, resources.gpu_memory), [str(g.index) for g in placement.gpus], self.breaker)

    def run(self, listener: Callback | None = None, tag: str | None = None) -> Outcome:
        if self.settings.folder.dry_run:
            return self.dry_run()
        self.folder.prepare()
        tag = tag or procs.new_tag()
        with self.folder.locked(tag) as earlier, abandoning(self.folder.path):
            _end_leftovers(earlier)
            if self.settings.folder.fresh:
                self.folder.set_aside()
            ledger = Ledger(self.folder.path)
            try:
                return self._run(ledger, listener, tag)
            finally:
                ledger.close()

    def dry_run(self) -> Outcome:
        """What would run: the trials a resume keeps are marked, not placed. A folder another
        sweep holds is refused, as the sweep would be."""
        refuse_busy(self.folder.path, dry_run=True)
        previous: dict[str, TrialResult] = {}
        if self.folder.paths.exists():
            ledger = Ledger(self.folder.path, readonly=True)
            try:
                previous = ledger.results()
            finally:
                ledger.close()
        kept = {s.trial_id for s in self.specs if keeps(previous.get(s.trial_id), self.settings.folder.skip_failed)}
        notes = [p.describe() for p in (self.packer, self.host_room) if p is not None]
        notes += beside(self.placement.gpus)  # the machine's other sweeps and processes on its cards
        if self.space is not None:  # its points are asked for as it runs: none to list
            if self.settings.search.pbt is not None:  # a population
                from sweeper.search.pbt import describe as describe_population

                notes.append(describe_population(self.space, self.settings.search.pbt, self.settings.scoring))
            else:
                from sweeper.search.sampling import describe

                notes.append(describe(self.space, self.options, len(previous)))
        return Outcome(self.folder.path, [], self.specs, self.placement, notes, kept=kept, settings=self.settings)

    def _run(self, ledger: Ledger, listener: Callback | None, tag: str | None) -> Outcome:
        settings, folder = self.settings, self.folder.path
        plan_ = Plan.resume(ledger, settings, self.specs, self.space, self.folder, self.source_file, self.what,
                             self.settled)
        if plan_.resumed:  # first, before any trial's line
            log.info("sweeper: %s", plan_.resumed)
        # what status, report and load() rank by unless told otherwise: this run's choice
        scoring = settings.scoring
        ranking = Ranking(scoring.metric, plan_.mode, plan_.search is not None, scoring.objectives)
        run, made, facts = self._environment(ledger, plan_)
        ledger.put_facts(one_run=(run, made), **{**plan_.facts, **ranking.facts(), **facts})
        tables = TableFiles(ledger, plan_, self.folder.paths)
        settled = ranking.seen(tables.results.values())  # the rows kept may have the metric already
        if isinstance(settled, dict):
            ledger.put_facts(**settled)
        outputs = Callbacks([tables])
        for packer in (self.packer, self.host_room):  # each learns what trials need from each row
            if packer is not None:
                packer.seen(tables.results.values())
                outputs.each.append(packer)
        if self.breaker is not None:
            outputs.each.append(self.breaker)
        if listener is not None:
            outputs.each.append(listener)
        # a metric the rows kept lack: a search cannot optimise it, so it asks for no trial
        scheduler = plan_.scheduler(asking=ranking.fault is None)
        if self.schedules:  # each point follows a schedule (a population-based member replayed)
            from sweeper.search.schedulers import Following

            scheduler = Following(plan_.todo, {s.index: self.schedules[s.index] for s in plan_.todo
                                               if s.index < len(self.schedules)})
        outputs.begin(plan_.to_run, plan_.total)
        admission = self._admission()
        engine = Engine(self._backend(tag, admission), ledger, outputs=outputs, admission=admission,
                        trial_env=contract.determinism_env() if settings.launching.deterministic else None, run_id=run,
                        limits=settings.limits, constraints=scoring.constraints, ranking=ranking)
        trackers = Trackers.of(settings, folder, plan_, self.space)
        outputs.each.append(trackers)
        interrupted = None
        end = SweepEnd.FAILED  # unless the engine returns (FINISHED, or FAILED: --fail-fast) or is interrupted
        warming = _summary_imported() if plan_.to_run and self.table else None
        try:
            end = engine.run(scheduler)
        except Interrupted as exc:
            interrupted, end = exc.signum, SweepEnd.INTERRUPTED
        finally:
            final = tables.rows
            outputs.end(end)
            if warming is not None:
                warming.join()
        if ranking.fault is not None:
            raise ranking.fault
        return Outcome(folder, final, plan_.specs, self.placement, plan_.notes, len(engine.started),
                       time.monotonic() - self.began, interrupted, end, ranking=ledger.ranking(),
                       shown=trackers.hints, objectives=ledger.objectives(), unwritten=tables.unwritten())

    def _environment(self, ledger: Ledger, plan_: Plan) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """What this run records of what it runs on, and how to run a trial of it again
        (:mod:`sweeper.system.environment`, :mod:`sweeper.front.replay`), under an id each row it makes
        carries (``env["run"]``): a later run with other code or options leaves an earlier
        row's record as it was. A resume whose packages, commit or scripts changed says so."""
        options, how = self.options, self.settings.launching
        env = environment.of_sweep(self.source_file, how.start_method, how.deterministic, self.what)
        before = ledger.facts().environment
        if before and plan_.kept:
            plan_.notes.extend(environment.changes(before, env))
        made = {"environment": env, "target": json.loads(record(self.target, options))}
        run = hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()[:12]
        return run, made, {"environment": env, "target": made["target"], "run": run}

    def _admission(self) -> Admission:
        """Which queued trial may start now: this machine's slots and the memory trials need
        there, or anywhere, for a backend whose cluster places them."""
        if self.backend.places_trials:
            return Anywhere()
        neighbours = Neighbours(self.folder.path) if self.breaker is not None else None  # on GPUs: the machine's
        return SlotPlacement(self.placement.slots, packer=self.packer, host=self.host_room, breaker=self.breaker,
                             neighbours=neighbours)

    def _backend(self, tag: str | None, admission: Admission) -> Backend:
        """Where the trials run: the backend the options name, made by its registered factory."""
        return self.backend.factory(Launch(self.target, self.options, self.settings, self.placement, admission, tag,
                                           early=self.early))
