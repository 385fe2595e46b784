"""Keras helpers. ``import sweeper.keras`` imports Keras; ``import sweeper`` does not."""

from __future__ import annotations

from typing import Any

import keras

from sweeper.child.context import last_epoch, report


class Report(keras.callbacks.Callback):
    """Sends each epoch's logs to the sweep (live view, ``history.csv``), epochs from 1::

        model.fit(x, y, epochs=10, callbacks=[sweeper.keras.Report()])
    """

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        last_epoch(self.params.get("epochs"))  # a scheduler makes no decision at fit's last epoch

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        values = {}
        for name, value in (logs or {}).items():
            try:
                values[name] = float(value)
            except (TypeError, ValueError):
                continue
        report(epoch=epoch + 1, **values)
