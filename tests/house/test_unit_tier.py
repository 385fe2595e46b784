"""The fast tier (``pytest -m unit``) keeps its promise: a unit test that starts a process fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import HERE

STARTS = {
    "subprocess": "subprocess.run([sys.executable, '-c', 'pass'])",
    "fork": "pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)",
    "spawn": "p = multiprocessing.get_context('spawn').Process(target=print)\n    p.start()\n    p.join()",
    "forkserver": "p = multiprocessing.get_context('forkserver').Process(target=print)\n    p.start()\n    p.join()",
}


@pytest.mark.parametrize("how", sorted(STARTS))
def test_a_unit_test_that_starts_a_process_fails_and_says_why(tmp_path, how):
    (tmp_path / "test_it.py").write_text(
        "import multiprocessing, os, subprocess, sys\nimport pytest\n\n\n"
        f"@pytest.mark.unit\ndef test_starts():\n    {STARTS[how]}\n\n\n"
        f"def test_not_unit_may():\n    {STARTS[how]}\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                           "-p", "conftest", "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": HERE})  # this suite's conftest, as a plugin
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout + proc.stderr
    assert "is marked unit" in proc.stdout and "test_starts" in proc.stdout
