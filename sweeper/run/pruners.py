"""Pruners by name (``prune="median"``, ``"asha(min_resource=2)"``,
``"patient(asha, patience=2)"``): each text read as Optuna's pruner of that name with its
keywords (and Ray Tune's spellings), refused in one line where Optuna's pruner would fail;
and Optuna itself, imported on first use. The search that asks them: :mod:`sweeper.run.search`.
"""

from __future__ import annotations

from typing import Any

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
        name, inner = node.func.id, list(node.args)
        for kw in node.keywords:
            if kw.arg is None:
                raise SweepError(f"prune {text!r}: name each value (keyword=value); {example}")
            if kw.arg in given:  # Python refuses f(a=1, a=2) only when it compiles, not as it parses
                raise SweepError(f"prune {text!r}: {kw.arg} is given twice; give it once")
            try:
                given[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: {[]: 1}
                raise SweepError(f"prune {text!r}: {kw.arg}= must be a number, text, True or False; {example}") from None
    else:
        raise SweepError(f"prune is {text!r}: not a pruner's name or call; give one of {', '.join(PRUNERS)}; {example}")
    if name not in _PRUNER_CLASSES:
        raise SweepError(f"prune {text!r}: no pruner {name!r}; give one of {', '.join(PRUNERS)}; {example}")
    cls_name, aliases = _PRUNER_CLASSES[name]
    cls = getattr(optuna.pruners, cls_name)
    kwargs = {aliases.get(k, k): v for k, v in given.items()}
    for key, value in kwargs.items():  # Optuna takes these as counts; a float fails only mid-sweep
        if key in _WHOLE and not (value == "auto" and key in ("min_resource", "max_resource")) and (
                isinstance(value, bool) or not isinstance(value, int)):
            raise SweepError(f"prune {text!r}: {key} must be a whole number, got {value!r}")
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
    elif inner:
        raise SweepError(f"prune {text!r}: {name} takes keywords only (name=value); {example}")
    try:
        with warnings.catch_warnings():  # experimental in Optuna (Patient, Wilcoxon): said once, here not
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"prune {text!r}: Optuna's {cls_name} refused it: {exc}") from None
