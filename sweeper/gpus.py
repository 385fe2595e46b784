"""Which GPUs this machine has, read through NVML (``nvidia-ml-py``), never through CUDA.

The parent must not initialise CUDA (that would hold GPU memory for the whole sweep),
so it asks the driver's management library instead. No NVML library, no driver or no
GPU all mean the same: an empty list, and the sweep runs on the CPU.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

log = logging.getLogger("sweeper")


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML sees it. ``index`` is its place in PCI bus order (as nvidia-smi)."""

    index: int
    uuid: str
    name: str
    total_mb: int
    used_mb: int


def inventory() -> list[Gpu]:
    """The GPUs NVML reports, or ``[]`` (with one info line) when it cannot tell."""
    try:
        import pynvml
    except ImportError:
        log.info("sweeper: nvidia-ml-py is not installed; running on the CPU")
        return []
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.info("sweeper: no NVIDIA driver found (%s); running on the CPU", exc)
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(Gpu(i, _text(uuid), _text(name), mem.total >> 20, mem.used >> 20))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def allowed_by_environment() -> list[str] | None:
    """The GPUs the user's ``CUDA_VISIBLE_DEVICES`` allows (ids as written), or None if unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    ids = [part.strip() for part in value.split(",") if part.strip()]
    if any(i.startswith("-") for i in ids):  # "-1": no GPU at all
        return []
    return ids
