"""The launcher's settings (``hydra.launcher.*``): sweeper's options, under their own names,
with sweeper's defaults, checked as ``sweep()`` checks its keywords.

Every option of :class:`~sweeper.model.options.Options` is a setting, and every field of a
backend's options group (Ray's ``address``, ``cpus_per_trial``; Slurm's ``slurm``), but
those a Hydra multirun decides itself (:data:`LEFT_TO_HYDRA`): the sweep folder is
``hydra.sweep.dir``, and which jobs run is Hydra's sweeper's choice.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, fields
from typing import Any, Mapping

from sweeper.errors import SweepError
from sweeper.model.options import Options

#: Options a Hydra multirun decides, and what decides each instead.
LEFT_TO_HYDRA = {
    "name": "the sweep folder is hydra.sweep.dir",
    "out": "the sweep folder is hydra.sweep.dir",
    "search": "Hydra's sweeper chooses the jobs (for sweeper's own search: python -m sweeper grid.py --search tpe)",
    "trials": "Hydra's sweeper chooses the jobs",
    "prune": "Hydra's sweeper chooses the jobs (pruning is sweeper's search's: python -m sweeper --prune)",
    "pbt": "population-based training is sweeper's own search (python -m sweeper --search pbt)",
    "dry_run": "Hydra's own --cfg job shows a job's config without running it",
    "backend_options": "give the backend's settings by their names (hydra.launcher.address=auto)",
}


def defaults() -> dict[str, Any]:
    """Each setting and its default: sweeper's; a backend's own settings None (that backend's
    default, when it is chosen)."""
    from sweeper.backends import registry

    out: dict[str, Any] = {f.name: None if f.default is MISSING else f.default
                           for f in fields(Options) if f.name not in LEFT_TO_HYDRA}
    for name in registry.names():
        group = registry.lookup(name).options
        for f in fields(group) if group is not None else ():
            out.setdefault(f.name, None)
    return out


def options(settings: Mapping[str, Any], sweep_dir: str) -> Options:
    """The sweep's options from the launcher's settings (plain data), checked: one line for a
    mistake, before any job runs. The sweep folder is ``sweep_dir``."""
    from sweeper.backends import registry

    given = {k: v for k, v in settings.items() if k != "_target_"}
    for key, value in given.items():
        if key in LEFT_TO_HYDRA and value is not None:
            raise SweepError(f"hydra.launcher.{key} is not a setting of sweeper's launcher: {LEFT_TO_HYDRA[key]}")
    # a backend's own settings only where given (another backend's None is no mistake); a name
    # neither sweeper's nor a backend's: refused by the registry, with the nearest known one
    chosen = {k: v for k, v in given.items() if not (v is None and k not in Options.names())}
    folder = os.path.abspath(sweep_dir)
    chosen.update(out=os.path.dirname(folder), name=os.path.basename(folder))
    try:
        return registry.options(chosen, where="hydra.launcher")
    except SweepError as exc:
        raise SweepError(f"hydra.launcher: {exc}") from None
