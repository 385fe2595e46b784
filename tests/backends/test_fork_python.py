"""The fork server leans on multiprocessing's private names
(:mod:`sweeper.backends.local.internals`), so it is used only on the Pythons they were
tested on; on any other the sweep's trials are spawned, and one line says why."""

from __future__ import annotations

import pytest

from sweeper.backends.local import internals
from sweeper.backends.local.fork import Launcher
from sweeper.backends.local.standby import Standbys
from sweeper.model.target import FileTarget


@pytest.mark.unit
@pytest.mark.parametrize("version", [(3, 11), (3, 12)])
def test_a_tested_python_may_use_the_fork_server(monkeypatch, version):
    monkeypatch.setattr(internals, "PYTHON", version)
    assert internals.refusal() is None


@pytest.mark.unit
@pytest.mark.parametrize("version", [(3, 10), (3, 13), (3, 14), (4, 0)])
def test_an_untested_python_is_refused_in_one_line(monkeypatch, version):
    monkeypatch.setattr(internals, "PYTHON", version)
    assert internals.refusal() == (f"the fork server is not used on Python {version[0]}.{version[1]} "
                                   "(tested on 3.11-3.12)")


@pytest.mark.unit
def test_a_tested_range_is_named_first_to_last(monkeypatch):
    monkeypatch.setattr(internals, "TESTED", ((3, 11), (3, 11)))
    monkeypatch.setattr(internals, "PYTHON", (3, 12))
    assert internals.refusal() == "the fork server is not used on Python 3.12 (tested on 3.11)"
    monkeypatch.setattr(internals, "TESTED", ((3, 11), (3, 13)))
    assert internals.refusal() is None


@pytest.mark.unit
def test_on_an_untested_python_no_server_starts_trials_are_spawned_and_it_is_said_once(monkeypatch, caplog):
    monkeypatch.setattr(internals, "PYTHON", (3, 14))
    launcher = Launcher(FileTarget("grid.py"), "tag", "forkserver", None)
    with caplog.at_level("WARNING", logger="sweeper"):
        for _ in range(3):  # each trial's start asks for the server
            launcher.open_server([], Standbys(prefetch=True), [])
    assert launcher.no_forks and launcher.server is None and not launcher.starting()
    assert [r.getMessage() for r in caplog.records] == [
        "sweeper: the fork server is not used on Python 3.14 (tested on 3.11-3.12); "
        "trials start in fresh spawn processes"]


@pytest.mark.unit
def test_spawn_asked_for_is_not_said(monkeypatch, caplog):
    monkeypatch.setattr(internals, "PYTHON", (3, 14))
    launcher = Launcher(FileTarget("grid.py"), "tag", "spawn", None)
    with caplog.at_level("WARNING", logger="sweeper"):
        launcher.open_server([], Standbys(prefetch=True), [])
    assert launcher.no_forks and launcher.server is None and not caplog.records
