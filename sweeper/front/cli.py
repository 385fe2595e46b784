"""``python -m sweeper grid.py [options]``: run the sweep a grid file describes."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn, Sequence

from sweeper import __version__
from sweeper.errors import SweepError
from sweeper.front import gridfile
from sweeper.front.command import Command
from sweeper.front.messages import show_messages
from sweeper.model.grid import Points
from sweeper.model.options import Options
from sweeper.model.target import FileTarget, FunctionTarget, describe
from sweeper.model.trial import Status
from sweeper.results.objectives import MODES
from sweeper.run.progress import choose_view
from sweeper.run.slots import Placement
from sweeper.store.folder import SweepFolder, default_uid, holder, refuse_busy, sweep_folder
from sweeper.system import procs

if TYPE_CHECKING:
    from sweeper.run.runner import Outcome

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _prog() -> str:
    """``sweeper`` when run as the console script, else ``python -m sweeper``."""
    return "sweeper" if os.path.basename(sys.argv[0]) == "sweeper" else "python -m sweeper"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SweepError(f"{message}; see {self.prog} --help")


def parser() -> argparse.ArgumentParser:
    prog = _prog()
    p = _Parser(
        prog=prog,
        description="Run every trial of a grid file in its own fresh process; "
        "results go to <out>/<name>/results.csv. Re-running resumes.",
        epilog=f"commands: {prog} status <out>/<name> shows a sweep's progress (from another "
        f"terminal too); {prog} report <out>/<name> prints its leaderboard and writes report.html; "
        f"{prog} export <out>/<name> --mlflow [URI] --tensorboard replays a sweep into a tracker; "
        f"{prog} replay <out>/<name> TRIAL runs a trial again and says how far its metrics drift. "
        f"Each has its own --help.",
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("grid_file", nargs="?",
                   help="a .py file defining train(params) (or command) and grid (or space and samples)")
    p.add_argument("--command", help="run this command per trial instead of a train function, e.g. "
                   "'python train.py --lr={lr}'; the grid comes from --grid")
    p.add_argument("--grid", dest="grid_data", help="with --command: a .json or .yaml file holding the grid")
    p.add_argument("--shell", action="store_true", help="with --command: run it through /bin/sh "
                   "(values reach it as environment variables, never as shell text)")
    add_option_flags(p)
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    return p


def add_option_flags(p: argparse.ArgumentParser) -> None:
    """A flag for each :class:`Options` field that has one, in the fields' order, as its
    :class:`~sweeper.model.options.Flag` says. Each defaults to None (a flag not given leaves
    the grid file's value, else Options'), and its help states the default as Options
    has it: --help says what the code does."""
    for f, flag in Options.flags():
        how: dict[str, Any] = {"action": flag.action, "dest": f.name, "default": None,
                               "help": flag.help.format(default=f.default)}
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
    if argv[:1] == ["status"]:
        return status_main(argv[1:])
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    if argv[:1] == ["export"]:
        return export_main(argv[1:])
    if argv[:1] == ["replay"]:
        return replay_main(argv[1:])
    if argv:
        _misspelled_command(argv[0])
    p = parser()
    args, unknown = p.parse_known_args(argv)
    _check_unknown(p, unknown)
    if isinstance(args.mlflow, str) and args.mlflow.endswith(".py") and not args.grid_file:
        args.grid_file, args.mlflow = args.mlflow, True  # --mlflow grid.py: the file, not a URI
    flags = {f.name: getattr(args, f.name) for f, _ in Options.flags()}
    flags = {k: v for k, v in flags.items() if v is not None}
    Options.build(flags, where="the command line")
    show_messages(not args.quiet)
    tags: list[str] = []  #: the sweep's, once its grid reader has one
    # from the grid reader on: an orphan of any process of the sweep comes back to this
    # one, so a daemon the grid file's import starts ends with the sweep at the latest
    with procs.subreaper():
        try:
            return _sweep(args, flags, tags)
        finally:
            procs.end_strays(tags)


#: The words after ``python -m sweeper`` that are commands, not a grid file.
COMMANDS = ("status", "report", "export", "replay")


def _misspelled_command(word: str) -> None:
    """A first word that is no file but nearly a command's name (``stauts``): said as that."""
    if word.startswith("-") or word.endswith(".py") or os.path.exists(word):
        return
    near = difflib.get_close_matches(word.lower(), COMMANDS, n=1)
    if near:
        raise SweepError(f"unknown command {word!r}; did you mean {near[0]}? (see {_prog()} {near[0]} --help)")


def _sweep(args: argparse.Namespace, flags: dict[str, Any], tags: list[str]) -> int:
    """Run (or plan) the sweep the command line names."""
    tag = procs.new_tag()  # the sweep's, from its grid reader on
    tags.append(tag)
    with procs.guarded(tag), contextlib.ExitStack() as cleanup:
        return _run_sweep(args, flags, tag, cleanup)


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
    from sweeper.run import runner

    opts = Options.build(grid.options, where=os.path.basename(grid.path)).merged(**flags)
    stem = _default_name(args)
    listener = None if opts.dry_run else choose_view(args.quiet, opts.ranked_by, opts.ranked_mode)
    searched: Any = Points(grid.points)
    if grid.space is not None:
        if opts.search is None:
            raise SweepError(f"{os.path.basename(grid.path)} defines space but neither samples = N nor a "
                             "search; add samples = 20 for a random sample, or search = 'tpe' with "
                             "trials = 20 (--search tpe --trials 20)")
        searched = grid.space
    try:
        outcome = runner.run(target, searched, opts, default_name=stem,
                             source_file=grid.path, listener=listener, what=what, tag=tag,
                             early=early)
    finally:
        if listener is not None:
            listener.close()
    if opts.dry_run:
        print_plan(outcome)
        return EXIT_OK
    for line in runner.summary(outcome, opts.ranked_by, opts.ranked_mode):
        print(line)
    if outcome.interrupted is not None:
        saved = f"the ledger in {outcome.folder}" if outcome.unwritten else outcome.csv_path  # results.csv was not
        print(f"sweeper: interrupted; finished trials are saved in {saved}; "
              f"run the same command again to resume")
        return 128 + outcome.interrupted
    failed = any(not r.status.succeeded for r in outcome.results)  # pruned is no failure
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
    from sweeper.run.slots import parse_gpus, place

    sweeper_log = logging.getLogger("sweeper")
    quiet = sweeper_log.disabled
    sweeper_log.disabled = True  # the real placement says what it has to say, once
    try:
        plain = gridfile.plain_options(path) if os.path.isfile(path) else None
        shown = {k: v for k, v in (plain or {}).items() if v is not gridfile.UNKNOWN}
        opts = Options.build({**shown, **flags}, where="the command line")
        gpus = parse_gpus(opts.gpus)
        if opts.dry_run or opts.backend != "local" or opts.start_method != "forkserver" or gpus == "free":
            return None
        slots = place(gpus, opts.memory_policy(), opts.workers).slots
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
    train.py ...``, :meth:`~sweeper.front.command.Command.script_name`), else the --grid file's stem."""
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
    given: dict[str, Any] | None = {}
    if args.command is not None and (args.grid_file or not args.grid_data):
        return  # refused as such next
    if args.command is None:
        if not args.grid_file or not args.grid_file.endswith(".py") or not os.path.isfile(args.grid_file):
            return  # the reader says what is wrong
        if "out" not in flags or "name" not in flags:  # else the flags decide, whatever the file says
            given = gridfile.plain_options(args.grid_file)
    if given is None:
        return
    said: dict[str, Any] = {**{k: given[k] for k in ("out", "name", "dry_run") if k in given}, **flags}
    out, name = said.get("out", Options.out), said.get("name") or _default_name(args)
    if isinstance(out, str) and isinstance(name, str) and name:
        refuse_busy(SweepFolder(out, name).path, dry_run=said.get("dry_run") is True)


def print_plan(outcome: Outcome) -> None:
    """The dry run: the GPUs found, the slots and caps, every trial and where it would start
    (``kept`` for a finished trial that a resume keeps)."""
    out, specs = sys.stdout, outcome.specs
    for line in plan_lines(outcome.placement):
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
        lines.append([str(i), s.trial_id, *(_cell(s.params.get(k)) for k in keys), str(s.seed), where])
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


def _ranking(frame: Any, metric: str | None, mode: str | None) -> tuple[str | None, str | None]:
    """The metric and mode given, else those the sweep ran with (``load()`` keeps them)."""
    if metric is not None:
        return metric, mode
    return frame.attrs.get("metric"), mode or frame.attrs.get("mode")


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _folder_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"{_prog()} {prog}", description=description, allow_abbrev=False)
    p.add_argument("folder", help="a sweep folder, <out>/<name> (e.g. results/digits_mlp)")
    p.add_argument("--metric", help="metric to rank trials by (default: the sweep's, else a validation one, "
                                    "else the first)")
    p.add_argument("--mode", choices=list(MODES), help="max or min (default: the sweep's, else from "
                   "the metric's name)")
    return p


def status_main(argv: list[str]) -> int:
    """Counts, running trials and the best so far, read from the ledger (safe while it runs)."""
    p = _folder_parser("status", "Show a sweep's progress, while it runs or after.")
    p.add_argument("--importance", action="store_true",
                   help="also which parameters mattered for the metric (Optuna's fANOVA over the ok trials)")
    args = p.parse_args(argv)
    folder = sweep_folder(args.folder)
    pid = holder(folder)
    seen = _status_read(folder, bool(pid), args.metric, args.mode)
    results, running = seen["results"], seen["running"]
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    parts = ", ".join(f"{counts[s.value]} {s.value}" for s in Status if counts.get(s.value))
    state = f"running (pid {pid})" if pid else "not running"
    print(f"sweeper: {folder}: {state}")
    print(f"sweeper: {len(results)} of {seen['total'] or '?'} trials finished: {parts or 'none yet'}; "
          f"{len(running)} running")
    _print_running(running, seen["epochs"])
    from sweeper.system.environment import summary

    for line in summary(seen["environment"], [r.env for r in results], seen["runs"], seen["last_run"]):
        print(f"sweeper: {line}")
    if results:
        _print_best(results, seen["objectives"], seen["asked"], args.metric is None, args.importance)
    elif args.importance:
        print("sweeper: which parameters mattered: no trial has finished yet")
    return EXIT_OK


def _status_read(folder: str, live: bool, metric: str | None, mode: str | None) -> dict[str, Any]:
    """What ``status`` shows, read from the ledger in one go (it may be written meanwhile)."""
    from sweeper.store.ledger import Ledger

    ledger = Ledger(folder, readonly=True)
    try:
        current = ledger.current()
        results = list((ledger.results() if current is None else current).values())
        return {
            "results": results,
            "running": ledger.running() if live else [],
            "epochs": ledger.latest_epochs(),
            "total": ledger.get("total"),
            "asked": ledger.ranking(metric, mode),
            "objectives": ledger.objectives(),
            "environment": json.loads(ledger.get("environment") or "{}"),
            "last_run": ledger.get("run") or "",
            "runs": {rid: json.loads(ledger.get(f"run:{rid}") or "{}")
                     for rid in {r.env.get("run", "") for r in results} if rid},
        }
    finally:
        ledger.close()


def _print_running(running: list[dict[str, Any]], epochs: dict[str, Any]) -> None:
    """A line per running trial (device, pid, elapsed, its latest epoch), then its cards'."""
    import time
    from datetime import datetime, timezone

    now = time.time()
    for run in running:
        started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00"))
        elapsed = now - started.replace(tzinfo=timezone.utc).timestamp()
        epoch, metrics = epochs.get(run["trial_id"], (None, {}))
        latest = ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:3])
        print(f"  running  {run['name']}  {run['device']}  pid {run['pid']}  {elapsed:.0f}s"
              + (f"  epoch {epoch}: {latest}" if epoch is not None else ""))
    for line in card_lines(running):
        print(f"sweeper: {line}")


def _print_best(results: list[Any], objectives: Any, asked: tuple[Any, Any], unnamed: bool,
                with_importance: bool) -> None:
    """The best trial so far (or why none), the front of several objectives, and which
    parameters mattered where asked. ``unnamed``: no --metric was given."""
    from sweeper.results import query
    from sweeper.store import table

    frame = table.dataframe(results, objectives)
    try:
        metric, mode = query.choose(frame, *asked)
    except SweepError as exc:  # no trial has the sweep's metric yet (all failed, say)
        print(f"sweeper: {exc}")
        metric = None
    if metric is not None:
        board = query.leaderboard(frame, metric, mode, top=1)
        if len(board):
            best = board.iloc[0]
            print(f"sweeper: best so far: {metric} = {best[metric]:.4g} ({mode}): {best['trial']}")
        elif query.finished_ok(frame).any():  # every ok trial missed the constraints
            print(f"sweeper: best so far: none; {query.nothing_ranked(frame)}")
    if objectives is not None:
        for i, line in enumerate(objectives.lines(frame)):
            print("sweeper: " + line if i == 0 else line)
    if with_importance and metric is not None:
        for name, how in (zip(objectives.metrics, objectives.modes) if objectives is not None and unnamed
                          else [(metric, mode)]):
            _print_importance(frame, name, how)


def _print_importance(frame: Any, metric: str, mode: str) -> None:
    from sweeper.results.importance import importance
    from sweeper.results.query import finished_ok

    try:
        lines = importance(frame[finished_ok(frame)], metric, mode).lines()
    except SweepError as exc:  # too few trials yet, nothing varies: said, not a failure
        lines = [str(exc)]
    for line in lines:
        print(f"sweeper: {line}" if not line.startswith("  ") else line)


def card_lines(running: list[dict[str, Any]]) -> list[str]:
    """Per card with running trials: what they reserved, and what NVML says is used and free."""
    reserved: dict[str, list[int]] = {}
    for run in running:
        if str(run["device"]).startswith("gpu:") and run.get("reserved_mb") is not None:
            reserved.setdefault(run["device"], []).append(int(run["reserved_mb"]))
    if not reserved:
        return []
    from sweeper.system.gpus import inventory

    seen = {f"gpu:{g.index}": g for g in inventory()}
    lines = []
    for device, mbs in sorted(reserved.items()):
        line = f"{device}: {len(mbs)} trial{'s' if len(mbs) > 1 else ''} reserve {sum(mbs)} MB"
        card = seen.get(device)
        lines.append(line + (f"; NVML: {card.used_mb} MB used, {card.free_mb} MB free of {card.total_mb} MB"
                             if card else "; NVML cannot tell its memory now"))
    return lines


def report_main(argv: list[str]) -> int:
    """Print the leaderboard and write report.html beside the CSV."""
    from sweeper.api import load
    from sweeper.results import query, report

    args = _folder_parser("report", "Print a sweep's leaderboard and write its report.html.").parse_args(argv)
    folder = sweep_folder(args.folder)
    report.need_matplotlib()  # one line before anything is printed, not after the leaderboard
    frame = load(folder)
    try:
        metric, mode = query.choose(frame, *_ranking(frame, args.metric, args.mode))
    except SweepError as exc:
        if args.metric is not None:  # the user named it: a mistake to say
            raise
        print(f"sweeper: {exc}")  # no trial has the sweep's metric yet: no ranking, a report all the same
        metric, mode = None, None  # ranked by nothing: not the first metric as "min"
    if metric is not None and mode is not None:
        for line in query.leaderboard_lines(frame, metric, mode):
            print(line)
        if frame.attrs.get("objectives") is not None:
            for line in frame.attrs["objectives"].lines(frame):
                print(line)
        _print_importance(frame, metric, mode)
    fails = query.failures(frame, folder)
    if len(fails):
        print(f"{len(fails)} failed:")
        for row in fails.itertuples():
            print(f"  {row.status:<11} {row.trial}: {row.error}  (log: {row.log})")
    path = report.write_html(folder, metric, mode)
    print(f"report: {path}")
    return EXIT_OK


def replay_main(argv: list[str]) -> int:
    """Run trials of a sweep again as they ran; per metric the drift; exit 1 beyond --tol."""
    from sweeper.results import replay

    p = _Parser(prog=f"{_prog()} replay", allow_abbrev=False,
                description="Run trials of a sweep again as they ran (same parameters, seed, start method, "
                            "determinism and kind of slot) into <out>/<name>-replay, never touching the sweep's "
                            "rows, and print per metric the recorded value, the replayed ones and the drift, and "
                            "what differs in the environment. Exit 0 when every metric is within --tol, 1 when not.")
    p.add_argument("folder", help="a sweep folder, <out>/<name> (e.g. results/digits_mlp)")
    p.add_argument("trials", nargs="*", help="trial names or ids as in results.csv, or patterns such as 'lr=0_01*'")
    p.add_argument("--all", action="store_true", help="replay every ok trial")
    p.add_argument("--times", type=int, default=1, help="replay each this many times (default 1)")
    p.add_argument("--tol", type=float, default=0.0,
                   help="how far a metric may drift, absolutely or relatively (default 0: the same number)")
    p.add_argument("--deterministic", action="store_true",
                   help="turn each framework's deterministic mode on even if the sweep ran without it")
    p.add_argument("--quiet", action="store_true", help="print only the comparison")
    args = p.parse_intermixed_args(argv)  # trial names before or after the flags
    if not args.tol >= 0:
        raise SweepError(f"--tol must be a number >= 0, got {args.tol}")
    if args.all and args.trials:
        raise SweepError("give trial names or --all, not both")
    show_messages(not args.quiet)
    with procs.subreaper():
        done = replay.replay(args.folder, args.trials, every=args.all, times=args.times,
                             deterministic=True if args.deterministic else None, quiet=args.quiet)
    for line in replay.lines(done, args.tol, args.times):
        print(line)
    return EXIT_OK if all(r.within(args.tol) for r in done) else EXIT_FAILED


def export_main(argv: list[str]) -> int:
    """Replay a sweep's ledger into TensorBoard files and MLflow runs (updating, not adding)."""
    from sweeper import tracking
    from sweeper.store.ledger import Ledger
    from sweeper.tracking import chosen
    from sweeper.tracking.mirror import Mirror

    p = _Parser(prog=f"{_prog()} export", allow_abbrev=False,
                description="Show a sweep in TensorBoard and/or MLflow, from its ledger: runs and files "
                            "an earlier export or the sweep itself wrote are updated, never duplicated.")
    p.add_argument("folder", help="a sweep folder, <out>/<name> (e.g. results/digits_mlp)")
    p.add_argument("--tensorboard", action="store_true", help="event files in <out>/<name>/tensorboard")
    p.add_argument("--mlflow", nargs="?", const=True, metavar="URI",
                   help="a tracking URI or a folder (a SQLite store in it; default: a local store in "
                        "<out>/<name>/mlflow.db)")
    p.add_argument("--optuna", metavar="URL",
                   help="an Optuna storage, e.g. sqlite:///study.db: the sweep as a study named after its "
                        "folder (for optuna-dashboard and Optuna's plots)")
    p.add_argument("--mode", choices=list(MODES), help="the study's direction, where the sweep recorded none "
                   "and its metric's name does not say it")
    args = p.parse_args(argv)
    if not args.tensorboard and not args.mlflow and not args.optuna:
        raise SweepError("export needs --tensorboard, --mlflow [URI] and/or --optuna URL; e.g. "
                         f"{_prog()} export {args.folder} --mlflow http://localhost:5000")
    folder = sweep_folder(args.folder)
    running = holder(folder)
    if running:  # its trials' attempts change under an export: only the sweep itself shows them right
        raise SweepError(f"a sweep (pid {running}) is running in {folder}; export it when it has ended, "
                         "or start the sweep with --tensorboard / --mlflow to see it live")
    if args.optuna:
        from sweeper.results import studies

        name, n = studies.export(folder, args.optuna, args.mode)
        print(f"sweeper: {n} trials written to the Optuna study {name!r} in {args.optuna}")
        print(f"sweeper: optuna-dashboard {args.optuna}  (pip install optuna-dashboard)")
        if not args.tensorboard and not args.mlflow:
            return EXIT_OK
    opts = Options(tensorboard=args.tensorboard, mlflow=args.mlflow).checked()
    chosen.check(opts)
    ledger = Ledger(folder, readonly=True)
    try:
        uid = ledger.get("uid") or default_uid(folder)
        metric, mode, search = ledger.get("metric") or "", ledger.get("mode") or "", ledger.get("search") or ""
        results = ledger.results()
    finally:
        ledger.close()
    info = tracking.SweepInfo(name=os.path.basename(folder), folder=folder, uid=uid, metric=metric, mode=mode,
                              search=search, domains=tracking.domains_of_points(r.params for r in results.values()))
    trackers = chosen.make(opts, folder)
    mirror = Mirror(folder, trackers, info, strict=True)
    mirror.end("finished")
    for t in trackers:
        print(f"sweeper: {len(results)} trials shown in {t.label}")
        print(f"sweeper: {t.hint}")
    return EXIT_OK
