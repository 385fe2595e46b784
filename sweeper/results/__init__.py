"""The results: what a finished (or running) sweep's rows say.

* :mod:`~sweeper.results.query`: the results table queried: the metric, what is ranked, the
  leaderboard, the failures (the closing summary, ``status`` and ``report`` ask it alike);
* :mod:`~sweeper.results.report`: ``report.html``, from the folder read back (:mod:`~sweeper.results.reading`);
  :mod:`~sweeper.results.plots`: its figures;
* :mod:`~sweeper.results.importance`: which parameters mattered (fANOVA);
* :mod:`~sweeper.results.studies`: a sweep's rows as an Optuna study (``export``);
* :mod:`~sweeper.results.schedules`: population-based training's schedules and lineage, read back.

Each reads a sweep's rows from its ledger (:mod:`sweeper.store.ledger`).
"""
