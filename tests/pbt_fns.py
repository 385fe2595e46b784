"""Trials for population-based training's tests (test_pbt.py): a plain loop that saves its
state in ``current_trial().checkpoint`` before each report and starts from what is there."""

from __future__ import annotations

import json
import os
import time

import sweeper


def climb(params):
    """Accuracy that grows at the rate ``lr`` for ``epochs`` epochs (8 unless given); each
    segment must start from the epoch its checkpoint holds, which must be the one the sweep
    resumes it after (else it raises: a member silently restarted is a wrong curve)."""
    trial = sweeper.current_trial()
    path = os.path.join(trial.checkpoint, "state.json")
    state = {"epoch": 0, "acc": 0.0}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    if state["epoch"] != trial.resumed_epoch:
        raise RuntimeError(f"checkpoint at epoch {state['epoch']}, resumed after {trial.resumed_epoch}")
    hold = params.get("hold")
    while state["epoch"] < params.get("epochs", 8):
        state["epoch"] += 1
        state["acc"] += params["lr"] * (1 - state["acc"])
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        if hold and state["epoch"] == 3 and trial.name == "member_0" and not os.path.exists(hold + ".seen"):
            open(hold + ".seen", "w").close()  # once: the test's Ctrl-C comes now
            open(hold, "w").close()
            time.sleep(60)
        sweeper.report(acc=state["acc"])
    return {"acc": state["acc"]}


def forgetful(params):
    """Reports without saving anything: population-based training cannot resume it."""
    for epoch in range(1, 5):
        sweeper.report(acc=params["lr"] * epoch)
    return {"acc": params["lr"] * 4}


def crashes_once(params):
    """member_1 dies as its second segment starts; the rest climb."""
    trial = sweeper.current_trial()
    if trial.name == "member_1" and trial.resumed_epoch > 0:
        os._exit(3)
    return climb(params)
