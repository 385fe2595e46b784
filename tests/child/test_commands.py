"""Command trials: a script that takes flags, run with the same slots, statuses and table."""

from __future__ import annotations

import json
import os
import shlex
import sys

import pandas as pd
import pytest

import sweeper
from conftest import HERE, ROOT, run_cli, write_grid

SCRIPT = os.path.join(HERE, "scripts", "argv_echo.py")
PY = shlex.quote(sys.executable)


def seen(tmp_path, name: str, trial: str) -> dict:
    return json.loads((tmp_path / name / "trials" / trial / "seen.json").read_text())


def test_hostile_values_reach_the_script_unchanged_as_one_argument(tmp_path):
    hostile = "it's a \"test\"; rm -rf / $(echo no) `x` *"
    df = sweeper.sweep(f"{PY} {SCRIPT} --text={{text}} --n {{n}}", {"text": [hostile], "n": [1]},
                       out=str(tmp_path), name="cmd", progress=False)
    assert df.status.tolist() == ["ok"], df.error.tolist()
    argv = seen(tmp_path, "cmd", df.trial[0])["argv"]
    assert argv == [f"--text={hostile}", "--n", "1"]
    assert df.from_stdout.tolist() == [1.0] and df.n_args.tolist() == [3]


def test_shell_template_quotes_each_value(tmp_path):
    hostile = "a b; echo INJECTED"
    df = sweeper.sweep(sweeper.Command(f"{PY} {SCRIPT} --text={{text}} | cat", shell=True),
                       {"text": [hostile]}, out=str(tmp_path), name="sh", progress=False)
    assert df.status.tolist() == ["ok"], df.error.tolist()
    assert seen(tmp_path, "sh", df.trial[0])["argv"] == [f"--text={hostile}"]
    assert "INJECTED\n" not in (tmp_path / "sh" / "trials" / df.trial[0] / "log.txt").read_text()


def test_metrics_from_stdout_file_and_epochs_to_history(tmp_path):
    df = sweeper.sweep(f"{PY} {SCRIPT} --how={{how}}", {"how": ["ok", "file"]}, out=str(tmp_path),
                       name="m", progress=False).set_index("param_how")
    assert df.loc["ok", "from_stdout"] == 1.0 and pd.isna(df.loc["ok", "from_file"])
    assert df.loc["file", "from_file"] == 1.0 and pd.isna(df.loc["file", "from_stdout"])  # the file wins
    history = pd.read_csv(tmp_path / "m" / "history.csv")
    assert history.groupby("trial").epoch.apply(list).tolist() == [[1, 2], [1, 2]]
    assert history.loss.tolist() == [0.5, 0.25, 0.5, 0.25]


def test_exit_codes_and_signals_are_crashes(tmp_path):
    df = sweeper.sweep(f"{PY} {SCRIPT} --how={{how}}", {"how": ["exit3", "kill", "ok"]}, out=str(tmp_path),
                       name="c", retries=1, progress=False).set_index("param_how")
    assert df.loc["exit3", "status"] == "crashed" and "exit code 3" in df.loc["exit3", "error"]
    assert df.loc["kill", "status"] == "crashed" and "SIGKILL" in df.loc["kill", "error"]
    assert df.loc["ok", "status"] == "ok"
    assert df.loc["exit3", "attempts"] == 2  # retried like any crash


def test_children_get_the_slot_and_trial_environment(tmp_path, fake_nvml):
    df = sweeper.sweep(f"{PY} {SCRIPT} {{flags}}", {"x": [1, 2]}, gpus=[0, 1], memory_fraction=0.4,
                       out=str(tmp_path), name="env", progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert set(df.device) == {"gpu:0", "gpu:1"}
    for trial, device, seed, uuid in zip(df.trial, df.device, df.seed, df.gpu_uuid):
        got = seen(tmp_path, "env", trial)
        env = got["env"]
        card = fake_nvml.cards[int(device.split(":")[1])]
        assert env["CUDA_VISIBLE_DEVICES"] == card.uuid == uuid  # pinned by UUID, recorded as run
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["SWEEPER_MEMORY_LIMIT_MB"] == "6553"
        assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.4" and env["SWEEPER_MEMORY_FRACTION"] == "0.4"
        assert env["SWEEPER_SEED"] == str(seed)
        assert env["SWEEPER_TRIAL_DIR"].endswith(trial)
        assert json.loads(env["SWEEPER_PARAMS"]) == {"x": int(trial.split("=")[1])}
        assert got["argv"] == [f"--x={trial.split('=')[1]}"]  # {flags}


@pytest.mark.parametrize("template,words", [
    ("{py} {script} --lr={lr} --units={unit}", "{unit}"),
    ("{py} {script} --lr={lr}", "'units' is not used"),
    ("{py} {script} --lr={lr:.2f} --units={units}", "cannot fill"),
])
def test_bad_templates_are_refused_before_any_trial(tmp_path, template, words):
    template = template.replace("{py}", PY).replace("{script}", SCRIPT)
    with pytest.raises(sweeper.SweepError, match=words.replace("{", r"\{").replace("}", r"\}")):
        sweeper.sweep(template, {"lr": [0.1], "units": [1]}, out=str(tmp_path))
    assert not (tmp_path / "command").exists()


def test_cli_command_with_json_grid(tmp_path):
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"how": ["ok", "file"]}))
    done = run_cli("--command", f"{PY} {SCRIPT} --how={{how}}", "--grid", str(grid), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(pd.read_csv(tmp_path / "argv_echo" / "results.csv")) == 2  # named after its script
    bad = run_cli("--command", f"{PY} {SCRIPT} --how={{hwo}}", "--grid", str(grid), "--out", str(tmp_path))
    assert bad.returncode == 2 and "{hwo}" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_grid_file_with_a_command_function(tmp_path):
    body = (f"import sweeper\nSCRIPT = {SCRIPT!r}\n"
            f"def command(params):\n    return [{sys.executable!r}, SCRIPT, *sweeper.flags(params)]\n"
            "grid = {'a': [1, 2]}\n")
    done = run_cli(write_grid(tmp_path, body, name="fn_cmd.py"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "fn_cmd" / "results.csv")
    assert (df.n_args == 1).all()


@pytest.mark.slow
def test_flags_example_trains_real_models(tmp_path):
    done = run_cli(os.path.join(ROOT, "experiments", "flags_grid.py"), "--out", str(tmp_path), "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "flags_grid" / "results.csv")
    assert len(df) == 4 and (df.status == "ok").all() and df.val_accuracy.between(0.3, 1).all()
    history = pd.read_csv(tmp_path / "flags_grid" / "history.csv")
    assert len(history) == 16  # 4 trials x 4 epochs, from the script's JSON lines
