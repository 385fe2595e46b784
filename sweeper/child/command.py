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
expands it once and never reads it as code. :func:`sweeper.child.shell.shell_pieces` reads the template as
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
from sweeper.child.shell import BARE, DOUBLE, Placeholder, shell_pieces
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
    """Every parameter as ``--name=value``, one argument each, for a script that takes them all.

    Args:
        params: a point, a dict of parameter names to values (a trial's ``params``).

    Returns:
        The arguments, in the point's order: lists and dicts as JSON, other values as ``str``.

    Raises:
        Nothing.

    Example:
        >>> import sweeper
        >>> sweeper.flags({"lr": 0.01, "layers": [64, 32], "opt": "adam"})
        ['--lr=0.01', '--layers=[64, 32]', '--opt=adam']
    """
    return [f"--{name}={text(value)}" for name, value in params.items()]


@dataclass(frozen=True)
class Command:
    """A command per trial, run as a child of the trial's process (with its GPU, caps, seed,
    log, timeouts and statuses); its metrics are ``$SWEEPER_TRIAL_DIR/metrics.json`` if it
    writes one, else the last line of its stdout that is a JSON object.

    Without a shell each value lands in exactly one argument, whatever characters it holds.
    ``shell=True`` runs the template through ``/bin/sh``, values never in its text: each
    placeholder becomes a reference to an environment variable holding the value
    (``"${SWEEPER_ARG_0}"`` where it stands bare, ``${SWEEPER_ARG_0}`` inside ``"..."`` or a
    here-document), which the shell expands once and never reads as code.

    Args:
        template: the command, with a ``{name}`` placeholder per parameter, or ``{flags}``
            for every parameter as ``--name=value`` (``{{`` and ``}}`` for literal braces).
        build: instead of a template, a module-level function ``params -> argv``.
        shell: run the template through ``/bin/sh`` (pipes, ``&&``, variables).

    Raises:
        SweepError: from :func:`sweeper.sweep`, before any trial runs: an empty template, a
            placeholder that is not a parameter of every point, a parameter the command does
            not use, a ``build`` that does not return a list of strings.

    Example:
        A file ``train.py``::

            import argparse
            import json

            parser = argparse.ArgumentParser()
            parser.add_argument("--lr", type=float)
            args = parser.parse_args()
            print(json.dumps({"loss": (args.lr - 0.01) ** 2}))

        and a file ``commands.py``::

            import sweeper

            if __name__ == "__main__":
                command = sweeper.Command("python train.py --lr={lr}")
                df = sweeper.sweep(command, {"lr": [0.1, 0.01]}, progress=False)
                print(df[["trial", "status", "loss"]].to_string(index=False))

        ``python commands.py`` prints::

              trial status    loss
             lr=0_1     ok  0.0081
            lr=0_01     ok     0.0
    """

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
        order = list(dict.fromkeys(p.name for p in pieces if isinstance(p, Placeholder) and p.name != FLAGS))
        var = {name: f"{contract.ARG_PREFIX}{i}" for i, name in enumerate(order)}
        env = {var[name]: text(params[name]) for name in order}
        every = flags(params)
        if any(isinstance(p, Placeholder) and p.name == FLAGS for p in pieces):
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


