"""GPU placement, tested on any machine: memory policy and slot accounting as units, then
the NVML-dependent logic (inventory, UUID pinning, ``free``, other processes' memory, the
sampler) through one thin fake at the NVML boundary (tests/fake_nvml.py), with real
spawned children whose environment and table rows are checked.

What only a real card can show (caps in force, memory released) is in test_gpu_tier.py.
"""

from __future__ import annotations

import json

import pytest

import sweeper
import sweep_fns
from conftest import run_fake_cli, write_grid
from frames import most_at_once_in
from sweeper.system.capping import MemoryPolicy, resolve
from sweeper.system.gpus import inventory
from sweeper.model.outcome import oom_hint
from sweeper.placement.slots import parse_gpus, pick, place


# -- slot accounting ----------------------------------------------------------------------

@pytest.mark.parametrize(
    "per_gpu,fraction,growth,expect",
    [
        (None, None, False, MemoryPolicy(1, 0.95)),
        (2, None, False, MemoryPolicy(2, 0.475)),
        (None, 0.3, False, MemoryPolicy(3, 0.3)),  # k = int(1 / f): as many trials as whole shares fit
        (None, 0.25, False, MemoryPolicy(4, 0.25)),
        (None, 0.6, False, MemoryPolicy(1, 0.6)),
        (2, 0.5, False, MemoryPolicy(2, 0.5)),
        (3, None, True, MemoryPolicy(3, None, True)),
    ],
)
@pytest.mark.unit
def test_per_gpu_and_fraction_follow_each_other(per_gpu, fraction, growth, expect):
    assert resolve(per_gpu, fraction, growth) == expect


@pytest.mark.parametrize("per_gpu,fraction,growth,words", [
    (2, 0.6, False, "asks for 1.2"), (None, 1.5, False, "(0, 1]"), (None, 0.5, True, "choose one"),
])
@pytest.mark.unit
def test_impossible_memory_requests_are_refused(per_gpu, fraction, growth, words):
    with pytest.raises(sweeper.SweepError, match=words.replace("(", r"\(").replace("]", r"\]")):
        resolve(per_gpu, fraction, growth)


@pytest.mark.unit
def test_memory_policy_environment():
    assert MemoryPolicy(2, 0.5).env(16000) == {
        "SWEEPER_MEMORY_FRACTION": "0.5", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5",
        "SWEEPER_MEMORY_LIMIT_MB": "8000"}
    growth = MemoryPolicy(2, None, True).env(16000)
    assert growth["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and growth["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert MemoryPolicy(1, 0.95).env(None).get("SWEEPER_MEMORY_LIMIT_MB") is None  # size unknown


@pytest.mark.unit
def test_parse_gpus():
    assert parse_gpus(None) == "all" and parse_gpus("none") == "none" and parse_gpus("FREE") == "free"
    assert parse_gpus("0,2") == ["0", "2"] and parse_gpus([0, 2]) == ["0", "2"] and parse_gpus(1) == ["1"]
    assert parse_gpus("GPU-abc,MIG-def") == ["GPU-abc", "MIG-def"]
    for bad in ("zero", "0,0", ""):
        with pytest.raises(sweeper.SweepError):
            parse_gpus(bad)


@pytest.mark.unit
def test_oom_hint_names_the_cap_and_the_knobs():
    assert "4800 MB on gpu:1" in oom_hint("gpu:1", 4800, "0.3") and "--per-gpu" in oom_hint("gpu:1", 4800)
    assert "a cap of 0.3 of the card on gpu:1" in oom_hint("gpu:1", None, "0.3")
    assert "memory growth" in oom_hint("gpu:1")
    assert "--workers" in oom_hint("cpu")


# -- what the children saw ----------------------------------------------------------------



def _seen(folder, trial: str) -> dict:
    """The environment a gpu_env trial started with (its seen.json)."""
    import json

    return json.loads((folder / "trials" / trial / "seen.json").read_text())


# -- NVML, through the fake: inventory ----------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("as_bytes", [False, True])  # older nvidia-ml-py answers bytes
def test_inventory_reads_every_card(fake_nvml, as_bytes):
    fake_nvml.as_bytes = as_bytes
    fake_nvml.cards[1].others = {4242: 3000, 4243: None}
    fake_nvml.cards[1].reserved_mb = 500
    found = inventory()
    assert [(g.index, g.uuid, g.name, g.total_mb) for g in found] == [
        (i, c.uuid, "NVIDIA Fake A100 16GB", 16384) for i, c in enumerate(fake_nvml.cards)]
    assert found[0].used_mb == 0 and found[0].processes == () and found[0].others_mb == 0
    assert found[1].used_mb == 3500 and found[1].processes == ((4242, 3000), (4243, None))
    assert found[1].others_mb == 3500  # memory NVML cannot attribute is not taken as none
    assert fake_nvml.inits == fake_nvml.shutdowns == 1


@pytest.mark.unit
@pytest.mark.parametrize("broken", ["nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUUID", "nvmlDeviceGetCount"])
def test_a_driver_that_fails_midway_means_no_gpus_and_says_why(fake_nvml, caplog, broken):
    import pynvml

    fake_nvml.fail[broken] = pynvml.NVMLError_GpuIsLost(pynvml.NVML_ERROR_GPU_IS_LOST)
    with caplog.at_level("INFO", logger="sweeper"):
        placement = place("all", MemoryPolicy(1, 0.95), workers=2)
    assert placement.policy is None and [s.device for s in placement.slots] == ["cpu"] * 2
    assert any("NVML failed while listing GPUs" in r.getMessage() and "running on the CPU" in r.getMessage()
               for r in caplog.records)
    assert fake_nvml.inits == fake_nvml.shutdowns == 1  # NVML is shut down on the error path too


@pytest.mark.unit
def test_a_process_list_nvml_refuses_is_no_processes(fake_nvml):
    import pynvml

    fake_nvml.fail["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVMLError_NoPermission(
        pynvml.NVML_ERROR_NO_PERMISSION)
    assert [g.processes for g in inventory()] == [(), ()]


@pytest.mark.unit
def test_missing_nvml_falls_back_to_the_cpu(no_nvml, caplog):
    with caplog.at_level("INFO", logger="sweeper"):
        placement = place("all", MemoryPolicy(1, 0.95), workers=3)
    assert placement.policy is None and [s.device for s in placement.slots] == ["cpu"] * 3
    assert all(s.env["CUDA_VISIBLE_DEVICES"] == "-1" for s in placement.slots)
    assert any("NVML Shared Library Not Found" in r.getMessage() and "running on the CPU" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(sweeper.SweepError, match="--gpus 0: no GPU can be found on this machine"):
        place(["0"], MemoryPolicy(1, 0.95), None)  # never a silent label


@pytest.mark.unit
def test_without_nvml_the_users_cuda_visible_devices_names_the_gpus(no_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    placement = place("all", MemoryPolicy(2, 0.475), None)
    assert [(s.gpu, s.env["CUDA_VISIBLE_DEVICES"], s.cap_mb) for s in placement.slots] == [
        ("0", "0", None), ("1", "1", None), ("0", "0", None), ("1", "1", None)]  # size unknown: no MB
    assert "SWEEPER_MEMORY_LIMIT_MB" not in placement.slots[0].env
    assert placement.slots[0].env["SWEEPER_MEMORY_FRACTION"] == "0.475"
    with pytest.raises(sweeper.SweepError, match="outside CUDA_VISIBLE_DEVICES=0,1"):
        place(["2"], MemoryPolicy(1, 0.95), None)


# -- NVML, through the fake: placement ----------------------------------------------------

@pytest.mark.unit
def test_slots_pin_cards_by_uuid_and_spread_to_the_least_loaded_first(fake_nvml):
    slots = place("all", MemoryPolicy(2, 0.475), workers=None).slots
    uuids = [c.uuid for c in fake_nvml.cards]
    assert [s.gpu for s in slots] == ["0", "1", "0", "1"]
    for s in slots:
        assert s.env["CUDA_VISIBLE_DEVICES"] == s.uuid == uuids[int(s.gpu)]
        assert s.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and s.env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.475"
        assert s.cap_mb == int(0.475 * 16384) and s.env["SWEEPER_MEMORY_LIMIT_MB"] == str(s.cap_mb)
    busy = [slots[0]]  # gpu 0 has one trial
    assert pick([s for s in slots if s not in busy], busy).gpu == "1"
    assert pick([slots[3]], [slots[0], slots[1], slots[2]]).gpu == "1"


@pytest.mark.unit
def test_gpus_by_index_or_uuid_and_one_that_is_not_there(fake_nvml):
    second = fake_nvml.cards[1].uuid
    assert [(s.gpu, s.uuid) for s in place(["1"], MemoryPolicy(1, 0.95), None).slots] == [("1", second)]
    assert [(s.gpu, s.uuid) for s in place([second], MemoryPolicy(1, 0.95), None).slots] == [("1", second)]
    with pytest.raises(sweeper.SweepError, match=r"no GPU 2 on this machine \(NVML lists 0, 1\)"):
        place(["0", "2"], MemoryPolicy(1, 0.95), None)


@pytest.mark.parametrize("visible,expect", [
    ("1", ["1"]), ("1,0", ["0", "1"]), ("uuid0", ["0"]), ("1,-1,0", ["1"]), ("-1", []), ("", []),
])
@pytest.mark.unit
def test_the_users_cuda_visible_devices_is_never_left(fake_nvml, monkeypatch, visible, expect):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible.replace("uuid0", fake_nvml.cards[0].uuid))
    placement = place("all", MemoryPolicy(1, 0.95), None)
    assert sorted(s.gpu for s in placement.slots if s.gpu is not None) == expect
    if expect:
        with pytest.raises(sweeper.SweepError, match="outside CUDA_VISIBLE_DEVICES"):
            place([str(1 - int(expect[0]))] if len(expect) == 1 else ["7"], MemoryPolicy(1, 0.95), None)
    else:
        assert placement.policy is None  # CPU


@pytest.mark.unit
def test_free_skips_cards_other_processes_hold(fake_nvml):
    fake_nvml.cards[0].others = {4242: 2048}
    placement = place("free", MemoryPolicy(1, 0.95), None)
    assert [s.gpu for s in placement.slots] == ["1"] and [g.index for g in placement.skipped] == [0]
    fake_nvml.cards[0].others = {4242: 1023}  # under 1 GB: a stray context, the card is free
    assert [s.gpu for s in place("free", MemoryPolicy(1, 0.95), None).slots] == ["0", "1"]
    fake_nvml.cards[0].others = {4242: None}  # listed, its memory unknown: the card's use decides
    fake_nvml.cards[0].reserved_mb = 6000
    assert [s.gpu for s in place("free", MemoryPolicy(1, 0.95), None).slots] == ["1"]
    fake_nvml.cards[0].others = {}  # none listed, yet 6000 MB used: NVML cannot see who holds it
    assert [s.gpu for s in place("free", MemoryPolicy(1, 0.95), None).slots] == ["1"]
    fake_nvml.cards[0].reserved_mb = 500  # the driver's reserve on an idle card
    assert [s.gpu for s in place("free", MemoryPolicy(1, 0.95), None).slots] == ["0", "1"]
    fake_nvml.cards[1].others = {4343: 9000}
    fake_nvml.cards[0].reserved_mb = 6000
    with pytest.raises(sweeper.SweepError, match="no free GPU"):
        place("free", MemoryPolicy(1, 0.95), None)


@pytest.mark.unit
def test_unlike_cards_numbered_by_cuda_get_a_warning(fake_nvml, monkeypatch, caplog):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with caplog.at_level("WARNING", logger="sweeper"):
        place("all", MemoryPolicy(1, 0.95), None)  # alike cards: CUDA's order is the bus order
        assert not caplog.records
        fake_nvml.cards[1].name = "NVIDIA Fake T4"
        place("all", MemoryPolicy(1, 0.95), None)
        assert "set CUDA_DEVICE_ORDER=PCI_BUS_ID or give UUIDs" in caplog.text
        caplog.clear()
        monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        place("all", MemoryPolicy(1, 0.95), None)
        assert not caplog.records


# -- NVML, through the fake: what the children saw ----------------------------------------

def test_uuid_pinning_reaches_each_child_and_its_row(tmp_path, fake_nvml):
    df = sweeper.sweep(sweep_fns.gpu_env, {"x": list(range(8))}, per_gpu=2, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    spans = [(*json.loads((tmp_path / "sweep_fns" / "trials" / row.trial / "span.json").read_text()), row.device)
             for row in df.itertuples()]
    assert set(df.device) == {"gpu:0", "gpu:1"} and most_at_once_in(spans) == 2
    for row in df.itertuples():
        env = _seen(tmp_path / "sweep_fns", row.trial)
        card = fake_nvml.cards[int(row.device[4:])]
        assert env["CUDA_VISIBLE_DEVICES"] == card.uuid == row.gpu_uuid  # the card it is recorded on
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["SWEEPER_MEMORY_LIMIT_MB"] == str(row.gpu_mem_cap_mb) == str(int(0.475 * 16384))
    assert (df.n_ids == 1).all() and (df.xla_fraction == 0.475).all()
    assert df.gpu_mem_peak_mb.isna().all()  # they held no GPU memory: no peak, not a peak of 0


def test_peak_gpu_memory_is_sampled_per_trial(tmp_path, fake_nvml):
    df = sweeper.sweep(sweep_fns.gpu_env, {"mb": [300, 700, 1100], "board": fake_nvml.board, "hold": 0},
                       per_gpu=2, out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.set_index("param_mb").gpu_mem_peak_mb.to_dict() == {300: 300, 700: 700, 1100: 1100}
    assert df.gpu_mem_peak_mb.dtype == "Int64"


def test_a_command_trials_script_is_sampled_too(tmp_path, fake_nvml):
    """The script runs below the trial's process: its memory is the trial's."""
    import shlex
    import sys

    from conftest import HERE

    script = tmp_path / "holder.py"
    script.write_text(f"import sys\nsys.path.insert(0, {HERE!r})\nimport fake_nvml\n"
                      f"fake_nvml.hold({fake_nvml.board!r}, int(sys.argv[1]))\nprint('{{\"done\": 1}}')\n")
    df = sweeper.sweep(f"{shlex.quote(sys.executable)} {script} {{mb}}", {"mb": [400, 800]}, gpus="0",
                       out=str(tmp_path), name="cmd", progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.set_index("param_mb").gpu_mem_peak_mb.to_dict() == {400: 400, 800: 800}


def test_gpu_oom_names_the_device_and_its_cap(tmp_path, fake_nvml):
    df = sweeper.sweep(sweep_fns.crash, {"how": ["oom_text"]}, gpus="1", per_gpu=2, out=str(tmp_path),
                       progress=False)
    assert df.status.tolist() == ["oom"] and df.gpu_uuid.tolist() == [fake_nvml.cards[1].uuid]
    assert "hint: it ran under a cap of 7782 MB on gpu:1" in df.error[0] and "--per-gpu" in df.error[0]


def test_jax_and_growth_settings_reach_the_child(tmp_path, fake_nvml, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    df = sweeper.sweep(sweep_fns.gpu_env, {"hold": [0]}, gpus="0", memory_fraction=0.3,
                       out=str(tmp_path), progress=False)
    assert df.xla_fraction.tolist() == [0.3] and df.tf_growth.tolist() == [0]
    assert df.gpu_mem_cap_mb.tolist() == [int(0.3 * 16384)]
    grow = sweeper.sweep(sweep_fns.gpu_env, {"hold": [0]}, gpus="0", memory_growth=True,
                         out=str(tmp_path), name="grow", progress=False)
    env = _seen(tmp_path / "grow", grow.trial[0])
    assert grow.tf_growth.tolist() == [1] and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "SWEEPER_MEMORY_LIMIT_MB" not in env and grow.gpu_mem_cap_mb.isna().all()


@pytest.mark.slow
def test_tensorflow_trial_pinned_to_a_card_it_cannot_see_runs_on_the_cpu(tmp_path, fake_nvml):
    """The fake card's UUID is no CUDA device here (nor on a real GPU machine): TensorFlow
    sees no GPU, says so, and the trial runs on the CPU."""
    df = sweeper.sweep(sweep_fns.tf_matmul, {"x": [1]}, gpus=[0], memory_fraction=0.5,
                       out=str(tmp_path), progress=False)
    assert df.status.tolist() == ["ok"], df.error.tolist()
    assert df["sum"].tolist() == [64.0] and df.gpus_seen.tolist() == [0] and df.cap_said.tolist() == [1]


def test_dry_run_shows_the_gpu_plan(tmp_path, fake_nvml):
    fake_nvml.cards[0].others = {4242: 2048}
    grid = write_grid(tmp_path, "from sweep_fns import gpu_env as train\ngrid = {'x': list(range(6))}\n")
    done = run_fake_cli(fake_nvml, grid, "--per-gpu", "2", "--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    first, second = fake_nvml.cards
    assert (f"gpu:0 NVIDIA Fake A100 16GB {first.uuid}: 14336 MB free of 16384 MB; "
            f"other processes: pid 4242 2048 MB") in done.stdout
    assert "4 slots: 2 per GPU on gpu:0, gpu:1; cap per trial: 0.475 of the card = 7782 MB" in done.stdout
    starts = [line.split()[-1] for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert starts == ["gpu:0", "gpu:1", "gpu:0", "gpu:1", "queued", "queued"]
    free = run_fake_cli(fake_nvml, grid, "--gpus", "free", "--dry-run", "--out", str(tmp_path))
    assert "gpu:0 skipped: other processes hold 2048 MB" in free.stdout
    assert "1 slots: 1 per GPU on gpu:1" in free.stdout


def test_on_a_gpu_the_cli_imports_the_grid_file_once_per_trial(tmp_path, fake_nvml):
    """The process that reads the grid file sees no GPU and runs no trial; then three
    trials, three imports, each in the trial's own process (the fork server imports
    installed libraries only), on GPU machines as on CPU ones."""
    marks = tmp_path / "imports.txt"
    grid = write_grid(tmp_path, f"import os\nopen({str(marks)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
                                "from sweep_fns import gpu_env as train\ngrid = {'x': [1, 2, 3], 'hold': 0}\n")
    done = run_fake_cli(fake_nvml, grid, "--per-gpu", "2", "--quiet", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    imports = [int(pid) for pid in marks.read_text().split()]
    headers = [p.read_text().splitlines()[0] for p in (tmp_path / "out" / "grid" / "trials").glob("*/log.txt")]
    assert len(imports) == 4 and all(sum(f"pid {pid}," in h for h in headers) == 1 for pid in imports[1:])
    assert f"pid {imports[0]}," not in " ".join(headers)  # the reader ran no trial
    uuids = {json.loads(p.read_text())["CUDA_VISIBLE_DEVICES"]
             for p in (tmp_path / "out" / "grid" / "trials").glob("*/seen.json")}
    assert uuids <= {c.uuid for c in fake_nvml.cards} and len(uuids) == 2
