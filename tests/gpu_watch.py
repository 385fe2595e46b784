"""NVML read from outside the trials: what the GPU tier (tests/system/test_gpu_tier.py) and the
packing benchmark (bench/gpu_pack.py) hold sweeper's own numbers against.

Only the standard library, psutil and nvidia-ml-py: the watcher never initialises CUDA.
"""

from __future__ import annotations

import os
import threading
import time

#: NVML counts a process's CUDA context and libraries' handles too; no framework cap covers them.
MARGIN_MB = 1536


class Watch(threading.Thread):
    """Samples NVML from outside the trials: peak MB and card of every process below the
    test; the most of them on one card at once. Marks each process it has seen on its board
    (``<board>/<pid>.seen``) and, once ``full_at`` were on one card at once, ``<board>/full``."""

    def __init__(self, board: str | None = None, full_at: int = 0) -> None:
        super().__init__(daemon=True)
        import pynvml
        import psutil

        self.nvml, self.psutil = pynvml, psutil
        self.board, self.full_at = board, full_at
        self.peaks: dict[int, int] = {}
        self.card_of: dict[int, str] = {}
        self.most_at_once = 0
        self.gpu_util: list[int] = []  #: % of time a kernel ran, busiest card, per sample
        self.error: Exception | None = None  #: what stopped the watcher early
        self.done = threading.Event()

    def listed(self) -> dict[int, tuple[str, int]]:
        """pid -> (card UUID, MB) for every compute process NVML lists now."""
        nvml, out = self.nvml, {}
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                out[p.pid] = (uuid, (p.usedGpuMemory or 0) >> 20)
        return out

    def _busiest(self) -> int:
        nvml = self.nvml
        try:
            return max(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i)).gpu
                       for i in range(nvml.nvmlDeviceGetCount()))
        except nvml.NVMLError:
            return -1

    def run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # kept for the test to assert on: a dead watcher sees nothing
            self.error = exc

    def _watch(self) -> None:
        self.nvml.nvmlInit()
        try:
            while not self.done.is_set():
                mine = {p.pid for p in self.psutil.Process().children(recursive=True)}
                per_card: dict[str, int] = {}
                for pid, (uuid, mb) in self.listed().items():
                    if pid not in mine:
                        continue
                    self.peaks[pid] = max(self.peaks.get(pid, 0), mb)
                    self.card_of[pid] = uuid
                    per_card[uuid] = per_card.get(uuid, 0) + 1
                    if self.board and os.path.exists(os.path.join(self.board, str(pid))):
                        open(os.path.join(self.board, f"{pid}.seen"), "a").close()
                self.most_at_once = max([self.most_at_once, *per_card.values()])
                if self.board and self.full_at and self.most_at_once >= self.full_at:
                    open(os.path.join(self.board, "full"), "a").close()
                if per_card:
                    self.gpu_util.append(self._busiest())
                self.done.wait(0.02)
        finally:
            self.nvml.nvmlShutdown()

    def __enter__(self) -> "Watch":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.join()
        if self.error is not None and exc[0] is None:
            raise RuntimeError(f"the NVML watcher died: {self.error!r}") from self.error


def released(pids: set[int], bound: float = 10.0) -> dict[int, int]:
    """What NVML still lists of ``pids`` once they are gone (the driver may lag an instant)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        deadline = time.monotonic() + bound
        while True:
            held = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)):
                    if p.pid in pids:
                        held[p.pid] = (p.usedGpuMemory or 0) >> 20
            if not held or time.monotonic() > deadline:
                return held
            time.sleep(0.1)
    finally:
        pynvml.nvmlShutdown()


def pids_visible(holder_code: str, env: dict[str, str]) -> tuple[bool, str]:
    """Whether NVML lists this machine's processes by the pids they have here: start one
    that holds GPU memory (``holder_code`` prints "held" once it does) and look for it.
    In some containers (gVisor) NVML names the sandbox instead, and nothing per process
    can be checked from outside."""
    import subprocess
    import sys

    import pynvml

    holder = subprocess.Popen([sys.executable, "-c", f"{holder_code}; print('held', flush=True); input()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        if holder.stdout.readline().strip() != "held":
            return False, "a process could not hold GPU memory"
        pynvml.nvmlInit()
        try:
            listed = {p.pid for i in range(pynvml.nvmlDeviceGetCount())
                      for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))}
        finally:
            pynvml.nvmlShutdown()
        if holder.pid in listed:
            return True, ""
        return False, (f"NVML lists pids {sorted(listed)} but not the holder's {holder.pid}: "
                       "its pids are not this pid namespace's (a container such as gVisor)")
    finally:
        holder.stdin.close()
        holder.wait(60)
