"""GPU memory caps applied in the trial process, by each framework, as the parent decided
them (:mod:`sweeper.system.capping`; the variables: :mod:`sweeper.model.contract`).

:mod:`sweeper.child.imports` calls these the moment a framework is imported, before it
touches the GPU.
"""

from __future__ import annotations

import os
from typing import Any

from sweeper.model import contract


class CapError(RuntimeError):
    """The memory cap could not be applied in the child."""


def apply_tensorflow(tf: Any) -> str:
    """Cap (or set growth on) the GPU TensorFlow sees; a no-op on the CPU."""
    limit = os.environ.get(contract.MEMORY_LIMIT_MB)
    growth = os.environ.get(contract.MEMORY_GROWTH) == "1"
    if not limit and not growth and not os.environ.get(contract.MEMORY_FRACTION):
        return "no cap asked"
    gpus = tf.config.list_physical_devices("GPU")  # cuInit, but no context, no memory yet
    if not gpus:
        return "no GPU visible to TensorFlow"
    try:
        for gpu in gpus:
            if limit:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(limit))]
                )
            else:  # growth, or a fraction whose MB NVML could not tell
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as exc:
        raise CapError(
            f"could not cap GPU memory: TensorFlow had already initialised the GPU ({exc}); "
            "do not run TensorFlow ops at import time of the grid file, do it inside train"
        ) from None
    return f"TensorFlow capped at {limit} MB" if limit else "TensorFlow memory growth on"


def apply_torch(torch: Any) -> str:
    fraction = os.environ.get(contract.MEMORY_FRACTION)
    if not fraction or not torch.cuda.is_available():
        return "no cap for PyTorch"
    torch.cuda.set_per_process_memory_fraction(float(fraction), 0)
    return f"PyTorch capped at {fraction} of the GPU"
