"""Keras helpers. ``import sweeper.keras`` imports Keras; ``import sweeper`` does not.

:class:`Report` sends each epoch to the sweep. In a trial whose parameters are recorded
epoch by epoch (population-based training, and its replay) it also makes the optimizer
train with the parameters on record: ``BackupAndRestore`` puts back the optimizer's state,
learning rate included, so after a member took a copy of another's checkpoint the model
would go on at the other's old rate while ``history.csv`` showed the new one. Report sets
the member's own values before the first batch, and checks at each epoch's end that the
rate it trained with is the one recorded, else the trial fails saying why.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import keras

from sweeper.child.context import current_trial, last_epoch, report

#: Which of a trial's parameters are its optimizer's hyperparameters, by the optimizer's
#: attribute: ``lr`` and ``learning_rate`` are its learning rate. ``Report(optimizer=...)``
#: adds others (``{"momentum": "momentum"}``), or says one is not the optimizer's (``{"lr": None}``).
OPTIMIZER: dict[str, str | None] = {"lr": "learning_rate", "learning_rate": "learning_rate"}


class Report(keras.callbacks.Callback):
    """Sends each epoch's logs to the sweep (live view, ``history.csv``), epochs from 1::

        model.fit(x, y, epochs=10, callbacks=[sweeper.keras.Report()])

    In population-based training each epoch's parameters are recorded, so the optimizer must
    train with them: ``optimizer`` maps a parameter's name to the optimizer's attribute it
    sets (merged over :data:`OPTIMIZER`; ``None``: that parameter is not the optimizer's).
    Each mapped parameter is set on the optimizer before the first batch (after
    ``BackupAndRestore`` restored the optimizer's state, wherever either stands in the
    list), and checked at each epoch's end: a ``LearningRateSchedule``, or a callback that
    changes the rate, fails the trial in one line saying what to do.
    """

    def __init__(self, optimizer: Mapping[str, str | None] | None = None) -> None:
        super().__init__()
        self.mapping = {**OPTIMIZER, **dict(optimizer or {})}
        self._applied = False

    def _scheduled(self) -> dict[str, tuple[str, Any]]:
        """The optimizer's attributes to hold, with their values: those of this trial's
        parameters that map to one, where its parameters are recorded epoch by epoch."""
        from sweeper.model import contract

        trial = current_trial()
        if trial is None or trial.env.get(contract.SCHEDULED) != "1":
            return {}
        return {name: (attr, trial.params[name]) for name, attr in self.mapping.items()
                if attr and name in trial.params}

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        last_epoch(self.params.get("epochs"))  # a scheduler makes no decision at fit's last epoch
        self._applied = False

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._applied:  # once, after every callback's on_train_begin (BackupAndRestore's restore)
            return
        self._applied = True
        optimizer = getattr(self.model, "optimizer", None)
        for name, (attr, value) in self._scheduled().items():
            _set(optimizer, name, attr, value)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        optimizer = getattr(self.model, "optimizer", None)
        for name, (attr, value) in self._scheduled().items():
            _check(optimizer, name, attr, value, epoch + 1)
        values = {}
        for name, value in (logs or {}).items():
            try:
                values[name] = float(value)
            except (TypeError, ValueError):
                continue
        report(epoch=epoch + 1, **values)


def _fail(text: str) -> None:
    from sweeper.model.outcome import TrialFailed
    from sweeper.model.trial import Status

    raise TrialFailed(Status.ERROR, text)


_NOT_MINE = "or, if it is not the optimizer's, say so: sweeper.keras.Report(optimizer={{{name!r}: None}})"


def _set(optimizer: Any, name: str, attr: str, value: Any) -> None:
    """The optimizer's ``attr`` set to the parameter's value (one line where it cannot be)."""
    if optimizer is None or not hasattr(optimizer, attr):
        _fail(f"parameter {name!r} is recorded as the optimizer's {attr} for each epoch, but "
              f"{type(optimizer).__name__} has no {attr}; compile with an optimizer that has it, "
              + _NOT_MINE.format(name=name))
    try:
        setattr(optimizer, attr, value)
    except (TypeError, ValueError, AttributeError) as exc:
        _fail(f"parameter {name!r} is recorded for each epoch, but the optimizer's {attr} cannot be set to it "
              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); compile with a number as "
              f"its {attr} (params[{name!r}]), not a LearningRateSchedule, " + _NOT_MINE.format(name=name))


def _check(optimizer: Any, name: str, attr: str, value: Any, epoch: int) -> None:
    """The epoch trained with the recorded value, else one line saying what changed it."""
    try:
        now = float(getattr(optimizer, attr))
        wanted = float(value)
    except (TypeError, ValueError, AttributeError):
        return  # a value that is no number (a choice of name): set, nothing to compare
    if math.isclose(now, wanted, rel_tol=1e-6):  # (the optimizer holds it as a float32)
        return
    _fail(f"epoch {epoch} trained with the optimizer's {attr} {now:.6g}, but its parameters record "
          f"{name} {wanted:.6g}: something changed the rate (a LearningRateSchedule, a LearningRateScheduler or "
          f"ReduceLROnPlateau callback); population-based training sets {name} itself, so drop that, "
          + _NOT_MINE.format(name=name))
