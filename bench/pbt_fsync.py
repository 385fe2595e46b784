"""What population-based training's durable copies and rows cost: publishing a checkpoint with
every file and folder fsynced (``pbt_checkpoints.copy(durable=True)``) against the same copy
without, and a schedule row through the ledger's durable connection (``synchronous=FULL``)
against its fast one (``NORMAL``). Checkpoints: the digits MLP's ``BackupAndRestore`` folder
(docs/pbt.md's snippet, 2 files), 100 MB in 4 files, 1,000 files of 1 KB.

    python bench/pbt_fsync.py [--folder DIR] [--repeats 10]

``--folder``: where to copy (the disk a sweep folder would be on; default: a temporary folder
in the current one). Prints the median time of each, plain and durable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sweeper.search import pbt_checkpoints  # noqa: E402
from sweeper.store.ledger import Ledger  # noqa: E402


def digits_checkpoint(folder: str) -> None:
    """The snippet's model after one epoch, as BackupAndRestore leaves it."""
    import keras
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dropout(0.1), keras.layers.Dense(10, activation="softmax")])
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x / 16, y, epochs=1, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(folder, delete_checkpoint=False)])


def files(count: int, size: int) -> Callable[[str], None]:
    def make(folder: str) -> None:
        os.makedirs(folder)
        for i in range(count):
            with open(os.path.join(folder, f"f{i}"), "wb") as f:
                f.write(os.urandom(size))
    return make


def median_ms(run: Callable[[int], None], repeats: int) -> float:
    times = []
    for k in range(repeats):
        began = time.perf_counter()
        run(k)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def copies(root: str, repeats: int) -> None:
    cases = {"digits checkpoint (BackupAndRestore, 2 files)": digits_checkpoint,
             "100 MB in 4 files": files(4, 25_000_000), "1,000 files of 1 KB": files(1000, 1000)}
    for what, make in cases.items():
        source = os.path.join(root, "source")
        shutil.rmtree(source, ignore_errors=True)
        make(source)
        said = []
        for durable in (False, True):
            def run(k: int, durable: bool = durable) -> None:
                target = os.path.join(root, ".pbt", "t1", str(k))
                pbt_checkpoints.copy(source, target, what, root, durable=durable)
            said.append(median_ms(run, repeats))
            shutil.rmtree(os.path.join(root, ".pbt"))
        print(f"publish {what}: plain {said[0]:.1f} ms, durable {said[1]:.1f} ms")


def rows(root: str, repeats: int) -> None:
    os.makedirs(os.path.join(root, "sweep"))
    ledger = Ledger(os.path.join(root, "sweep"))
    said = []
    for db in (ledger._fast, ledger._db):  # (the two connections set_schedule could write through)
        def run(k: int, db=db) -> None:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT OR REPLACE INTO schedule VALUES (?,?,?,?)", (f"t{k}", k, json.dumps({"lr": 0.1}), ""))
        said.append(median_ms(run, repeats * 10))
    ledger.close()
    print(f"a schedule row: fast {said[0]:.2f} ms, durable {said[1]:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=".")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="pbt-fsync-", dir=args.folder)
    try:
        copies(root, args.repeats)
        rows(root, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
