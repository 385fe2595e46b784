"""What Hydra's sweeper gets back for each job, and the check that a job kept from an
earlier run still is the job asked for.

* an ``ok`` job: the ``JobReturn`` its process kept (:func:`sweeper.front.hydra.task.keep`):
  its return value itself, its configs, its working directory;
* any other: ``FAILED``, its value a :class:`JobFailed` saying in one line how the job
  ended and where its log is (Hydra's basic sweeper raises it when it reads the value);
* a job ``ok`` on record is kept only if the config it ran with (its digest, noted in its
  process before the task function ran) is the config it composes to now; else the
  multirun is refused, in one line, before any job runs.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from hydra.errors import CompactHydraException

from sweeper.errors import SweepError
from sweeper.front.hydra.jobs import Job
from sweeper.front.hydra.task import config_digest
from sweeper.model.trial import TrialResult
from sweeper.store.paths import SweepPaths, hydra_return_file

if TYPE_CHECKING:
    from hydra.core.utils import JobReturn


class JobFailed(CompactHydraException):
    """A job that did not end ok: what Hydra's sweeper raises when it reads its return value
    (one line: how it ended, and where its log is)."""


def job_return(job: Job, row: TrialResult | None, folder: str, task_name: str) -> JobReturn:
    """The ``JobReturn`` of one job, from its row (None: it never ran)."""
    from hydra.core.utils import JobReturn, JobStatus

    said = f"job #{row.name if row is not None else job.num} ({' '.join(job.overrides)})"
    if row is not None and row.ok:
        path = hydra_return_file(SweepPaths(folder).trial(row.name))
        try:
            return returned(path)
        except Exception as exc:  # noqa: BLE001 - missing, or a value that does not unpickle here
            why = f"{said} ended ok, but its return value cannot be read ({path}: {exc})"
    elif row is None:
        why = f"{said} did not run (the sweep stopped before it)"
    else:
        where = f"; its log: {row.log}" if row.log and os.path.exists(row.log) else ""
        why = f"{said} ended {row.status.value}: {row.error}{where}"
    return JobReturn(overrides=list(job.overrides), status=JobStatus.FAILED, _return_value=JobFailed(why),
                     task_name=task_name)


def returned(path: str) -> JobReturn:
    """An ok job's return, as its process kept it. A value of the app script's own classes
    was pickled there as ``__mp_main__``'s; here the script is ``__main__``."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    kept = _load(path)
    return JobReturn(overrides=kept["overrides"], cfg=OmegaConf.create(kept["cfg"]),
                     hydra_cfg=OmegaConf.create(kept["hydra_cfg"]), working_dir=kept["working_dir"],
                     task_name=kept["task_name"], status=JobStatus.COMPLETED, _return_value=kept["return_value"])


def _load(path: str) -> dict[str, Any]:
    aliased = "__mp_main__" not in sys.modules and "__main__" in sys.modules
    if aliased:
        sys.modules["__mp_main__"] = sys.modules["__main__"]
    try:
        with open(path, "rb") as f:
            kept: dict[str, Any] = pickle.load(f)
        return kept
    finally:
        if aliased:
            sys.modules.pop("__mp_main__", None)


def check_kept(jobs: Iterable[Job], rows: Mapping[str, TrialResult], folder: str, compose: Any) -> None:
    """Refuse, in one line, a job ``ok`` on record whose config is not the one it composes to
    now (``compose(job)``: its config): a default edited in a config file, a group's option
    file, an interpolation's text. Its row would stand for another job."""
    for job in jobs:
        row = rows.get(job.key)
        if row is None or not row.ok:
            continue
        path = hydra_return_file(SweepPaths(folder).trial(row.name))
        try:
            digest = _load(path).get("digest")
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable file: the row cannot be checked
            digest, said = None, f"its return ({path}) cannot be read: {exc}"
        else:
            said = "its config changed since it ran ok (a config file, a default, a group's option)"
        if digest is not None and digest == config_digest(compose(job)):
            continue
        raise SweepError(f"job #{row.name} ({' '.join(job.overrides)}) is on record in {folder}, but {said}, so its "
                         "row cannot stand for it; give this multirun another hydra.sweep.dir, or "
                         "hydra.launcher.fresh=true")
