"""Packing on (fake) cards when trials fail, from the user's side.

* An underestimated trial that runs out of memory twice gets the largest card to itself
  (its whole room, nothing of the sweep's beside it), retries or not; an OOM there ends
  it ``oom`` with a row that says no card can hold it, naming the card's size, and no
  retry repeats it. The re-runs on other terms are attempts (``attempts`` counts every
  process the trial ran in) but spend none of ``--retries``.
* The breaker closes a card where every trial crashes under any ``per_gpu`` (a number,
  or ``--gpus`` alone), in one line; trials go to the other cards; with none left the
  sweep stops, saying so (exit 2).
* A ``--host-memory`` budget below a trial's measured peak is said once, in one line.

Whole sweeps run on the fake NVML's cards (tests/fake_nvml.py), whose trials take memory
as a framework does (``fake_nvml.allocate``: TensorFlow's OOM past their cap or their
card's free memory); the decisions are also tested in the process (``unit``).
"""

from __future__ import annotations

import logging

import pytest

import sweeper
import sweep_fns
from conftest import run_fake_cli, write_grid
from sweeper.placement.packing import CONTEXT_MB, MARGIN_MB, Card, Needs, Packer
from sweeper.placement.hostroom import HostRoom
from sweeper.model.trial import Status, TrialResult


def row(params, status=Status.OK, cap=None, device="gpu:0", name="t", mem=None):
    return TrialResult(trial_id="t1", name=name, index=0, params=params, status=status, device=device,
                       gpu_mem_cap_mb=cap, mem_peak_mb=mem)


@pytest.fixture
def machine(fake_nvml, monkeypatch):
    """The fake's cards, described to the trials too (their framework asks what is free)."""
    monkeypatch.setenv("SWEEPER_FAKE_NVML", fake_nvml.to_json())
    return fake_nvml


def cards_of(fake, monkeypatch, *sizes_mb: int):
    """The fake machine's cards made these sizes (in this order), told to the trials too."""
    from fake_nvml import Card as FakeCard

    fake.cards[:] = [FakeCard(total_mb=mb) for mb in sizes_mb]
    for i, card in enumerate(fake.cards):
        card.uuid = f"GPU-fa4e{i:04d}-0000-4000-8000-{i:012d}"  # crash_on=i names card i
    monkeypatch.setenv("SWEEPER_FAKE_NVML", fake.to_json())
    return fake


# -- the decisions, in the process -----------------------------------------------------------

@pytest.mark.unit
def test_after_two_ooms_the_largest_card_to_itself_and_an_oom_there_ends_it():
    packer = Packer(Needs(hint="1GB"), ["0", "1"])
    small, large = Card("0", 8192, 8192), Card("1", 16384, 16384)
    point = {"x": 1}
    first = packer.place(point, [small, large])
    assert first is not None and first.gpu == "0"  # best fit: the hint fits the smaller card
    for cap in (first.cap_mb, 3072):
        oom = row(point, Status.OOM, cap=cap)
        assert packer.again(oom) is True  # the prediction's fault: runs again, retries or not
        packer.recorded(oom)
    assert packer.last_resort(point)
    busy = Card("1", 16384, 12000, ours=((4000, 4000),))
    assert packer.place(point, [small, busy]) is None  # waits for the largest card: a smaller one cannot help
    spot = packer.place(point, [small, large])
    assert spot is not None and (spot.gpu, spot.need.source) == ("1", "oom twice")
    assert spot.reserved_mb == 16384 - MARGIN_MB and spot.cap_mb == 16384 - MARGIN_MB - CONTEXT_MB
    assert packer.place({"x": 2}, [Card("1", 16384, 16384 - 6000, ours=((spot.reserved_mb, 6000),))]) is None
    last = row(point, Status.OOM, cap=spot.cap_mb, device="gpu:1")
    assert packer.again(last) is None  # no card can hold it: never again, whatever the retries
    assert packer.again(row(point, Status.CRASHED)) is False  # as retries say
    assert not packer.breaker.closed  # an oom is the trial's size, not the card's fault


@pytest.mark.unit
def test_a_peak_over_the_whole_host_memory_budget_is_said_once(caplog):
    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "host-memory" in r.getMessage()]

    room = HostRoom(Needs(host=True), 200, watch_cores=False)
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        room.recorded(row({"x": 1}, device="cpu", name="x=1", mem=150))  # within the budget: nothing said
        assert said() == []
        room.recorded(row({"x": 2}, device="cpu", name="x=2", mem=612))
        room.recorded(row({"x": 3}, device="cpu", name="x=3", mem=700))
        assert said() == ["sweeper: trial x=2 peaked at 612 MB, over the whole --host-memory budget of 200 MB: "
                          "trials run one at a time and still exceed it; raise the budget or make the trials smaller"]
        unbounded = HostRoom(Needs(host=True), None, watch_cores=False)  # workers="auto" alone: no budget
        unbounded.recorded(row({"x": 2}, device="cpu", mem=99999))
        assert len(said()) == 1


# -- whole sweeps on the fake cards --------------------------------------------------------------

def test_an_underestimated_trial_gets_a_card_to_itself_after_its_second_oom(tmp_path, machine):
    """gpu_memory="1GB" for a trial that needs 6 GB: 1 GB, then 1.5x, then a card to itself
    (its whole room; nothing else is placed beside it: the unit test above), no retries asked."""
    df = sweeper.sweep(sweep_fns.packed, {"need_mb": [6000], "board": machine.board}, per_gpu="auto",
                       gpu_memory="1GB", out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"], df.error.tolist()
    assert df.attempts[0] == 3 and df.gpu_mem_reserved_mb[0] == 16384 - MARGIN_MB  # the card's whole room
    assert df.gpu_mem_cap_mb[0] == 16384 - MARGIN_MB - CONTEXT_MB
    log = (tmp_path / "sweep_fns" / "trials" / df.trial[0] / "log.txt").read_text()
    assert log.count("OOM when allocating tensor of 5700 MB") == 2  # under 1 GB, then under 1.5x


def test_a_trial_no_card_can_hold_ends_oom_saying_so_and_no_retry_repeats_it(tmp_path, fake_nvml, monkeypatch):
    machine = cards_of(fake_nvml, monkeypatch, 8192, 16384)
    df = sweeper.sweep(sweep_fns.packed, {"need_mb": [20000], "board": machine.board}, per_gpu="auto",
                       gpu_memory="1GB", retries=3, out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["oom"], df.error.tolist()
    assert df.attempts[0] == 3  # 1 GB, 1.5x, the largest card to itself: no retry runs it alike again
    assert df.device[0] == "gpu:1" and df.gpu_mem_reserved_mb[0] == 16384 - MARGIN_MB
    assert "no card here can hold it: it ran out with gpu:1, the largest card (16384 MB), to itself" in df.error[0]


def test_the_card_to_itself_is_an_attempt_but_spends_no_retry(tmp_path, fake_nvml, monkeypatch):
    """Two OOMs on the small card (best fit), then the large card to itself, where it crashes
    (crash_on=1): --retries 1 still runs it once more there."""
    machine = cards_of(fake_nvml, monkeypatch, 8192, 16384)
    df = sweeper.sweep(sweep_fns.packed, {"need_mb": [6000], "crash_on": [1], "board": machine.board},
                       per_gpu="auto", gpu_memory="1GB", retries=1, out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["crashed"] and df.device[0] == "gpu:1", df.error.tolist()
    assert df.attempts[0] == 4  # 2 packed re-runs, 1 retry


def test_a_card_where_every_trial_crashes_is_closed_under_a_fixed_per_gpu(tmp_path, machine, caplog):
    grid = {"need_mb": [500], "x": list(range(12)), "crash_on": [0], "board": machine.board}
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        df = sweeper.sweep(sweep_fns.packed, grid, per_gpu=2, out=str(tmp_path), progress=False)
    crashed = df[df.status == "crashed"]
    assert set(crashed.device) == {"gpu:0"} and 3 <= len(crashed) <= 4  # the one running when it closed too
    assert (df[df.status != "crashed"].status == "ok").all() and set(df[df.status == "ok"].device) == {"gpu:1"}
    said = [r.getMessage() for r in caplog.records if "takes no new trial" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("sweeper: gpu:0 takes no new trial: 3 trials in a row crashed")
    assert said[0].endswith("the sweep goes on on gpu:1")


def test_every_card_closed_under_gpus_alone_stops_the_sweep_with_exit_2(tmp_path, machine):
    grid = write_grid(tmp_path, f"from sweep_fns import packed as train\n"
                                f"grid = {{'need_mb': [500], 'x': list(range(12)), 'crash_on': ['all'], "
                                f"'board': {machine.board!r}}}\n")
    proc = run_fake_cli(machine, grid, "--gpus", "0,1", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no place left for the 6 trials still queued" in proc.stderr, proc.stderr
    assert proc.stdout.count("takes no new trial") == 2 and "no GPU is left" in proc.stdout
    df = sweeper.load(str(tmp_path / "grid"))
    assert len(df) == 6 and set(df.status) == {"crashed"}  # three a card, one at a time on each


def test_a_host_memory_budget_below_every_peak_is_said_once(tmp_path, caplog):
    room = tmp_path / "room"
    room.mkdir()
    grid = [{"i": i, "mb": 300, "room": str(room), "peers": 1} for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        df = sweeper.sweep(sweep_fns.hog, grid, host_memory="200MB", workers=3, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert (df.met == 1).all() and (df.mem_peak_mb > 200).all()  # one at a time, each over the budget
    said = [r.getMessage() for r in caplog.records if "host-memory budget" in r.getMessage()]
    assert len(said) == 1, said
    assert "over the whole --host-memory budget of 200 MB: trials run one at a time and still exceed it" in said[0]
