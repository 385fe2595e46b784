"""The GPU tier: real trials on a real card, with NVML read from outside the trials.

Every test here is marked ``gpu`` and skips, saying why, where NVML lists no GPU (or the
machine is the fake one of tests/fake_machine). A framework that is not installed skips
its own cases. Run the tier alone with ``python -m pytest -m gpu -v -rs`` (what
``bench/gpu_check.py`` does). Keras runs on whichever backend it has: ``KERAS_BACKEND=jax``
where TensorFlow is missing.

What "the cap holds" means here: NVML, sampled every 20 ms by the test, never shows a
trial's process above its cap plus :data:`MARGIN_MB`, the CUDA context and library
handles that no framework's cap covers.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pandas as pd
import pytest

import sweeper
import gpu_fns
from gpu_watch import MARGIN_MB, Watch, pids_visible, released
import sweep_fns
from conftest import HERE, ROOT

pytestmark = pytest.mark.gpu

FRAMEWORKS = ["tensorflow", "jax", "torch"]


def _real_cards():
    if os.environ.get("SWEEPER_FAKE_NVML"):
        pytest.skip("the fake GPU machine of tests/fake_machine: no real card")
    from sweeper.system import gpus

    found = gpus.inventory()
    if not found:
        pytest.skip(f"no GPU: {gpus.unavailable or 'NVML lists none'}")
    return found


@pytest.fixture(scope="module")
def cards():
    """The real cards NVML lists (the user's CUDA_VISIBLE_DEVICES respected)."""
    found = _real_cards()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = [g for g in found if str(g.index) in visible.split(",") or g.uuid in visible]
    if not found:
        pytest.skip(f"CUDA_VISIBLE_DEVICES={visible} hides every GPU")
    return found


def _holder(fw: str, gb: int) -> str:
    """Python code that holds ``gb`` GB of the GPU it sees, with torch or jax."""
    return {"torch": f"import torch; x = torch.ones({gb} << 30, dtype=torch.uint8, device='cuda')",
            "jax": f"import jax.numpy as jnp; x = jnp.ones(({gb} << 28,)); x.block_until_ready()"}[fw]


def _holding_framework() -> str:
    fw = next((f for f in ("torch", "jax") if importlib.util.find_spec(f)), None)
    if fw is None:
        pytest.skip("needs torch or jax to hold GPU memory from another process")
    return fw


@pytest.fixture(scope="module")
def per_process(cards):
    """NVML's per-process view works here (it lists our pids); else the checks that read
    a trial's memory from outside skip, saying why."""
    fw = _holding_framework()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": cards[0].uuid, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    ok, why = pids_visible(_holder(fw, 1), env)
    if not ok:
        pytest.skip(why)


def _installed(fw: str) -> None:
    if importlib.util.find_spec(fw) is None:  # found, not imported: the parent stays off CUDA
        pytest.skip(f"{fw} is not installed")


def _keras_backend() -> str:
    """The backend a Keras trial gets here: the user's choice, else TensorFlow, else JAX."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed")
    for fw in ("tensorflow", "jax", "torch"):
        if importlib.util.find_spec(fw) is not None:
            return fw
    pytest.skip("keras has no backend installed")


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_each_trial_sees_its_own_card_under_its_cap(tmp_path, cards, per_process, fw):
    """Below its cap a trial is ok; beyond it, oom with the hint; NVML never shows it over."""
    _installed(fw)
    card = cards[0]
    cap = int(0.95 / 4 * card.total_mb)  # --per-gpu 4
    board = tmp_path / "board"
    board.mkdir()
    grid = {"fw": fw, "mb": [cap // 4, cap + 2048], "board": str(board)}
    with Watch(str(board)) as watch:
        df = sweeper.sweep(gpu_fns.allocate, grid, gpus=[card.index], per_gpu=4, out=str(tmp_path),
                           progress=False)
    rows = df.set_index("param_mb")
    small, big = rows.loc[cap // 4], rows.loc[cap + 2048]
    assert small.status == "ok", small.error
    assert small.devices_seen == 1 and small.watched == 1, "NVML never listed the trial's process"
    pid = int(small.pid)
    assert watch.card_of[pid] == card.uuid == small.gpu_uuid  # its memory is on its own card
    assert small.gpu_mem_cap_mb == cap
    assert cap // 4 <= watch.peaks[pid] <= cap + MARGIN_MB
    # sweeper's own peak: filled, at least the allocation, and what the watcher saw (which
    # samples 25 times as often; 256 MB for what happens between two of its samples)
    seen = df[["param_mb", "status", "gpu_mem_peak_mb", "gpu_mem_cap_mb", "duration_s", "pid"]].to_string()
    assert pd.notna(small.gpu_mem_peak_mb), f"sweeper sampled no GPU memory of {pid}: {seen}; watcher: {watch.peaks}"
    assert cap // 4 <= small.gpu_mem_peak_mb <= watch.peaks[pid] + 256, seen
    assert big.status == "oom", (big.status, big.error)
    assert f"a cap of {cap} MB on gpu:{card.index}" in big.error
    assert max(watch.peaks.values()) <= cap + MARGIN_MB, watch.peaks
    assert released(set(watch.peaks)) == {}  # memory released on exit


def test_four_trials_share_one_card_none_over_its_cap(tmp_path, cards, per_process):
    fw = next((f for f in ("torch", "jax", "tensorflow") if importlib.util.find_spec(f)), None)
    if fw is None:
        pytest.skip("no GPU framework installed (torch, jax, tensorflow)")
    card = cards[0]
    cap = int(0.95 / 4 * card.total_mb)
    board = tmp_path / "board"
    board.mkdir()
    # each holds its memory until four were on the card at once (or 30 s passed)
    grid = {"fw": fw, "mb": cap // 4, "board": str(board), "wait_for": "full", "i": list(range(8))}
    with Watch(str(board), full_at=4) as watch:
        df = sweeper.sweep(gpu_fns.allocate, grid, gpus=[card.index], per_gpu=4, out=str(tmp_path),
                           progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert watch.most_at_once == 4  # four at once, never five
    assert max(watch.peaks.values()) <= cap + MARGIN_MB, watch.peaks
    assert df.gpu_mem_peak_mb.notna().all()
    assert released(set(watch.peaks)) == {}


STANDBY_GRID = """
import sys
sys.path.insert(0, {here!r})
import torch  # at the top: each standby imports it while the trial before it runs
import gpu_fns

def train(params):
    return gpu_fns.allocate({{**params, "fw": "torch"}})

grid = {{"mb": 512, "board": {board!r}, "i": [1, 2, 3, 4, 5, 6]}}
"""


def test_standbys_hold_no_gpu_memory_while_they_wait(tmp_path, cards, per_process):
    """A standby imports the user's module (PyTorch at its top) beside the running trial;
    PyTorch's cap, which initialises CUDA, waits for its trial: no context on the card
    before then, so never more processes on the card than --per-gpu."""
    _installed("torch")
    board = tmp_path / "board"
    board.mkdir()
    grid = tmp_path / "standby_grid.py"
    grid.write_text(STANDBY_GRID.format(here=HERE, board=str(board)))
    with Watch(str(board)) as watch:
        done = subprocess.run([sys.executable, "-m", "sweeper", str(grid), "--per-gpu", "2", "--gpus",
                               str(cards[0].index), "--out", str(tmp_path / "out"), "--quiet"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 0 < watch.most_at_once <= 2, f"{watch.most_at_once} processes on the card at once with --per-gpu 2"


PROBED_GRID = """
import sys
sys.path.insert(0, {here!r})
import {fw}  # at the top: the fork server imports it, and its probe uses it on the card
import gpu_fns

def train(params):
    return {{**gpu_fns.allocate({{**params, "fw": {fw!r}}}), "ppid": float(__import__("os").getppid())}}

grid = {{"mb": 256, "board": {board!r}, "i": [1, 2, 3]}}
"""


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_the_fork_server_is_proven_on_the_card_and_its_forks_train_there(tmp_path, cards, fw):
    """On a real card the fork server's probe pins it, caps and allocates with the framework
    the server imported, and leaves nothing there: the sweep forks (no line says it spawns),
    and every forked trial sees its card."""
    _installed(fw)
    board = tmp_path / "board"
    board.mkdir()
    grid = tmp_path / "probed_grid.py"
    grid.write_text(PROBED_GRID.format(here=HERE, fw=fw, board=str(board)))
    done = subprocess.run([sys.executable, "-m", "sweeper", str(grid), "--gpus", str(cards[0].index),
                           "--per-gpu", "2", "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "spawn processes" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-2000:]
    df = pd.read_csv(tmp_path / "out" / "probed_grid" / "results.csv")
    assert (df.status == "ok").all() and (df.devices_seen == 1).all(), df.to_string()
    assert (df.ppid != os.getpid()).all()


def test_auto_packs_trials_of_a_measured_size_onto_one_card(tmp_path, cards, per_process):
    """per_gpu="auto" on a real card: the first trial of the size runs alone and is
    measured; the rest share the card, each under a cap of its measured need plus
    headroom, none over it, all ok, with their reservation in the row."""
    fw = next((f for f in ("torch", "jax", "tensorflow") if importlib.util.find_spec(f)), None)
    if fw is None:
        pytest.skip("no GPU framework installed (torch, jax, tensorflow)")
    board = tmp_path / "board"
    board.mkdir()
    # the first waits alone (30 s) and is measured; the rest hold theirs until two are on the card
    grid = {"fw": fw, "mb": 1024, "board": str(board), "wait_for": "full", "i": list(range(6))}
    with Watch(str(board), full_at=2) as watch:
        df = sweeper.sweep(gpu_fns.allocate, grid, gpus=[cards[0].index], per_gpu="auto", memory_keys=["mb"],
                           out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert df.gpu_mem_reserved_mb.notna().all() and df.gpu_mem_peak_mb.notna().all()
    assert (df.gpu_mem_peak_mb <= df.gpu_mem_cap_mb + MARGIN_MB).all(), df[["gpu_mem_peak_mb", "gpu_mem_cap_mb"]]
    assert watch.most_at_once >= 2  # packed: more than one trial on the card at once
    assert released(set(watch.peaks)) == {}


def test_an_underestimated_trial_gets_the_largest_card_to_itself_after_two_ooms(tmp_path, cards, per_process):
    """A hint of 1 GB for a trial that needs 6 GB: it runs out under its
    cap, again under 1.5x, then gets the card to itself (its whole room reserved) and ends
    ok; three attempts, none of --retries spent."""
    fw = next((f for f in ("torch", "jax") if importlib.util.find_spec(f)), None)
    if fw is None:
        pytest.skip("needs torch or jax")
    board = tmp_path / "board"
    board.mkdir()
    grid = {"fw": fw, "mb": 6144, "board": str(board)}
    with Watch(str(board)):
        df = sweeper.sweep(gpu_fns.allocate, grid, gpus=[cards[0].index], per_gpu="auto", gpu_memory="1GB",
                           retries=0, out=str(tmp_path), progress=False)
    row = df.iloc[0]
    assert row.status == "ok", df.error.tolist()
    assert row.attempts == 3
    assert row.gpu_mem_reserved_mb >= 0.9 * cards[0].total_mb, (row.gpu_mem_reserved_mb, cards[0].total_mb)


def test_free_skips_a_card_another_process_holds(tmp_path, cards):
    fw = _holding_framework()
    card = cards[0]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": card.uuid, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    holder = subprocess.Popen([sys.executable, "-c", f"{_holder(fw, 3)}; print('held', flush=True); input()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        from sweeper.system.capping import MemoryPolicy
        from sweeper.placement.slots import place

        if len(cards) == 1:
            with pytest.raises(sweeper.SweepError, match="no free GPU"):
                place("free", MemoryPolicy(1, 0.95), None)
        else:
            df = sweeper.sweep(sweep_fns.echo, {"x": [1, 2]}, gpus="free", out=str(tmp_path), progress=False)
            assert (df.status == "ok").all() and f"gpu:{card.index}" not in set(df.device)
    finally:
        holder.stdin.close()
        holder.wait(60)


@pytest.mark.timeout(900)
def test_the_keras_example_runs_on_the_gpu(tmp_path, cards):
    backend = _keras_backend()
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("the example needs scikit-learn (its digits)")
    path = os.pathsep.join(p for p in (ROOT, HERE, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": path}
    if backend == "jax":
        env["JAX_PLATFORMS"] = "cuda"  # no quiet fall-back to the CPU
    done = subprocess.run([sys.executable, "-m", "sweeper", os.path.join(ROOT, "experiments", "digits_mlp.py"),
                           "--per-gpu", "2", "--gpus", str(cards[0].index), "--out", str(tmp_path), "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr[-2000:]
    df = sweeper.load(str(tmp_path / "digits_mlp"))
    assert (df.status == "ok").all() and set(df.device) == {f"gpu:{cards[0].index}"}
    assert df.val_accuracy.max() > 0.9
    fw = next((f for f in ("torch", "jax") if importlib.util.find_spec(f)), None)
    pin = {"CUDA_VISIBLE_DEVICES": cards[0].uuid, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if fw and pids_visible(_holder(fw, 1), {**env, **pin})[0]:  # NVML saw each trial on the card
        assert df.gpu_mem_peak_mb.notna().all() and (df.gpu_mem_peak_mb > 0).all(), df.gpu_mem_peak_mb
