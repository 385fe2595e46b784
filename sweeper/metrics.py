"""Turning what ``train`` returned into a row's metrics: plain numbers under safe names.

How a trial ended (its status) is judged in :mod:`sweeper.outcome`, not here."""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

from .text import CONTROL, printable
from .trial import RESULT_COLUMNS

#: The results table's own columns (from :class:`sweeper.trial.TrialResult`'s fields): a
#: metric may not take one of these names.
RESERVED = frozenset(RESULT_COLUMNS)

class BadResult(ValueError):
    """``fn`` returned something that is not a mapping of metric names to numbers."""


def number_of(name: str, value: Any) -> int | float:
    """A metric value as a plain Python ``int`` or ``float``, whatever numeric type it came as.

    NumPy scalars and 0-d arrays, framework scalars with ``.item()`` (PyTorch, JAX), scalar
    tensors (``float(t)``) and subclasses of ``int``/``float`` (``np.float64`` is one) all
    become the plain type: a subclass would be stored as its repr (``np.float64(0.6)``) and
    one defined in the user's module could not even be unpickled in the parent.
    """
    if isinstance(value, bool):
        return int(value)
    if type(value) is int or type(value) is float:
        return value
    if isinstance(value, (str, bytes)) or value is None:
        raise BadResult(
            f"metric {name!r} is {type(value).__name__} {value!r}, not a number; "
            "return numbers only (put text in the trial's log or folder)"
        )
    if isinstance(value, numbers.Integral):  # every NumPy int width too
        return int(value)
    if isinstance(value, numbers.Real):  # float subclasses, every NumPy float width (longdouble too)
        return float(value)
    if isinstance(value, numbers.Complex):  # complex and NumPy complex: float() would drop the imaginary part
        raise _complex(name, value)
    item = getattr(value, "item", None)
    if callable(item):  # NumPy 0-d arrays, torch and JAX scalars
        try:
            plain = item()
        except Exception:  # noqa: BLE001 - not a one-element value; try float() below
            plain = None
        if isinstance(plain, numbers.Complex) and not isinstance(plain, numbers.Real):
            raise _complex(name, value)
        if isinstance(plain, numbers.Number) and type(plain) is not type(value):
            return number_of(name, plain)
    try:  # scalar tensors (TensorFlow) and other types that define __float__
        number = float(value)
    except (TypeError, ValueError):
        raise BadResult(
            f"metric {name!r} is a {type(value).__name__}, not a number; "
            "return plain numbers, e.g. float(history.history['val_accuracy'][-1])"
        ) from None
    return number


def finite(value: Any) -> float | None:
    """A value as a finite float, else None: text (a number stored as text is no number),
    a bool, None, NaN, infinity, or anything ``float()`` refuses."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _complex(name: str, value: Any) -> BadResult:
    return BadResult(f"metric {name!r} is the complex number {value!r}; return a real number, e.g. abs(z) "
                     "or z.real")


#: history.csv's own columns: never a reported metric's name.
HISTORY_COLUMNS = ("trial_id", "trial", "epoch")


def check_metric_name(name: Any, final: bool = True) -> str:
    """A metric name that can be a column: a non-empty string without control characters,
    none of the results table's own columns for a final metric, none of history.csv's for
    a per-epoch report."""
    if not isinstance(name, str) or not name:
        raise BadResult(f"metric name {name!r} is not a non-empty string; name each metric")
    if CONTROL.search(name):
        raise BadResult(f"metric name '{printable(name)}' holds control characters; use a plain name")
    if final and (name in RESERVED or name.startswith("param_")) or not final and name in HISTORY_COLUMNS:
        raise BadResult(
            f"metric {name!r} clashes with the table's own column of that name; rename it"
        )
    return name


def normalise(value: Any) -> dict[str, int | float]:
    """Metrics as plain Python numbers, from a mapping or a Keras ``History``.

    Raises:
        BadResult: with a message saying what was returned and what is expected.
    """
    history = getattr(value, "history", None)
    if isinstance(history, Mapping) and not isinstance(value, Mapping):
        value = {k: v[-1] for k, v in history.items() if len(v)}
    if not isinstance(value, Mapping):
        what = "None (no return statement?)" if value is None else type(value).__name__
        raise BadResult(
            f"train returned {what}; return a dict of metric names to numbers, "
            "e.g. {'val_accuracy': 0.93}, or the History from model.fit"
        )
    metrics: dict[str, int | float] = {}
    for name, number in value.items():
        metrics[check_metric_name(name)] = number_of(name, number)
    return metrics


def epochs_of(value: Any) -> list[dict[str, Any]]:
    """The per-epoch rows of a Keras ``History`` (epochs counted from 1); [] for anything else."""
    history = getattr(value, "history", None)
    if not isinstance(history, Mapping) or isinstance(value, Mapping):
        return []
    rows: list[dict[str, Any]] = []
    for name, values in history.items():
        for i, v in enumerate(values):
            if len(rows) <= i:
                rows.append({"epoch": i + 1, "metrics": {}})
            try:
                rows[i]["metrics"][str(name)] = float(number_of(str(name), v))
            except (TypeError, ValueError):  # BadResult too: not a real number
                pass
    return rows


#: Words that end a metric's name, as Keras and KerasTuner rank them: a loss or an error
#: is minimised, a score maximised. ``val_``, ``test_`` and the like are prefixes only.
_MIN_WORDS = frozenset({
    "loss", "error", "err", "mse", "mae", "rmse", "mape", "msle", "rmsle", "perplexity", "ppl",
    "crossentropy", "entropy", "hinge", "logcosh", "kld", "divergence", "poisson", "wer", "cer",
    "fid", "nll", "brier", "regret", "latency", "time", "distance",
})
_MAX_WORDS = frozenset({
    "accuracy", "acc", "auc", "precision", "recall", "f1", "fbeta", "f1score", "iou", "miou", "r2",
    "score", "map", "ap", "ndcg", "mrr", "reward", "return", "dice", "bleu", "rouge", "psnr", "ssim",
    "top1", "top5", "top", "hit", "hits", "coverage", "correlation", "spearman", "pearson", "kappa",
    "similarity",
})
_MIN_WORDS = _MIN_WORDS | {"cosh"}
#: Words after the metric's own that qualify it without changing its direction (f1_macro).
_QUALIFIERS = frozenset({"macro", "micro", "weighted", "samples", "mean", "avg", "average", "overall",
                         "final", "best", "last", "epoch", "k"})


def direction(name: str) -> str | None:
    """``"max"`` or ``"min"`` for a metric's name as Keras and KerasTuner rank it, or None.

    The name's last word decides (after qualifiers such as ``macro`` or ``mean`` and
    numbers): ``val_loss``, ``mean_squared_error`` and ``val_perplexity`` are minimised;
    ``val_accuracy``, ``val_auc``, ``f1``, ``f1_macro``, ``r2``, ``top_5`` and
    ``episode_reward`` are maximised. A name whose last word is neither, such as
    ``accuracy_drop`` or ``reward_std``, is unknown (None): never a guess.
    """
    import re as _re

    words = [w for w in _re.split(r"[^a-z0-9]+", _re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
             if w and not w.isdigit()]
    while len(words) > 1 and words[-1] in _QUALIFIERS:
        words.pop()
    if not words:
        return None
    word = words[-1]
    if word in _MIN_WORDS or word.endswith(("loss", "error", "crossentropy")):
        return "min"
    if word in _MAX_WORDS or word.endswith(("accuracy", "score")) or _re.fullmatch(r"top\d+", word):
        return "max"
    return None
