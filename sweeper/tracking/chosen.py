"""The trackers a sweep's options ask for, and where each writes (``--tensorboard``,
``--mlflow [URI]``, ``--optuna [URL]``). Apart from :mod:`sweeper.tracking` so that the shared records there
import no tracker: a tracker's module imports them, never the other way round."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from sweeper.errors import SweepError
from sweeper.tracking import Tracker

#: The optional extra that brings each tracker's package, by option.
EXTRAS = {"tensorboard": ("tensorboard", "sweeper[tensorboard]", "--tensorboard"),
          "mlflow": ("mlflow", "sweeper[mlflow]", "--mlflow"),
          "optuna": ("optuna", "sweeper[search]", "--optuna")}


def check(options: Any) -> None:
    """A tracker asked for whose package is missing, or an Optuna storage that is neither a
    URL nor a journal file, is bad input, before anything runs."""
    for option, (module, extra, flag) in EXTRAS.items():
        if getattr(options, option) and importlib.util.find_spec(module) is None:
            raise SweepError(f"{option}=... ({flag}) needs the {module} package, which is not installed; "
                             f"pip install '{extra}'")
    if getattr(options, "optuna", None) not in (None, False):
        optuna_storage(options.optuna, ".")


#: How a journal file's name ends, for ``--optuna PATH`` (Optuna's own examples use ``.log``).
JOURNAL_ENDINGS = (".journal", ".log")


def optuna_storage(value: Any, folder: str) -> str:
    """Where ``--optuna [URL]`` (or ``optuna=...``) writes: a database URL as it is
    (``sqlite:///study.db``, ``postgresql://...``), or the absolute path of a journal file:
    ``<sweep>/optuna.journal`` without a URL, else the file named (``*.journal``, ``*.log``, or
    one that exists and is no SQLite database). Anything else is one line saying what to give."""
    from sweeper.store.paths import SweepPaths

    if value is True:
        return SweepPaths(folder).optuna_journal
    text = str(value) if isinstance(value, str) else ""
    if "://" in text:
        return text
    path = os.path.abspath(os.path.expanduser(text)) if text else ""
    if path and (path.endswith(JOURNAL_ENDINGS) or (os.path.isfile(path) and not _sqlite(path))):
        return path
    raise SweepError(f"--optuna {value}: Optuna cannot open that storage; give a database URL such as "
                     "sqlite:///study.db, or a journal file such as study.journal (optuna=True: one in the "
                     "sweep folder)")


def _sqlite(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == b"SQLite format 3\x00"


def mlflow_store(value: Any, folder: str) -> tuple[str, str | None]:
    """Where ``--mlflow [URI]`` (or ``mlflow=...``) writes: the store's URI, and the folder
    for the artifacts of an experiment sweeper creates there (None: the store decides).

    * no URI (``--mlflow``, ``mlflow=True``): ``sqlite:///<sweep>/mlflow.db``, artifacts in
      ``<sweep>/mlartifacts``;
    * a folder: ``sqlite:///<folder>/mlflow.db``, artifacts in ``<folder>/mlartifacts``
      (MLflow 3 refuses its old file store);
    * another database (``sqlite:``, ``postgresql:``, ...): that store, artifacts in the sweep's
      ``mlartifacts`` (MLflow would put them in an ``mlruns/`` of the current folder);
    * a server (``http(s):``, ``databricks``) or a ``file:`` store: where it keeps them.
    """
    from sweeper.store.paths import MLFLOW_ARTIFACTS, MLFLOW_DB, SweepPaths

    if value is True or value == "":
        paths = SweepPaths(folder)
        return paths.mlflow_uri, paths.mlflow_artifacts
    text = str(value)
    if "://" not in text and not text.startswith(("databricks", "file:", "sqlite:")):
        where = os.path.abspath(os.path.expanduser(text))
        return f"sqlite:///{os.path.join(where, MLFLOW_DB)}", os.path.join(where, MLFLOW_ARTIFACTS)
    if text.startswith(("http://", "https://", "databricks", "file:")):
        return text, None
    return text, SweepPaths(folder).mlflow_artifacts


def make(options: Any, folder: str) -> list[Tracker]:
    """The trackers a sweep's options ask for."""
    out: list[Tracker] = []
    if options.tensorboard:
        from sweeper.tracking.tb import TensorBoardFiles

        out.append(TensorBoardFiles(folder))
    if options.mlflow:
        from sweeper.tracking.mlflow_runs import MlflowRuns

        out.append(MlflowRuns(*mlflow_store(options.mlflow, folder), folder))
    if getattr(options, "optuna", None):
        from sweeper.tracking.optuna_study import OptunaStudy

        flag = "--optuna" if options.optuna is True else f"--optuna {options.optuna}"
        out.append(OptunaStudy(optuna_storage(options.optuna, folder), folder, flag))
    return out

