"""The driver's half of a channel trial (:mod:`sweeper.child.channel`): a trial whose
messages come through a channel (a Ray queue, a multiprocessing queue, ...) and whose
last word is a return value, not a pipe the backend watches.

A backend that runs trials so (Ray; a toy one in ``tests/toy_backend.py``) hands what its
channel gives to a :class:`Relay`, which makes the engine's events of it, and ends each
trial that returned with :func:`finished`, which writes the trial's files in the sweep's
folder as a local trial leaves them::

    channel ──▶ Relay.events: Placed ▶ Began (its clock starts); Exiting, ScratchOn kept;
                              Reports, TrainStarted, ... as they are
    return  ──▶ finished: result.json and log.txt written ▶ Result, Unwritable?, Exited
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

from sweeper.model.protocol import Began, Event, Exited, Exiting, LoadFailed, Placed, Unwritable
from sweeper.model.trial import TrialSpec


@dataclass
class Heard:
    """What a trial's channel said of it besides its messages."""

    exitcode: int | None = None  #: told by the trial as it called os._exit (its backend may not say)
    node: str | None = None  #: where it keeps a temporary folder, if it does


class Relay:
    """A channel's messages, made the engine's events, for the trials it is told of."""

    def __init__(self, fraction: str | None = None) -> None:
        self.fraction = fraction  #: the memory fraction each trial's Began reports
        self.heard: dict[str, Heard] = {}  #: by trial id: the trials started and not ended

    def watch(self, trial_id: str) -> None:
        self.heard[trial_id] = Heard()

    def forget(self, trial_id: str) -> Heard:
        return self.heard.pop(trial_id, Heard())

    def events(self, batch: Iterable[tuple[str, Any]]) -> list[tuple[str, Event]]:
        from sweeper.child.channel import ScratchOn

        events: list[tuple[str, Event]] = []
        for tid, message in batch:
            heard = self.heard.get(tid)
            if heard is None:
                continue
            if isinstance(message, ScratchOn):
                heard.node = message.node
            elif isinstance(message, Placed):  # it began on its worker: its time starts now
                events.append((tid, Began(message.pid, message.device, "", message.cap_mb, self.fraction,
                                          where=f"{message.host}, pid {message.pid}" if message.host else f"pid {message.pid}",
                                          at=message.at)))
            elif isinstance(message, Exiting):
                heard.exitcode = message.code
            else:
                events.append((tid, message))
        return events


def finished(spec: TrialSpec, out: dict[str, Any], exitcode: int | None) -> list[tuple[str, Event]]:
    """A channel trial returned ``out`` (:func:`sweeper.child.channel.channel_main`): its
    files written, its last events."""
    tid = spec.trial_id
    unwritten = _write(spec, out)
    if "load_error" in out:
        return [(tid, LoadFailed(out["load_error"]))]
    return [(tid, out["result"]), *[(tid, u) for u in unwritten],
            (tid, Exited(exitcode, pid=out.get("pid"), device=out.get("device"), cap_mb=out.get("cap_mb")))]


def _write(spec: TrialSpec, out: dict[str, Any]) -> list[Unwritable]:
    """The trial's files in its folder of the sweep, as a local trial leaves them:
    ``result.json`` (by the local trials' own writer) and its log appended to
    ``log.txt``. What could not be written is told to the engine (it starts no new
    trial), after the result, which stands."""
    from sweeper.child.bootstrap import write_result

    unwritten: list[Unwritable] = []
    try:
        os.makedirs(spec.dir, exist_ok=True)
    except OSError as exc:
        return [Unwritable(exc.filename or spec.dir, exc.strerror or str(exc))]
    if "result" in out:
        failed = write_result(spec, out["result"])
        if failed is not None:
            unwritten.append(failed)
    try:
        with open(spec.log_path, "a") as f:
            f.write(out.get("log", ""))
    except OSError as exc:
        unwritten.append(Unwritable(spec.log_path, exc.strerror or str(exc)))
    return unwritten
