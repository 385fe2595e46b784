"""``python -m sweeper grid.py [options]``: run the sweep a grid file describes."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, Sequence

from sweeper import __version__
from sweeper.backends import registry
from sweeper.errors import SweepError
from sweeper.front import gridfile
from sweeper.child.command import Command
from sweeper.front.messages import show_messages
from sweeper.front.subcommands import (
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    cell,
    program_name,
)
from sweeper.model.definition import ABSENT, Definition, shape
from sweeper.model.grid import Points
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.option_texts import brief, filled
from sweeper.model.options import Options
from sweeper.child.loading import describe
from sweeper.model.target import FileTarget, FunctionTarget
from sweeper.placement.slots import Placement
from sweeper.store.folder import SweepFolder, refuse_busy
from sweeper.system import procs

if TYPE_CHECKING:
    from sweeper.run.runner import Outcome


def parser() -> argparse.ArgumentParser:
    prog = program_name()
    p = Parser(
        prog=prog,
        description="Run every trial of a grid file in its own fresh process; "
        "results go to <out>/<name>/results.csv. Re-running resumes.",
        epilog=f"commands: {prog} status <out>/<name> shows a sweep's progress (from another "
        f"terminal too); {prog} report <out>/<name> prints its leaderboard and writes report.html; "
        f"{prog} export <out>/<name> --mlflow [URI] --tensorboard replays a sweep into a tracker; "
        f"{prog} replay <out>/<name> TRIAL runs a trial again and says how far its metrics drift; "
        f"{prog} run -- CMD runs a command on a GPU beside the machine's sweeps; {prog} gpus shows who uses "
        f"the GPUs. Each has its own --help.",
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("grid_file", nargs="?",
                   help="a .py file defining train(params) (or command) and grid (or space and samples)")
    p.add_argument("--command", help=_help(OWN_FLAGS["command"]))
    p.add_argument("--grid", dest="grid_data", metavar="FILE", help=_help(OWN_FLAGS["grid_data"]))
    p.add_argument("--shell", action="store_true", help=_help(OWN_FLAGS["shell"]))
    add_option_flags(p)
    p.add_argument("--quiet", action="store_true", help=_help(OWN_FLAGS["quiet"]))
    p.add_argument("--detach", action="store_true", help=_help(OWN_FLAGS["detach"]))
    return p


#: What the command line's own flags (no option of a sweep's) mean, by dest: Markdown, as a
#: :class:`~sweeper.model.options.Flag`'s help is (``--help`` says the first sentence, the table
#: in docs/options.md all of it: :mod:`sweeper.front.optionsdoc`).
OWN_FLAGS = {
    "command": "run this command per trial instead of a `train` function, such as `'python train.py --lr={lr}'`; "
               "the grid comes from `--grid` (see [command trials](commands.md))",
    "grid_data": "with `--command`: a `.json` or `.yaml` file holding the grid (see [command trials](commands.md))",
    "shell": "with `--command`: run it through `/bin/sh` (values reach it as environment variables, never as "
             "shell text; see [command trials](commands.md))",
    "quiet": "print only the final summary (and warnings)",
    "detach": "with `--backend slurm`: submit the sweep's driver as a small Slurm job of its own (this command, "
              "less `--detach`) and return, so you may log out; `status` and `report` work meanwhile, `scancel` of "
              "its job stops the sweep (see [Slurm](slurm.md#a-detached-sweep---detach))",
}


def _help(text: str) -> str:
    """What ``--help`` says of a flag whose Markdown is ``text`` (:func:`~sweeper.model.option_texts.brief`),
    its ``%`` kept from argparse's formatting."""
    return brief(text).replace("%", "%%")


def add_option_flags(p: argparse.ArgumentParser) -> None:
    """A flag for each :class:`Options` field that has one, in the fields' order, then for each
    registered backend's options group's (:func:`sweeper.backends.registry.flags`), as its
    :class:`~sweeper.model.options.Flag` says. Each defaults to None (a flag not given leaves
    the grid file's value, else Options'), and its help (its text's first sentence) states the
    default as Options has it: --help says what the code does."""
    for f, flag in registry.flags():
        how: dict[str, Any] = {"action": flag.action, "dest": f.name, "default": None,
                               "help": _help(filled(flag.help, f.default))}
        if flag.type is not None:
            how["type"] = flag.type
        if flag.choices:
            how["choices"] = list(flag.choices)
        if flag.nargs is not None:
            how.update(nargs=flag.nargs, const=flag.const)
        if flag.metavar is not None:
            how["metavar"] = flag.metavar
        p.add_argument(flag.flag(f.name), **how)


def _check_unknown(p: argparse.ArgumentParser, unknown: list[str]) -> None:
    if not unknown:
        return
    flags = [s for a in p._actions for s in a.option_strings]
    word = unknown[0].split("=")[0]
    near = difflib.get_close_matches(word, flags, n=1)
    hint = f"; did you mean {near[0]}?" if near else "; see python -m sweeper --help"
    raise SweepError(f"unknown option {word}{hint}")


def main(argv: Sequence[str] | None = None) -> int:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Closable(sys.stdout), _Closable(sys.stderr)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except SweepError as exc:
        print(f"sweeper: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # before a sweep's own handling (say, while the grid file imports)
        print("sweeper: interrupted while no trial was running; finished trials are kept: run the same "
              "command again to resume", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        sys.stdout, sys.stderr = saved


class _Closable:
    """The console, once its reader may be gone (``python -m sweeper grid.py | head``):
    what would be printed after that is dropped, and the sweep goes on as if nothing
    happened (every trial's output is in its log, every row in the ledger and the CSV), so
    its exit code says how the trials went, as without the pipe. ``--dry-run | head`` is
    quiet for the same reason."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            written: int = self._stream.write(text)
            return written
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()

    def _drop(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # what the stream still buffers lands nowhere
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        self._stream = open(os.devnull, "w")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    if argv:
        _misspelled_command(argv[0])
    p = parser()
    args, unknown = p.parse_known_args(argv)
    _check_unknown(p, unknown)
    if isinstance(args.mlflow, str) and args.mlflow.endswith(".py") and not args.grid_file:
        args.grid_file, args.mlflow = args.mlflow, True  # --mlflow grid.py: the file, not a URI
    if isinstance(args.optuna, str) and args.optuna.endswith(".py") and not args.grid_file:
        args.grid_file, args.optuna = args.optuna, True  # --optuna grid.py: the file, not a storage
    flags = {f.name: getattr(args, f.name) for f, _ in registry.flags()}
    flags = {k: v for k, v in flags.items() if v is not None}
    registry.options(flags, where="the command line", partial=True)  # the grid file may name the backend
    if args.detach:
        from sweeper.front.detach import detach

        return detach(argv, _early_folder(args, flags), flags, args.grid_file)
    show_messages(not args.quiet)
    tags: list[str] = []  #: the sweep's, once its grid reader has one
    # from the grid reader on: an orphan of any process of the sweep comes back to this
    # one, so a daemon the grid file's import starts ends with the sweep at the latest
    with procs.subreaper():
        try:
            return _sweep(args, flags, tags)
        finally:
            procs.end_strays(tags)


def abandon_early(argv: list[str]) -> None:
    """A Ctrl-C while sweeper itself was still being imported: what an earlier run of the
    sweep this command line names left in a cluster's queue ends too (as in :func:`_sweep`)."""
    with contextlib.suppress(Exception, SystemExit):  # (it must not stand in for the Ctrl-C)
        if argv and argv[0] in COMMANDS:
            return
        args, _ = parser().parse_known_args(argv)
        flags = {f.name: getattr(args, f.name) for f, _ in registry.flags() if getattr(args, f.name) is not None}
        early = _early_folder(args, flags)
        if early is not None and not early[1]:
            registry.abandon(early[0])


def _misspelled_command(word: str) -> None:
    """A first word that is no file but nearly a command's name (``stauts``): said as that."""
    if word.startswith("-") or word.endswith(".py") or os.path.exists(word):
        return
    near = difflib.get_close_matches(word.lower(), list(COMMANDS), n=1)
    if near:
        raise SweepError(f"unknown command {word!r}; did you mean {near[0]}? (see {program_name()} {near[0]} --help)")


def _sweep(args: argparse.Namespace, flags: dict[str, Any], tags: list[str]) -> int:
    """Run (or plan) the sweep the command line names. A Ctrl-C while its grid file is read
    (before the sweep's own handling) ends what an earlier run left in a cluster's queue too."""
    tag = procs.new_tag()  # the sweep's, from its grid reader on
    tags.append(tag)
    try:
        with procs.guarded(tag), contextlib.ExitStack() as cleanup:
            return _run_sweep(args, flags, tag, cleanup)
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):  # (it must not stand in for the Ctrl-C)
            early = _early_folder(args, flags)
            if early is not None and not early[1]:
                registry.abandon(early[0])
        raise


def _run_sweep(args: argparse.Namespace, flags: dict[str, Any], tag: str, cleanup: contextlib.ExitStack) -> int:
    _refuse_early(args, flags)  # before anything is imported or started
    early = None  # a fork server started before the grid file is read (the reader is its fork)
    if args.command is not None:
        if args.grid_file or not args.grid_data:
            raise SweepError("--command takes its grid from --grid grid.json (not a grid .py file); "
                             "e.g. python -m sweeper --command 'python train.py --lr={lr}' --grid grid.json")
        grid = gridfile.read_data(args.grid_data, args.seed)
        command = Command.of(args.command, args.shell)
        command.check(grid.points)
        target: Any = FunctionTarget.of(command)
        what = describe(command)
    else:
        if not args.grid_file:
            raise SweepError("no grid file given; e.g. python -m sweeper experiments/digits_mlp.py")
        if args.grid_data or args.shell:
            raise SweepError("--grid and --shell go with --command; a grid .py file defines grid itself")
        early = _early_server(flags, args.grid_file, tag, cleanup)  # imports first: the reader is its fork
        # its engine, ledger, tables: imported while the server imports
        from sweeper.run import runner  # noqa: F401
        grid = gridfile.read(args.grid_file, args.seed, tag, early)
        target = FileTarget(grid.path, grid.attr, grid.shell, preload=grid.modules)
        what = grid.what
    from sweeper.front.shown import run_shown

    registry.options(grid.options, where=os.path.basename(grid.path), partial=True)  # flags may name the backend
    given = {**grid.options, **flags}
    if flags.get("pbt") is not None:  # --pbt KEY=VALUE changes its own key of the file's pbt={...}
        from sweeper.search.pbt_settings import overridden

        given["pbt"] = overridden(grid.options.get("pbt"), flags["pbt"])
    opts = registry.options(given, where="the command line")
    stem = _default_name(args)
    # the file's points, or its space: searched now (--search), else what the file lacks is said
    points, space = shape(grid=Points(grid.points) if grid.space is None else ABSENT,
                          space=ABSENT if grid.space is None else grid.space, search=opts.search,
                          where=os.path.basename(grid.path))
    definition = Definition(target, opts, points, space, grid.path, what, stem)
    outcome = run_shown(definition, closing=True, quiet=args.quiet, tag=tag, early=early)  # the summary, --quiet too
    if opts.dry_run:
        print_plan(outcome, opts)
        return EXIT_OK
    if outcome.end is SweepEnd.INTERRUPTED:
        saved = f"the ledger in {outcome.folder}" if outcome.unwritten else outcome.csv_path  # results.csv was not
        print(f"sweeper: interrupted; finished trials are saved in {saved}; "
              f"run the same command again to resume")
    return exit_status(outcome)


def exit_status(outcome: Outcome) -> int:
    """The command's exit status, by how its sweep ended: 128 + the signal that interrupted
    it (as a shell's); failed (it stopped itself), a trial not ``ok`` or ``pruned``, a trial
    not run, a table file not written: EXIT_FAILED; else EXIT_OK."""
    if outcome.end is SweepEnd.INTERRUPTED and outcome.interrupted is not None:  # (the signal that did)
        return 128 + outcome.interrupted
    failed = outcome.end is SweepEnd.FAILED or any(not r.status.succeeded for r in outcome.results)  # pruned: no
    incomplete = len(outcome.results) < len(outcome.specs) or outcome.unwritten  # a table file not written
    return EXIT_FAILED if failed or incomplete else EXIT_OK


def _early_server(flags: dict[str, Any], path: str, tag: str, cleanup: contextlib.ExitStack) -> Any:
    """A fork server started before the grid file is read: it imports the framework first,
    and the grid reader is a fork of it (one slot's first trial then waits for one import,
    not two), with the slots the command line and the grid file's ``options`` (as its
    source plainly shows them) give (a grid file whose options, once imported, give
    others gets a server of its own: this one is then ended unused). None where they say
    no trial forks (a dry run, spawn, Ray, --gpus free: read once, nothing of ours on it)."""
    import logging

    from sweeper.backends.local.fork import early_server
    from sweeper.model.settings import launching, resources
    from sweeper.placement.slots import place

    sweeper_log = logging.getLogger("sweeper")
    quiet = sweeper_log.disabled
    sweeper_log.disabled = True  # the real placement says what it has to say, once
    try:
        plain = gridfile.plain_options(path) if os.path.isfile(path) else None
        shown = {k: v for k, v in (plain or {}).items() if v is not gridfile.UNKNOWN}
        opts = registry.options({**shown, **flags}, where="the command line", partial=True)
        how, room = launching(opts), resources(opts)
        if opts.dry_run or how.backend != "local" or how.start_method != "forkserver" or room.gpus.word == "free":
            return None
        slots = place(room.gpus.chosen, room.memory, room.slots_workers).slots
    except SweepError:
        return None
    finally:
        sweeper_log.disabled = quiet
    server = early_server(os.path.abspath(path), tag, slots) if os.path.isfile(path) else None
    if server is not None:
        cleanup.callback(server.stop)
    return server


def _default_name(args: argparse.Namespace) -> str:
    """The sweep folder's name where neither --name nor the grid file's options give one:
    the grid file's stem; for --command, the script it runs (``train`` for ``python
    train.py ...``, :meth:`~sweeper.child.command.Command.script_name`), else the --grid file's stem."""
    if args.command is not None:
        script = Command.of(args.command, args.shell).script_name()
        if script:
            return script
    path = args.grid_data if args.command is not None else args.grid_file
    return os.path.splitext(os.path.basename(path or ""))[0]


def _refuse_early(args: argparse.Namespace, flags: dict[str, Any]) -> None:
    """A sweep (or its dry run) into a folder another sweep holds is refused at once, not
    after the grid file's import (seconds: TensorFlow's with it), where the command line,
    and the grid file's ``options`` as its source plainly shows them, say the folder;
    where they cannot (``options`` built in code), the lock the sweep takes decides later."""
    early = _early_folder(args, flags)
    if early is not None:
        refuse_busy(early[0], dry_run=early[1])


def _early_folder(args: argparse.Namespace, flags: dict[str, Any]) -> tuple[str, bool] | None:
    """The sweep's folder, and whether it is a dry run, where the command line and the grid
    file's plain ``options`` say them before the file is read; None where they cannot."""
    given: dict[str, Any] | None = {}
    if args.command is not None and (args.grid_file or not args.grid_data):
        return None  # refused as such next
    if args.command is None:
        if not args.grid_file or not args.grid_file.endswith(".py") or not os.path.isfile(args.grid_file):
            return None  # the reader says what is wrong
        if "out" not in flags or "name" not in flags:  # else the flags decide, whatever the file says
            given = gridfile.plain_options(args.grid_file)
    if given is None:
        return None
    said: dict[str, Any] = {**{k: given[k] for k in ("out", "name", "dry_run") if k in given}, **flags}
    out, name = said.get("out", Options.out), said.get("name") or _default_name(args)
    if isinstance(out, str) and isinstance(name, str) and name:
        return SweepFolder(out, name).path, said.get("dry_run") is True
    return None


def print_plan(outcome: Outcome, options: Options | None = None) -> None:
    """The dry run: the GPUs found, the slots and caps (or, on a backend that places trials
    itself, what it would do: Slurm's array and sbatch options), every trial and where it
    would start (``kept`` for a finished trial that a resume keeps)."""
    out, specs = sys.stdout, outcome.specs
    planned = registry.lookup(options.backend).planned if options is not None else None
    trials = len(specs) - len(outcome.kept)  # (a search's: none yet, asked for as it runs)
    placed = plan_lines(outcome.placement) if planned is None or outcome.settings is None else planned(
        outcome.settings, outcome.folder, trials)
    for line in placed:
        out.write(f"sweeper: {line}\n")
    for note in outcome.notes:
        out.write(f"sweeper: {note}\n")
    if not specs and outcome.notes:
        return
    kept = f" ({len(outcome.kept)} on record, kept)" if outcome.kept else ""
    out.write(f"sweeper: {len(specs)} trials{kept}; folder {outcome.folder}\n")
    keys = sorted({k for s in specs for k in s.params})
    head = ["#", "trial_id", *keys, "seed", "starts on"]
    lines = [head]
    for i, (s, where) in enumerate(zip(specs, outcome.first_slots())):
        lines.append([str(i), s.trial_id, *(cell(s.params.get(k)) for k in keys), str(s.seed), where])
    widths = [max(len(row[c]) for row in lines[:200]) for c in range(len(head))]
    for row in lines:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")


def plan_lines(placement: Placement) -> list[str]:
    """Where trials would run: GPUs (memory, other users' processes), slots, the cap."""
    lines = []
    for g in placement.gpus:
        others = ", ".join(f"pid {pid} {'?' if mb is None else mb} MB" for pid, mb in g.processes) or "none"
        lines.append(f"gpu:{g.index} {g.name} {g.uuid}: {g.free_mb} MB free of {g.total_mb} MB; "
                     f"other processes: {others}")
    for g in placement.skipped:
        lines.append(f"gpu:{g.index} skipped: other processes hold {g.others_mb} MB")
    slots, policy = placement.slots, placement.policy
    devices = list(dict.fromkeys(s.device for s in slots))
    if policy is None:
        lines.append(f"{len(slots)} slots on the CPU (no GPU visible to children: CUDA_VISIBLE_DEVICES=-1)")
        return lines
    if policy.auto:
        lines.append(f"{len(slots)} slots: up to {policy.per_gpu} per GPU on {', '.join(devices)}, as many as "
                     "fit by memory; cap per trial: its own (per_gpu auto)")
        return lines
    if policy.growth:
        cap = "memory growth, no cap"
    else:
        mbs = sorted({s.cap_mb for s in slots if s.cap_mb})
        cap = f"{policy.fraction:.3g} of the card" + (f" = {', '.join(map(str, mbs))} MB" if mbs else
                                                        " (MB unknown: NVML could not tell the card's size)")
    lines.append(f"{len(slots)} slots: {policy.per_gpu} per GPU on {', '.join(devices)}; cap per trial: {cap}")
    return lines


