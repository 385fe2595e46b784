"""The trial a process is running, for code inside ``fn``."""

from __future__ import annotations

from .trial import TrialSpec

_current: TrialSpec | None = None


def current_trial() -> TrialSpec | None:
    """The running trial's spec (id, name, folder, seed, device, params), or None outside one.

    Call it from inside ``fn`` to find the folder for checkpoints::

        ckpt = os.path.join(sweeper.current_trial().dir, "model.keras")
    """
    return _current


def _set(spec: TrialSpec | None) -> None:
    global _current
    _current = spec
