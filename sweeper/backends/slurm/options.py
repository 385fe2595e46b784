"""The Slurm backend's own settings (``backend="slurm"``): its options
group, registered with it, so ``sweep(..., slurm={"partition": "gpu"})``, a grid file's
options and ``--slurm partition=gpu`` reach it and no other backend takes them: each trial's
sbatch options (the sweep's, and a point's own from ``slurm_resources``), the set-up lines run
before each task, and the options of a detached sweep's driver job."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from sweeper.errors import SweepError
from sweeper.model.options import flag

if TYPE_CHECKING:
    from sweeper.model.settings import Resources

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
    #: shell lines each task runs before its trial: a list of them (or one text) in code
    slurm_setup: Any = field(default=None, metadata=flag(
        "with `--backend slurm`: a shell line each task runs before its trial, such as `'module load cuda/12'` "
        "or `'source ~/venv/bin/activate'`; once per line, run in order by bash, a line that fails ends the task "
        "(see [Slurm](slurm.md#set-up-lines))", action="append", metavar="LINE"))
    #: a function of the point giving that trial's own sbatch options (a dict, as ``slurm``):
    #: points that differ go as arrays of their own (code and a grid file's options only)
    slurm_resources: Callable[[dict[str, Any]], Any] | None = None
    #: sbatch options of a detached sweep's driver job (``--detach``): as ``slurm``
    slurm_driver: Any = field(default=None, metadata=flag(
        "with `--detach`: an `sbatch` option for the driver's own job, as `KEY=VALUE` (`time=3-00:00:00`, "
        "`mem=2G`; default: the trials' `partition`, `account`, `qos`, 1 CPU); once per option (see "
        "[Slurm](slurm.md#a-detached-sweep---detach))", action="append", metavar="KEY=VALUE"))

    def checked(self) -> SlurmOptions:
        setup = self.slurm_setup
        lines = setup.splitlines() if isinstance(setup, str) else list(setup or ())
        if not all(isinstance(line, str) for line in lines):
            raise SweepError(f"slurm_setup takes shell lines (text), got {setup!r}; e.g. "
                             "slurm_setup=['module load cuda/12']")
        resources = self.slurm_resources
        if resources is not None and not callable(resources):
            raise SweepError(f"slurm_resources is a function of the point giving its sbatch options, got "
                             f"{resources!r}; e.g. slurm_resources=lambda p: {{'mem': '32G' if p['units'] > 512 "
                             "else '8G'}")
        return replace(self, slurm=sbatch_options(self.slurm, "slurm"), slurm_setup=tuple(lines),
                       slurm_driver=sbatch_options(self.slurm_driver, "slurm_driver"))

    def asks_gpus(self, extra: dict[str, str] | None = None) -> bool:
        """Whether the options (with a point's ``extra``) ask Slurm for GPUs themselves (``gres``,
        ``gpus``, ``gpus-per-task``, ...)."""
        return any(key in _GPU_KEYS for key in {**(self.slurm or {}), **(extra or {})})

    def jobs(self, resources: Resources, params: dict[str, Any] | None = None) -> tuple[list[str], dict[str, str]]:
        """What a job of a sweep with these ``resources`` is given (the point ``params``'s own, with
        its ``slurm_resources``): sbatch's arguments (the checked options; ``--gres=gpu:1`` where
        GPUs are asked for only by ``gpus``), and the trial's environment (the GPUs Slurm grants
        are its ``CUDA_VISIBLE_DEVICES``; none asked for, none used)."""
        if resources.per_gpu not in (None, 1):
            raise SweepError(f"per_gpu={resources.per_gpu!r} shares a GPU between trials of one machine; Slurm gives "
                             "each job whole GPUs (--gres=gpu:1): leave per_gpu out, or ask for the cluster's GPU "
                             "sharing yourself (--slurm gres=shard:1)")
        extra = self.resources(params) if params is not None else {}
        gpus = resources.gpus.asked
        sbatch = self.sbatch(extra) + (["--gres=gpu:1"] if gpus and not self.asks_gpus(extra) else [])
        if not gpus and not self.asks_gpus(extra):
            return sbatch, {"CUDA_VISIBLE_DEVICES": "-1"}
        return sbatch, {**resources.memory.env(None), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def resources(self, params: dict[str, Any]) -> dict[str, str]:
        """The point's own sbatch options (``slurm_resources``), checked; {} without it."""
        if self.slurm_resources is None:
            return {}
        try:
            given = self.slurm_resources(params)
        except Exception as exc:  # noqa: BLE001 (the user's function: its error, in one line)
            raise SweepError(f"slurm_resources raised {type(exc).__name__}: {exc} for the point {params}; fix it "
                             "(it gives a dict of sbatch options for each point)") from None
        return sbatch_options(given, "slurm_resources", of=params)

    def sbatch(self, extra: dict[str, str] | None = None) -> list[str]:
        """The checked options (with a point's ``extra``, which wins) as sbatch's own arguments."""
        return argv({**(self.slurm or {}), **(extra or {})})


def argv(options: dict[str, str]) -> list[str]:
    """Checked sbatch options as sbatch's own arguments."""
    return [f"--{key}" if key in FLAGS and value == "" else f"--{key}={value}" for key, value in options.items()]


def sbatch_options(given: Any, what: str, of: dict[str, Any] | None = None) -> dict[str, str]:
    """sbatch options as a checked dict (key without dashes -> value, "" for a bare flag): from
    a dict, or the command line's ``KEY=VALUE`` words; ``what`` names them in a refusal (``of``:
    the point a function gave them for)."""
    if given is None:
        return {}
    flagged = f"--{what.replace('_', '-')}"
    if isinstance(given, (list, tuple)):
        pairs: dict[str, str | bool] = {}
        for item in given:
            key, eq, value = str(item).partition("=")
            if key.replace("_", "-") in FLAGS and not eq:
                pairs[key] = True
                continue
            if not eq or not key:
                raise SweepError(f"{flagged} takes KEY=VALUE (an sbatch option), or a bare KEY for one that takes "
                                 f"no value ({', '.join(sorted(FLAGS))}), got {item!r}; e.g. {flagged} partition=gpu")
            pairs[key] = value
        given = pairs
    point = f" (for the point {of})" if of is not None else ""
    if not isinstance(given, dict):
        raise SweepError(f"{what} must be a dict of sbatch options, got {type(given).__name__}{point}; "
                         f"e.g. {what}={{'partition': 'gpu', 'time': '02:00:00'}}")
    out = {}
    for key, value in given.items():
        name = str(key).replace("_", "-").lstrip("-")
        if not _KEY.match(name):
            raise SweepError(f"{what} option {key!r} is no sbatch option name{point}; e.g. partition, time, mem")
        if name in OWN:
            raise SweepError(f"{what} option {name!r} is sweeper's own for every job; leave it out")
        if name in FLAGS and isinstance(value, bool):
            if value:
                out[name] = ""
            continue
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise SweepError(f"{what} option {name!r} has the value {value!r}{point}; give text or a number")
        out[name] = str(value)
    return out
