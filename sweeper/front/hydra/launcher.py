"""sweeper as a Hydra launcher (``hydra/launcher=sweeper``): a multirun's jobs as a sweep.

::

    Hydra's sweeper (basic, or any that uses a launcher)
      │ launch(batch of override lists, initial_job_idx)
      ▼
    Launching.launch ── Book: each job its number, for good          sweeper.front.hydra.jobs
      │                 context.pkl: Hydra's context, config, singletons (once)  ...hydra.sending
      │                 jobs ok on record: kept if their config is the same (...hydra.returns);
      │                 those other code made, said in one line       ...hydra.appcode
      │                 Definition: the jobs' points (this multirun's earlier batches settled),
      │                 named by job number; train = HydraTask (the task function by name, or by
      │                 value)                                        sweeper.front.hydra.task
      ▼
    sweeper.run.runner.run ── each job a trial: a fresh process on its slot (GPU pinned,
      │                       capped, seeded) that composes the job's config and calls
      │                       Hydra's run_job: job folder, .hydra/, logging, return value
      ▼
    ledger, results.csv (hydra.sweep.dir) ── JobReturn per job, in the batch's order:
                                             ok: the job's own (pickled in its trial folder);
                                             anything else: FAILED, with JobFailed saying
                                             how it ended and where its log is

The Hydra plugin itself (``hydra_plugins/sweeper_launcher``) is a thin class that holds
the settings and calls this module; nothing here is imported until a multirun launches.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pickle
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from hydra.errors import CompactHydraException

from sweeper.errors import SweepError
from sweeper.front.hydra import settings as launcher_settings
from sweeper.front.hydra.closing import MultirunSummary, hook
from sweeper.front.hydra.jobs import Book, Job, described
from sweeper.front.hydra.appcode import app_code, changed_line
from sweeper.front.hydra.returns import check_kept, job_return, made_with, sources_digest
from sweeper.front.hydra.sending import by_value, context_blob, found_by_name
from sweeper.front.hydra.task import HydraTask
from sweeper.model.callables import name_of, source_of
from sweeper.model.definition import Definition
from sweeper.model.grid import Points
from sweeper.model.lifecycle import SweepEnd
from sweeper.model.target import FunctionTarget
from sweeper.model.trial import TrialResult
from sweeper.store.folder import refuse_busy
from sweeper.store.paths import SweepPaths, atomic

if TYPE_CHECKING:
    from hydra.core.utils import JobReturn

#: The launcher's own lines, Hydra's way: through Hydra's logging, as its launchers' are (never
#: through sweeper's logger, which prints a sweep's own lines plainly)
log = logging.getLogger("hydra_plugins.sweeper_launcher")


class LauncherError(CompactHydraException):
    """A mistake in the settings or the multirun, said as Hydra says its own: one line."""


@contextlib.contextmanager
def one_line() -> Iterator[None]:
    """sweeper's one-line errors as Hydra prints its own (no traceback), in a multirun's words."""
    try:
        yield
    except SweepError as exc:
        raise LauncherError(in_hydra_words(str(exc))) from None


class Launching:
    """One multirun's launches: its settings checked at setup, its batches as one sweep."""

    def __init__(self, settings: Mapping[str, Any], config: Any, hydra_context: Any, task_function: Any) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.folder = os.path.abspath(str(config.hydra.sweep.dir))
        with one_line():
            self.options = launcher_settings.options(settings, self.folder)  # a mistake: one line, now
        self.earlier: list[Job] = []  #: this multirun's jobs of earlier batches: settled
        self.context = ""  #: the file its jobs load Hydra's context from (its own)
        self.sources: str | None = None  #: what composing its jobs' configs reads, as a digest
        self.code: dict[str, str] = {}  #: the app's own files, each its digest, when it launched
        self.closing = MultirunSummary(in_hydra_words)  #: its summary, said once, when it may end
        self.hooked = False  #: whether Hydra's end of the multirun says it (else each batch does)

    def launch(self, batch: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        try:
            with one_line():
                return self._launch(batch, initial_job_idx)
        except BaseException:  # the multirun ends here: what its earlier batches did is said first
            self.closing.say()
            raise

    def _launch(self, batch: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        from hydra.core.utils import configure_log, setup_globals

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        os.makedirs(self.folder, exist_ok=True)
        refuse_busy(self.folder)  # another multirun here: one line, before this one writes anything
        paths = SweepPaths(self.folder)
        first = not self.earlier
        book = Book(paths, fresh=self.options.fresh and first)
        jobs = book.number(batch, initial_job_idx)
        if not jobs:
            return []
        if first:  # a job's config composes (a mistake in the overrides: Hydra's one line, before any job)
            self._compose(jobs[0])
            self._save_context(paths)
            self.hooked = hook(self.hydra_context.callbacks, self.closing)  # after the context the jobs load
            self.sources = sources_digest(self.hydra_context.config_loader, self.config, self.folder)
            self.code = app_code(self.task_function, self.folder)
        changed = None
        if not self.options.fresh:  # each job ok on record: made with the config it has now; other code said
            settled = {j.key for j in self.earlier}
            unsettled, rows = [j for j in jobs if j.key not in settled], _on_record(self.folder)
            check_kept(unsettled, rows, self.folder, self._compose, self.sources)
            changed = changed_line(made_with(unsettled, rows, self.folder), self.code)
        book.save()
        opts = self.options
        log.info(f"sweeper is launching {len(jobs)} jobs ({_where(opts)}), sweep folder {self.folder}")
        for line in described(jobs):
            log.info(line)
        if first and _timed(self.config):
            log.info(f"sweeper: hydra.sweep.dir is made from the time, so the same command makes another folder; "
                     f"to resume this multirun, give it hydra.sweep.dir={self.folder}")
        self._say(changed)
        outcome = self._run(jobs)
        self.earlier += jobs
        self.options = replace(self.options, fresh=False)  # a later batch of this multirun sets nothing aside
        if outcome.end is SweepEnd.INTERRUPTED and outcome.interrupted is not None:  # (the signal that did)
            log.error(f"sweeper: interrupted; what finished is in {outcome.csv_path}; the same command resumes")
            raise SystemExit(128 + outcome.interrupted)
        rows = {r.key: r for r in outcome.results}
        name = str(self.config.hydra.job.name)
        return [job_return(job, rows.get(job.key), self.folder, name) for job in jobs]

    def _say(self, line: str | None) -> None:
        """A line of sweeper's own, said whatever ``progress`` (a warning), in the multirun's words."""
        from sweeper.front.messages import show_messages

        if line:
            show_messages(self.options.progress)
            logging.getLogger("sweeper").warning(f"sweeper: {in_hydra_words(line)}")

    def _compose(self, job: Job) -> Any:
        """The job's config, as its process will compose it."""
        return self.hydra_context.config_loader.load_sweep_config(self.config, list(job.overrides))

    def _run(self, jobs: list[Job]) -> Any:
        from sweeper.front.messages import show_messages
        from sweeper.front.shown import run_shown

        opts = self.options
        show_messages(opts.progress)
        words = _HydraWords()  # its lines in a multirun's words, while this launch runs (not a later sweep's)
        handlers = [h for h in logging.getLogger("sweeper").handlers
                    if not any(isinstance(f, _HydraWords) for f in h.filters)]
        for handler in handlers:
            handler.addFilter(words)
        try:
            return self._launched(jobs, opts, run_shown)
        finally:
            for handler in handlers:
                handler.removeFilter(words)

    def _launched(self, jobs: list[Job], opts: Any, run_shown: Any) -> Any:
        every = list({j.key: j for j in [*self.earlier, *jobs]}.values())
        definition = Definition(self._target(), opts, Points(j.params for j in every), None,
                                source_of(self.task_function), self._what(), names=tuple(str(j.num) for j in every),
                                settled=frozenset(j.key for j in self.earlier))
        self.closing.started()
        # the summary: the multirun's (closing), said only where progress is (so pandas is needed only then)
        outcome = run_shown(definition, in_hydra_words, closing=False, table=opts.progress)
        if opts.progress:
            self.closing.ended(outcome, {j.key for j in jobs}, (opts.ranked_by, opts.ranked_mode), self.hooked,
                               basic=_basic_sweeper(self.config))
        return outcome

    def _target(self) -> FunctionTarget:
        """The task function by its name (its module imported in the job's process, a script
        loaded as spawn loads it), or by value where no name finds it again."""
        fn = self.task_function
        found = found_by_name(fn)
        if found is None:
            task = HydraTask("", "", 0, self.folder, "", self.context, os.getcwd(), self.sources or "",
                             by_value=by_value(fn), code=tuple(self.code.items()))
            return FunctionTarget(pickle.dumps(task), name_of(fn), "")
        module, qualname, depth = found
        script = os.path.abspath(source_of(fn) or "") if module == "__main__" else ""
        task = HydraTask(module, qualname, depth, self.folder, script, self.context, os.getcwd(), self.sources or "",
                         code=tuple(self.code.items()))
        return FunctionTarget(pickle.dumps(task), f"{module}.{qualname}", module)

    def _what(self) -> str:
        """The task function: a row on record stands for a job only if the same one made it (and
        with the same config: :func:`sweeper.front.hydra.returns.check_kept`)."""
        return f"hydra task {name_of(self.task_function)}"

    def _save_context(self, paths: SweepPaths) -> None:
        """What each job's process loads: Hydra's context, the multirun's config and singletons
        (plain pickle: classes by name, found in the job's process), OmegaConf's resolvers
        (:mod:`sweeper.front.hydra.sending`)."""
        from hydra.core.singleton import Singleton

        blob = context_blob(self.hydra_context, self.config, Singleton.get_state())
        for old in glob.glob(paths.hydra_context()):  # earlier multiruns' (none runs now: refuse_busy)
            os.remove(old)
        self.context = paths.hydra_context(f"{os.getpid()}-{int(time.time())}")
        os.makedirs(os.path.dirname(self.context), exist_ok=True)
        with atomic(self.context, binary=True) as f:
            f.write(blob)


def _on_record(folder: str) -> dict[str, TrialResult]:
    """The rows on record in a sweep folder, by their point's key ({} where there is no ledger)."""
    from sweeper.store.ledger import Ledger

    if not SweepPaths(folder).exists():
        return {}
    ledger = Ledger(folder, readonly=True)
    try:
        return {r.key: r for r in ledger.results().values()}
    finally:
        ledger.close()


class _HydraWords(logging.Filter):
    """sweeper's own lines, their flags as the launcher's settings (``--metric``: ``hydra.launcher.metric``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = in_hydra_words(record.getMessage()), None
        return True


def _timed(config: Any) -> bool:
    """Whether ``hydra.sweep.dir`` is made from the time (Hydra's default, ``${now:...}``)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    return isinstance(raw, dict) and "${now:" in str(raw.get("dir", ""))


def _where(opts: Any) -> str:
    """Where the jobs run, in the launch line: this machine's slots, or a cluster's."""
    if opts.backend == "slurm":
        return _on_slurm(opts)
    workers = "as many workers as slots" if opts.workers is None else f"workers {opts.workers}"
    return f"{workers}, gpus {opts.gpus if opts.gpus is not None else 'all'}, backend {opts.backend}"


def _on_slurm(opts: Any) -> str:
    """On Slurm: each job a task of an array job, how many at once, the GPU it is given (none unless
    ``gpus`` or the sbatch options ask), the sbatch options."""
    from sweeper.backends.slurm.backend import DEFAULT_WORKERS
    from sweeper.backends.slurm.options import SlurmOptions
    from sweeper.model.settings import resources

    own: SlurmOptions = opts.backend_options or SlurmOptions().checked()
    asked = resources(opts).gpus.asked
    gpu = ("the GPUs its sbatch options ask for" if own.asks_gpus() else "a GPU each, --gres=gpu:1" if asked
           else "no GPU: hydra.launcher.gpus=all gives each one")
    sbatch = " ".join(own.sbatch()) or "none given"
    return (f"backend slurm: each job a task of an array job, at most {opts.worker_count or DEFAULT_WORKERS} at "
            f"once, {gpu}; sbatch options: {sbatch}")


#: The words a flag's value may be in sweeper's advice (``--mode max``, ``--gpus none``); any other
#: word after a flag is the sentence's own (``--metric and --mode``).
def _basic_sweeper(config: Any) -> bool:
    """Whether the multirun's sweeper is Hydra's basic one (which raises on a batch with a failed job)."""
    from omegaconf import OmegaConf

    target = OmegaConf.select(config, "hydra.sweeper._target_", default="") or ""
    return str(target).endswith("BasicSweeper")


_VALUE_WORDS = frozenset({"max", "min", "none", "all", "auto", "spawn", "forkserver", "true", "false"})


def in_hydra_words(message: str) -> str:
    """sweeper's advice in the words a multirun takes: ``--per-gpu`` is ``hydra.launcher.per_gpu``,
    ``--mode max`` is ``hydra.launcher.mode=max`` (a value among the option's choices, or a
    number), the sweep's folder (``--name``, ``--out``) is ``hydra.sweep.dir``, the grid file
    (the file defining the task function) is the app's script, and the
    keywords of ``sweep()`` said beside a flag (``(mode='max' or 'min')``) are left out."""
    message = re.sub(r"give this (?:run|one) another --name(?: \(name=\.\.\.\))?|choose another --out",
                     "give this multirun another hydra.sweep.dir", message)
    message = message.replace("--fresh (fresh=True)", "hydra.launcher.fresh=true")
    message = message.replace("the grid file changed since", "the app's script changed since")
    known = set(launcher_settings.defaults())

    def setting(match: re.Match[str]) -> str:
        name, value = match.group(1).replace("-", "_"), match.group(2)
        if name not in known:
            return match.group(0)
        if value and (value in _VALUE_WORDS or re.fullmatch(r"-?\d[\w.]*", value)):  # 2, 0.5, 10m, 6GB
            return f"hydra.launcher.{name}={value}"
        return f"hydra.launcher.{name}" + (f" {value}" if value else "")

    def valued(match: re.Match[str]) -> str:  # --metric val_loss (metric='val_loss'): the word is its value
        name = match.group(1).replace("-", "_")
        if name not in known or match.group(3) != name:
            return match.group(0)
        return f"hydra.launcher.{name}={match.group(2)}"

    message = re.sub(r"(?<![\w.])--([a-z][a-z-]*) ([\w.-]+) \(([a-z_]+)=[^()]*\)", valued, message)
    message = re.sub(r"(?<![\w.])--([a-z][a-z-]*)(?: ([\w.-]+)\b)?", setting, message)
    return re.sub(r"(hydra\.launcher\.\S+?) \([a-z_]+=[^()]*\)", r"\1", message)
