"""The run: one sweep from its plan to its last recorded result.

* :mod:`~sweeper.run.runner`: a sweep from start to end, tying the parts together;
* :mod:`~sweeper.run.planning`: its trials, their names, what a resume keeps;
* :mod:`~sweeper.run.engine`: every trial from the queue to one recorded result; :mod:`~sweeper.run.phases`:
  a trial in it (its phase table, its deadlines); :mod:`~sweeper.run.stops`: how it stops trials, and
  what stops a whole sweep;
* :mod:`~sweeper.run.schedulers`: which trial runs next and what each report is answered (go on, stop,
  pause): a grid's, a search's;
* :mod:`~sweeper.run.search`: adaptive search (Optuna) over fresh processes; :mod:`~sweeper.run.pruners`:
  its pruners, by name;
* :mod:`~sweeper.run.pbt`: population-based training, a scheduler that pauses; :mod:`~sweeper.run.pbt_settings`:
  its settings, checked, and how it explores; :mod:`~sweeper.run.members`: its members, planned against the ledger;
  :mod:`~sweeper.run.pbt_checkpoints`: its checkpoints on disk, published, copied (a copy and its record one
  step, through a journal a resume completes), tidied;
* :mod:`~sweeper.run.slots`, :mod:`~sweeper.run.packing`, :mod:`~sweeper.run.hostroom`: this machine's
  slots; trials packed on GPUs by memory; host memory as a resource; :mod:`~sweeper.run.breaker`: a card
  where trials crash, closed;
* :mod:`~sweeper.run.placement`: the placement the engine asks which trial may start now, and where;
  :mod:`~sweeper.run.crowd`: its trials beside the machine's other sweeps and processes (room, the fair
  share, an OOM others caused); :mod:`~sweeper.run.leftovers`: what trials leave on their cards;
* :mod:`~sweeper.run.ranking`: what the folder ranks by, settled by the first result that has it;
* :mod:`~sweeper.run.lifecycle`: what a sweep's outputs hear from it;
* :mod:`~sweeper.run.outputs`, :mod:`~sweeper.run.progress`: the outputs, and the console's live view.

Where a trial's process runs is the backends' (:mod:`sweeper.backends`); what runs in it, the
child's (:mod:`sweeper.child`).
"""
