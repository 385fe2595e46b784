"""The one exception type sweeper raises for bad input.

Every message names the problem and what to do about it, on one line, so the
CLI can print it as it is and exit with status 2.
"""

from __future__ import annotations


class SweepError(Exception):
    """Bad input or an impossible request, found before or while a sweep runs.

    Raised by :func:`sweeper.sweep`, :func:`sweeper.sample` and the grid and
    option checks, before any trial runs where it can be found then (the command
    line prints it and exits with status 2).

    Attributes:
        args: one item, the message: one line saying what is wrong, then how to fix it.

    Example:
        >>> import sweeper
        >>> try:
        ...     sweeper.sample({"lr": [0.1, 0.01]}, 0)
        ... except sweeper.SweepError as error:
        ...     print(error)
        n must be a positive int (the number of points), got 0; e.g. n=20
    """
