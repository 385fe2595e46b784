"""Example sweep: a small Keras MLP on scikit-learn's bundled digits (offline, ~1 minute).

Run it with::

    python -m sweeper experiments/digits_mlp.py

Each trial runs in its own fresh process; TensorFlow is imported there, not in the
sweep's parent. The results land in results/digits_mlp/results.csv.
"""

import keras
import numpy as np
import sweeper.keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

grid = {
    "lr": [0.01, 0.001],
    "units": [16, 64],
    "batch_size": [32, 128],
    "epochs": 8,  # a fixed setting: one value, no list
}

options = {"metric": "val_accuracy"}


def load_data(seed: int = 0):
    """Digits as float32 in [0, 1], split 75/25 with a fixed split for every trial."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def build_model(units: int, lr: float) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=(64,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=lr),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def fit(params) -> keras.callbacks.History:
    """Build and fit one model, reporting each epoch's metrics to sweeper."""
    x_train, x_val, y_train, y_val = load_data()
    model = build_model(params["units"], params["lr"])
    return model.fit(
        x_train,
        y_train,
        validation_data=(x_val, y_val),
        epochs=params["epochs"],
        batch_size=params["batch_size"],
        verbose=2,
        callbacks=[sweeper.keras.Report()],  # per-epoch metrics: live view and history.csv
    )


def train(params):
    """One trial: build, fit, evaluate; return the metrics for the results table."""
    history = fit(params)
    return {
        "val_accuracy": float(history.history["val_accuracy"][-1]),
        "val_loss": float(history.history["val_loss"][-1]),
        "train_accuracy": float(history.history["accuracy"][-1]),
        "epochs_run": len(history.history["loss"]),
    }
