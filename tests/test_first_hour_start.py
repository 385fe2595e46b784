"""Issue 39, item 9: the fork server starts importing as the sweep starts, beside the grid
reader, from the installed modules the grid file's own imports name; the rest of the
reader's list follows once it is known, before the server's probe."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from conftest import ROOT, install_module, write_grid
from sweeper import modules
from sweeper.table import READ_CSV

#: An installed library: in the fork server it says its import began; in the grid reader
#: (no slot) it waits for that, at most 60 s, and says whether it saw it.
BESIDE = """import os, time
if os.environ.get("SWEEPER_PRELOAD_READY"):  # the fork server's import
    open({server!r}, "w").close()
elif "SWEEPER_SLOT" not in os.environ and "SWEEPER_SWEEP" in os.environ:  # the grid reader's
    deadline = time.monotonic() + 60
    while not os.path.exists({server!r}) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the server's own sentinel
    with open({seen!r}, "w") as f:
        f.write("beside" if os.path.exists({server!r}) else "after")
"""
#: An installed library only a user's module imports (the grid file's own imports do not
#: name it): it notes each process that imports it.
NOTED = """import os
with open({marks!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
"""


@pytest.mark.slow
def test_the_fork_server_imports_beside_the_reader_and_then_the_rest_of_its_list(tmp_path):
    from conftest import run_cli

    server, seen, marks = tmp_path / "server_began", tmp_path / "seen", tmp_path / "noted"
    site = install_module(tmp_path / "site", "beside_lib", BESIDE.format(server=str(server), seen=str(seen)))
    install_module(tmp_path / "site", "noted_lib", NOTED.format(marks=str(marks)))
    (tmp_path / "helper_mod.py").write_text("import noted_lib\n")  # the user's own module
    grid = write_grid(tmp_path, "import beside_lib\nimport helper_mod\nfrom sweep_fns import echo as train\n"
                                "grid = {'x': [1, 2]}\n")
    env_path = os.pathsep.join([site, str(tmp_path), os.environ.get("PYTHONPATH", "")])
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "sweeper", grid, "--out", str(tmp_path / "out"), "--workers", "1",
                           "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": env_path})
    assert done.returncode == 0, done.stdout + done.stderr
    assert seen.read_text() == "beside"  # the server's import began while the reader's ran
    df = pd.read_csv(tmp_path / "out" / "grid" / "results.csv", **READ_CSV)
    assert df.ppid.nunique() == 1 and int(df.ppid[0]) != os.getpid()  # forks of one server
    noted = {int(pid) for pid in marks.read_text().split()}
    assert int(df.ppid[0]) in noted  # the rest of the list: imported by the server, once the read told it
    assert not noted & set(df.pid)  # so no trial imported it itself


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
