"""A search from outside sweeper: an Optuna sampler of its own that asks ``x`` from a list in
turn, registered through the public registry (``sweeper.search.register``) or an entry point of
the ``sweeper.search`` group; it touches no file of sweeper's."""

from __future__ import annotations

from typing import Any

from sweeper.search import Made

#: The values of ``x`` it asks, the n-th trial the n-th.
XS = [0.05, 0.15, 0.25, 0.35]


def ladder(optuna: Any, made: Made) -> Any:
    """The sampler, made once per sweep: ``x`` from :data:`XS` in turn; any other parameter at
    random, seeded with the sweep's seed."""

    class Ladder(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self.random = optuna.samplers.RandomSampler(seed=made.seed)

        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return {}

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
            return {}

        def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
            if name == "x":
                return XS[trial.number % len(XS)]
            return self.random.sample_independent(study, trial, name, distribution)

    return Ladder()
