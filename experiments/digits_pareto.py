"""Example of several objectives: accuracy against size on the digits MLP of digits_mlp.py (~2 min on 2 cores).

Run it with::

    python -m sweeper experiments/digits_pareto.py

No single best model here: a wider network is more accurate and larger. NSGA-II
(``search = "auto"`` with two metrics) looks for the trials no other beats on both
val_accuracy (higher) and params (fewer): the Pareto front. The summary, ``python -m
sweeper status`` and the report list it (the report plots it), and results.csv marks its
rows ``pareto=True``. Needs Optuna (``pip install "sweeper[search]"``).
"""

import sweeper
from digits_mlp import fit  # this file's folder is on sys.path

space = {
    "lr": sweeper.loguniform(1e-3, 1e-1),
    "units": sweeper.randint(2, 257),  # 2 to 256 hidden units
    "batch_size": 64,
    "epochs": 8,
}
search = "auto"  # NSGA-II for several objectives
trials = 16

options = {"metric": ["val_accuracy", "params"], "mode": ["max", "min"]}


def train(params):
    """One trial: fit, then the two objectives (and the rest of the last epoch's metrics)."""
    history = fit(params)
    metrics = {name: float(values[-1]) for name, values in history.history.items()}
    metrics["params"] = history.model.count_params()
    return metrics
