"""Amounts as users write them: a duration (``90``, ``10m``, ``1.5h``) in seconds, a size
(``6GB``, ``512MB``, ``6000``) in MB; each a one-line error otherwise."""

from __future__ import annotations

from typing import Any

from sweeper.errors import SweepError

#: What a duration's unit means in seconds: ``90``, ``90s``, ``10m``, ``1.5h``, ``2d``.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(value: Any, name: str = "a duration") -> float:
    """Seconds from a number or a text such as ``"10m"`` (units: s, m, h, d); a one-line
    error otherwise (this is also the CLI's type for such flags)."""
    text = str(value).strip().lower()
    number, unit = (text[:-1], text[-1]) if text[-1:] in UNITS else (text, "s")
    try:
        seconds = float(number) * UNITS[unit]
    except ValueError:
        seconds = float("nan")
    if isinstance(value, bool) or not seconds > 0 or seconds == float("inf"):
        raise SweepError(f"{name} must be a positive number of seconds or a duration such as 90s, 10m, 1.5h "
                         f"or 2d, got {value!r}")
    return seconds


#: What a size's unit means in MB: ``6GB``, ``6000MB``, ``6g``, ``512m``, ``1.5TB``; a bare number is MB.
SIZES = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 ** 2}


def megabytes(value: Any, name: str = "a memory size") -> int:
    """MB from a number (MB) or a text such as ``"6GB"`` (units K, M, G, T, with or without
    B or iB; powers of 1024, as nvidia-smi counts); a one-line error otherwise."""
    text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = (text[:-1], text[-1]) if text[-1:] in SIZES else (text, "m")
    try:
        mb = float(number) * SIZES[unit]
    except ValueError:
        mb = float("nan")
    if isinstance(value, bool) or not 0 < mb < float("inf"):
        raise SweepError(f"{name} must be a positive size such as 6GB, 512MB or 6000 (MB), got {value!r}")
    return max(1, round(mb))
