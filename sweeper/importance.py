"""Kept for the documented path ``sweeper.importance.importance``; it lives in :mod:`sweeper.results.importance`."""

from sweeper.results.importance import importance

__all__ = ["importance"]
