"""Example search: the digits MLP of digits_mlp.py, searched by TPE with ASHA pruning (~3 min on 2 cores).

Run it with::

    python -m sweeper experiments/digits_search.py

Where digits_mlp.py trains every point of a fixed grid, here Optuna's TPE sampler picks
each next point from the results so far, and successive halving (ASHA) stops a trial
whose per-epoch val_accuracy (sent by ``sweeper.keras.Report``) falls behind its peers
at the same epoch: its process is ended, its row says ``pruned`` with its last reported
metrics and ``epoch_reached``. Needs Optuna (``pip install "sweeper[search]"``). The
results land in results/digits_search/results.csv, per-epoch ones in history.csv.
"""

import sweeper
from digits_mlp import fit  # this file's folder is on sys.path

space = {
    "lr": sweeper.loguniform(1e-4, 1e-1),
    "units": [16, 32, 64, 128],
    "batch_size": [32, 64, 128],
    "epochs": 20,  # fixed; the pruner decides how many a trial really gets
}
search = "tpe"
prune = "asha"
trials = 20

options = {"metric": "val_accuracy"}  # what the search maximises, and the pruner watches


def train(params):
    """One trial: fit with per-epoch reports (what the pruner sees); the last epoch's metrics."""
    history = fit(params)
    # under the names the epochs were reported with: a pruned trial's row (its last
    # report) then has the same columns as a finished one's
    return {name: float(values[-1]) for name, values in history.history.items()}
