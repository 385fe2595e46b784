"""Whether the script that calls ``sweep()`` calls it at its top level, outside ``if __name__ ==
"__main__":``: told before anything runs, from the script's own source.

A trial process imports the calling script again, as multiprocessing's spawn does (a fork of
the fork server, a spawned trial, a Slurm task), with ``__name__`` set to ``__mp_main__``: its
top level runs again, and a ``sweep()`` there with it. The stack says which top-level
statement of the script is running now (the script's module frame, and its line); the
script's syntax tree (:mod:`ast`) says whether that statement, and each call on the way down
to ``sweep()`` (functions the script defines, called where they are), runs again on such an
import. Only what the tree tells for sure is refused: a step under an ``if``, a ``while``, a
``match``, an ``except``, a conditional expression, a comprehension or after an earlier
``return``, ``raise`` or ``exit()`` may not run again, and a step through another file's code
cannot be read here; these pass (the trial process still stops at once where the call runs
again, and the sweep says so then). Aliases need nothing of their own: the stack names the call
that reached ``sweep()``, however it was spelled.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Iterator

from sweeper.errors import SweepError

#: The fields of a node whose code runs whenever the node's does (a ``with``'s body, a call's
#: arguments, an ``if``'s test); any other field (an ``if``'s body, an ``except``, a conditional
#: expression's branches, a comprehension's element) may not run. A ``for``'s body is taken to
#: run: the script was on its way to the call, so the loop did not stop before its first turn.
_ALWAYS: dict[type, tuple[str, ...]] = {
    ast.Expr: ("value",), ast.Assign: ("value",), ast.AnnAssign: ("value",), ast.AugAssign: ("value",),
    ast.Return: ("value",), ast.With: ("items", "body"), ast.AsyncWith: ("items", "body"),
    ast.withitem: ("context_expr",), ast.For: ("iter", "body"), ast.AsyncFor: ("iter", "body"),
    ast.Try: ("body",), ast.If: ("test",), ast.While: ("test",), ast.IfExp: ("test",), ast.Match: ("subject",),
    ast.Await: ("value",), ast.NamedExpr: ("value",), ast.Call: ("func", "args", "keywords"),
    ast.keyword: ("value",), ast.Starred: ("value",), ast.Attribute: ("value",),
    ast.Subscript: ("value", "slice"), ast.Tuple: ("elts",), ast.List: ("elts",), ast.Set: ("elts",),
    ast.Dict: ("keys", "values"), ast.BinOp: ("left", "right"), ast.UnaryOp: ("operand",),
    ast.Compare: ("left", "comparators"), ast.JoinedStr: ("values",), ast.FormattedValue: ("value",),
}
#: Calls that end the script early where an earlier statement makes them.
_EXITS = {"exit", "_exit", "quit", "abort"}


@dataclass(frozen=True)
class Step:
    """One frame on the way from the script's top level to ``sweep()``: the code it runs (its
    qualified name, ``<module>`` for the top level; the line its ``def`` starts on) and where it
    is now (the call's line, end line, column, end column)."""

    qualname: str
    first_line: int
    at: tuple[int | None, int | None, int | None, int | None]


def check(caller: FrameType | None, what: str = "sweep()") -> None:
    """Refuse, in one line, a ``what`` called at the calling script's top level; ``caller`` is
    the frame that called it. Nothing is refused where the script cannot be read."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or caller is None:
        return
    steps = _steps(caller, vars(main), path)
    if steps is None:
        return
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return
    if reruns(tree, steps):
        line = steps[0].at[0]
        via = "".join(f", through {s.qualname}()" for s in steps[1:])
        raise SweepError(f"{path} calls {what} at its top level (line {line}{via}), so every trial process, which "
                         f"imports it again, would call it again; put that line under if __name__ == \"__main__\": "
                         "(nothing ran)")


def _steps(caller: FrameType, namespace: dict[str, object], path: str) -> list[Step] | None:
    """The frames from the script's top level down to ``caller``, outermost first; None where
    the way passes through another file's code, or the script's top level is not running."""
    out: list[Step] = []
    frame: FrameType | None = caller
    while frame is not None:
        code = frame.f_code
        if frame.f_globals is not namespace or not _same_file(code.co_filename, path):
            return None
        positions = list(code.co_positions())
        at = positions[frame.f_lasti // 2] if 0 <= frame.f_lasti // 2 < len(positions) else (None,) * 4
        name = getattr(code, "co_qualname", code.co_name)
        out.append(Step(name, code.co_firstlineno, at))
        if code.co_name == "<module>":
            return out[::-1]
        frame = frame.f_back
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        return a == b or os.path.samefile(a, b)
    except OSError:
        return False


def reruns(tree: ast.Module, steps: list[Step]) -> bool:
    """Whether every step runs again when the script is imported again: each call on the way
    lies in its code where it always runs (:data:`_ALWAYS`), after nothing that could end
    that code early. False wherever the tree does not say so for sure."""
    for i, step in enumerate(steps):
        scope: ast.AST | None = _defined(tree, step) if i else tree
        if scope is None:
            return False
        call = _call_at(scope, step.at)
        if call is None or not _always(scope, call):
            return False
    return True


def _defined(tree: ast.Module, step: Step) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function a step runs, found by its qualified name through the script's own
    definitions, and its first line (a decorator's, where it has one)."""
    body: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in step.qualname.split("."):
        if part == "<locals>":
            continue
        found = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.name == part), None)
        if found is None:
            return None
        body = found.body
    if not isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    first = min([found.lineno, *(d.lineno for d in found.decorator_list)])
    return found if first == step.first_line else None


def _call_at(scope: ast.AST, at: tuple[int | None, ...]) -> ast.Call | None:
    """The call in ``scope`` at exactly these positions (where its code is now), else None."""
    if None in at:
        return None
    for node in _own(scope):
        if isinstance(node, ast.Call) and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) == at:
            return node
    return None


def _own(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope``'s own code: not those of the functions, classes and lambdas in it."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield from _own(child)


def _always(scope: ast.AST, target: ast.AST) -> bool:
    """Whether ``target`` runs whenever ``scope``'s code runs: each node on the way down to it
    is in a field of its parent that always runs, after no statement that could end early."""
    node = scope
    while node is not target:
        step = _child_towards(node, target)
        if step is None:
            return False
        field, child = step
        first = isinstance(node, ast.BoolOp) and child is node.values[0]  # ``a or b``: a always runs
        if node is not scope and field not in _ALWAYS.get(type(node), ()) and not first:
            return False
        siblings = getattr(node, field)
        if isinstance(siblings, list) and any(_may_end(s) for s in siblings[:siblings.index(child)]):
            return False
        node = child
    return True


def _child_towards(node: ast.AST, target: ast.AST) -> tuple[str, ast.AST] | None:
    """The field of ``node`` and its child that holds ``target``."""
    for field, value in ast.iter_fields(node):
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST) and (child is target or any(n is target for n in ast.walk(child))):
                return field, child
    return None


def _may_end(statement: ast.AST) -> bool:
    """Whether an earlier statement could end its code before what follows it: it holds a
    ``return``, ``raise``, ``break`` or ``continue``, or calls ``exit()`` (any spelling). A
    ``def`` runs none of its body."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for node in [statement, *_own(statement)]:
        if isinstance(node, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            return True
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _EXITS:
                return True
    return False
