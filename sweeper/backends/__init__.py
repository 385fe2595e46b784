"""Where trials run, behind the engine's :class:`~sweeper.run.engine.Backend` protocol.

* :mod:`sweeper.backends.local`: a fresh process per trial on this machine's slots;
* :mod:`sweeper.backends.ray`: a Ray task per trial on a cluster; :mod:`sweeper.backends.ray_options`: its
  own settings (its options group: ``address``, ``cpus_per_trial``);
* :mod:`sweeper.backends.slurm`: each trial a task of a Slurm array job, through files in the
  sweep's folder; :mod:`sweeper.backends.slurm.options`: its options group (``slurm``: sbatch options);
* :mod:`sweeper.backends.channel`: the driver's half of a trial that talks through a channel
  (Ray's queue, any queue) and returns its result;
* :mod:`sweeper.backends.registry`: the names a sweep's ``backend`` option may take, and how
  another backend joins them: :func:`register` from a program, or an entry point in the
  ``sweeper.backends`` group from an installed package; each with its options group, if any.

A backend is made once per sweep by its factory, from a :class:`Launch`; it starts trials,
sends the engine their messages of :mod:`sweeper.model.protocol` and one ``Exited`` each,
and stops them when asked; the engine does the rest (the ledger, retries, timeouts,
statuses, the tables). ``tests/toy_backend.py`` is a whole one in a few dozen lines.
"""

from sweeper.backends.registry import GROUP, Launch, Registered, register

__all__ = ["GROUP", "Launch", "Registered", "register"]
