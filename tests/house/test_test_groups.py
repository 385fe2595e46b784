"""The suite's own parallel run: a file's tests run in one pytest-xdist worker, in order, and the
Ray files in one worker together (tests/conftest.py gives xdist that scheduler). Where it did
not hold, a module's fixture (a trained example, a Slurm cluster) started again in every worker
one of its tests landed on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import HERE, group_of

FILE = """import os

import pytest


@pytest.fixture(scope="module")
def started():
    with open(os.path.join({out!r}, "fixtures"), "a") as f:
        f.write(__name__ + "\\n")


@pytest.mark.parametrize("i", range(6))
def test_one(started, i):
    with open(os.path.join({out!r}, "ran"), "a") as f:
        f.write(f"{{__name__}} {{i}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
"""

#: Loads the suite's conftest under another name and takes only its scheduler.
CONFTEST = """import importlib.util

_spec = importlib.util.spec_from_file_location("suite_conftest", {path!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_xdist_make_scheduler = _suite.pytest_xdist_make_scheduler
"""


def test_a_files_tests_share_a_worker_in_order_and_the_ray_files_share_one(tmp_path):
    out, tests = tmp_path / "out", tmp_path / "t"
    out.mkdir()
    tests.mkdir()
    names = ["test_alpha", "test_beta", "test_gamma", "test_ray_a", "test_ray_b"]
    for name in names:
        (tests / f"{name}.py").write_text(FILE.format(out=str(out)))
    (tests / "conftest.py").write_text(CONFTEST.format(path=os.path.join(HERE, "conftest.py")))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "-p", "no:cacheprovider", "-c",
                           os.devnull, "--rootdir", str(tmp_path), str(tests)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split() for line in (out / "ran").read_text().splitlines()]
    assert len(ran) == 6 * len(names)
    workers = {name: {w for m, _, w in ran if m == name} for name in names}
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["test_ray_a"] == workers["test_ray_b"], workers
    for name in names:
        assert [int(i) for m, i, _ in ran if m == name] == list(range(6)), name
    assert sorted((out / "fixtures").read_text().split()) == names  # each module's fixture, once


@pytest.mark.unit
def test_the_group_of_a_test_is_its_file_and_one_for_the_ray_files():
    assert group_of("tests/backends/test_slurm.py::test_x[a::b]") == "test_slurm"
    assert group_of("tests/backends/test_ray_cluster.py::test_x") == group_of("tests/backends/test_ray.py::t")
    assert group_of("tests/run/test_engine.py::TestA::test_b") == "test_engine"
