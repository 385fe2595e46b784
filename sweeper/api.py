"""``sweep(fn, grid)`` and ``load(folder)``: the library's front door."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from sweeper.backends import registry
from sweeper.child.command import Command
from sweeper.child.bootstrap import check_not_in_a_trial_bootstrap
from sweeper.front.messages import show_messages
from sweeper.model import mainguard
from sweeper.model.callables import source_of
from sweeper.model.definition import Definition, shape
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.options import Options
from sweeper.child.loading import describe
from sweeper.model.target import FunctionTarget, check_signature
from sweeper.results import reading
from sweeper.front.shown import run_shown
from sweeper.store import table

if TYPE_CHECKING:
    import pandas

    from sweeper.run.runner import Outcome


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was stopped by Ctrl-C, SIGTERM or SIGHUP; what finished is saved.

    A ``KeyboardInterrupt``, so a script that does not catch it stops as on any Ctrl-C.
    Running the same sweep again resumes it: trials already ``ok`` are kept.

    Attributes:
        signum: the signal that stopped it (``signal.SIGINT`` for Ctrl-C).
        results: the results table as it stood, as :func:`sweep` would have returned it.
        csv_path: where the same table is, ``<out>/<name>/results.csv``.

    Example:
        A file ``stopped.py`` (its second trial presses Ctrl-C for you)::

            import os
            import signal
            import time

            import sweeper

            def train(params):
                if params["lr"] == 0.01:
                    os.kill(int(os.environ["SWEEP_PID"]), signal.SIGINT)
                    time.sleep(60)
                return {"loss": params["lr"]}

            if __name__ == "__main__":
                os.environ["SWEEP_PID"] = str(os.getpid())
                try:
                    sweeper.sweep(train, {"lr": [0.1, 0.01]}, workers=1, progress=False)
                except sweeper.SweepInterrupted as stopped:
                    print(stopped.results[["trial", "status"]].to_string(index=False))
                    print(os.path.relpath(stopped.csv_path))

        ``python stopped.py`` prints::

              trial      status
             lr=0_1          ok
            lr=0_01 interrupted
            results/stopped/results.csv
    """

    def __init__(self, signum: int, results: "pandas.DataFrame", csv_path: str) -> None:
        super().__init__(f"sweep interrupted; results so far in {csv_path}; run it again to resume")
        self.signum = signum
        self.results = results
        self.csv_path = csv_path


def sweep(fn: Callable[[dict[str, Any]], Any], grid: Any, **options: Any) -> "pandas.DataFrame":
    """Run ``fn(params)`` once per point of ``grid``, each in a fresh process: a fork of the sweep's
    fork server, which imported only installed libraries (``start_method="spawn"``: a spawned one).

    Args:
        fn: a function at the top level of a ``.py`` module, taking the parameter dict and
            returning a dict of metric names to numbers (or a Keras ``History``); or a command
            per trial: a template (``"python train.py --lr={lr}"``) or a :class:`sweeper.Command`.
        grid: a dict of lists (their cartesian product), a list of such dicts (their union),
            or the points of :func:`sweeper.sample`; with ``search``, the space searched
            (values: lists, :class:`sweeper.uniform` and the other distributions, fixed values).
        **options: any option of docs/options.md by its keyword: ``workers=2``, ``timeout="1h"``,
            ``gpus=[0, 1]``, ``per_gpu="auto"``, ``search="tpe"``, ``metric``, ``progress=False``...

    Returns:
        The results table (a pandas DataFrame): one row per trial in grid order, the same as
        ``<out>/<name>/results.csv``. Run again, it runs only what is not ``ok`` yet. With
        ``dry_run=True``, the trials it would run and the slot each would start on; nothing runs.

    Raises:
        SweepError: bad input, before any trial runs; or a named metric the first ok trial
            did not return (the sweep stops there; its rows are kept, :func:`load` reads them).
        SweepInterrupted: Ctrl-C, SIGTERM or SIGHUP; what finished is saved.

    Example:
        A file ``quadratic.py``::

            import sweeper

            def train(params):
                return {"loss": (params["lr"] - 0.01) ** 2}

            if __name__ == "__main__":
                df = sweeper.sweep(train, {"lr": [0.1, 0.01]}, progress=False)
                print(df[["trial", "status", "loss"]].to_string(index=False))

        ``python quadratic.py`` prints::

              trial status    loss
             lr=0_1     ok  0.0081
            lr=0_01     ok     0.0
    """
    check_not_in_a_trial_bootstrap()
    opts = registry.options(options)
    if not opts.dry_run and registry.lookup(opts.backend).imports_main:  # a dry run starts no trial
        mainguard.check(sys._getframe(1))  # called at the script's top level: refused before anything runs
    show_messages(opts.progress)  # sweeper's lines (no GPU found, ...), quiet with progress=False
    fn, source, default_name = _what_runs(fn, opts)
    points, space = shape(grid=grid, search=opts.search, seed=opts.seed)  # the grid's points, or the space
    if isinstance(fn, Command):  # the names its template uses must be parameters
        fn.check([dict.fromkeys(space, 0)] if isinstance(space, dict) else points or [])
    definition = Definition(FunctionTarget.of(fn), opts, points, space, source, describe(fn), default_name)
    outcome = run_shown(definition)
    if opts.dry_run:
        return plan_frame(outcome)
    frame = table.dataframe(outcome.results, outcome.objectives)
    frame.attrs.update(metric=outcome.ranking[0], mode=outcome.ranking[1])  # as load() of the folder says
    if outcome.end is SweepEnd.INTERRUPTED and outcome.interrupted is not None:  # (the signal that did)
        raise SweepInterrupted(outcome.interrupted, frame, outcome.csv_path)
    return frame


def _what_runs(fn: Any, opts: Options) -> tuple[Any, str | None, str]:
    """The function (or command) a sweep runs, checked; the file it comes from; the sweep's
    name where none is given (the file's stem; ``command`` for a command)."""
    if isinstance(fn, (str, Command)):  # a command per trial, e.g. "python train.py --lr={lr}"
        return Command.of(fn), None, "command"
    label = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
    check_signature(fn, label)
    source = source_of(fn)
    return fn, source, os.path.splitext(os.path.basename(source))[0] if source else getattr(fn, "__name__", "sweep")


def plan_frame(outcome: Outcome) -> "pandas.DataFrame":
    """The trials a sweep would run, with the slot each would start on first."""
    import pandas

    rows = []
    for spec, first in zip(outcome.specs, outcome.first_slots()):
        rows.append({"trial_id": spec.trial_id, "trial": spec.name,
                     **{f"param_{k}": v for k, v in spec.params.items()},
                     "seed": spec.seed, "first_slot": first})
    return pandas.DataFrame(rows)


def load(path: "str | os.PathLike[str]", every: bool = False) -> "pandas.DataFrame":
    """The results table of a sweep folder, read from its ledger (while it runs, too).

    Args:
        path: the sweep's folder, ``<out>/<name>``, or its ``results.csv``.
        every: also the trials of points since removed from the grid (by default, the
            trials of the grid last run there, the rows of ``results.csv``).

    Returns:
        The table as :func:`sweep` returns it. ``frame.attrs["metric"]`` and ``["mode"]`` say
        what the sweep ranked by (or None); a sweep of several objectives has
        ``frame.attrs["objectives"]`` and the ``pareto`` column.

    Raises:
        SweepError: ``path`` is no sweep folder, or its ledger cannot be read (saying why).

    Example:
        A file ``again.py``::

            import sweeper

            def train(params):
                return {"loss": params["lr"]}

            if __name__ == "__main__":
                sweeper.sweep(train, {"lr": [0.1, 0.01]}, metric="loss", progress=False)
                df = sweeper.load("results/again")
                print(df["status"].tolist(), df.attrs["metric"], df.attrs["mode"])

        ``python again.py`` prints::

            ['ok', 'ok'] loss min
    """
    return reading.load(path, every)
