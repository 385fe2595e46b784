"""A trial's phases in the engine (sweeper.run.phases.Phase) and the one table of moves between
them (MOVES): every move in the table is made, every other is refused as a bug of the
engine (PhaseError, an AssertionError: never a user's error). The moves the engine makes
as events come, in fake time, are in test_engine_clock.py."""

from __future__ import annotations

import itertools

import pytest


from sweeper.run.phases import MOVES, Phase, PhaseError, TrialState
from sweeper.errors import SweepError
from sweeper.model.trial import TrialSpec

pytestmark = pytest.mark.unit

#: The moves a trial may make, written here by hand from what each phase means (not read
#: from the table under test): a change to MOVES fails these tests until this is changed too.
INTENDED = """
STARTING -> RUNNING     it reached its process
STARTING -> STOPPING    cancelled before it began
STARTING -> KILLED      cancelled hard before it began
STARTING -> ENDED       its process never began (a spawn that failed, a fork server gone)
RUNNING  -> STARTING    a fork that never reached train is run again in a spawn process
RUNNING  -> STOPPING    timeout, stall, Ctrl-C, a pruner's stop: SIGTERM
RUNNING  -> KILLED      cancelled hard at once (a second Ctrl-C)
RUNNING  -> ENDED       its process is gone
STOPPING -> KILLED      not gone after the grace
STOPPING -> ENDED       gone within it
KILLED   -> ENDED       gone
RUNNING  -> PAUSED      the scheduler paused it and it left its process by itself
STOPPING -> PAUSED      paused, it left on SIGTERM
KILLED   -> PAUSED      paused, it was ended hard
PAUSED   -> STARTING    the scheduler gave it again: a fresh process
PAUSED   -> ENDED       the sweep ended before it was given again (recorded interrupted)
"""
ALLOWED = [(Phase[a], Phase[b]) for a, _, b, *_ in (line.split() for line in INTENDED.strip().splitlines())]
REFUSED = [(a, b) for a, b in itertools.product(Phase, Phase) if (a, b) not in ALLOWED]


def trial(phase: Phase) -> TrialState:
    spec = TrialSpec(trial_id="t1", name="lr=0.1", index=0, params={"lr": 0.1}, seed=1, dir="/nowhere")
    return TrialState(spec, "", 0.0, phase=phase)


def test_a_trial_starts_in_starting():
    assert TrialState(trial(Phase.STARTING).spec, "", 0.0).phase is Phase.STARTING


def test_the_table_names_every_phase():
    assert set(MOVES) == set(Phase)


def test_the_table_is_the_moves_intended():
    assert {(a, b) for a in Phase for b in MOVES[a]} == set(ALLOWED)


@pytest.mark.parametrize("start, end", ALLOWED, ids=[f"{a.name}->{b.name}" for a, b in ALLOWED])
def test_every_move_in_the_table_is_made(start, end):
    t = trial(start)
    t.to(end)
    assert t.phase is end


@pytest.mark.parametrize("start, end", REFUSED, ids=[f"{a.name}->{b.name}" for a, b in REFUSED])
def test_every_move_not_in_the_table_is_refused_and_the_trial_stays(start, end):
    t = trial(start)
    with pytest.raises(PhaseError):
        t.to(end)
    assert t.phase is start


def test_the_moves_the_engine_must_never_make_are_not_in_the_table():
    refused = set(REFUSED)
    assert (Phase.ENDED, Phase.RUNNING) in refused  # an ended trial does not run again
    assert (Phase.ENDED, Phase.ENDED) in refused  # nor is it ended (judged, recorded) twice
    assert (Phase.KILLED, Phase.KILLED) in refused  # nor killed twice
    assert (Phase.KILLED, Phase.STOPPING) in refused  # a killed trial is not asked to stop
    assert (Phase.STOPPING, Phase.RUNNING) in refused  # a cancel is not taken back
    assert (Phase.STOPPING, Phase.STARTING) in refused  # a cancelled trial is not moved to a new process
    assert (Phase.STARTING, Phase.STARTING) in refused
    assert (Phase.STARTING, Phase.PAUSED) in refused  # a pause answers reports: it began
    assert (Phase.PAUSED, Phase.RUNNING) in refused  # a paused trial begins again from its start
    assert (Phase.ENDED, Phase.PAUSED) in refused  # a recorded trial is not paused


def test_ended_is_the_end_and_every_phase_reaches_it():
    assert MOVES[Phase.ENDED] == frozenset()
    for phase in Phase:
        if phase is not Phase.ENDED:
            assert Phase.ENDED in MOVES[phase]


def test_every_phase_is_reached_from_starting():
    seen, todo = {Phase.STARTING}, [Phase.STARTING]
    while todo:
        for nxt in MOVES[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert seen == set(Phase)


def test_a_cancel_is_never_taken_back():
    # once asked to stop or killed, a trial only goes on to be killed or to leave its process
    for phase in Phase:
        if phase.cancelled:
            assert MOVES[phase] <= {Phase.KILLED, Phase.PAUSED, Phase.ENDED}
    assert [p for p in Phase if p.cancelled] == [Phase.STOPPING, Phase.KILLED]


def test_a_refused_move_is_an_internal_error_that_names_the_trial_and_the_move():
    t = trial(Phase.ENDED)
    with pytest.raises(AssertionError) as caught:
        t.to(Phase.RUNNING)
    assert isinstance(caught.value, PhaseError) and not isinstance(caught.value, SweepError)
    message = str(caught.value)
    assert "t1 (lr=0.1)" in message and "from ENDED to RUNNING" in message and "bug" in message


def test_a_segment_given_to_a_queue_but_never_begun_is_no_segment_of_the_row():
    """A paused member given again waits in a batch queue (Slurm) and the sweep stops before
    its task runs: its row counts the processes it ran in, not the one it never reached."""
    from sweeper.model.protocol import Began, Exited
    from sweeper.model.trial import Status

    state = trial(Phase.STARTING)
    state.reached(Began(42, "cpu"), 1.0, None, None)
    state.paused(2.0)
    state.resume(state.spec, 3.0)  # its second segment, handed to the backend
    state.stop, state.why = Status.INTERRUPTED, "interrupted (Ctrl-C)"
    assert state.row(Exited(cancelled=True), 4.0, "", None).segments is None  # one process: no column
    state.reached(Began(43, "cpu"), 5.0, None, None)  # (had it begun, its segment counts)
    assert state.row(Exited(cancelled=True), 6.0, "", None).segments == 2
