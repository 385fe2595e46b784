"""sweeper's types are checked with every test run (and so in CI): mypy, as setup.cfg configures it."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def test_mypy_finds_no_error():
    pytest.importorskip("mypy", reason="mypy is in the test extras: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "setup.cfg", "sweeper", "hydra_plugins"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
