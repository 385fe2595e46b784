"""Which searches a sweep can run, by name (``search="tpe"``, ``--search pbt``).

A search is a name and what the runner, the planner and the trackers need to know of it
(:class:`Registered`): the Optuna sampler it asks its points of, or that it trains a
population (pausing its members); whether it needs Optuna; its own settings, if any. No
code outside this module compares a search's name: each asks its entry. Three ways a name
gets here, as backends do (:mod:`sweeper.backends.registry`):

* the built-in ones: Optuna's samplers ``auto`` (``tpe`` for one objective, ``nsga2`` for
  several), ``tpe``, ``nsga2``, ``random``, ``cmaes``, ``qmc``, ``gp``; and ``pbt``,
  population-based training (:mod:`sweeper.search.pbt`);
* :func:`register`, from a program, before it calls ``sweep()``: an Optuna sampler by a name of
  its own (``register("sobol", lambda optuna, made: MySampler(seed=made.seed))``);
* an installed package's entry point in the ``sweeper.search`` group
  (``sobol = my_package.search:sampler``), found when a sweep names it, so the command line
  can run it too; it may point at a sampler factory or at a :class:`Registered`.

An Optuna sampler instance given as ``search=`` is asked as it is (:data:`OTHER`).
A grid (no ``search``) lists its points, a random sample's included: it asks no search.
Looking a name up imports nothing of Optuna.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from sweeper.errors import SweepError
from sweeper.system import entrypoints

if TYPE_CHECKING:
    from sweeper.model.options import Options

#: The entry-point group another package declares its searches in.
GROUP = "sweeper.search"


@dataclass(frozen=True)
class Made:
    """What a sampler's factory is given as a sweep starts: ``factory(optuna, made)``.

    Attributes:
        seed: the sweep's seed (``seed=``, ``--seed``): seed the sampler with it, so that the
            same sweep asks the same points.
        trials: the search's trials in all (``trials=``), for a sampler whose settings
            follow the budget (NSGA-II's generation size).
        given: the keywords for a sampler registered with ``constraints=True``, as pairs;
            ``keywords`` gives them as a dict to pass on (``**made.keywords``): Optuna's
            ``constraints_func`` where the installed Optuna takes the constraints so (before
            5), else none.

    Example:
        >>> from sweeper.search import Made
        >>> made = Made(seed=7, trials=20)
        >>> made.seed, made.trials, made.keywords
        (7, 20, {})
    """

    seed: int
    trials: int = 0
    given: tuple[tuple[str, Any], ...] = ()

    @property
    def keywords(self) -> dict[str, Any]:
        return dict(self.given)


#: ``factory(optuna, made) -> an Optuna sampler``
SamplerFactory = Callable[[Any, Made], Any]


@dataclass(frozen=True)
class Registered:
    """A search as registered: what each part of a sweep needs to know of it, asked instead
    of its name. A search asks an Optuna study for its points (``sampler``, or ``picks``:
    :class:`sweeper.search.sampling.Search`), or trains a population (``pauses``: the runner
    checks and describes it, and the planner plans its members, by :mod:`sweeper.search.pbt`).

    An installed package's entry point may name one of these instead of a bare factory, to
    say more than the factory (``sobol = my_package.search:registered``).

    Attributes:
        sampler: ``sampler(optuna, made) -> an Optuna sampler`` (:class:`Made`), called as a
            sweep starts; None for a search that asks none.
        constraints: the sampler takes the sweep's constraints (``**made.keywords``).
        single_objective: the sampler optimises one objective only: a sweep of several is
            refused in one line.
        generations: the sampler evolves generations: a dry run says their size.
        picks, pauses, settings: sweeper's own searches' (``auto``, which picks another by
            the number of objectives; ``pbt``, which pauses a population's members and has
            settings of its own).

    Example:
        >>> from sweeper.search import Registered
        >>> def sobol(optuna, made):
        ...     return optuna.samplers.QMCSampler(qmc_type="sobol", seed=made.seed)
        >>> registered = Registered(sobol, single_objective=True)
        >>> registered.needs_optuna, registered.constraints, registered.pauses
        (True, False, False)
    """

    #: the Optuna sampler it asks its points of, made once per sweep (None: it asks none)
    sampler: SamplerFactory | None = None
    #: a name that stands for another search, picked by whether the sweep has several
    #: objectives (``auto``); the folder records the sampler it picked
    picks: Callable[[bool], str] | None = None
    #: its sampler takes the sweep's constraints (TPE, NSGA-II, GP)
    constraints: bool = False
    #: its sampler optimises one objective only (CMA-ES): several are refused in one line
    single_objective: bool = False
    #: its sampler evolves generations (NSGA-II): the dry run says their size
    generations: bool = False
    #: trains a population: pauses each member at a report and resumes it later from its
    #: checkpoint, copying the top members' into the bottom ones (population-based training)
    pauses: bool = False
    #: the option that holds its own settings (``pbt={...}``), refused with any other search
    settings: str | None = None

    @property
    def needs_optuna(self) -> bool:
        """Whether it needs Optuna (``pip install "sweeper[search]"``): it asks a study."""
        return not self.pauses


def _tpe(optuna: Any, made: Made) -> Any:  # the constant liar: points asked while others run stay apart
    return optuna.samplers.TPESampler(seed=made.seed, constant_liar=True, **made.keywords)


def _nsga2(optuna: Any, made: Made) -> Any:
    return optuna.samplers.NSGAIISampler(seed=made.seed, population_size=population(made.trials), **made.keywords)


def _cmaes(optuna: Any, made: Made) -> Any:
    try:
        import cmaes  # noqa: F401
    except ImportError:
        raise SweepError('search="cmaes" needs the cmaes package: pip install cmaes') from None
    return optuna.samplers.CmaEsSampler(seed=made.seed)


def _gp(optuna: Any, made: Made) -> Any:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SweepError('search="gp" needs PyTorch (Optuna\'s GPSampler uses it): pip install torch') from None
    return optuna.samplers.GPSampler(seed=made.seed, **made.keywords)


def population(trials: int) -> int:
    """NSGA-II's generation size for a search of ``trials``: Optuna's 50 where the budget
    allows four generations, else a quarter of it (at least 4), so that a small search
    evolves instead of sampling at random throughout."""
    return max(4, min(50, trials // 4))


_SEARCHES: dict[str, Registered] = {
    # Optuna's own defaults: TPE for one objective, NSGA-II for several
    "auto": Registered(picks=lambda several: "nsga2" if several else "tpe"),
    "tpe": Registered(_tpe, constraints=True),
    "nsga2": Registered(_nsga2, constraints=True, generations=True),
    "random": Registered(lambda optuna, made: optuna.samplers.RandomSampler(seed=made.seed)),
    "cmaes": Registered(_cmaes, single_objective=True),
    "qmc": Registered(lambda optuna, made: optuna.samplers.QMCSampler(seed=made.seed)),
    "gp": Registered(_gp, constraints=True),
    "pbt": Registered(pauses=True, settings="pbt"),
}

#: What a ``search`` option that names no registered search stands for: an Optuna sampler
#: instance (asked as it is), no search (a grid), or a name its check refuses in one line.
OTHER = Registered()


def register(name: str, sampler: SamplerFactory, *, constraints: bool = False,
             single_objective: bool = False) -> None:
    """Make ``search=name`` ask its points of the Optuna sampler ``sampler(optuna, made)``
    returns.

    An installed package declares its searches in the ``sweeper.search`` entry-point group
    instead, so that the command line finds them too (docs/search.md).

    Args:
        name: the search's name, a plain identifier: ``sweep(fn, space, search=name, trials=N)``.
        sampler: the sampler's factory, called as a sweep starts with Optuna (the module) and
            a :class:`Made` (the sweep's seed, its trials); returns an Optuna sampler.
        constraints: the sampler takes the sweep's constraints: it is given them in
            ``made.keywords``.
        single_objective: the sampler optimises one objective only: a sweep of several is
            refused in one line.

    Raises:
        SweepError: a name that is not a plain identifier, or one taken by another factory
            (the same factory again changes nothing).

    Example:
        >>> from sweeper.search import register
        >>> def sobol(optuna, made):
        ...     return optuna.samplers.QMCSampler(qmc_type="sobol", seed=made.seed)
        >>> register("sobol", sobol)  # sweep(fn, space, search="sobol", trials=16) now asks it
        >>> register("two words", sobol)
        Traceback (most recent call last):
        ...
        sweeper.errors.SweepError: search name 'two words' is not a plain name; use letters, digits and _
    """
    entrypoints.add(_SEARCHES, name, Registered(sampler, constraints=constraints, single_objective=single_objective),
                    "search", lambda known, new: known.sampler is new.sampler)


def lookup(name: Any) -> Registered:
    """The search registered as ``name``; else the installed entry point of that name; else
    one line naming the known ones."""
    found = _found(name)
    if found is None:
        raise SweepError(f"search is {name!r}; give one of {', '.join(names())} or an Optuna sampler")
    return found


def of(search: Any) -> Registered:
    """What a sweep's ``search`` option names, as far as it names one: its entry; anything
    else (an Optuna sampler instance, None, a name no search has, which the search's check
    refuses in its turn, in one line, as it always did): :data:`OTHER`."""
    return _found(search) or OTHER


def names() -> list[str]:
    """Every search name a sweep may use now: registered ones, then installed entry points."""
    return list(dict.fromkeys([*_SEARCHES, *entrypoints.names(GROUP)]))


def check_settings(options: Options) -> None:
    """A search's own settings given with another search (or none): refused in one line."""
    for name, known in list(_SEARCHES.items()):
        if known.settings is not None and getattr(options, known.settings, None) is not None \
                and of(options.search) is not known:
            raise SweepError(f"{known.settings}'s settings go with search={name!r} (--search {name})")


def _found(name: Any) -> Registered | None:
    if not isinstance(name, str):
        return None
    if name not in _SEARCHES:
        found = _entry_point(name)
        if found is None:
            return None
        _SEARCHES[name] = found
    return _SEARCHES[name]


def _entry_point(name: str) -> Registered | None:
    loaded = entrypoints.load(GROUP, name, "search")
    if loaded is None:
        return None
    return loaded if isinstance(loaded, Registered) else Registered(loaded)  # type: ignore[arg-type]
