"""One owner of file paths (sweeper.store.paths): what an earlier sweep leaves is set aside beside
its successor, never overwritten and never half moved."""

from __future__ import annotations

import os
import re

import pytest

from sweeper.store import paths

pytestmark = pytest.mark.unit


def test_a_ledger_is_set_aside_with_its_wal_and_shm(tmp_path):
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "results.csv"):
        (tmp_path / name).write_text(name)
    aside = paths.set_aside(str(tmp_path / "ledger.sqlite"))
    assert aside is not None and re.fullmatch(r"ledger\.\d{8}-\d{6}\.sqlite", os.path.basename(aside))
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(aside) + extra for extra in ("", "-wal", "-shm")] + ["results.csv"])
    assert open(aside + "-wal").read() == "ledger.sqlite-wal"  # each part moved whole, beside its file


def test_a_folder_is_set_aside_under_a_stamped_name(tmp_path):
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "tensorboard" / "x").write_text("kept")
    aside = paths.set_aside(str(tmp_path / "tensorboard"))
    assert aside is not None and re.fullmatch(r"tensorboard\.\d{8}-\d{6}", os.path.basename(aside))
    assert open(os.path.join(aside, "x")).read() == "kept"


def test_a_set_aside_never_overwrites_one_made_the_same_second(tmp_path):
    for text in ("first", "second", "third"):
        (tmp_path / "results.csv").write_text(text)
        paths.set_aside(str(tmp_path / "results.csv"), stamp="20261203-101500")
    got = {n: (tmp_path / n).read_text() for n in os.listdir(tmp_path)}
    assert got == {"results.20261203-101500.csv": "first", "results.20261203-101500-2.csv": "second",
                   "results.20261203-101500-3.csv": "third"}


def test_a_folder_named_with_a_trailing_slash_goes_beside_itself(tmp_path):
    (tmp_path / "tensorboard").mkdir()
    aside = paths.set_aside(str(tmp_path / "tensorboard") + os.sep, stamp="20261203-101500")
    assert aside == str(tmp_path / "tensorboard.20261203-101500") and os.listdir(tmp_path) == [
        "tensorboard.20261203-101500"]


def test_nothing_there_is_nothing_to_set_aside(tmp_path):
    assert paths.set_aside(str(tmp_path / "results.csv")) is None
    assert os.listdir(tmp_path) == []


def test_the_log_header_is_found_again_by_its_pid():
    header = paths.log_header("x=1", "abc", 2, 4242, "cpu", 7)
    assert header.startswith(paths.LOG_HEADER) and "attempt 2" in header and "pid 4242" in header
    assert re.search(r", \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ===$", header)
