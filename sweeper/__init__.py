"""sweeper: hyperparameter sweeps of Keras/TensorFlow training, one fresh process per trial.

Public API::

    sweep(fn, grid, **options) -> pandas.DataFrame   # run a sweep
    sample(space, n, seed=0)                          # random search points
    uniform, loguniform, randint                      # distributions for sample()
    current_trial()                                   # the running trial, from inside fn
    report(epoch=..., **metrics)                      # per-epoch metrics, from inside fn
    sweeper.keras.Report()                            # a Keras callback that calls report()
    load(folder)                                      # a sweep's table, from its ledger
    Options, Status, TrialSpec, TrialResult           # records
    SweepError, SweepInterrupted                      # what sweep() raises

Importing sweeper imports no framework and no pandas.
"""

from .api import SweepInterrupted, load, sweep
from .context import current_trial, report
from .errors import SweepError
from .grid import Points, expand, loguniform, randint, sample, uniform
from .options import Options
from .trial import Status, TrialResult, TrialSpec

__version__ = "0.1.0"

__all__ = [
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


def __getattr__(name: str):  # ``sweeper.keras`` without importing Keras with ``import sweeper``
    if name == "keras":
        import importlib

        return importlib.import_module(".keras", __name__)
    raise AttributeError(f"module 'sweeper' has no attribute {name!r}")
