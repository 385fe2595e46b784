"""The child side of a trial: everything that runs in a trial process.

* :mod:`sweeper.child.bootstrap`: from spawn (or a Ray task's start) to exit;
* :mod:`sweeper.child.imports`: GPU caps and seeds, applied as frameworks are imported.

The parent never imports these for itself; it only names their entry points.
"""
