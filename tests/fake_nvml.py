"""A thin fake at the NVML boundary: the eight ``pynvml`` functions sweeper calls,
answering for a machine described in a few lines. Everything above them is real:
``sweeper.system.gpus`` (inventory, the memory sampler), slots, UUID pinning, the spawned
children and their environment, the ledger.

Trial processes "use" a fake card through a board, a folder of files: a trial writes
``<board>/<pid>`` holding ``<uuid> <MB>`` and the fake lists that pid among the card's
compute processes while the process is alive (its pid in a ``/proc`` that exists, not a
zombie), exactly as NVML lists a process that holds a CUDA context. The first time the
fake lists a pid it creates ``<board>/<pid>.seen``, so a trial can wait until it has
been seen instead of sleeping.

A trial takes its memory as its framework would (:func:`allocate`, :data:`FRAMEWORKS`):
``"tensorflow"`` without memory growth maps its whole cap (``SWEEPER_MEMORY_LIMIT_MB``, as
sweeper's child gives TensorFlow's ``memory_limit``) the moment it starts, and runs out when
its need is larger; ``"jax"`` preallocates 75% of the card (``XLA_PYTHON_CLIENT_MEM_FRACTION``,
or what it needs under ``XLA_PYTHON_CLIENT_PREALLOCATE=false``); ``"exact"`` takes only what
it needs (what tests written before these modes assume). A process that is no trial
(another user's job) holds memory with :func:`occupy`, or ``python tests/fake_nvml.py --hold``.

Installed in the test's process with ``monkeypatch`` (see the ``fake_nvml`` fixture);
for a CLI run in a subprocess, :func:`main` installs it from ``SWEEPER_FAKE_NVML``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

#: The functions replaced: all sweeper calls, and nothing else.
FUNCTIONS = ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
             "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
             "nvmlDeviceGetComputeRunningProcesses", "nvmlSystemGetDriverVersion")


@dataclass
class Card:
    name: str = "NVIDIA Fake A100 16GB"
    total_mb: int = 16384
    uuid: str = ""
    others: dict[int, int | None] = field(default_factory=dict)  #: pid -> MB (None: NVML cannot tell)
    reserved_mb: int = 0  #: used by the driver itself, listed by no process


class FakeNvml:
    """One machine's NVML: ``cards``, and how its driver misbehaves (``fail``)."""

    def __init__(self, cards: list[Card], board: str | None = None, as_bytes: bool = False) -> None:
        self.cards = cards
        for i, card in enumerate(cards):
            card.uuid = card.uuid or f"GPU-fa4e{i:04d}-0000-4000-8000-{i:012d}"
        self.board = board
        self.as_bytes = as_bytes  #: older nvidia-ml-py returns bytes for names and UUIDs
        self.fail: dict[str, Exception] = {}  #: function name -> what it raises
        self.inits = 0
        self.shutdowns = 0
        self.listed: list[int] = []  #: every pid listed, in order (sampler calls included)

    # -- installing -----------------------------------------------------------------------

    def install(self, monkeypatch: Any) -> "FakeNvml":
        for name in FUNCTIONS:
            monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def install_for_good(self) -> None:
        for name in FUNCTIONS:
            setattr(pynvml, name, getattr(self, name))

    def to_json(self) -> str:
        return json.dumps({"board": self.board, "cards": [c.__dict__ for c in self.cards],
                           "no_driver": "nvmlInit" in self.fail})

    @classmethod
    def from_json(cls, text: str) -> "FakeNvml":
        data = json.loads(text)
        cards = [Card(**{**c, "others": {int(k): v for k, v in c["others"].items()}}) for c in data["cards"]]
        fake = cls(cards, data["board"])
        if data.get("no_driver"):
            fake.fail["nvmlInit"] = no_driver()
        return fake

    # -- what a trial does ----------------------------------------------------------------

    def used_by_trials(self, uuid: str) -> dict[int, int]:
        """pid -> MB of the live processes that wrote to the board for this card."""
        if not self.board or not os.path.isdir(self.board):
            return {}
        held = {}
        for entry in os.listdir(self.board):
            if not entry.isdigit() or not alive(int(entry)):
                continue
            try:
                with open(os.path.join(self.board, entry)) as f:
                    card, mb = f.read().split()
            except (OSError, ValueError):  # being written
                continue
            if card == uuid:
                held[int(entry)] = int(mb)
        return held

    def unlisted(self, uuid: str) -> int:
        """MB of this card used by no process NVML lists: the board's ``unlisted-*`` files
        (:func:`leak`), as a context the driver did not tear down when its process ended."""
        if not self.board or not os.path.isdir(self.board):
            return 0
        total = 0
        for entry in os.listdir(self.board):
            if entry.startswith("unlisted-"):
                try:
                    with open(os.path.join(self.board, entry)) as f:
                        card, mb = f.read().split()
                except (OSError, ValueError):
                    continue
                total += int(mb) if card == uuid else 0
        return total

    # -- the pynvml functions -------------------------------------------------------------

    def _check(self, name: str) -> None:
        if name in self.fail:
            raise self.fail[name]

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.as_bytes else value

    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Card:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.cards):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.cards[index]

    def nvmlDeviceGetMemoryInfo(self, card: Card) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo")
        used_mb = card.reserved_mb + sum(mb or 0 for mb in card.others.values())
        used_mb += sum(self.used_by_trials(card.uuid).values()) + self.unlisted(card.uuid)
        total, used = card.total_mb << 20, min(card.total_mb, used_mb) << 20
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUUID(self, card: Card) -> str | bytes:
        self._check("nvmlDeviceGetUUID")
        return self._text(card.uuid)

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check("nvmlSystemGetDriverVersion")
        return self._text("999.99")

    def nvmlDeviceGetName(self, card: Card) -> str | bytes:
        self._check("nvmlDeviceGetName")
        return self._text(card.name)

    def nvmlDeviceGetComputeRunningProcesses(self, card: Card) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses")
        procs = [SimpleNamespace(pid=pid, usedGpuMemory=None if mb is None else mb << 20)
                 for pid, mb in card.others.items()]
        for pid, mb in self.used_by_trials(card.uuid).items():
            procs.append(SimpleNamespace(pid=pid, usedGpuMemory=mb << 20))
            self.listed.append(pid)
            seen = os.path.join(self.board or "", f"{pid}.seen")
            if not os.path.exists(seen):
                open(seen, "w").close()
        return procs


def no_driver() -> Exception:
    """What ``nvmlInit`` raises on a machine without the NVML library."""
    return pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (in ``/proc``, not a zombie; where ``/proc`` hides
    another user's processes, ``hidepid``, one that ``kill(pid, 0)`` finds: NVML lists a
    process whoever looks)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except IndexError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except PermissionError:
            return True
        except OSError:
            return False
        return True


# -- used by trials (tests/sweep_fns.py) ---------------------------------------------------

def hold(board: str, mb: int, pid: int | None = None) -> None:
    """Hold ``mb`` of the card this process was pinned to, until the fake has listed it."""
    import time

    pid = pid or os.getpid()
    occupy(board, os.environ["CUDA_VISIBLE_DEVICES"], mb, pid)
    seen = os.path.join(board, f"{pid}.seen")
    deadline = time.monotonic() + 60
    while not os.path.exists(seen):  # a file the parent's sampler makes: polled, not slept on
        if time.monotonic() > deadline:
            raise TimeoutError(f"the fake NVML never listed pid {pid}: the sampler did not run")
        time.sleep(0.02)


def leak(board: str, mb: int, name: str) -> str:
    """Leave ``mb`` of this process's card used by no process, once it has ended (a context
    the driver keeps): the file ``<board>/unlisted-<name>``, whose removal gives it back."""
    path = os.path.join(board, f"unlisted-{name}")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.environ['CUDA_VISIBLE_DEVICES']} {mb}")
    os.replace(tmp, path)
    return path


#: MB a fake framework holds for its CUDA context, outside its allocator's cap.
CONTEXT_MB = 300


class ResourceExhaustedError(RuntimeError):
    """What TensorFlow raises when its allocator cannot give what a tensor needs."""


#: How a fake trial takes memory: as its framework would, or only what it needs (``exact``).
FRAMEWORKS = ("exact", "tensorflow", "jax")
#: JAX preallocates this share of the card unless told otherwise (XLA_PYTHON_CLIENT_MEM_FRACTION).
JAX_FRACTION = 0.75


def mapped(mb: int, framework: str, env: dict[str, str], total_mb: int, free_mb: int) -> tuple[int, int | None]:
    """(MB mapped the moment the framework starts, the most its allocator gives beyond its
    context or None) for a trial needing ``mb`` (context included) under ``env``: TensorFlow
    without growth maps its whole ``memory_limit`` (all that is free where none is set), JAX
    preallocates its fraction of the card; with growth (or ``exact``) only ``mb`` is mapped."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    cap = env.get("SWEEPER_MEMORY_LIMIT_MB")
    limit = int(cap) if cap is not None else None
    if framework == "tensorflow" and env.get("TF_FORCE_GPU_ALLOW_GROWTH") != "true":
        return (CONTEXT_MB + limit, limit) if limit is not None else (free_mb, None)
    if framework == "jax":
        fraction = float(env.get("XLA_PYTHON_CLIENT_MEM_FRACTION", JAX_FRACTION))
        limit = int(fraction * total_mb)
        if env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() != "false":
            return CONTEXT_MB + limit, limit
    return mb, limit


def allocate(board: str, mb: int, framework: str = "exact") -> None:
    """Take ``mb`` of this process's card (its context, then ``mb - CONTEXT_MB`` through an
    allocator) as ``framework`` does (:func:`mapped`): it fails, with TensorFlow's OOM message
    and nothing held, when what it maps at start does not fit in the card's free memory (as
    the fake NVML of ``SWEEPER_FAKE_NVML`` counts it, others' holdings included); a need over
    its allocator's limit fails too, once a framework's allocator has grown to that limit (it
    holds its context and all its cap, as TensorFlow's and JAX's do when they run out within
    their cap, until the parent has seen it; ``exact``: at once, nothing held); else it holds
    what it mapped until the parent has seen it (:func:`hold`)."""
    import fcntl

    uuid = os.environ["CUDA_VISIBLE_DEVICES"]
    want = mb - CONTEXT_MB
    with open(os.path.join(board, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one allocation at a time on the machine: no race for the last MB
        fake = FakeNvml.from_json(os.environ["SWEEPER_FAKE_NVML"])
        fake.board = board
        card = next(c for c in fake.cards if c.uuid == uuid)
        mem = fake.nvmlDeviceGetMemoryInfo(card)
        free = (mem.free >> 20) + fake.used_by_trials(uuid).get(os.getpid(), 0)
        take, limit = mapped(mb, framework, dict(os.environ), card.total_mb, free)
        capped = limit is not None and want > limit
        if capped and framework == "exact":
            raise ResourceExhaustedError(f"OOM when allocating tensor of {want} MB: the allocator is capped at "
                                         f"{limit} MB")
        take = CONTEXT_MB + limit if capped and limit is not None else max(take, mb)
        if take > free:
            raise ResourceExhaustedError(f"OOM when allocating tensor of {want} MB: the card has {free} MB free, "
                                         f"{take} MB asked")
        occupy(board, uuid, take)
    hold(board, take)
    if capped:
        raise ResourceExhaustedError(f"OOM when allocating tensor of {want} MB: the allocator is capped at "
                                     f"{limit} MB")


def occupy(board: str, uuid: str, mb: int, pid: int | None = None) -> None:
    """``pid`` (this process) holds ``mb`` of the card ``uuid`` from now, as NVML will list it
    (a process that is no trial: a colleague's job; it waits for nothing)."""
    pid = pid or os.getpid()
    tmp = os.path.join(board, f".{pid}.tmp")
    with open(tmp, "w") as f:
        f.write(f"{uuid} {mb}")
    os.replace(tmp, os.path.join(board, str(pid)))


def holders(board: str) -> int:
    """How many live processes hold memory of this process's card now."""
    fake = FakeNvml([], board)
    return len(fake.used_by_trials(os.environ["CUDA_VISIBLE_DEVICES"]))


def meet(board: str, peers: int) -> int:
    """How many processes hold memory of this process's card together, as this one sees it
    now or a peer saw it: once ``peers`` are seen together, each of them is marked
    (``met-<pid>``), so one that looks only after the others let go still knows it met
    them (a busy machine may run it late: counting holders now alone would miss them)."""
    if os.path.exists(os.path.join(board, f"met-{os.getpid()}")):
        return peers
    held = FakeNvml([], board).used_by_trials(os.environ["CUDA_VISIBLE_DEVICES"])
    if len(held) >= peers:
        for pid in held:
            open(os.path.join(board, f"met-{pid}"), "w").close()
    return len(held)


def colleague(argv: list[str]) -> None:
    """``--hold BOARD UUID MB [SECONDS] [--grow MB2 --when PATH]``: a process that is no
    sweep's (a colleague's job) holds ``MB`` of the card ``uuid`` for ``SECONDS`` (else until
    it is ended), saying ``holding`` on stdout once NVML lists it; with ``--grow``, it holds
    ``MB2`` from the moment ``PATH`` exists (then ``PATH.done`` says it did)."""
    import argparse
    import time

    ap = argparse.ArgumentParser(prog="fake_nvml.py --hold")
    ap.add_argument("board")
    ap.add_argument("uuid")
    ap.add_argument("mb", type=int)
    ap.add_argument("seconds", type=float, nargs="?")
    ap.add_argument("--grow", type=int)
    ap.add_argument("--when")
    args = ap.parse_args(argv)
    occupy(args.board, args.uuid, args.mb)
    print("holding", flush=True)
    end = None if args.seconds is None else time.monotonic() + args.seconds
    while end is None or time.monotonic() < end:
        if args.grow and args.when and os.path.exists(args.when):
            occupy(args.board, args.uuid, args.grow)
            open(args.when + ".done", "w").close()
            args.grow = None
        time.sleep(0.02)  # a colleague's job: it polls for its cue, nothing waits on its sleep


def main() -> None:
    """``python tests/fake_nvml.py ARGS``: ``python -m sweeper ARGS`` on the machine that
    ``SWEEPER_FAKE_NVML`` describes (a :meth:`FakeNvml.to_json`)."""
    if sys.argv[1:2] == ["--describe"]:  # a machine of N cards, for tests/fake_machine
        print(FakeNvml([Card() for _ in range(int(sys.argv[2]))]).to_json())
        return
    if sys.argv[1:2] == ["--hold"]:
        colleague(sys.argv[2:])
        return
    FakeNvml.from_json(os.environ["SWEEPER_FAKE_NVML"]).install_for_good()
    from sweeper.__main__ import entry

    sys.argv = ["sweeper", *sys.argv[1:]]
    entry()


if __name__ == "__main__":
    main()
