"""GPU placement on a machine without GPUs: what each child is told, with explicit ids.

GPU inventory (NVML), slot accounting and per-framework capping are separate units,
tested apart; the sweeps below check what the children actually saw.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import run_cli, write_grid
from sweeper.capping import MemoryPolicy, resolve
from sweeper.gpus import inventory
from sweeper.outcome import oom_hint
from sweeper.slots import Slot, parse_gpus, pick, place


# -- slot accounting ----------------------------------------------------------------------

@pytest.mark.parametrize(
    "per_gpu,fraction,growth,expect",
    [
        (None, None, False, MemoryPolicy(1, 0.95)),
        (2, None, False, MemoryPolicy(2, 0.475)),
        (None, 0.3, False, MemoryPolicy(3, 0.3)),  # k = int(1 / f), as in the seed document
        (None, 0.25, False, MemoryPolicy(4, 0.25)),
        (None, 0.6, False, MemoryPolicy(1, 0.6)),
        (2, 0.5, False, MemoryPolicy(2, 0.5)),
        (3, None, True, MemoryPolicy(3, None, True)),
    ],
)
def test_per_gpu_and_fraction_follow_each_other(per_gpu, fraction, growth, expect):
    assert resolve(per_gpu, fraction, growth) == expect


@pytest.mark.parametrize("per_gpu,fraction,growth,words", [
    (2, 0.6, False, "asks for 1.2"), (None, 1.5, False, "(0, 1]"), (None, 0.5, True, "choose one"),
])
def test_impossible_memory_requests_are_refused(per_gpu, fraction, growth, words):
    with pytest.raises(sweeper.SweepError, match=words.replace("(", r"\(").replace("]", r"\]")):
        resolve(per_gpu, fraction, growth)


@pytest.mark.usefixtures("two_gpus")
def test_slots_spread_to_the_least_loaded_gpu_first():
    placement = place(["0", "1"], MemoryPolicy(2, 0.475), workers=None)
    slots = placement.slots
    assert [s.gpu for s in slots] == ["0", "1", "0", "1"]
    busy = [slots[0]]  # gpu 0 has one trial
    assert pick([s for s in slots if s not in busy], busy).gpu == "1"
    busy = [slots[0], slots[1], slots[2]]
    assert pick([slots[3]], busy).gpu == "1"
    for s in slots:
        assert s.env["CUDA_VISIBLE_DEVICES"] == s.gpu and s.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert s.env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.475"


def test_memory_policy_environment():
    assert MemoryPolicy(2, 0.5).env(16000) == {
        "SWEEPER_MEMORY_FRACTION": "0.5", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5",
        "SWEEPER_MEMORY_LIMIT_MB": "8000"}
    growth = MemoryPolicy(2, None, True).env(16000)
    assert growth["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and growth["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert MemoryPolicy(1, 0.95).env(None).get("SWEEPER_MEMORY_LIMIT_MB") is None  # size unknown


def test_parse_gpus():
    assert parse_gpus(None) == "all" and parse_gpus("none") == "none" and parse_gpus("FREE") == "free"
    assert parse_gpus("0,2") == ["0", "2"] and parse_gpus([0, 2]) == ["0", "2"] and parse_gpus(1) == ["1"]
    assert parse_gpus("GPU-abc,MIG-def") == ["GPU-abc", "MIG-def"]
    for bad in ("zero", "0,0", ""):
        with pytest.raises(sweeper.SweepError):
            parse_gpus(bad)


def test_user_cuda_visible_devices_is_never_left(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(sweeper.SweepError, match="outside CUDA_VISIBLE_DEVICES=1"):
        place(["0"], MemoryPolicy(1, 0.95), None)
    if not inventory():  # NVML cannot tell: the user's list is what there is
        assert [s.gpu for s in place("all", MemoryPolicy(1, 0.95), None).slots] == ["1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert place("all", MemoryPolicy(1, 0.95), None).policy is None  # CPU


def test_missing_nvml_falls_back_to_the_cpu(caplog):
    if inventory():
        pytest.skip("this machine has a working NVML")
    with caplog.at_level("INFO", logger="sweeper"):
        placement = place("all", MemoryPolicy(1, 0.95), workers=3)
    assert placement.policy is None and [s.device for s in placement.slots] == ["cpu"] * 3
    assert any("running on the CPU" in r.getMessage() for r in caplog.records)


def test_oom_hint_names_the_cap_and_the_knobs():
    assert "4800 MB on gpu:1" in oom_hint("gpu:1", 4800, "0.3") and "--per-gpu" in oom_hint("gpu:1", 4800)
    assert "a cap of 0.3 of the card on gpu:1" in oom_hint("gpu:1", None, "0.3")
    assert "memory growth" in oom_hint("gpu:1")
    assert "--workers" in oom_hint("cpu")


# -- what the children saw ----------------------------------------------------------------

def _overlaps(df: pd.DataFrame) -> int:
    """Most trials running at once on one device, from recorded start times and durations."""
    events = []
    for row in df.itertuples():
        start = row.started_at.to_pydatetime()  # a UTC datetime in the frame
        events += [(start, 1, row.device), (start + timedelta(seconds=row.duration_s), -1, row.device)]
    most, now = 0, {}
    for _, step, device in sorted(events, key=lambda e: (e[0], e[1])):
        now[device] = now.get(device, 0) + step
        most = max(most, now[device])
    return most


@pytest.mark.usefixtures("two_gpus")
def test_explicit_gpus_two_per_gpu(tmp_path):
    df = sweeper.sweep(sweep_fns.gpu_env, {"x": list(range(8))}, gpus=[0, 1], per_gpu=2,
                       out=str(tmp_path), progress=False)
    assert (df.status == "ok").all()
    assert (df.n_ids == 1).all() and (df.pci_order == 1).all()
    assert set(df.cuda) == {0, 1} and set(df.device) == {"gpu:0", "gpu:1"}
    assert (df.device == "gpu:" + df.cuda.astype(int).astype(str)).all()  # recorded where it ran
    assert _overlaps(df) == 2
    assert (df.xla_fraction == 0.475).all()  # f = 0.95 / k
    assert {"gpu_uuid", "gpu_mem_cap_mb", "gpu_mem_peak_mb"} <= set(df.columns)


@pytest.mark.usefixtures("two_gpus")
def test_jax_trial_sees_the_fraction(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    df = sweeper.sweep(sweep_fns.gpu_env, {"hold": [0]}, gpus="0", memory_fraction=0.3,
                       out=str(tmp_path), progress=False)
    assert df.xla_fraction.tolist() == [0.3] and df.tf_growth.tolist() == [0]
    grow = sweeper.sweep(sweep_fns.gpu_env, {"hold": [0]}, gpus="0", memory_growth=True,
                         out=str(tmp_path), name="grow", progress=False)
    assert grow.tf_growth.tolist() == [1]


@pytest.mark.slow
@pytest.mark.usefixtures("two_gpus")
def test_tensorflow_trial_without_a_visible_gpu_runs_on_the_cpu(tmp_path):
    df = sweeper.sweep(sweep_fns.tf_matmul, {"x": [1]}, gpus=[0], memory_fraction=0.5,
                       out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"], df.error.tolist()
    assert df["sum"].tolist() == [64.0] and df.gpus_seen.tolist() == [0] and df.cap_said.tolist() == [1]


@pytest.mark.usefixtures("two_gpus")
def test_dry_run_shows_the_gpu_plan(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import gpu_env as train\ngrid = {'x': list(range(6))}\n")
    done = run_cli(grid, "--gpus", "0,1", "--per-gpu", "2", "--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "4 slots: 2 per GPU on gpu:0, gpu:1; cap per trial: 0.475 of the card" in done.stdout
    starts = [line.split()[-1] for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert starts == ["gpu:0", "gpu:1", "gpu:0", "gpu:1", "queued", "queued"]
