"""The front ends a user meets, besides ``sweep()`` (:mod:`sweeper.api`).

* :mod:`~sweeper.front.cli`: ``python -m sweeper grid.py``, and the command line's first word;
  :mod:`~sweeper.front.subcommands`: ``status``, ``report``, ``replay``, ``export``;
  :mod:`~sweeper.front.detach`: ``--detach``, a Slurm sweep's driver submitted as a job of its own;
* :mod:`~sweeper.front.job`: ``run -- CMD``, a command on a GPU beside the machine's sweeps;
  :mod:`~sweeper.front.gpuview`: ``gpus``, the machine's cards and who uses them;
* :mod:`~sweeper.front.gridfile`: a grid file read without importing it in the parent;
* :mod:`~sweeper.front.replay`: ``replay``, a trial run again, and how far each metric drifts;
* :mod:`~sweeper.front.shown`: a sweep as every front door shows it (``sweep()``, the command line, Hydra,
  replay): the view while it runs, the closing summary; :mod:`~sweeper.front.progress`: that view, live,
  or one plain line per trial;
* :mod:`~sweeper.front.messages`: sweeper's own lines, for the CLI and ``sweep()`` alike;
* :mod:`~sweeper.front.optionsdoc`: the table of flags in docs/options.md, made from their texts;
* :mod:`~sweeper.front.hydra`: sweeper as a Hydra launcher (``hydra/launcher=sweeper``): its
  settings, its jobs and their numbers, its launches, a job in its trial's process.
"""
