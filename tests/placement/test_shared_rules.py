"""The rules of a shared machine, without a process started: who is alive, what a record
holds, which records a reader keeps, the fair share, when an OOM is not the trial's own,
room beside others, and the fake NVML's truth about what a framework maps."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import stat
import time
from dataclasses import replace

import pytest

from sweeper.placement import share
from sweeper.placement.holders import crowded
from sweeper.placement.liveness import Life, boot_id, namespace, said_command, started
from sweeper.placement.machine import Machine
from sweeper.placement.record import Entry, Holding, Kind, Want
from sweeper.placement.packing import ALONE_MIN_MB, CONTEXT_MB, MARGIN_MB, Card, Needs, terms

pytestmark = pytest.mark.unit


def test_a_writer_lives_only_as_the_process_it_named():
    """pid, start tick, boot and pid namespace: a pid given to a later process, or a record
    from before a reboot, is a dead writer's; one from another pid namespace cannot be told
    by its pid (it means another process here, or none)."""
    me = Life.of()
    assert me.alive() and me.start == started(os.getpid()) and me.boot == boot_id() != "" and me.ns == namespace()
    assert not replace(me, start=me.start + 1).alive()  # the same pid, started at another moment
    assert not replace(me, boot="another-boot").alive()
    assert not replace(me, pid=2 ** 22 + 1, start=0).alive()  # no such process
    assert replace(me, ns=me.ns + 1).state() is None and not replace(me, ns=me.ns + 1).here()


def _plant(machine: Machine, name: str, entry: Entry, owner: int | None = None) -> str:
    """A record file made by hand in the machine's folder (``owner``: chowned to that user)."""
    path = os.path.join(machine.path, name)
    with open(path, "w") as f:
        f.write(entry.to_json())
    if owner is not None and owner != os.getuid():
        if os.getuid() != 0:
            pytest.skip("needs root to give a file to another user")
        os.chown(path, owner, -1)
    return path


def test_a_record_reads_back_as_written_and_another_versions_is_skipped():
    entry = Entry(Life.of(), 0, "root", "/r/a", Kind.JOB, 5, (Holding("GPU-1", "t", 42, 7782, 7782),),
                  Want(("GPU-1",), 4096, 12.5), "waits", 1.0)
    assert Entry.from_json(entry.to_json()) == entry
    data = json.loads(entry.to_json())
    assert Entry.from_json(json.dumps({**data, "version": 99})) is None
    assert Entry.from_json("{not json") is None and Entry.from_json("[]") is None
    odd = Entry.from_json(json.dumps({**data, "folder": "/r/a\n\x1b[2Jb", "user": "ro\not"}))
    assert odd is not None and odd.folder == "/r/a\\n\\x1b[2Jb" and odd.user == "ro\\not"  # one line, whatever it holds
    assert said_command(b"python\0-c\0print(1)\n\x1b[2J\0") == "python -c print(1)\\n\\x1b[2J"


def test_a_reader_keeps_live_records_clears_its_users_dead_ones_and_never_touches_anothers(tmp_path):
    """A dead writer's record is skipped at once; the reader removes it where it is its own
    user's, and leaves another user's (the sticky folder would refuse it anyway)."""
    machine = Machine(str(tmp_path / "m"))
    assert machine.open() and os.stat(machine.path).st_mode & 0o1777 == 0o1777
    me = Life.of()
    machine.publish(Entry(me, os.getuid(), "me", "/r/mine"))
    dead = replace(me, start=me.start + 7)
    _plant(machine, f"{os.getuid()}-mine.json", Entry(dead, os.getuid(), "me", "/r/mine-dead"))
    _plant(machine, "65534-theirs.json", Entry(dead, 65534, "nobody", "/r/theirs-dead"), owner=65534)
    other = Machine(machine.path)  # a second reader (and writer) in this process
    assert [e.folder for e in other.read()] == ["/r/mine"]
    left = sorted(os.listdir(machine.path))
    assert f"{os.getuid()}-mine.json" not in left and "65534-theirs.json" in left
    machine.withdraw()
    assert other.read() == []


def test_a_writer_lives_while_it_holds_its_lock_whatever_proc_shows(tmp_path, monkeypatch):
    """Where /proc hides the writer's process (``hidepid``) its record counts while it holds
    the lock on its .life file, and not once it let go (it died): no /proc needed."""
    from sweeper.placement import liveness

    writer = Machine(str(tmp_path / "m"))
    assert writer.open()
    writer.publish(Entry(Life.of(), os.getuid(), "me", "/r/hidden"))
    monkeypatch.setattr(liveness, "_stat", lambda pid: None)  # /proc shows no process
    reader = Machine(writer.path)
    assert [e.folder for e in reader.read()] == ["/r/hidden"]
    assert writer._life is not None
    os.close(writer._life)  # as its death lets go of it
    writer._life = None
    assert reader.read() == [] and writer.file not in os.listdir(writer.path)


def test_another_pid_namespaces_records_are_never_removed_and_count_by_their_lock(tmp_path):
    """A container that shares the folder but not the pid namespace: its pids mean nothing
    here, so its record is neither removed nor taken as dead by them; its lock tells."""
    machine = Machine(str(tmp_path / "m"))
    assert machine.open()
    me = Life.of()
    away = replace(me, pid=2 ** 22 + 1, ns=me.ns + 1)  # a pid no process has here
    _plant(machine, f"{os.getuid()}-away.json", Entry(away, os.getuid(), "me", "/r/away"))
    assert Machine(machine.path).read() == [] and f"{os.getuid()}-away.json" in os.listdir(machine.path)
    with open(os.path.join(machine.path, f"{os.getuid()}-away.life"), "w") as life:
        fcntl.flock(life, fcntl.LOCK_EX)  # its writer, in the other namespace, holds its lock
        assert [e.folder for e in Machine(machine.path).read()] == ["/r/away"]


def test_a_record_counts_only_in_its_owners_name_and_under_a_name_nobody_can_take_first(tmp_path):
    """A record file not owned by the user it names, or naming a live process of another
    user, is skipped; a writer's files have a random name (nobody makes them first)."""
    machine = Machine(str(tmp_path / "m"))
    assert machine.open()
    assert re.fullmatch(rf"{os.getuid()}-[0-9a-f]{{16}}\.json", machine.file)
    assert Machine(machine.path).file != machine.file
    me = Life.of()
    with open(os.path.join(machine.path, "65534-forged.life"), "w") as life:
        fcntl.flock(life, fcntl.LOCK_EX)
        _plant(machine, "65534-forged.json", Entry(me, 65534, "nobody", "/r/forged"))  # root's file, nobody's name
        assert Machine(machine.path).read() == []
        os.chown(os.path.join(machine.path, "65534-forged.life"), 65534, -1) if os.getuid() == 0 else None
        _plant(machine, "65534-forged.json", Entry(me, 65534, "nobody", "/r/forged"), owner=65534)
        assert Machine(machine.path).read() == []  # nobody's file, naming root's live process


def test_the_folder_is_never_followed_through_a_link_and_its_files_are_readable_whatever_the_umask(tmp_path):
    """A link planted at the folder's path is refused (its target left as it was); files are
    made readable by every user, the lock writable by every user, under a umask of 077."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(victim)
    planted = Machine(str(tmp_path / "link"))
    assert not planted.open() and stat.S_IMODE(os.stat(victim).st_mode) == 0o700 and os.listdir(victim) == []
    old = os.umask(0o077)
    try:
        machine = Machine(str(tmp_path / "m"))
        assert machine.open()
        machine.publish(Entry(Life.of(), os.getuid(), "me", "/r/a"))
        with machine.locked():
            pass
    finally:
        os.umask(old)
    modes = {n: stat.S_IMODE(os.stat(os.path.join(machine.path, n)).st_mode) for n in os.listdir(machine.path)}
    assert modes == {machine.file: 0o644, f"{machine.stem}.life": 0o644, "lock": 0o666}
    assert stat.S_IMODE(os.stat(machine.path).st_mode) == 0o1777


def test_a_lock_held_by_a_stopped_process_is_waited_for_once_and_a_silent_want_ages_out(tmp_path, monkeypatch):
    """A holder that does not let go is waited for once, bounded and said naming it; the next
    decisions do not wait for it again. A want not rewritten lately counts for no one."""
    from sweeper.placement import machine as machine_module
    from sweeper.placement.record import WANT_STALE_S

    monkeypatch.setattr(machine_module, "LOCK_WAIT_S", 0.3)
    machine = Machine(str(tmp_path / "m"))
    assert machine.open()
    with open(os.path.join(machine.path, "lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a process stopped with it would
        t0 = time.monotonic()
        with machine.locked():
            pass
        first = time.monotonic() - t0
        t0 = time.monotonic()
        for _ in range(3):
            with machine.locked():
                pass
        assert first >= 0.3 and time.monotonic() - t0 < 0.3
    entry = Entry(Life.of(), 0, "u", "/r/a", want=Want(("GPU-1",), 4096, 1.0), written=100.0)
    assert entry.wants("GPU-1", 100.0 + WANT_STALE_S - 1) and not entry.wants("GPU-1", 100.0 + WANT_STALE_S + 1)


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
    from sweeper.placement.crowd import CROWDED_RERUNS, Crowd
    from sweeper.placement.slots import Slot

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


def test_a_waiter_larger_than_its_share_is_drained_for_not_starved():
    """A sweep of --per-gpu 2 (within its share) beside one whose trial takes the whole card
    and waited longer: it starts nothing that takes the room the waiter needs (the card
    drains for it), unless that room is held by processes no sweep's trial ending would free."""
    total = 16384
    big = share.Party("b", 1.0, 0, 15564, since=10.0)
    small = share.Party("a", 1.0, 0, 7782, since=20.0)
    assert share.room(total, small, [big, small], free_mb=16000, drainable_mb=16000) < 7782
    assert share.room(total, small, [big, small], free_mb=16000, drainable_mb=9000) >= 7782  # a stranger's: not drained
    later = share.Party("b", 1.0, 0, 15564, since=30.0)
    assert share.room(total, small, [later, small], free_mb=16000, drainable_mb=16000) == math.inf


def test_a_fixed_per_gpus_reservation_holds_the_cuda_context_and_blames_others_by_it():
    """Under --per-gpu 2 a trial reserves its cap and the context beside it, so a colleague's
    400 MB (an idle notebook's context) keeps the second trial waiting; an OOM beside it is the
    colleague's; an OOM at the trial's own cap is never excused."""
    from sweeper.placement.crowd import Crowd
    from sweeper.placement.slots import Slot

    slots = [Slot(i, "0", uuid="GPU-1", cap_mb=7782) for i in range(2)]
    crowd = Crowd(slots)
    reserve = crowd.nominal(slots[0], 16384)
    assert reserve > 7782 and 2 * reserve <= 16384 and 2 * reserve > 16384 - 400
    assert crowded(16384, 2 * reserve, 400)
    crowd.placed("t1", "t1", "0", reserve, 7782)
    crowd.evidence["t1"] = "gpu:0: pid 7 (bob, python hog.py) holds 400 MB"
    assert crowd.ended("t1", peak_mb=7782 + 300) == ""  # it had all its cap: its own OOM
    crowd.measure({"t2": 7782 + 300})  # not ours: nothing learned
    crowd.caps["t2"] = 7782
    crowd.measure({"t2": 7782 + 300})
    assert crowd.context_mb == 300 and crowd.nominal(slots[0], 16384) == 7782 + 300


def test_a_first_trial_beside_other_sweeps_is_capped_by_the_cards_room_not_its_share():
    """per_gpu auto: a trial not measured yet reserves its share but may grow into the card's
    room (a share is no reason to fail); one that still ran out waits for a bare card, as one
    that ran out twice does, and no guess after an OOM becomes every other point's prediction.
    On a small card it is never capped below MIN_CAP_MB, nor to nothing."""
    from sweeper.model.trial import Status, TrialResult
    from sweeper.placement.packing import MIN_CAP_MB

    alone = Needs().predict({})
    reserved, cap = terms(alone, Card("0", 16384, 16000, share_mb=5461, alone_mb=4000))
    assert reserved == 5461 and cap == 16000 - MARGIN_MB - CONTEXT_MB
    needs = Needs()
    oom = TrialResult(trial_id="t", name="t", index=0, params={"x": 1}, status=Status.OOM, attempts=1,
                      gpu_mem_cap_mb=8000)
    needs.learn(oom)
    assert needs.largest is None and needs.predict({"x": 2}).alone
    needs.learn(replace(oom, attempts=2))
    twice = needs.predict({"x": 1})
    assert twice.bare and terms(twice, Card("0", 16384, 16000, others_mb=500)) is None
    assert terms(twice, Card("0", 16384, 16000)) == (16000 - MARGIN_MB, 16000 - MARGIN_MB - CONTEXT_MB)
    assert terms(alone, Card("0", 4096, 1536)) is None  # a small card or MIG slice: it waits, never a cap of 0
    for total, free in ((5120, 5120), (5120, 3000), (4096, 4096)):
        fit = terms(alone, Card("0", total, free))
        assert fit is None or fit[1] >= MIN_CAP_MB, (total, free, fit)
