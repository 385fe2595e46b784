"""Kept for the documented path ``sweeper.analysis.figures``; the report lives in :mod:`sweeper.results.report`."""

from sweeper.results.report import figures

__all__ = ["figures"]
