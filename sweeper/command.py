"""Command trials: sweep a script that takes flags, as task-spooler users do.

A trial's command runs as a child of an ordinary trial process, so it gets everything a
function trial gets: its own process group (a timeout or Ctrl-C ends it with the
trial), the slot's GPU and memory settings in its environment, ``SWEEPER_TRIAL_ID``,
``SWEEPER_TRIAL_DIR``, ``SWEEPER_SEED`` and ``SWEEPER_PARAMS`` (JSON), its output in the
trial's log, and the same statuses, retries, resume and ledger.

Metrics come from ``$SWEEPER_TRIAL_DIR/metrics.json`` if the command writes it, else from
the last line of its stdout that is a JSON object. Lines that are JSON objects with an
``epoch`` key are per-epoch reports (live view, ``history.csv``).
"""

from __future__ import annotations

import json
import os
import shlex
import string
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from . import paths
from .errors import SweepError
from .metrics import BadResult
from .outcome import TrialFailed, command_exit
from .trial import Status

#: A placeholder that expands to every parameter as ``--name=value``.
FLAGS = "flags"


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
    module-level function ``params -> argv``. ``shell=True`` runs the template through
    ``/bin/sh`` with each value shell-quoted; otherwise no shell is involved and each
    value lands in exactly one argument, whatever characters it holds."""

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
        from .target import describe

        return f"command built by {describe(self.build)}"

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

    def check_bare(self) -> None:
        """Under a shell, every placeholder must stand outside quotes and escapes.

        sweeper shell-quotes each value (``shlex.quote``), which is safe only where the
        shell reads it bare: inside ``"..."`` the quotes would be literal and ``$(...)`` or
        backticks in a value would run; inside ``'...'`` a quote in a value would end the
        string; after a backslash the first quote would be escaped. Refused before anything
        runs, with the fix.
        """
        assert self.template is not None
        state, escaped, nested, prev = "", False, 0, ""  # state: "" outside quotes, or the quote
        for literal, name, _, _ in string.Formatter().parse(self.template):
            for ch in literal:
                if escaped:
                    escaped = False
                elif ch == "\\" and state != "'":
                    escaped = True
                elif state == "" and ch in "'\"`":
                    state = ch
                elif ch == state:
                    state = ""
                elif state == "" and ch == "(" and prev == "$":
                    nested += 1
                elif state == "" and ch == ")" and nested:
                    nested -= 1
                prev = ch
            if name is None:
                continue
            if state or escaped or nested:
                where = (f"inside {state}...{state}" if state else
                         "after a backslash" if escaped else "inside $(...)")
                raise SweepError(
                    f"the shell command has {{{name}}} {where}, where a value could run as shell code; "
                    f"write it bare (e.g. --{name}={{{name}}}): sweeper quotes each value for the shell"
                )

    def check(self, points: Sequence[Mapping[str, Any]]) -> None:
        """Refuse unknown or unused placeholders (or a bad argv function) before any trial."""
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
        if self.shell:
            self.check_bare()
        used = set(self.placeholders())
        if FLAGS in used:
            used.discard(FLAGS)
            used_all = True
        else:
            used_all = False
        names = set().union(*(p.keys() for p in points))
        unknown = sorted(u for u in used if any(u not in p for p in points))
        if unknown:
            raise SweepError(f"the command uses {{{unknown[0]}}}, which is not a parameter of every "
                             f"point (parameters: {', '.join(sorted(names)) or 'none'}); fix the name")
        unused = sorted(names - used)
        if unused and not used_all:
            raise SweepError(f"parameter {unused[0]!r} is not used by the command; add e.g. "
                             f"--{unused[0]}={{{unused[0]}}} (or {{flags}} for every parameter)")
        self.argv(dict(points[0]))  # a template that shlex cannot split fails here, not later

    # -- in the trial process -----------------------------------------------------------

    def argv(self, params: dict[str, Any]) -> list[str] | str:
        if self.build is not None:
            return [str(a) for a in self.build(params)]
        assert self.template is not None
        if self.shell:
            quoted = {k: shlex.quote(text(v)) for k, v in params.items()}
            quoted[FLAGS] = " ".join(shlex.quote(f) for f in flags(params))
            return self.template.format(**quoted)
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

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        from .context import current_trial, report

        trial = current_trial()
        folder = trial.dir if trial else os.getcwd()
        metrics_file = paths.metrics_file(folder)
        if os.path.exists(metrics_file):  # an earlier attempt's
            os.remove(metrics_file)
        argv = self.argv(params)
        shown = argv if isinstance(argv, str) else shlex.join(argv)
        print(f"sweeper: running {shown}", flush=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            proc = subprocess.Popen(argv, shell=self.shell, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=env)
        except OSError as exc:
            raise TrialFailed(Status.ERROR, f"could not start the command: {exc}") from None
        last: dict[str, Any] | None = None
        assert proc.stdout is not None
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
        code = proc.wait()
        if code != 0:
            verdict = command_exit(code, _log_tail())
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


def _log_tail() -> list[str]:
    from .context import current_trial

    trial = current_trial()
    return paths.log_tail(trial.log_path, 20, pid=os.getpid()) if trial else []
