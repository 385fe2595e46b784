"""Which backends a sweep can run on, by name (``backend="local"``, ``--backend ray``).

A backend is a name and a factory: ``factory(launch) -> Backend`` (the protocol is
:class:`sweeper.model.protocol.Backend`; what the factory is given, :class:`Launch`). Three
ways a name gets here:

* the built-in ones: ``local`` (:mod:`sweeper.backends.local`), ``ray``
  (:mod:`sweeper.backends.ray`) and ``slurm`` (:mod:`sweeper.backends.slurm`), imported only
  when a sweep runs on them;
* :func:`register`, from a program, before it calls ``sweep()``;
* an installed package's entry point in the ``sweeper.backends`` group
  (``my-backend = my_package.backend:factory``), found when a sweep names it, so the
  command line can run on it too; it may point at a factory or at a :class:`Registered`.

Looking a name up imports nothing of a backend but its factory's module.

A backend may own an options group: a frozen dataclass whose fields are its settings (each
with :func:`sweeper.model.options.flag` metadata to be a command-line flag, and a ``checked()``
that refuses bad values in one line), registered with it (``options=``). :func:`options`
builds a sweep's :class:`~sweeper.model.options.Options` and the chosen backend's group from
the same keywords (``sweep(..., address="auto")``, a grid file's options, ``--address``); a
keyword of another backend's group is refused, naming that backend. Ray's is
:class:`sweeper.backends.ray_options.RayOptions`; Slurm's,
:class:`sweeper.backends.slurm.options.SlurmOptions`.
"""

from __future__ import annotations

import contextlib
from dataclasses import Field, dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from sweeper.backends.ray_options import RayOptions
from sweeper.backends.slurm.options import SlurmOptions
from sweeper.errors import SweepError
from sweeper.system import entrypoints

if TYPE_CHECKING:
    from sweeper.backends.local.server import ForkServer
    from sweeper.model.options import Flag, Options
    from sweeper.model.settings import Settings
    from sweeper.model.protocol import Admission, Backend
    from sweeper.model.target import Target
    from sweeper.placement.slots import Placement

#: The entry-point group another package declares its backends in.
GROUP = "sweeper.backends"


@dataclass(frozen=True)
class Launch:
    """What a backend's factory is given, once per sweep, before the first trial.

    Attributes:
        target: what each trial runs (it pickles; in the trial's process
            :func:`sweeper.child.loading.load` gives ``train``).
        options: the sweep's options as given, checked (:class:`sweeper.Options`).
        settings: the same options parsed once into typed groups (:mod:`sweeper.model.settings`):
            ``resources`` (GPUs, workers, the memory policy), ``limits`` (timeout, stall,
            retries), ``launching``, ``backend`` (the backend's own options group), ...
        placement: this machine's slots; empty for a backend that places trials itself.
        admission: the placement policy the engine asks before it starts a trial (this machine's
            slots, which the local backend asks too; any place for one that places its own).
        tag: the mark every process of this sweep carries (:mod:`sweeper.system.procs`).
        early: the local backend's: a fork server the command line started early.

    Example:
        >>> from sweeper import Options
        >>> from sweeper.backends import Launch
        >>> from sweeper.model.settings import parse
        >>> options = Options.build({"workers": 3, "timeout": "10m"})
        >>> launch = Launch(None, options, parse(options), placement=None, admission=None)
        >>> launch.settings.resources.workers, launch.settings.limits.timeout
        (3, 600.0)
    """

    target: Target
    options: Options
    settings: Settings
    placement: Placement
    admission: Admission
    tag: str | None = None
    early: ForkServer | None = None


Factory = Callable[[Launch], "Backend"]


@dataclass(frozen=True)
class Registered:
    """A backend as registered: its factory and how the sweep treats it.

    An installed package's entry point may name one of these instead of a bare factory, to
    say more than the factory (``mine = my_package.backend:registered``).

    Attributes:
        factory: ``factory(launch) -> Backend``, called once per sweep.
        places_trials: its own scheduler places trials (a cluster's): this machine's GPUs are
            then not read, and ``Launch.placement`` is empty.
        options: its options group (a frozen dataclass), if it has settings of its own.
        pauses: its trials hear the answer to each of their reports (its ``Traits.answers``): a
            pause, a stop at the epoch judged; population-based training runs on it.
        imports_main, abandon, planned: sweeper's own backends' (whether trials import the
            calling script again; what a Ctrl-C ends of an earlier run's jobs; a dry run's lines).

    Example:
        >>> from sweeper.backends import Registered
        >>> def factory(launch):
        ...     raise NotImplementedError
        >>> registered = Registered(factory, places_trials=True)
        >>> registered.places_trials, registered.options, registered.imports_main
        (True, None, False)
    """

    factory: Factory
    places_trials: bool = False
    options: type | None = None  #: its options group (a frozen dataclass), if it has settings of its own
    #: its trials hear the answer to each of their reports (a pause): population-based training runs on it
    pauses: bool = False
    #: whether each trial process imports the calling script again, as spawn does (then a script's
    #: sweep() outside ``if __name__ == "__main__":`` is refused before anything runs)
    imports_main: bool = False
    #: a run of the sweep in this folder stopped (Ctrl-C) before its backend took over what an
    #: earlier run left in a cluster's queue: that cancelled; what was done, in one line ("": nothing)
    abandon: Callable[[str], str] | None = None
    #: what a dry run says of where the trials would run (the settings, the sweep's folder, how
    #: many to run), for a backend that places them itself; None: this machine's slots are said
    planned: Callable[[Settings, str, int], list[str]] | None = None


def _local(launch: Launch) -> Backend:
    from sweeper.backends.local import LocalBackend
    from sweeper.placement.policy import SlotPlacement

    settings = launch.settings
    how, limits = settings.launching, settings.limits
    placement = launch.admission if isinstance(launch.admission, SlotPlacement) else None
    return LocalBackend(launch.target, launch.placement.slots, workers=settings.resources.workers,
                        prefetch=how.prefetch, start_method=how.start_method, tag=launch.tag,
                        early=launch.early, placement=placement,
                        timeout=min((t for t in (limits.timeout, limits.stall) if t), default=None))


def _ray(launch: Launch) -> Backend:
    from sweeper.backends.ray import RayBackend

    settings = launch.settings
    resources = settings.resources
    own = settings.backend if isinstance(settings.backend, RayOptions) else RayOptions()
    return RayBackend(launch.target, resources.memory, address=own.address, gpus=not resources.gpus.none,
                      cpus_per_trial=own.cpus_per_trial, workers=resources.workers)


def _slurm(launch: Launch) -> Backend:
    from sweeper.backends.slurm.backend import SlurmBackend

    return SlurmBackend(launch.target, launch.settings)


def _slurm_abandon(folder: str) -> str:
    from sweeper.backends.slurm.outside import abandon

    return abandon(folder)


def _slurm_planned(settings: Settings, folder: str, trials: int) -> list[str]:
    from sweeper.backends.slurm.outside import planned

    return planned(settings, folder, trials)


@contextlib.contextmanager
def abandoning(folder: str) -> Iterator[None]:
    """While the block runs, a Ctrl-C (KeyboardInterrupt: before the engine takes the signals,
    or after) also ends what an earlier run of the sweep in ``folder`` left in a cluster's
    queue (:func:`abandon`)."""
    try:
        yield
    except KeyboardInterrupt:
        abandon(folder)
        raise


def abandon(folder: str) -> None:
    """A run of the sweep in ``folder`` stopped (Ctrl-C) before its backend took over what an
    earlier run left in a cluster's queue: those jobs cancelled, by each backend that keeps
    jobs there (each finds its own in the folder), said in one line each. Nothing outlives
    a Ctrl-C, whenever it comes."""
    import logging

    for known in list(_BACKENDS.values()):
        with contextlib.suppress(Exception):  # (it must not stand in for the Ctrl-C it follows)
            said = known.abandon(folder) if known.abandon is not None else ""
            if said:
                logging.getLogger("sweeper").warning("%s", said)


_BACKENDS: dict[str, Registered] = {
    "local": Registered(_local, pauses=True, imports_main=True),
    "ray": Registered(_ray, places_trials=True, options=RayOptions),  # sends a script's train by value
    "slurm": Registered(_slurm, places_trials=True, options=SlurmOptions, pauses=True, imports_main=True,
                        abandon=_slurm_abandon, planned=_slurm_planned),
}


def register(name: str, factory: Factory, *, places_trials: bool = False, options: type | None = None,
             pauses: bool = False) -> None:
    """Make ``backend=name`` run a sweep's trials on what ``factory(launch)`` returns.

    An installed package declares its backends in the ``sweeper.backends`` entry-point group
    instead, so that the command line finds them too (docs/backends.md).

    Args:
        name: the backend's name, a plain identifier: ``sweep(fn, grid, backend=name)``.
        factory: called once per sweep with a :class:`Launch`; returns the backend, an object
            keeping the protocol :class:`sweeper.model.protocol.Backend`.
        places_trials: the backend's own scheduler places trials (a cluster's): this machine's
            GPUs are then not read.
        options: its options group, a frozen dataclass (see the module's docstring): its fields
            become keywords of ``sweep()`` and flags; the factory finds them checked as
            ``launch.options.backend_options``.
        pauses: its trials hear each answer to their reports (its ``Traits.answers`` is True,
            its ``tell`` delivers them): ``search="pbt"`` may run on it.

    Raises:
        SweepError: a name that is not a plain identifier, or one taken by another factory
            (the same factory again changes nothing).

    Example:
        >>> from sweeper.backends import register
        >>> def factory(launch):  # a whole one: tests/toy_backend.py
        ...     raise NotImplementedError
        >>> register("mine", factory)  # sweep(fn, grid, backend="mine") now runs on it
        >>> register("two words", factory)
        Traceback (most recent call last):
        ...
        sweeper.errors.SweepError: backend name 'two words' is not a plain name; use letters, digits and _
    """
    entrypoints.add(_BACKENDS, name, Registered(factory, places_trials, options, pauses), "backend",
                    lambda known, new: known.factory is new.factory)


def options(values: Mapping[str, Any], where: str = "sweep()", partial: bool = False) -> Options:
    """A sweep's options from keywords: those of :class:`~sweeper.model.options.Options`, and
    the fields of the chosen backend's options group (its ``backend_options``, checked). An
    unknown name is refused with the nearest known one; a field of another backend's group
    (given, not None), naming that backend. ``partial``: the command line's flags alone, before
    the grid file's options, which may name the backend: other backends' fields pass."""
    import difflib

    from sweeper.model.options import Options

    backend = values.get("backend", "local")
    group: type | None = lookup(backend).options if isinstance(backend, str) and backend else None
    mine = {f.name for f in fields(group)} if group is not None else set()
    owners = {f.name: name for name, known in _BACKENDS.items() if known.options is not None
              for f in fields(known.options)}
    core = {k: v for k, v in values.items() if k not in mine and k not in owners}
    for key, value in values.items():
        if key in owners and key not in mine and value is not None and not partial:
            said = flag_of(owners[key], key)
            raise SweepError(f"{key} goes with backend={owners[key]!r} (--backend {owners[key]} {said} ...)")
        if key not in owners and key not in Options.names():
            known = [*Options.names(), *owners]
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; valid: {', '.join(known)}"
            raise SweepError(f"unknown option {key!r} in {where}{hint}")
    given = core.get("backend_options")  # a replay's: the group it ran with
    if given is not None and (group is None or not isinstance(given, group)):
        raise SweepError(f"backend_options is sweeper's own; give the backend's settings as keywords of their own "
                         f"(address='auto'), got {given!r}")
    if group is not None:
        made = group(**{**(vars(given) if given is not None else {}), **{k: values[k] for k in mine if k in values}})
        core["backend_options"] = made.checked() if hasattr(made, "checked") else made
    return Options.build(core, where)


def flags() -> list[tuple[Field[Any], Flag]]:
    """Every command-line flag of a sweep: :class:`~sweeper.model.options.Options`' own, then
    each registered backend's group's, in order."""
    from sweeper.model.options import Options

    out = Options.flags()
    for known in _BACKENDS.values():
        if known.options is not None:
            out += [(f, f.metadata["flag"]) for f in fields(known.options) if "flag" in f.metadata]
    return out


def flag_of(backend: str, name: str) -> str:
    """The command-line flag of a field of a backend's group."""
    group = _BACKENDS[backend].options
    assert group is not None
    found = [f.metadata["flag"].flag(f.name) for f in fields(group) if f.name == name and "flag" in f.metadata]
    return found[0] if found else "--" + name.replace("_", "-")


def lookup(name: str) -> Registered:
    """The backend registered as ``name``; else the installed entry point of that name."""
    if name not in _BACKENDS:
        found = _entry_point(name)
        if found is None:
            raise SweepError(f"backend={name!r} is unknown; use one of {', '.join(names())}, register yours "
                             f"(sweeper.backends.register) or install a package that declares it in the "
                             f"{GROUP!r} entry-point group")
        _BACKENDS[name] = found
    return _BACKENDS[name]


def names() -> list[str]:
    """Every backend name a sweep may use now: registered ones, then installed entry points."""
    return list(dict.fromkeys([*_BACKENDS, *entrypoints.names(GROUP)]))


def _entry_point(name: str) -> Registered | None:
    loaded = entrypoints.load(GROUP, name, "backend")
    if loaded is None:
        return None
    return loaded if isinstance(loaded, Registered) else Registered(loaded)  # type: ignore[arg-type]
