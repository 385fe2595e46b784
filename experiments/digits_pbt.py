"""Example: population-based training of experiments/digits_mlp.py's MLP over its learning rate.

Run it with::

    python -m sweeper experiments/digits_pbt.py

Eight members train side by side, 24 epochs each. Every 4 epochs each member's process leaves
(its GPU memory freed), and a member in the bottom quarter takes a copy of a top member's
checkpoint and its learning rate, multiplied by 1.2 or 0.8. history.csv shows each member's
learning rate epoch by epoch; ``python -m sweeper status results/digits_pbt`` shows who copied
whom.
"""

import keras

import sweeper
import sweeper.keras
from digits_mlp import build_model, load_data

space = {"lr": sweeper.loguniform(1e-4, 0.3), "units": 64, "batch_size": 64, "epochs": 24}

options = {"search": "pbt", "metric": "val_accuracy", "pbt": {"population": 8, "interval": 4}}


def train(params):
    x_train, x_val, y_train, y_val = load_data()
    model = build_model(params["units"], params["lr"])
    model.build((None, 64))
    history = model.fit(
        x_train, y_train, validation_data=(x_val, y_val), epochs=params["epochs"],
        batch_size=params["batch_size"], verbose=2,
        # BackupAndRestore puts back the optimizer's state, rate included; Report puts back
        # the rate build_model compiled before the first batch, and checks it at each epoch's end
        callbacks=[keras.callbacks.BackupAndRestore(sweeper.current_trial().checkpoint),  # saved, then reported
                   sweeper.keras.Report()],
    )
    return {"val_accuracy": float(history.history["val_accuracy"][-1]),
            "val_loss": float(history.history["val_loss"][-1])}
