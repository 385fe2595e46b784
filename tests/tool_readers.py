"""A sweep's trackers read back with each tool's own reader (TensorBoard's event multiplexer,
MLflow's client, Optuna's storages), for the tests of every backend that feeds them. Each tool
is imported inside its reader: a test skips a tool that is not installed before it reads."""

from __future__ import annotations

import os
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna


def tb_sessions(folder, sub: str = "tensorboard") -> tuple[object, dict[str, dict]]:
    """TensorBoard's view of ``<folder>/tensorboard`` (or ``sub``): the HParams experiment, and per run
    (trial) its hparams, status and scalars, as TensorBoard's event multiplexer reads them.

    On TensorBoard's own file reader (records and their checksums read as with TensorFlow),
    as where TensorFlow is not installed: TensorBoard imports TensorFlow where it is, only to
    read the files, 6 s of a core in each test process that reads them. Its module
    ``tensorboard.compat.notf``, which its builds add to force that reader, is put in place
    here (no change where TensorBoard's compat layer already chose TensorFlow in this process)."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import api_pb2, metadata

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(os.path.join(folder, sub))
    mux.Reload()
    content = mux.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    experiment = None
    out = {}
    for run, tags in content.items():
        if metadata.EXPERIMENT_TAG in tags:
            experiment = metadata.parse_experiment_plugin_data(tags[metadata.EXPERIMENT_TAG])
        if metadata.SESSION_START_INFO_TAG not in tags:
            continue
        start = metadata.parse_session_start_info_plugin_data(tags[metadata.SESSION_START_INFO_TAG])
        hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
        status = None
        if metadata.SESSION_END_INFO_TAG in tags:
            end = metadata.parse_session_end_info_plugin_data(tags[metadata.SESSION_END_INFO_TAG])
            status = api_pb2.Status.Name(end.status)
        acc = mux.GetAccumulator(run)
        scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
        out[run] = {"hparams": hparams, "status": status, "scalars": scalars}
    return experiment, out


def mlflow_runs(uri: str, experiment: str, deleted: bool = False) -> tuple[list, list]:
    """The sweep's parent runs and its trials' runs, as MLflow's client finds them."""
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
    runs = client.search_runs([exp.experiment_id], run_view_type=view, max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def local_uri(folder) -> str:
    """The MLflow store a sweep in ``folder`` writes by default: ``mlflow.db`` beside its ledger."""
    return f"sqlite:///{os.path.abspath(os.path.join(folder, 'mlflow.db'))}"


def storage(where) -> object:
    """The storage a path (a journal file) or a URL names, as Optuna opens it."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    where = str(where)
    if "://" in where:
        return optuna.storages.get_storage(where)

    return optuna.storages.JournalStorage(JournalFileBackend(where))


def studies(where) -> dict[str, optuna.Study]:
    """Every study the storage at ``where`` holds, by name, loaded with Optuna's own API."""
    import optuna

    store = storage(where)
    return {s.study_name: optuna.load_study(study_name=s.study_name, storage=store)
            for s in optuna.get_all_study_summaries(store, include_best_trial=False)}
