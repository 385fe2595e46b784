"""What a sweep asks of the GPUs, as records: which GPUs (:class:`GpuSelection`, from the
``gpus`` option) and how each trial's memory is capped there (:class:`MemoryPolicy`, from
``per_gpu``, ``memory_fraction`` and ``memory_growth``). Pure rules: what the machine has is
:mod:`sweeper.system.gpus`'s, the caps' variables are applied by :mod:`sweeper.child.capping`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from sweeper.errors import SweepError
from sweeper.model import contract

#: Share of a card left unclaimed when the fraction follows from ``per_gpu``.
MARGIN = 0.95
#: ``per_gpu="auto"``: at most this many trials share a card (the slots made per card);
#: how many run there is decided by memory (:mod:`sweeper.placement.packing`).
AUTO_PER_GPU = 8

#: The words ``gpus`` takes besides ids.
GpuWord = Literal["all", "none", "free"]


def parse_gpus(gpus: str | int | Iterable[int | str] | None) -> str | list[str]:
    """Normalise the ``gpus`` option to ``"all"``, ``"none"``, ``"free"`` or a list of ids."""
    if gpus is None:
        return "all"
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        return [str(gpus)]
    if isinstance(gpus, bool):
        raise SweepError(f"gpus is {gpus!r}; give 'all', 'none', 'free', or ids such as 0,2")
    if isinstance(gpus, str):
        word = gpus.strip().lower()
        if word in ("all", "none", "free"):
            return word
        ids = [p.strip() for p in gpus.split(",") if p.strip()]
    else:
        try:
            ids = [str(g).strip() for g in gpus]
        except TypeError:
            raise SweepError(f"gpus is {gpus!r}; give 'all', 'none', 'free', or ids such as 0,2") from None
    if not ids:
        raise SweepError("gpus is empty; give 'all', 'none', 'free', or ids such as 0,2")
    for gid in ids:
        if not (gid.isdigit() or gid.startswith(("GPU-", "MIG-"))):
            raise SweepError(f"gpus has {gid!r}, not a GPU index or UUID; give e.g. --gpus 0,2 or --gpus none")
    if len(set(ids)) != len(ids):
        raise SweepError(f"gpus lists a GPU twice ({','.join(ids)}); use --per-gpu to run several trials on one")
    return ids


@dataclass(frozen=True)
class GpuSelection:
    """The ``gpus`` option parsed: a word (``all``, ``none``, ``free``) or GPU ids (indices
    or UUIDs), each once."""

    word: GpuWord | None = "all"  #: None: the ids
    ids: tuple[str, ...] = ()
    default: bool = True  #: none given (``all``, by default)

    @classmethod
    def of(cls, gpus: str | int | Iterable[int | str] | None) -> "GpuSelection":
        parsed = parse_gpus(gpus)
        if isinstance(parsed, list):
            return cls(None, tuple(parsed), default=False)
        word: GpuWord = "none" if parsed == "none" else "free" if parsed == "free" else "all"
        return cls(word, default=gpus is None)

    @property
    def none(self) -> bool:
        """The CPU only (``gpus="none"``)."""
        return self.word == "none"

    @property
    def asked(self) -> bool:
        """GPUs asked for by name (a cluster's scheduler is then asked for them): given, and not ``none``."""
        return not self.default and not self.none

    @property
    def chosen(self) -> str | list[str]:
        """As :func:`sweeper.placement.slots.choose_gpus` takes it: the word, or the ids."""
        return self.word if self.word is not None else list(self.ids)


@dataclass(frozen=True)
class MemoryPolicy:
    per_gpu: int
    fraction: float | None  #: of the card's total memory; None with growth or auto
    growth: bool = False
    #: ``per_gpu="auto"``: each trial's cap is set when it starts, from the memory it is
    #: predicted to need (:mod:`sweeper.placement.packing`); ``per_gpu`` is then the most per card
    auto: bool = False

    def limit_mb(self, total_mb: int | None) -> int | None:
        if self.fraction is None or not total_mb:
            return None
        return int(self.fraction * total_mb)

    def env(self, total_mb: int | None) -> dict[str, str]:
        """Variables a slot's process starts with; JAX and the child's caps read them."""
        env: dict[str, str] = {}
        if self.auto:  # the cap comes with the trial: TensorFlow's is applied then, not at import
            env[contract.MEMORY_AUTO] = "1"
        if self.growth:
            env.update({contract.MEMORY_GROWTH: "1", "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                        "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
        if self.fraction is not None:
            env.update({contract.MEMORY_FRACTION: f"{self.fraction:.6g}",
                        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{self.fraction:.6g}"})
            limit = self.limit_mb(total_mb)
            if limit is not None:
                env[contract.MEMORY_LIMIT_MB] = str(limit)
        return env


def resolve(per_gpu: int | str | None, fraction: float | None, growth: bool) -> MemoryPolicy:
    """Fill in whichever of ``per_gpu`` and ``memory_fraction`` was not given.

    ``k = int(1 / f)`` (as many trials as whole shares fit); ``f = 0.95 / k`` leaving a margin.
    ``per_gpu="auto"``: caps per trial, from what each is predicted to need.
    """
    if per_gpu == "auto":
        if fraction is not None or growth:
            raise SweepError("per_gpu='auto' sets each trial's cap from the memory it needs; drop "
                             f"{'memory_fraction' if fraction is not None else 'memory_growth'} "
                             "(or give per_gpu a number)")
        return MemoryPolicy(AUTO_PER_GPU, None, auto=True)
    if isinstance(per_gpu, str):
        raise SweepError(f"per_gpu must be a whole number >= 1 or 'auto', got {per_gpu!r}")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise SweepError(f"memory_fraction must be in (0, 1], got {fraction!r}; e.g. --memory-fraction 0.3")
        if growth:
            raise SweepError("memory_growth and memory_fraction both given; choose one "
                             "(growth lets each trial take what it needs, a fraction caps it)")
    if fraction is not None and per_gpu is not None and fraction * per_gpu > 1 + 1e-9:
        raise SweepError(
            f"--memory-fraction {fraction:g} with --per-gpu {per_gpu} asks for {fraction * per_gpu:g} "
            f"of each GPU; lower one of them (e.g. --per-gpu {max(1, int(1 / fraction))})"
        )
    if fraction is not None:
        return MemoryPolicy(per_gpu or max(1, int(1 / fraction + 1e-9)), float(fraction))
    k = per_gpu or 1
    return MemoryPolicy(k, None if growth else MARGIN / k, growth)
