"""per_gpu="auto": trials packed on GPUs by the memory they measurably need.

The predictions and the placement rule are tested in the process (``unit``); whole sweeps
run on the fake NVML's cards (tests/fake_nvml.py), whose trials take memory as a framework
does (:func:`fake_nvml.allocate`: OOM past their cap or their card's free memory) and
whose peaks the parent samples, as on a GPU machine.
"""

from __future__ import annotations

import logging
import math
import os

import pytest

import sweeper
import sweep_fns
from conftest import run_fake_cli, write_grid
from sweeper.errors import SweepError
from sweeper.model.options import Options, megabytes
from sweeper.model.protocol import Began
from sweeper.placement.packing import CONTEXT_MB, EARLY_HEADROOM, HEADROOM, MARGIN_MB, PATIENCE, Card, Needs, Packer, terms
from sweeper.model.trial import Status, TrialResult


def row(params, status=Status.OK, peak=None, cap=None, device="gpu:0", name="t"):
    return TrialResult(trial_id="t1", name=name, index=0, params=params, status=status, device=device,
                       gpu_mem_peak_mb=peak, gpu_mem_cap_mb=cap)


# -- predictions, in the process -----------------------------------------------------------

@pytest.mark.unit
def test_predictions_come_from_the_point_then_alike_points_else_a_card_to_itself():
    needs = Needs(memory_keys=["units"])
    assert needs.predict({"units": 64, "lr": 0.1}).alone  # nothing measured
    needs.learn(row({"units": 64, "lr": 0.1}, peak=2000))
    assert needs.predict({"units": 64, "lr": 0.1}) .source == "same point"
    alike = needs.predict({"units": 64, "lr": 0.5})
    assert (alike.mb, alike.source) == (2000, "memory_keys")
    assert needs.predict({"units": 512, "lr": 0.1}).alone  # another shape: a card to itself, until measured
    needs.learn(row({"units": 64, "lr": 0.5}, peak=2600))
    assert needs.predict({"units": 64, "lr": 0.9}).mb == 2600  # the most any alike point held
    assert Needs(memory_keys=["units"]).predict({"units": 1}).alone  # nothing measured: a card to itself
    assert needs.predict({"units": 64, "lr": 0.1}).mb == 2600  # its own, or more where an alike point needed it


@pytest.mark.unit
def test_without_memory_keys_the_largest_so_far_predicts_and_a_hint_comes_before():
    needs = Needs()
    needs.learn(row({"x": 1}, peak=900))
    needs.learn(row({"x": 2}, peak=3000))
    assert (needs.predict({"x": 3}).mb, needs.predict({"x": 3}).source) == (3000, "largest so far")
    hinted = Needs(hint=lambda p: f"{p['x']}GB")
    assert (hinted.predict({"x": 3}).mb, hinted.predict({"x": 3}).source) == (3072, "hint")
    hinted.learn(row({"x": 3}, peak=5000))
    assert hinted.predict({"x": 3}).mb == 5000  # a measurement says more than the hint


@pytest.mark.unit
def test_an_oom_grows_the_need_and_a_second_gives_a_card_to_itself():
    needs = Needs(memory_keys=["units"])
    needs.learn(row({"units": 8}, Status.OOM, peak=None, cap=2000))
    grown = needs.predict({"units": 8})
    assert grown.mb == 1.5 * (2000 + CONTEXT_MB) and grown.source == "same point"
    assert needs.predict({"units": 8, "other": 1}).mb == grown.mb  # alike points learn it too
    needs.learn(row({"units": 8}, Status.OOM, peak=None, cap=3250))
    assert needs.predict({"units": 8}).alone
    blind = Needs()
    blind.learn(row({"x": 1}, Status.OOM))  # no cap, no peak: nothing to grow
    assert blind.predict({"x": 1}).alone and blind.largest is None


@pytest.mark.unit
def test_terms_reserve_the_need_plus_headroom_and_cap_below_it_by_the_context():
    card = Card("0", 16384, 16000)
    reserved, cap = terms(Needs(hint="4GB").predict({}), card)
    assert reserved == math.ceil(4096 * (1 + HEADROOM)) and cap == max(4096, reserved - CONTEXT_MB)
    big = terms(Needs(hint="30GB").predict({}), Card("0", 81920, 80000))
    assert big == (math.ceil(30720 * (1 + HEADROOM)), math.ceil(30720 * (1 + HEADROOM)) - CONTEXT_MB)
    small = terms(Needs(hint="1GB").predict({}), card)
    assert small == (math.ceil(1024 * (1 + HEADROOM)), 1024)  # never capped below the need itself
    alone = Needs().predict({})
    assert terms(alone, card) == (16000 - MARGIN_MB, 16000 - MARGIN_MB - CONTEXT_MB)
    busy = Card("0", 16384, 12000, ours=((2000, 1500),))
    assert terms(alone, busy) is None  # a card to itself only where none of ours runs
    assert busy.room == 12000 - 500 - MARGIN_MB  # reserved and not yet held counts as taken


@pytest.mark.unit
def test_placement_is_best_fit_waits_when_nothing_fits_and_an_empty_card_takes_any():
    packer = Packer(Needs(hint="7GB"), ["0", "1"])
    roomy, snug = Card("0", 16384, 16000), Card("1", 16384, 9000)
    assert packer.place({}, [roomy, snug]).gpu == "1"  # the least room left after it
    full = Card("1", 16384, 9000, ours=((7500, 7500), (1000, 0)))  # room 9000 - 1000 - 512 < 7 GB + 5%
    assert packer.place({}, [full]) is None  # it waits
    crowded = Card("0", 16384, 8000)  # another user holds half of it
    assert Packer(Needs(hint="10GB"), ["0"]).place({}, [crowded]) is None  # it waits for room, whoever holds it
    huge = Packer(Needs(hint="40GB"), ["0"])
    spot = huge.place({}, [roomy])
    assert spot.gpu == "0" and spot.reserved_mb == 40960  # nowhere fits: an empty card takes it


@pytest.mark.unit
def test_a_trial_that_fits_nowhere_has_a_card_drained_for_it_not_starved():
    packer = Packer(Needs(hint=lambda p: p["gb"] * 1024), ["0", "1"])
    cards = [Card("0", 16384, 9000, ours=((6000, 6000),)), Card("1", 16384, 12000, ours=((3000, 3000),))]
    assert packer.place({"gb": 12}, cards) is None  # fits nowhere now: it waits, others may pass it
    for _ in range(PATIENCE):
        assert packer.place({"gb": 2}, cards) is not None
    assert packer.draining is None
    assert packer.place({"gb": 12}, cards) is None  # passed PATIENCE times: a card is kept for it
    assert packer.draining == ("1", '{"gb": 12}')  # the one closest to fitting it
    assert packer.place({"gb": 2}, cards).gpu == "0"  # a small one still passes it, but not on card 1
    assert packer.place({"gb": 8}, [cards[1]]) is None
    emptied = Card("1", 16384, 16000)
    assert packer.place({"gb": 12}, [cards[0], emptied]).gpu == "1" and packer.draining is None


@pytest.mark.unit
def test_the_breaker_closes_a_card_after_three_crashes_in_a_row(caplog):
    packer = Packer(Needs(), ["0", "1"])
    breaker = packer.breaker
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        for status in (Status.CRASHED, Status.CRASHED, Status.OK, Status.CRASHED, Status.CRASHED, Status.OOM):
            breaker.learn(row({"x": 1}, status, device="gpu:0"))
        assert not breaker.closed  # an ok between resets the count; an oom is the trial's size, not the card
        breaker.learn(row({"x": 1}, Status.CRASHED, device="gpu:0", name="t7"))
    assert "0" in breaker.closed and packer.exhausted is None
    assert packer.place({}, [Card("0", 16384, 16000)]) is None
    assert caplog.text.count("takes no new trial") == 1 and "the last: t7" in caplog.text
    for _ in range(3):
        breaker.learn(row({"x": 1}, Status.CRASHED, device="gpu:1"))
    assert "no GPU is left" in caplog.text and "gpu:0:" in packer.exhausted


@pytest.mark.unit
def test_options_say_what_is_wrong_in_one_line():
    assert megabytes("6GB") == 6144 and megabytes("512mb") == 512 and megabytes(2000) == 2000
    assert megabytes("1.5GiB") == 1536
    for bad in ("six", "-1GB", True, "inf"):
        with pytest.raises(SweepError, match="gpu_memory must be a positive size"):
            Options(per_gpu="auto", gpu_memory=bad).checked()
    with pytest.raises(SweepError, match="memory_keys goes with per_gpu='auto', workers='auto' or host_memory"):
        Options(memory_keys=["units"]).checked()
    with pytest.raises(SweepError, match="drop memory_fraction"):
        Options(per_gpu="auto", memory_fraction=0.5).checked()
    with pytest.raises(SweepError, match="memory_keys must be a list"):
        Options(per_gpu="auto", memory_keys="units").checked()
    for ray in ({"per_gpu": "auto"}, {"workers": "auto"}, {"host_memory": "3GB"}):
        with pytest.raises(SweepError, match="Ray places"):
            Options(backend="ray", **ray).checked()
    with pytest.raises(SweepError, match="host_memory must be a positive size"):
        Options(host_memory="lots").checked()
    with pytest.raises(SweepError, match="gpu_memory goes with per_gpu='auto'"):
        Options(gpu_memory="1GB", workers="auto").checked()
    with pytest.raises(SweepError, match="whole number >= 1 or 'auto'"):
        Options(per_gpu="many").checked()


# -- whole sweeps on the fake NVML's cards ---------------------------------------------------

@pytest.fixture
def machine(fake_nvml, monkeypatch):
    """The fake's cards, described to the trials too (their framework asks what is free)."""
    monkeypatch.setenv("SWEEPER_FAKE_NVML", fake_nvml.to_json())
    return fake_nvml


@pytest.mark.unit
def test_a_shape_is_measured_at_its_first_trials_first_epoch():
    """Its first trial's first epoch: what it holds is its shape's need until its end says
    more; the shape's others may start; its reservation shrinks to that plus EARLY_HEADROOM."""
    packer = Packer(Needs(memory_keys=["units"]), ["0", "1"])
    first, other = {"units": 64, "lr": 1}, {"units": 64, "lr": 2}
    spot = packer.place(first, [Card("0", 16384, 16384), Card("1", 16384, 16384)])
    assert spot is not None and spot.need.alone and spot.reserved_mb == 16384 - MARGIN_MB
    assert packer.place(other, [Card("1", 16384, 16384)]) is None  # waits for the measurement
    assert packer.first_epoch(first, spot, None) is None  # NVML showed nothing yet: nothing changes
    assert packer.first_epoch(first, spot, 3000) == math.ceil(3000 * (1 + EARLY_HEADROOM))
    assert packer.needs.predict(other).mb == 3000 and packer.needs.predict(other).source == "memory_keys"
    placed = packer.place(other, [Card("0", 16384, 16384 - 3000, ours=((3750, 3000),))])
    assert placed is not None and placed.reserved_mb == math.ceil(3000 * (1 + HEADROOM))
    later = row(first, peak=3600)  # its end says more: that counts
    packer.recorded(later)
    assert packer.needs.predict(other).mb == 3600
    hinted = Packer(Needs(hint="2GB"), ["0"])
    spot = hinted.place(first, [Card("0", 16384, 16384)])
    assert spot is not None and hinted.first_epoch(first, spot, 1500) is None  # measured already


@pytest.mark.unit
def test_only_the_end_of_an_epoch_of_training_measures_a_shape():
    """An epoch 0 (an evaluation before training: no gradients, no optimiser state yet) is
    no measurement of what training needs (it once did)."""
    from sweeper.backends.local.backend import _an_epoch
    from sweeper.model.protocol import Reports

    assert not _an_epoch(Reports([{"epoch": 0, "metrics": {"loss": 2.0}}]))
    assert not _an_epoch(Reports([{"epoch": "x", "metrics": {}}]))
    assert _an_epoch(Reports([{"epoch": 0, "metrics": {}}, {"epoch": 1, "metrics": {"loss": 1.0}}]))


def test_the_others_of_a_shape_join_its_first_trials_card_from_its_first_epoch(tmp_path, machine):
    """Keras reports epochs: the rest of a shape need not wait for its first trial's end.
    The first trial holds its memory and waits until another trial holds memory on its
    card beside it (a sentinel, 60 s at most): that happens only if its first epoch
    measured the shape and shrank its reservation."""
    grid = [{"size": "s", "need_mb": 2000, "lr": lr, "board": machine.board, "peers": 2, "epoch": lr == 1}
            for lr in (1, 2, 3)]
    df = sweeper.sweep(sweep_fns.packed, grid, per_gpu="auto", memory_keys=["size"], out=str(tmp_path),
                       progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    first = df.set_index("param_lr").loc[1]
    assert first.gpu_mem_reserved_mb == 16384 - MARGIN_MB  # placed unmeasured: a card to itself
    assert first.met >= 2, "no trial joined the first one's card while it ran"
    assert (df.device == first.device).all()  # best fit: beside it, not on the empty card


def test_the_first_of_a_shape_runs_alone_and_the_rest_share_a_card(tmp_path, machine):
    grid = {"size": ["s"], "need_mb": [2000], "lr": [1, 2, 3, 4, 5, 6], "board": machine.board, "peers": 2}
    grid = [dict(p, peers=1 if p["lr"] == 1 else 2) for p in sweeper.expand(grid)]
    df = sweeper.sweep(sweep_fns.packed, grid, per_gpu="auto", memory_keys=["size"], out=str(tmp_path),
                       progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    first, rest = df.iloc[0], df.iloc[1:]
    assert first.gpu_mem_reserved_mb == 16384 - MARGIN_MB  # unmeasured: a card to itself
    assert first.gpu_mem_peak_mb == 2000
    assert (rest.gpu_mem_reserved_mb == math.ceil(2000 * (1 + HEADROOM))).all() and (rest.gpu_mem_cap_mb == 2000).all()
    assert (rest.met >= 2).all()  # each shared its card with another trial while it held its memory
    assert (df.cap == df.gpu_mem_cap_mb).all()  # the cap each ran under is the one its row says
    seen = df.set_index("param_lr")
    assert (seen.grows == 1).all()  # TensorFlow and JAX grow to their cap, so a peak is a need, not a cap


def test_an_oom_runs_again_with_a_larger_reservation_without_retries(tmp_path, machine):
    df = sweeper.sweep(sweep_fns.packed, {"need_mb": [2500], "board": machine.board}, per_gpu="auto",
                       gpu_memory="2000MB", out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"] and df.attempts.tolist() == [2]
    assert df.gpu_mem_reserved_mb[0] == math.ceil(1.5 * (2000 + CONTEXT_MB) * (1 + HEADROOM))
    log = (tmp_path / "sweep_fns" / "trials" / df.trial[0] / "log.txt").read_text()
    assert "OOM when allocating tensor of 2200 MB: the allocator is capped at 2000 MB" in log


def test_cards_of_different_sizes_take_what_fits_them(tmp_path, fake_nvml, monkeypatch):
    from fake_nvml import Card as FakeCard

    fake_nvml.cards[:] = [FakeCard(total_mb=8192, uuid=fake_nvml.cards[0].uuid),
                          FakeCard(total_mb=40960, uuid=fake_nvml.cards[1].uuid)]
    monkeypatch.setenv("SWEEPER_FAKE_NVML", fake_nvml.to_json())
    df = sweeper.sweep(sweep_fns.packed, {"need_mb": [10000], "x": [1, 2, 3], "board": fake_nvml.board,
                                          "peers": 3}, per_gpu="auto", gpu_memory="10000MB", out=str(tmp_path),
                       progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert set(df.device) == {"gpu:1"} and (df.met == 3).all()  # three on the large card at once


def test_a_failing_card_is_closed_and_the_sweep_goes_on_on_the_other(tmp_path, machine, caplog):
    grid = {"need_mb": [1000], "x": [1, 2, 3, 4], "crash_on": [0], "board": machine.board}
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        df = sweeper.sweep(sweep_fns.packed, grid, per_gpu="auto", gpu_memory="1GB", retries=3,
                           out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert set(df.device) == {"gpu:1"} and "gpu:0 takes no new trial" in caplog.text


def test_no_card_left_stops_the_sweep_with_exit_2(tmp_path, machine):
    grid = write_grid(tmp_path, f"from sweep_fns import packed as train\n"
                                f"grid = {{'need_mb': [1000], 'x': list(range(12)), 'crash_on': ['all'], "
                                f"'board': {machine.board!r}}}\n")
    proc = run_fake_cli(machine, grid, "--per-gpu", "auto", "--gpu-memory", "1GB", "--out", str(tmp_path),
                        "--workers", "2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no place left for the" in proc.stderr and proc.stdout.count("takes no new trial") == 2
    df = sweeper.load(str(tmp_path / "grid"))
    assert 6 <= len(df) < 12 and set(df.status) == {"crashed"}


def test_dry_run_says_the_policy(tmp_path, machine):
    grid = write_grid(tmp_path, "from sweep_fns import packed as train\ngrid = {'units': [8, 64], 'need_mb': [100]}\n")
    proc = run_fake_cli(machine, grid, "--per-gpu", "auto", "--memory-keys", "units", "--dry-run", "--out",
                        str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"per_gpu auto: a trial starts on a card while its predicted need plus {HEADROOM:.0%}" in proc.stdout
    assert "points alike in units" in proc.stdout and "up to 8 per GPU" in proc.stdout
    assert f"its reservation less {CONTEXT_MB} MB for the CUDA context" in proc.stdout and "{" not in proc.stdout
    host = run_fake_cli(machine, grid, "--workers", "auto", "--host-memory", "3GB", "--dry-run", "--out", str(tmp_path))
    assert host.returncode == 0 and ("host memory: a trial starts while its predicted peak plus 20% fits under the "
                                     "3072 MB budget and the available memory less 1024 MB, and a measured idle core "
                                     "is free; a new shape first runs with the budget to itself") in host.stdout
    bad = run_fake_cli(machine, grid, "--per-gpu", "auto", "--memory-keys", "unit", "--dry-run", "--out",
                       str(tmp_path))
    assert bad.returncode == 2 and "memory_keys names 'unit', which no point of the grid has" in bad.stderr


def test_a_ledger_of_schema_3_gains_the_reserved_column_and_keeps_its_rows(tmp_path):
    import sqlite3

    from sweeper.store.ledger import SCHEMA_VERSION, Ledger

    ledger = Ledger(str(tmp_path))
    ledger.record(row({"x": 1}, peak=700, cap=900))
    ledger.close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:  # as the previous release left it
        db.execute("ALTER TABLE trials DROP COLUMN gpu_mem_reserved_mb")
        db.execute("PRAGMA user_version = 3")
    ledger = Ledger(str(tmp_path))
    try:
        (kept,) = ledger.results().values()
        assert (kept.gpu_mem_peak_mb, kept.gpu_mem_cap_mb, kept.gpu_mem_reserved_mb) == (700, 900, None)
    finally:
        ledger.close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9


@pytest.mark.unit
def test_under_auto_every_framework_cap_waits_for_the_trial(monkeypatch):
    """A standby imports TensorFlow before its trial comes; under per_gpu="auto" the cap is
    the trial's own, so it is applied when the trial begins (its env has it), not at import."""
    from sweeper.child import imports

    import sys

    capped: list[str] = []
    # TensorFlow alone, as a stand-in module: the frameworks this process imported stay as they are
    monkeypatch.setattr(imports, "_CAPS", {"tensorflow": lambda mod: capped.append("tensorflow")})
    monkeypatch.setattr(imports, "_SEEDS", {"tensorflow": lambda mod, seed: None})
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    monkeypatch.setenv("SWEEPER_MEMORY_AUTO", "1")
    hook = imports.OnImport()
    hook._ready("tensorflow", sys.modules["tensorflow"])
    assert capped == []  # imported in a standby: no cap yet
    hook.set_seed(7)
    assert capped == ["tensorflow"]  # the trial began: its cap now
    monkeypatch.delenv("SWEEPER_MEMORY_AUTO")
    fixed = imports.OnImport()
    fixed._ready("tensorflow", object())
    assert capped == ["tensorflow", "tensorflow"]  # a slot's own cap: at import, as before



# -- host memory: real allocations under a small budget ------------------------------------

def test_a_host_memory_budget_caps_what_runs_at_once(tmp_path):
    """Trials of 400 MB under a 1400 MB budget: the first runs alone (unmeasured), then two
    at a time (each reserves its measured peak, 400-480 MB, plus 20%: 2 fit, 3 do not), never three."""
    room = tmp_path / "room"
    room.mkdir()
    grid = [{"i": 0, "peers": 1}, {"i": 1, "peers": 2}, {"i": 2, "peers": 2}, {"i": 3}, {"i": 4}, {"i": 5}]
    grid = [dict(p, mb=400, room=str(room), busy_s=0.3) for p in grid]
    df = sweeper.sweep(sweep_fns.hog, grid, host_memory="1400MB", workers=4, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.met.max() == 2 and df.met[df.param_i.isin([1, 2])].tolist() == [2, 2]
    assert (df.mem_peak_mb >= 400).all()


def test_workers_auto_packs_by_host_memory_too(tmp_path):
    room = tmp_path / "room"
    room.mkdir()
    df = sweeper.sweep(sweep_fns.hog, {"i": [0, 1, 2, 3], "mb": [400], "room": str(room)}, workers="auto",
                       host_memory="1400MB", out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.met.max() <= 2  # whatever the idle cores: never more than memory allows



# -- the kernel's OOM killer, told apart from another SIGKILL --------------------------------

@pytest.mark.unit
def test_the_oom_kill_count_is_read_from_either_cgroup_version(tmp_path, monkeypatch):
    from sweeper.system import hostmem

    v2, v1 = tmp_path / "memory.events", tmp_path / "memory.oom_control"
    v2.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    monkeypatch.setattr(hostmem, "_oom_files", lambda: [str(tmp_path / "absent"), str(v2), str(v1)])
    assert hostmem.oom_kills() == 2
    monkeypatch.setattr(hostmem, "_oom_files", lambda: [str(v1)])
    assert hostmem.oom_kills() == 5
    monkeypatch.setattr(hostmem, "_oom_files", lambda: [str(tmp_path / "absent")])
    assert hostmem.oom_kills() is None


def test_a_trial_the_oom_killer_ended_is_oom_and_another_sigkill_is_crashed(tmp_path, monkeypatch):
    from sweeper.system import hostmem

    counter = tmp_path / "memory.events"
    counter.write_text("low 0\noom 0\noom_kill 0\n")
    monkeypatch.setattr(hostmem, "_oom_files", lambda: [str(counter)])
    df = sweeper.sweep(sweep_fns.sigkilled, [{"counter": str(counter)}], out=str(tmp_path), name="k",
                       progress=False)
    assert df.status.tolist() == ["oom"], df.error.tolist()
    assert "killed by the kernel's out-of-memory killer (the memory cgroup's oom_kill count went from 0 to 1" \
        in df.error[0] and "host memory ran out" in df.error[0]
    plain = sweeper.sweep(sweep_fns.sigkilled, [{"counter": ""}], out=str(tmp_path), name="p", progress=False)
    assert plain.status.tolist() == ["crashed"] and "SIGKILL" in plain.error[0]


# -- what status shows ------------------------------------------------------------------------

@pytest.mark.unit
def test_status_shows_each_cards_reservations_beside_what_nvml_says(fake_nvml, tmp_path):
    from sweeper.front.subcommands import card_lines
    from sweeper.store.ledger import Ledger
    from sweeper.model.trial import TrialSpec

    fake_nvml.cards[1].reserved_mb = 300  # the driver's own, as NVML shows it used
    ledger = Ledger(str(tmp_path))
    try:
        for i, (device, mb) in enumerate([("gpu:1", 2100), ("gpu:1", 4000), ("gpu:0", 15872), ("cpu", None)]):
            spec = TrialSpec(trial_id=f"t{i:012x}", name=f"x={i}", index=i, params={"x": i}, seed=0,
                             dir=str(tmp_path), device=device)
            ledger.mark_running(spec, Began(100 + i, device, reserved_mb=mb), "2026-12-04T00:00:00Z")
        running = ledger.running()
    finally:
        ledger.close()
    assert sorted(r["reserved_mb"] for r in running if r["reserved_mb"]) == [2100, 4000, 15872]
    assert card_lines(running) == ["gpu:0: 1 trial reserve 15872 MB; NVML: 0 MB used, 16384 MB free of 16384 MB",
                                   "gpu:1: 2 trials reserve 6100 MB; NVML: 300 MB used, 16084 MB free of 16384 MB"]
    assert card_lines([{"device": "gpu:0", "reserved_mb": None}]) == []  # fixed per_gpu, or an older ledger


def test_the_report_plots_each_trials_peak_against_its_reservation(tmp_path, machine):
    grid = {"size": ["s"], "need_mb": [1500], "x": [1, 2, 3], "board": machine.board}
    sweeper.sweep(sweep_fns.packed, grid, per_gpu="auto", memory_keys=["size"], out=str(tmp_path), progress=False)
    folder = tmp_path / "sweep_fns"
    from sweeper.results import report as analysis

    figures = analysis.figures(str(folder))
    assert "memory" in figures
    ax = figures["memory"].axes[0]
    assert ax.get_xlabel() == "reserved, MB" and len(ax.collections[0].get_offsets()) == 3
    html = open(analysis.write_html(str(folder))).read()
    assert "<h2>GPU memory</h2>" in html and 'class="memory"' in html
    plain = sweeper.sweep(sweep_fns.echo, {"x": [1, 2]}, out=str(tmp_path), name="plain", progress=False)
    assert len(plain) == 2 and "memory" not in analysis.figures(str(tmp_path / "plain"))


def test_another_users_process_on_a_card_is_said_once_and_counted_as_used(tmp_path, machine, monkeypatch, caplog):
    import subprocess
    import sys

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        machine.cards[0].others = {stranger.pid: 3000}
        monkeypatch.setenv("SWEEPER_FAKE_NVML", machine.to_json())
        grid = {"need_mb": [14000], "x": [1, 2, 3], "board": machine.board}
        with caplog.at_level(logging.WARNING, logger="sweeper"):
            df = sweeper.sweep(sweep_fns.packed, grid, per_gpu="auto", gpu_memory="14000MB", out=str(tmp_path),
                               progress=False)
    finally:
        stranger.kill()
        stranger.wait()
    assert (df.status == "ok").all(), df.error.tolist()
    assert set(df.device) == {"gpu:1"}  # 14 GB fits only where the stranger's 3 GB is not
    said = [r.getMessage() for r in caplog.records if "not this sweep's" in r.getMessage()]
    assert said == [f"sweeper: gpu:0: pid {stranger.pid}, not this sweep's, holds 3000 MB; counted as used"]


@pytest.mark.parametrize("leak_mb, said", [(5000, True), (200, False)], ids=["leaked", "within-tolerance"])
def test_memory_a_trial_leaves_on_its_card_is_said_once_and_counted_as_used(tmp_path, machine, monkeypatch,
                                                                           capsys, leak_mb, said):
    """Teardown: after a packed trial ends, its card's memory that no listed process holds
    must come back to within TEARDOWN_TOLERANCE_MB of what it was when the trial started;
    what does not within TEARDOWN_S is said once, with the trial's name, and counts as
    used: the next large trial goes to the other card."""
    from sweeper.placement import leftovers

    monkeypatch.setattr(leftovers, "TEARDOWN_S", 0.5)
    first = {"x": 1, "need_mb": 3000, "leak_mb": leak_mb, "board": machine.board}
    large = [{"x": x, "need_mb": 12000, "board": machine.board} for x in (2, 3)]
    df = sweeper.sweep(sweep_fns.packed, [first, *large], per_gpu="auto", workers=1, out=str(tmp_path),
                       gpu_memory=lambda p: f"{p['need_mb']}MB", progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    lines = [line for line in capsys.readouterr().out.splitlines() if "did not come back" in line]
    by_x = df.set_index("param_x")
    if said:
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"sweeper: gpu:{by_x.device[1][4:]}: 5000 MB did not come back") and \
            f"after trial {by_x.trial[1]} ended" in lines[0], lines
        assert set(by_x.device[[2, 3]]) == {"gpu:1"} and by_x.device[1] == "gpu:0"  # 12 GB fit only there
    else:
        assert lines == []


def test_the_fork_servers_probe_on_a_card_is_not_taken_for_a_leftover(machine, caplog):
    """A process of the sweep's fork server (its probe, which holds a context while it tries
    the card) carries the server's slot placeholder: placing the next trial meanwhile must
    neither kill it nor say it is a leftover (it once was killed)."""
    import subprocess
    import sys

    from sweeper.system import capping, procs
    from sweeper.model import contract
    from sweeper.backends.local.backend import LocalBackend
    from sweeper.placement.policy import SlotPlacement
    from sweeper.placement.slots import parse_gpus, place

    slots = place(parse_gpus("0"), capping.resolve("auto", None, False), None).slots
    placement = SlotPlacement(slots, packer=Packer(Needs(), ["0"]))
    backend = LocalBackend(None, slots, placement=placement)  # type: ignore[arg-type]
    backend.open()
    probe = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time; "
                               f"open(os.path.join({machine.board!r}, str(os.getpid())), 'w').write('{machine.cards[0].uuid} 600'); "
                               "print('held', flush=True); time.sleep(60)"],
        env={**os.environ, contract.SWEEP: backend.tag, contract.SLOT: procs.SLOT_PLACEHOLDER},
        stdout=subprocess.PIPE, text=True)
    try:
        assert probe.stdout.readline().strip() == "held"
        with caplog.at_level(logging.WARNING, logger="sweeper"):
            cards = placement.cards()  # what admits() does for the next queued trial
        assert probe.poll() is None, "the probe was killed"
        assert [c.free_mb for c in cards] == [16384 - 600]  # its memory counts as used
        assert not [r for r in caplog.records if str(probe.pid) in r.getMessage()]
    finally:
        probe.kill()
        probe.wait()
        backend.close()


def test_where_nvml_cannot_see_a_trials_memory_trials_run_one_per_card(tmp_path, machine, capsys):
    """A container whose NVML lists the host's pids: nothing is ever measured; rather than
    waiting for a measurement that never comes, unmeasured trials take a card each."""
    df = sweeper.sweep(sweep_fns.gpu_env, {"x": [1, 2, 3], "hold": [0.2]}, per_gpu="auto", out=str(tmp_path),
                       progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert set(df.device) == {"gpu:0", "gpu:1"} and df.gpu_mem_peak_mb.isna().all()
    assert capsys.readouterr().out.count("NVML did not show") == 1
