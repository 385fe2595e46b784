"""The store: a sweep's folder and what is kept in it.

* :mod:`~sweeper.store.paths`: every file sweeper writes or reads, by name, and how a file is written whole;
* :mod:`~sweeper.store.folder`: the folder itself, held by one sweep at a time;
* :mod:`~sweeper.store.ledger`: the durable record (SQLite), the one source of every other output;
  :mod:`~sweeper.store.schema`: its tables, their migrations, a result as a row;
  :mod:`~sweeper.store.facts`: the sweep's own record there (its metric, total, definition, ...), typed;
* :mod:`~sweeper.store.table`: the results table, as ``results.csv`` and a DataFrame.
"""
