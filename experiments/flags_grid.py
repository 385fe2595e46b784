"""Command trials: sweep experiments/train_flags.py, a script that takes flags.

    python -m sweeper experiments/flags_grid.py --per-gpu 2

does what ``ts -S 2`` with one queue per GPU does, with GPU slots, memory caps,
statuses, resume and one results table. Each value becomes exactly one argument.
"""

import os
import shlex
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_flags.py")

command = (f"{shlex.quote(sys.executable)} {shlex.quote(SCRIPT)} "
           "--lr={lr} --units={units} --batch-size={batch_size} --epochs={epochs}")

grid = {"lr": [0.01, 0.001], "units": [16, 64], "batch_size": [64], "epochs": [4]}

options = {"metric": "val_accuracy"}
