"""Command trials: sweep a script that takes flags, as task-spooler users do.

A trial's command runs as a child of an ordinary trial process, so it gets everything a
function trial gets: its own process group (a timeout or Ctrl-C ends it with the
trial), the slot's GPU and memory settings in its environment, ``SWEEPER_TRIAL_ID``,
``SWEEPER_TRIAL_DIR``, ``SWEEPER_SEED`` and ``SWEEPER_PARAMS`` (JSON), its output in the
trial's log, and the same statuses, retries, resume and ledger.

Metrics come from ``$SWEEPER_TRIAL_DIR/metrics.json`` if the command writes it, else from
the last line of its stdout that is a JSON object. Lines that are JSON objects with an
``epoch`` key are per-epoch reports (live view, ``history.csv``).

Under ``shell=True`` no value is ever part of the text ``/bin/sh`` parses: each
placeholder becomes a reference to an environment variable (``SWEEPER_ARG_0``, ... in
the order the placeholders first appear; ``{flags}`` one ``SWEEPER_FLAG_<n>`` per
parameter, or ``SWEEPER_FLAGS`` joined inside quotes) that holds the value, so the shell
expands it once and never reads it as code. :func:`shell_pieces` reads the template as
the shell will, to write each reference as its context needs.
"""

from __future__ import annotations

import json
import os
import shlex
import string
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from sweeper.child.context import attempt_tail
from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.metrics import BadResult
from sweeper.model.outcome import TrialFailed, command_exit
from sweeper.model.trial import Status
from sweeper.store import paths

#: A placeholder that expands to every parameter as ``--name=value``.
FLAGS = "flags"
#: Placeholders sweeper defines itself: no parameter may take one of these names.
SWEEPER_PLACEHOLDERS = frozenset({FLAGS})
#: What a script's name ends in (:meth:`Command.script_name`: a command sweep is named after it).
SCRIPTS = frozenset({".py", ".sh", ".bash", ".r", ".jl", ".js", ".pl", ".rb", ".lua"})


def text(value: Any) -> str:
    """A parameter value as one command-line word: lists as JSON, the rest as ``str``."""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def flags(params: Mapping[str, Any]) -> list[str]:
    """Every parameter as ``--name=value``, one argument each (for scripts that take them all)."""
    return [f"--{name}={text(value)}" for name, value in params.items()]


@dataclass(frozen=True)
class Command:
    """A command per trial: a template such as ``"python train.py --lr={lr}"``, or a
    module-level function ``params -> argv``. Without a shell each value lands in exactly
    one argument, whatever characters it holds. ``shell=True`` runs the template through
    ``/bin/sh``, values never in its text: each placeholder becomes a reference to an
    environment variable holding the value (``"${SWEEPER_ARG_0}"`` where it stands bare,
    ``${SWEEPER_ARG_0}`` inside ``"..."`` or a here-document), which the shell expands
    once and never reads as code."""

    template: str | None = None
    build: Callable[[dict[str, Any]], Sequence[str]] | None = None
    shell: bool = False

    @classmethod
    def of(cls, command: Any, shell: bool = False) -> "Command":
        if isinstance(command, Command):
            return command
        if isinstance(command, str):
            if not command.strip():
                raise SweepError("the command is empty; give e.g. command = 'python train.py --lr={lr}'")
            return cls(template=command, shell=shell)
        if callable(command):
            if shell:
                raise SweepError("shell=True needs a command template (a string), not a function")
            return cls(build=command)
        raise SweepError(f"command is a {type(command).__name__}; give a template string or a "
                         "function returning the argument list")

    def describe(self) -> str:
        """The command in words, for the ledger's record of what a sweep runs."""
        if self.template is not None:
            return f"command {self.template!r}" + (" through /bin/sh" if self.shell else "")
        from sweeper.model.callables import name_of

        return f"command built by {name_of(self.build)}"

    def script_name(self) -> str | None:
        """What the command runs, as a sweep folder's name: the script's stem (``train`` for
        ``python train.py --lr={lr}`` or ``./train.sh``), the module's last part for
        ``python -m pkg.train``, else the program's name; None for a function."""
        if self.template is None:
            return None
        try:
            words = shlex.split(self.template, comments=self.shell)
        except ValueError:
            words = self.template.split()
        words = [w for w in words if "{" not in w and "}" not in w and "$" not in w]
        while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value before the program
            words.pop(0)
        for before, word in zip([""] + words, words):
            if before == "-m" and word.replace(".", "").replace("_", "").isalnum():
                return word.rsplit(".", 1)[-1]
            stem, suffix = os.path.splitext(os.path.basename(word))
            if suffix.lower() in SCRIPTS and stem and not word.startswith("-"):
                return stem
        program = os.path.basename(words[0]) if words else ""
        return program if program not in ("", ".", "..") else None

    # -- checks before anything runs ---------------------------------------------------

    def placeholders(self) -> list[str]:
        assert self.template is not None
        names = []
        try:
            for _, name, spec, conv in string.Formatter().parse(self.template):
                if name is None:
                    continue
                if not name or not name.isidentifier() or spec or conv:
                    raise SweepError(f"the command has a placeholder {{{name}{'!' + conv if conv else ''}"
                                     f"{':' + spec if spec else ''}}} sweeper cannot fill; use plain "
                                     "{name} placeholders (write {{ and }} for literal braces)")
                names.append(name)
        except ValueError as exc:
            raise SweepError(f"the command template is malformed ({exc}); write {{{{ and }}}} for literal "
                             "braces") from None
        return names

    def check(self, points: Sequence[Mapping[str, Any]]) -> None:
        """Refuse unknown or unused placeholders, a parameter named like sweeper's own
        placeholders, a placeholder where a shell could not expand it as itself (or a bad
        argv function) before any trial."""
        if not points:
            return
        if self.template is None:
            try:
                argv = self.build(dict(points[0]))  # type: ignore[misc]
            except Exception as exc:
                raise SweepError(f"the command function raised on the first point: {exc!r}; fix it") from None
            if isinstance(argv, str) or not all(isinstance(a, str) for a in argv or [None]):
                raise SweepError(f"the command function returned {argv!r}; return a list of strings, "
                                 "e.g. ['python', 'train.py', *sweeper.flags(params)]")
            return
        used = set(self.placeholders())
        names = set().union(*(p.keys() for p in points))
        taken = sorted(names & SWEEPER_PLACEHOLDERS)
        if taken:
            raise SweepError(f"parameter {taken[0]!r} has the name of sweeper's own {{{taken[0]}}} placeholder "
                             f"(every parameter as --name=value); rename it in the grid (e.g. "
                             f"'{taken[0]}_') and write --{taken[0]}={{{taken[0]}_}}")
        if self.shell:
            shell_pieces(self.template)  # a placeholder where its value cannot stand is refused here
        if FLAGS in used:
            used.discard(FLAGS)
            used_all = True
        else:
            used_all = False
        unknown = sorted(u for u in used if any(u not in p for p in points))
        if unknown:
            raise SweepError(f"the command uses {{{unknown[0]}}}, which is not a parameter of every "
                             f"point (parameters: {', '.join(sorted(names)) or 'none'}); fix the name")
        unused = sorted(names - used)
        if unused and not used_all:
            raise SweepError(f"parameter {unused[0]!r} is not used by the command; add e.g. "
                             f"--{unused[0]}={{{unused[0]}}} (or {{flags}} for every parameter)")
        if not self.shell:
            self.argv(dict(points[0]))  # a template that shlex cannot split fails here, not later

    # -- in the trial process -----------------------------------------------------------

    def argv(self, params: dict[str, Any]) -> list[str] | str:
        """The argument list; under a shell, the script alone (it runs only with the
        environment :meth:`shell_script` gives, which holds the values)."""
        if self.build is not None:
            return [str(a) for a in self.build(params)]
        assert self.template is not None
        if self.shell:
            return self.shell_script(params)[0]
        try:
            words = shlex.split(self.template)
        except ValueError as exc:
            raise SweepError(f"the command template cannot be split into words ({exc}); "
                             "check its quotes") from None
        argv: list[str] = []
        for word in words:
            if word == "{flags}":
                argv += flags(params)
            else:  # each word stays one argument, whatever the values hold
                argv.append(word.format(**{k: text(v) for k, v in params.items()}, flags=" ".join(flags(params))))
        return argv

    def shell_script(self, params: dict[str, Any]) -> tuple[str, dict[str, str], str]:
        """Under a shell: the script ``/bin/sh`` runs (each placeholder a variable reference,
        no value in it), the variables' values for its environment, and the script as a
        person would type it with the values in place (for the log only)."""
        assert self.template is not None and self.shell
        pieces = shell_pieces(self.template)
        order = list(dict.fromkeys(p.name for p in pieces if isinstance(p, _Slot) and p.name != FLAGS))
        var = {name: f"{contract.ARG_PREFIX}{i}" for i, name in enumerate(order)}
        env = {var[name]: text(params[name]) for name in order}
        every = flags(params)
        if any(isinstance(p, _Slot) and p.name == FLAGS for p in pieces):
            env.update({f"{contract.FLAG_PREFIX}{j}": flag for j, flag in enumerate(every)})
            env[contract.FLAGS] = " ".join(every)
        script, shown = [], []
        for piece in pieces:
            if isinstance(piece, str):
                script.append(piece)
                shown.append(piece)
            elif piece.name == FLAGS and piece.context == BARE:  # one word per parameter
                script.append(" ".join(f'"${{{contract.FLAG_PREFIX}{j}}}"' for j in range(len(every))))
                shown.append(" ".join(shlex.quote(flag) for flag in every))
            else:
                name = contract.FLAGS if piece.name == FLAGS else var[piece.name]
                value = " ".join(every) if piece.name == FLAGS else text(params[piece.name])
                script.append(f'"${{{name}}}"' if piece.context == BARE else f"${{{name}}}")
                shown.append(shlex.quote(value) if piece.context == BARE else _escaped(value, piece.context))
        return "".join(script), env, "".join(shown)

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        from sweeper.child.context import current_trial, report

        trial = current_trial()
        folder = trial.dir if trial else os.getcwd()
        metrics_file = paths.metrics_file(folder)
        if os.path.exists(metrics_file):  # an earlier attempt's
            os.remove(metrics_file)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv: list[str] | str
        if self.shell:  # the values reach /bin/sh in its environment, never in its script
            argv, values, shown = self.shell_script(params)
            env.update(values)
        else:
            argv = self.argv(params)
            shown = shlex.join(argv)
        print(f"sweeper: running {shown}", flush=True)
        try:
            proc = subprocess.Popen(argv, shell=self.shell, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=env)
        except (OSError, ValueError) as exc:  # ValueError: a NUL character in a value
            raise TrialFailed(Status.ERROR, f"could not start the command: {exc}") from None
        last: dict[str, Any] | None = None
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                os.write(1, raw)  # into the trial's log, as the script printed it
                obj = _json_object(raw)
                if obj is None:
                    continue
                last = obj
                if "epoch" in obj:
                    numbers = {k: v for k, v in obj.items() if k != "epoch" and _is_number(v)}
                    try:
                        report(epoch=int(obj["epoch"]), **numbers)
                    except (TypeError, ValueError, BadResult):
                        pass
        except BaseException:  # pruned at that epoch (or stopped): the command stops there too
            proc.kill()
            proc.wait()
            raise
        code = proc.wait()
        if code != 0:
            verdict = command_exit(code, attempt_tail())
            raise TrialFailed(verdict.status, verdict.error)
        if os.path.exists(metrics_file):
            with open(metrics_file) as f:
                try:
                    return json.load(f)
                except json.JSONDecodeError as exc:
                    raise BadResult(f"metrics.json is not valid JSON ({exc}); write one JSON object") from None
        if last is None:
            raise BadResult("the command printed no JSON object and wrote no metrics.json; end it with a line "
                            'such as {"val_accuracy": 0.93} or write $SWEEPER_TRIAL_DIR/metrics.json')
        return {k: v for k, v in last.items() if k != "epoch"}


def _json_object(raw: bytes) -> dict[str, Any] | None:
    line = raw.strip()
    if not line.startswith(b"{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _escaped(value: str, context: str) -> str:
    """``value`` as typed inside ``"..."`` (or a here-document's body), for the log's line."""
    specials = "\\$`\"" if context == DOUBLE else "\\$`"
    return "".join("\\" + c if c in specials else c for c in value)


# -- under a shell: values as environment variables ------------------------------------------

#: Where a placeholder stands in a shell template, which decides how its variable is written.
BARE, DOUBLE, HEREDOC = "bare", "double-quoted", "here-document"


@dataclass(frozen=True)
class _Slot:
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


def shell_pieces(template: str) -> list[str | _Slot]:
    """The template as the shell will read it: literal text, and each placeholder with its
    context, read as POSIX ``sh`` reads quotes, escapes, comments, ``$(...)``, ``${...}``,
    arithmetic and here-documents. A placeholder where its variable cannot stand as itself
    is refused (a :class:`SweepError` naming where, and the fix) before anything runs.
    """
    tokens: list[str | _Slot] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        tokens.extend(literal)
        if name is not None:
            tokens.append(_Slot(name, ""))
    return _ShellReader(tokens).read()


def _refuse(name: str, where: str, fix: str = "") -> SweepError:
    fix = fix or (f"write it bare (e.g. --{name}={{{name}}}) or inside \"...\"; sweeper gives each value "
                  "to the shell as an environment variable")
    return SweepError(f"the shell command has {{{name}}} {where}; {fix}")


class _ShellReader:
    """:func:`shell_pieces`'s lexer: the characters and placeholders of a template, read one
    at a time in the frame (quote, substitution, comment, here-document) they stand in."""

    def __init__(self, tokens: list[str | _Slot]) -> None:
        self.tokens = tokens
        self.out: list[str | _Slot] = []
        self.frames = [_Frame("cmd")]
        self.pending: list[_Frame] = []  # here-documents whose bodies start at the next newline
        self.escaped, self.prev, self.i = False, "\n", 0

    def at(self, j: int) -> str | _Slot | None:
        return self.tokens[j] if j < len(self.tokens) else None

    def read(self) -> list[str | _Slot]:
        while self.i < len(self.tokens):
            tok, top = self.tokens[self.i], self.frames[-1]
            if top.kind in ("<<", "<<'") and top.line_start and self._delimiter_line(top):
                continue
            if isinstance(tok, _Slot):
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
        self.out.append(_Slot(name, context))
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
        if isinstance(tok, _Slot):
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
