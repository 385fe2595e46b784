"""Scenario C: a tiny Keras MLP (scikit-learn's digits if available, else random data)."""

import time

import numpy as np
import keras
import tensorflow  # noqa: F401

try:
    from sklearn.datasets import load_digits
except ImportError:  # pragma: no cover - depends on the machine
    load_digits = None

from trials import stamp


def _data(seed: int):
    if load_digits is not None:
        x, y = load_digits(return_X_y=True)
        return (x / 16.0).astype(np.float32), y.astype(np.int64)
    rng = np.random.default_rng(seed)
    return rng.random((1797, 64), dtype=np.float32), rng.integers(0, 10, 1797)


def train(p):
    t0 = time.time()
    x, y = _data(int(p.get("i", 0)))
    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    hist = model.fit(x, y, epochs=2, batch_size=64, verbose=0)
    return stamp(t0, accuracy=float(hist.history["accuracy"][-1]), sklearn=float(load_digits is not None))
