"""The fork server starts importing as the sweep starts, from the installed
modules the grid file's own imports name (and those of the user's modules it imports); the
grid reader is then a fork of it, so the framework is imported once before the first trial."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT, install_module, write_grid
from sweeper.system import modules
from sweeper.store.table import READ_CSV

#: An installed library that notes each process that imports it.
NOTED = """import os
with open({marks!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
"""
#: A grid file's top that notes, in the grid reader (no slot), its pid and its parent's.
READER = """import os
if "SWEEPER_SLOT" not in os.environ:  # the grid reader, not a trial
    with open({reader!r}, "w") as f:
        f.write(f"{{os.getpid()}} {{os.getppid()}}")
"""


@pytest.mark.slow
def test_the_grid_reader_is_a_fork_of_the_server_made_once_it_has_imported(tmp_path):
    marks, reader = tmp_path / "noted", tmp_path / "reader"
    site = install_module(tmp_path / "site", "noted_lib", NOTED.format(marks=str(marks)))
    grid = write_grid(tmp_path, READER.format(reader=str(reader)) +
                      "import noted_lib\nfrom sweep_fns import echo as train\ngrid = {'x': [1, 2]}\n")
    done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--workers", "1",
                           "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    server = int(df.ppid[0])
    assert df.ppid.nunique() == 1 and server != os.getpid()  # the trials: forks of one server
    pid, parent = map(int, reader.read_text().split())
    assert parent == server and pid not in set(df.pid)  # the reader: a fork of it too, and no trial
    # the library was imported once, by the server, before it forked the reader: neither the
    # reader nor a trial imported it again
    assert [int(p) for p in marks.read_text().split()] == [server]


@pytest.mark.unit
def test_the_imports_a_file_names_are_read_without_running_it(tmp_path):
    path = tmp_path / "g.py"
    path.write_text("import os, numpy as np\nfrom sklearn.datasets import load_digits\nfrom . import sibling\n"
                    "try:\n    import yaml\nexcept ImportError:\n    yaml = None\n"
                    "def train(params):\n    import torch\n")
    assert modules.imports_in(str(path)) == ["os", "numpy", "sklearn.datasets", "sklearn.datasets.load_digits",
                                             "yaml"]
    path.write_text("this is not python (")
    assert modules.imports_in(str(path)) == []


@pytest.mark.unit
def test_imports_for_type_checkers_only_are_no_candidates(tmp_path):
    # never run when the file is imported: a server importing them (pandas, Optuna under
    # sweeper's own ``if TYPE_CHECKING:``) spent its CPU for nothing; the ``else`` runs
    path = tmp_path / "g.py"
    path.write_text("import typing\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
                    "else:\n    import json\nif typing.TYPE_CHECKING:\n    from optuna import Study\n")
    assert modules.imports_in(str(path)) == ["typing", "typing.TYPE_CHECKING", "json"]


@pytest.mark.unit
def test_the_users_own_modules_a_grid_imports_are_followed_for_theirs(tmp_path):
    # the bench's and a user's usual grid file: train comes from a module beside it (or from a
    # folder it puts on sys.path), and that module's TensorFlow is what the server must import
    (tmp_path / "models.py").write_text("import tensorflow\nfrom helpers import load\n"
                                        "if __name__ == \"__main__\":\n    import matplotlib\n")
    (tmp_path / "helpers.py").write_text("import numpy as np\nimport models\n")  # a cycle is followed once
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("import keras\n")
    (code / "pkg" / "nets.py").write_text("import jax\n")
    grid = tmp_path / "grid.py"
    grid.write_text(f"import sys\nsys.path.insert(0, {str(code)!r})\nfrom models import train\n"
                    "from pkg.nets import build\ngrid = {'x': [1]}\n")
    names = modules.imports_in(str(grid))
    assert names[:2] == ["sys", "models"]
    assert {"tensorflow", "helpers", "numpy", "keras", "jax"} <= set(names)
    assert names.index("tensorflow") < names.index("keras")  # in the order the read will import them
    assert len(names) == len(set(names)) and "matplotlib" not in names  # not run on import


class _EditableFinder:
    """What an editable install (``pip install -e .``, setuptools' finder) puts on
    ``sys.meta_path``: the user's package mapped to its source folder, which is not on ``sys.path``."""

    def __init__(self, name: str, folder: str) -> None:
        self.name, self.folder = name, folder

    def find_spec(self, fullname, path=None, target=None):
        import importlib.util

        if fullname != self.name:
            return None
        init = os.path.join(self.folder, fullname, "__init__.py")
        return importlib.util.spec_from_file_location(fullname, init,
                                                      submodule_search_locations=[os.path.dirname(init)])


@pytest.mark.unit
def test_a_package_installed_in_editable_mode_is_followed_for_its_imports(tmp_path, monkeypatch):
    # src layout with `pip install -e .`: the package is found by a finder, not on sys.path;
    # its module's TensorFlow is still what the server must import (else each trial would)
    src = tmp_path / "src"
    (src / "edpkg").mkdir(parents=True)
    (src / "edpkg" / "__init__.py").write_text("raise RuntimeError('run: it must only be read')\n")
    (src / "edpkg" / "models.py").write_text("import tensorflow\n\ndef train(params):\n    return {}\n")
    monkeypatch.setattr(sys, "meta_path", [_EditableFinder("edpkg", str(src)), *sys.meta_path])
    grid = tmp_path / "grid.py"
    grid.write_text("from edpkg.models import train\ngrid = {'x': [1]}\n")
    assert "tensorflow" in modules.imports_in(str(grid))
    assert "edpkg" not in sys.modules  # found, not imported
