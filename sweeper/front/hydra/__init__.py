"""sweeper as a Hydra launcher (``hydra/launcher=sweeper``, with ``pip install sweeper[hydra]``).

* :mod:`~sweeper.front.hydra.settings`: the launcher's settings, sweeper's options by their names;
* :mod:`~sweeper.front.hydra.jobs`: a job's overrides as a point, and the book of job numbers;
* :mod:`~sweeper.front.hydra.launcher`: the launches of one multirun, as one sweep (the data flow);
* :mod:`~sweeper.front.hydra.closing`: the multirun's closing summary, said once, when it may end;
* :mod:`~sweeper.front.hydra.task`: a job in its trial's process, run as Hydra's launchers run one;
* :mod:`~sweeper.front.hydra.sending`: what goes to a job's process: the task function (by name, or
  by value), Hydra's context (plain pickle, classes by name);
* :mod:`~sweeper.front.hydra.returns`: what Hydra's sweeper gets back for each job, and the check
  that a job kept from an earlier run was made with the config it has now;
* :mod:`~sweeper.front.hydra.appcode`: the app's own code, and the kept jobs other code made.

The plugin Hydra finds is ``hydra_plugins/sweeper_launcher`` (a thin class over these). Nothing
here imports Hydra until a multirun launches.
"""
