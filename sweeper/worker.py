"""For scripts run as command trials: ``import sweeper.worker; sweeper.worker.setup()``.

The trial process itself lives in :mod:`sweeper.child` (bootstrap, caps and seeds on
import); this module keeps the name command scripts use.
"""

from __future__ import annotations

from sweeper.child.bootstrap import setup

__all__ = ["setup"]
