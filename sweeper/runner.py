"""One sweep from start to end: plan the trials, resume from the ledger, run, tabulate.

Shared by :func:`sweeper.sweep` and the command line, so both behave the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from . import paths, table, tracking
from .tracking import chosen
from .errors import SweepError
from .grid import check_not_empty, expand
from .metrics import direction
from .ledger import Ledger, StorageError
from .options import Options
from .paths import SweepPaths
from .engine import Backend, Engine, Hooks, Interrupted, Listener, log
from .slots import Placement, Slot, parse_gpus, place
from .target import Target
from .trial import Status, TrialResult, TrialSpec, trial_id, trial_name, trial_seed

if TYPE_CHECKING:
    from .backends.local import Spare
    from .search import Search
    from .tracking.process import TrackerProcess


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
    kept: set[str] = field(default_factory=set)  #: a dry run: ids a resume would keep
    shown: list[str] = field(default_factory=list)  #: where else the sweep can be seen (trackers)
    #: What the folder records as its ranking (metric, mode), as load() reads it.
    ranking: tuple[str | None, str | None] = (None, None)

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


def plan(points: Sequence[Mapping[str, Any]], folder: str, seed: int) -> list[TrialSpec]:
    """A spec per distinct point, in grid order (a point listed twice runs once)."""
    specs: list[TrialSpec] = []
    seen: set[str] = set()
    for p in points:
        tid = trial_id(p)
        if tid in seen:
            continue
        seen.add(tid)
        name = trial_name(p)
        specs.append(
            TrialSpec(
                trial_id=tid, name=name, index=len(specs), params=dict(p), seed=trial_seed(seed, tid),
                dir=SweepPaths(folder).trial(name),
            )
        )
    return specs


def keep_names(specs: Sequence[TrialSpec], recorded: Mapping[str, str]) -> list[TrialSpec]:
    """A trial on record keeps the folder it was recorded under (a name from an older
    release stays where its log and checkpoints are), and no other point may take a name
    on record: that one gets its trial id appended. So no folder ever holds two points."""
    taken = set(recorded.values())
    counts = Counter(recorded.values())
    out = []
    for spec in specs:
        name = recorded.get(spec.trial_id)
        if name is None or counts[name] > 1:  # not on record, or shared by an older release
            name = spec.name
            if name in taken and not name.endswith(spec.trial_id):
                name = f"{name}~{spec.trial_id}"
            taken.add(name)
        out.append(replace(spec, name=name, dir=os.path.join(os.path.dirname(spec.dir), name)))
    return out


def fingerprint(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return None


@contextlib.contextmanager
def locked(folder: str) -> Iterator[None]:
    """One sweep at a time per folder: a second one would run the same trials twice."""
    fd = os.open(SweepPaths(folder).lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise SweepError(
                f"another sweep (pid {other}) is running in {folder}; wait for it, "
                "or give this one another --name"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def holder(folder: str) -> int | None:
    """The pid of the sweep running in a folder (it holds the lock :func:`locked` takes), or None."""
    try:
        fd = os.open(SweepPaths(folder).lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def sweep_folder(path: "str | os.PathLike[str]") -> str:
    """The sweep folder a user named (``<out>/<name>`` or its ``results.csv``; a string or a
    ``pathlib.Path``), checked."""
    path = os.fspath(path)
    folder = os.path.dirname(path) if path.endswith(".csv") else path
    if not SweepPaths(folder).exists():
        raise SweepError(f"{folder} is not a sweep folder (no {paths.LEDGER}); give <out>/<name>, "
                         "e.g. results/digits_mlp")
    return folder


def prepare_folder(folder: str) -> None:
    try:
        os.makedirs(SweepPaths(folder).trials, exist_ok=True)
        probe = os.path.join(folder, f".probe{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise SweepError(f"cannot write to {folder} ({exc.strerror}); choose another --out") from None


def set_aside(folder: str) -> None:
    """``--fresh``: keep the old ledger and CSV beside the new ones, renamed with a time stamp."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (paths.LEDGER, paths.RESULTS):
        paths.set_aside(os.path.join(folder, name), stamp)


def run(
    target: Target,
    grid: Any,
    options: Options,
    *,
    default_name: str,
    source_file: str | None = None,
    listener: Listener | None = None,
    what: str = "",
    spare: Spare | None = None,
) -> Outcome:
    """Plan, resume and run a sweep. Raises SweepError for bad input, before any trial.

    ``spare``: a worker process that already imported the grid file (the CLI's check);
    the first trial of a slot started the same way runs in it, else it is ended."""
    try:
        return _plan_and_run(target, grid, options, default_name, source_file, listener, what, spare)
    finally:
        if spare is not None:
            spare.close()  # unless a slot took it


def _plan_and_run(target: Target, grid: Any, options: Options, default_name: str, source_file: str | None,
                  listener: Listener | None, what: str, spare: Spare | None) -> Outcome:
    start = time.monotonic()
    options.check_ranking()
    chosen.check(options)
    name = options.name or default_name
    folder = os.path.abspath(os.path.join(options.out, name))
    if options.search is not None:  # grid is the space; trials are asked for as places free
        from .search import check

        mode = check(grid, options.search, options.prune, options.trials, options.metric, options.mode)
        options = replace(options, mode=mode)
        specs: list[TrialSpec] = []
    else:
        check_not_empty(grid)
        specs = plan(expand(grid), folder, options.seed)
    if options.backend == "ray":  # Ray places trials on its own nodes' GPUs
        placement = Placement([], [], options.memory_policy())
    else:
        placement = place(parse_gpus(options.gpus), options.memory_policy(), options.workers)
    if options.dry_run:  # what would run: the trials a resume keeps are marked, not placed
        previous: dict[str, TrialResult] = {}
        if SweepPaths(folder).exists():
            ledger = Ledger(folder, readonly=True)
            try:
                previous = ledger.results()
            finally:
                ledger.close()
        kept = {s.trial_id for s in specs if keeps(previous.get(s.trial_id), options.skip_failed)}
        notes = []
        if options.search is not None:  # its points are asked for as it runs: none to list
            from .search import describe

            notes.append(describe(grid, options, len(previous)))
        return Outcome(folder, [], specs, placement, notes, kept=kept)
    prepare_folder(folder)
    with locked(folder):
        if options.fresh:
            set_aside(folder)
        shutil.rmtree(os.path.join(folder, paths.OLD_STANDBY), ignore_errors=True)
        ledger = Ledger(folder)
        try:
            return _run(target, options, specs, placement, ledger, folder, source_file, listener, start, what,
                        spare, space=grid if options.search is not None else None)
        finally:
            ledger.close()


def _run(
    target: Target,
    options: Options,
    specs: list[TrialSpec],
    placement: Placement,
    ledger: Ledger,
    folder: str,
    source_file: str | None,
    listener: Listener | None,
    start: float,
    what: str,
    spare: Spare | None = None,
    space: Any = None,
) -> Outcome:
    notes: list[str] = []
    ledger.clear_running()
    previous = ledger.results()
    check_definition(ledger, previous, options.seed, what, folder, source_file)
    search = None
    if space is not None:  # a search: the trials on record are its own, the rest it asks for
        search, specs = _search(space, options, folder, ledger, previous)
    specs = keep_names(specs, {tid: r.name for tid, r in previous.items()})
    ledger.set_grid((s.trial_id, s.index, s.name) for s in specs)
    print_ = fingerprint(source_file)
    old_print = ledger.get("grid_fingerprint")
    if print_ and old_print and print_ != old_print and previous:
        notes.append(f"the grid file changed since the last run ({len(previous)} trials on record)")
    total = search.total if search is not None else len(specs)
    uid = ledger.get("uid") or (default_uid(folder) if previous else uuid.uuid4().hex)
    facts = [("grid_fingerprint", print_ or ""), ("total", str(total)), ("uid", uid),
             ("started", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))]
    # what status, report and load() rank by unless told otherwise: this run's choice
    if search is not None:
        facts.append(("search", f"{search.sampler_name}, prune {search.pruner_name}"))
    mode = options.mode or (direction(options.metric) if options.metric else None) or ""
    ranking = _Ranking(ledger, options.metric, mode, search)
    ledger.put_many(facts + ranking.facts())

    wanted = {s.trial_id for s in specs}
    where = SweepPaths(folder)
    results: dict[str, TrialResult] = {}
    todo: list[TrialSpec] = []
    feed = None
    if search is not None:
        feed = _Asked(search, specs, wanted, ledger)
        specs = feed.specs
    for spec in specs:
        old = previous.get(spec.trial_id)
        if old is not None and keeps(old, options.skip_failed):
            results[spec.trial_id] = _reindexed(old, spec)
        elif old is not None:  # run again: its attempts go on counting (its log says which)
            todo.append(replace(spec, attempt=old.attempts + 1, first_attempt=old.attempts + 1))
        else:
            todo.append(spec)
    if results:
        to_run = len(todo) + (feed.remaining if feed is not None else 0)
        notes.append(f"resumed: {len(results)} trials already on record were kept; {to_run} to run")
    others = len(set(previous) - wanted)
    if others:
        this = "search's space" if search is not None else "grid"
        notes.append(f"{others} trials on record here are not in this {this}, and count for nothing in this run; "
                     f"results.csv shows this {this}'s (load(folder, every=True) shows all)")

    def write_results() -> None:
        table.write_csv([r for tid, r in results.items() if tid in wanted], where.results)

    def write_history() -> None:
        order = {s.trial_id: (s.index, s.name) for s in specs}
        rows = [(tid, order[tid][1], epoch, m) for tid, epoch, m in ledger.history() if tid in order]
        rows.sort(key=lambda row: (order[row[0]][0], row[2]))
        table.write_history_csv(rows, where.history)

    files = [table.Throttled(write_results, path=where.results),
             table.Throttled(write_history, path=where.history)]

    ranking.seen(results.values())  # the rows kept may have the metric already

    def on_record(result: TrialResult) -> None:
        results[result.trial_id] = result
        ranking.seen([result])
        files[0].mark()
        files[0].tick()

    def tick() -> float | None:
        waits = [w for w in (f.tick() for f in files) if w is not None]
        return min(waits) if waits else None

    if listener is not None:
        listener.begin(len(todo) + (feed.remaining if feed else 0), total)
    hooks = Hooks(listener=listener, on_record=on_record, on_history=files[1].mark, tick=tick,
                  on_final=search.tell if search else None, prune=search.prune if search else None,
                  verdicts=search is not None and search.prunes)
    backend: Backend
    if options.backend == "ray":
        from .backends.ray import RayBackend

        backend = RayBackend(target, options.memory_policy(), address=options.address,
                             gpus=parse_gpus(options.gpus) != "none", cpus_per_trial=options.cpus_per_trial,
                             workers=options.workers)
    else:
        from .backends.local import LocalBackend

        backend = LocalBackend(target, placement.slots, workers=options.workers, prefetch=options.prefetch,
                               start_method=options.start_method, spare=spare, timeout=options.timeout)
    engine = Engine(backend, ledger, hooks=hooks, timeout=options.timeout, retries=options.retries)
    shown = _trackers(options, folder, uid, mode, space, specs, feed)
    interrupted = None
    state = "failed"  # unless the engine returns or is interrupted
    try:
        engine.run(todo, feed)
        state = "finished"
    except Interrupted as exc:
        interrupted, state = exc.signum, "interrupted"
    finally:
        final = [r for tid, r in results.items() if tid in wanted]
        for f in files:
            f.flush()
        for each in shown:
            each.close(state)
    if ranking.fault is not None:
        raise ranking.fault
    return Outcome(folder, table.ordered(final), specs, placement, notes, len(engine.started),
                   time.monotonic() - start, interrupted, ranking=ledger.ranking(),
                   shown=[t.hint for each in shown for t in each.trackers])


class _Ranking:
    """What the folder records as the sweep's ranking. A metric the user named is recorded
    only once a successful result has it, so a mistyped one never becomes what ``status``,
    ``report`` and ``load()`` rank by (the folder keeps what it had). The first successful
    result without it is said at once, in one line naming what that result has; a search,
    which cannot optimise it, takes no more trials and ends with that error."""

    def __init__(self, ledger: Ledger, metric: str | None, mode: str, search: Any) -> None:
        self.ledger, self.metric, self.mode, self.search = ledger, metric, mode, search
        self.settled = metric is None
        self.fault: SweepError | None = None

    def facts(self) -> list[tuple[str, str]]:
        """What is recorded at the start: no metric named, this run's choice (none)."""
        return [("metric", ""), ("mode", self.mode)] if self.metric is None else []

    def seen(self, results: Iterable[TrialResult]) -> None:
        if self.settled:
            return
        for r in results:
            if r.status is not Status.OK or not r.metrics:
                continue
            self.settled = True
            if self.metric in r.metrics:
                with contextlib.suppress(StorageError):  # the engine says a failed write itself
                    self.ledger.put_many([("metric", self.metric or ""), ("mode", self.mode)])
                return
            said = (f"no metric {self.metric!r} in what trial {r.name} returned ({', '.join(sorted(r.metrics))}), "
                    "so nothing is ranked by it")
            if self.search is not None:
                self.search.remaining = 0
                self.fault = SweepError(f"{said}; a search cannot optimise it, so it took no more trials: give "
                                        "--metric (metric=) one of those, or report it from train")
            else:
                log.warning("sweeper: %s; give --metric (metric=) one of those", said)
            return


def default_uid(folder: str) -> str:
    """The id of a sweep whose ledger has none (written by an older release)."""
    return hashlib.sha256(os.path.abspath(folder).encode()).hexdigest()[:32]


def _trackers(options: Options, folder: str, uid: str, mode: str, space: Any, specs: list[TrialSpec],
              feed: _Asked | None) -> list[TrackerProcess]:
    """TensorBoard and MLflow, kept current from the ledger by a process of their own (a
    thread each there, so a slow server holds up neither the sweep nor the other): their
    work never shares the engine's interpreter. Here, only their labels and hints."""
    trackers = chosen.make(options, folder)
    if not trackers:
        return []
    from .tracking.process import TrackerProcess

    domains = tracking.domains_of_space(space) if space is not None else tracking.domains_of_points(
        s.params for s in specs)
    info = tracking.SweepInfo(name=os.path.basename(folder), folder=folder, uid=uid, domains=domains,
                              metric=options.metric or "", mode=mode,
                              search=str(options.search or ""))
    known: dict[str, TrialSpec] = {}

    def spec_of(tid: str) -> TrialSpec | None:  # a running trial with no row yet, asked by the
        if tid not in known:  # trackers' process (from the thread reading it): the search adds specs
            known.update((s.trial_id, s) for s in list(feed.specs if feed is not None else specs))
        return known.get(tid)

    return [TrackerProcess(folder, {"tensorboard": options.tensorboard, "mlflow": options.mlflow}, trackers, info,
                           spec_of)]


def _search(space: Any, options: Options, folder: str, ledger: Ledger,
            previous: Mapping[str, TrialResult]) -> tuple[Search, list[TrialSpec]]:
    """The study, rebuilt from the ledger, and the specs of the trials on record (kept, or
    interrupted and to run again first)."""
    from .search import Search

    def make_spec(params: Mapping[str, Any], index: int) -> TrialSpec:
        return replace(plan([params], folder, options.seed)[0], index=index)

    search = Search(space, search=options.search, prune=options.prune, trials=options.trials or 0,
                    seed=options.seed, metric=options.metric or "", mode=options.mode or "min",
                    make_spec=make_spec)
    history: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for tid, epoch, metrics in ledger.history():
        history.setdefault(tid, []).append((epoch, metrics))
    kept, again = search.resume(previous, history, lambda r: keeps(r, options.skip_failed))
    specs = [replace(make_spec(r.params, r.index), name=r.name) for r in [*kept.values(), *again]]
    return search, specs


class _Asked:
    """The engine's feed for a search: each point asked becomes a spec of this sweep."""

    def __init__(self, search: Any, specs: list[TrialSpec], wanted: set[str], ledger: Ledger) -> None:
        self.search, self.specs, self.wanted, self.ledger = search, specs, wanted, ledger

    @property
    def remaining(self) -> int:
        return int(self.search.remaining)

    def next(self) -> TrialSpec | None:
        spec: TrialSpec | None = self.search.next()
        if spec is not None:
            spec = keep_names([spec], {s.trial_id: s.name for s in self.specs})[0]
            self.specs.append(spec)
            self.wanted.add(spec.trial_id)
            self.ledger.set_grid((s.trial_id, s.index, s.name) for s in self.specs)
        return spec


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
    recorded = json.loads(ledger.get("definition") or "{}")
    source = os.path.abspath(source) if source else ""
    if previous:
        old_seed = recorded.get("seed")
        if old_seed is None:
            mismatch = [r for r in previous.values() if r.seed != trial_seed(seed, r.trial_id)]
            old_seed = "another" if mismatch else seed
        old_what = recorded.get("what") or what
        old_source = recorded.get("source") or source
        moved_only = fingerprint(source) == ledger.get("grid_fingerprint")
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
    ledger.put("definition", json.dumps({"seed": seed, "what": what or recorded.get("what", ""),
                                         "source": source or recorded.get("source", "")}))


def keeps(old: TrialResult | None, skip_failed: bool) -> bool:
    """Whether a resume keeps a trial's row instead of running it again."""
    return old is not None and (
        old.status.succeeded or (skip_failed and old.status is not Status.INTERRUPTED))


def _reindexed(old: TrialResult, spec: TrialSpec) -> TrialResult:
    """A kept row takes its place in today's grid order."""
    return replace(old, index=spec.index, name=spec.name)


# -- what the console shows ----------------------------------------------------------------


def summary(outcome: Outcome, metric: str | None, mode: str | None) -> list[str]:
    """The closing lines: counts, the top 5 with their parameters, failures, where the CSV is."""
    from . import analysis

    counts = outcome.counts()
    parts = ", ".join(f"{counts[s.value]} {s.value}" for s in Status if counts[s.value])
    lines = [f"sweeper: {len(outcome.results)} of {len(outcome.specs)} trials on record: {parts or 'none'}"
             f" ({outcome.ran} run this time, {outcome.elapsed_s:.1f}s)"]
    lines += [f"sweeper: note: {n}" for n in outcome.notes]
    if outcome.results:
        frame = table.dataframe(outcome.results)
        try:
            metric, mode = analysis.choose(frame, metric, mode)
        except SweepError as exc:  # a metric no trial has (yet): nothing to rank by
            if analysis.metric_columns(frame):
                lines.append(f"sweeper: {exc}")
            metric = None
        if metric is not None and mode is not None:
            lines += ["sweeper: " + line if i == 0 else line
                      for i, line in enumerate(analysis.leaderboard_lines(frame, metric, mode))]
            missing = int(frame.loc[frame.status == "ok", metric].isna().sum())
            if missing:
                lines.append(f"sweeper: {missing} ok trial{'s' if missing > 1 else ''} had a NaN {metric}, "
                             "ranked last")
        failed = [r for r in outcome.results if not r.status.succeeded]
        if failed:
            lines.append(f"sweeper: {len(failed)} not ok:")
            for r in failed:
                first = r.error.splitlines()[0] if r.error else ""
                lines.append(f"  {r.status.value:<11} {r.name}: {first}")
                lines.append(f"  {'':<11} log: {r.log}")
    lines.append(f"sweeper: results: {outcome.csv_path}")
    lines += [f"sweeper: {hint}" for hint in outcome.shown]
    return lines
