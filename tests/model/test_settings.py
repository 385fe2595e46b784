"""The options are parsed once, into frozen typed groups: each group a frozen dataclass typed
without ``Any``, what users type read into records (a GPU selection, the memory policy, MB,
seconds, the constraints, PBT's settings), and each raw parse called from the one parsing
module, read from the source as tests/house/test_house.py reads it."""

from __future__ import annotations

import ast
import dataclasses
import os
import typing

import pytest

from sweeper.errors import SweepError
from sweeper.model import settings as settings_module
from sweeper.model.constraints import Constraints
from sweeper.model.devices import GpuSelection, MemoryPolicy
from sweeper.model.options import Options
from sweeper.model.pbt import PbtSettings
from sweeper.model.settings import Limits, Settings, parse

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sweeper")
PARSING = "sweeper.model.settings"

#: Each raw parse of an option, by the name it is defined under and the names it is also
#: reachable by, and the modules (besides PARSING) that may call it, with why.
RAW_PARSES: dict[str, tuple[set[str], set[str]]] = {
    "the GPU selection": ({"sweeper.model.devices.parse_gpus", "sweeper.placement.slots.parse_gpus"},
                          {"sweeper.model.devices"}),  # GpuSelection.of, the record's own reading
    "a GPU selection read": ({"sweeper.model.devices.GpuSelection.of"},
                             {"sweeper.front.job"}),  # `run --`'s own --gpus flag, no sweep's option
    "the memory policy": ({"sweeper.model.devices.resolve", "sweeper.system.capping.resolve"}, set()),
    "the constraints": ({"sweeper.model.constraints.parse"}, set()),
    "PBT's settings": ({"sweeper.model.pbt.settings", "sweeper.search.pbt_settings.settings",
                        "sweeper.search.pbt.settings"}, set()),
}
#: A size option (``host_memory``, ``gpu_memory``) read in MB: megabytes() of that attribute.
SIZES = {"sweeper.model.units.megabytes", "sweeper.model.options.megabytes"}
SIZE_OPTIONS = {"host_memory", "gpu_memory"}


def _modules() -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def _names(tree: ast.AST, module: str) -> dict[str, str]:
    """Each name a module binds by import (at its top or in a function), as the dotted name it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):  # import a.b binds a; import a.b as c binds c to a.b
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
    return names


def _dotted(node: ast.expr, names: dict[str, str], module: str) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id, f"{module}.{node.id}")
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, names, module)
        return f"{head}.{node.attr}" if head is not None else None
    return None


def _calls() -> list[tuple[str, str, ast.Call]]:
    """Every call in sweeper/: (the calling module, the dotted name called, the call)."""
    out = []
    for module, path in _modules().items():
        tree = ast.parse(open(path).read())
        names = _names(tree, module)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = _dotted(node.func, names, module)
                if called is not None:
                    out.append((module, called, node))
    return out


@pytest.mark.unit
def test_each_raw_parse_of_an_option_is_called_only_from_the_parsing_module():
    calls = _calls()
    for what, (called_as, also) in RAW_PARSES.items():
        callers = {m for m, name, _ in calls if name in called_as}
        assert callers, what  # the check finds the calls at all
        assert callers - {PARSING} - also == set(), f"{what} parsed again in {sorted(callers - {PARSING} - also)}"
    sizes = {m for m, name, call in calls if name in SIZES and call.args
             and isinstance(call.args[0], ast.Attribute) and call.args[0].attr in SIZE_OPTIONS}
    assert sizes == {PARSING}, sizes


@pytest.mark.unit
def test_the_checker_finds_a_parse_made_elsewhere():
    tree = ast.parse("from sweeper.placement.slots import parse_gpus as pg\n"
                     "from sweeper.model import constraints\n"
                     "def f(o):\n    return pg(o.gpus), constraints.parse(o.constraints)\n")
    names = _names(tree, "sweeper.run.x")
    called = {_dotted(n.func, names, "sweeper.run.x") for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert called == {"sweeper.placement.slots.parse_gpus", "sweeper.model.constraints.parse"}


def _groups() -> list[type]:
    hints = typing.get_type_hints(Settings, vars(settings_module))
    return [Settings, *(t for t in hints.values() if dataclasses.is_dataclass(t))]


@pytest.mark.unit
def test_every_option_group_is_a_frozen_dataclass_typed_without_any():
    groups = _groups()
    assert {g.__name__ for g in groups} >= {"Folder", "Resources", "Launching", "Limits", "Scoring",
                                             "SearchSettings", "Outputs"}
    for group in groups:
        assert dataclasses.is_dataclass(group) and group.__dataclass_params__.frozen, group  # type: ignore[attr-defined]
        for f in dataclasses.fields(group):
            assert "Any" not in str(f.type), f"{group.__name__}.{f.name}: {f.type}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse(Options()).limits.retries = 3  # type: ignore[misc]


@pytest.mark.unit
def test_what_users_type_is_read_into_records_once():
    options = Options.build({"gpus": "0,2", "per_gpu": 2, "host_memory": "3GB", "timeout": "10m", "retries": 1,
                             "fail_fast": True, "metric": "val_accuracy", "constraints": "params<=1e6",
                             "start_method": "spawn", "seed": 7, "out": "o", "name": "n"})
    got = parse(options)
    assert got.resources.gpus == GpuSelection(None, ("0", "2"), default=False) and got.resources.gpus.asked
    assert got.resources.memory == MemoryPolicy(2, 0.475) and got.resources.per_gpu == 2
    assert got.resources.host_memory_mb == 3072 and got.resources.packs_host
    assert got.limits == Limits(timeout=600.0, stall=None, retries=1, failure_limit=1)
    assert (got.scoring.metric, got.scoring.mode, got.scoring.objectives) == ("val_accuracy", None, None)
    assert got.scoring.constraints == Constraints(bounds=(("params", "<=", 1e6),))
    assert (got.launching.start_method, got.launching.seed, got.launching.backend) == ("spawn", 7, "local")
    assert (got.folder.out, got.folder.name) == ("o", "n")
    plain = parse(Options())
    assert plain.resources.gpus == GpuSelection("all") and not plain.resources.gpus.asked
    assert plain.resources.memory == MemoryPolicy(1, 0.95) and plain.scoring.constraints is None
    assert plain.search.pbt is None and plain.search.name is None
    population = parse(Options.build({"search": "pbt", "pbt": ["population=4"], "metric": "acc", "mode": "max"}),
                       population=True)
    assert population.search.pbt == PbtSettings(population=4) and population.scoring.mode == "max"
    auto = parse(Options.build({"workers": "auto", "per_gpu": "auto", "gpu_memory": "2GB", "memory_keys": ["u"]}))
    assert (auto.resources.workers, auto.resources.auto_workers, auto.resources.slots_workers) == (None, True, "auto")
    assert auto.resources.gpu_memory == 2048 and auto.resources.memory_keys == ("u",) and auto.resources.memory.auto


@pytest.mark.unit
def test_a_bad_option_is_still_refused_in_one_line_as_it_is_checked():
    for given, said in [({"gpus": "0,0"}, "gpus lists a GPU twice"),
                        ({"per_gpu": 4, "memory_fraction": 0.5}, "asks for 2 of each GPU"),
                        ({"constraints": "params<"}, "constraints"),
                        ({"host_memory": "lots"}, "host_memory must be a positive size")]:
        with pytest.raises(SweepError, match=said):
            Options.build(given)
    with pytest.raises(SweepError, match="pbt has no setting 'size'"):
        parse(Options.build({"search": "pbt", "pbt": {"size": 3}}), population=True)
