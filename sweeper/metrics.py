"""Kept for the documented names ``sweeper.metrics.MINIMISED`` and ``MAXIMISED``; they live in
:mod:`sweeper.model.metrics`."""

from sweeper.model.metrics import MAXIMISED, MINIMISED

__all__ = ["MAXIMISED", "MINIMISED"]
