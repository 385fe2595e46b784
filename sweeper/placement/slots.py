"""Slots: the places a trial can run, and which free one to use next.

A slot is one trial's worth of a device: ``per_gpu`` slots per GPU, or one per worker
on the CPU. Each slot carries the environment its process starts with, so the GPU is
pinned (``CUDA_VISIBLE_DEVICES``) and its memory cap set before any framework in the
child can look at it. Picking the free slot on the least-busy GPU spreads trials over
cards first; never more than ``per_gpu`` run on one card, since it has only that many slots.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.system import gpus as _gpus
from sweeper.model.devices import MemoryPolicy, parse_gpus  # noqa: F401 (parse_gpus: its old home)
from sweeper.system.gpus import FREE_THRESHOLD_MB, Gpu, allowed_by_environment, inventory, log

#: ``workers="auto"`` on the CPU: at most this many trials per core (how many run is decided
#: by host memory and measured idle cores: :class:`sweeper.placement.hostroom.HostRoom`).
AUTO_PER_CORE = 4


@dataclass(frozen=True)
class Slot:
    index: int
    gpu: str | None  #: the GPU's index as nvidia-smi shows it (or the id given), None for the CPU
    env: dict[str, str] = field(default_factory=dict, hash=False)
    uuid: str = ""
    cap_mb: int | None = None

    @property
    def device(self) -> str:
        return "cpu" if self.gpu is None else f"gpu:{self.gpu}"


@dataclass(frozen=True)
class Placement:
    """Where a sweep's trials run: the GPUs chosen (if any), the slots, the memory policy."""

    slots: list[Slot]
    gpus: list[Gpu]  #: what NVML told about the chosen GPUs ([] when unknown or CPU)
    policy: MemoryPolicy | None  #: None on the CPU
    skipped: list[Gpu] = field(default_factory=list)  #: busy GPUs left out by gpus="free"


def _matches(gpu: Gpu, gid: str) -> bool:
    return gid == str(gpu.index) or gid == gpu.uuid


def choose_gpus(gpus: str | list[str]) -> tuple[list[str], list[Gpu], list[Gpu]]:
    """The GPU ids to use ([] means the CPU), what NVML knows of them, and busy ones skipped."""
    if gpus == "none":
        return [], [], []
    allowed = allowed_by_environment()
    found = inventory()
    if not found and _gpus.unavailable:  # one info line, saying what follows from it
        if isinstance(gpus, list) or allowed:
            log.info("sweeper: %s; using the GPUs as given, their memory sizes unknown", _gpus.unavailable)
        else:
            log.info("sweeper: %s; no GPUs, running on the CPU", _gpus.unavailable)
    if allowed is not None and found:
        _warn_if_order_differs(allowed, found)
        found = [g for g in found if any(_matches(g, a) for a in allowed)]
    if isinstance(gpus, list):
        if not found and allowed is None:  # nothing says these GPUs exist: never a silent label
            why = _gpus.unavailable or "NVML lists no GPU"
            raise SweepError(f"--gpus {','.join(gpus)}: no GPU can be found on this machine ({why}); "
                             "use --gpus none (or all) to run on the CPU, or set CUDA_VISIBLE_DEVICES "
                             "to the GPUs that are there")
        if allowed is not None:
            outside = [g for g in gpus if g not in allowed and not any(_matches(f, g) for f in found)]
            if outside:
                raise SweepError(
                    f"gpus {','.join(outside)} are outside CUDA_VISIBLE_DEVICES="
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES')}; choose among those or unset it"
                )
        known = [next((f for f in found if _matches(f, g)), None) for g in gpus]
        if found and None in known:
            missing = [g for g, k in zip(gpus, known) if k is None]
            raise SweepError(f"no GPU {','.join(missing)} on this machine (NVML lists "
                             f"{', '.join(str(f.index) for f in found)}); check --gpus")
        ids = [str(k.index) if k else g for g, k in zip(gpus, known)]
        return ids, [k for k in known if k], []
    if not found and allowed:  # NVML cannot tell, but the user named GPUs: trust them
        return ([] if gpus == "free" else list(allowed)), [], []
    if gpus == "free":
        free = [g for g in found if g.others_mb < FREE_THRESHOLD_MB]
        busy = [g for g in found if g not in free]
        if found and not free:
            raise SweepError(
                f"no free GPU: every one has over {FREE_THRESHOLD_MB} MB held by other processes; "
                "wait, or name GPUs with --gpus 0,1"
            )
        return [str(g.index) for g in free], free, busy
    return [str(g.index) for g in found], found, []


def _warn_if_order_differs(allowed: list[str], found: list[Gpu]) -> None:
    """CUDA numbers GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; NVML and
    sweeper number them by PCI bus. Alike cards tie, and ties go by bus: the same numbers.
    Unlike cards may not be: say so rather than pick a card the user did not mean."""
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or not any(a.isdigit() for a in allowed):
        return
    if len({g.name for g in found}) > 1:
        log.warning("sweeper: CUDA_VISIBLE_DEVICES=%s is read as nvidia-smi's indices, but without "
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA may number these unlike cards (%s) otherwise; "
                    "set CUDA_DEVICE_ORDER=PCI_BUS_ID or give UUIDs (nvidia-smi -L)",
                    os.environ.get("CUDA_VISIBLE_DEVICES"), ", ".join(sorted({g.name for g in found})))


def place(gpus: str | list[str], policy: MemoryPolicy, workers: int | str | None) -> Placement:
    """Slots for a sweep: ``policy.per_gpu`` on each chosen GPU, or ``workers`` on the CPU
    (``"auto"``: :data:`AUTO_PER_CORE` per core, as many as run decided by memory and idle cores)."""
    ids, known, skipped = choose_gpus(gpus)
    if not ids:
        cores = os.cpu_count() or 1
        count = AUTO_PER_CORE * cores if workers == "auto" else int(workers or cores)
        threads = _cpu_threads(count)
        slots = [Slot(i, None, {"CUDA_VISIBLE_DEVICES": "-1", contract.SLOT: str(i), **threads})
                 for i in range(count)]
        return Placement(slots, [], None)
    info = {str(g.index): g for g in known}
    slots = []
    for j in range(policy.per_gpu):
        for gid in ids:
            gpu = info.get(gid)
            total = gpu.total_mb if gpu else None
            env = {
                "CUDA_VISIBLE_DEVICES": gpu.uuid if gpu else gid,
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                contract.SLOT: str(len(slots)),
                **policy.env(total),
            }
            slots.append(Slot(len(slots), gid, env, gpu.uuid if gpu else "", policy.limit_mb(total)))
    return Placement(slots, known, policy, skipped)


#: Thread-pool sizes frameworks read at start; sweeper sets those the user has not.
_THREAD_VARS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def _cpu_threads(slots: int) -> dict[str, str]:
    """Share the cores among CPU trials, so N trials do not each start a pool per core
    and spin against each other (what the user set in the environment stays)."""
    share = str(max(1, (os.cpu_count() or 1) // max(1, slots)))
    return {name: share for name in _THREAD_VARS if name not in os.environ}


def pick(free: Sequence[Slot], busy: Iterable[Slot], prefer: Iterable[int] = ()) -> Slot:
    """The free slot on the least-loaded device; among equals, one whose index is in
    ``prefer`` (it has a standby), then the first in order."""
    load = Counter(s.gpu for s in busy)
    prefer = set(prefer)
    return min(free, key=lambda s: (load[s.gpu], s.index not in prefer, s.index))
