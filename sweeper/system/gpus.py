"""Which GPUs this machine has, read through NVML (``nvidia-ml-py``), never through CUDA.

The parent must not initialise CUDA (that would hold GPU memory for the whole sweep),
so it asks the driver's management library instead. No NVML library, no driver or no
GPU all mean the same: an empty list, one info line, and the sweep runs on the CPU.

Indices are those ``nvidia-smi`` shows. CUDA numbers GPUs by speed unless told
otherwise, so children get ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and a GPU that NVML found
is pinned by its UUID, which means the same card to every library.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("sweeper")

#: A GPU counts as free when other processes hold less than this much of its memory.
FREE_THRESHOLD_MB = 1024


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML sees it."""

    index: int  #: as nvidia-smi shows it
    uuid: str  #: GPU-... (or MIG-...)
    name: str
    total_mb: int
    used_mb: int
    #: (pid, MB) of compute processes; MB None where NVML cannot tell (some containers, MIG)
    processes: tuple[tuple[int, int | None], ...] = field(default=())

    @property
    def free_mb(self) -> int:
        return self.total_mb - self.used_mb

    @property
    def others_mb(self) -> int:
        """Memory held by other processes (ours are not running yet when this is read).
        Where NVML lists no process, or one without its memory (a container whose NVML
        cannot see the others, MIG), the card's used memory stands in: a busy card must not
        pass for free. An idle card's used memory (the driver's reserve) is well under 1 GB."""
        known = sum(mb or 0 for _, mb in self.processes)
        if not self.processes or any(mb is None for _, mb in self.processes):
            return max(known, self.used_mb)
        return known


#: Why NVML could not be asked, the last time it could not (for the one info line).
unavailable = ""


def _nvml() -> Any | None:
    global unavailable
    try:
        import pynvml
    except ImportError:
        unavailable = "nvidia-ml-py is not installed"
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        unavailable = f"no NVIDIA driver or NVML library: {exc}"
        return None
    return pynvml


def inventory() -> list[Gpu]:
    """The GPUs NVML reports, or ``[]`` when it cannot tell."""
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                Gpu(
                    index=i,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    total_mb=mem.total >> 20,
                    used_mb=mem.used >> 20,
                    processes=_processes(nvml, handle),
                )
            )
        return gpus
    except Exception as exc:  # a driver that answers some calls and not others
        global unavailable
        unavailable = f"NVML failed while listing GPUs: {exc}"
        return []
    finally:
        nvml.nvmlShutdown()


def driver_version() -> str:
    """The NVIDIA driver's version, as NVML tells it ("" where it cannot)."""
    nvml = _nvml()
    if nvml is None:
        return ""
    try:
        return _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - an NVML (or a fake of it) without the call
        return ""
    finally:
        nvml.nvmlShutdown()


def _processes(nvml: Any, handle: Any) -> tuple[tuple[int, int | None], ...]:
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return ()
    return tuple((p.pid, None if p.usedGpuMemory is None else p.usedGpuMemory >> 20) for p in procs)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def allowed_by_environment() -> list[str] | None:
    """The GPUs the user's ``CUDA_VISIBLE_DEVICES`` allows (ids as written), or None if unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    ids = [part.strip() for part in value.split(",") if part.strip()]
    allowed = []
    for i in ids:
        if i.startswith("-"):  # CUDA stops at the first invalid id: "-1" hides all after it
            break
        allowed.append(i)
    return allowed


class MemorySampler:
    """Peak GPU memory per trial, sampled from NVML by the parent while trials run.

    A trial's memory is that of its whole process tree, summed over cards: a command
    trial's script runs below the trial's process, and a ``train`` may start workers.
    """

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}  #: trial pid -> most MB its tree held at one sample
        self.now: dict[int, int] = {}  #: trial pid -> MB its tree held at the last sample
        #: every pid NVML listed at the last sample -> (card, MB; None where NVML cannot tell)
        self.listed: dict[int, tuple[str, int | None]] = {}
        self._nvml: Any = None
        self._handles: list[Any] = []

    def start(self) -> bool:
        nvml = _nvml()
        if nvml is None:
            return False
        try:
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:
            nvml.nvmlShutdown()
            return False
        self._nvml = nvml
        return True

    def sample(self, pids: set[int]) -> None:
        """One sample of every card, for the trials whose processes are ``pids`` (none: what
        NVML lists, alone)."""
        if self._nvml is None:
            return
        held: dict[int, int] = {}
        self.listed = {}
        for i, handle in enumerate(self._handles):
            for pid, mb in _processes(self._nvml, handle):
                self.listed[pid] = (str(i), mb)
                if mb is not None:  # unknown is not 0: no peak rather than a wrong one
                    held[pid] = held.get(pid, 0) + mb
        self.now = {}
        if not held:
            return
        from sweeper.system.procs import descendants

        strangers = set(held) - pids
        for pid in pids:
            tree = [pid, *descendants(pid)] if strangers else [pid]
            mine = [held[q] for q in tree if q in held]
            self.now[pid] = sum(mine)
            if mine and sum(mine) > self.peaks.get(pid, -1):
                self.peaks[pid] = sum(mine)

    def cards(self) -> dict[str, tuple[int, int]]:
        """Each card's (total, free) MB now, by its index as a text ({} where NVML fails)."""
        if self._nvml is None:
            return {}
        out = {}
        for i, handle in enumerate(self._handles):
            try:
                mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:  # a card NVML cannot read now takes no trial now
                continue
            out[str(i)] = (mem.total >> 20, mem.free >> 20)
        return out

    def stop(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None
