"""The trackers a sweep's options ask for, and where each writes (``--tensorboard``,
``--mlflow [URI]``). Apart from :mod:`sweeper.tracking` so that the shared records there
import no tracker: a tracker's module imports them, never the other way round."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from sweeper.errors import SweepError
from sweeper.tracking import Tracker

#: The optional extra that brings each tracker's package, by option.
EXTRAS = {"tensorboard": ("tensorboard", "sweeper[tensorboard]", "--tensorboard"),
          "mlflow": ("mlflow", "sweeper[mlflow]", "--mlflow")}


def check(options: Any) -> None:
    """A tracker asked for whose package is missing is bad input, before anything runs."""
    for option, (module, extra, flag) in EXTRAS.items():
        if getattr(options, option) and importlib.util.find_spec(module) is None:
            raise SweepError(f"{option}=... ({flag}) needs the {module} package, which is not installed; "
                             f"pip install '{extra}'")


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
    return out

