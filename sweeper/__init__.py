"""sweeper: hyperparameter sweeps of Keras/TensorFlow training, one fresh process per trial.

The public API is this package's names (``__all__``), the modules ``sweeper.keras``,
``sweeper.worker``, ``sweeper.analysis``, ``sweeper.importance`` and ``sweeper.metrics``, and
the plugin seam ``sweeper.backends``; every other module (the packages ``sweeper.model``,
``sweeper.run``, ...) is internal and may change in any release (docs/api.md says the rule)::

    sweep(fn, grid, **options) -> pandas.DataFrame   # run a sweep
    load(folder)                                      # a sweep's table, from its ledger
    expand(grid), sample(space, n, seed=0), Points    # a grid's points; random search points
    uniform, loguniform, randint                      # distributions for sample() and searches
    current_trial()                                   # the running trial, from inside fn
    report(epoch=..., **metrics)                      # per-epoch metrics, from inside fn
    sweeper.keras.Report()                            # a Keras callback that calls report()
    Command(template or fn, shell=False), flags(params) # command trials (scripts with flags)
    sweeper.worker.setup()                            # caps and seeds, in a command trial's script
    Options, Status, TrialSpec, TrialResult           # records
    SweepError, SweepInterrupted                      # what sweep() raises

Importing sweeper imports no framework and no pandas.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweeper.api import SweepInterrupted, load, sweep
    from sweeper.child.context import current_trial, report
    from sweeper.errors import SweepError
    from sweeper.child.command import Command, flags
    from sweeper.model.distributions import loguniform, randint, uniform
    from sweeper.model.grid import Points, expand, sample
    from sweeper.model.options import Options
    from sweeper.model.trial import Status, TrialResult, TrialSpec

#: Where each public name lives. Imported on first use, so a trial process (which
#: imports ``sweeper.child``) does not pay for the engine, the CLI or the API.
_WHERE = {
    "SweepInterrupted": "api", "load": "api", "sweep": "api",
    "current_trial": "child.context", "report": "child.context",
    "SweepError": "errors",
    "Command": "child.command", "flags": "child.command",
    "Points": "model.grid", "expand": "model.grid", "sample": "model.grid",
    "loguniform": "model.distributions", "randint": "model.distributions", "uniform": "model.distributions",
    "Options": "model.options",
    "Status": "model.trial", "TrialResult": "model.trial", "TrialSpec": "model.trial",
}

__version__ = "0.2.0"

__all__ = [
    "Command",
    "flags",
    "Options",
    "Points",
    "Status",
    "SweepError",
    "SweepInterrupted",
    "TrialResult",
    "TrialSpec",
    "current_trial",
    "expand",
    "load",
    "loguniform",
    "randint",
    "report",
    "sample",
    "sweep",
    "uniform",
]


def __getattr__(name: str):  # PEP 562: public names (and ``sweeper.keras``) on first use
    import importlib

    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    if name == "keras":  # imports Keras: only for code that asks for it
        return importlib.import_module(".keras", __name__)
    raise AttributeError(f"module 'sweeper' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
