"""The results: what a finished (or running) sweep's rows say.

* :mod:`~sweeper.results.report`: the folder read back, summarised, ranked, drawn (``report``, ``status``);
* :mod:`~sweeper.results.objectives`, :mod:`~sweeper.results.constraints`: several objectives and the
  Pareto front; what a trial must meet to be ranked;
* :mod:`~sweeper.results.importance`: which parameters mattered (fANOVA);
* :mod:`~sweeper.results.studies`: a sweep's rows as an Optuna study (``export``);
* :mod:`~sweeper.results.replay`: a trial run again, and how far each metric drifts.

Each reads a sweep's rows from its ledger (:mod:`sweeper.store.ledger`).
"""
