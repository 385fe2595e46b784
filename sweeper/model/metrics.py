"""Turning what ``train`` returned into a row's metrics: plain numbers under safe names.

How a trial ended (its status) is judged in :mod:`sweeper.model.outcome`, not here."""

from __future__ import annotations

import difflib
import math
import numbers
import re
from typing import Any, Iterable, Mapping

from sweeper.errors import SweepError
from sweeper.model.text import CONTROL, printable
from sweeper.model.trial import RESULT_COLUMNS

#: The results table's own columns (from :class:`sweeper.model.trial.TrialResult`'s fields): a
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


#: Metric names whose direction is beyond doubt: Keras's and scikit-learn's own, and a few
#: common ones. Nothing else is guessed (``accuracy_drop``, ``time_to_accuracy``,
#: ``1-accuracy``: which way is better is the user's to say, with ``mode``).
MINIMISED = frozenset({
    "loss", "error", "error_rate", "mse", "mae", "rmse", "mape", "msle", "rmsle", "nll", "perplexity", "ppl",
    "wer", "cer", "fid", "mean_squared_error", "mean_absolute_error", "root_mean_squared_error",
    "mean_absolute_percentage_error", "mean_squared_logarithmic_error", "mean_squared_log_error",
    "root_mean_squared_log_error", "median_absolute_error", "mean_poisson_deviance", "mean_gamma_deviance",
    "log_loss", "brier_score", "brier_score_loss", "hinge_loss", "zero_one_loss", "hamming_loss",
    "negative_likelihood_ratio", "binary_crossentropy", "categorical_crossentropy",
    "sparse_categorical_crossentropy", "binary_focal_crossentropy", "categorical_focal_crossentropy",
    "kl_divergence", "kullback_leibler_divergence", "kld", "poisson", "hinge", "squared_hinge",
    "categorical_hinge", "logcosh", "log_cosh", "log_cosh_error", "huber", "huber_loss", "false_positives",
    "false_negatives",
})
_AVERAGED = ("", "_macro", "_micro", "_weighted", "_samples", "_binary")
MAXIMISED = frozenset({
    "accuracy", "acc", "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
    "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "top_k_accuracy", "balanced_accuracy",
    "top1", "top5", "top1_accuracy", "top5_accuracy", "top_1_accuracy", "top_5_accuracy",
    "auc", "roc_auc", "roc_auc_ovr", "roc_auc_ovo", "roc_auc_ovr_weighted", "roc_auc_ovo_weighted", "pr_auc",
    "average_precision", "map", "ndcg", "mrr", "f1_score", "fbeta_score", "r2", "r2_score", "explained_variance",
    "iou", "mean_iou", "binary_iou", "one_hot_iou", "one_hot_mean_iou", "dice", "bleu", "psnr", "ssim",
    "true_positives", "true_negatives", "precision_at_recall", "recall_at_precision",
    "sensitivity_at_specificity", "specificity_at_sensitivity", "matthews_corrcoef",
    "positive_likelihood_ratio", "adjusted_rand_score", "rand_score", "adjusted_mutual_info_score",
    "mutual_info_score", "normalized_mutual_info_score", "homogeneity_score", "completeness_score",
    "v_measure_score", "fowlkes_mallows_score", "d2_absolute_error_score", "d2_log_loss_score", "score",
    "reward", "episode_reward", "mean_reward",
    *(w + how for w in ("f1", "precision", "recall", "jaccard") for how in _AVERAGED),
})
#: Prefixes that name where a metric was measured, not what it is (one of them, once).
_SPLITS = ("val_", "train_", "test_", "validation_", "training_")
_KERAS_COPY = re.compile(r"_\d+$")  # Keras names a second AUC metric auc_1


def direction(name: str) -> str | None:
    """``"max"`` or ``"min"`` where a metric's name says it beyond doubt, else None.

    The name (any case) is one of :data:`MINIMISED` or :data:`MAXIMISED`, perhaps after
    one of ``val_``, ``train_``, ``test_`` and before Keras's ``_1`` for a second copy:
    ``val_loss`` min, ``val_accuracy`` and ``test_f1_macro`` max. scikit-learn's negated
    scores, ``neg_`` before a minimised name (``neg_mean_squared_error``, ``neg_log_loss``),
    are maximised. Any other name is None, never a guess: ``accuracy_drop``,
    ``one_minus_accuracy``, ``time_to_accuracy``, ``dense_1_loss``.
    """
    word = name.lower()
    for split in _SPLITS:
        if word.startswith(split):
            word = word[len(split):]
            break
    if word not in MINIMISED and word not in MAXIMISED:
        word = _KERAS_COPY.sub("", word)
    negated = word.startswith("neg_")
    if negated:
        word = word[len("neg_"):]
        return "max" if word in MINIMISED else None
    if word in MINIMISED:
        return "min"
    return "max" if word in MAXIMISED else None


def _known() -> list[str]:
    """The names :func:`direction` knows as a user writes them: each alone and after ``val_``,
    ``train_``, ``test_``, ... (:data:`_SPLITS`)."""
    return [split + word for word in sorted(MINIMISED | MAXIMISED) for split in ("", *_SPLITS)]


def nearest_known(name: str) -> str | None:
    """The known metric name ``name`` is a typo of (``val_los``, ``val_acuracy``): a close one
    (difflib) a few letters away (one per six, at least one); None for a name like no known
    one, the user's own metric (``time_to_accuracy`` is not ``test_accuracy``)."""
    word = name.lower()
    for near in difflib.get_close_matches(word, _known(), n=3, cutoff=0.8):
        if _edits(word, near) <= max(1, len(word) // 6):
            return near
    return None


def _edits(a: str, b: str) -> int:
    """The letters to insert, delete or change to turn ``a`` into ``b`` (Levenshtein)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def nearest(name: str, among: Iterable[str]) -> str | None:
    """The name in ``among`` closest to ``name`` (in any case), where one is close, else None."""
    names = {n.lower(): n for n in among}
    near = difflib.get_close_matches(name.lower(), list(names), n=1)
    return names[near[0]] if near else None


def default_metric(names: Iterable[str]) -> tuple[str, str] | None:
    """The metric to rank by when none is named, and why, in words; None without metrics.

    A validation metric where there is one: the first metric if it is one (``val_*``),
    else ``val_loss``, else the first ``val_*`` whose direction is known; else the first
    metric (what ``train`` returned first). A Keras ``History`` lists its training metrics
    first (``accuracy``, ``loss``, then ``val_accuracy``, ``val_loss``): it is ranked by
    ``val_loss``.
    """
    names = list(names)
    if not names:
        return None
    validation = [n for n in names if n.lower().startswith(("val_", "validation_"))]
    if names[0] in validation:
        return names[0], "the validation loss" if names[0] == "val_loss" else "the first metric"
    if "val_loss" in names:
        return "val_loss", "the validation loss"
    known = [n for n in validation if direction(n) is not None]
    if known:
        return known[0], "a validation metric"
    return names[0], "the first metric"


def unknown_direction(metric: str) -> SweepError:
    return SweepError(
        f"sweeper cannot tell from its name whether a higher or a lower {metric!r} is better; "
        "give --mode max or --mode min (mode='max' or 'min')"
    )
