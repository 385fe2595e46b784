"""The public API and what is internal, held to docs/api.md's rule: the page's lists are the
modules' ``__all__``; every name the README, the docs and ``experiments/`` tell a user to
import is public by the rule; every public function and class documents what it takes, gives
and raises, with an example that runs and prints what it shows (doctests here, in the test's
own process; script examples written to files and run as a user runs them)."""

from __future__ import annotations

import ast
import dataclasses
import doctest
import glob
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from conftest import ROOT

PAGE = os.path.join(ROOT, "docs", "api.md")

#: Public names whose docstrings do not yet meet the standard, each with why. The list only
#: shrinks: a test below fails on a name listed here whose docstring meets it.
PENDING: dict[str, str] = {
}


# -- the page ---------------------------------------------------------------------------------


def public() -> dict[str, list[str]]:
    """docs/api.md's lists: each public module and the names it gives, in the page's order."""
    text = open(PAGE, encoding="utf-8").read()
    out: dict[str, list[str]] = {"sweeper": []}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or not cells[0].startswith("`"):
            continue
        first = cells[0].strip("`")
        if first.startswith("sweeper."):
            out[first] = re.findall(r"`([A-Za-z_]\w*)`", cells[1])
        else:
            out["sweeper"].append(first)
    return out


def is_public(dotted: str, listed: dict[str, list[str]] | None = None) -> bool:
    """Whether a dotted path (``sweeper.keras.Report``, ``sweeper.Status.OK``) is public by the
    rule: a public module, or a name one lists (and anything reached through that name)."""
    listed = public() if listed is None else listed
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in listed:
            return cut == len(parts) or parts[cut] in listed[module]
    return False


def _objects() -> list[tuple[str, Any]]:
    """Every public function and class, by its public path (``sweeper.keras`` read, not imported)."""
    out = []
    for module, names in public().items():
        for name in names:
            if module == "sweeper.keras":  # imports Keras: its docstrings are read from the source
                out.append((f"{module}.{name}", _Source(os.path.join(ROOT, "sweeper", "keras.py"), name)))
                continue
            obj = getattr(importlib.import_module(module), name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                out.append((f"{module}.{name}", obj))
    return out


class _Source:
    """A class of a module not imported here, as its source says it: docstring and parameters."""

    def __init__(self, path: str, name: str) -> None:
        tree = ast.parse(open(path, encoding="utf-8").read())
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        self.__doc__ = ast.get_docstring(node)
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        self.parameters = [a.arg for a in init.args.args[1:] + init.args.kwonlyargs] if init else []


# -- the docstrings ---------------------------------------------------------------------------

SECTION = re.compile(r"^(Args|Attributes|Returns|Raises|Example):\s*$", re.M)


def sections(doc: str) -> dict[str, str]:
    """A Google-style docstring's sections by heading, each its indented body."""
    found = list(SECTION.finditer(doc))
    return {m.group(1): doc[m.end():found[i + 1].start() if i + 1 < len(found) else len(doc)]
            for i, m in enumerate(found)}


def _parameters(obj: Any) -> tuple[list[str], bool]:
    """What it is called with, as a docstring names each (``**options``), and whether it
    returns a value; for a class, what it is made from (a dataclass's fields)."""
    if isinstance(obj, _Source):
        return obj.parameters, False
    if hasattr(obj, "__dataclass_fields__"):
        return [f.name for f in dataclasses.fields(obj) if f.init], False
    if inspect.isclass(obj):
        if not inspect.isfunction(getattr(obj, "__init__", None)):
            return [], False
        signature = inspect.signature(obj.__init__)  # (an enum's passes *args on: made from its value)
        return [p.name for p in signature.parameters.values() if p.name != "self"
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)], False
    signature = inspect.signature(obj)
    names = [("**" if p.kind is p.VAR_KEYWORD else "*" if p.kind is p.VAR_POSITIONAL else "") + p.name
             for p in signature.parameters.values()]
    return names, signature.return_annotation not in (None, "None")


def missing(path: str, obj: Any) -> list[str]:
    """What the docstring of a public function or class lacks, in words. A function needs
    Args (each parameter), Returns (unless it gives None), Raises and an Example; a class
    Args (what a user makes it from, each named, and Raises) or Attributes (a record sweeper
    makes: each field named), and an Example."""
    doc = inspect.cleandoc(obj.__doc__ or "")
    found = sections(doc)
    problems = [f"no {s}:" for s in ("Raises", "Example") if s not in found]
    parameters, returns = _parameters(obj)
    if inspect.isclass(obj) or isinstance(obj, _Source):
        if "Args" not in found and "Attributes" not in found:
            problems.append("no Args: (or Attributes: for a record)")
        if "Args" not in found and "Attributes" in found:  # a record: each field named, nothing to refuse
            problems.remove("no Raises:") if "no Raises:" in problems else None
            problems += [f"field {p} not in Attributes:" for p in parameters
                         if not re.search(rf"\b{p}\b", found["Attributes"])]
            parameters = []
    elif returns and "Returns" not in found:
        problems.append("no Returns:")
    problems += [f"parameter {p} not in Args:" for p in parameters
                 if not re.search(rf"^\s*{re.escape(p)}:", found.get("Args", ""), re.M)]
    example = found.get("Example", "")
    if "Example" in found and ">>>" not in example and not _scripts(example):
        problems.append("Example: is neither a doctest (>>>) nor files and a command that prints")
    return [f"{path}: {p}" for p in problems]


# -- the script examples ------------------------------------------------------------------------

FILE = re.compile(r"file ``([\w.]+)``.*::\s*$")
COMMAND = re.compile(r"^``python ([\w.]+)`` prints::\s*$")


def _blocks(text: str) -> list[tuple[str, str]]:
    """Each ``::`` paragraph's last line and the indented block that follows it."""
    lines = textwrap.dedent(text).splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].rstrip().endswith("::"):
            head, i, body = lines[i].strip(), i + 1, []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                body.append(lines[i])
                i += 1
            out.append((head, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
        else:
            i += 1
    return out


def _scripts(example: str) -> tuple[dict[str, str], list[tuple[str, str]]] | None:
    """A script example's files (name: text) and its runs (script, what it prints); None if it
    is not one."""
    files, runs = {}, []
    for head, body in _blocks(example):
        if (named := FILE.search(head)) is not None:
            files[named.group(1)] = body
        elif (command := COMMAND.match(head)) is not None:
            runs.append((command.group(1), body))
    return (files, runs) if files and runs and all(script in files for script, _ in runs) else None


def _examples(kind: str) -> list[tuple[str, Any]]:
    out = []
    for path, obj in _objects():
        example = sections(inspect.cleandoc(obj.__doc__ or "")).get("Example", "")
        if (">>>" in example) == (kind == "doctest") and example:
            out.append((path, obj))
    return out


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_page_lists_exactly_sweepers_own_names():
    import sweeper

    listed = public()
    assert sorted(listed["sweeper"]) == sorted(sweeper.__all__)
    assert sorted(dir(sweeper)) == sorted(sweeper.__all__)
    doc = sweeper.__doc__ or ""
    assert "docs/api.md" in doc
    assert [n for n in sweeper.__all__ if not re.search(rf"\b{n}\b", doc)] == []  # its docstring names each


@pytest.mark.unit
def test_each_public_module_gives_exactly_what_the_page_lists():
    listed = public()
    assert set(listed) >= {"sweeper", "sweeper.keras", "sweeper.worker", "sweeper.analysis",
                           "sweeper.importance", "sweeper.metrics", "sweeper.backends",
                           "sweeper.search"}  # (a seam: a row more)
    for module, names in listed.items():
        if module == "sweeper.keras":  # imports Keras: its __all__ read from the source
            tree = ast.parse(open(os.path.join(ROOT, "sweeper", "keras.py"), encoding="utf-8").read())
            declared = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                            and any(getattr(t, "id", "") == "__all__" for t in n.targets))
        else:
            declared = importlib.import_module(module).__all__
        assert sorted(declared) == sorted(names), module


@pytest.mark.unit
def test_every_module_at_the_top_of_the_package_is_public_or_said_internal():
    top = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "sweeper", "*.py"))} - {"__init__"}
    public_ones = {m.split(".")[1] for m in public() if m.count(".") == 1}
    page = open(PAGE, encoding="utf-8").read()
    internal = {m for m in top - public_ones if f"`sweeper.{m}`" in page.split("## sweeper's own names")[0]}
    assert top - public_ones - internal == set()
    assert internal == {"api", "errors", "__main__"}


def _told_to_import() -> list[tuple[str, str]]:
    """(where, dotted name) for each sweeper name the README, docs/*.md and experiments/*.py
    import or use: fenced Python blocks and inline code that imports, and the examples' code."""
    pages = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
    code: list[tuple[str, str]] = []
    for page in pages:
        text = open(page, encoding="utf-8").read()
        where = os.path.relpath(page, ROOT)
        code += [(where, block) for block in re.findall(r"```python\n(.*?)```", text, re.S)]
        code += [(where, span) for span in re.findall(r"`([^`\n]*\bimport\b[^`\n]*)`", text)]
    for example in sorted(glob.glob(os.path.join(ROOT, "experiments", "*.py"))):
        code.append((os.path.relpath(example, ROOT), open(example, encoding="utf-8").read()))
    return [(where, name) for where, text in code for name in names_used(text)]


def names_used(code: str) -> list[str]:
    """The sweeper names a piece of code imports or reaches: ``from sweeper.x import a, b``
    gives ``sweeper.x.a`` and ``sweeper.x.b``; ``import sweeper.x`` and ``sweeper.x.y(...)``
    their dotted paths."""
    out = []
    for module, names in re.findall(r"^\s*from\s+(sweeper(?:\.\w+)*)\s+import\s+(\([^)]*\)|[\w \t,]+)", code, re.M):
        names = names.strip("()")
        out += [f"{module}.{n.split(' as ')[0].strip()}" for n in names.split(",") if n.strip()]
    out += re.findall(r"^\s*import\s+(sweeper(?:\.\w+)*)", code, re.M)
    out += re.findall(r"(?<![\w.])(sweeper(?:\.\w+)+)", re.sub(r"^\s*from\s.*$", "", code, flags=re.M))
    return out


@pytest.mark.unit
def test_every_name_the_docs_tell_users_to_import_is_public():
    listed = public()
    found = _told_to_import()
    assert {name for _, name in found} >= {"sweeper.keras.Report", "sweeper.worker.setup", "sweeper.sweep",
                                            "sweeper.backends.register",
                                            "sweeper.search.register"}  # the scan reads what it should
    assert [f"{where}: {name}" for where, name in found if not is_public(name, listed)] == []


@pytest.mark.unit
def test_the_rule_tells_an_internal_path_from_a_public_one():
    listed = public()
    assert is_public("sweeper.keras.Report", listed) and is_public("sweeper.Status.OK", listed)
    assert is_public("sweeper", listed) and is_public("sweeper.backends.register", listed)
    assert is_public("sweeper.search.register", listed) and is_public("sweeper.search.Made", listed)
    assert not is_public("sweeper.search.registry.lookup", listed)  # a seam's package: its modules internal
    assert not is_public("sweeper.search.pbt", listed)
    assert not is_public("sweeper.model.grid.expand", listed)  # public, but not from where it lives
    assert not is_public("sweeper.run.runner.run_shown", listed)
    assert not is_public("sweeper.keras.compiled", listed)
    assert names_used("from sweeper.run.runner import run_shown, Outcome as O\nimport sweeper.worker\n"
                      "x = sweeper.current_trial().dir") == [
        "sweeper.run.runner.run_shown", "sweeper.run.runner.Outcome", "sweeper.worker", "sweeper.worker",
        "sweeper.current_trial"]


@pytest.mark.unit
def test_every_public_function_and_class_says_what_it_takes_gives_and_raises_with_an_example():
    objects = _objects()
    assert len(objects) >= 20
    lacking = [p for path, obj in objects if path not in PENDING for p in missing(path, obj)]
    assert lacking == []


@pytest.mark.unit
def test_a_name_is_struck_from_the_pending_list_once_its_docstring_meets_the_standard():
    paths = dict(_objects())
    assert set(PENDING) <= set(paths)
    assert [p for p in PENDING if not missing(p, paths[p])] == []


@pytest.mark.unit
def test_the_docstring_checker_finds_what_a_docstring_lacks():
    def f(a: int, **extra: Any) -> int:
        """Does.

        Args:
            a: a number.

        Example:
            Nothing to run.
        """
        return a

    assert missing("f", f) == ["f: no Raises:", "f: no Returns:", "f: parameter **extra not in Args:",
                               "f: Example: is neither a doctest (>>>) nor files and a command that prints"]

    @dataclasses.dataclass(frozen=True)
    class Record:
        """A record.

        Attributes:
            first: one.

        Example:
            >>> 1
            1
        """

        first: int
        second: int = 0

    assert missing("Record", Record) == ["Record: field second not in Attributes:"]


@pytest.mark.unit
@pytest.mark.parametrize("path", [p for p, _ in _examples("doctest")])
def test_a_doctest_example_prints_what_it_shows(path):
    from sweeper.backends import registry as backends
    from sweeper.search import registry as searches

    obj = dict(_objects())[path]
    # each seam's register() example registers one: its registry put back after
    kept = [(table, dict(table)) for table in (backends._BACKENDS, searches._SEARCHES)]
    try:
        test = doctest.DocTestParser().get_doctest(inspect.cleandoc(obj.__doc__), {}, path, path, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        out: list[str] = []
        result = runner.run(test, out=out.append)
    finally:
        for table, before in kept:
            table.clear()
            table.update(before)
    assert result.attempted > 0 and result.failed == 0, "".join(out)


@pytest.mark.parametrize("path", [p for p, _ in _examples("script")])
def test_a_script_example_prints_what_it_shows(path, tmp_path):
    """Its files written as a user pastes them, each command run with this Python (first on
    ``PATH``, as in a virtual environment), its standard output compared line by line."""
    obj = dict(_objects())[path]
    found = _scripts(sections(inspect.cleandoc(obj.__doc__)).get("Example", ""))
    assert found is not None
    files, runs = found
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    for script, shown in runs:
        done = subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        assert [l.rstrip() for l in done.stdout.splitlines()] == [l.rstrip() for l in shown.splitlines()], \
            done.stderr[-3000:]


@pytest.mark.unit
def test_every_public_example_is_run_by_one_test_or_the_other():
    paths = {p for p, _ in _objects() if p not in PENDING}
    assert {p for p, _ in _examples("doctest")} | {p for p, _ in _examples("script")} == paths
