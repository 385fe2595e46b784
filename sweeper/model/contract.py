"""The parent-child contract: every ``SWEEPER_*`` variable a sweep puts in the environment
of its processes, declared once, with what writes it and what reads it.

::

    variable                       written (in the parent)               read (in the child)
    ─────────────────────────────  ────────────────────────────────────  ─────────────────────────────
    SWEEPER_SWEEP                  each backend and the grid reader:     procs: a sweep's strays,
                                   the sweep's tag                       found by their environment
    SWEEPER_SLOT                   slots.plan (one per slot); a fork     procs: whose slot a stray was
                                   writes its own (procs.tag_slot)
    SWEEPER_TRIAL_ID, _NAME, _DIR  trial_env(spec), for each trial       a command trial's script;
    SWEEPER_SEED, SWEEPER_PARAMS                                         seed_from_env, params_from_env
    SWEEPER_MEMORY_LIMIT_MB,       capping.MemoryPolicy.env, per slot    child.capping.apply_* as frameworks
    _FRACTION, _GROWTH             (a Ray task sets the limit on its     are imported
                                   node; per_gpu="auto": per trial,
                                   capping.trial_env)
    SWEEPER_MEMORY_AUTO            per slot with per_gpu="auto"          child.imports: caps wait for the
                                                                         trial (its env has them)
    SWEEPER_DETERMINISTIC          determinism_env, for each trial of a  child.imports: each framework's
                                   sweep run with deterministic=True     deterministic mode, as imported
    SWEEPER_RESUMED_EPOCH          the engine, for a trial a scheduler   child.context: report()'s epochs
                                   paused and gives again: its last      go on after it; current_trial()
                                   epoch reported                        .resumed_epoch
    SWEEPER_SCHEDULED              population-based training's members   sweeper.keras.Report: the
                                   (run.members), a replay of one        optimizer held as compiled;
                                   (run.schedulers.Following): its       child.context: each report
                                   parameters are recorded by epoch      waits for its answer
    SWEEPER_PRELOAD_READY, _LIST,  backends.local.server, as the       child.preload, in the
    _PATH, _PROBE_GPU              server starts (_PROBE_GPU: the        server, once (its probe fork
                                   environment of a GPU slot)            pins that card)
    SWEEPER_ARG_<i>, SWEEPER_FLAG_ command, a --shell trial's values     /bin/sh, never sweeper
    <j>, SWEEPER_FLAGS

A name here is the only spelling of its variable in sweeper's code.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeper.model.trial import TrialSpec

SWEEP = "SWEEPER_SWEEP"
SLOT = "SWEEPER_SLOT"
TRIAL_ID = "SWEEPER_TRIAL_ID"
TRIAL_NAME = "SWEEPER_TRIAL_NAME"
TRIAL_DIR = "SWEEPER_TRIAL_DIR"
SEED = "SWEEPER_SEED"
DETERMINISTIC = "SWEEPER_DETERMINISTIC"
RESUMED_EPOCH = "SWEEPER_RESUMED_EPOCH"
SCHEDULED = "SWEEPER_SCHEDULED"
PARAMS = "SWEEPER_PARAMS"
MEMORY_LIMIT_MB = "SWEEPER_MEMORY_LIMIT_MB"
MEMORY_FRACTION = "SWEEPER_MEMORY_FRACTION"
MEMORY_GROWTH = "SWEEPER_MEMORY_GROWTH"
MEMORY_AUTO = "SWEEPER_MEMORY_AUTO"
PRELOAD_READY = "SWEEPER_PRELOAD_READY"
PRELOAD_LIST = "SWEEPER_PRELOAD_LIST"
PRELOAD_PATH = "SWEEPER_PRELOAD_PATH"
PRELOAD_PROBE_GPU = "SWEEPER_PRELOAD_PROBE_GPU"
#: A --shell command's values: ``SWEEPER_ARG_<i>`` per placeholder, ``SWEEPER_FLAG_<j>`` per
#: flag of ``{flags}``, and ``SWEEPER_FLAGS`` all flags joined.
ARG_PREFIX = "SWEEPER_ARG_"
FLAG_PREFIX = "SWEEPER_FLAG_"
FLAGS = "SWEEPER_FLAGS"


# -- a trial's own variables: written by the parent's engine, read in the trial ----------


def trial_env(spec: TrialSpec) -> dict[str, str]:
    """What a trial (and any command it runs) finds in its environment."""
    return {
        TRIAL_ID: spec.trial_id,
        TRIAL_NAME: spec.name,
        TRIAL_DIR: spec.dir,
        SEED: str(spec.seed),
        PARAMS: json.dumps(spec.params, sort_keys=True),
    }


def determinism_env(environ: Any = None) -> dict[str, str]:
    """What every trial of a ``deterministic=True`` sweep finds in its environment: the
    switch :mod:`sweeper.child.imports` reads, and the variables the frameworks read
    themselves (TensorFlow's and cuDNN's, cuBLAS's workspace, XLA's flag for JAX on a
    GPU, added to any XLA_FLAGS already set)."""
    environ = os.environ if environ is None else environ
    xla = environ.get("XLA_FLAGS", "")
    if "xla_gpu_deterministic_ops" not in xla:
        xla = f"{xla} --xla_gpu_deterministic_ops=true".strip()
    return {DETERMINISTIC: "1", "TF_DETERMINISTIC_OPS": "1", "TF_CUDNN_DETERMINISTIC": "1",
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "XLA_FLAGS": xla}


def seed_from_env() -> int | None:
    """The trial's seed, in its process (None outside a sweep)."""
    seed = os.environ.get(SEED)
    return None if seed is None else int(seed)


def params_from_env() -> dict[str, Any]:
    """The trial's parameters, in its process (``{}`` outside a sweep)."""
    params: dict[str, Any] = json.loads(os.environ.get(PARAMS, "{}"))
    return params
