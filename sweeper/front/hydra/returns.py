"""What Hydra's sweeper gets back for each job, and the check that a job kept from an
earlier run still is the job asked for.

* an ``ok`` job: the ``JobReturn`` its process kept (:func:`sweeper.front.hydra.task.keep`):
  its return value itself, its configs, its working directory;
* any other: ``FAILED``, its value a :class:`JobFailed` saying in one line how the job
  ended and where its log is (Hydra's basic sweeper raises it when it reads the value);
* a job ``ok`` on record is kept only if the config it ran with (its digest, noted in its
  process before the task function ran) is the config it composes to now; else the
  multirun is refused, in one line, before any job runs. The app's code it ran is noted
  too (:func:`made_with`): a job kept that other code made is said. Composing costs Hydra
  a tenth of a second a job, so a job is composed again only where what composing reads
  (the config files, the config store, the multirun's own config: :func:`sources_digest`)
  changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
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


def check_kept(jobs: Iterable[Job], rows: Mapping[str, TrialResult], folder: str, compose: Any,
               sources: str | None) -> None:
    """Refuse, in one line, a job ``ok`` on record whose config is not the one it composes to
    now (``compose(job)``: its config): a default edited in a config file, a group's option
    file, an interpolation's text. Its row would stand for another job. A job that ran with
    the same ``sources`` composes to the same config: it is not composed again."""
    for job in jobs:
        row = rows.get(job.key)
        if row is None or not row.ok:
            continue
        path = hydra_return_file(SweepPaths(folder).trial(row.name))
        try:
            kept = _load(path)
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable file: the row cannot be checked
            digest, said = None, f"its return ({path}) cannot be read: {exc}"
        else:
            if sources is not None and kept.get("sources") == sources:
                continue
            digest = kept.get("digest")
            said = "its config changed since it ran ok (a config file, a default, a group's option)"
        if digest is not None and digest == config_digest(compose(job)):
            continue
        raise SweepError(f"job #{row.name} ({' '.join(job.overrides)}) is on record in {folder}, but {said}, so its "
                         "row cannot stand for it; give this multirun another hydra.sweep.dir, or "
                         "hydra.launcher.fresh=true")


def made_with(jobs: Iterable[Job], rows: Mapping[str, TrialResult], folder: str) -> list[tuple[str, dict[str, str]]]:
    """Each job ``ok`` on record (its number) with the app's code it ran (the digests its process
    noted, :mod:`sweeper.front.hydra.appcode`); a job whose return notes none is left out."""
    out = []
    for job in jobs:
        row = rows.get(job.key)
        if row is None or not row.ok:
            continue
        try:
            code = _load(hydra_return_file(SweepPaths(folder).trial(row.name))).get("code")
        except Exception:  # noqa: BLE001 - unreadable: check_kept has refused it already
            continue
        if isinstance(code, dict):
            out.append((row.name, code))
    return out


def sources_digest(config_loader: Any, config: Any, sweep_folder: str) -> str | None:
    """What composing a job's config reads besides its overrides, as one digest: every YAML
    file of the config search path, the config store's nodes (structured configs), and the
    multirun's own config (without ``hydra``). None where a search path cannot be read. The
    sweep folder is left out where it lies in a search path (an app whose configs are its own
    folder): its jobs' ``.hydra/`` files are what the jobs wrote, no config of theirs."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    h = hashlib.sha256()
    for element in config_loader.get_search_path().get_path():
        folder = _folder_of(element.path)
        if folder is None:
            return None
        for here, dirs, files in os.walk(folder) if folder else ():
            dirs[:] = sorted(d for d in dirs if os.path.abspath(os.path.join(here, d)) != sweep_folder)
            for name in sorted(f for f in files if f.endswith((".yaml", ".yml"))):
                with open(os.path.join(here, name), "rb") as f:
                    h.update(os.path.relpath(os.path.join(here, name), folder).encode() + b"\0" + f.read())
    todo: list[tuple[str, Any]] = [("", ConfigStore.instance().repo)]
    while todo:
        where, node = todo.pop()
        if isinstance(node, dict):
            todo.extend((f"{where}/{k}", v) for k, v in sorted(node.items(), reverse=True))
        else:
            h.update(f"{where}:{getattr(node, 'package', None)}:".encode())
            h.update(OmegaConf.to_yaml(node.node).encode())
    own = OmegaConf.to_container(config, resolve=False)
    assert isinstance(own, dict)
    own.pop("hydra", None)
    h.update(json.dumps(own, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


def _folder_of(path: str) -> str | None:
    """A search path's folder ("": nothing to read, the config store's); None: unknown."""
    if path.startswith("file://"):
        return path[len("file://"):]
    if "://" not in path:  # the app's own config folder, as Hydra keeps it
        return path if os.path.isdir(path) else None
    if path.startswith("structured://"):
        return ""
    if path.startswith("pkg://"):
        try:
            spec = importlib.util.find_spec(path[len("pkg://"):].strip("/").replace("/", "."))
        except (ImportError, ValueError):
            return None
        places = list(spec.submodule_search_locations or []) if spec is not None else []
        return places[0] if places else None
    return None
