"""Which parameters mattered: Optuna's fANOVA over a sweep's ``ok`` trials, grid or search
alike, computed in the parent from the results table (the ledger's rows).

Each parameter that varies among the ok trials (and that all of them have) becomes an
Optuna distribution as its values show it (:mod:`sweeper.results.studies`), each trial an Optuna
trial with the metric as its value, and
Optuna's :class:`~optuna.importance.FanovaImportanceEvaluator` (a seeded random forest:
the same table gives the same shares) tells what share of the metric's variance each
parameter explains, alone. Shown by ``python -m sweeper status --importance`` and in the
report; :func:`importance` for code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeper.errors import SweepError

if TYPE_CHECKING:
    import pandas

#: Fewer ok trials than this tell nothing about importance (a forest over four points).
MIN_TRIALS = 5
#: How the shares are computed, in the lines that show them.
METHOD = "fANOVA"


@dataclass(frozen=True)
class Importance:
    """Each varying parameter's share of the metric's variance, largest first (sums to 1)."""

    metric: str
    mode: str | None  #: None: a metric whose direction is unknown (the shares do not depend on it)
    trials: int  #: the ok trials with the metric that it was computed from
    shares: tuple[tuple[str, float], ...]  #: (parameter, share), the ``param_`` prefix dropped
    left_out: tuple[str, ...] = ()  #: parameters some of those trials lack: not compared

    def lines(self) -> list[str]:
        head = (f"which parameters mattered for {self.metric} ({METHOD} over {self.trials} ok trials; "
                "each one's share of the metric's variance):")
        width = max(len(name) for name, _ in self.shares)
        out = [head] + [f"  {name:<{width}}  {share:6.1%}  {'#' * round(share * 40)}" for name, share in self.shares]
        if self.left_out:
            out.append(f"  not compared (some trials lack them): {', '.join(self.left_out)}")
        return out


def importance(ok: "pandas.DataFrame", metric: str, mode: str | None) -> Importance:
    """Which parameters mattered: each one's share of ``metric``'s variance (Optuna's seeded fANOVA).

    Args:
        ok: the rows of a results table that finished ok (``df[df["status"] == "ok"]``).
        metric: the metric whose variance is shared out.
        mode: ``"min"``, ``"max"`` or None (the shares do not depend on it).

    Returns:
        An ``Importance``: ``shares`` (``(name, share)``, largest first, summing to 1), ``trials``.

    Raises:
        SweepError: under 5 ok trials, no parameter or metric that varies, or no Optuna: saying which.

    Example:
        A file ``mattered.py``::

            import sweeper.importance

            def train(params):
                return {"loss": params["lr"] * 10 + params["units"] / 1000}

            if __name__ == "__main__":
                df = sweeper.sweep(train, {"lr": [0.1, 0.01, 0.001], "units": [16, 32, 64]}, progress=False)
                found = sweeper.importance.importance(df[df["status"] == "ok"], "loss", "min")
                print(found.trials, found.shares[0][0], found.shares[0][1] > 0.9)

        ``python mattered.py`` prints::

            9 lr True
    """
    from sweeper.model.metrics import finite as number
    from sweeper.results.studies import frame_study, need_optuna, plain
    from sweeper.store.table import param_columns

    if metric not in ok.columns:
        raise SweepError(f"no trial has {metric!r}: importance needs the metric; give --metric")
    ok = ok[[number(v) is not None for v in ok[metric]]]
    if len(ok) < MIN_TRIALS:
        raise SweepError(f"which parameters mattered needs at least {MIN_TRIALS} ok trials with {metric}; "
                         f"there {'is' if len(ok) == 1 else 'are'} {len(ok)}")
    varying = [c for c in param_columns(ok) if len({repr(plain(v)) for v in ok[c]}) > 1]
    complete = [c for c in varying if ok[c].notna().all()]
    if not complete:
        raise SweepError(f"no parameter varies among the {len(ok)} ok trials"
                         + (" that all of them have" if varying else "") + ": nothing to compare")
    if len({number(v) for v in ok[metric]}) < 2:
        raise SweepError(f"{metric} is the same in all {len(ok)} ok trials: no parameter made a difference to it")
    optuna = need_optuna("which parameters mattered", sklearn=True)  # fANOVA's forest is scikit-learn's
    try:
        shares = optuna.importance.get_param_importances(
            frame_study(optuna, ok, complete, metric, mode),
            evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0), normalize=True)
    except Exception as exc:  # noqa: BLE001 - Optuna's or the forest's refusal (extreme values): one line
        raise SweepError(f"which parameters mattered cannot be told from these trials: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    ordered = sorted(((str(k), float(v)) for k, v in shares.items()), key=lambda kv: (-kv[1], kv[0]))
    return Importance(metric, mode, len(ok), tuple(ordered),
                      tuple(c[len("param_"):] for c in varying if c not in complete))
