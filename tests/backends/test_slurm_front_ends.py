"""Front ends on the tests' real one-node Slurm (tests/slurm_cluster.py): a script's sweep()
at its top level refused before any job is submitted; a Hydra multirun's launch line saying
what Slurm is asked for (an array task per job, the GPU, the sbatch options)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import slurm_cluster
from conftest import HERE, ROOT
from slurm_cluster import slurm, sweep_jobs  # noqa: F401 (slurm: a fixture)

pytestmark = [pytest.mark.skipif(bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or "-"),
              pytest.mark.slurm]


def test_a_script_calling_sweep_at_its_top_level_submits_nothing(slurm, tmp_path):
    """Each Slurm task imports the script again: its top-level sweep() would run in every task
    (each recorded crashed). Refused in one line before any job exists."""
    script = tmp_path / "mine.py"
    script.write_text(f"import sys\nsys.path.insert(0, {HERE!r})\nimport sweeper\nfrom sweep_fns import echo\n"
                      f"sweeper.sweep(echo, {{'x': [1, 2]}}, backend='slurm', out={str(tmp_path / 'out')!r})\n")
    done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=240)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert done.returncode == 1 and last.startswith(f"sweeper.errors.SweepError: {script} calls sweep() at its "
                                                    "top level (line 5)"), done.stdout + done.stderr
    assert last.endswith("(nothing ran)") and not (tmp_path / "out").exists()
    assert not sweep_jobs()  # nothing submitted, nothing to be recorded crashed


def test_a_hydra_multiruns_launch_line_says_what_slurm_is_asked_for(slurm, tmp_path):
    pytest.importorskip("hydra", reason="hydra-core is not installed (pip install -e '.[hydra]')")
    app = os.path.join(ROOT, "tests", "hydra_app", "app.py")
    base = [sys.executable, app, "-m", "hydra/launcher=sweeper", "lr=0.1,0.01", "hydra.launcher.backend=slurm",
            "+hydra.launcher.slurm={mem: 500M}"]
    done = subprocess.run([*base, f"hydra.sweep.dir={tmp_path / 'none'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert ("sweeper is launching 2 jobs (backend slurm: each job a task of an array job, at most 32 at once, no "
            "GPU: hydra.launcher.gpus=all gives each one; sbatch options: --mem=500M)") in done.stdout, done.stdout
    assert "gpus all" not in done.stdout
    if slurm_cluster.GPUS:  # the node has its two (device-file) GPUs: ask for one each
        given = subprocess.run([*base, "hydra.launcher.gpus=all", f"hydra.sweep.dir={tmp_path / 'gpus'}"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert given.returncode == 0, given.stdout[-2000:] + given.stderr[-2000:]
        assert "at most 32 at once, a GPU each, --gres=gpu:1; sbatch options: --mem=500M)" in given.stdout
