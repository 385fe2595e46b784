"""GPU memory caps: decided by the parent (here), applied by each framework in the child
(:mod:`sweeper.child.capping`).

The options' ``per_gpu`` / ``memory_fraction`` / ``memory_growth`` are a
:class:`~sweeper.model.devices.MemoryPolicy` (parsed once, :mod:`sweeper.model.settings`), and
then environment variables of each slot. The child
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

from sweeper.model import contract
from sweeper.model.devices import MemoryPolicy, resolve  # noqa: F401 (the record and its rule, kept by name here)

#: The fork server's probe on a GPU (:mod:`sweeper.child.preload`) runs under this cap, MB.
PROBE_CAP_MB = 512


def trial_env(cap_mb: int, total_mb: int) -> dict[str, str]:
    """A trial's own cap under ``per_gpu="auto"`` (its slot's environment has none): MB for
    TensorFlow, the matching share of the card for JAX and PyTorch; each framework grows to
    it rather than taking it all at once (TensorFlow's allocator and JAX's preallocate their
    whole limit by default), so what NVML measures is what the trial needed, not its cap."""
    fraction = f"{min(1.0, cap_mb / total_mb):.6g}"
    return {contract.MEMORY_LIMIT_MB: str(cap_mb), contract.MEMORY_FRACTION: fraction,
            "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction, "XLA_CLIENT_MEM_FRACTION": fraction,
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
