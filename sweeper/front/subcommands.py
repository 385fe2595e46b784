"""The commands that read a sweep folder: ``status``, ``report``, ``replay``, ``export``
(``python -m sweeper COMMAND FOLDER``), each a function of its arguments that returns the
exit code; :data:`COMMANDS` names them for the command line's first word
(:mod:`sweeper.front.cli` runs a grid file otherwise).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, NoReturn

from sweeper.errors import SweepError
from sweeper.front import gpuview, job
from sweeper.front.messages import show_messages
from sweeper.model.options import Options
from sweeper.model.trial import Status
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.objectives import MODES
from sweeper.store.folder import default_uid, holder, sweep_folder
from sweeper.system import procs

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def program_name() -> str:
    """``sweeper`` when run as the console script, else ``python -m sweeper``."""
    return "sweeper" if os.path.basename(sys.argv[0]) == "sweeper" else "python -m sweeper"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SweepError(f"{message}; see {self.prog} --help")


def _ranking(frame: Any, metric: str | None, mode: str | None) -> tuple[str | None, str | None]:
    """The metric and mode given, else those the sweep ran with (``load()`` keeps them)."""
    if metric is not None:
        return metric, mode
    return frame.attrs.get("metric"), mode or frame.attrs.get("mode")


def cell(value: Any) -> str:
    return "" if value is None else str(value)


def _folder_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = Parser(prog=f"{program_name()} {prog}", description=description, allow_abbrev=False)
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
    from sweeper.backends.slurm.outside import seen as in_slurm

    queued = in_slurm(folder, driven=bool(pid))  # its tasks in Slurm's queue, its driver anywhere (on Slurm)
    live = bool(pid or queued.driver)
    seen = _status_read(folder, live, args.metric, args.mode)
    results, running = seen["results"], seen["running"]
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    parts = ", ".join(f"{counts[s.value]} {s.value}" for s in Status if counts.get(s.value))
    state = (f"running ({queued.driver or f'pid {pid}'})" if live
             else "not running" + (" (no driver)" if queued.tasks else ""))
    print(f"sweeper: {folder}: {state}")
    waits = f", {queued.waiting} waiting in Slurm's queue" if queued.waiting else ""
    print(f"sweeper: {len(results)} of {seen['total'] or '?'} trials finished: {parts or 'none yet'}; "
          f"{len(running) if live else queued.running} running{waits}")
    _print_running(running, seen["epochs"])
    for line in queued.lines:
        print(line)
    for line in gpuview.waiting_lines(folder) if pid else []:  # what it waits for, as its machine-wide record says
        print(f"sweeper: {line}")
    from sweeper.system.environment import summary

    for line in summary(seen["environment"], [r.env for r in results], seen["runs"], seen["last_run"]):
        print(f"sweeper: {line}")
    if seen["schedule"]:  # population-based training: each member's schedule and lineage
        from sweeper.results.schedules import lines

        print("sweeper: population-based training, each member's parameters by epoch:")
        names = {**seen["names"], **{r.trial_id: r.name for r in results}}
        for line in lines(seen["schedule"], names):
            print(line)
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
        facts = ledger.facts()
        return {
            "results": results,
            "running": ledger.running() if live else [],
            "epochs": ledger.latest_epochs(),
            "total": facts.total,
            "asked": ledger.ranking(metric, mode),
            "objectives": ledger.objectives(),
            "environment": facts.environment,
            "last_run": facts.run,
            "runs": {rid: ledger.run_record(rid) or {} for rid in {r.env.get("run", "") for r in results} if rid},
            "schedule": ledger.schedule(),
            "names": ledger.grid_names(),
        }
    finally:
        ledger.close()


def _print_running(running: list[dict[str, Any]], epochs: dict[str, Any]) -> None:
    """A line per running trial (device, where it runs, elapsed, its latest epoch), then its cards'."""
    import time
    from datetime import datetime, timezone

    now = time.time()
    for run in running:
        started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00"))
        elapsed = now - started.replace(tzinfo=timezone.utc).timestamp()
        epoch, metrics = epochs.get(run["trial_id"], (None, {}))
        latest = ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:3])
        where = run.get("place") or f"pid {run['pid']}"  # (a ledger from before it: the pid)
        print(f"  running  {run['name']}  {run['device']}  {where}  {elapsed:.0f}s"
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
    if metric is not None and mode is None:  # its direction unknown: nothing is the best
        print(f"sweeper: {query.unranked(metric)}")
    elif metric is not None:
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


def _print_importance(frame: Any, metric: str, mode: str | None) -> None:
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
    from sweeper.results import query, report
    from sweeper.results.reading import load

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
    if metric is not None and mode is None:  # its direction unknown: listed, not ranked
        print(f"sweeper: {query.unranked(metric)}")
    if metric is not None:
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
    path = report.write_html(folder, metric if mode is not None else None, mode)  # unranked: picked again
    print(f"report: {path}")
    return EXIT_OK


def replay_main(argv: list[str]) -> int:
    """Run trials of a sweep again as they ran; per metric the drift; exit 1 beyond --tol."""
    from sweeper.front import replay

    p = Parser(prog=f"{program_name()} replay", allow_abbrev=False,
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

    p = Parser(prog=f"{program_name()} export", allow_abbrev=False,
                description="Show a sweep in TensorBoard, MLflow and/or an Optuna study, from its ledger: "
                            "runs and files an earlier export or the sweep itself wrote are updated, never "
                            "duplicated; an Optuna study is written anew.")
    p.add_argument("folder", help="a sweep folder, <out>/<name> (e.g. results/digits_mlp)")
    p.add_argument("--tensorboard", action="store_true", help="event files in <out>/<name>/tensorboard")
    p.add_argument("--mlflow", nargs="?", const=True, metavar="URI",
                   help="a tracking URI or a folder (a SQLite store in it; default: a local store in "
                        "<out>/<name>/mlflow.db)")
    p.add_argument("--optuna", nargs="?", const=True, metavar="URL",
                   help="an Optuna storage, e.g. sqlite:///study.db, or a journal file (default: "
                        "<out>/<name>/optuna.journal): the sweep as a study named after its folder (for "
                        "optuna-dashboard and Optuna's plots)")
    p.add_argument("--mode", choices=list(MODES), help="the study's direction, where the sweep recorded none "
                   "and its metric's name does not say it")
    args = p.parse_args(argv)
    if not args.tensorboard and not args.mlflow and not args.optuna:
        raise SweepError("export needs --tensorboard, --mlflow [URI] and/or --optuna [URL]; e.g. "
                         f"{program_name()} export {args.folder} --mlflow http://localhost:5000")
    folder = sweep_folder(args.folder)
    running = holder(folder)
    if running:  # its trials' attempts change under an export: only the sweep itself shows them right
        raise SweepError(f"a sweep (pid {running}) is running in {folder}; export it when it has ended, "
                         "or start the sweep with --tensorboard / --mlflow / --optuna to see it live")
    if args.optuna:
        from sweeper.tracking import optuna_study

        name, n, where = optuna_study.export(folder, chosen.optuna_storage(args.optuna, folder), args.mode)
        print(f"sweeper: {n} trials written to the Optuna study {name!r} in {where}")
        print(f"sweeper: optuna-dashboard {where}  (pip install optuna-dashboard)")
        if not args.tensorboard and not args.mlflow:
            return EXIT_OK
    opts = Options(tensorboard=args.tensorboard, mlflow=args.mlflow).checked()
    chosen.check(opts)
    ledger = Ledger(folder, readonly=True)
    try:
        facts = ledger.facts()
        uid = facts.uid or default_uid(folder)
        metric, mode, search = facts.metric, facts.mode, facts.search
        results = ledger.results()
    finally:
        ledger.close()
    info = tracking.SweepInfo(name=os.path.basename(folder), folder=folder, uid=uid, metric=metric, mode=mode,
                              search=search, domains=tracking.domains_of_points(r.params for r in results.values()))
    trackers = chosen.make(opts, folder)
    mirror = Mirror(folder, trackers, info, strict=True)
    mirror.end(SweepEnd.FINISHED)
    for t in trackers:
        print(f"sweeper: {len(results)} trials shown in {t.label}")
        print(f"sweeper: {t.hint}")
    return EXIT_OK


#: The words after ``python -m sweeper`` that are commands, not a grid file, and what each runs.
COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "status": status_main, "report": report_main, "export": export_main, "replay": replay_main,
    "run": lambda argv: job.main(argv, program_name()), "gpus": lambda argv: gpuview.main(argv, program_name()),
}
