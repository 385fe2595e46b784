"""Warm standby workers and the fork server: faster starts, still one fresh process per trial."""

from __future__ import annotations

import json
import os

import pytest

import sweeper
import sweep_fns
import broken_in_workers


@pytest.mark.parametrize("prefetch", [True, False])
def test_standby_starts_ahead_but_runs_only_after_the_slot_is_free(tmp_path, prefetch):
    df = sweeper.sweep(sweep_fns.slot_relay, {"i": [1, 2, 3, 4], "dir": str(tmp_path)}, workers=1,
                       prefetch=prefetch, out=str(tmp_path / "out"), progress=False)
    assert (df.status == "ok").all() and df.pid.nunique() == 4  # one fresh process per trial
    runs = df.sort_values("t_start")
    # created while the previous trial still ran (it holds its slot 1 s), or only after it
    # ended (process times are known to 10 ms, hence the margin)
    lead = runs.t_end.values[:-1] - runs.created.values[1:]
    assert ((lead > 0.5) if prefetch else (lead < 0.05)).all(), lead
    assert (runs.prev_alive == 0).all()  # ... but given its trial only once the old one was gone


def test_a_module_that_cannot_import_in_workers_is_one_error(tmp_path):
    with pytest.raises(sweeper.SweepError, match="could not import train: ImportError: libcudart"):
        sweeper.sweep(broken_in_workers.train, {"i": list(range(6))}, workers=2,
                      out=str(tmp_path), progress=False)
    table = sweeper.load(str(tmp_path / "broken_in_workers"))
    assert len(table) == 0  # no trial is blamed for the module


def test_forkserver_trials_are_fresh_forks_with_their_own_seeds(tmp_path):
    fork = sweeper.sweep(sweep_fns.draws, {"x": [1, 2, 3]}, start_method="forkserver",
                         out=str(tmp_path / "f"), progress=False)
    spawn = sweeper.sweep(sweep_fns.draws, {"x": [1, 2, 3]}, out=str(tmp_path / "s"), progress=False)
    assert fork[["py", "np"]].equals(spawn[["py", "np"]])  # seeded per trial, not inherited
    relay = sweeper.sweep(sweep_fns.slot_relay, {"i": [1, 2, 3], "hold": 0.1, "dir": str(tmp_path)},
                          start_method="forkserver", workers=1, out=str(tmp_path / "r"), progress=False)
    assert relay.pid.nunique() == 3 and relay.ppid.nunique() == 1
    assert relay.ppid[0] != os.getpid()  # forked by the server, not by the sweep's parent


def test_forkserver_children_pin_their_own_gpu(tmp_path, fake_nvml):
    df = sweeper.sweep(sweep_fns.gpu_env, {"x": list(range(4)), "hold": 0.2}, gpus=[0, 1], per_gpu=2,
                       start_method="forkserver", out=str(tmp_path), progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    pins = [json.loads((tmp_path / "sweep_fns" / "trials" / t / "seen.json").read_text())["CUDA_VISIBLE_DEVICES"]
            for t in df.trial]
    assert pins == [fake_nvml.cards[int(d[4:])].uuid for d in df.device] == df.gpu_uuid.tolist()
    assert set(df.device) == {"gpu:0", "gpu:1"} and (df.xla_fraction == 0.475).all()
