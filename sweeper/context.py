"""What code inside ``fn`` can ask of and tell its sweep: the trial it runs, and progress."""

from __future__ import annotations

import threading
import time
from typing import Any

from .protocol import Reports, TrainStarted
from .trial import TrialSpec

_current: TrialSpec | None = None
_reporter: "_Reporter | None" = None


def current_trial() -> TrialSpec | None:
    """The running trial's spec (id, name, folder, seed, device, params), or None outside one.

    Call it from inside ``fn`` to find the folder for checkpoints::

        ckpt = os.path.join(sweeper.current_trial().dir, "model.keras")
    """
    return _current


def report(epoch: int | None = None, **metrics: Any) -> None:
    """Send intermediate metrics (say, after each epoch) to the sweep while the trial runs.

    They feed the live view and ``<out>/<name>/history.csv``. ``epoch`` defaults to 1, 2,
    ... in call order. Never blocks training: reports are batched and sent by a thread.
    Outside a trial (``train`` run by hand) it does nothing.
    """
    if _reporter is not None:
        _reporter.add(epoch, metrics)


class _Reporter:
    """Batches reports and sends them from a thread, so ``report`` never waits on the parent."""

    INTERVAL = 0.25

    def __init__(self, send: Any) -> None:
        from .metrics import _number, check_metric_name

        self._number = _number
        self._name = check_metric_name
        self._send = send
        self._lock = threading.Lock()  # guards the list; held only for an append or a swap
        self._pipe = threading.Lock()  # one sender on the pipe at a time
        self._items: list[dict[str, Any]] = []
        self._count = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="sweeper-report", daemon=True)
        self._thread.start()

    def add(self, epoch: int | None, metrics: dict[str, Any]) -> None:
        self._count += 1
        values = {self._name(k, final=False): self._number(k, v) for k, v in metrics.items()}
        item = {"epoch": self._count if epoch is None else int(epoch), "metrics": values, "t": time.time()}
        with self._lock:
            self._items.append(item)

    def _take(self) -> list[dict[str, Any]]:
        with self._lock:
            items, self._items = self._items, []
        return items

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self.INTERVAL)
            self.flush()

    def flush(self) -> None:
        with self._pipe:
            items = self._take()
            if items:
                try:
                    self._send(Reports(items))
                except OSError:  # the parent is gone
                    pass

    def send(self, message: Any) -> None:
        with self._pipe:
            try:
                self._send(message)
            except OSError:
                pass

    def close(self) -> None:
        """Send what is left; the result follows on the same pipe, after it."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)
        self.flush()


def _set(spec: TrialSpec | None) -> None:
    global _current
    _current = spec


def _start_reporting(send: Any) -> None:
    global _reporter
    _reporter = _Reporter(send)


def _announce_start() -> None:
    if _reporter is not None:
        _reporter.send(TrainStarted())


def _stop_reporting() -> None:
    global _reporter
    if _reporter is not None:
        _reporter.close()
        _reporter = None
