"""One sweep's definition, whichever front end made it (``sweep()``, a grid file, a JSON or
YAML grid, the command line, a replay): what runs, over which points or which space, with
which options (:class:`Definition`); and the one place the rules about grid, space, samples
and search live (:func:`shape`)::

    sweep(fn, grid, **options) ─┐
    grid.py (read in a child) ──┼─ shape(grid, space, samples, search) ─▶ points, or a space
    --grid grid.json / .yaml ───┤                                              │
    replay's rows ──────────────┘                  Definition(target, options, points | space)
                                                                               ▼
                                                                       sweeper.run.runner.run
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeper.errors import SweepError
from sweeper.model.grid import Points, check_not_empty, expand, sample
from sweeper.model.options import Options

if TYPE_CHECKING:
    from sweeper.model.target import Target

#: Stands for a name the definition does not give (a grid file without ``grid``): not None,
#: which ``grid = None`` gives, and is refused as a grid.
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()


@dataclass(frozen=True)
class Definition:
    """A sweep as every front end gives it to the runner."""

    target: Target  #: what each trial runs (loads ``train`` in the trial's process)
    options: Options  #: checked; the backend's own among them
    points: Points | None = None  #: the trials' points, in order (a grid's, or a space's samples)
    space: Any = None  #: a search's space (then no points: a search asks for them as it runs)
    source_file: str | None = None  #: the file that defines ``train``, where there is one
    what: str = ""  #: how the sweep names ``train`` (the ledger's definition check)
    default_name: str = "sweep"  #: the sweep folder's name where the options give none
    #: each point's schedule, in the points' order (a population-based member replayed: the
    #: parameters from after each epoch, :func:`sweeper.results.schedules.effective`); None: none
    schedules: tuple[Any, ...] | None = None
    #: each point's trial name, in the points' order, where the front end names them (a Hydra
    #: launcher: its job numbers); None: named by what varies (:func:`sweeper.model.trial.trial_names`)
    names: tuple[str, ...] | None = None
    #: the keys of points whose rows on record stand as they are, whatever their status (a Hydra
    #: sweeper's earlier batches of this multirun: finished once, never run again in it)
    settled: frozenset[str] = frozenset()

    @classmethod
    def of(cls, target: Target, grid: Any, options: Options, **more: Any) -> Definition:
        """A definition from ``sweep()``'s grid (a search's space, with ``search``)."""
        points, space = shape(grid=grid, search=options.search, seed=options.seed)
        return cls(target, options, points, space, **more)


def shape(*, grid: Any = ABSENT, space: Any = ABSENT, samples: Any = None, search: Any = None, seed: int = 0,
          where: str = "", later: bool = False) -> tuple[Points | None, Any]:
    """The points of a sweep, or (None, the space) a search asks them from; ``where``: the
    file that gave them ("": ``sweep()``). The rules, in one place:

    * a grid and a space both: refused;
    * a search: the space searched (``sweep()``'s grid is its space; a file's grid, already
      points, is refused by the search's check, :func:`sweeper.search.sampling.check`);
    * a space with ``samples = N``: N points drawn from it (:func:`sweeper.model.grid.sample`);
    * a space alone: refused, samples or a search missing, unless ``later`` (the grid file's
      reader, before the command line's ``--search`` is known): then the space as it is;
    * a grid: its points, every combination (:func:`sweeper.model.grid.expand`);
    * neither (a file): refused.
    """
    if grid is not ABSENT and space is not ABSENT:
        raise SweepError(f"{where} defines both grid and space; keep one (grid for every combination, "
                         "space with samples = N for random search)")
    if space is not ABSENT and (search is not None or (later and samples is None)):
        return None, dict(space) if isinstance(space, dict) else space
    if search is not None and not later and grid is not ABSENT:
        # sweep(fn, space, search=...); a file's points are no space, as the search's check says
        return None, dict(grid) if isinstance(grid, dict) and not isinstance(grid, Points) else grid
    if space is not ABSENT:
        if samples is None:
            raise SweepError(f"{where} defines space but neither samples = N nor a search; add samples = 20 for a "
                             "random sample, or search = 'tpe' with trials = 20 (--search tpe --trials 20)")
        if not isinstance(samples, int) or isinstance(samples, bool):
            raise SweepError(f"{where} defines space but no samples = N; add e.g. samples = 20")
        return sample(space, samples, seed=seed), None
    if grid is ABSENT:
        raise SweepError(f"{where} defines no grid; add e.g. grid = {{'lr': [0.01, 0.001]}} "
                         "(or space = {...} with samples = N)")
    check_not_empty(grid)
    return expand(grid), None
