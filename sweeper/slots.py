"""Slots: the places a trial can run, and which free one to use next.

A slot is one trial's worth of a device: ``per_gpu`` slots per GPU, or one per worker on
the CPU. Each slot carries the environment its process starts with, so a GPU is pinned
(``CUDA_VISIBLE_DEVICES``) before any framework in the child can look at it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .errors import SweepError
from .gpus import allowed_by_environment, inventory


@dataclass(frozen=True)
class Slot:
    index: int
    gpu: str | None  #: the id given to CUDA_VISIBLE_DEVICES, or None for the CPU
    env: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def device(self) -> str:
        return "cpu" if self.gpu is None else f"gpu:{self.gpu}"


def parse_gpus(gpus: str | int | Iterable[int | str] | None) -> str | list[str]:
    """Normalise the ``gpus`` option to ``"all"``, ``"none"`` or a list of ids."""
    if gpus is None:
        return "all"
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        return [str(gpus)]
    if isinstance(gpus, str):
        word = gpus.strip().lower()
        if word in ("all", "none", "free"):
            return word
        ids = [p.strip() for p in gpus.split(",") if p.strip()]
    else:
        ids = [str(g).strip() for g in gpus]
    if not ids:
        raise SweepError("gpus is empty; give 'all', 'none', or ids such as 0,2")
    for gid in ids:
        if not (gid.isdigit() or gid.startswith(("GPU-", "MIG-"))):
            raise SweepError(f"gpus has {gid!r}, not a GPU index or UUID; give e.g. --gpus 0,2 or --gpus none")
    return ids


def gpu_ids(gpus: str | list[str]) -> list[str]:
    """The GPU ids to use; ``[]`` means the CPU."""
    allowed = allowed_by_environment()
    if gpus == "none":
        return []
    if isinstance(gpus, list):
        if allowed is not None:
            outside = [g for g in gpus if g not in allowed]
            if outside:
                raise SweepError(
                    f"gpus {','.join(outside)} are outside CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}; "
                    "choose among those or unset CUDA_VISIBLE_DEVICES"
                )
        return list(gpus)
    found = inventory()
    ids = [str(g.index) for g in found]
    if allowed is not None:
        uuids = {str(g.index): g.uuid for g in found}
        ids = [i for i in ids if i in allowed or uuids[i] in allowed] if found else list(allowed)
    return ids


def make_slots(gpus: str | list[str], per_gpu: int | None, workers: int | None) -> list[Slot]:
    """One slot per concurrent trial: ``per_gpu`` on each GPU, or ``workers`` on the CPU."""
    ids = gpu_ids(gpus)
    if not ids:
        count = workers or os.cpu_count() or 1
        return [Slot(i, None, {"CUDA_VISIBLE_DEVICES": "-1"}) for i in range(count)]
    k = per_gpu or 1
    slots = [
        Slot(n, gid, {"CUDA_VISIBLE_DEVICES": gid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        for n, (_, gid) in enumerate((j, gid) for j in range(k) for gid in ids)
    ]
    return slots


def pick(free: Sequence[Slot], busy: Iterable[Slot]) -> Slot:
    """The free slot on the least-loaded device (ties: the first device in order)."""
    load = Counter(s.gpu for s in busy)
    return min(free, key=lambda s: (load[s.gpu], s.index))
