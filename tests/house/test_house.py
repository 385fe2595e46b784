"""The house's rules, read from the source: no import circle among
sweeper's modules, counting imports made inside functions (but not those only for type
checking), and no module using another sweeper module's private names."""

from __future__ import annotations

import ast
import os
import re
import sys

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "sweeper")


def _modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (never imported when run)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)
    return out


def _imports(name: str) -> list[tuple[str, str | None, str]]:
    """(module imported, name taken from it or None, the name it is bound to here) for
    each import ``name`` makes."""
    path = MODULES[name]
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out: list[tuple[str, str | None, str]] = []
    for node in _runtime_nodes(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            out += [(a.name, None, a.asname or a.name.partition(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                out.append((sub, None, a.asname or a.name) if sub in MODULES else (source, a.name, a.asname or a.name))
    return out


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.unit
def test_the_circle_finder_finds_a_circle_through_a_function_level_import():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.unit
def test_no_import_circle_among_sweepers_modules():
    assert circles(_graph()) == []


@pytest.mark.unit
def test_no_module_uses_another_modules_private_names():
    used = []
    for m in MODULES:
        aliases = {}  # a name bound here to another sweeper module
        for source, taken, bound in _imports(m):
            if source in MODULES and source != m and taken is not None and _private(taken):
                used.append(f"{m}: from {source} import {taken}")
            if source in MODULES and source != m and taken is None and bound != "sweeper":
                aliases[bound] = source
        for node in ast.walk(ast.parse(open(MODULES[m]).read())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and aliases.get(node.value.id, m) != m):
                used.append(f"{m}: {aliases[node.value.id]}.{node.attr}")
    assert used == []


#: The longest a function of sweeper's may be, its docstring included.
FUNCTION_LINES = 60


@pytest.mark.unit
def test_no_function_is_longer_than_a_screen():
    long = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > FUNCTION_LINES:
                    long.append(f"{m}.{node.name}: {lines} lines")
    assert long == [], long


#: Lines a module of sweeper's may have at most (a room one can live in).
MODULE_LINES = 450


@pytest.mark.unit
def test_no_module_is_longer_than_a_room():
    long = {m: n for m, path in MODULES.items() if (n := len(open(path).read().splitlines())) > MODULE_LINES}
    assert long == {}, long


#: Modules directly in ``sweeper/`` at most: the rest live in a package
#: named for its role (model, run, store, backends, child, front, results, tracking, system).
TOP_MODULES = 15


@pytest.mark.unit
def test_the_tree_shows_the_roles():
    top = sorted(m for m, path in MODULES.items() if m.count(".") == 1 and not path.endswith("__init__.py"))
    assert len(top) <= TOP_MODULES, top
    roles = {m.split(".")[1] for m, path in MODULES.items() if path.endswith("__init__.py") and m.count(".") == 1}
    assert roles == {"backends", "child", "front", "model", "placement", "results", "run", "search", "store",
                     "system", "tracking"}
    for role in roles:  # each package says what it holds, and names every module in it
        init = os.path.join(PACKAGE, role, "__init__.py")
        doc = ast.get_docstring(ast.parse(open(init).read())) or ""
        held = {os.path.basename(p)[:-3] for m, p in MODULES.items()
                if m.startswith(f"sweeper.{role}.") and m.count(".") == 2 and not p.endswith("__init__.py")}
        missing = sorted(n for n in held if not re.search(rf"\b{role}\.{n}\b|:mod:`~?\.?{n}`", doc))
        assert held and not missing, (role, missing)


@pytest.mark.unit
def test_the_documented_paths_still_lead_where_they_did():
    import sweeper.analysis
    import sweeper.importance
    import sweeper.metrics
    from sweeper.model import metrics
    from sweeper.results import importance, report

    assert sweeper.analysis.figures is report.figures
    assert sweeper.importance.importance is importance.importance
    assert sweeper.metrics.MINIMISED is metrics.MINIMISED and sweeper.metrics.MAXIMISED is metrics.MAXIMISED


@pytest.mark.unit
def test_the_machine_wide_placement_stands_below_what_runs_sweeps():
    """``sweeper.placement`` (the sweeps of one machine, told of each other) imports only
    errors, model, system and store; run and backends import it, never the other way."""
    low = ("sweeper.errors", "sweeper.model", "sweeper.system", "sweeper.store", "sweeper.placement")
    graph = _graph()
    above = [f"{m} imports {t}" for m in graph if m.startswith("sweeper.placement") for t in sorted(graph[m])
             if not t.startswith(low)]
    assert above == []
    assert any(t.startswith("sweeper.placement") for m in graph if m.startswith("sweeper.run.") for t in graph[m])


def _layers() -> dict[str, set[str]]:
    """docs/layout.md's table of layers: each package and the packages it may import."""
    text = open(os.path.join(ROOT, "docs", "layout.md")).read()
    table = text[text.index("## The layers"):]
    allowed: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit() and cells[1].isidentifier():
            allowed[cells[1]] = {p.strip() for p in cells[2].split(",")}
    return allowed


def _package(module: str) -> str | None:
    """The package a module of sweeper's lives in, or None for a top module."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and MODULES[module].endswith("__init__.py")):
        return parts[1]
    return "errors" if module == "sweeper.errors" else None


#: Imports against the table that a change in progress has still to take out: each names
#: the import and why it is there. The list only shrinks (a test below fails on one gone).
AGAINST_THE_TABLE: set[str] = set()


def _against_the_table() -> set[str]:
    allowed = _layers()
    out = set()
    for m, targets in _graph().items():
        here = _package(m)
        if here is None or here == "errors":
            continue
        for t in targets:
            there = _package(t)
            if there is not None and there != here and there not in allowed[here] and there != "errors":
                out.add(f"{m} imports {t}")
            if there is None and t != "sweeper":
                out.add(f"{m} imports {t}")  # a package importing a top module (the API) runs up the house
    return out


@pytest.mark.unit
def test_the_layer_table_names_every_package_once():
    packages = {m.split(".")[1] for m, p in MODULES.items() if p.endswith("__init__.py") and m.count(".") == 1}
    assert set(_layers()) == packages


@pytest.mark.unit
def test_every_import_goes_down_the_table_of_layers():
    assert sorted(_against_the_table() - AGAINST_THE_TABLE) == []


@pytest.mark.unit
def test_an_import_taken_out_is_struck_from_the_list_of_those_against_the_table():
    assert sorted(AGAINST_THE_TABLE - _against_the_table()) == []


@pytest.mark.unit
def test_no_package_imports_another_in_a_circle():
    graph: dict[str, set[str]] = {p: set() for p in _layers()}
    for m, targets in _graph().items():
        here = _package(m)
        if here in graph:
            graph[here] |= {there for t in targets if (there := _package(t)) in graph and there != here
                            and f"{m} imports {t}" not in AGAINST_THE_TABLE}
    assert circles(graph) == []


@pytest.mark.unit
def test_the_layer_checker_names_an_import_that_runs_up_the_table(monkeypatch):
    graph = _graph()
    graph["sweeper.model.trial"] = graph["sweeper.model.trial"] | {"sweeper.run.engine"}
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: graph)
    assert "sweeper.model.trial imports sweeper.run.engine" in _against_the_table()
