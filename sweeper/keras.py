"""Keras helpers. ``import sweeper.keras`` imports Keras; ``import sweeper`` does not.

:class:`Report` sends each epoch to the sweep. In a trial whose parameters are recorded
epoch by epoch (population-based training, and its replay) it also holds the optimizer to
what ``train`` compiled from this segment's parameters: ``BackupAndRestore`` puts back the
optimizer's state, learning rate included, so after a member took a copy of another's
checkpoint the model would go on at the other's old rate while ``history.csv`` showed the new
one. Report notes the optimizer's hyperparameters as compiled (before any callback restores
anything), puts them back before the first batch, and checks at each epoch's end that the
epoch trained with them, else the trial fails saying why. Whatever the parameters are called,
and whatever ``train`` computed from them (``SGD(params["lr"] * 4)``), the rate that trains is
the one ``train`` compiled.

A pause the sweep answers a report with is raised at the next epoch's start, once every
callback's ``on_epoch_end`` ran (``BackupAndRestore``'s save among them), wherever Report
stands in the list of callbacks.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import keras

from sweeper.child.context import current_trial, last_epoch, report
from sweeper.model.outcome import TrialFailed
from sweeper.model.trial import Status

__all__ = ["Report"]


class Report(keras.callbacks.Callback):
    """A Keras callback that sends each epoch's logs to the sweep (live view, ``history.csv``),
    epochs from 1; the metrics that are numbers, under Keras's names.

    In population-based training each epoch's parameters are recorded, so the optimizer must
    train with what ``train`` compiled from them: its hyperparameters as compiled (the
    learning rate, momentum, ...) are put back before the first batch of each segment (after
    ``BackupAndRestore`` restored another member's state) and checked at each epoch's end. In
    any other sweep Report only reports.

    Args:
        free: the optimizer's attributes something else sets on purpose (``["learning_rate"]``
            where a ``LearningRateScheduler`` sets the rate from the parameters each epoch):
            neither put back nor checked. One name or several.

    Raises:
        TrialFailed: from ``fit``: a pruner stopped the trial, or a scheduler paused it (let it
            propagate); in population-based training, an epoch trained with a hyperparameter
            other than the one compiled (the trial's ``error`` says which, and what to do).

    Example:
        A file ``fit.py``::

            import numpy as np
            import pandas

            import sweeper

            def train(params):
                import keras  # imported in the trial's process alone

                import sweeper.keras

                x = np.random.default_rng(0).normal(size=(64, 4))
                model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
                model.compile(keras.optimizers.SGD(params["lr"]), "mse")
                model.fit(x, x.sum(axis=1), epochs=2, verbose=0, callbacks=[sweeper.keras.Report()])
                return {"done": 1}

            if __name__ == "__main__":
                sweeper.sweep(train, {"lr": [0.01]}, progress=False)
                history = pandas.read_csv("results/fit/history.csv")
                print(history[["trial", "epoch"]].to_string(index=False), "loss" in history)

        ``python fit.py`` prints::

              trial  epoch
            lr=0_01      1
            lr=0_01      2 True
    """

    def __init__(self, free: Iterable[str] = ()) -> None:
        super().__init__()
        if isinstance(free, str):
            free = [free]
        self.free = frozenset(free)
        self._held: dict[str, float] = {}  #: the optimizer's hyperparameters as compiled
        self._applied = False
        self._pause: TrialFailed | None = None  #: the sweep's pause, raised as the next epoch starts

    def set_model(self, model: Any) -> None:
        """Called as ``fit`` starts, before any callback's ``on_train_begin`` (a restore)."""
        super().set_model(model)
        self._held = compiled(_inner(getattr(model, "optimizer", None)), self.free) if _scheduled() else {}

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        last_epoch(self.params.get("epochs"))  # a scheduler makes no decision at fit's last epoch
        self._applied, self._pause = False, None

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._pause is not None:  # every callback's on_epoch_end ran: the epoch before is saved
            pause, self._pause = self._pause, None
            raise pause
        if not self._applied:  # once, after every callback's on_train_begin (BackupAndRestore's restore)
            self._applied = True
            optimizer = _inner(getattr(self.model, "optimizer", None))
            for name, value in self._held.items():
                if not _same(optimizer, name, value):
                    setattr(optimizer, name, value)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        optimizer = _inner(getattr(self.model, "optimizer", None))
        for name, value in self._held.items():
            if not _same(optimizer, name, value):
                _changed(name, float(getattr(optimizer, name)), value, epoch + 1)
        values = {}
        for name, value in (logs or {}).items():
            try:
                values[name] = float(value)
            except (TypeError, ValueError):
                continue
        try:
            report(epoch=epoch + 1, **values)
        except TrialFailed as exc:
            if exc.status is not Status.INTERRUPTED:  # pruned: it ends here
                raise
            self._pause = exc  # a pause: after the other callbacks' on_epoch_end (their saves)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._pause = None  # fit stopped at that epoch (EarlyStopping): nothing is left to pause


def _scheduled() -> bool:
    """Whether this trial's parameters are recorded epoch by epoch (``SWEEPER_SCHEDULED``)."""
    from sweeper.model import contract

    trial = current_trial()
    return trial is not None and trial.env.get(contract.SCHEDULED) == "1"


def _inner(optimizer: Any) -> Any:
    """The optimizer that holds the hyperparameters (a ``LossScaleOptimizer``'s, under mixed precision)."""
    return getattr(optimizer, "inner_optimizer", None) or optimizer


def compiled(optimizer: Any, free: frozenset[str] = frozenset()) -> dict[str, float]:
    """The optimizer's numeric hyperparameters as they stand (its config's numbers, the rate
    included where it is a number, not a ``LearningRateSchedule``, whose value follows the
    restored step count by design), less ``free``."""
    if optimizer is None:
        return {}
    try:
        config = optimizer.get_config()
    except Exception:  # noqa: BLE001 - a rate given as a lambda does not serialise: nothing to hold
        return {}
    held = {}
    for name, value in config.items():
        if name in free or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        try:
            held[name] = float(getattr(optimizer, name))
        except (AttributeError, TypeError, ValueError):
            continue
    return held


def _same(optimizer: Any, name: str, value: float) -> bool:
    return math.isclose(float(getattr(optimizer, name)), value, rel_tol=1e-6)  # (held as a float32)


def _changed(name: str, now: float, held: float, epoch: int) -> None:
    """An epoch trained with a hyperparameter other than the one compiled: one line, what to do."""
    raise TrialFailed(
        Status.ERROR,
        f"epoch {epoch} trained with the optimizer's {name} {now:.6g}, but train compiled it as {held:.6g} "
        f"from this segment's parameters, which history.csv records for the epoch: something changed it (a "
        f"LearningRateScheduler or ReduceLROnPlateau callback, a callback of yours); population-based training "
        f"explores the parameters itself, so drop that, or, where that callback sets it from the parameters each "
        f"epoch, say so: sweeper.keras.Report(free=[{name!r}])")
