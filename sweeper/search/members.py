"""A population's members (``search="pbt"``, :mod:`sweeper.search.pbt`), planned against the
ledger: on a first run drawn from the space, each named ``member_<i>`` with its parameters
on record from epoch 0; on a resume, each member on record as it was left: a finished one
kept, one interrupted (Ctrl-C, or a sweep killed) given again with its last parameters, from
its checkpoint, its epochs going on after its last one reported, its segments going on
counting; what it scored at each decision and the checkpoints published then, read back, so
the population goes on as it was; one that failed with no replacement on record (the run
stopped before it was made) gets one as the run starts. A resume first completes the copies
a killed run left under way (:mod:`sweeper.search.pbt_checkpoints`' journal) and removes its
half-built ones.
Every member's spec says its parameters are recorded by epoch (``SWEEPER_SCHEDULED``: the
Keras callback holds the optimizer to them).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any, Callable, Mapping

from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.trial import Status, TrialResult, TrialSpec
from sweeper.search import pbt_checkpoints
from sweeper.search.pbt import Member, PbtSettings, Population
from sweeper.store.paths import SweepPaths


def members(space: Any, how: PbtSettings, *, metric: str, mode: str, folder: str, seed: int,
            ledger: Any, previous: Mapping[str, TrialResult],
            make_spec: Callable[[dict[str, Any], str], TrialSpec]) -> tuple[Population, list[TrialSpec],
                                                                        list[TrialSpec], dict[str, TrialResult]]:
    """The population, its members' specs, those to run now (in order), and the rows kept."""
    from sweeper.search.pbt import explorable

    read = explorable(space)
    where = SweepPaths(folder)
    pbt_folder = where.pbt

    def note(trial_id: str, epoch: int, params: dict[str, Any], copied_from: str) -> None:
        ledger.set_schedule(trial_id, epoch, params, copied_from)

    def scheduled(params: dict[str, Any], name: str, *tid: str) -> TrialSpec:
        spec = make_spec(params, name, *tid)
        return replace(spec, env={**spec.env, contract.SCHEDULED: "1"})

    specs: list[TrialSpec] = []
    todo: list[TrialSpec] = []
    kept: dict[str, TrialResult] = {}
    restored: list[Member] = []
    if not ledger.schedule():  # a first run: the population drawn from the space
        width = len(str(how.population - 1))
        for i, params in enumerate(read.sample(how.population, seed=seed, stacklevel=3)):
            spec = scheduled(params, f"member_{i:0{width}d}")
            note(spec.trial_id, 0, spec.params, "")
            specs.append(spec)
            todo.append(spec)
        population = Population(todo, read, how, metric, mode, pbt_folder, seed, note, scheduled)
        return population, specs, todo, kept
    pbt_checkpoints.tidy(pbt_folder, where.trials)  # what a killed run left half-built
    _complete(pbt_folder, folder, note)
    schedule = ledger.schedule()
    history: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for tid, epoch, metrics in ledger.history():
        history.setdefault(tid, []).append((epoch, metrics))
    names = ledger.grid_names()
    for index, (tid, segments) in enumerate(sorted(schedule.items(), key=lambda kv: _order(kv[0], names, previous))):
        row = previous.get(tid)
        params = row.params if row is not None else segments[-1][1]
        name = row.name if row is not None else names.get(tid, tid)
        spec = replace(scheduled(params, name, tid), index=index)
        specs.append(spec)
        if row is not None and row.status is not Status.INTERRUPTED:
            kept[tid] = replace(row, index=index)
            restored.append(_restored(spec, history.get(tid, []), how, metric, mode, pbt_folder, "done"))
            continue
        spec, last = _resumed(spec, row, segments, ledger, pbt_folder, folder)
        epochs = [(e, m) for e, m in history.get(tid, []) if e <= last]
        todo.append(spec)
        member = _restored(spec, epochs, how, metric, mode, pbt_folder, "queued")
        member.noted = max((e for e, _, _ in segments if e <= last), default=0)
        restored.append(member)
    population = Population(todo, read, how, metric, mode, pbt_folder, seed, note, scheduled,
                            restart=sum(len(s) for s in schedule.values()))
    population.members = {m.spec.trial_id: m for m in restored}
    population.replaced = sum(1 for m in restored if ".r" in m.spec.name)
    population.orphans = _orphans(restored, kept)
    return population, specs, todo, kept


def _orphans(restored: list[Member], kept: Mapping[str, TrialResult]) -> list[Member]:
    """Members on record that failed for good and have no replacement on record (``member_3``
    without a ``member_3.r<k>``): a run stopped between the failure and the replacement's
    first record."""
    names = {m.spec.name for m in restored}
    failed = [m for m in restored if m.spec.trial_id in kept
              and kept[m.spec.trial_id].status not in (Status.OK, Status.PRUNED, Status.INTERRUPTED)]
    return [m for m in failed if not any(re.fullmatch(re.escape(m.spec.name) + r"\.r\d+", n) for n in names)]


def _complete(pbt_folder: str, folder: str, note: Callable[[str, int, dict[str, Any], str], None]) -> None:
    """The copies a killed run left under way, completed as it would have: the published
    checkpoint copied in as the member's own at that epoch, the schedule's row written, the
    journal entry removed (the member's checkpoint folder is copied from it as it resumes)."""
    for entry, job in pbt_checkpoints.unfinished(pbt_folder):
        if not os.path.isdir(job.source):
            raise SweepError(f"a killed run left trial {job.trial_id} copying {job.source}, which is gone, so its "
                             f"lineage cannot be completed; remove {entry} to resume it from its own checkpoint, "
                             "or start again with --fresh")
        target = os.path.join(pbt_folder, job.trial_id, str(job.epoch))
        pbt_checkpoints.copy(job.source, target, f"a checkpoint of epoch {job.epoch} for trial {job.trial_id}", folder)
        note(job.trial_id, job.epoch, job.params, job.copied_from)
        pbt_checkpoints.end(entry)


def _resumed(spec: TrialSpec, row: TrialResult | None, segments: list[tuple[int, dict[str, Any], str]],
             ledger: Any, pbt_folder: str, folder: str) -> tuple[TrialSpec, int]:
    """A member to run again, and the epoch it goes on after: from the checkpoint it published
    last (a segment's end, or a copy then), with the parameters in force then; what it trained
    after that (its folder may hold a later epoch than it reported) runs again. Its segments
    go on counting: its row's, or, where a killed run left none, its log's."""
    tid = spec.trial_id
    last = _published(pbt_folder, tid)
    if last:
        pbt_checkpoints.copy(os.path.join(pbt_folder, tid, str(last)), spec.checkpoint,
                             f"trial {spec.name}'s checkpoint at epoch {last}", folder, durable=False)
    else:
        _empty(spec.checkpoint)
    ledger.clear_history_after(tid, last)
    in_force = [p for e, p, _ in segments if e <= last]
    spec = replace(spec, params=in_force[-1] if in_force else spec.params)
    if last:
        spec = replace(spec, env={**spec.env, contract.RESUMED_EPOCH: str(last)})
    if row is not None:  # run again: its attempts go on counting
        spec = replace(spec, attempt=row.attempts + 1, first_attempt=row.attempts + 1)
    return replace(spec, ran_before=(row.segments or 1) if row is not None else _processes(spec)), last


def _processes(spec: TrialSpec) -> int:
    """The processes a member ran in, as its log shows them (each starts with a header): what
    a killed run, which left the member no row, says of its segments."""
    from sweeper.store.paths import LOG_HEADER

    head = f"{LOG_HEADER} trial {spec.name} (id {spec.trial_id})"
    try:
        with open(spec.log_path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.startswith(head))
    except OSError:
        return 0


def _published(pbt_folder: str, tid: str) -> int:
    """The latest epoch a member published its checkpoint at (0: none)."""
    folder = os.path.join(pbt_folder, tid)
    entries = os.listdir(folder) if os.path.isdir(folder) else []
    return max((int(e) for e in entries if e.isdigit()), default=0)


def _empty(folder: str) -> None:
    """A member with nothing published starts again from nothing."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)


def _order(tid: str, names: Mapping[str, str], previous: Mapping[str, TrialResult]) -> tuple[int, str]:
    row = previous.get(tid)
    return (row.index if row is not None else 1 << 30, names.get(tid, tid))


def _restored(spec: TrialSpec, epochs: list[tuple[int, dict[str, Any]]], how: PbtSettings, metric: str,
              mode: str, pbt_folder: str, state: str) -> Member:
    """A member on record: its score at each decision's epoch it reached, the checkpoints it
    published that are still there."""
    member = Member(spec, state=state)
    for epoch, metrics in epochs:
        if epoch >= max(how.burn_in, 1) and epoch % how.interval == 0:
            value = metrics.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                member.scores[epoch] = float(value) if mode == "max" else -float(value)
            member.at = max(member.at, epoch)
    folder = os.path.join(pbt_folder, spec.trial_id)
    if os.path.isdir(folder):
        for entry in os.listdir(folder):
            if entry.isdigit():
                member.published[int(entry)] = os.path.join(folder, entry)
    resumed = spec.resumed_epoch
    if state != "done" and resumed:
        member.at = max((e for e in member.scores if e <= resumed), default=0)
    return member
