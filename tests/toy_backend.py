"""A whole backend in a few dozen lines, from outside sweeper: each trial a ``spawn``
process running sweeper's channel trial (:func:`sweeper.child.channel.channel_main`), its
messages through a multiprocessing queue. Registered through the public registry
(``sweeper.backends.register``) or an entry point of the ``sweeper.backends`` group; it
touches no file of sweeper's. Not a backend to use: no standbys, no fork server, no GPU
placement, a trial's log lost if its process is killed."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
from dataclasses import dataclass, field
from typing import Any

from sweeper.backends import Launch
from sweeper.backends.channel import Relay, finished
from sweeper.child.channel import channel_main, sweep_token
from sweeper.errors import SweepError
from sweeper.model.options import flag
from sweeper.model.protocol import Exited, Traits


class Returned:
    """The trial's return value, its last message on the queue."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out


class Channel:
    """What ``channel_main`` puts messages into: ``put((trial id, message), timeout=...)``."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def put(self, item: Any, timeout: float | None = None) -> None:
        self.queue.put(item)  # a SimpleQueue writes at once: nothing is lost to os._exit


def task(spec: Any, target: Any, queue: Any, sweep: str | None) -> None:
    """A trial's process: the channel trial, then its return value."""
    out = channel_main(spec, target, {"CUDA_VISIBLE_DEVICES": "-1"}, Channel(queue), sweep)
    queue.put((spec.trial_id, Returned(out)))


class ToyBackend:
    def __init__(self, launch: Launch) -> None:
        self.target = launch.target
        self.context = multiprocessing.get_context("spawn")
        self.queue = self.context.SimpleQueue()
        self.traits = Traits(launch.options.worker_count or 2)
        self.relay = Relay()
        self.running: dict[str, tuple[Any, Any]] = {}  #: trial id -> (spec, process)
        self.returned: dict[str, dict[str, Any]] = {}  #: trial id -> what it returned

    def open(self) -> None:
        pass

    def start(self, spec: Any) -> None:
        process = self.context.Process(target=task, args=(spec, self.target, self.queue, sweep_token(spec.dir)))
        process.start()
        self.running[spec.trial_id] = (spec, process)
        self.relay.watch(spec.trial_id)
        return None  # its Began comes with its Placed message

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Any]]:
        sentinels = {process.sentinel: tid for tid, (_, process) in self.running.items()}
        waits: list[Any] = [*sentinels, wake]
        ready = multiprocessing.connection.wait(waits, 0.2 if timeout is None else min(timeout, 0.2))
        events = self._read()
        for tid in [sentinels[r] for r in ready if r in sentinels]:
            events += self._read() + self._ended(tid)
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Any]]:
        return self._read()

    def cancel(self, trial_id: str, hard: bool) -> None:
        if trial_id in self.running:
            process = self.running[trial_id][1]
            process.kill() if hard else process.terminate()

    def tell(self, trial_id: str, message: Any) -> None:
        pass  # never called: traits.answers is False

    def close(self) -> list[tuple[str, Any]]:
        for _, process in self.running.values():
            process.kill()
            process.join()
        self.running.clear()
        return []

    def _read(self) -> list[tuple[str, Any]]:
        batch = []
        while not self.queue.empty():
            tid, message = self.queue.get()
            if isinstance(message, Returned):
                self.returned[tid] = message.out
            else:
                batch.append((tid, message))
        return self.relay.events(batch)

    def _ended(self, trial_id: str) -> list[tuple[str, Any]]:
        spec, process = self.running.pop(trial_id)
        process.join()
        heard = self.relay.forget(trial_id)
        exitcode = process.exitcode if heard.exitcode is None else heard.exitcode
        out = self.returned.pop(trial_id, None)
        if out is None:  # killed, or it died before it returned
            return [(trial_id, Exited(exitcode))]
        return finished(spec, out, exitcode)


def factory(launch: Launch) -> ToyBackend:
    return ToyBackend(launch)


@dataclass(frozen=True)
class ToyOptions:
    """The toy backend's own settings (its options group): how many trials it runs at once."""

    lanes: int = field(default=2, metadata=flag("with --backend toy: trials at once (default {default})", type=int))

    def checked(self) -> ToyOptions:
        if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
            raise SweepError(f"lanes must be a whole number >= 1, got {self.lanes!r}")
        return self


#: The options groups ``with_lanes`` was made with, in order (it runs in the sweep's process).
MADE_WITH: list[Any] = []


def with_lanes(launch: Launch) -> ToyBackend:
    """The toy backend, as many trials at once as its own option ``lanes`` says."""
    MADE_WITH.append(launch.options.backend_options)
    backend = ToyBackend(launch)
    backend.traits = Traits(launch.options.backend_options.lanes)
    return backend
