"""The run: one sweep from its plan to its last recorded result.

* :mod:`~sweeper.run.runner`: a sweep from start to end, tying the parts together;
* :mod:`~sweeper.run.planning`: its trials, their names, what a resume keeps;
* :mod:`~sweeper.run.engine`: every trial from the queue to one recorded result; :mod:`~sweeper.run.phases`:
  a trial in it (its phase table, its deadlines); its collaborators: :mod:`~sweeper.run.closing` (why no
  new trial starts, one reason, and how the sweep ends), :mod:`~sweeper.run.stops` (how a trial is
  stopped, at its deadlines), :mod:`~sweeper.run.recording` (its rows, the ledger, the outputs told);
* :mod:`~sweeper.run.ranking`: what the folder ranks by, settled by the first result that has it;
* :mod:`~sweeper.run.outputs`: the outputs (the tables, the trackers).

Which trial runs next is the search's (:mod:`sweeper.search`); where it may run, the placement's
(:mod:`sweeper.placement`); where a trial's process runs, the backends' (:mod:`sweeper.backends`);
what runs in it, the child's (:mod:`sweeper.child`).
"""
