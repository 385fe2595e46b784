"""The knobs of a sweep, checked once, whether they come from code, a grid file or flags."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .errors import SweepError
from .capping import MemoryPolicy, resolve
from .metrics import direction
from .slots import parse_gpus

if TYPE_CHECKING:  # Optuna is imported only by a search, in the function that runs it
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler


@dataclass(frozen=True)
class Options:
    """Every ``sweep()`` keyword. The CLI's flags and a grid file's ``options`` map onto these."""

    name: str | None = None  #: sweep folder name under ``out`` (default: the module's stem)
    out: str = "results"  #: where sweep folders go
    workers: int | None = None  #: trials at once (default: GPU slots, else the CPU count)
    seed: int = 0  #: the sweep's seed; each trial's seed derives from it and the trial id
    timeout: float | None = None  #: seconds a trial may run before it is killed
    retries: int = 0  #: extra attempts for trials that crash, run out of memory or time out
    gpus: str | int | Sequence[int | str] | None = None  #: "all" (default), "none", or ids such as [0, 2] or "0,2"
    per_gpu: int | None = None  #: trials sharing one GPU (default: 1, or int(1 / memory_fraction))
    memory_fraction: float | None = None  #: cap per trial, share of the card (default: 0.95 / per_gpu)
    memory_growth: bool = False  #: let each trial's memory grow instead of capping it
    fresh: bool = False  #: start a new ledger (the old one is kept, renamed)
    skip_failed: bool = False  #: keep failed trials' rows instead of running them again
    dry_run: bool = False  #: build the plan and run nothing
    metric: str | None = None  #: metric that ranks trials (default: the first one)
    mode: str | None = None  #: "max" or "min" (default: from the metric's name, as Keras ranks it)
    progress: bool = True  #: print a line per finished trial
    prefetch: bool = True  #: start each slot's next process ahead, importing train while a trial runs
    start_method: str = "forkserver"  #: "forkserver" (trials fork from one process that imported train), or "spawn"
    backend: str = "local"  #: "local", or "ray" (a Ray cluster places the trials)
    address: str | None = None  #: with backend="ray": "auto", "HOST:6379"; None starts a local Ray
    cpus_per_trial: float = 1.0  #: with backend="ray": CPUs each trial asks Ray for
    search: str | BaseSampler | None = None  #: "tpe", "random", "cmaes", "qmc", "gp" or an Optuna sampler: grid is then a space
    trials: int | None = None  #: with search: how many trials in all (a re-run resumes to this count)
    prune: str | BasePruner | None = None  #: with search: "median", "asha", "hyperband" or an Optuna pruner; None prunes nothing
    tensorboard: bool = False  #: show the sweep in TensorBoard (HParams, scalars): <out>/<name>/tensorboard
    mlflow: bool | str | None = None  #: True (a local store in the sweep folder) or a tracking URI: a run per trial

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

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

    def merged(self, **overrides: Any) -> "Options":
        return replace(self, **{k: v for k, v in overrides.items() if v is not None}).checked()

    def checked(self) -> "Options":
        def whole(name: str, value: Any, low: int) -> None:
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise SweepError(f"{name} must be a whole number >= {low}, got {value!r}")

        whole("workers", self.workers, 1)
        whole("retries", self.retries, 0)
        whole("per_gpu", self.per_gpu, 1)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise SweepError(f"seed must be a whole number, got {self.seed!r}")
        if self.timeout is not None and (not isinstance(self.timeout, (int, float)) or self.timeout <= 0):
            raise SweepError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.backend not in ("local", "ray"):
            raise SweepError(f"backend must be 'local' or 'ray', got {self.backend!r}")
        if self.address is not None and self.backend != "ray":
            raise SweepError("address goes with backend='ray' (--backend ray --address auto)")
        if not isinstance(self.cpus_per_trial, (int, float)) or self.cpus_per_trial <= 0:
            raise SweepError(f"cpus_per_trial must be a positive number, got {self.cpus_per_trial!r}")
        if self.start_method not in ("spawn", "forkserver"):
            raise SweepError(f"start_method must be 'spawn' or 'forkserver', got {self.start_method!r}")
        if self.mode not in (None, "max", "min"):
            raise SweepError(f"mode must be 'max' or 'min', got {self.mode!r}")
        if self.name is not None and (not self.name or "/" in self.name or self.name in (".", "..")):
            raise SweepError(f"name {self.name!r} cannot be a folder name; use letters, digits, - and _")
        whole("trials", self.trials, 1)
        if not isinstance(self.tensorboard, bool):
            raise SweepError(f"tensorboard must be True or False, got {self.tensorboard!r}")
        if not (self.mlflow is None or isinstance(self.mlflow, bool) or (isinstance(self.mlflow, str) and self.mlflow)):
            raise SweepError(f"mlflow must be True (a local store in the sweep folder) or a tracking URI such as "
                             f"'http://localhost:5000', got {self.mlflow!r}")
        parse_gpus(self.gpus)
        self.memory_policy()
        return self

    def check_ranking(self) -> None:
        """A named metric whose direction its name does not say needs a mode; trials and
        prune need a search. Checked on the options a sweep runs with (flags, file and code
        merged), before anything runs."""
        if self.search is None and (self.trials is not None or self.prune is not None):
            raise SweepError("trials and prune go with a search; add search='tpe' (--search tpe), or use "
                             "sample(space, n) for a random sample")
        if self.metric is not None and self.mode is None and direction(self.metric) is None:
            from .analysis import unknown_direction

            raise unknown_direction(self.metric)

    def memory_policy(self) -> MemoryPolicy:
        return resolve(self.per_gpu, self.memory_fraction, bool(self.memory_growth))
