"""Pruning that waits until rankings settle (``prune="asha(min_resource='auto')"``, and the
same for hyperband, median and percentile warm-ups), and no trial pruned at its last epoch:
the rule on curves, the pruner's text, and a search told trials one by one (in process)."""

from __future__ import annotations

import pytest

import sweeper
from sweeper.errors import SweepError
from sweeper.model.trial import Status, TrialResult
from sweeper.run.planning import plan
from sweeper.search.pruners import Settled, pruner, settled_epoch, spearman
from sweeper.search.sampling import Search

pytestmark = pytest.mark.unit


def test_spearman_ranks_with_ties_and_says_none_where_nothing_varies():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 2], [1, 2, 3, 4]) == pytest.approx(0.894, abs=1e-3)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def crossing(n: int = 6, epochs: int = 10, settles: int = 6) -> list[tuple[dict[int, float], float]]:
    """Curves whose order before ``settles`` is the final one reversed (fast starters end worst)."""
    curves = []
    for i in range(n):
        values = {e: (n - i if e < settles else i) + 0.01 * e for e in range(1, epochs + 1)}
        curves.append((values, values[epochs]))
    return curves


def test_the_settled_epoch_is_the_first_from_which_the_ranking_agrees_with_the_final_one():
    assert settled_epoch(crossing(settles=6)) == 6
    assert settled_epoch(crossing(n=4)) is None  # fewer than 5 trials ran to their end: not yet
    # epoch 1 agrees by chance, epochs 2-5 do not: the ranking settles at 6, not at 1
    curves = crossing(settles=6)
    for values, final in curves:
        values[1] = final
    assert settled_epoch(curves) == 6


@pytest.mark.parametrize("text", ["asha(min_resource='auto')", "hyperband(min_resource='auto')",
                                  "median(n_warmup_steps='auto')", "percentile(percentile=25.0, n_warmup_steps='auto')"])
def test_auto_makes_a_pruner_that_waits_for_the_ranking_to_settle(text):
    import optuna

    made = pruner(text)
    assert isinstance(made, Settled)
    assert isinstance(made.build(7), optuna.pruners.BasePruner)


@pytest.mark.parametrize("text, says", [
    ("asha(n_warmup_steps='auto')", "takes no n_warmup_steps"),
    ("patient(asha(min_resource='auto'), patience=2)", "patient cannot wrap"),
    ("wilcoxon(n_startup_steps='auto')", "whole number"),
])
def test_auto_where_it_means_nothing_is_one_line(text, says):
    with pytest.raises(SweepError, match=says):
        pruner(text)


def search(prune: str) -> Search:
    return Search({"x": sweeper.uniform(0.0, 1.0)}, search="random", prune=prune, trials=40, seed=0, metric="acc",
                  mode="max", make_spec=lambda p, i: plan([p], "/tmp/unused", 0)[0])


def run(s: Search, curve: dict[int, float], stop_at_prune: bool = True) -> tuple[int | None, TrialResult]:
    """One trial through the search: its epochs reported one by one; the epoch it was pruned at."""
    spec = s.next()
    assert spec is not None
    for epoch, value in sorted(curve.items()):
        why = s.prune(spec, [{"epoch": epoch, "metrics": {"acc": value}, "t": 0.0}])
        if why and stop_at_prune:
            row = TrialResult(trial_id=spec.trial_id, name=spec.name, index=0, params=spec.params,
                              status=Status.PRUNED, metrics={"acc": value}, epoch_reached=epoch)
            s.tell(row)
            return epoch, row
    last = max(curve)
    row = TrialResult(trial_id=spec.trial_id, name=spec.name, index=0, params=spec.params, status=Status.OK,
                      metrics={"acc": curve[last]}, epoch_reached=last)
    s.tell(row)
    return None, row


def test_nothing_is_pruned_before_the_ranking_settles_and_then_not_before_that_epoch():
    s = search("median(n_warmup_steps='auto')")
    for values, _ in crossing(n=6, epochs=10, settles=6)[:5]:
        assert run(s, values)[0] is None
    assert s.first_cut == 6
    cut, _ = run(s, {e: 0.001 * e for e in range(1, 11)})  # the median counts every trial's epochs
    assert cut == 6


def test_asha_cuts_from_the_settled_epoch_on():
    s = search("asha(min_resource='auto', reduction_factor=2)")
    curves = crossing(n=6, epochs=10, settles=6)
    for values, _ in curves[:5]:  # the worst starters first: nothing is cut while it is unknown
        assert run(s, values)[0] is None
    assert s.first_cut == 6
    # ASHA ranks a trial among those that reached its rung once it cuts (Optuna keeps rungs
    # only as its pruner passes them): three more trials run first, then one far below them
    for values, _ in curves[3:]:
        run(s, values)
    cut, _ = run(s, {e: 0.001 * e for e in range(1, 11)})
    assert cut is not None and 6 <= cut < 10


def test_no_trial_is_pruned_at_its_last_epoch():
    s = search("median")
    for i in range(6):
        run(s, {e: float(i + 1) for e in range(1, 11)})
    assert s.end == 10
    spec = s.next()
    low = [{"epoch": 10, "metrics": {"acc": -1.0}, "t": 0.0}]
    assert s.prune(spec, low) is None  # the trials that ran to their end stopped at 10
    s2 = search("median")
    for i in range(6):
        run(s2, {e: float(i + 1) for e in range(1, 11)})
    s2.end = None
    spec = s2.next()
    said_last = [{"epoch": 4, "metrics": {"acc": -1.0}, "t": 0.0, "last": 4}]  # Keras's fit told its last
    assert s2.prune(spec, said_last) is None
