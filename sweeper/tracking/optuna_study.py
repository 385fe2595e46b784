"""``--optuna [URL]``: a sweep as an Optuna study, kept current as it runs, for
``optuna-dashboard`` (and Optuna's plots and importances); ``export --optuna`` writes the
same study once, from the ledger.

* Where: ``<sweep>/optuna.journal`` (Optuna's ``JournalStorage`` on a file, which
  ``optuna-dashboard <that file>`` opens), or a storage URL, or a journal file named
  (:func:`sweeper.tracking.chosen.optuna_storage`).
* The study is named after the sweep and found again by the sweep's id (user attribute
  ``sweeper_uid``), so a resume goes on with it and never adds a trial twice. A study of that
  name that is another's: in the sweep's own journal, an earlier sweep's (before ``--fresh``),
  the journal is set aside with a time stamp, as the ledger was; elsewhere the new study is
  named ``<name>.<time stamp>`` and the other left as it is. A resumed sweep whose
  parameters' distributions, fixed values or directions changed has its study written anew
  from the ledger (Optuna cannot change a parameter's distribution).
* Each trial an Optuna trial (what it holds: :mod:`sweeper.tracking.optuna_terms`), written
  through Optuna's public API only: one seen running is asked for (``enqueue_trial`` with its
  parameters, then ``ask``), given its epochs (``Trial.report``), its attributes and its end
  (``Study.tell``); one seen only once it ended is added whole (``Study.add_trial``), with
  when it ran. Optuna cannot delete a trial: an attempt that runs again (a retry, a rerun) is
  a new trial whose ``replaces`` attribute names the earlier one, left as it ended (as
  Optuna's own ``RetryFailedTrialCallback`` leaves one); ``export --optuna`` writes each
  trial's last attempt only.
* Only the trials of the grid last run here (what ``results.csv`` holds); a member of
  population-based training has the parameters it began with, its ``schedule`` attribute
  each segment's (from which epoch, which parameters, copied from whom).
* The study is made once its direction is known (:func:`sweeper.tracking.optuna_terms.targets`):
  a sweep naming no metric shows from its first row with metrics on.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sweeper.errors import SweepError
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import TrialResult
from sweeper.search import registry as searches
from sweeper.store.paths import SweepPaths, set_aside
from sweeper.tracking import Attempt, Held, SweepInfo, domains_of_points
from sweeper.tracking import optuna_terms as terms

FOLDER_ATTR, UID_ATTR = "sweeper_folder", "sweeper_uid"


@dataclass
class _Shown:
    """What the study holds, and is yet to be told, of one trial."""

    attempt: Attempt | None = None
    number: int | None = None  #: its Optuna trial, once written
    live: Any = None  #: the ``Trial`` that ``ask`` gave, while it runs (in this process)
    done: bool = False  #: written ended (Optuna takes nothing more of it)
    epochs: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  #: not yet reported
    last: int | None = None  #: the last epoch it was sent
    result: TrialResult | None = None  #: its outcome, not yet written
    final: str = ""
    replaces: int | None = None  #: the Optuna trial of an earlier attempt
    segments: int = 0  #: a population member's segments its ``schedule`` attribute lists


class OptunaStudy:
    """The Optuna tracker (see the module's docstring); ``export``: one study written whole
    (every trial ended), replacing an earlier one of the folder, or nothing at all."""

    def __init__(self, storage: str, folder: str, flag: str = "--optuna", export: bool = False) -> None:
        self.where, self.folder, self.flag, self.export = storage, folder, flag, export
        shown = _shown(storage)
        self.label = f"the Optuna study in {shown}"
        self.hint = f"Optuna: optuna-dashboard {shown}"
        self.optuna: Any = None
        self.storage: Any = None
        self.study: Any = None
        self.name = ""
        self.info = SweepInfo(name="", folder=folder, uid="")
        self.goal: terms.Targets | None = None
        self.params = terms.Params({}, {})
        self.trials: dict[str, _Shown] = {}
        self.dirty: dict[str, None] = {}  # trials with something to write, in the order told
        self.count = 0  # the study's trials (only this tracker adds any)
        self.grid: set[str] | None = None
        self.pbt = False
        self.schedule: dict[str, list[tuple[int, dict[str, Any], str]]] = {}
        self.written = 0
        self._ledger: Any = None

    # -- the sweep --------------------------------------------------------------------

    def begin(self, sweep: SweepInfo) -> dict[str, Held]:
        from sweeper.results.studies import need_optuna
        from sweeper.store.ledger import Ledger

        self.optuna = optuna = need_optuna("--optuna")
        self.info, self.name = sweep, sweep.name
        self._ledger = Ledger(self.folder, readonly=True)  # the rows' values, the grid, a population's schedule
        current = self._ledger.current()
        rows = sorted((self._ledger.results() if current is None else current).values(), key=lambda r: r.index)
        self.grid = set(self._ledger.grid_names()) or None
        self.schedule = self._ledger.schedule()
        self.pbt = searches.of(sweep.search).pauses or bool(self.schedule)
        points = [self._point(r.trial_id, r.params) for r in rows]
        self.params = terms.params_of(optuna, sweep.domains, points)
        self.goal = terms.targets(sweep, [k for r in rows for k in r.metrics])
        self.storage = self._open()
        found = self._find()
        if found is None or self.export:
            return {}
        if not self._same(found):  # distributions, fixed values or directions changed: anew
            optuna.delete_study(study_name=found.study_name, storage=self.storage)
            self.name = found.study_name
            return {}
        self._load(found.study_name)
        return self._held()

    def _open(self) -> Any:
        optuna = self.optuna
        try:
            if "://" in self.where:
                return optuna.storages.get_storage(self.where)
            from optuna.storages.journal import JournalFileBackend

            os.makedirs(os.path.dirname(self.where) or ".", exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(self.where))
        except Exception as exc:  # noqa: BLE001 - a bad URL, a driver missing: Optuna's words, one line
            raise SweepError(f"--optuna {self.where}: Optuna cannot open that storage ({str(exc).splitlines()[0]}); "
                             "give a database URL such as sqlite:///study.db") from None

    def _find(self) -> Any:
        """This sweep's study (by its id; for an export, also an earlier export of the folder),
        None where it has none; an export replaces it. A study of its name that is another's
        is set aside with the journal, or the new one takes another name, or an export is refused."""
        here = os.path.abspath(self.folder)
        summaries = self.optuna.get_all_study_summaries(self.storage, include_best_trial=False)
        for s in summaries:
            if s.user_attrs.get(UID_ATTR) == self.info.uid and s.user_attrs.get(FOLDER_ATTR) == here:
                return s
        taken = {s.study_name: s for s in summaries}.get(self.info.name)
        if taken is None:
            return None
        ours = taken.user_attrs.get(FOLDER_ATTR) == here
        if self.export:
            if not ours:
                raise SweepError(f"{self.where} already has a study named {self.info.name!r} that is not an export "
                                 f"of {here}; give another storage (or rename the sweep folder)")
            return taken
        if ours and self.where == SweepPaths(self.folder).optuna_journal:
            set_aside(self.where)  # an earlier sweep's (before --fresh): kept beside, as its ledger
            self.storage = self._open()
        else:
            self.name = f"{self.info.name}.{time.strftime('%Y%m%d-%H%M%S')}"
        return None

    def _same(self, summary: Any) -> bool:
        """Whether the study on record takes this run's trials as they are: its directions,
        fixed values and every trial's distributions."""
        from optuna.distributions import check_distribution_compatibility

        if self.goal is not None and [d.name.lower() for d in summary.directions] != self.goal.directions:
            return False
        if summary.user_attrs.get("fixed", {}) != self.params.fixed:
            return False
        study = self.optuna.load_study(study_name=summary.study_name, storage=self.storage)
        for trial in study.get_trials(deepcopy=False):
            for name, dist in trial.distributions.items():
                mine = self.params.dists.get(name)
                try:
                    if mine is None:
                        return False
                    check_distribution_compatibility(dist, mine[0])
                except ValueError:
                    return False
        return True

    def _load(self, name: str) -> None:
        self.name = name
        self.study = self.optuna.load_study(study_name=name, storage=self.storage,
                                            sampler=self.optuna.samplers.RandomSampler())

    def _held(self) -> dict[str, Held]:
        """What the study shows of each trial (its latest Optuna trial); one left waiting by a
        process killed between ``enqueue_trial`` and ``ask`` is taken and failed, so no later
        ``ask`` takes its parameters."""
        state = self.optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        for _ in [t for t in trials if t.state == state.WAITING]:
            self.study.tell(self.study.ask(), state=state.FAIL)
        trials = self.study.get_trials(deepcopy=False)
        self.count = len(trials)
        held: dict[str, Held] = {}
        for t in trials:
            tid = t.user_attrs.get("trial_id")
            if not tid:
                continue
            finished = t.state.is_finished() and "sweeper_final" in t.user_attrs
            self.trials[tid] = _Shown(number=t.number, done=t.state.is_finished())
            held.pop(tid, None)
            if finished:  # a running one is an earlier process's: replaced when it shows again
                held[tid] = Held(str(t.user_attrs.get("sweeper_key", "")), t.user_attrs.get("sweeper_epoch"),
                                 str(t.user_attrs["sweeper_final"]))
        return held

    def metrics_known(self, names: Sequence[str]) -> None:
        pass

    # -- a trial ----------------------------------------------------------------------

    def start(self, attempt: Attempt, held: Held | None) -> None:
        old = self.trials.get(attempt.trial_id)
        replaces = None
        if old is not None and old.number is not None:
            replaces = old.number
            if not old.done:  # an attempt this process or an earlier one left running: it ended
                self.study.tell(old.live if old.live is not None else old.number,
                                state=self.optuna.trial.TrialState.FAIL, skip_if_finished=True)
        elif old is not None:
            replaces = old.replaces
        self.trials[attempt.trial_id] = _Shown(attempt=attempt, replaces=replaces)
        self.dirty[attempt.trial_id] = None

    def epochs(self, attempt: Attempt, rows: list[tuple[int, dict[str, Any], float | None]], last: int) -> None:
        shown = self._of(attempt)
        if not shown.done:
            shown.epochs += [(e, m) for e, m, _ in rows]
            shown.last = last
            self.dirty[attempt.trial_id] = None

    def finish(self, attempt: Attempt, result: TrialResult, final: str) -> None:
        shown = self._of(attempt)
        if not shown.done:
            shown.result, shown.final = result, final
            self.dirty[attempt.trial_id] = None

    def _of(self, attempt: Attempt) -> _Shown:
        shown = self.trials.get(attempt.trial_id)
        if shown is None:  # (the mirror starts each attempt first)
            self.start(attempt, None)
            shown = self.trials[attempt.trial_id]
        return shown

    # -- writing ----------------------------------------------------------------------

    def flush(self) -> None:
        """What was told since the last flush, written: trials that ended whole, each running
        one asked for, reported to and told its end. Nothing before the direction is known."""
        if not self.dirty:
            return
        if self.goal is None:
            ended = sorted((s.result for s in self.trials.values() if s.result is not None), key=lambda r: r.index)
            self.goal = terms.targets(self.info, [k for r in ended for k in r.metrics])
            if self.goal is None:
                return
        if self.pbt:
            self.schedule = self._ledger.schedule()
        todo = [tid for tid in self.dirty if self._in_grid(tid)]
        self.dirty.clear()
        whole = sorted((tid for tid in todo if self.trials[tid].number is None and self.trials[tid].result is not None),
                       key=lambda tid: self.trials[tid].result.index)  # type: ignore[union-attr]
        made = self._whole(whole)
        if self.export and not made:
            return  # nothing ended: an earlier export is left as it is (end() says why)
        if self.study is None:
            self._create()
        self.study.add_trials(made)
        for tid in whole:
            self._written(self.trials[tid], self.count)
            self.count += 1
        for tid in todo:
            shown = self.trials[tid]
            if not self.export and not shown.done and shown.attempt is not None:
                self._live(tid, shown)

    def _in_grid(self, tid: str) -> bool:
        if self.grid is None or tid in self.grid:
            return True
        self.grid = set(self._ledger.grid_names()) or None  # a search's new trial, since the last look
        if self.grid is not None and tid not in self.grid:
            del self.trials[tid]
            return False
        return True

    def _whole(self, tids: list[str]) -> list[Any]:
        """The trials that ended, as Optuna's; for an export, every one first, so that nothing is
        written or deleted unless all of them can be."""
        assert self.goal is not None
        out = []
        for tid in tids:
            shown = self.trials[tid]
            assert shown.attempt is not None and shown.result is not None
            try:
                out.append(terms.finished(self.optuna, self.params, self.goal, shown.attempt, shown.result,
                                          self._point(tid, shown.result.params), shown.epochs, shown.final,
                                          self._extra(tid, shown)))
            except (TypeError, ValueError) as exc:
                raise SweepError(f"the sweep in {self.folder} cannot be written as an Optuna study: "
                                 f"{str(exc).splitlines()[0]}") from None
        return out

    def _create(self) -> None:
        assert self.goal is not None
        optuna = self.optuna
        if self.export:
            found = self._find()
            if found is not None:
                optuna.delete_study(study_name=found.study_name, storage=self.storage)
        self.study = optuna.create_study(storage=self.storage, study_name=self.name, directions=self.goal.directions,
                                         sampler=optuna.samplers.RandomSampler())
        with warnings.catch_warnings():  # experimental in Optuna: said here, not to the user
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.set_metric_names(list(self.goal.metrics))
        self.study.set_user_attr(FOLDER_ATTR, os.path.abspath(self.folder))
        self.study.set_user_attr(UID_ATTR, self.info.uid)
        self.study.set_user_attr("metric", self.goal.metrics[0])
        self.study.set_user_attr("fixed", dict(self.params.fixed))
        self.count = 0

    def _live(self, tid: str, shown: _Shown) -> None:
        """A trial seen running: asked for once, then its new epochs reported, and its end told."""
        assert self.goal is not None and shown.attempt is not None
        if shown.live is None:
            params, dists = self.params.of(self._point(tid, shown.attempt.params))
            attrs = {**terms.started_attrs(shown.attempt, shown.replaces), **self._extra(tid, shown)}
            self.study.enqueue_trial(params, user_attrs=attrs)
            shown.live = self.study.ask(dists)
            shown.number = shown.live.number
            self.count += 1
        elif self.pbt and len(self.schedule.get(tid, ())) > shown.segments:  # a new segment's parameters
            shown.live.set_user_attr("schedule", _segments(self.schedule[tid]))
            shown.segments = len(self.schedule[tid])
        for epoch, value in sorted(terms.intermediate(shown.epochs, self.goal).items()):
            shown.live.report(value, epoch)
        shown.epochs = []
        if shown.result is None:
            return
        state, values = terms.outcome(shown.result, self.goal, {})  # a pruned one: valued by tell
        for key, value in terms.finished_attrs(shown.result, shown.final, shown.last).items():
            shown.live.set_user_attr(key, value)
        for key, value in terms.constraints(shown.result).items():
            if hasattr(shown.live, "set_constraint"):
                shown.live.set_constraint(key, value)
        self.study.tell(shown.live, values if state != "PRUNED" else None, state=self.optuna.trial.TrialState[state])
        self._written(shown, shown.number)

    def _written(self, shown: _Shown, number: int | None) -> None:
        shown.number, shown.done, shown.live, shown.epochs, shown.result = number, True, None, [], None
        self.written += 1

    def _point(self, tid: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """The parameters a trial is shown with: a population member's as it began."""
        segments = self.schedule.get(tid) if self.pbt else None
        return segments[0][1] if segments else params

    def _extra(self, tid: str, shown: _Shown) -> dict[str, Any]:
        extra: dict[str, Any] = {"replaces": shown.replaces} if shown.replaces is not None else {}
        if self.pbt and tid in self.schedule:
            extra["schedule"] = _segments(self.schedule[tid])
            shown.segments = len(self.schedule[tid])
        return extra

    def end(self, state: SweepEnd) -> None:
        """The last writes; an export that found nothing to write says why. A trial an earlier
        process left running that did not show again is told it ended."""
        try:
            self.flush()
            if self.export and self.study is None:
                if self.goal is None and any(s.result is not None for s in self.trials.values()):
                    raise SweepError(f"the trials in {self.folder} have no metric: an Optuna study needs one")
                raise SweepError(f"{self.folder} has no finished trial yet: nothing to export")
            if self.study is not None:
                for shown in self.trials.values():
                    if shown.attempt is None and not shown.done and shown.number is not None:
                        self.study.tell(shown.number, state=self.optuna.trial.TrialState.FAIL, skip_if_finished=True)
        finally:
            if self._ledger is not None:
                self._ledger.close()
                self._ledger = None


def _segments(schedule: Sequence[tuple[int, Mapping[str, Any], str]]) -> list[dict[str, Any]]:
    return [{"epoch": e, "params": dict(p), "copied_from": c} for e, p, c in schedule]


def _shown(where: str) -> str:
    """A storage as a user would type it: a journal file relative to here when below here."""
    if "://" in where:
        return where
    rel = os.path.relpath(where)
    return where if rel.startswith("..") else rel


def export(folder: str, where: str, mode: str | None = None) -> tuple[str, int, str]:
    """``export --optuna [URL]``: the sweep in ``folder`` (every trial of its grid that ended,
    each its last attempt) as an Optuna study named after the folder, in ``where`` (as
    :func:`sweeper.tracking.chosen.optuna_storage` says), replacing an earlier export or live
    study of it; the study's name, its trial count and where it is, as a user types it.
    ``mode``: the direction where the sweep recorded none and its metric's name does not say it."""
    from sweeper.store.folder import default_uid
    from sweeper.store.ledger import Ledger
    from sweeper.tracking.mirror import Mirror

    ledger = Ledger(folder, readonly=True)
    try:
        facts, several = ledger.facts(), ledger.objectives()
    finally:
        ledger.close()
    objectives = tuple(zip(several.metrics, several.modes)) if several is not None else ()
    info = SweepInfo(name=os.path.basename(os.path.normpath(os.path.abspath(folder))), folder=folder,
                     uid=facts.uid or default_uid(folder), metric=facts.metric, mode=mode or facts.mode,
                     search=facts.search, objectives=objectives, domains=domains_of_points([]))
    tracker = OptunaStudy(where, folder, export=True)
    Mirror(folder, [tracker], info, strict=True).end(SweepEnd.FINISHED)
    return tracker.name, tracker.written, _shown(where)
