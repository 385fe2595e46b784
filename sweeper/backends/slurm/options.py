"""The Slurm backend's own settings (``backend="slurm"``): its options
group, registered with it, so ``sweep(..., slurm={"partition": "gpu"})``, a grid file's
options and ``--slurm partition=gpu`` reach it and no other backend takes them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.options import flag

#: sbatch options sweeper sets itself for every job: given, they would break its bookkeeping.
OWN = {"array", "output", "error", "job-name", "wrap", "parsable", "chdir", "export"}
#: sbatch options that ask for GPUs: given, sweeper's own ``--gres=gpu:1`` is left out.
_GPU_KEYS = {"gres", "gpus", "gpus-per-task", "gpus-per-node", "gpus-per-socket", "tres-per-task", "G"}
_KEY = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class SlurmOptions:
    """How trials run as Slurm jobs."""

    #: sbatch options for each trial's job: a dict in code, ``KEY=VALUE`` flags on the command line
    slurm: Any = field(default=None, metadata=flag(
        "with `--backend slurm`: an `sbatch` option for every trial's job, as `KEY=VALUE` (`partition=gpu`, "
        "`time=02:00:00`, `mem=16G`, `account=...`, `qos=...`, `constraint=...`); once per option (see "
        "[Slurm](slurm.md))",
        action="append", metavar="KEY=VALUE"))

    def checked(self) -> SlurmOptions:
        given = self.slurm
        if given is None:
            return replace(self, slurm={})
        if isinstance(given, (list, tuple)):
            pairs = {}
            for item in given:
                key, eq, value = str(item).partition("=")
                if not eq or not key:
                    raise SweepError(f"--slurm takes KEY=VALUE (an sbatch option), got {item!r}; "
                                     "e.g. --slurm partition=gpu")
                pairs[key] = value
            given = pairs
        if not isinstance(given, dict):
            raise SweepError(f"slurm must be a dict of sbatch options, got {type(given).__name__}; "
                             "e.g. slurm={'partition': 'gpu', 'time': '02:00:00'}")
        out = {}
        for key, value in given.items():
            name = str(key).replace("_", "-").lstrip("-")
            if not _KEY.match(name):
                raise SweepError(f"slurm option {key!r} is no sbatch option name; e.g. partition, time, mem")
            if name in OWN:
                raise SweepError(f"slurm option {name!r} is sweeper's own for every job; leave it out")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise SweepError(f"slurm option {name!r} has the value {value!r}; give text or a number")
            out[name] = str(value)
        return replace(self, slurm=out)

    def asks_gpus(self) -> bool:
        """Whether the options ask Slurm for GPUs themselves (``gres``, ``gpus``, ``gpus-per-task``, ...)."""
        return any(key in _GPU_KEYS for key in self.slurm or {})

    def sbatch(self) -> list[str]:
        """The checked options as sbatch's own arguments."""
        return [f"--{key}={value}" for key, value in (self.slurm or {}).items()]
