"""How a sweep's end (sweeper.model.lifecycle.SweepEnd) becomes the command's exit status
(sweeper.front.cli.exit_status): 128 + the signal that interrupted it, as a shell's; 1 where it
failed, stopped itself, left a trial unrun or not ok, or could not write a table; else 0."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import Status, TrialResult

pytestmark = pytest.mark.unit


def _outcome(end: SweepEnd, statuses: list[Status], specs: int | None = None, signum: int | None = None,
             unwritten: list[tuple[str, str]] | None = None) -> Any:
    from sweeper.run.runner import Outcome

    rows = [TrialResult(f"id{i}", f"t{i}", i, {}, s, {}) for i, s in enumerate(statuses)]
    return Outcome("/f", rows, [object()] * (len(statuses) if specs is None else specs), None,  # type: ignore[arg-type]
                   interrupted=signum, end=end, unwritten=unwritten or [])


@pytest.mark.parametrize("outcome, status", [
    (_outcome(SweepEnd.FINISHED, [Status.OK, Status.PRUNED]), 0),
    (_outcome(SweepEnd.FINISHED, [Status.OK, Status.CRASHED]), 1),
    (_outcome(SweepEnd.FINISHED, [Status.OK], specs=2), 1),  # a trial not run
    (_outcome(SweepEnd.FINISHED, [Status.OK], unwritten=[("/f/results.csv", "disk full")]), 1),
    (_outcome(SweepEnd.FAILED, [Status.OK]), 1),  # it stopped itself
    (_outcome(SweepEnd.INTERRUPTED, [Status.OK], signum=signal.SIGINT), 128 + signal.SIGINT),
    (_outcome(SweepEnd.INTERRUPTED, [Status.OK, Status.INTERRUPTED], signum=signal.SIGTERM), 128 + signal.SIGTERM),
])
def test_each_end_of_a_sweep_has_its_exit_status(outcome, status):
    from sweeper.front.cli import exit_status
    from sweeper.front.subcommands import EXIT_FAILED, EXIT_OK

    assert (EXIT_OK, EXIT_FAILED) == (0, 1)
    assert exit_status(outcome) == status
