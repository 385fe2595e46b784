"""The model: what a sweep and its trials are, as records and rules that start nothing.

* :mod:`~sweeper.model.trial`: a trial's identity, spec and result; its :class:`Status`;
* :mod:`~sweeper.model.outcome`: the judge, the one place a trial's status is decided;
* :mod:`~sweeper.model.protocol`: what a trial process tells its sweep, and a backend the engine;
* :mod:`~sweeper.model.contract`: every ``SWEEPER_*`` variable between parent and child;
* :mod:`~sweeper.model.space`: a parameter space read once into types: it expands, samples, tells
  its size and converts to Optuna's distributions; :mod:`~sweeper.model.grid`: grids and samples as
  points (``expand``, ``sample``); :mod:`~sweeper.model.distributions`: what a space draws from
  (``uniform``, ``loguniform``, ``randint``); :mod:`~sweeper.model.values`: the values a point may hold;
* :mod:`~sweeper.model.definition`: a sweep as every front end gives it (target, points or space,
  options), and the one place the rules about grid, space, samples and search live;
* :mod:`~sweeper.model.options`: a sweep's knobs as users type them, checked once;
  :mod:`~sweeper.model.option_texts`: what each means, written once for ``--help`` and docs/options.md;
  :mod:`~sweeper.model.flags`: how each is given on the command line;
  :mod:`~sweeper.model.units`: durations and sizes as users write them;
  :mod:`~sweeper.model.settings`: the options parsed once into frozen typed groups, each subsystem's own;
  :mod:`~sweeper.model.devices`: the GPUs a sweep asks for and each trial's memory cap, as records;
  :mod:`~sweeper.model.pbt`: population-based training's settings, read;
* :mod:`~sweeper.model.metrics`: what ``train`` returned, as a row's metrics;
  :mod:`~sweeper.model.objectives`, :mod:`~sweeper.model.constraints`: several objectives and the Pareto
  front; what a trial must meet to be ranked;
* :mod:`~sweeper.model.lifecycle`: what a sweep's outputs hear from it (the ``Callback``);
* :mod:`~sweeper.model.target`, :mod:`~sweeper.model.callables`: ``train`` named so a fresh process finds it;
  :mod:`~sweeper.model.mainguard`: a script's ``sweep()`` outside ``if __name__ == "__main__":``, read from its source;
* :mod:`~sweeper.model.text`: text made safe for a console line or a CSV field.

Nothing here starts a process, touches a GPU or imports a framework.
"""
