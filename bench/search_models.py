"""Part c's trials (bench/search.py --only c): the digits MLP and a regression on diabetes.

Apart from bench/search.py, which imports only the standard library at its top, because
this module imports Keras at its top: a sweep's fork server imports what ``train``'s
module holds (sweeper.system.modules.needed_by) before it forks the trials, so each trial starts
without importing TensorFlow again (seconds each, and part c runs hundreds of trials;
the measure is epochs, so this saves the benchmark's time, not its figures).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import sweeper.keras
from digits_mlp import build_model, load_data  # experiments/ is on sys.path (bench/search.py)
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split


def train_digits(params: dict[str, Any]) -> dict[str, float]:
    """The digits MLP of experiments/digits_mlp.py, as part a trains it (search.train_digits)."""
    x_train, x_val, y_train, y_val = load_data()
    model = build_model(params["units"], params["lr"])
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=params["epochs"],
                        batch_size=params["batch_size"], verbose=0, callbacks=[sweeper.keras.Report()])
    return {"val_accuracy": float(history.history["val_accuracy"][-1]),
            "val_loss": float(history.history["val_loss"][-1])}


def diabetes_data() -> tuple[Any, Any, Any, Any]:
    """scikit-learn's bundled diabetes data (442 rows, 10 features, offline), split 75/25 with a
    fixed split; inputs and target standardised by the training part's mean and deviation."""
    x, y = load_diabetes(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.25, random_state=0)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    y_mean, y_std = y_train.mean(), y_train.std()
    return (((x_train - mean) / std).astype(np.float32), ((x_val - mean) / std).astype(np.float32),
            ((y_train - y_mean) / y_std).astype(np.float32), ((y_val - y_mean) / y_std).astype(np.float32))


def train_diabetes(params: dict[str, Any]) -> dict[str, float]:
    """A Dense MLP (``layers`` hidden layers of ``units``, ReLU) regressing the standardised
    diabetes target, mean squared error; per-epoch reports for the pruner."""
    x_train, x_val, y_train, y_val = diabetes_data()
    model = keras.Sequential([keras.Input(shape=(x_train.shape[1],)),
                              *[keras.layers.Dense(params["units"], activation="relu")
                                for _ in range(params["layers"])],
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=params["lr"]), loss="mse")
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=params["epochs"],
                        batch_size=params["batch_size"], verbose=0, callbacks=[sweeper.keras.Report()])
    return {"val_loss": float(history.history["val_loss"][-1]), "loss": float(history.history["loss"][-1])}
