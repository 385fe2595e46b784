"""A standalone Keras training script that takes its hyperparameters as flags.

It knows nothing of sweeper; run by hand::

    python experiments/train_flags.py --lr 0.01 --units 64 --batch-size 32 --epochs 4

Under ``python -m sweeper experiments/flags_grid.py`` each trial runs it with its own flags.
It prints one JSON line per epoch (sweeper's live view and history.csv read them) and
its final metrics as the last JSON line (sweeper's results table reads that).
"""

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--units", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()

    if "SWEEPER_TRIAL_ID" in os.environ:  # under sweeper: its memory cap and seed
        import sweeper.worker

        sweeper.worker.setup()

    import keras
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    model = keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(args.units, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=args.lr),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    print_epoch = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: print(json.dumps({"epoch": epoch + 1, **{k: float(v) for k, v in logs.items()}}),
                                               flush=True))
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=args.epochs,
                        batch_size=args.batch_size, verbose=0, callbacks=[print_epoch])
    print(json.dumps({"val_accuracy": float(history.history["val_accuracy"][-1]),
                      "val_loss": float(history.history["val_loss"][-1])}))


if __name__ == "__main__":
    main()
