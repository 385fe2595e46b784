"""The rules of a shared machine, without a process started: who is alive, what a record
holds, which records a reader keeps, the fair share, when an OOM is not the trial's own,
room beside others, and the fake NVML's truth about what a framework maps."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import pytest

from sweeper.placement import share
from sweeper.placement.holders import crowded
from sweeper.placement.liveness import Life, boot_id, started
from sweeper.placement.machine import Machine
from sweeper.placement.record import Entry, Holding, Kind, Want
from sweeper.run.packing import ALONE_MIN_MB, CONTEXT_MB, MARGIN_MB, Card, Needs, terms

pytestmark = pytest.mark.unit


def test_a_writer_lives_only_as_the_process_it_named():
    """pid, start tick and boot: a pid given to a later process, or a record from before a
    reboot, is a dead writer's."""
    me = Life.of()
    assert me.alive() and me.start == started(os.getpid()) and me.boot == boot_id() != ""
    assert not Life(me.pid, me.start + 1, me.boot).alive()  # the same pid, started at another moment
    assert not Life(me.pid, me.start, "another-boot").alive()
    assert not Life(2 ** 22 + 1, 0, me.boot).alive()  # no such process


def test_a_record_reads_back_as_written_and_another_versions_is_skipped():
    entry = Entry(Life.of(), 0, "root", "/r/a", Kind.JOB, 5, (Holding("GPU-1", "t", 42, 7782, 7782),),
                  Want(("GPU-1",), 4096, 12.5), "waits", 1.0)
    assert Entry.from_json(entry.to_json()) == entry
    data = json.loads(entry.to_json())
    assert Entry.from_json(json.dumps({**data, "version": 99})) is None
    assert Entry.from_json("{not json") is None and Entry.from_json("[]") is None


def test_a_reader_keeps_live_records_clears_its_users_dead_ones_and_never_touches_anothers(tmp_path):
    """A dead writer's record is skipped at once; the reader removes it where it is its own
    user's, and leaves another user's (the sticky folder would refuse it anyway)."""
    machine = Machine(str(tmp_path / "m"))
    assert machine.open() and os.stat(machine.path).st_mode & 0o1777 == 0o1777
    me = Life.of()
    machine.publish(Entry(me, os.getuid(), "me", "/r/mine"))
    dead = Life(me.pid, me.start + 7, me.boot)
    for name, uid in (("mine-dead", os.getuid()), ("theirs-dead", 65534)):
        path = os.path.join(machine.path, f"{name}.json")
        with open(path, "w") as f:
            f.write(Entry(dead, uid, name, f"/r/{name}").to_json())
        if uid != os.getuid():
            if os.getuid() != 0:
                pytest.skip("needs root to give a file to another user")
            os.chown(path, uid, -1)
    other = Machine(machine.path, Life(me.pid, me.start, me.boot))
    other.file = os.path.join(machine.path, "someone-else.json")  # a second reader in this process
    assert [e.folder for e in other.read()] == ["/r/mine"]
    left = sorted(os.listdir(machine.path))
    assert "mine-dead.json" not in left and "theirs-dead.json" in left
    machine.withdraw()
    assert other.read() == []


@pytest.mark.parametrize("nice,expect", [(0, 1.0), (5, 1.25 ** -5), (19, 1.25 ** -19), (40, 1.25 ** -19)])
def test_niceness_weighs_as_the_kernel_weighs_cpu_time(nice, expect):
    assert share.weight(nice) == pytest.approx(expect)


def test_the_fair_share_lends_what_no_one_waits_for_and_takes_it_back_by_turns():
    total = 16384
    busy = share.Party("a", 1.0, 15564, 7782, since=math.inf)  # holds two trials, wants more
    assert share.room(total, busy, [busy]) == math.inf  # alone: all it can use
    waiter = share.Party("b", 1.0, 0, 7782, since=10.0)  # holds nothing, waits since 10
    me = share.Party("a", 1.0, 7782, 7782, since=20.0)  # one of a's trials ended; it asks for another
    assert share.room(total, me, [waiter, me]) == total / 2 - 7782  # within its share only: 410 MB
    later = share.Party("b", 1.0, 0, 7782, since=30.0)  # one that came after a began waiting: a goes first
    assert share.room(total, me, [later, me]) == math.inf
    full = share.Party("b", 1.0, 7782, 7782, since=10.0)  # b holds its share: a second trial is beyond it
    assert share.room(total, me, [full, me]) == math.inf  # not entitled: a may borrow
    # trials larger than a share (three sweeps of per_gpu 2): the longest waiter goes first
    parties = [share.Party(k, 1.0, 0, 7782, since=t) for k, t in (("x", 5.0), ("y", 6.0))]
    asking = share.Party("z", 1.0, 0, 7782, since=7.0)
    assert share.room(total, asking, [*parties, asking]) < 7782
    first = share.Party("x", 1.0, 0, 7782, since=5.0)
    assert share.room(total, first, [parties[1], asking, first]) == math.inf
    niced = share.Party("n", share.weight(10), 0, 1000, since=1.0)
    strong = share.Party("s", 1.0, 4000, 4000, since=50.0)
    assert share.share_mb(total, strong, [niced, strong]) == pytest.approx(total / (1 + 1.25 ** -10))


def test_an_oom_is_others_when_they_hold_more_than_this_sweeps_reservations_leave():
    assert crowded(16384, 15564, 10240)  # a colleague's 10 GB beside a card-sized reservation
    assert not crowded(16384, 7782, 8082)  # another sweep's trial at its cap plus its context
    assert not crowded(16384, 15564, 0)  # nothing else there: the trial's own need


def test_room_counts_other_sweeps_reservations_and_the_share_and_no_cap_is_cut_to_nothing():
    card = Card("0", 16384, 12000, others_mb=3000)
    assert card.room == 12000 - 3000 - MARGIN_MB
    assert Card("0", 16384, 12000, share_mb=2000).room == 2000
    alone = Needs().predict({})
    assert terms(alone, Card("0", 16384, ALONE_MIN_MB + MARGIN_MB - 1)) is None  # too little: it waits
    reserved, cap = terms(alone, Card("0", 16384, ALONE_MIN_MB + MARGIN_MB))
    assert reserved == ALONE_MIN_MB and cap == ALONE_MIN_MB - CONTEXT_MB > 0
    beside = Card("0", 16384, 16000, alone_mb=6000)  # beside other sweeps: most of its fair share
    assert terms(alone, Card("0", 16384, 6000, alone_mb=6000)) is None
    assert terms(alone, beside) == (16000 - MARGIN_MB, 16000 - MARGIN_MB - CONTEXT_MB)
    huge = Needs(hint="40GB").predict({})
    assert terms(huge, Card("0", 16384, 16000, others_mb=500), overfill=True) is None  # not on a card in use
    assert terms(huge, Card("0", 16384, 16000), overfill=True) is not None


@pytest.mark.parametrize("framework,env,expect", [
    ("exact", {"SWEEPER_MEMORY_LIMIT_MB": "7782"}, (5000, 7782)),
    ("tensorflow", {"SWEEPER_MEMORY_LIMIT_MB": "7782"}, (7782 + 300, 7782)),  # its whole cap, at once
    ("tensorflow", {}, (16000, None)),  # no cap: all that is free
    ("tensorflow", {"SWEEPER_MEMORY_LIMIT_MB": "7782", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}, (5000, 7782)),
    ("jax", {}, (300 + 12288, 12288)),  # 75% of the card, preallocated
    ("jax", {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}, (300 + 8192, 8192)),
    ("jax", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}, (5000, 8192)),
])
def test_the_fake_maps_what_each_framework_would(framework, env, expect):
    from fake_nvml import mapped

    assert mapped(5000, framework, env, 16384, 16000) == expect


def test_an_oom_others_caused_runs_again_three_times_at_most_and_teaches_the_packer_nothing():
    """A trial whose card others crowded while it ran: its OOM is excused (it runs again,
    retries or not, and its row is no lesson for the packer) three times; the fourth is its own."""
    from sweeper.model.trial import Status, TrialResult
    from sweeper.run.crowd import CROWDED_RERUNS, Crowd
    from sweeper.run.slots import Slot

    crowd = Crowd([Slot(0, "0", uuid="GPU-1", cap_mb=7782)])
    row = TrialResult(trial_id="t1", name="t1", index=0, params={}, status=Status.OOM, attempts=1)
    assert crowd.ended("t1") == "" and not crowd.excuse(row)  # nothing crowded it: its own OOM
    for attempt in range(1, CROWDED_RERUNS + 2):
        crowd.placed("t1", "t1", "0", 7782, 7782)
        crowd.evidence["t1"] = "gpu:0: pid 7 (bob, python hog.py) holds 10240 MB"
        words = crowd.ended("t1")
        again = replace(row, attempts=attempt)
        if attempt <= CROWDED_RERUNS:
            assert "it runs again once there is room" in words and crowd.excuse(again)
            assert crowd.excused_row(again)
        else:
            assert "counts as its own" in words and not crowd.excuse(again) and not crowd.excused_row(again)
        crowd.gone("t1")
    assert not crowd.excuse(replace(row, status=Status.CRASHED))
