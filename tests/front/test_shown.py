"""A sweep as the console shows it, one path for every front door: ``sweep()``, the command
line, the Hydra launcher and a replay each run their sweep through
:func:`sweeper.front.shown.run_shown` (the view a listener of the run, then the closing
summary), read from the source; the run itself shows nothing."""

from __future__ import annotations

import ast
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "sweeper")
SHOWN = os.path.join("sweeper", "front", "shown.py")
#: Every front door that runs a sweep.
DOORS = {os.path.join("sweeper", "api.py"), os.path.join("sweeper", "front", "cli.py"),
         os.path.join("sweeper", "front", "hydra", "launcher.py"), os.path.join("sweeper", "front", "replay.py")}


def _calls(source: str) -> set[str]:
    """What a module calls of the run and the view: ``runner.run``, ``run`` taken from the
    runner, ``choose_view``, ``run_shown``, ``summary`` taken from the view's module."""
    if "runner" not in source and "choose_view" not in source and "run_shown" not in source:
        return set()  # nothing of the run or the view named: nothing to read
    tree = ast.parse(source)
    taken = {a.asname or a.name: f"{node.module}.{a.name}" for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module for a in node.names}
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "runner":
            out.add(f"runner.{func.attr}")
        elif isinstance(func, ast.Name) and func.id in taken:
            out.add(taken[func.id])
    return out


def _modules() -> dict[str, set[str]]:
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path) as source:
                    out[os.path.relpath(path, ROOT)] = _calls(source.read())
    return out


@pytest.mark.unit
def test_the_call_reader_sees_a_front_door_running_a_sweep_itself():
    assert _calls("from sweeper.run import runner\nrunner.run(d, listener=v)\n") == {"runner.run"}
    assert _calls("from sweeper.front.progress import choose_view\nv = choose_view(False, None, None)\n") == \
        {"sweeper.front.progress.choose_view"}
    assert _calls("from sweeper.front.shown import run_shown\nrun_shown(d)\n") == {"sweeper.front.shown.run_shown"}


@pytest.mark.unit
def test_every_front_door_runs_its_sweep_through_one_path():
    calls = _modules()
    runs = {m for m, c in calls.items() if c & {"runner.run", "sweeper.run.runner.run", "runner.run_shown"}}
    views = {m for m, c in calls.items() if "sweeper.front.progress.choose_view" in c}
    summaries = {m for m, c in calls.items() if c & {"runner.summary", "sweeper.run.runner.summary"}}
    assert runs == {SHOWN} and views == {SHOWN} and summaries == set()
    assert {m for m, c in calls.items() if "sweeper.front.shown.run_shown" in c} == DOORS
