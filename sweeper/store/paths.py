"""Every file sweeper writes or reads, by name, and the one way it writes a file whole.

A sweep folder, ``<out>/<name>/``::

    ledger.sqlite (-wal, -shm)   the durable record; everything else derives from it
    results.csv                  one row per trial of the grid last run here
    history.csv                  per-epoch reports
    report.html                  written by ``sweeper report``
    tensorboard/<trial name>/    with --tensorboard: event files (HParams, per-epoch scalars)
    mlflow.db, mlartifacts/      with --mlflow and no URI: the local MLflow store
    optuna.journal               with --optuna and no URL: the sweep as an Optuna study
    .lock                        held by the sweep running here; holds its pid and tag
    .jobs/                       with a batch backend (Slurm): its array lists, Slurm's own output
    .pbt/<trial id>/<epoch>/     with search="pbt": each member's checkpoint as a segment left it
    trials/<trial name>/
        log.txt                  every attempt's output, each after a header line
        result.json              what the trial returned (whole, or not there)
        metrics.json             a command trial's metrics, if the command writes them
        checkpoint/              its state, kept across its segments (current_trial().checkpoint)
        .job/                    a batch job's spec, messages, return value, its scheduler's job id

Beside the sweep folders, one file per user (:func:`user_cache`): an empty MLflow store
made by the installed MLflow, copied as each new local store (``--mlflow``) rather than
made again by its migrations (seconds each).

The log header is written and read here, side by side: :func:`log_header` starts each
attempt's part of ``log.txt``, and :func:`log_tail` finds an attempt's part by it.
Light on purpose: trial processes import it.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import IO, Any, Iterator

from sweeper.model.trial import CHECKPOINT, LOG  # a trial's own two files: its spec tells where they are

LEDGER = "ledger.sqlite"
RESULTS = "results.csv"
HISTORY = "history.csv"
REPORT = "report.html"
LOCK = ".lock"
TRIALS = "trials"
RESULT = "result.json"
METRICS = "metrics.json"
#: population-based training's published checkpoints, ``<sweep>/.pbt/<trial id>/<epoch>/``
PBT = ".pbt"
#: Left in a sweep folder by sweeper < 0.2 (standbys' logs); removed when a sweep opens it.
OLD_STANDBY = ".standby"
TENSORBOARD = "tensorboard"
MLFLOW_DB = "mlflow.db"
MLFLOW_ARTIFACTS = "mlartifacts"
OPTUNA_JOURNAL = "optuna.journal"

#: A Hydra launcher's own files in its sweep folder (``hydra.sweep.dir``): the job book (each
#: job's number and overrides), the Hydra context its jobs' processes load; and in each trial's
#: folder, the job's return as Hydra's sweepers read it
HYDRA, HYDRA_BOOK, HYDRA_CONTEXT, HYDRA_RETURN = ".sweeper_hydra", "jobs.json", "context-{}.pkl", "job_return.pkl"

#: Starts the line at the top of each attempt's part of a trial's log.
LOG_HEADER = "=== sweeper:"
LOG_TAIL_LINES = 8


@dataclass(frozen=True)
class SweepPaths:
    """The files of one sweep folder."""

    folder: str

    @property
    def ledger(self) -> str:
        return os.path.join(self.folder, LEDGER)

    @property
    def results(self) -> str:
        return os.path.join(self.folder, RESULTS)

    @property
    def history(self) -> str:
        return os.path.join(self.folder, HISTORY)

    @property
    def report(self) -> str:
        return os.path.join(self.folder, REPORT)

    @property
    def lock(self) -> str:
        return os.path.join(self.folder, LOCK)

    @property
    def trials(self) -> str:
        return os.path.join(self.folder, TRIALS)

    @property
    def jobs(self) -> str:
        """A batch backend's files of the sweep's jobs (Slurm's array lists and output)."""
        return os.path.join(self.folder, JOBS)

    @property
    def pbt(self) -> str:
        """Population-based training's published checkpoints (a member's, as each segment left it)."""
        return os.path.join(self.folder, PBT)

    @property
    def hydra_book(self) -> str:
        """A Hydra launcher's job book: each job's number, kept across runs (never reused)."""
        return os.path.join(self.folder, HYDRA, HYDRA_BOOK)

    def hydra_context(self, tag: str = "*") -> str:
        """What the jobs of one multirun (``tag``) load to compose their configs as Hydra's
        launchers do: its own file, which another multirun never changes (``*``: any's)."""
        return os.path.join(self.folder, HYDRA, HYDRA_CONTEXT.format(tag))

    @staticmethod
    def of_trial(trial_dir: str) -> SweepPaths:
        """The sweep a trial's folder is in (``<out>/<name>/trials/<trial>``)."""
        return SweepPaths(os.path.dirname(os.path.dirname(trial_dir)))

    @property
    def tensorboard(self) -> str:
        """``--tensorboard``'s event files: ``tensorboard --logdir`` this (each run named as its trial)."""
        return os.path.join(self.folder, TENSORBOARD)

    @property
    def mlflow_uri(self) -> str:
        """``--mlflow`` without a URI: a local store in the sweep folder (no server)."""
        return f"sqlite:///{os.path.abspath(os.path.join(self.folder, MLFLOW_DB))}"

    @property
    def mlflow_artifacts(self) -> str:
        return os.path.abspath(os.path.join(self.folder, MLFLOW_ARTIFACTS))

    @property
    def optuna_journal(self) -> str:
        """``--optuna`` without a URL: an Optuna journal file (``optuna-dashboard`` opens it)."""
        return os.path.abspath(os.path.join(self.folder, OPTUNA_JOURNAL))

    def trial(self, name: str) -> str:
        """A trial's own folder."""
        return os.path.join(self.folder, TRIALS, name)

    def exists(self) -> bool:
        """Whether this is a sweep folder (it has a ledger)."""
        return os.path.exists(self.ledger)


def user_cache(name: str) -> str | None:
    """A file in the user's cache folder (``$XDG_CACHE_HOME/sweeper``, else
    ``~/.cache/sweeper``): anything there may be deleted at any time. None where there is
    no such folder (no home, a relative ``XDG_CACHE_HOME``): nothing is cached."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(root):
        return None
    return os.path.join(root, "sweeper", name)


def mlflow_template(versions: str) -> str | None:
    """The empty MLflow store that ``versions`` (MLflow's, SQLAlchemy's, its migrations')
    make; None where nothing is cached."""
    return user_cache(f"mlflow-store-{versions}.db")


def trial_log(name: str) -> str:
    """A trial's log, relative to its sweep folder (as report.html links it)."""
    return f"{TRIALS}/{name}/{LOG}"


def log_file(trial_dir: str) -> str:
    return f"{trial_dir}/{LOG}"


def result_file(trial_dir: str) -> str:
    return os.path.join(trial_dir, RESULT)


def checkpoint_dir(trial_dir: str) -> str:
    """A trial's checkpoint folder (``current_trial().checkpoint``), lasting across its segments."""
    return os.path.join(trial_dir, CHECKPOINT)


def metrics_file(trial_dir: str) -> str:
    return os.path.join(trial_dir, METRICS)


def hydra_return_file(trial_dir: str) -> str:
    """A Hydra job's return (Hydra's ``JobReturn``, pickled) in its trial's folder."""
    return os.path.join(trial_dir, HYDRA_RETURN)


#: A batch job's folder in its trial's (:mod:`sweeper.child.batch`): what the job runs, the
#: messages it sends, what it returned.
JOB, JOB_SPEC, JOB_MESSAGES, JOB_RETURNED = ".job", "job.pkl", "messages", "returned.pkl"
JOB_ANSWERS = "answers"
#: A batch sweep's driver's heartbeat, in its jobs folder (:mod:`sweeper.backends.slurm.driver`)
DRIVER_BEAT = "driver"
JOB_SCHEDULED = "scheduled"
#: A sweep's batch jobs' own files (array lists, the scheduler's output), in ``<sweep>/.jobs/``.
JOBS = ".jobs"


class JobPaths:
    """The files of a trial run as a batch job, in ``<trial dir>/.job/``."""

    def __init__(self, trial_dir: str) -> None:
        self.folder = os.path.join(trial_dir, JOB)
        self.spec = os.path.join(self.folder, JOB_SPEC)
        self.messages = os.path.join(self.folder, JOB_MESSAGES)
        self.returned = os.path.join(self.folder, JOB_RETURNED)
        #: the driver's answers to its reports (a scheduler's verdicts), each for one run of the job
        self.answers = os.path.join(self.folder, JOB_ANSWERS)
        #: the batch scheduler's job running it (Slurm's ``123_4``), until a driver saw it end:
        #: a driver killed meanwhile leaves it, and the next adopts the job
        self.scheduled = os.path.join(self.folder, JOB_SCHEDULED)


# -- writing a file whole ------------------------------------------------------------------


@contextlib.contextmanager
def atomic(path: str, fsync: bool = True, encoding: str | None = None, binary: bool = False) -> Iterator[IO[Any]]:
    """A file (text, or ``binary``) that readers see whole or not at all: written to a
    temporary file beside it (fsynced unless told not to), renamed over ``path``. On any
    failure (a full disk) the temporary file is removed and ``path`` keeps what it held."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with (open(tmp, "wb") if binary else open(tmp, "w", newline="", encoding=encoding)) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


# -- the log header: written by the trial process, read by the parent ----------------------


def log_header(name: str, trial_id: str, attempt: int, pid: int, device: str, seed: int) -> str:
    """The line that starts one attempt's part of a trial's log (``pid`` finds it again),
    stamped with the time now (UTC)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    return (f"{LOG_HEADER} trial {name} (id {trial_id}) attempt {attempt}, "
            f"pid {pid}, device {device}, seed {seed}, {stamp}Z ===")


def set_aside(path: str, stamp: str | None = None) -> str | None:
    """Keep a file or folder of an earlier sweep beside its successor: renamed with a time
    stamp (now, unless given: files set aside together share one), ``results.csv`` to
    ``results.20261203-101500.csv``; a name already taken gets ``-2``, ``-3``, ... (never
    overwritten). A SQLite file takes its ``-wal`` and ``-shm`` with it. The new name, or
    None when there was nothing there."""
    path = os.path.normpath(path)
    if not os.path.lexists(path):
        return None
    head, name = os.path.split(path)
    stem, ext = os.path.splitext(name) if os.path.isfile(path) else (name, "")
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    aside = os.path.join(head, f"{stem}.{stamp}{ext}")
    n = 1
    while any(os.path.lexists(aside + extra) for extra in ("", "-wal", "-shm")):
        n += 1
        aside = os.path.join(head, f"{stem}.{stamp}-{n}{ext}")
    os.replace(path, aside)
    for extra in ("-wal", "-shm"):
        if os.path.exists(path + extra):
            os.replace(path + extra, aside + extra)
    return aside


def log_tail(path: str, lines: int = LOG_TAIL_LINES, pid: int | None = None) -> list[str]:
    """The last lines a trial's log got from one attempt (the last, or process ``pid``'s),
    with control characters escaped: they go to the console and the CSV as they are.

    The log gathers every attempt, each after its :func:`log_header` line; only lines
    after the attempt's own header count, so an earlier attempt's words are never this
    one's. Cheap for big logs: reads the end only.
    """
    from sweeper.model.text import printable

    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    all_lines = text.splitlines()
    heads = [i for i, t in enumerate(all_lines) if t.startswith(LOG_HEADER)]
    if pid is not None:
        heads = [i for i in heads if f" pid {pid}," in all_lines[i]]
        if not heads:  # died before its log was opened
            return []
    start = heads[-1] + 1 if heads else 0
    return [printable(line) for line in all_lines[start:][-lines:]]
