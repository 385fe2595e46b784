"""The machine: sweeps (and ``run --`` jobs) on one machine, told of each other, sharing its cards.

* :mod:`~sweeper.placement.machine`: the machine-wide folder, one record per writer, its lock;
* :mod:`~sweeper.placement.record`: a record: who wrote it, what it holds on each card, what it wants;
* :mod:`~sweeper.placement.liveness`: whether a record's writer lives (pid, start tick, boot);
* :mod:`~sweeper.placement.share`: the fair share of a card among those that want it;
* :mod:`~sweeper.placement.holders`: who holds a card's memory besides a sweep, in words; a crowded OOM;
* :mod:`~sweeper.placement.neighbours`: a sweep among the others: its record published, theirs read;
* :mod:`~sweeper.placement.slots`, :mod:`~sweeper.placement.packing`, :mod:`~sweeper.placement.hostroom`: this
  sweep's slots; trials packed on GPUs by memory; host memory as a resource; :mod:`~sweeper.placement.breaker`: a
  card where trials crash, closed;
* :mod:`~sweeper.placement.policy`: the placement the engine asks which trial may start now, and where;
  :mod:`~sweeper.placement.crowd`: its trials beside the machine's other sweeps and processes (room, the fair
  share, an OOM others caused); :mod:`~sweeper.placement.leftovers`: what trials leave on their cards.

It imports only from :mod:`sweeper.errors`, :mod:`sweeper.model`, :mod:`sweeper.system` and
:mod:`sweeper.store`; :mod:`sweeper.run` and :mod:`sweeper.backends` import it.
"""
