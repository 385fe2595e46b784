"""Adaptive search: Optuna's samplers and pruners over sweeper's fresh process per trial.

The parent holds an Optuna study (in memory, through its ask-and-tell interface). When a
place frees, :meth:`Search.next` asks the sampler for a point and makes it a trial like
any other (its id from its parameters, its seed from the sweep's seed and the id). Each
per-epoch report is the Optuna trial's intermediate value; when the pruner says so,
:meth:`Search.prune` gives the engine a reason, and the engine stops the trial's process
(SIGTERM, then SIGKILL after the grace), which frees its GPU at once. Each final result is
told to the study. The ledger stays the source of truth: on a re-run the study is rebuilt
from it (:meth:`Search.resume`), finished and pruned trials with their intermediate values.

Optuna is imported here only, and only for a search (``pip install "sweeper[search]"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.metrics import direction
from sweeper.model.trial import TrialResult, TrialSpec
from sweeper.model.objectives import Objectives
from sweeper.model.objectives import given as objectives_given
from sweeper.search import registry
from sweeper.search.pruners import Settled, need_optuna, pruner, settled_epoch
from sweeper.search.registry import Made, population

#: Asks in a row that may land on points already tried before the space counts as spent.
DUPLICATE_ASKS = 50


def distributions(space: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Optuna distributions for the searched parameters, and the fixed ones. Refuses what
    cannot be mapped, naming the parameter, before anything runs (the rules:
    :meth:`sweeper.model.space.Space.searched`, :meth:`~sweeper.model.space.Space.optuna`)."""
    need_optuna()  # installed, or one line saying how
    from sweeper.model.space import Space

    return Space.searched(space).optuna()


#: Before Optuna 5 (no ``Trial.set_constraint``), the user attribute an Optuna trial carries
#: its constraint values in (<= 0: met), for the sampler's ``constraints_func``.
CONSTRAINTS_ATTR = "sweeper_constraints"


def _constraint_values(trial: Any) -> Any:
    """Optuna 4's ``constraints_func``: the values the sweep told with the trial (none: not met)."""
    return list(trial.user_attrs.get(CONSTRAINTS_ATTR, {"c0": 1.0}).values())


def trial_constraints(optuna: Any) -> bool:
    """Whether this Optuna takes constraints on the trial itself (5.0 on; ``constraints_func``
    before, deprecated since)."""
    return hasattr(optuna.trial.Trial, "set_constraint")


def sampler(search: Any, seed: int, constrained: bool = False, several: bool = False, trials: int = 0) -> Any:
    """An Optuna sampler from its name (seeded with the sweep's seed; the names:
    :mod:`sweeper.search.registry`), or the instance given; ``constrained``: the samplers that
    take constraints (TPE, NSGA-II, GP) are given them; ``several``: the study has several
    objectives ("auto" is then NSGA-II, else TPE)."""
    optuna = need_optuna()
    if isinstance(search, optuna.samplers.BaseSampler):
        return search
    kind = registry.of(search)
    if several and kind.single_objective:
        raise SweepError(f"search={search!r} optimises one objective; with several metrics give nsga2 (NSGA-II), "
                         "tpe, random, qmc or gp")
    if kind.picks is not None:
        kind = registry.lookup(kind.picks(several))
    if kind.sampler is None:  # a name no search has (or one that asks no sampler): one line naming them
        registry.lookup(search)
        raise SweepError(f"search={search!r} asks no Optuna sampler")
    given = {"constraints_func": _constraint_values} if constrained and not trial_constraints(optuna) else {}
    return kind.sampler(optuna, Made(seed, trials, tuple(given.items()) if kind.constraints else ()))


def check(space: Any, search: Any, prune: Any, trials: Any, metric: Any, mode: Any) -> Any:
    """Everything a search needs, checked before anything runs; its direction (one per
    objective, as a tuple, where ``metric`` names several)."""
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise SweepError(f"a search needs trials = N (a whole number >= 1), got {trials!r}; e.g. --trials 20")
    if metric is None:
        raise SweepError("a search needs the metric it optimises: give metric='val_loss' (--metric val_loss)")
    several = Objectives.of(metric, mode)
    if several is not None:
        if not (prune is None or prune == "none"):
            raise SweepError(f"prune={prune if isinstance(prune, str) else type(prune).__name__!r} cannot judge "
                             f"{len(several.metrics)} objectives at once (Optuna's pruners stop a trial by one "
                             "intermediate value): drop prune, or give one metric")
        how: Any = several.modes
    else:
        name = (objectives_given(metric, None)[0] or (metric,))[0]  # one name: ["a,b"] is the metric a,b
        how = mode or direction(name)
        if how is None:
            raise SweepError(f"the search's metric {name!r} does not say whether higher is better; "
                             "give mode='max' or mode='min' (--mode)")
    distributions(space)
    sampler(search, 0, several=several is not None, trials=trials)
    pruner(prune)
    return how


def describe(space: Any, options: Any, on_record: int) -> str:
    """A search in one line, for a dry run."""
    dists, fixed = distributions(space)
    parts = [f"{k} {_shown(v)}" for k, v in dists.items()] + [f"{k}={v!r}" for k, v in fixed.items()]
    several = options.objectives
    how = options.search if isinstance(options.search, str) else type(options.search).__name__
    kind = registry.of(options.search)
    if kind.picks is not None:  # auto: the search it picks, said
        picked = kind.picks(several is not None)
        how, kind = f"{how} ({picked})", registry.lookup(picked)
    if several is not None and kind.generations:
        how += f", population {population(options.trials)}"
    pr = options.prune if options.prune is None or isinstance(options.prune, str) else type(options.prune).__name__
    aim = several or f"{options.ranked_by} ({options.ranked_mode})"
    return (f"search: {how} over {', '.join(parts)}; {options.trials} trials ({on_record} on record); "
            f"prune: {pr}; {aim}")


def _shown(dist: Any) -> str:
    kind = type(dist).__name__
    if kind == "FloatDistribution":
        return f"{'log' if dist.log else ''}uniform [{dist.low:g}, {dist.high:g}]"
    if kind == "IntDistribution":
        return f"integer [{dist.low}, {dist.high}]"
    if kind == "CategoricalDistribution":
        return f"one of {list(dist.choices)}"
    return kind


class Search:
    """The study: the points it asks for, its pruner, what it is told (the engine asks it through
    :class:`sweeper.search.schedulers.Searching`)."""

    def __init__(self, space: Any, *, search: Any, prune: Any, trials: int, seed: int, metric: str,
                 mode: str, make_spec: Any, constraints: Any = None, objectives: Objectives | None = None) -> None:
        optuna = need_optuna()
        self.constraints = constraints  #: a Constraints, told with each trial (samplers that take them)
        self.optuna = optuna
        self.dists, self.fixed = distributions(space)
        self.metric, self.mode = metric, mode
        #: what the study optimises: the metric, or each of several objectives (then no pruning)
        self.targets: tuple[str, ...] = objectives.metrics if objectives is not None else (metric,)
        modes = objectives.modes if objectives is not None else (mode,)
        self.make_spec = make_spec  #: params, index -> TrialSpec
        self.total = trials
        built = pruner(prune)
        #: a pruner whose first cut waits until the ranking settles (``min_resource='auto'``)
        self.settled: Settled | None = built if isinstance(built, Settled) else None
        self.first_cut: int | None = None  #: that epoch, once the trials that ran to their end tell it
        #: the last epoch trials train, as the trials that ran to their end showed (none is pruned there)
        self.end: int | None = None
        self.study = optuna.create_study(directions=["maximize" if m == "max" else "minimize" for m in modes],
                                         sampler=sampler(search, seed, constraints is not None,
                                                         objectives is not None, trials),
                                         pruner=optuna.pruners.NopPruner() if self.settled else built)
        self.pruner_name = prune if isinstance(prune, str) or prune is None else type(prune).__name__
        #: Whether its pruner can stop a trial (then each report waits for its verdict).
        self.prunes = self.settled is not None or not isinstance(self.study.pruner, optuna.pruners.NopPruner)
        # the sampler a name that picks one (auto) chose is what the folder records
        self.sampler_name = (search if isinstance(search, str) and registry.of(search).picks is None
                             else type(self.study.sampler).__name__)
        #: a point's key -> the Optuna trials waiting on its trial (a point asked twice is trained once)
        self.asked: dict[str, list[Any]] = {}
        self.known: dict[str, TrialResult] = {}  #: finished trials on record, by their point's key
        self.steps: dict[str, set[int]] = {}  #: epochs reported, by trial id
        self.remaining = trials
        self.index = 0

    # -- resume -----------------------------------------------------------------------------

    def resume(self, previous: Mapping[str, TrialResult], history: Mapping[str, list[tuple[int, dict[str, Any]]]],
               keeps: Any) -> tuple[dict[str, TrialResult], list[TrialResult]]:
        """Rebuild the study from the ledger: every trial on record that a re-run keeps
        (``keeps``: ok and pruned ones; failed ones with skip_failed) is told, with its
        intermediate values. The others (interrupted, failed) are asked again first, as
        any sweep runs them again. Both count toward ``trials``. Returns the rows kept, and
        those to run again."""
        kept: dict[str, TrialResult] = {}
        again: list[TrialResult] = []
        index = 1 + max((r.index for r in previous.values()), default=-1)
        # only rows of this space count: a grid's, or another space's, are not this search's
        previous = {tid: r for tid, r in previous.items() if self.fits(r.params)}
        for result in sorted(previous.values(), key=lambda r: r.index):
            if not keeps(result):
                again.append(result)
                continue
            self._add(result, history.get(result.trial_id, []))
            kept[result.trial_id] = result
            self.known[result.key] = result
        for result in again:  # the same point, asked again now: its Optuna trial waits for it
            self.study.enqueue_trial({k: v for k, v in result.params.items() if k in self.dists},
                                     skip_if_exists=False)
            self.asked[result.key] = [self.study.ask(self.dists)]
        self.index = index
        self.remaining = max(0, self.total - len(kept) - len(again))
        for result in kept.values():
            self._learn(result)
        return kept, again

    def fits(self, params: Mapping[str, Any]) -> bool:
        """Whether a point lies in this search's space: the same parameters, its fixed
        values, and each searched value inside its distribution."""
        if set(params) != set(self.dists) | set(self.fixed):
            return False
        if any(params[k] != v for k, v in self.fixed.items()):
            return False
        try:  # Optuna's own check that each value lies in its distribution
            self.optuna.trial.create_trial(params={k: params[k] for k in self.dists}, distributions=self.dists,
                                           value=0.0)
        except (ValueError, TypeError):
            return False
        return True

    def _add(self, result: TrialResult, epochs: list[tuple[int, dict[str, Any]]]) -> None:
        state, value = self._state(result)
        # a study of several objectives takes no intermediate values (nothing prunes it)
        intermediate = {e: float(m[self.metric]) for e, m in epochs
                        if len(self.targets) == 1 and _finite(m.get(self.metric))}
        told = self._constraints_of(result)
        where = {"constraints": told} if trial_constraints(self.optuna) else {"user_attrs": {CONSTRAINTS_ATTR: told}}
        trial = self.optuna.trial.create_trial(
            params={k: v for k, v in result.params.items() if k in self.dists},
            distributions=self.dists, values=value, state=state, intermediate_values=intermediate,
            **(where if told else {}))
        self.study.add_trial(trial)

    def _constraints_of(self, result: TrialResult) -> dict[str, float]:
        """The trial's constraint values by name, for the sampler (one it lacks: not met)."""
        if self.constraints is None:
            return {}
        return self.constraints.named(result.params, result.metrics)

    def _state(self, result: TrialResult) -> tuple[Any, list[float] | None]:
        """The trial's Optuna state, and its value of each objective where it completed."""
        TrialState = self.optuna.trial.TrialState
        values = [result.metrics.get(m) for m in self.targets]
        state = result.status.optuna
        if state == "COMPLETE" and not all(map(_finite, values)):
            state = "FAIL"  # ok, but without a number to optimise
        return TrialState[state], ([float(v) for v in values] if state == "COMPLETE" else None)  # type: ignore[arg-type]

    # -- the feed -----------------------------------------------------------------------------

    def next(self) -> TrialSpec | None:
        """Ask for a point; a point already tried is not trained again (the study is told
        its outcome, or waits for it), and the sampler is asked anew."""
        for _ in range(DUPLICATE_ASKS):
            if self.remaining <= 0:
                return None
            trial = self.study.ask(self.dists)
            params = {**self.fixed, **trial.params}
            spec = self.make_spec(params, self.index)
            if spec.key in self.known:  # on record: told at once
                self._tell(trial, self.known[spec.key])
                continue
            if spec.key in self.asked:  # running now: told when it ends
                self.asked[spec.key].append(trial)
                continue
            self.asked[spec.key] = [trial]
            self.remaining -= 1
            self.index += 1
            return spec
        self.remaining = 0  # every ask lands on a point tried: the space is spent
        return None

    def prune(self, spec: TrialSpec, items: list[dict[str, Any]]) -> str | None:
        """Report a trial's epochs to its Optuna trial; a reason to stop it, if the pruner says so."""
        trials = self.asked.get(spec.key)
        if not trials or len(self.targets) > 1:  # a study of several objectives is never pruned
            return None
        trial = trials[0]
        judged = None
        for item in items:
            value = item["metrics"].get(self.metric)
            if not _finite(value):
                continue
            epoch = int(item["epoch"])
            steps = self.steps.setdefault(spec.trial_id, set())
            if epoch not in steps:  # a retry reports its epochs again: the first stand
                steps.add(epoch)
                trial.report(float(value), epoch)
            judged = (epoch, value)
        # judged at the batch's last epoch, where the trial is now (and, waiting for the
        # verdict, stops): the error, epoch_reached and the row's metrics name one epoch;
        # never at its last epoch (a cut there saves nothing and loses its result), nor
        # before the ranking settled
        if judged is None or self._at_end(judged[0], items[-1].get("last")):
            return None
        if self.settled is not None and self.first_cut is None:
            return None
        if trial.should_prune():
            return f"pruned by {self.pruner_name} at epoch {judged[0]} ({self.metric}={judged[1]:.6g})"
        return None

    def tell(self, result: TrialResult) -> None:
        """A trial's final result: told to every Optuna trial that asked for its point."""
        self.known[result.key] = result
        self.steps.pop(result.trial_id, None)
        for trial in self.asked.pop(result.key, []):
            self._tell(trial, result)
        self._learn(result)

    def _at_end(self, epoch: int, last: Any) -> bool:
        """Whether ``epoch`` is a trial's last: as its report says (Keras's ``fit`` knows), or
        as far as the trials that ran to their end went (Optuna's ``max_resource='auto'`` rule)."""
        if isinstance(last, int) and not isinstance(last, bool) and epoch >= last:
            return True
        return self.end is not None and epoch >= self.end

    def _learn(self, result: TrialResult) -> None:
        """What a trial that ran to its end tells: the last epoch, and (a settled pruner) the
        epoch from which the ranking settles, its first cut from then on."""
        if not result.status.succeeded or result.status.value != "ok" or not result.epoch_reached:
            return
        self.end = max(self.end or 0, result.epoch_reached)
        if self.settled is None:
            return
        done = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.COMPLETE,))
        curves = [(dict(t.intermediate_values), float(t.value)) for t in done
                  if t.value is not None and t.intermediate_values]
        epoch = settled_epoch(curves)
        if epoch is not None and epoch != self.first_cut:
            self.first_cut = epoch
            self.study.pruner = self.settled.build(epoch)
            import logging

            logging.getLogger("sweeper").info("sweeper: %s: the ranking settles at epoch %d (%d trials ran to "
                                              "their end); pruning from there", self.pruner_name, epoch, len(curves))

    def _tell(self, trial: Any, result: TrialResult) -> None:
        state, value = self._state(result)
        told = self._constraints_of(result)
        if told and trial_constraints(self.optuna):
            for key, v in told.items():
                trial.set_constraint(key, v)
        elif told:
            trial.set_user_attr(CONSTRAINTS_ATTR, told)
        if state == self.optuna.trial.TrialState.COMPLETE:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=state)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
