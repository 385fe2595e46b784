"""A shell template read as the shell will read it (``Command(template, shell=True)``):
literal text, and each placeholder with the context it stands in (bare, inside double
quotes, in a here-document), so that its value, given as an environment variable, stands
as itself; a placeholder where none could is refused before anything runs
(:mod:`sweeper.child.command` runs what this reads).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SweepError

#: Where a placeholder stands in a shell template, which decides how its variable is written.
BARE, DOUBLE, HEREDOC = "bare", "double-quoted", "here-document"


@dataclass(frozen=True)
class Placeholder:
    """A placeholder in a shell template, and the context it stands in."""

    name: str
    context: str  # BARE, DOUBLE or HEREDOC


class _Frame:
    """One nesting level of the shell's lexer: the command line, a quote, a substitution."""

    __slots__ = ("kind", "depth", "delim", "strip", "line_start")

    def __init__(self, kind: str, delim: str = "", strip: bool = False) -> None:
        self.kind = kind  # "cmd" "$(" "`" '"' "'" "${" "((" "#" "<<" "<<'"
        self.depth = 0  # parentheses (or braces) opened inside it
        self.delim, self.strip, self.line_start = delim, strip, True


_COMMANDS = ("cmd", "$(", "`")  # where words, comments and here-document operators are read


_WORD_START = frozenset(" \t\n;&|()<>")


_OPERATOR = _WORD_START


def shell_pieces(template: str) -> list[str | Placeholder]:
    """The template as the shell will read it: literal text, and each placeholder with its
    context, read as POSIX ``sh`` reads quotes, escapes, comments, ``$(...)``, ``${...}``,
    arithmetic and here-documents. A placeholder where its variable cannot stand as itself
    is refused (a :class:`SweepError` naming where, and the fix) before anything runs.
    """
    tokens: list[str | Placeholder] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        tokens.extend(literal)
        if name is not None:
            tokens.append(Placeholder(name, ""))
    return _ShellReader(tokens).read()


def _refuse(name: str, where: str, fix: str = "") -> SweepError:
    fix = fix or (f"write it bare (e.g. --{name}={{{name}}}) or inside \"...\"; sweeper gives each value "
                  "to the shell as an environment variable")
    return SweepError(f"the shell command has {{{name}}} {where}; {fix}")


class _ShellReader:
    """:func:`shell_pieces`'s lexer: the characters and placeholders of a template, read one
    at a time in the frame (quote, substitution, comment, here-document) they stand in."""

    def __init__(self, tokens: list[str | Placeholder]) -> None:
        self.tokens = tokens
        self.out: list[str | Placeholder] = []
        self.frames = [_Frame("cmd")]
        self.pending: list[_Frame] = []  # here-documents whose bodies start at the next newline
        self.escaped, self.prev, self.i = False, "\n", 0

    def at(self, j: int) -> str | Placeholder | None:
        return self.tokens[j] if j < len(self.tokens) else None

    def read(self) -> list[str | Placeholder]:
        while self.i < len(self.tokens):
            tok, top = self.tokens[self.i], self.frames[-1]
            if top.kind in ("<<", "<<'") and top.line_start and self._delimiter_line(top):
                continue
            if isinstance(tok, Placeholder):
                self._slot(tok.name, top)
                continue
            ch, nxt, kind = tok, self.at(self.i + 1), top.kind
            self.i += 1
            self.out.append(ch)
            if self.escaped:
                self.escaped, self.prev = False, "x"
            elif kind in ("'", "<<'"):
                self._in_single(ch, top)
            elif kind == "#":
                self._in_comment(ch)
            elif ch == "\\":
                self.escaped = True
            elif ch == "$" and nxt in ("(", "{"):
                self._substitution(nxt)
            elif ch == "`":
                self._backquote(kind)
            elif kind in ('"', "<<"):
                self._in_double(ch, top)
            elif kind in ("((", "${"):
                self._in_braces(ch, nxt, top)
            else:
                self._in_command(ch, nxt, top)
        return self.out

    def _delimiter_line(self, top: _Frame) -> bool:
        """At the start of a here-document's line: True (and past it) if it is the delimiter."""
        tokens, i = self.tokens, self.i
        end = next((j for j in range(i, len(tokens)) if tokens[j] == "\n"), len(tokens))
        line = tokens[i:end]
        if all(isinstance(t, str) for t in line) and \
                "".join(line).lstrip("\t" if top.strip else "") == top.delim:  # type: ignore[arg-type]
            self.out.extend(tokens[i:end + 1])
            self.frames.pop()
            self.i, self.prev, self.escaped = end + 1, "\n", False
            return True
        top.line_start = False
        return False

    def _slot(self, name: str, top: _Frame) -> None:
        """A placeholder: its context, or a refusal where its value cannot stand as itself."""
        kinds = {f.kind for f in self.frames}
        if self.escaped:
            raise _refuse(name, "after a backslash, which would escape it")
        if top.kind == "'":
            raise _refuse(name, "inside '...', where the shell expands nothing")
        if top.kind == "#":
            raise _refuse(name, "in a # comment, where it reaches nothing", "move it out of the comment")
        if top.kind == "<<'":
            raise _refuse(name, "in a here-document whose delimiter is quoted (<<'EOF'), where nothing "
                          "expands", "leave the delimiter unquoted (<<EOF)")
        if "((" in kinds:
            raise _refuse(name, "inside arithmetic ((...)), where the shell would evaluate the value as an "
                          "expression", "pass it to the script as an argument and compute there")
        if "${" in kinds:
            raise _refuse(name, "inside ${...}")
        if "`" in kinds:
            raise _refuse(name, "inside `...`", "use $(...) instead of backquotes")
        if self.prev == "$":
            raise _refuse(name, "right after $, where the shell would read ${...}",
                          f"write {{{name}}} alone for the value, or ${{{{{name}}}}} for the shell's own ${name}")
        context = DOUBLE if top.kind == '"' else HEREDOC if top.kind == "<<" else BARE
        self.out.append(Placeholder(name, context))
        self.i, self.prev = self.i + 1, "x"

    def _in_single(self, ch: str, top: _Frame) -> None:
        if top.kind == "'" and ch == "'":
            self.frames.pop()
        elif ch == "\n":
            top.line_start = True
        self.prev = ch

    def _in_comment(self, ch: str) -> None:
        if ch == "\n":  # the newline ends the comment, and is the command line's
            self.frames.pop()
            self.out.pop()
            self.i -= 1

    def _substitution(self, nxt: Any) -> None:
        """``$(``, ``$((`` or ``${``: the frame it opens."""
        self.out.append(nxt)
        self.i += 1
        if nxt == "(" and self.at(self.i) == "(":
            self.out.append("(")
            self.i += 1
            self.frames.append(_Frame("(("))
        else:
            self.frames.append(_Frame("$(" if nxt == "(" else "${"))
        self.prev = "("

    def _backquote(self, kind: str) -> None:
        if kind == "`":
            self.frames.pop()
        else:
            self.frames.append(_Frame("`"))
        self.prev = "`"

    def _in_double(self, ch: str, top: _Frame) -> None:
        if top.kind == '"' and ch == '"':
            self.frames.pop()
        elif top.kind == "<<" and ch == "\n":
            top.line_start = True
        self.prev = ch

    def _in_braces(self, ch: str, nxt: Any, top: _Frame) -> None:
        """Inside ``((...))`` or ``${...}``: nesting counted until the frame closes."""
        opening, closing = ("(", ")") if top.kind == "((" else ("{", "}")
        if ch in "'\"" and top.kind == "${":
            self.frames.append(_Frame(ch))
        elif ch == opening:
            top.depth += 1
        elif ch == closing and top.depth:
            top.depth -= 1
        elif ch == closing:
            if top.kind == "((" and nxt == ")":
                self.out.append(")")
                self.i += 1
            self.frames.pop()
        self.prev = ch

    def _in_command(self, ch: str, nxt: Any, top: _Frame) -> None:
        """The command line, ``$(...)`` or ```...```: words, quotes, comments, operators."""
        kind, prev = top.kind, self.prev
        if ch in "'\"":
            self.frames.append(_Frame(ch))
        elif ch == "#" and prev in _WORD_START:
            self.frames.append(_Frame("#"))
        elif ch == "(" and nxt == "(" and prev in _WORD_START:  # bash's arithmetic command
            self.out.append("(")
            self.i += 1
            self.frames.append(_Frame("(("))
        elif ch == "(" and kind == "$(":
            top.depth += 1
        elif ch == ")" and kind == "$(":
            if top.depth:
                top.depth -= 1
            else:
                self.frames.pop()
        elif ch == "<" and nxt == "<" and self.at(self.i + 1) == "<":  # bash's here-string, <<<word
            self.out += ["<", "<"]
            self.i += 2
        elif ch == "<" and nxt == "<":
            self.i = _here_document(self.tokens, self.i, self.out, self.pending, _refuse)
        elif ch == "\n" and self.pending:
            self.frames.extend(reversed(self.pending))
            self.pending.clear()
        self.prev = ch


def _here_document(tokens: list[Any], i: int, out: list[Any], pending: list[_Frame], refuse: Any) -> int:
    """Read ``<<`` (or ``<<-``) and its delimiter word from ``tokens[i]`` (the second ``<``);
    the here-document joins ``pending``. Returns the index after the word."""
    out.append(tokens[i])
    i += 1
    strip = i < len(tokens) and tokens[i] == "-"
    if strip:
        out.append("-")
        i += 1
    while i < len(tokens) and tokens[i] in (" ", "\t"):
        out.append(tokens[i])
        i += 1
    word, quoted, quote = [], False, ""
    while i < len(tokens):
        tok = tokens[i]
        if isinstance(tok, Placeholder):
            raise refuse(tok.name, "in a here-document's delimiter", "write the delimiter as plain text (<<EOF)")
        if not quote and (tok in _OPERATOR):
            break
        out.append(tok)
        i += 1
        if quote:
            if tok == quote:
                quote = ""
            else:
                word.append(tok)
        elif tok in "'\"":
            quote, quoted = tok, True
        elif tok == "\\" and i < len(tokens) and isinstance(tokens[i], str):
            quoted = True
            word.append(tokens[i])
            out.append(tokens[i])
            i += 1
        else:
            word.append(tok)
    if word or quoted:
        pending.append(_Frame("<<'" if quoted else "<<", "".join(word), strip))
    return i
