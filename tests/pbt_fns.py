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


def noisy(params):
    """:func:`climb` with seeded noise: each epoch's step drawn from NumPy's global generator,
    which sweeper seeds for each segment (the trial's seed and the epoch it resumes after),
    so a replay gives the same numbers only where each segment draws what it drew in the sweep.
    Each segment writes its first draw to ``draws.txt`` in its trial's folder."""
    import numpy as np

    trial = sweeper.current_trial()
    path = os.path.join(trial.checkpoint, "state.json")
    state = {"epoch": 0, "acc": 0.0}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    first = True
    while state["epoch"] < params.get("epochs", 8):
        state["epoch"] += 1
        step = float(np.random.uniform(0.5, 1.5))
        if first:
            with open(os.path.join(trial.dir, "draws.txt"), "a") as f:
                f.write(f"{trial.resumed_epoch} {trial.seed} {step!r}\n")
            first = False
        state["acc"] += params["lr"] * step * (1 - state["acc"])
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        sweeper.report(acc=state["acc"])
    return {"acc": state["acc"]}


def stops_early(params):
    """:func:`climb` for ``epochs`` epochs, but member_0 returns after epoch 3, as a model
    that EarlyStopping ends would."""
    if sweeper.current_trial().name == "member_0":
        params = {**params, "epochs": 3}
    return climb(params)


def linked(params):
    """:func:`climb`'s curve, its state read and written through an absolute link in its
    checkpoint (``state.json`` -> ``<checkpoint>/real/state.json``), made by the member that
    started the model; a copy must read its own state through it, never the other member's."""
    trial = sweeper.current_trial()
    link = os.path.join(trial.checkpoint, "state.json")
    if not os.path.lexists(link):
        os.makedirs(os.path.join(trial.checkpoint, "real"), exist_ok=True)
        os.symlink(os.path.join(trial.checkpoint, "real", "state.json"), link)
    state = {"epoch": 0, "acc": 0.0}
    if os.path.exists(link):
        with open(link) as f:
            state = json.load(f)
    if state["epoch"] != trial.resumed_epoch:
        raise RuntimeError(f"checkpoint at epoch {state['epoch']}, resumed after {trial.resumed_epoch}")
    while state["epoch"] < params.get("epochs", 8):
        state["epoch"] += 1
        state["acc"] += params["lr"] * (1 - state["acc"])
        with open(link, "w") as f:  # through the link
            json.dump(state, f)
        sweeper.report(acc=state["acc"])
    return {"acc": state["acc"]}


def linked_outside(params):
    """Keeps its weights beside its checkpoint folder (in its trial's folder), linked from it."""
    trial = sweeper.current_trial()
    weights = os.path.join(trial.dir, "weights.bin")
    open(weights, "wb").close()
    link = os.path.join(trial.checkpoint, "weights.bin")
    if not os.path.lexists(link):
        os.symlink(weights, link)
    return climb(params)


def fills(params):
    """:func:`climb` whose checkpoint, at epoch 2, grows to six tenths of what its disk has free."""
    trial = sweeper.current_trial()
    if trial.resumed_epoch == 0:
        free = os.statvfs(trial.checkpoint)
        with open(os.path.join(trial.checkpoint, "pad"), "wb") as f:
            f.write(bytes(int(free.f_bavail * free.f_frsize * 0.6)))
    return climb(params)


def paced(params):
    """:func:`climb` for ``epochs`` epochs, member_1 taking 0.2 s an epoch (member_0 none); each
    segment writes the epoch it resumed after to ``segments.txt`` in its trial's folder."""
    trial = sweeper.current_trial()
    with open(os.path.join(trial.dir, "segments.txt"), "a") as f:
        f.write(f"{trial.resumed_epoch}\n")
    path = os.path.join(trial.checkpoint, "state.json")
    state = {"epoch": 0, "acc": 0.0}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    while state["epoch"] < params["epochs"]:
        state["epoch"] += 1
        state["acc"] += params["lr"] * (1 - state["acc"])
        if trial.name == "member_1":
            time.sleep(0.2)  # (a slower model)
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        sweeper.report(acc=state["acc"])
    return {"acc": state["acc"]}


#: Each member's ``rank`` (higher is better) in :func:`ranked`: member_1 top, member_2 bottom.
RANKS = {"member_0": 2.0, "member_1": 3.0, "member_2": 1.0}


def ranked(params):
    """:func:`climb` for 8 epochs, reporting ``rank`` too (:data:`RANKS`, 0 for a replacement);
    member_1 dies as its second segment starts; member_0 holds at epoch 3, before its report,
    where ``hold`` says (once, as :func:`climb`)."""
    trial = sweeper.current_trial()
    if trial.name == "member_1" and trial.resumed_epoch > 0:
        os._exit(3)
    path = os.path.join(trial.checkpoint, "state.json")
    state = {"epoch": 0, "acc": 0.0}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    if state["epoch"] != trial.resumed_epoch:
        raise RuntimeError(f"checkpoint at epoch {state['epoch']}, resumed after {trial.resumed_epoch}")
    hold = params["hold"]
    while state["epoch"] < 8:
        state["epoch"] += 1
        state["acc"] += params["lr"] * (1 - state["acc"])
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        if state["epoch"] == 3 and trial.name == "member_0" and not os.path.exists(hold + ".seen"):
            open(hold + ".seen", "w").close()  # once: the test's Ctrl-C comes now
            open(hold, "w").close()
            time.sleep(60)
        sweeper.report(acc=state["acc"], rank=RANKS.get(trial.name, 0.0))
    return {"acc": state["acc"], "rank": RANKS.get(trial.name, 0.0)}
