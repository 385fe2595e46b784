"""The knobs of a sweep, checked once, whether they come from code, a grid file or flags."""

from __future__ import annotations

import difflib
from dataclasses import Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from sweeper.errors import SweepError
from sweeper.model.metrics import direction, nearest_known, unknown_direction
from sweeper.model.objectives import Objectives
from sweeper.model.objectives import given as objectives_given
from sweeper.model.flags import Flag, count_or_auto, duration_flag, words, flag  # noqa: F401 (Flag, flag: by name here too)
from sweeper.model.units import duration, megabytes  # noqa: F401 (megabytes: read by name from here too)

if TYPE_CHECKING:  # Optuna is imported only by a search, in the function that runs it
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler


#: The docs' section on packing by measured memory, which several flags' texts link to.
_PACKING = "gpus.md#packing-by-measured-memory---per-gpu-auto"


@dataclass(frozen=True)
class Options:
    """Every ``sweep()`` keyword but a backend's own (those are its options group's fields,
    kept in :attr:`backend_options`: :func:`sweeper.backends.registry.options` builds both). The
    CLI's flags and a grid file's ``options`` map onto these; a field's ``metadata["flag"]`` (a
    :class:`~sweeper.model.flags.Flag`) is its flag, help, type and choices, and its help is what
    it means (a ``#:`` comment adds only what code may give beyond the flag: a list, a function,
    an Optuna object). What users type stays here; a sweep runs by these parsed once into typed
    groups (:mod:`sweeper.model.settings`). docs/options.md says each in full.

    Args:
        name: the sweep's folder under ``out``.
        out: where sweep folders go.
        workers: trials at once, or ``"auto"``.
        host_memory: the most host memory the trials may take at once (``"3GB"``).
        seed: the sweep's seed.
        deterministic: each framework's deterministic mode in every trial.
        timeout: kill a trial after this long (seconds, ``"10m"``).
        stall: stop a trial silent this long.
        retries: runs again of a trial that crashed, ran out of memory, timed out or stalled.
        gpus: which GPUs (``"all"``, ``"none"``, ``"free"``, ids).
        per_gpu: trials sharing a GPU, or ``"auto"``.
        memory_keys: the parameters that decide a trial's memory.
        gpu_memory: what a trial needs on its card (``"6GB"``, or a function of the point).
        memory_fraction: each trial's cap, as a share of its GPU's memory.
        memory_growth: GPU memory grows instead of a cap.
        fresh: a new ledger (the old one kept, renamed).
        skip_failed: failed trials' rows kept, not run again.
        fail_fast: stop the sweep at the first failed trial.
        max_failures: stop it once this many in a row failed the same way.
        dry_run: say what would run; run nothing.
        metric: the metric that ranks trials, or several (objectives).
        mode: ``"max"`` or ``"min"``, one per metric.
        progress: a line per finished trial.
        prefetch: each slot's next trial process started ahead.
        start_method: ``"forkserver"`` or ``"spawn"``.
        backend: ``"local"``, ``"ray"``, ``"slurm"`` or one registered by name.
        backend_options: the backend's own options group (built from its keywords).
        search: an adaptive search (``"tpe"``, ``"pbt"``, ... or an Optuna sampler).
        trials: a search's trials in all.
        prune: a search's pruner (``"asha"``, ... or an Optuna pruner).
        pbt: population-based training's settings.
        constraints: bounds a trial must meet to be ranked.
        tensorboard: the sweep in TensorBoard's HParams dashboard.
        mlflow: an MLflow run per trial (True, or a tracking URI).
        optuna: the sweep as an Optuna study (True, or a storage URL).

    Raises:
        SweepError: from :meth:`build` and :meth:`checked`, for an unknown name or a bad value,
            in one line naming the fix.

    Example:
        >>> from sweeper import Options
        >>> Options.build({"gpus": "0,2", "timeout": "10m", "metric": "val_accuracy"}).timeout
        600.0
        >>> Options.build({"retries": -1})
        Traceback (most recent call last):
        ...
        sweeper.errors.SweepError: retries must be a whole number >= 0, got -1
    """

    #: sweep folder name under ``out`` (default: the module's stem)
    name: str | None = field(default=None, metadata=flag(
        "the sweep's folder, `<out>/<NAME>/` (default: the grid file's stem; with `--command`, the script's: "
        "`train` for `python train.py ...`)"))
    out: str = field(default="results", metadata=flag("where sweep folders go (default `{default}`)",
                                                      metavar="DIR"))
    #: trials at once (default: GPU slots, else the CPU count); "auto": as many as measured
    #: idle cores and host memory allow (:class:`sweeper.placement.hostroom.HostRoom`)
    workers: int | str | None = field(default=None, metadata=flag(
        "trials at once (default: the GPU slots, or the CPU count without GPUs; with `--backend slurm`, 32); "
        "`auto`: as many as measured idle cores and the host memory each is predicted to need allow (see "
        "[packing](" + _PACKING + "))",
        type=count_or_auto, metavar="N|auto"))
    host_memory: str | int | None = field(default=None, metadata=flag(
        "the most host memory the trials may take at once, such as `3GB`: each is predicted from measured peaks "
        "(`mem_peak_mb`) and starts while it fits (see [packing](" + _PACKING + "))", metavar="SIZE"))
    seed: int = field(default=0, metadata=flag(
        "the sweep's seed (default `{default}`); each trial's seed derives from it and the trial's id", type=int,
        metavar="N"))
    #: each framework's deterministic mode in every trial (TensorFlow's op determinism,
    #: PyTorch's deterministic algorithms, cuDNN's, cuBLAS's and XLA's settings), so that
    #: ``python -m sweeper replay`` can give the same numbers again
    deterministic: bool = field(default=False, metadata=flag(
        "turn on each framework's deterministic mode in every trial (TensorFlow, PyTorch, cuDNN, cuBLAS, XLA), so "
        "that `replay` gives the same numbers; slower on a GPU. Rows gain `deterministic` (see [replay](replay.md))",
        action="store_true"))
    timeout: float | None = field(default=None, metadata=flag(
        "kill a trial (and everything it started) after this long: seconds, or `90s`, `10m`, `2h`, `1d`",
        type=duration_flag, metavar="DURATION"))
    stall: float | None = field(default=None, metadata=flag(
        "stop a trial (and everything it started) that neither reports an epoch nor writes to its log for this "
        "long, as status `stalled`: seconds, or `90s`, `10m`, `2h`. It catches a hung data loader or a deadlocked "
        "collective, apart from `--timeout`", type=duration_flag, metavar="DURATION"))
    retries: int = field(default=0, metadata=flag(
        "run a trial that crashed, ran out of memory, timed out or stalled up to N more times (default "
        "`{default}`)", type=int, metavar="N"))
    #: "all" (default), "none", or ids such as [0, 2] or "0,2"
    gpus: str | int | Sequence[int | str] | None = field(default=None, metadata=flag(
        "which GPUs: `all` (default), `none`, `free` (those no process uses now), or GPUs by index or UUID, such "
        "as `0,2` or `GPU-5f3c...` (see [GPUs](gpus.md)). Ids where no GPU can be found are refused (`all` falls "
        "back to the CPU and says so)"))
    #: trials sharing one GPU (default: 1, or int(1 / memory_fraction)); "auto": as many as
    #: the memory they measurably need allows (:mod:`sweeper.placement.packing`)
    per_gpu: int | str | None = field(default=None, metadata=flag(
        "trials sharing one GPU (default 1); `auto`: as many as fit by the memory each is predicted to need, "
        "measured as the sweep runs (see [GPUs](gpus.md) and [packing](" + _PACKING + "))", type=count_or_auto,
        metavar="N|auto"))
    #: with per_gpu="auto": parameters that decide a trial's GPU memory (points that agree on
    #: them are predicted to need what the first of them measured)
    memory_keys: Sequence[str] | None = field(default=None, metadata=flag(
        "with `--per-gpu auto` (also with `--workers auto` or `--host-memory`): the parameters that decide a "
        "trial's memory, such as `units,batch_size` (see [packing](" + _PACKING + "))", type=words,
        metavar="KEYS"))
    #: with per_gpu="auto": what each trial needs on its card ("6GB"), or a function of the
    #: point giving it; taken as the prediction until a measurement says more
    gpu_memory: str | int | Callable[[dict[str, Any]], Any] | None = field(default=None, metadata=flag(
        "with `--per-gpu auto`: what each trial needs on its card, such as `6GB`, a first guess until one is "
        "measured (see [packing](" + _PACKING + "))", metavar="SIZE"))
    memory_fraction: float | None = field(default=None, metadata=flag(
        "cap each trial at this share of its GPU's memory (default `0.95 / per-gpu`) (see [GPUs](gpus.md))",
        type=float, metavar="F"))
    memory_growth: bool = field(default=False, metadata=flag(
        "let each trial's GPU memory grow instead of capping it (see [GPUs](gpus.md))", action="store_true"))
    fresh: bool = field(default=False, metadata=flag(
        "start a new ledger (the old one is kept, renamed with a time stamp)", action="store_true"))
    skip_failed: bool = field(default=False, metadata=flag(
        "keep failed trials' rows instead of running them again", action="store_true"))
    fail_fast: bool = field(default=False, metadata=flag(
        "stop the sweep at the first trial that fails (`crashed`, `error`, `oom`, `timeout` or `stalled`, after "
        "its retries): no new trials start, running ones are stopped as `interrupted`. It is said in one line, "
        "the exit code is 1, and the same command run again resumes", action="store_true"))
    max_failures: int | None = field(default=None, metadata=flag(
        "stop the sweep as `--fail-fast` does, but once N trials in a row failed the same way (the same status "
        "and error line)", type=int, metavar="N"))
    dry_run: bool = field(default=False, metadata=flag(
        "print the GPUs, slots, caps and every trial with where it would start (`kept` for a finished trial a "
        "resume keeps); run nothing. A folder another sweep is running in is refused, as the sweep would be",
        action="store_true"))
    #: metric that ranks trials (default: :func:`sweeper.model.metrics.default_metric`, val_loss first);
    #: several (["val_accuracy", "params"]): objectives optimised at once, their Pareto front
    #: marked (:mod:`sweeper.model.objectives`)
    metric: str | Sequence[str] | None = field(default=None, metadata=flag(
        "the metric that ranks trials, or several, comma-separated, optimised at once (default: a validation "
        "metric where there is one, so a Keras `History` ranks by `val_loss`, else the first metric; the summary "
        "says which it picked, which way and why; one whose name does not say which way is better, `value`, "
        "ranks no trial, and none is called best, until `--mode` is given). A named metric the first ok trial did not return stops the "
        "sweep there (running trials `interrupted`, rows kept; exit 2, `SweepError` from `sweep()`), in one line "
        "naming what that trial returned and the nearest name. The metric and mode are recorded in the sweep "
        "folder: `status`, `report` and `load()` (`df.attrs`) use them. Trials with a NaN metric rank last, and "
        "the summary counts them. Several metrics, `--metric val_accuracy,params --mode max,min` "
        "(`metric=[\"val_accuracy\", \"params\"], mode=[\"max\", \"min\"]`), are objectives: rows on their Pareto "
        "front are marked in a column `pareto` (see [several objectives](search.md#several-objectives)); the "
        "first still ranks the leaderboard; a list takes names as they are (`metric=[\"a,b\"]` is one metric, "
        "`a,b`)", metavar="METRIC[,METRIC...]"))
    #: "max" or "min", one per metric (default: from the metric's name where sweeper knows it,
    #: :func:`sweeper.model.metrics.direction`; any other name needs it)
    mode: str | Sequence[str] | None = field(default=None, metadata=flag(
        "`max` or `min`, one per metric (`max,min`) (default: from the metric's name where it is one sweeper "
        "knows: `loss`, `mse`, `mae`, ... min; `accuracy`, `auc`, `f1`, `r2`, `neg_mean_squared_error`, ... max; "
        "any other named metric needs `--mode`, said in one line, exit 2, before anything runs; one picked ranks "
        "nothing until it is given; see [metric names "
        "sweeper knows](#metric-names-sweeper-knows)). A name close to a known one is taken for a typo unless "
        "`--mode` is given (`--metric val_los: did you mean val_loss?`)", metavar="MODE[,MODE...]"))
    progress: bool = True  #: print a line per finished trial
    #: start each slot's next process ahead, importing train while a trial runs
    prefetch: bool = field(default=True, metadata=flag(
        "do not start each slot's next trial process ahead of time (see [performance](performance.md))",
        name="--no-prefetch", action="store_false"))
    #: "forkserver" (trials fork from one process that imported what train needs), or "spawn"
    start_method: str = field(default="forkserver", metadata=flag(
        "(default `{default}`) `forkserver`: each trial is a fresh fork of one process that imported the "
        "installed libraries the grid file uses (TensorFlow, Keras, NumPy, ...) once, and runs the grid file "
        "itself; `spawn`: a fresh interpreter per trial (see [performance](performance.md))",
        choices=("forkserver", "spawn")))
    #: "local", "ray" (a Ray cluster places the trials), "slurm" (Slurm does), or a backend registered by name
    #: (:mod:`sweeper.backends.registry`)
    backend: str = field(default="local", metadata=flag(
        "(default `{default}`) `local`, `ray`: trials as Ray tasks on a cluster, `slurm`: trials as Slurm jobs, or "
        "the name of a backend an installed package registers (see [Ray](ray.md), [Slurm](slurm.md) and "
        "[backends](backends.md))"))
    #: the backend's own settings (its options group, such as Ray's ``address`` and
    #: ``cpus_per_trial``: :class:`sweeper.backends.ray_options.RayOptions`), built from the
    #: keywords that name its fields (:func:`sweeper.backends.registry.options`); None: it has none
    backend_options: Any = None
    #: "auto" (TPE; NSGA-II for several metrics), "tpe", "nsga2", "random", "cmaes", "qmc",
    #: "gp" or an Optuna sampler: grid is then a space
    search: str | BaseSampler | None = field(default=None, metadata=flag(
        "search the grid file's `space` adaptively with Optuna: `auto` (`tpe`; `nsga2` for several metrics), "
        "`tpe`, `nsga2`, `random`, `cmaes`, `qmc` or `gp` (see [search](search.md)); or `pbt`: population-based "
        "training (see [population-based training](pbt.md))"))
    trials: int | None = field(default=None, metadata=flag(
        "with `--search`: how many trials in all, which a re-run resumes to (see [search](search.md))", type=int,
        metavar="N"))
    #: with search: "median", "percentile", "asha", "hyperband", "patient", "wilcoxon", each
    #: with Optuna's keywords if wanted ("asha(min_resource=2, reduction_factor=3)"), or an
    #: Optuna pruner; None prunes nothing
    prune: str | BasePruner | None = field(default=None, metadata=flag(
        "with `--search`: stop bad trials early: `median`, `percentile`, `asha`, `hyperband`, `patient`, "
        "`wilcoxon` or `none`, with keywords if wanted: `'asha(min_resource=2, reduction_factor=3)'`; "
        "`\"asha(min_resource='auto')\"` cuts from the epoch where the search's finished trials show the "
        "ranking settles (see [search](search.md))"))
    #: with search="pbt": population-based training's settings (population, interval,
    #: quantile, resample, factors, synch, burn_in: :mod:`sweeper.search.pbt`), a dict in code,
    #: ``KEY=VALUE`` flags on the command line
    pbt: Any = field(default=None, metadata=flag(
        "with `--search pbt`: a setting of population-based training, as `KEY=VALUE`: `population=8`, "
        "`interval=4` (epochs between decisions), `quantile=0.25`, `resample=0.25`, `factors=1.2,0.8`, "
        "`synch=true`, `burn_in=0`, Ray Tune's names and defaults; once per setting (see "
        "[population-based training](pbt.md))", action="append", metavar="KEY=VALUE"))
    #: bounds a trial's results must meet to be ranked ({"params": ("<=", 1e6)}, the text
    #: "params<=1e6,val_accuracy>=0.9", or a function of the row giving values that must be
    #: <= 0); a search's sampler is told them (:mod:`sweeper.model.constraints`)
    constraints: Any = field(default=None, metadata=flag(
        "bounds a trial must meet to be ranked, such as `'params<=1e6,val_accuracy>=0.9'` (quoted for the shell): rows gain `feasible`, and "
        "a search's sampler is told each trial's values (TPE and GP use them). In code: `constraints={\"params\": "
        "(\"<=\", 1e6)}`, or a function of the row giving values that must be <= 0. An ok trial that does not meet "
        "them (or lacks a value they name) is never ranked best, in the summary, `status`, the report or a "
        "search's own choice; a re-run judges the rows it keeps under its own constraints; a name that is both a "
        "parameter and a metric means the metric (said once), `param_NAME` the parameter"))
    tensorboard: bool = field(default=False, metadata=flag(
        "show the sweep in TensorBoard's HParams dashboard: `tensorboard --logdir <out>/<name>/tensorboard` (see "
        "[TensorBoard and MLflow](trackers.md))", action="store_true"))
    #: True (a local store in the sweep folder) or a tracking URI: a run per trial
    mlflow: bool | str | None = field(default=None, metadata=flag(
        "an MLflow run per trial, nested in one per sweep; `URI`: a server, a database, or a folder (a SQLite "
        "store in it); without `URI`, a local store in `<out>/<name>/mlflow.db`, which needs `sweeper[mlflow]` "
        "(see [TensorBoard and MLflow](trackers.md))", nargs="?", const=True, metavar="URI"))
    optuna: bool | str | None = field(default=None, metadata=flag(
        "the sweep as an Optuna study, kept current as it runs, for `optuna-dashboard`; `URL`: an Optuna storage "
        "(`sqlite:///study.db`) or a journal file (`*.journal`); without `URL`, `<out>/<name>/optuna.journal` (see "
        "[a live Optuna study](trackers.md#a-live-optuna-study))", nargs="?", const=True, metavar="URL"))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def flags(cls) -> list[tuple[Field[Any], Flag]]:
        """The fields the command line gives, in order, each with its :class:`Flag`."""
        return [(f, f.metadata["flag"]) for f in fields(cls) if "flag" in f.metadata]

    @classmethod
    def choices(cls, name: str) -> tuple[str, ...]:
        """The values an option allows (its flag's choices), e.g. ``("max", "min")`` for ``mode``."""
        choices: tuple[str, ...] = cls.__dataclass_fields__[name].metadata["flag"].choices
        return choices

    @classmethod
    def build(cls, values: Mapping[str, Any], where: str = "sweep()") -> "Options":
        """Options from keywords, refusing unknown names with the nearest valid one."""
        known = cls.names()
        for key in values:
            if key not in known:
                near = difflib.get_close_matches(str(key), known, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; valid: {', '.join(known)}"
                raise SweepError(f"unknown option {key!r} in {where}{hint}")
        return cls(**values).checked()

    def checked(self) -> "Options":
        def whole(name: str, value: Any, low: int) -> None:
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise SweepError(f"{name} must be a whole number >= {low}, got {value!r}")

        def one_of(name: str, value: Any) -> None:
            allowed = self.choices(name)
            if value not in allowed:
                said = ", ".join(map(repr, allowed[:-1])) + f" or {allowed[-1]!r}"
                raise SweepError(f"{name} must be {said}, got {value!r}")

        if self.workers != "auto":
            whole("workers", self.workers, 1)
        from sweeper.model import settings

        settings.host_memory_mb(self)
        whole("retries", self.retries, 0)
        whole("max_failures", self.max_failures, 1)
        if not isinstance(self.fail_fast, bool):
            raise SweepError(f"fail_fast must be True or False, got {self.fail_fast!r}")
        if self.per_gpu != "auto" and self.per_gpu is not None and (
                not isinstance(self.per_gpu, int) or isinstance(self.per_gpu, bool) or self.per_gpu < 1):
            raise SweepError(f"per_gpu must be a whole number >= 1 or 'auto', got {self.per_gpu!r}")
        self._check_packing()
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise SweepError(f"seed must be a whole number, got {self.seed!r}")
        for name in ("timeout", "stall"):  # durations (text, ints, NumPy) become float seconds, once
            value = getattr(self, name)
            if value is not None and not (type(value) is float and 0 < value < float("inf")):  # noqa: E721
                seconds: Any = duration(value, name)
                return replace(self, **{name: seconds}).checked()
        if not isinstance(self.backend, str) or not self.backend:
            raise SweepError(f"backend must be a backend's name ('local', 'ray', ...), got {self.backend!r}")
        one_of("start_method", self.start_method)
        metrics, modes = objectives_given(self.metric, self.mode)
        plain = (metrics if metrics is None or len(metrics) > 1 or "," in metrics[0] else metrics[0],
                 modes if modes is None or len(modes) > 1 else modes[0])
        if (self.metric, self.mode) != plain:  # one name as text (unless a comma in it), several as a tuple
            return replace(self, metric=plain[0], mode=plain[1]).checked()
        if self.name is not None and (not self.name or "/" in self.name or self.name in (".", "..")):
            raise SweepError(f"name {self.name!r} cannot be a folder name; use letters, digits, - and _")
        whole("trials", self.trials, 1)
        if not isinstance(self.deterministic, bool):
            raise SweepError(f"deterministic must be True or False, got {self.deterministic!r}")
        if not isinstance(self.tensorboard, bool):
            raise SweepError(f"tensorboard must be True or False, got {self.tensorboard!r}")
        if not (self.mlflow is None or isinstance(self.mlflow, bool) or (isinstance(self.mlflow, str) and self.mlflow)):
            raise SweepError(f"mlflow must be True (a local store in the sweep folder) or a tracking URI such as "
                             f"'http://localhost:5000', got {self.mlflow!r}")
        settings.check(self)  # the GPUs, the memory policy, the constraints: parsed as a sweep will
        return self

    def _check_packing(self) -> None:
        """``memory_keys`` and ``gpu_memory`` say how to pack, so they go with what packs."""
        cluster = {"ray": "Ray", "slurm": "Slurm"}.get(self.backend)
        for name in ("per_gpu", "workers"):
            if getattr(self, name) == "auto" and cluster:
                raise SweepError(f"{name}='auto' packs trials on this machine by memory; {cluster} places its own: "
                                 f"give --{name.replace('_', '-')} N with --backend {self.backend}")
        if self.host_memory is not None and cluster:
            raise SweepError(f"host_memory budgets this machine's memory; {cluster} places trials on its nodes by "
                             f"their resources: drop --host-memory with --backend {self.backend}")
        if self.gpu_memory is not None and self.per_gpu != "auto":
            raise SweepError("gpu_memory goes with per_gpu='auto' (--per-gpu auto), which packs trials by the "
                             "memory they need")
        packs = self.per_gpu == "auto" or self.workers == "auto" or self.host_memory is not None
        if self.memory_keys is not None and not packs:
            raise SweepError("memory_keys goes with per_gpu='auto', workers='auto' or host_memory, which pack "
                             "trials by the memory they need")
        keys = self.memory_keys
        if keys is not None and (isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys)):
            raise SweepError(f"memory_keys must be a list of parameter names such as ['units', 'batch_size'], "
                             f"got {keys!r}")
        from sweeper.model import settings

        settings.gpu_memory(self)

    def check_ranking(self) -> None:
        """A named metric whose direction its name does not say needs a mode; trials and
        prune need a search (a search's own settings go with it, checked by the search's
        registry: :func:`sweeper.search.registry.check_settings`). Checked on the options a
        sweep runs with (flags, file and code merged), before anything runs."""
        if self.search is None and (self.trials is not None or self.prune is not None):
            raise SweepError("trials and prune go with a search; add search='tpe' (--search tpe), or use "
                             "sample(space, n) for a random sample")
        self._check_spelling()
        if self.objectives is None and self.ranked_by is not None and self.mode is None \
                and direction(self.ranked_by) is None:  # several: each one's direction known, or said
            raise unknown_direction(self.ranked_by)

    def _check_spelling(self) -> None:
        """A named metric whose direction is unknown but whose name is close to one sweeper
        knows (``val_los``) is a typo until the user says otherwise, with a mode."""
        if self.mode is not None:  # said: the user's own metric, whatever its name
            return
        for name in objectives_given(self.metric, None)[0] or ():
            near = nearest_known(name) if direction(name) is None else None
            if near is not None:
                how = ("--mode max|min (mode='max' or 'min')" if isinstance(self.metric, str) else
                       "one --mode per metric, max or min (--mode max,min)")
                raise SweepError(f"--metric {name}: did you mean {near}? if {name} is a metric of yours, give {how}")

    @property
    def ranked_by(self) -> str | None:
        """The metric the leaderboard ranks by: the one named, or the first of several."""
        return self.metric if self.metric is None or isinstance(self.metric, str) else self.metric[0]

    @property
    def ranked_mode(self) -> str | None:
        """The mode given for :attr:`ranked_by` (None: from its name)."""
        return self.mode if self.mode is None or isinstance(self.mode, str) else self.mode[0]

    @property
    def objectives(self) -> Objectives | None:
        """Several metrics optimised at once, each with its direction; None for one."""
        return Objectives.of(self.metric, self.mode)

    @property
    def failure_limit(self) -> int | None:
        """After how many trials in a row failing the same way the sweep stops (fail_fast: 1,
        whatever max_failures says), or None."""
        return 1 if self.fail_fast else self.max_failures

    @property
    def worker_count(self) -> int | None:
        """``workers`` as a count (None: the default, or ``"auto"``, decided as trials run)."""
        return None if self.workers == "auto" else self.workers  # type: ignore[return-value]
