"""The values a point may hold: a parameter's value as plain JSON data (scalars, lists of
them), or one line naming the parameter (:func:`normalise_value`); numpy scalars and arrays
are read without importing numpy.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.text import CONTROL, printable

_STORABLE = "use JSON scalars (str, int, float, bool, None) or lists of them"


def is_numpy(value: object) -> bool:
    """Tell whether ``value`` is a numpy object, without importing numpy."""
    return type(value).__module__.split(".")[0] == "numpy"


def is_numpy_scalar(value: object) -> bool:
    """Tell whether ``value`` is a numpy scalar or 0-d array."""
    return is_numpy(value) and hasattr(value, "item") and getattr(value, "ndim", None) == 0


def type_name(value: object) -> str:
    """Return the bare class name of ``value`` for messages."""
    return type(value).__name__


def is_numpy_array(value: object) -> bool:
    """Tell whether ``value`` is a numpy array with at least one dimension."""
    return is_numpy(value) and hasattr(value, "tolist") and (getattr(value, "ndim", 0) or 0) >= 1


def _hint(value: object) -> str:
    """Suggest how to turn an unstorable ``value`` into a storable one."""
    if callable(getattr(value, "rvs", None)):
        return "distributions only work with sample(); for a grid list the values"
    if isinstance(value, Mapping):
        return "split it into separate parameters"
    if isinstance(value, (set, frozenset)):
        return "give a sorted list instead"
    if isinstance(value, (bytes, bytearray)):
        return "decode it to str"
    if is_numpy_array(value):
        return "convert it with .tolist()"
    return "e.g. its name as a string"


def unstorable(name: str, value: object) -> SweepError:
    """Build the error for a value of a type that cannot be stored."""
    return SweepError(
        f"parameter {name!r} has a value of type {type_name(value)} that cannot be stored; "
        f"{_STORABLE}, {_hint(value)}"
    )


def normalise_value(value: Any, name: str) -> Any:
    """Return ``value`` as plain JSON data, or raise SweepError naming ``name``.

    numpy scalars become Python scalars, tuples become lists, subclasses of
    str/int/float (e.g. enums) become the plain type. nan and inf are refused.
    """
    if value is None or type(value) is bool:
        return value
    if is_numpy_scalar(value):
        item = value.item()
        if is_numpy(item):  # np.longdouble and the like: no Python type of their own
            item = float(item) if isinstance(item, numbers.Real) else str(item)
        if isinstance(item, float) and getattr(getattr(value, "dtype", None), "itemsize", 8) < 8:
            item = float(str(value))  # np.float32(0.1) is the 0.1 it was written as, not 0.10000000149011612
        return normalise_value(item, name)
    if is_numpy_array(value):  # a list-valued candidate given as an array
        return [normalise_value(item, name) for item in value]
    if isinstance(value, str):
        if CONTROL.search(value):
            raise SweepError(
                f"parameter {name!r} has the value '{printable(value)}' with control characters, "
                "which would garble folder names, logs and the CSV; remove them"
            )
        return str.__str__(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SweepError(
                f"parameter {name!r} has the value {value!r}, which cannot be stored; "
                "use a finite number, or None for 'not set'"
            )
        return float(value)
    if isinstance(value, (list, tuple)):
        return [normalise_value(item, name) for item in value]
    raise unstorable(name, value)


def fresh(value: Any) -> Any:
    """Copy the lists inside a normalised value so points share no lists."""
    if isinstance(value, list):
        return [fresh(item) for item in value]
    return value
