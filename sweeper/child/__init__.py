"""The child side of a trial: everything that runs in a trial process.

* :mod:`sweeper.child.bootstrap`: from spawn to exit, and the trial itself (``run_trial``);
* :mod:`sweeper.child.channel`: the same trial where its messages go through a channel and its
  result comes back as a return value (a Ray task; any backend's queue);
* :mod:`sweeper.child.batch`: that trial as a batch scheduler's job, its channel a file
  (``python -m sweeper.child.batch <trial dir>``), with the driver's reading of its files;
* :mod:`sweeper.child.imports`: GPU caps and seeds, applied as frameworks are imported;
* :mod:`sweeper.child.capping`: each framework's cap, as the parent decided it;
* :mod:`sweeper.child.context`: ``current_trial()`` and ``report()``, from inside ``train``
  (and the reporter the bootstrap starts);
* :mod:`sweeper.child.command`: command trials, a script with flags swept as ``train``;
  :mod:`sweeper.child.shell`: a shell template read as the shell reads it;
* :mod:`sweeper.child.loading`: a target loaded where its trial runs (a grid file executed as the main
  module, a command template made a command, a function unpickled), and what a sweep runs, in words;
* :mod:`sweeper.child.gridcheck`: a grid file checked where it will run;
* :mod:`sweeper.child.preload`: what a sweep's fork server imports once, before its forks.

The parent never imports these for itself (``report`` and ``current_trial`` are imported
lazily by ``sweeper``'s own namespace, and do nothing outside a trial); it only names
their entry points, and names what a sweep runs (:func:`sweeper.child.loading.describe`).
"""
