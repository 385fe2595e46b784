"""Pruners by name (``prune="median"``, ``"asha(min_resource=2)"``,
``"patient(asha, patience=2)"``): each text read as Optuna's pruner of that name with its
keywords (and Ray Tune's spellings), refused in one line where Optuna's pruner would fail;
and Optuna itself, imported on first use. The search that asks them: :mod:`sweeper.search.sampling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sweeper.errors import SweepError

PRUNERS = ("median", "percentile", "asha", "hyperband", "patient", "wilcoxon")
#: Each pruner's name -> Optuna's class, and other spellings of its keywords (Ray Tune's).
_PRUNER_CLASSES = {"median": ("MedianPruner", {}), "percentile": ("PercentilePruner", {}),
                   "asha": ("SuccessiveHalvingPruner", {"grace_period": "min_resource"}),
                   "hyperband": ("HyperbandPruner", {"grace_period": "min_resource", "max_t": "max_resource"}),
                   "patient": ("PatientPruner", {}), "wilcoxon": ("WilcoxonPruner", {})}


_NEED_OPTUNA = 'search needs Optuna: pip install "sweeper[search]" (or pip install optuna)'


def need_optuna() -> Any:
    """Optuna, imported on first use and told to say only warnings; else one line on how to install it."""
    try:
        import optuna
    except ImportError:
        raise SweepError(_NEED_OPTUNA) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


#: The keyword each pruner's first cut waits by: ``'auto'`` there is :class:`Settled`.
_WAITS_BY = {"asha": "min_resource", "hyperband": "min_resource", "median": "n_warmup_steps",
             "percentile": "n_warmup_steps"}
#: A ranking settles at the first epoch whose values rank the trials as their final ones do,
#: this well (Spearman's rho), over at least this many trials that ran to their end.
SETTLED_RHO, SETTLED_TRIALS = 0.8, 5


@dataclass(frozen=True)
class Settled:
    """A pruner that cuts nothing until the sweep's own trials that ran to their end show the
    first epoch from which their ranking agrees with the final one (:func:`settled_epoch`);
    then Optuna's pruner with its first cut there (``min_resource``; a warm-up of the epochs
    before it). ``asha(min_resource='auto')``, ``hyperband(...)``, ``median(n_warmup_steps='auto')``,
    ``percentile(...)``."""

    text: str
    build: Callable[[int], Any]  #: the settled epoch -> Optuna's pruner cutting from it


def settled_epoch(curves: list[tuple[dict[int, float], float]]) -> int | None:
    """The first epoch from which the trials' values rank them as their final values do
    (Spearman's rho >= :data:`SETTLED_RHO`, over at least :data:`SETTLED_TRIALS` trials that
    reported it) and go on doing so at every later epoch: a chance agreement among a few
    trials at an early epoch, undone later, is no settled ranking. ``curves``: each trial that
    ran to its end, its value by epoch and its final one."""
    if len(curves) < SETTLED_TRIALS:
        return None
    settled = None
    for epoch in sorted({e for values, _ in curves for e in values}, reverse=True):
        pairs = [(values[epoch], final) for values, final in curves if epoch in values]
        if len(pairs) < SETTLED_TRIALS:
            continue
        if (spearman([a for a, _ in pairs], [b for _, b in pairs]) or 0) < SETTLED_RHO:
            break
        settled = epoch
    return settled


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (ties share their mean rank); None where a side does not vary."""
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sx = sum((a - mx) ** 2 for a in rx) ** 0.5
    sy = sum((b - my) ** 2 for b in ry) ** 0.5
    if not sx or not sy:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / (sx * sy)


def pruner(prune: Any) -> Any:
    """An Optuna pruner from its name, or its call with keywords (``"asha(min_resource=2,
    reduction_factor=3)"``, ``"patient(asha(min_resource=2), patience=2)"``), or the
    instance given; None prunes nothing."""
    optuna = need_optuna()
    if prune is None or prune == "none":
        return optuna.pruners.NopPruner()
    if isinstance(prune, optuna.pruners.BasePruner):
        return prune
    if not isinstance(prune, str):
        raise SweepError(f"prune is {prune!r}; give one of {', '.join(PRUNERS)}, None, or an Optuna pruner")
    import ast

    try:
        node = ast.parse(prune.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # not Python, or nested past the parser's depth
        node = None
    built = _pruner_of(node, prune)
    if isinstance(built, Settled):
        _try_pruner(built.build(1), prune)
        return built
    _try_pruner(_pruner_of(node, prune), prune)  # a twin: a pruner keeps what it saw of its study
    return built


#: Pruner keywords that are counts (of steps, trials, brackets).
_WHOLE = {"min_resource", "max_resource", "reduction_factor", "min_early_stopping_rate", "bootstrap_count",
          "patience", "n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials", "n_startup_steps"}


def _try_pruner(twin: Any, text: str) -> None:
    """Run a twin of the pruner on a throwaway study (four trials of 20 steps): Optuna
    checks some values only when it prunes, which in a sweep would be mid-run."""
    import warnings

    optuna = need_optuna()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(pruner=twin, sampler=optuna.samplers.RandomSampler(seed=0))
            for i in range(4):
                trial = study.ask()
                for step in range(1, 21):
                    trial.report(float(step * (i + 1)), step)
                    trial.should_prune()
                study.tell(trial, float(i))
    except Exception as exc:  # noqa: BLE001 - whatever Optuna raises: one line, before anything runs
        raise SweepError(f"prune {text!r}: Optuna's pruner fails with it ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); check the keywords' values") from None


def _keywords(node: Any, text: str, example: str) -> dict[str, Any]:
    """A pruner call's keywords and their values (literals only), each given once."""
    import ast

    given: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise SweepError(f"prune {text!r}: name each value (keyword=value); {example}")
        if kw.arg in given:  # Python refuses f(a=1, a=2) only when it compiles, not as it parses
            raise SweepError(f"prune {text!r}: {kw.arg} is given twice; give it once")
        try:
            given[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: {[]: 1}
            raise SweepError(f"prune {text!r}: {kw.arg}= must be a number, text, True or False; {example}") from None
    return given


def _check_whole(kwargs: dict[str, Any], text: str) -> None:
    """Optuna takes these keywords as counts ('auto' where it means the settled epoch, or
    Optuna's own ``max_resource``); a float would fail only mid-sweep."""
    for key, value in kwargs.items():
        if key in _WHOLE and not (value == "auto" and key in ("min_resource", "max_resource", "n_warmup_steps")) and (
                isinstance(value, bool) or not isinstance(value, int)):
            raise SweepError(f"prune {text!r}: {key} must be a whole number, got {value!r}")


def _settled(text: str, cls: Any, cls_name: str, waits_by: str, fixed: dict[str, Any]) -> Settled:
    """``'auto'`` for a pruner's first cut: Optuna's pruner made once the ranking settles, its
    ``waits_by`` keyword (``min_resource``: its first rung; ``n_warmup_steps``: no cut before
    that step) at the settled epoch; checked now, with 1."""
    import warnings

    optuna = need_optuna()

    def build(epoch: int) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(**fixed, **{waits_by: epoch})

    try:
        build(1)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"prune {text!r}: Optuna's {cls_name} refused it: {exc}") from None
    return Settled(text, build)


def _pruner_of(node: Any, text: str) -> Any:
    """The pruner a parsed ``name`` or ``name(keyword=value, ...)`` names (see :func:`pruner`)."""
    import ast
    import inspect
    import warnings

    optuna = need_optuna()
    example = "e.g. asha, 'asha(min_resource=2, reduction_factor=3)' or 'patient(median, patience=2)'"
    given: dict[str, Any] = {}
    inner: list[Any] = []
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, inner, given = node.func.id, list(node.args), _keywords(node, text, example)
    else:
        raise SweepError(f"prune is {text!r}: not a pruner's name or call; give one of {', '.join(PRUNERS)}; {example}")
    if name not in _PRUNER_CLASSES:
        raise SweepError(f"prune {text!r}: no pruner {name!r}; give one of {', '.join(PRUNERS)}; {example}")
    cls_name, aliases = _PRUNER_CLASSES[name]
    cls = getattr(optuna.pruners, cls_name)
    kwargs = {aliases.get(k, k): v for k, v in given.items()}
    _check_whole(kwargs, text)
    if len(kwargs) < len(given):
        twice = [k for k in given if aliases.get(k) in given]
        raise SweepError(f"prune {text!r}: {twice[0]} and {aliases[twice[0]]} are the same keyword; give one")
    takes = [k for k in inspect.signature(cls).parameters if k != "wrapped_pruner"]
    unknown = [k for k in given if aliases.get(k, k) not in takes]
    if unknown:
        raise SweepError(f"prune {text!r}: {name} takes no {', '.join(unknown)}; it takes {', '.join(takes)} "
                         f"(Optuna's {cls_name})")
    if name == "patient":
        if len(inner) > 1:
            raise SweepError(f"prune {text!r}: patient wraps one pruner, e.g. 'patient(asha, patience=2)'")
        if "patience" not in kwargs:
            raise SweepError(f"prune {text!r}: patient needs patience=N, the epochs without improvement it "
                             "waits for, e.g. 'patient(asha, patience=2)'")
        kwargs["wrapped_pruner"] = _pruner_of(inner[0], text) if inner else None
        if isinstance(kwargs["wrapped_pruner"], Settled):
            raise SweepError(f"prune {text!r}: patient cannot wrap a pruner whose first cut waits ('auto'); "
                             "give that pruner on its own, or a number")
    elif inner:
        raise SweepError(f"prune {text!r}: {name} takes keywords only (name=value); {example}")
    waits_by = _WAITS_BY.get(name)
    if waits_by is not None and kwargs.get(waits_by) == "auto":  # the sweep's own settled epoch
        return _settled(text, cls, cls_name, waits_by, {k: v for k, v in kwargs.items() if k != waits_by})
    if kwargs.get("n_warmup_steps") == "auto":
        raise SweepError(f"prune {text!r}: n_warmup_steps='auto' goes with median or percentile")
    try:
        with warnings.catch_warnings():  # experimental in Optuna (Patient, Wilcoxon): said once, here not
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"prune {text!r}: Optuna's {cls_name} refused it: {exc}") from None
