"""Population-based training's checkpoints on disk, from the user's side: a sweep SIGKILLed the
moment a copy lands in a member's published folder, before its record, resumes by the same
command with the lineage right and a replay that matches; what a killed run half-built is
removed, and what a finished sweep published; a full disk is one line; a link in a
checkpoint never makes a copy read another member's files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import sweeper
from conftest import ROOT
from tests import pbt_fns

pytestmark = pytest.mark.slow

#: Run as ``python -c KILL <grid> <flags>``: the sweep's own driver, with an audit hook (no
#: seam in sweeper) that SIGKILLs it at the moment ``$KILL_MOMENT`` names, in the thread that
#: copies, writing first the published folder concerned to ``$KILLED_AT``:
#:
#: * ``journal``: a copy's journal entry is in place, nothing copied yet;
#: * ``landed``: the copy of another member's checkpoint has replaced a member's own published
#:   one (``.pbt/<id>/<epoch>`` renamed aside, the copy renamed in), its record not yet made;
#: * ``recorded``: the schedule's row is written, the journal entry not yet removed;
#: * ``tidy``: every member finished, as ``.pbt/`` is removed.
KILL = """
import os, re, runpy, signal, sys, threading
moment, state = os.environ["KILL_MOMENT"], {}
entry = re.compile(r"/[.]pbt/t[0-9a-f]+/[0-9]+[.]copy$")
def kill(at):
    state["done"] = True
    open(os.environ["KILLED_AT"], "w").write(at)
    os.kill(os.getpid(), signal.SIGKILL)
def hook(event, args):
    if state.get("done") or threading.get_ident() != state.get("thread", threading.get_ident()):
        return
    if state.get("landed"):
        kill(state["landed"])
    if event == "os.rename" and len(args) > 1:
        src, dst = str(args[0]), str(args[1])
        if moment == "journal" and entry.search(dst):
            state["thread"], state["landed"] = threading.get_ident(), dst[:-len(".copy")]
        elif moment != "landed":
            return
        elif re.search(r"/[.]pbt/t[0-9a-f]+/[0-9]+$", src) and "/.%s.old." % os.path.basename(src) in dst:
            state["thread"], state["aside"] = threading.get_ident(), src  # the member's own goes aside
        elif state.get("aside") == dst:
            state["landed"] = dst  # the copy lands: the next step of this thread is killed
    elif event == "os.remove" and moment == "recorded" and entry.search(str(args[0])):
        kill(str(args[0])[:-len(".copy")])
    elif event == "shutil.rmtree" and moment == "tidy" and str(args[0]).endswith("/.pbt"):
        kill(str(args[0]))
sys.addaudithook(hook)
sys.argv = ["sweeper", *sys.argv[1:]]
runpy.run_module("sweeper", run_name="__main__", alter_sys=True)
"""

GRID = """import sweeper
from tests.pbt_fns import {fn} as train
space = {{'lr': sweeper.loguniform(0.01, 0.5)}}
options = {{'search': 'pbt', 'metric': 'acc', 'workers': 2,
            'pbt': {{'population': 4, 'interval': 2, 'synch': True}}}}
"""


def _grid(tmp_path: Path, fn: str = "climb") -> list[str]:
    grid = tmp_path / "grid.py"
    grid.write_text(GRID.format(fn=fn))
    return [str(grid), "--out", str(tmp_path / "out"), "--quiet"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _leftovers(folder: Path) -> list[str]:
    """Half-built copies: hidden entries beside published checkpoints and checkpoint folders."""
    found = []
    for parent in [*(folder / ".pbt").glob("*"), *(folder / "trials").glob("*")]:
        found += [str(p) for p in parent.glob(".*") if p.is_dir()]
    return found


def _killed(tmp_path: Path, args: list[str], moment: str) -> Path:
    """The sweep run by ``KILL``, SIGKILLed at ``moment``; the published folder concerned."""
    killed_at = tmp_path / "killed_at"
    first = subprocess.run([sys.executable, "-c", KILL, *args], cwd=ROOT, capture_output=True, text=True,
                           env={**_env(), "KILLED_AT": str(killed_at), "KILL_MOMENT": moment}, timeout=300)
    assert first.returncode == -9 and killed_at.exists(), first.stdout + first.stderr
    return Path(killed_at.read_text())


def _resumed_with_the_lineage_right(folder: Path, killed_at: Path, again: subprocess.CompletedProcess) -> None:
    """The resume of a sweep killed at ``killed_at`` (a copy's published folder) finished it
    with the lineage right, a replay that matches, and nothing published left."""
    from sweeper.front import replay

    tid, epoch = killed_at.parent.name, int(killed_at.name)
    assert again.returncode == 0, again.stdout + again.stderr
    df = pd.read_csv(folder / "results.csv")
    assert list(df["status"]) == ["ok"] * 4, df["error"].tolist()
    hist = pd.read_csv(folder / "history.csv")
    # the copy the kill interrupted is on record, at the epoch after it, as it was made
    copy = hist[(hist.trial_id == tid) & (hist.epoch == epoch + 1)].iloc[0]
    assert isinstance(copy.copied_from, str) and copy.copied_from in set(df.trial_id), copy
    for _, c in hist.dropna(subset=["copied_from"]).iterrows():  # every copy's curve goes on from its source's
        source = hist[(hist.trial_id == c.copied_from) & (hist.epoch == c.epoch - 1)]["acc"].item()
        assert c.acc == pytest.approx(source + c.param_lr * (1 - source))
    for _, member in df.iterrows():  # its segments: every process it ran in, before the kill and after
        log = (folder / "trials" / member["trial"] / "log.txt").read_text()
        assert member["segments"] == log.count("=== sweeper: trial"), member["trial"]
    name = df.set_index("trial_id").loc[tid, "trial"]
    (done,) = replay.replay(str(folder), [name])
    assert done.statuses == ("ok",) and all(d.drift() == 0 for d in done.drifts), done.drifts
    assert not (folder / ".pbt").exists() and _leftovers(folder) == []  # over: nothing published stays


@pytest.mark.parametrize("moment", ["journal", "recorded"])
def test_a_sweep_killed_between_a_copy_and_its_record_resumes_with_the_lineage_right(tmp_path, moment):
    """(The kill as the copy lands, ``landed``, is the next test's, which adds half-built
    copies before the same resume and checks it the same way.)"""
    args = _grid(tmp_path)
    killed_at = _killed(tmp_path, args, moment)
    assert Path(f"{killed_at}.copy").exists()  # the copy's journal entry: the resume completes it
    again = subprocess.run([sys.executable, "-m", "sweeper", *args], cwd=ROOT, capture_output=True, text=True,
                           env=_env(), timeout=300)
    _resumed_with_the_lineage_right(tmp_path / "out" / "grid", killed_at, again)


def test_what_a_killed_copy_half_built_is_removed_by_the_resume(tmp_path):
    """Killed as a copy lands, before its record: the resume removes what was half built and
    completes the copy with the lineage right (one sweep for both, each a few CPU seconds)."""
    args = _grid(tmp_path)
    landed = _killed(tmp_path, args, "landed")
    assert Path(f"{landed}.copy").exists()  # the copy's journal entry: the resume completes it
    folder = tmp_path / "out" / "grid"
    assert len(list(landed.parent.glob(f".{landed.name}.old.*"))) == 1  # the kill left the old one aside
    for where in (landed.parent, folder / "trials" / "member_0"):  # and, as a kill mid-copy would, half a copy
        (where / ".checkpoint.deadbeef" if where.name == "member_0" else where / f".{landed.name}.deadbeef").mkdir()
    said_all = [a for a in args if a != "--quiet"]  # (its info lines too)
    again = subprocess.run([sys.executable, "-m", "sweeper", *said_all], cwd=ROOT,
                           capture_output=True, text=True, env=_env(), timeout=300)
    _resumed_with_the_lineage_right(folder, landed, again)
    said = [line for line in again.stdout.splitlines() if "published" in line]
    assert said and "removed" in said[0] and "trials/<member>/checkpoint" in said[0], again.stdout


def test_a_finished_sweep_killed_as_it_tidied_is_tidied_by_the_same_command(tmp_path):
    args = _grid(tmp_path)
    pbt = _killed(tmp_path, args, "tidy")
    folder = tmp_path / "out" / "grid"
    assert pbt == folder / ".pbt" and pbt.is_dir()
    before = sweeper.load(folder)  # (from the ledger: results.csv is written a moment later)
    assert list(before["status"]) == ["ok"] * 4
    again = subprocess.run([sys.executable, "-m", "sweeper", *[a for a in args if a != "--quiet"]], cwd=ROOT,
                           capture_output=True, text=True, env=_env(), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not pbt.exists() and _leftovers(folder) == []
    said = [line for line in again.stdout.splitlines() if "published" in line]
    assert len(said) == 1 and "are removed" in said[0], again.stdout
    after = pd.read_csv(folder / "results.csv")  # nothing ran again
    assert list(after["segments"]) == list(before["segments"]) and list(after["acc"]) == list(before["acc"])


#: Run as ``python -c SLOW <grid> <flags>``: the sweep's own driver, on a disk where its first
#: copy of a checkpoint (a member's, published as its first segment ends) takes 8 s.
SLOW = """
import runpy, sys, time
state = {}
def hook(event, args):
    if event == "shutil.copytree" and "/.pbt/" in str(args[1]) and not state:
        state["slow"] = True
        time.sleep(8)
sys.addaudithook(hook)
sys.argv = ["sweeper", *sys.argv[1:]]
runpy.run_module("sweeper", run_name="__main__", alter_sys=True)
"""


def test_a_member_hears_its_pause_at_the_epoch_it_was_decided_however_slow_the_copies(tmp_path):
    """While the parent copies member_0's checkpoint, member_1 (slower) reports epoch 1, then
    must hear each answer before it trains on: its pause comes at epoch 2, never later."""
    grid = tmp_path / "grid.py"
    grid.write_text("import sweeper\nfrom tests.pbt_fns import paced as train\n"
                    "space = {'lr': sweeper.loguniform(0.01, 0.5), 'epochs': 4}\n"
                    "options = {'search': 'pbt', 'metric': 'acc', 'workers': 2, "
                    "'pbt': {'population': 2, 'interval': 2}}\n")
    done = subprocess.run([sys.executable, "-c", SLOW, str(grid), "--out", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "where its pause was decided" not in done.stdout + done.stderr
    folder = tmp_path / "out" / "grid"
    for name in ("member_0", "member_1"):  # a segment after each decision's epoch, 2 and 4 (its loop's last)
        resumed = (folder / "trials" / name / "segments.txt").read_text().split()
        assert resumed == ["0", "2", "4"], (name, resumed)


def test_a_full_disk_while_a_checkpoint_is_published_is_one_line(tmp_path, small_disk):
    grid = tmp_path / "grid.py"
    grid.write_text(GRID.format(fn="fills").replace("'workers': 2", "'workers': 1"))
    done = subprocess.run([sys.executable, "-m", "sweeper", str(grid), "--out", str(small_disk), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if "could not copy" in line]
    assert len(said) == 1 and "No space left on device" in said[0] and "free space" in said[0], done.stderr
    assert _leftovers(small_disk / "grid") == []


def test_a_link_in_a_checkpoint_to_its_own_file_is_the_copys_own(tmp_path):
    df = sweeper.sweep(pbt_fns.linked, {"lr": sweeper.loguniform(0.01, 0.5)}, search="pbt", metric="acc",
                       workers=2, out=str(tmp_path), name="pbt", progress=False,
                       pbt={"population": 4, "interval": 2, "synch": True})
    assert list(df["status"]) == ["ok"] * 4, df["error"].tolist()  # each read its own state, never another's
    hist = pd.read_csv(tmp_path / "pbt" / "history.csv")
    copies = hist.dropna(subset=["copied_from"])
    assert len(copies) >= 2
    for _, c in copies.iterrows():
        source = hist[(hist.trial_id == c.copied_from) & (hist.epoch == c.epoch - 1)]["acc"].item()
        assert c.acc == pytest.approx(source + c.param_lr * (1 - source))


def test_a_link_in_a_checkpoint_to_another_file_of_the_sweep_is_refused_in_one_line(tmp_path):
    with pytest.raises(sweeper.SweepError) as err:
        sweeper.sweep(pbt_fns.linked_outside, {"lr": sweeper.loguniform(0.01, 0.5)}, search="pbt", metric="acc",
                      workers=2, out=str(tmp_path), name="pbt", progress=False, pbt={"population": 2, "interval": 2})
    said = str(err.value)
    assert "holds a link, weights.bin ->" in said and "save the file itself" in said and "\n" not in said


def test_the_fsync_benchmark_runs_as_docs_pbt_md_gives_it(tmp_path):
    pytest.importorskip("sklearn")
    done = subprocess.run([sys.executable, "bench/pbt_fsync.py", "--folder", str(tmp_path), "--repeats", "1"],
                          cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith(("publish", "a schedule row"))]
    assert len(said) == 4 and all("durable" in line for line in said), done.stdout
    assert list(tmp_path.iterdir()) == []  # it leaves nothing behind
