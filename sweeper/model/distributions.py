"""The distributions a space may draw from (``uniform``, ``loguniform``, ``randint``),
named and called like scipy.stats' (``rvs(size, random_state)``), so a scipy distribution
works in their place (:class:`sweeper.model.space.Space` draws from either); each value
drawn is a plain Python number.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.values import is_numpy_scalar


def _generator(random_state: Any) -> Any:
    """Return a numpy Generator or RandomState for ``random_state``.

    None gives a freshly seeded Generator, an int seeds a new Generator, and
    a Generator or RandomState is used as it is.
    """
    import numpy as np

    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        return random_state
    if random_state is None or (
        isinstance(random_state, numbers.Integral)
        and not isinstance(random_state, bool)
        and int(random_state) >= 0
    ):
        return np.random.default_rng(None if random_state is None else int(random_state))
    raise SweepError(
        "random_state must be None, a non-negative int, a numpy Generator or RandomState, "
        f"got {random_state!r}; e.g. random_state=0"
    )


def _integers(gen: Any, low: int, high: int, size: Any) -> Any:
    """Integers in [low, high) from a Generator or a RandomState."""
    if hasattr(gen, "integers"):
        return gen.integers(low, high, size=size)
    return gen.randint(low, high, size=size)


def _half_open(values: Any, low: float, high: float, size: Any) -> Any:
    """Clip float draws into [low, high) and return a float when ``size`` is None."""
    import numpy as np

    clipped = np.clip(values, low, np.nextafter(high, low))
    return float(clipped) if size is None else clipped


def _real(dist: str, label: str, value: Any) -> float:
    """Return a distribution bound as a finite float, else raise SweepError."""
    if is_numpy_scalar(value):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise SweepError(
            f"{dist} bound {label}={value!r} must be a finite number; e.g. {dist}(0.001, 0.1)"
        )
    return float(value)


def _integer(label: str, value: Any) -> int:
    """Return a randint bound as an int, else raise SweepError."""
    if is_numpy_scalar(value):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SweepError(f"randint bound {label}={value!r} must be an int; e.g. randint(1, 5)")
    return int(value)


@dataclass(frozen=True)
class uniform:  # noqa: N801 - named like scipy.stats distributions
    """Continuous uniform distribution on ``[low, high)``, for :func:`sweeper.sample` or a search.

    The arguments are the bounds, unlike ``scipy.stats.uniform(loc, scale)``:
    ``uniform(0.1, 0.5)`` is ``scipy.stats.uniform(0.1, 0.4)``.

    Args:
        low: the smallest value, a finite number.
        high: the bound above every value (excluded), greater than ``low``.

    Raises:
        SweepError: a bound that is not a finite number, or ``low >= high``.

    Example:
        >>> import sweeper
        >>> dropout = sweeper.uniform(0.0, 0.5)
        >>> round(dropout.rvs(random_state=0), 4)
        0.3185
        >>> sweeper.uniform(0.5, 0.1)
        Traceback (most recent call last):
        ...
        sweeper.errors.SweepError: uniform(low=0.5, high=0.1) needs low < high; give the smaller bound first, e.g. uniform(0.0, 0.5)
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        """Check and store the bounds as floats."""
        low, high = _real("uniform", "low", self.low), _real("uniform", "high", self.high)
        if not low < high:
            raise SweepError(
                f"uniform(low={low!r}, high={high!r}) needs low < high; "
                "give the smaller bound first, e.g. uniform(0.0, 0.5)"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def rvs(self, size: Any = None, random_state: Any = None) -> Any:
        """Draw a float (``size`` None) or an array of floats of shape ``size``."""
        gen = _generator(random_state)
        return _half_open(gen.uniform(self.low, self.high, size=size), self.low, self.high, size)


@dataclass(frozen=True)
class loguniform:  # noqa: N801 - named like scipy.stats distributions
    """Log-uniform distribution on ``[low, high)``: each decade equally likely (a learning rate's).

    Same arguments as ``scipy.stats.loguniform(a, b)``.

    Args:
        low: the smallest value, a finite number above 0.
        high: the bound above every value (excluded), greater than ``low``.

    Raises:
        SweepError: a bound that is not a finite number, or not ``0 < low < high``.

    Example:
        >>> import sweeper
        >>> lr = sweeper.loguniform(1e-4, 1e-1)
        >>> round(lr.rvs(random_state=0), 5)
        0.00814
        >>> lr.rvs(size=2, random_state=1).round(5).tolist()
        [0.00343, 0.07102]
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        """Check and store the bounds as floats."""
        low, high = _real("loguniform", "low", self.low), _real("loguniform", "high", self.high)
        if not 0 < low < high:
            raise SweepError(
                f"loguniform(low={low!r}, high={high!r}) needs 0 < low < high; "
                "give two positive bounds, smaller first, e.g. loguniform(1e-4, 1e-1)"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def rvs(self, size: Any = None, random_state: Any = None) -> Any:
        """Draw a float (``size`` None) or an array of floats of shape ``size``."""
        import numpy as np

        gen = _generator(random_state)
        logs = gen.uniform(math.log(self.low), math.log(self.high), size=size)
        return _half_open(np.exp(logs), self.low, self.high, size)


@dataclass(frozen=True)
class randint:  # noqa: N801 - named like scipy.stats distributions
    """Uniform integer distribution on ``[low, high)`` (``high`` excluded).

    Same arguments as ``scipy.stats.randint`` and NumPy's ``integers``: ``randint(1, 4)``
    gives 1, 2 or 3.

    Args:
        low: the smallest value, an int.
        high: the bound above every value (excluded), greater than ``low``.

    Raises:
        SweepError: a bound that is not an int, or ``low >= high``.

    Example:
        >>> import sweeper
        >>> layers = sweeper.randint(1, 5)
        >>> layers.rvs(random_state=0), layers.rvs(size=4, random_state=0).tolist()
        (4, [4, 3, 3, 2])
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        """Check and store the bounds as ints."""
        low, high = _integer("low", self.low), _integer("high", self.high)
        if not low < high:
            raise SweepError(
                f"randint(low={low!r}, high={high!r}) needs low < high (high is excluded); "
                "e.g. randint(1, 5) for 1 to 4"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def rvs(self, size: Any = None, random_state: Any = None) -> Any:
        """Draw an int (``size`` None) or an array of ints of shape ``size``."""
        values = _integers(_generator(random_state), self.low, self.high, size)
        return int(values) if size is None else values
