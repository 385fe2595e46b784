"""A Hydra job in a trial's process: its config composed and its task function run as
Hydra's launchers run one (``hydra.core.utils.run_job``).

:class:`HydraTask` is the ``train`` of a Hydra multirun's sweep: pickled by the launcher
(by reference, a few names; a task function no name finds, by value:
:mod:`sweeper.front.hydra.sending`), called with the job's point in a fresh trial process,
which sweeper has pinned to its GPU, capped and seeded. There it

1. imports the app's module (a script is loaded as ``__main__``, as spawn loads it) and finds
   the task function under ``@hydra.main`` (or loads the one sent by value);
2. loads the context the launcher left (its own file) (:mod:`sweeper.front.hydra.launcher`): Hydra's
   context, the multirun's config, its singletons (the config store; plain pickle) and
   OmegaConf's resolvers (cloudpickle, as Hydra's joblib launcher sends them);
3. composes the job's config from its overrides (the book has them,
   :mod:`sweeper.front.hydra.jobs`), numbers it (its trial's name), notes its digest, and
   calls ``run_job`` in Hydra's working directory: Hydra's job folder,
   ``.hydra/`` files, logging, callbacks and return value, exactly as the basic launcher's;
4. keeps the job's return (and its config's digest, and the app's code it ran) in the
   trial's folder for the launcher, raises what the task function raised (the trial is
   ``error``), and returns its value as metrics.
"""

from __future__ import annotations

import importlib
import numbers
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from sweeper.front.hydra.sending import named
from sweeper.model.metrics import BadResult, normalise
from sweeper.store.paths import SweepPaths, atomic, hydra_return_file


@dataclass(frozen=True)
class HydraTask:
    """A Hydra app's task function, named so that a fresh process finds it again."""

    module: str  #: the module defining it (``__main__`` for a script)
    qualname: str
    unwrap: int  #: how many ``__wrapped__`` lead from the module's name to it (1 under ``@hydra.main``)
    folder: str  #: the sweep folder (``hydra.sweep.dir``)
    file: str  #: the file defining it: a script is loaded from it where ``__main__`` is another's (Ray's worker)
    context: str  #: the multirun's context file (its own: another multirun never changes it)
    cwd: str  #: Hydra's working directory, where relative paths of its config start
    sources: str  #: what composing read in the launcher (:func:`sweeper.front.hydra.returns.sources_digest`)
    #: the task function itself, pickled by cloudpickle, where no name finds it again (a closure, a
    #: callable object: what Hydra's own test suites launch in-process), as Hydra's joblib launcher sends one
    by_value: bytes = b""
    #: the app's own files and their digests when the multirun launched (:mod:`sweeper.front.hydra.appcode`)
    code: tuple[tuple[str, str], ...] = ()

    def task_function(self) -> Any:
        if self.by_value:
            return pickle.loads(self.by_value)  # cloudpickle's functions load where cloudpickle is installed
        module = sys.modules.get(self.module) or importlib.import_module(self.module)
        if self.file and getattr(module, "__file__", None) != self.file:
            from sweeper.child.loading import load_file

            module = load_file(self.file)  # as __mp_main__, also __main__: its __main__ block does not run
        fn = named(module, self.qualname)
        for _ in range(self.unwrap):
            fn = fn.__wrapped__
        return fn

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.utils import JobStatus, run_job

        from sweeper.child.context import current_trial

        if self.cwd and os.path.isdir(self.cwd):
            os.chdir(self.cwd)
        trial = current_trial()
        task_function = self.task_function()  # first: the context's classes may live in the app's module
        hydra_context, config = self.compose(params, trial.name if trial is not None else "")
        digest = config_digest(config)  # before the task function, which may change its config
        HydraConfig.instance().set_config(config)
        ret = run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        if ret.status is JobStatus.FAILED:
            raise ret._return_value  # the trial is error, with the task function's traceback
        if trial is not None:
            marks = {"digest": digest, "sources": self.sources, "code": dict(self.code)}
            keep(ret, marks, hydra_return_file(trial.dir))
        return metrics_of(ret.return_value)

    def compose(self, params: dict[str, Any], name: str) -> tuple[Any, Any]:
        """Hydra's context and the job's config, numbered: the trial's name is its number (the
        folder sweeper keeps for it), else the book's. The app's module is imported already."""
        from hydra.core.singleton import Singleton
        from hydra.core.utils import setup_globals
        from omegaconf import open_dict

        from sweeper.front.hydra.jobs import Book

        job = Book.job_of(SweepPaths(self.folder), params)
        num = int(name) if name.isdigit() else job.num
        with open(self.context, "rb") as f:
            context = pickle.load(f)
        setup_globals()
        Singleton.set_state({"instances": context["instances"], "omegaconf_resolvers": _resolvers(context)})
        hydra_context = context["hydra_context"]
        config = hydra_context.config_loader.load_sweep_config(context["config"], list(job.overrides))
        with open_dict(config):
            config.hydra.job.id = num
            config.hydra.job.num = num
        return hydra_context, config


def config_digest(config: Any) -> str:
    """A job's config, without ``hydra``, as written (interpolations unresolved): what a row on
    record must have been made with to stand for the job."""
    import hashlib
    import json

    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(config, resolve=False)
    assert isinstance(plain, dict)
    plain.pop("hydra", None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _resolvers(context: dict[str, Any]) -> Any:
    """OmegaConf's resolvers as the launcher's process had them (its app's own among them)."""
    from omegaconf.basecontainer import BaseContainer

    blob = context.get("resolvers")
    if blob is not None:
        try:
            import cloudpickle  # noqa: F401 - what pickled them

            return pickle.loads(blob)
        except Exception as exc:  # noqa: BLE001 - the child's own resolvers (hydra's, the app's import's) remain
            print(f"sweeper: OmegaConf's resolvers of the launcher could not be loaded ({exc}); "
                  "those the app registers when imported are used", file=sys.stderr, flush=True)
    return BaseContainer._resolvers


def keep(ret: Any, marks: dict[str, Any], path: str) -> None:
    """The job's return for the launcher: its value pickled, its configs as YAML (their
    content; Hydra re-imports its plugins in this process, so their config classes are not
    the launcher's). A value pickle refuses is said, and None."""
    from omegaconf import OmegaConf

    kept = {**marks, "overrides": list(ret.overrides), "working_dir": ret.working_dir, "task_name": ret.task_name,
            "cfg": OmegaConf.to_yaml(ret.cfg), "hydra_cfg": OmegaConf.to_yaml(ret.hydra_cfg)}
    try:
        blob = pickle.dumps({**kept, "return_value": ret.return_value})
    except Exception as exc:  # noqa: BLE001 - any value a task function returns
        print(f"sweeper: this job's return value ({type(ret.return_value).__name__}) cannot be pickled ({exc}); "
              "Hydra's sweeper gets None for it", file=sys.stderr, flush=True)
        blob = pickle.dumps({**kept, "return_value": None})
    with atomic(path, binary=True) as f:
        f.write(blob)


def metrics_of(value: Any) -> dict[str, Any]:
    """A task function's return value as a row's metrics: a mapping's numbers; one number as
    ``value``; a list of numbers (a multi-objective sweeper's) as ``value_0``, ``value_1``, ...;
    None, or anything else, as no metric. What is left out is said in the job's log (Hydra's
    sweeper gets the value itself, whatever it is)."""
    if value is None:
        return {}
    if isinstance(value, Mapping) or (hasattr(value, "keys") and hasattr(value, "items")):
        metrics, left = {}, []
        for name, item in value.items():
            try:
                metrics.update(normalise({name: item}))
            except (BadResult, TypeError, ValueError):
                left.append(str(name))
        if left:
            _say(f"the task function's {', '.join(left)}: no metrics (not numbers, or names of the table's own "
                 "columns); Hydra's sweeper gets them")
        return metrics
    if isinstance(value, numbers.Number) or hasattr(value, "item"):
        return {"value": value}
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, numbers.Number) for v in value):
        return {f"value_{i}": v for i, v in enumerate(value)}
    _say(f"the task function returned {type(value).__name__}, no number: no metric (Hydra's sweeper gets it)")
    return {}


def _say(line: str) -> None:
    print(f"sweeper: {line}", file=sys.stderr, flush=True)
