"""GPU memory caps: decided by the parent (here), applied by each framework in the child
(:mod:`sweeper.child.capping`).

The parent turns ``per_gpu`` / ``memory_fraction`` / ``memory_growth`` into a
:class:`MemoryPolicy` and then into environment variables of each slot. The child
applies them with the framework's own API *before the framework touches the GPU*:

* TensorFlow: ``tf.config.set_logical_device_configuration(gpu,
  [LogicalDeviceConfiguration(memory_limit=MB)])`` (TF2 has no fraction option, and it
  raises once the GPU is initialised), or ``set_memory_growth`` for growth;
* JAX: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` for
  growth), read when JAX starts its GPU backend;
* PyTorch: ``torch.cuda.set_per_process_memory_fraction``.

The child applies a framework's cap the moment that framework is imported (see
:mod:`sweeper.child.imports`), so it holds whichever Keras backend or framework the trial
uses, including one imported inside ``train``. Command trials get the same through
``sweeper.worker.setup()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.errors import SweepError
from sweeper.model import contract

#: Share of a card left unclaimed when the fraction follows from ``per_gpu``.
MARGIN = 0.95
#: ``per_gpu="auto"``: at most this many trials share a card (the slots made per card);
#: how many run there is decided by memory (:mod:`sweeper.placement.packing`).
AUTO_PER_GPU = 8
#: The fork server's probe on a GPU (:mod:`sweeper.child.preload`) runs under this cap, MB.
PROBE_CAP_MB = 512


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


def trial_env(cap_mb: int, total_mb: int) -> dict[str, str]:
    """A trial's own cap under ``per_gpu="auto"`` (its slot's environment has none): MB for
    TensorFlow, the matching share of the card for JAX and PyTorch; each framework grows to
    it rather than taking it all at once (TensorFlow's allocator and JAX's preallocate their
    whole limit by default), so what NVML measures is what the trial needed, not its cap."""
    fraction = f"{min(1.0, cap_mb / total_mb):.6g}"
    return {contract.MEMORY_LIMIT_MB: str(cap_mb), contract.MEMORY_FRACTION: fraction,
            "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction, "XLA_CLIENT_MEM_FRACTION": fraction,
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


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
