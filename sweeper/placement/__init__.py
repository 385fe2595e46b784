"""The machine: sweeps (and ``run --`` jobs) on one machine, told of each other, sharing its cards.

* :mod:`~sweeper.placement.machine`: the machine-wide folder, one record per writer, its lock;
* :mod:`~sweeper.placement.record`: a record: who wrote it, what it holds on each card, what it wants;
* :mod:`~sweeper.placement.liveness`: whether a record's writer lives (pid, start tick, boot);
* :mod:`~sweeper.placement.share`: the fair share of a card among those that want it;
* :mod:`~sweeper.placement.holders`: who holds a card's memory besides a sweep, in words; a crowded OOM;
* :mod:`~sweeper.placement.neighbours`: a sweep among the others: its record published, theirs read.

It imports only from :mod:`sweeper.errors`, :mod:`sweeper.model`, :mod:`sweeper.system` and
:mod:`sweeper.store`; :mod:`sweeper.run` and :mod:`sweeper.backends` import it.
"""
