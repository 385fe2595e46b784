"""What code inside ``fn`` can ask of and tell its sweep: the trial it runs, and progress."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from sweeper.model.protocol import Reports, TrainStarted
from sweeper.model.trial import TrialSpec

_current: TrialSpec | None = None
_reporter: "_Reporter | None" = None


def current_trial() -> TrialSpec | None:
    """The trial this process runs, from inside ``fn``: its id, name, folder, seed, device, params.

    Returns:
        Its :class:`sweeper.TrialSpec` (``dir`` is its own folder, for what it saves;
        ``checkpoint`` a folder that lasts across a paused trial's segments); None outside
        a trial (``train`` called by hand).

    Raises:
        Nothing.

    Example:
        A file ``notes.py``::

            import os

            import sweeper

            def train(params):
                trial = sweeper.current_trial()
                with open(os.path.join(trial.dir, "note.txt"), "w") as f:
                    f.write(f"{trial.name} ran with {trial.params}")
                return {"loss": params["lr"]}

            if __name__ == "__main__":
                sweeper.sweep(train, {"lr": [0.1, 0.01]}, progress=False)
                print(open("results/notes/trials/lr=0_1/note.txt").read())

        ``python notes.py`` prints::

            lr=0_1 ran with {'lr': 0.1}
    """
    return _current


def report(epoch: int | None = None, **metrics: Any) -> None:
    """Send intermediate metrics (say, after each epoch) to the sweep while the trial runs.

    They feed the live view and ``<out>/<name>/history.csv``; outside a trial (``train``
    called by hand) it does nothing. Without a pruner it never
    blocks training: reports are batched and sent by a thread. In a search with a pruner
    each report waits for the pruner's verdict (a few ms; at most ``VERDICT_WAIT_S``, after
    which training goes on and a late verdict applies at the next report). In
    population-based training (or a replay of it) each report waits for its answer however
    long the parent takes: a decision is never skipped, a pause lands at its epoch.

    Args:
        epoch: the epoch these metrics are of; by default 1, 2, ... in call order.
        **metrics: metric names to numbers (NumPy and framework scalars are taken as numbers).

    Raises:
        TrialFailed: a pruner stopped the trial (status ``pruned``), or a scheduler paused it
            (to resume later in a fresh process): let it propagate, the trial ends at this epoch.
        BadResult: a metric that is not a number, or a name a column cannot take (the trial's ``error``).

    Example:
        A file ``curves.py``::

            import pandas

            import sweeper

            def train(params):
                for epoch in range(1, 4):
                    sweeper.report(epoch=epoch, loss=params["lr"] / epoch)
                return {"loss": params["lr"] / 3}

            if __name__ == "__main__":
                sweeper.sweep(train, {"lr": [0.3, 0.03]}, progress=False)
                history = pandas.read_csv("results/curves/history.csv")
                print(history[["trial", "epoch", "loss"]].to_string(index=False))

        ``python curves.py`` prints::

              trial  epoch  loss
             lr=0_3      1 0.300
             lr=0_3      2 0.150
             lr=0_3      3 0.100
            lr=0_03      1 0.030
            lr=0_03      2 0.015
            lr=0_03      3 0.010
    """
    if _reporter is not None:
        _reporter.add(epoch, metrics)


#: Seconds a report waits for the pruner's verdict before training goes on.
VERDICT_WAIT_S = 2.0


class _Reporter:
    """Batches reports and sends them from a thread, so ``report`` never waits on the
    parent; or, given ``receive`` (a search with a pruner), sends each at once and waits
    for the scheduler's answer to it (:class:`~sweeper.model.protocol.Answer`, one per batch)."""

    INTERVAL = 0.25

    def __init__(self, send: Any, receive: Any = None, after: int = 0) -> None:
        from sweeper.model.metrics import check_metric_name, number_of

        self._number = number_of
        self._name = check_metric_name
        self._send = send
        self._receive = receive  #: seconds -> the parent's next message, or None when none came
        self._sent = self._answered = 0  #: batches sent, verdicts received
        self._lock = threading.Lock()  # guards the list; held only for an append or a swap
        self._pipe = threading.Lock()  # one sender on the pipe at a time
        self._items: list[dict[str, Any]] = []
        self._count = after  #: the last epoch numbered (a resumed trial's go on after its last)
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="sweeper-report", daemon=True)
        if receive is None:  # with verdicts every batch is sent by report() itself, in order
            self._thread.start()

    def add(self, epoch: int | None, metrics: dict[str, Any]) -> None:
        self._count += 1
        values = {self._name(k, final=False): self._number(k, v) for k, v in metrics.items()}
        item = {"epoch": self._count if epoch is None else int(epoch), "metrics": values, "t": time.time()}
        if _last_epoch is not None:  # a scheduler makes no decision at the last epoch
            item["last"] = _last_epoch
        with self._lock:
            self._items.append(item)
        if self._receive is not None:
            self._verdicts(0.0)  # a verdict that came late applies now, before another epoch counts
            self.flush()
            self._verdicts(None if _scheduled() else VERDICT_WAIT_S)

    def _verdicts(self, wait: float | None) -> None:
        """Read the verdicts on the batches sent so far (waiting at most ``wait`` s; None: until
        they come, or the parent is gone); a stop ends the trial here, as pruned."""
        deadline = None if wait is None else time.monotonic() + wait
        while self._answered < self._sent:
            message = self._receive(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if message is None:  # not yet (or no parent): training goes on, the verdict applies later
                return
            self._answered += 1
            decision = getattr(getattr(message, "decision", None), "value", "continue")
            if decision != "continue":
                from sweeper.model.outcome import TrialFailed
                from sweeper.model.trial import Status

                why = getattr(message, "why", "")
                raise TrialFailed(Status.PRUNED, why) if decision == "stop" else TrialFailed(
                    Status.INTERRUPTED, f"paused: {why}")

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
                    self._sent += 1
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
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.flush()


def _scheduled() -> bool:
    """Whether the running trial's parameters are recorded epoch by epoch (population-based
    training, a replay of one): its every report must hear its answer at its epoch."""
    from sweeper.model import contract

    return _current is not None and _current.env.get(contract.SCHEDULED) == "1"


_last_epoch: int | None = None


def last_epoch(epochs: int | None) -> None:
    """The trial's last epoch, where its loop knows it (Keras's ``fit(epochs=...)``): sent with
    each report, so a scheduler makes no decision there (:mod:`sweeper.search.pbt`)."""
    global _last_epoch
    _last_epoch = int(epochs) if isinstance(epochs, int) and not isinstance(epochs, bool) else None


def set_current(spec: TrialSpec | None) -> None:
    global _current
    _current = spec


def start_reporting(send: Any, receive: Any = None, after: int = 0) -> None:
    global _reporter
    _reporter = _Reporter(send, receive, after)


def announce_start() -> None:
    if _reporter is not None:
        _reporter.send(TrainStarted())


def stop_reporting() -> None:
    global _reporter
    if _reporter is not None:
        _reporter.close()
        _reporter = None


def attempt_tail(lines: int = 20) -> list[str]:
    """The last lines of the running trial's log from this attempt (this process's); [] outside a trial."""
    from sweeper.store import paths

    trial = current_trial()
    return paths.log_tail(trial.log_path, lines, pid=os.getpid()) if trial else []
