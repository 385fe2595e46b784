"""Example: a Hydra app whose multirun sweeper launches (a Keras MLP on scikit-learn's digits).

Its config (conf/config.yaml) chooses the launcher, the sweep and the folder, so that::

    python experiments/hydra_digits/train.py -m

trains 4 models, two at a time, each in a fresh process (one GPU each where there are GPUs),
into results/hydra_digits/: Hydra's job folders 0..3 and sweeper's results.csv. Override
anything as in any Hydra app::

    python experiments/hydra_digits/train.py -m lr=0.01,0.003,0.001 units=16,64 hydra.launcher.workers=4

The same command again runs only the jobs that are not yet ok.
"""

import logging

import hydra
import keras
import numpy as np
from omegaconf import DictConfig
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import sweeper.keras

log = logging.getLogger(__name__)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def train(cfg: DictConfig) -> dict:
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    model = keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(cfg.units, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=cfg.lr), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=cfg.epochs,
                        batch_size=cfg.batch_size, verbose=0,
                        callbacks=[sweeper.keras.Report()])  # each epoch: the live view, history.csv
    val_accuracy = float(history.history["val_accuracy"][-1])
    log.info("lr=%s units=%s: val_accuracy %.4f", cfg.lr, cfg.units, val_accuracy)
    return {"val_accuracy": val_accuracy, "val_loss": float(history.history["val_loss"][-1])}


if __name__ == "__main__":
    train()
