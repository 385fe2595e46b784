"""MLflow runs written into a SQLite store a look's worth at a time, in one transaction,
through MLflow's own table definitions (its client takes several transactions per run,
tens of milliseconds each, and a sweep of short trials outran it). Used by
:mod:`sweeper.tracking.mlflow_runs` for ``sqlite:`` stores whose tables are as this code
knows them; any other store gets MLflow's client. It reaches MLflow's store through a
private attribute (``client._tracking_client.store``): known, and kept to this module.
"""

from __future__ import annotations

import math
import os
import sys
import time
import urllib.parse
from typing import Any, Mapping

#: The columns the batch writes, by MLflow table: a store whose tables lack one is sent
#: each call through the client instead.
_COLUMNS = {
    "runs": {"run_uuid", "name", "source_type", "source_name", "entry_point_name", "user_id", "status",
             "start_time", "end_time", "deleted_time", "source_version", "lifecycle_stage", "artifact_uri",
             "experiment_id"},
    "tags": {"key", "value", "run_uuid"},
    "params": {"key", "value", "run_uuid"},
    "metrics": {"key", "value", "timestamp", "step", "is_nan", "run_uuid"},
    "latest_metrics": {"key", "value", "timestamp", "step", "is_nan", "run_uuid"},
}


class Batch:
    """The trials' runs written into a SQLite store, a look's worth in one transaction.

    The same rows MLflow's client writes (its ``create_run``, ``log_batch``,
    ``set_terminated``, ``delete_run``), through MLflow's own table definitions, so what
    its client and UI read is what they read of any run. Artifacts are copied through
    MLflow's artifact repository before the transaction that marks a run as told."""

    def __init__(self, engine: Any, tables: dict[str, Any], experiment: int, location: str, uri: str) -> None:
        self.engine, self.tables, self.experiment, self.location, self.uri = engine, tables, experiment, location, uri
        self.where: dict[str, str] = {}  # run id -> its artifact URI (runs made here)
        self._clear()

    @classmethod
    def of(cls, client: Any, experiment: str, uri: str) -> Batch | None:
        """A batch for a SQLite store whose tables are as this code knows them, else None."""
        try:
            from mlflow.store.tracking.dbmodels import models
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            store = client._tracking_client.store
            if not isinstance(store, SqlAlchemyStore) or store.engine.dialect.name != "sqlite":
                return None
            tables = {t.__table__.name: t.__table__ for t in (models.SqlRun, models.SqlTag, models.SqlParam,
                                                               models.SqlMetric, models.SqlLatestMetric)}
            if any(not want <= set(tables[name].c.keys()) for name, want in _COLUMNS.items()):
                return None
            location = client.get_experiment(experiment).artifact_location
            return cls(store.engine, tables, int(experiment), location, uri)
        except Exception:  # another MLflow than this code knows: its client's calls
            return None

    def _clear(self) -> None:
        self.new: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.params: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.tags: dict[tuple[str, str], str] = {}
        self.ended: dict[str, tuple[str, int]] = {}
        self.files: list[tuple[str, str]] = []

    def create(self, name: str, start_ms: int, tags: dict[str, str], params: list[Any]) -> str:
        """A new run (``RUNNING``), as ``create_run`` makes it; its id."""
        import uuid

        from mlflow.utils.uri import append_to_uri_path

        run_id = uuid.uuid4().hex
        self.where[run_id] = append_to_uri_path(self.location, run_id, "artifacts")
        self.new.append({"run_uuid": run_id, "name": name, "source_type": "UNKNOWN", "source_name": "",
                         "entry_point_name": "", "user_id": "unknown", "status": "RUNNING",
                         "start_time": start_ms, "end_time": None, "deleted_time": None, "source_version": "",
                         "lifecycle_stage": "active", "artifact_uri": self.where[run_id],
                         "experiment_id": self.experiment})
        self.log(run_id, [], {**tags, "mlflow.runName": name})
        self.params += [{"key": p.key, "value": p.value, "run_uuid": run_id} for p in params]
        return run_id

    def delete(self, run_id: str) -> None:
        self.deleted.append(run_id)

    def log(self, run_id: str, metrics: list[Any], tags: Mapping[str, str]) -> None:
        for m in metrics:
            is_nan = math.isnan(m.value)
            value = 0.0 if is_nan else max(-sys.float_info.max, min(sys.float_info.max, m.value))
            self.metrics.append({"key": m.key, "value": value, "timestamp": m.timestamp, "step": m.step,
                                 "is_nan": is_nan, "run_uuid": run_id})
        self.tags.update(((run_id, k), v) for k, v in tags.items())

    def artifact(self, run_id: str, path: str) -> None:
        self.files.append((run_id, path))

    def terminate(self, run_id: str, status: str, end_ms: int) -> None:
        self.ended[run_id] = (status, end_ms)

    def write(self) -> None:
        """What was sent since the last write, in one transaction."""
        if not (self.new or self.deleted or self.params or self.metrics or self.tags or self.ended or self.files):
            return
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
        from sqlalchemy import bindparam, insert, select, update

        for run_id, path in self.files:
            where = self.where.get(run_id) or self._artifact_uri(run_id)
            if urllib.parse.urlparse(where).scheme in ("", "file"):
                _copy_into(path, where)
            else:
                get_artifact_repository(where, tracking_uri=self.uri).log_artifact(path)
        runs, tags, params = self.tables["runs"], self.tables["tags"], self.tables["params"]
        metrics, latest = self.tables["metrics"], self.tables["latest_metrics"]
        with self.engine.begin() as db:
            if self.new:
                db.execute(insert(runs), self.new)
            if self.deleted:
                db.execute(update(runs).where(runs.c.run_uuid == bindparam("rid"))
                           .values(lifecycle_stage="deleted", deleted_time=int(time.time() * 1000)),
                           [{"rid": r} for r in self.deleted])
            if self.params:
                db.execute(insert(params).prefix_with("OR IGNORE"), self.params)
            if self.metrics:
                db.execute(insert(metrics).prefix_with("OR IGNORE"), self.metrics)
                best: dict[tuple[str, str], dict[str, Any]] = {}
                for m in self.metrics:  # a run's value shown: at its highest step, then its latest time
                    have = best.get((m["run_uuid"], m["key"]))
                    if have is None or _order(m) > _order(have):
                        best[(m["run_uuid"], m["key"])] = m
                made = {r["run_uuid"] for r in self.new}
                older = sorted({run for run, _ in best if run not in made})
                for i in range(0, len(older), 400):
                    for row in db.execute(select(latest).where(latest.c.run_uuid.in_(older[i:i + 400]))):
                        had = dict(row._mapping)
                        mine = best.get((had["run_uuid"], had["key"]))
                        if mine is not None and _order(had) >= _order(mine):
                            best[(had["run_uuid"], had["key"])] = had
                db.execute(insert(latest).prefix_with("OR REPLACE"), list(best.values()))
            if self.tags:
                db.execute(insert(tags).prefix_with("OR REPLACE"),
                           [{"key": k, "value": v, "run_uuid": run} for (run, k), v in self.tags.items()])
            if self.ended:
                db.execute(update(runs).where(runs.c.run_uuid == bindparam("rid"))
                           .values(status=bindparam("st"), end_time=bindparam("et")),
                           [{"rid": r, "st": s, "et": e} for r, (s, e) in self.ended.items()])
        self._clear()

    def _artifact_uri(self, run_id: str) -> str:
        """A run made before (by an earlier sweep or export): where its artifacts go."""
        from sqlalchemy import select

        runs = self.tables["runs"]
        with self.engine.connect() as db:
            uri = db.execute(select(runs.c.artifact_uri).where(runs.c.run_uuid == run_id)).scalar()
        self.where[run_id] = str(uri)
        return self.where[run_id]


def _copy_into(path: str, where: str) -> None:
    """A file into a run's local artifact folder, where MLflow's local repository puts it,
    without its per-file path checks and temporary file (the name is the log's own; the
    run is told final only after the copy)."""
    import shutil

    from mlflow.utils.file_utils import local_file_uri_to_path

    folder = local_file_uri_to_path(where)
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(path, os.path.join(folder, os.path.basename(path)))


def _order(metric: Mapping[str, Any]) -> tuple[int, int, float]:
    """MLflow's order of a run's points for the value it shows: step, then time, then value."""
    return (metric["step"], metric["timestamp"], metric["value"])
