"""The Slurm backend's own settings (``backend="slurm"``): its options
group, registered with it, so ``sweep(..., slurm={"partition": "gpu"})``, a grid file's
options and ``--slurm partition=gpu`` reach it and no other backend takes them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.options import flag

#: sbatch options sweeper sets itself for every job: given, they would break its bookkeeping
#: (``comment`` names the sweep and its array's trials: a driver finds its arrays by it).
OWN = {"array", "output", "error", "job-name", "wrap", "parsable", "chdir", "export", "comment"}
#: sbatch's options that take no value, given as a bare ``--slurm KEY`` (``requeue: True`` in code).
FLAGS = {"requeue", "no-requeue", "exclusive", "overcommit", "contiguous", "spread-job", "use-min-nodes", "no-kill"}
#: sbatch options that ask for GPUs: given, sweeper's own ``--gres=gpu:1`` is left out.
_GPU_KEYS = {"gres", "gpus", "gpus-per-task", "gpus-per-node", "gpus-per-socket", "tres-per-task", "G"}
_KEY = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class SlurmOptions:
    """How trials run as Slurm jobs."""

    #: sbatch options for each trial's job: a dict in code, ``KEY=VALUE`` flags on the command line
    slurm: Any = field(default=None, metadata=flag(
        "with `--backend slurm`: an `sbatch` option for every trial's job, as `KEY=VALUE` (`partition=gpu`, "
        "`time=02:00:00`, `mem=16G`, `account=...`, `qos=...`, `constraint=...`), or a bare `KEY` for one that "
        "takes no value (`requeue`, `exclusive`); once per option (see [Slurm](slurm.md))",
        action="append", metavar="KEY=VALUE"))

    def checked(self) -> SlurmOptions:
        given = self.slurm
        if given is None:
            return replace(self, slurm={})
        if isinstance(given, (list, tuple)):
            pairs: dict[str, str | bool] = {}
            for item in given:
                key, eq, value = str(item).partition("=")
                if key.replace("_", "-") in FLAGS and not eq:
                    pairs[key] = True
                    continue
                if not eq or not key:
                    raise SweepError(f"--slurm takes KEY=VALUE (an sbatch option), or a bare KEY for one that takes "
                                     f"no value ({', '.join(sorted(FLAGS))}), got {item!r}; e.g. --slurm partition=gpu")
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
            if name in FLAGS and isinstance(value, bool):
                if value:
                    out[name] = ""
                continue
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise SweepError(f"slurm option {name!r} has the value {value!r}; give text or a number")
            out[name] = str(value)
        return replace(self, slurm=out)

    def asks_gpus(self) -> bool:
        """Whether the options ask Slurm for GPUs themselves (``gres``, ``gpus``, ``gpus-per-task``, ...)."""
        return any(key in _GPU_KEYS for key in self.slurm or {})

    def jobs(self, options: Any) -> tuple[list[str], dict[str, str]]:
        """What every job of a sweep with these ``options`` is given: sbatch's arguments (the
        checked options; ``--gres=gpu:1`` where GPUs are asked for only by ``gpus``), and the
        trial's environment (the GPUs Slurm grants are its ``CUDA_VISIBLE_DEVICES``; none
        asked for, none used)."""
        from sweeper.run.slots import parse_gpus

        if options.per_gpu not in (None, 1):
            raise SweepError(f"per_gpu={options.per_gpu!r} shares a GPU between trials of one machine; Slurm gives "
                             "each job whole GPUs (--gres=gpu:1): leave per_gpu out, or ask for the cluster's GPU "
                             "sharing yourself (--slurm gres=shard:1)")
        gpus = options.gpus is not None and parse_gpus(options.gpus) != "none"
        sbatch = self.sbatch() + (["--gres=gpu:1"] if gpus and not self.asks_gpus() else [])
        if not gpus and not self.asks_gpus():
            return sbatch, {"CUDA_VISIBLE_DEVICES": "-1"}
        return sbatch, {**options.memory_policy().env(None), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def sbatch(self) -> list[str]:
        """The checked options as sbatch's own arguments."""
        return [f"--{key}" if key in FLAGS and value == "" else f"--{key}={value}"
                for key, value in (self.slurm or {}).items()]
