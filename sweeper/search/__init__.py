"""The search: which trial runs next, and what each report is answered (go on, stop, pause).

* :mod:`~sweeper.search.schedulers`: a grid's order, a search's, a replayed member's schedule;
* :mod:`~sweeper.search.sampling`: adaptive search (Optuna) over fresh processes; :mod:`~sweeper.search.pruners`:
  its pruners, by name;
* :mod:`~sweeper.search.pbt`: population-based training, a scheduler that pauses; :mod:`~sweeper.search.pbt_settings`:
  its settings, checked, and how it explores; :mod:`~sweeper.search.members`: its members, planned against the
  ledger; :mod:`~sweeper.search.pbt_checkpoints`: its checkpoints on disk, published, copied (a copy and its
  record one step, through a journal a resume completes), tidied;
* :mod:`~sweeper.search.registry`: the names a sweep's ``search`` option may take, and what each part of a
  sweep needs to know of each (no code compares a search's name); how another search joins them:
  :func:`register` from a program, or an entry point in the ``sweeper.search`` group from an installed package.
"""

from sweeper.search.registry import GROUP, Made, Registered, register

__all__ = ["GROUP", "Made", "Registered", "register"]
