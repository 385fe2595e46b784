"""The Ray backend on a cluster of two nodes (both on this machine, ``ray.cluster_utils``).

Each node has one CPU, so two trials at once run on both. The nodes (and their workers)
get a temporary folder of the test's own (``TMPDIR``), so what the trials leave there can
be seen; Ray keeps its own files in ``<TMPDIR>/ray``, away from other Ray instances on
this machine (``ray.init()`` elsewhere does not find this cluster). One cluster serves
the module: it takes seconds to start.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pandas as pd
import pytest

import sweeper
from conftest import ROOT, assert_dead

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402


@dataclass
class TwoNodes:
    cluster: Cluster
    tmp: str  #: the nodes' TMPDIR

    @property
    def address(self) -> str:
        return self.cluster.address

    @property
    def node_ids(self) -> set[str]:
        return {node.node_id for node in self.cluster.list_all_nodes()}

    def leftovers(self) -> list[str]:
        """Temporary folders of sweeper's in the nodes' TMPDIR."""
        return sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.tmp, "sweeper-*")))


@pytest.fixture(scope="module")
def nodes():
    tmp = tempfile.mkdtemp(prefix="swr-", dir="/tmp")  # short: Ray's sockets go in it
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = tmp
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield TwoNodes(cluster, tmp)
    finally:
        ray.shutdown()  # the connection sweeper opened
        if cluster is not None:
            cluster.shutdown()
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        shutil.rmtree(tmp, ignore_errors=True)


def _write(path: str, text: str) -> None:
    """Whole, so a reader never sees half of it."""
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


def _until(condition, timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the sweep ended first (exit {proc.returncode})")
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.05)


def where_and_files(params):
    """Say which node ran it, wait (a while at most) until two trials run at once, leave a
    file of its own in its folder."""
    import os
    import time

    import ray

    board = params["board"]
    node = ray.get_runtime_context().get_node_id()
    with open(os.path.join(board, f"{params['x']}.node.tmp"), "w") as f:
        f.write(node)
    os.replace(os.path.join(board, f"{params['x']}.node.tmp"), os.path.join(board, f"{params['x']}.node"))
    deadline = time.monotonic() + 30
    while sum(n.endswith(".node") for n in os.listdir(board)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(os.path.join(os.environ["SWEEPER_TRIAL_DIR"], "own.txt"), "w") as f:
        f.write(f"{params['x']}")
    return {"x": float(params["x"])}


def test_a_sweep_spreads_over_both_nodes_and_keeps_every_file_in_its_folder(nodes, tmp_path):
    board = tmp_path / "board"
    board.mkdir()
    df = sweeper.sweep(where_and_files, {"x": [0, 1, 2, 3], "board": str(board)}, backend="ray",
                       address=nodes.address, gpus="none", cpus_per_trial=1, out=str(tmp_path / "out"),
                       name="two", progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert sorted(df.x) == [0.0, 1.0, 2.0, 3.0]
    ran_on = {p.read_text() for p in board.glob("*.node")}
    assert ran_on == nodes.node_ids, "the trials did not run on both nodes"
    folder = tmp_path / "out" / "two"
    assert len(pd.read_csv(folder / "results.csv")) == 4
    for row in df.itertuples():
        trial = folder / "trials" / row.trial
        saved = json.loads((trial / "result.json").read_text())
        assert saved["trial_id"] == row.trial_id and saved["status"] == "ok" and saved["metrics"]["x"] == row.x
        assert (trial / "log.txt").read_text().startswith("=== sweeper: trial")
        # this machine sees the sweep's folder: the trial's own files land in it, as locally
        assert (trial / "own.txt").read_text() == str(row.param_x)
    assert nodes.leftovers() == []


def scratch_or_hang(params):
    """Tell where its folder is (and its pid), then return, or hang until it is killed."""
    import os
    import time

    folder = os.environ["SWEEPER_TRIAL_DIR"]
    with open(os.path.join(folder, "own.txt"), "w") as f:
        f.write("lost with the folder")
    with open(os.path.join(params["board"], f"{params['x']}.tmp"), "w") as f:
        f.write(f"{os.getpid()} {folder}")
    os.replace(os.path.join(params["board"], f"{params['x']}.tmp"), os.path.join(params["board"], str(params["x"])))
    if params["hang"]:
        time.sleep(600)
    return {"x": float(params["x"])}


def test_where_a_node_does_not_see_the_sweep_folder_its_temporary_folder_goes_even_when_killed(nodes, tmp_path):
    """No sweep holds this folder (no ``.lock``), as where a node cannot see the driver's:
    the trials get temporary folders on their nodes; the driver still writes result.json."""
    from sweeper.backends.ray import RayBackend
    from sweeper.system.capping import MemoryPolicy
    from sweeper.model.protocol import Exited, Result
    from sweeper.model.target import FunctionTarget
    from sweeper.model.trial import TrialSpec

    board = tmp_path / "board"
    board.mkdir()
    backend = RayBackend(FunctionTarget.of(scratch_or_hang), MemoryPolicy(1, None), address=nodes.address,
                         gpus=False)
    specs = {x: TrialSpec(f"id{x}", f"x={x}", x, {"x": x, "hang": x == 1, "board": str(board)}, 0,
                          str(tmp_path / "sweep" / "trials" / f"x={x}")) for x in (0, 1)}
    wake_r, wake_w = os.pipe()
    events: list = []
    try:
        for spec in specs.values():
            backend.start(spec)

        def ended(tid: str) -> bool:
            events.extend(backend.wait(0.2, wake_r, 0))
            return any(t == tid and isinstance(e, Exited) for t, e in events)

        _until(lambda: ended("id0") and (board / "1").exists(), 60, "the first trial ending, the second running")
        hung_pid, hung_folder = (board / "1").read_text().split(" ", 1)
        backend.cancel("id1", hard=True)  # as a timeout or Ctrl-C does: SIGKILL, no finally
        _until(lambda: ended("id1"), 30, "the killed trial ending")
        assert_dead(int(hung_pid))
        assert os.path.isdir(hung_folder), "its folder went with it: nothing is left to test"
    finally:
        backend.close()  # has the node remove what the killed trial left
        os.close(wake_r)
        os.close(wake_w)
    results = [e for t, e in events if t == "id0" and isinstance(e, Result)]
    assert [r.status.value for r in results] == ["ok"], events
    first = tmp_path / "sweep" / "trials" / "x=0"
    assert json.loads((first / "result.json").read_text())["metrics"] == {"x": 0.0}
    assert "=== sweeper: trial x=0" in (first / "log.txt").read_text()
    assert not (first / "own.txt").exists()  # it stayed in the temporary folder
    ok_folder = (board / "0").read_text().split(" ", 1)[1]
    assert os.path.dirname(ok_folder) == nodes.tmp and os.path.dirname(hung_folder) == nodes.tmp
    assert not os.path.exists(ok_folder) and not os.path.exists(hung_folder)
    assert nodes.leftovers() == []


def test_ctrl_c_on_a_cli_sweep_over_the_cluster_leaves_no_task_running(nodes, tmp_path):
    board = tmp_path / "board"
    board.mkdir()
    grid = tmp_path / "hang.py"
    grid.write_text(
        "import os, time\n"
        f"grid = {{'x': [0, 1], 'board': {str(board)!r}}}\n"
        "def train(params):\n"
        "    import ray\n"
        "    path = os.path.join(params['board'], str(params['x']))\n"
        "    with open(path + '.tmp', 'w') as f:\n"
        "        f.write(f\"{os.getpid()} {ray.get_runtime_context().get_node_id()}\")\n"
        "    os.replace(path + '.tmp', path)\n"
        "    time.sleep(600)\n")
    out = tmp_path / "out"
    with open(tmp_path / "cli.txt", "w") as said:
        proc = subprocess.Popen([sys.executable, "-m", "sweeper", str(grid), "--backend", "ray", "--address",
                                 nodes.address, "--gpus", "none", "--out", str(out)],
                                cwd=ROOT, stdout=said, stderr=subprocess.STDOUT)
        try:
            _until(lambda: (board / "0").exists() and (board / "1").exists(), 120, "both trials running", proc)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = (tmp_path / "cli.txt").read_text()
    assert code == 130, text
    trials = {x: (board / str(x)).read_text().split(" ") for x in (0, 1)}
    assert {node for _, node in trials.values()} == nodes.node_ids
    for pid, _ in trials.values():
        assert_dead(int(pid))
    if not ray.is_initialized():  # what the cluster says: no task holds a CPU
        ray.init(address=nodes.address, log_to_driver=False, logging_level="ERROR")
    _until(lambda: ray.available_resources().get("CPU", 0) == 2, 30, "both CPUs free again")
    df = pd.read_csv(out / "hang" / "results.csv")
    assert df.status.tolist() == ["interrupted", "interrupted"], df
    assert nodes.leftovers() == []


def test_a_killed_trials_temporary_folder_is_removed_by_the_next_look_not_before(tmp_path, monkeypatch):
    """What the next task on a node does first (no Ray needed): a folder whose process
    still lives is kept; once that process is killed (SIGKILL: no code of it runs), it goes."""
    from sweeper.child import channel

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom sweeper.child.channel import _Scratch\n"
         "s = _Scratch('t1')\nprint(s.path, flush=True)\ntime.sleep(600)\n"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        folder = holder.stdout.readline().strip()
        assert os.path.dirname(folder) == str(tmp_path) and os.path.isdir(folder)
        assert channel.remove_leftovers() == 0 and os.path.isdir(folder)  # its trial runs
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert channel.remove_leftovers() == 1
    assert not os.path.exists(folder)
