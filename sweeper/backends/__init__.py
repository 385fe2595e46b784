"""Where trials run, behind the engine's :class:`~sweeper.run.engine.Backend` protocol.

* :mod:`sweeper.backends.local`: a fresh process per trial on this machine's slots;
* :mod:`sweeper.backends.ray`: a Ray task per trial on a cluster.

A third backend (a batch scheduler, say) implements ``open``, ``start``, ``wait``,
``drain``, ``cancel``, ``ahead`` and ``close``, and sends the trial's messages of
:mod:`sweeper.model.protocol`; the engine does the rest.
"""
