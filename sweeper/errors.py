"""The one exception type sweeper raises for bad input.

Every message names the problem and what to do about it, on one line, so the
CLI can print it as it is and exit with status 2.
"""

from __future__ import annotations


class SweepError(Exception):
    """Bad input or an impossible request, found before or while a sweep runs.

    Raised by :func:`sweeper.sweep`, :func:`sweeper.sample` and the grid and
    option checks. The message is one line: what is wrong, then how to fix it.
    """
