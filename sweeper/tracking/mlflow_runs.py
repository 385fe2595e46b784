"""``--mlflow [URI]``: a sweep as MLflow runs, one parent run and one nested run per trial.

* The experiment is named after the sweep (``MLFLOW_EXPERIMENT_NAME`` overrides it). The
  parent run is found again by the sweep's id (tag ``sweeper_uid``), so a resume or an
  ``export`` updates it; a ``--fresh`` start is a new sweep and gets a new parent run.
* A trial's run: its parameters, its per-epoch reports as metrics (step = epoch), its
  result's metrics (at its last epoch), tags ``trial_id``, ``status``, ``device``,
  ``seed``, ``attempt`` (and ``error`` when it failed), ``log.txt`` as an artifact, and
  MLflow's status: ``FINISHED`` for ok and pruned, ``KILLED`` for interrupted, ``FAILED``
  for the rest, ``RUNNING`` while it runs.
* A trial has one run: found by ``trial_id`` among the parent's children. A new attempt
  (a retry, a rerun after a failure) replaces it: its earlier run is deleted and a new
  one made, since MLflow cannot take back metrics an attempt logged, and a chart mixing
  two attempts would be a wrong picture.
* Without a URI, the store is ``sqlite:///<sweep folder>/mlflow.db`` with artifacts in
  ``<sweep folder>/mlartifacts`` (no server; ``mlflow ui --backend-store-uri`` shows it).
  A folder is a store there in the same way; into another database the artifacts of an
  experiment sweeper creates go to the sweep folder, never to ``mlruns/`` in the
  current folder (:func:`sweeper.tracking.chosen.mlflow_store`).
* Into a SQLite store (``sqlite:`` URIs, the default), the trials' runs are written in
  one transaction per look at the ledger (:class:`sweeper.tracking.mlflow_batch.Batch`), through MLflow's own table
  definitions: its client takes several transactions per run (tens of milliseconds
  each), so a sweep of short trials outran it. A server, or any other store, is sent
  each call through MLflow's client.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Sequence

from sweeper.model.trial import TrialResult
from sweeper.store.paths import SweepPaths, mlflow_template
from sweeper.tracking import Attempt, Held, SweepInfo, key_name, numbers, seconds
from sweeper.tracking.mlflow_batch import Batch

log = logging.getLogger("sweeper")

PARENT_TAG = "mlflow.parentRunId"
#: How long the first look at a tracking server may take before it counts as unreachable.
PROBE_S = 5.0
#: MLflow's wait per request to a server, and its retries (its defaults: 120 s and 7).
HTTP_TIMEOUT_S, HTTP_RETRIES = 15, 2


def _ms(seconds_: float) -> int:
    return int(seconds_ * 1000)


def _create_whole(db: str) -> None:
    """Make the sweep's local store appear with its tables made, never half made: MLflow
    makes them on first use, and a second client opening the file meanwhile (``mlflow ui``,
    a script watching the sweep) migrates it too, and one of them fails ("table
    _alembic_tmp_... already exists"). So the store is made in a file of its own, opened
    once by MLflow (its tables, its default experiment), and linked into place only if no
    store is there yet.

    That file is a copy of the empty store the installed MLflow made before
    (:func:`sweeper.store.paths.mlflow_template`, in the user's cache, named by the versions of
    MLflow, SQLAlchemy and MLflow's migrations), checked; failing one, MLflow's migrations
    make it (about a thousand transactions: seconds), without a sync per transaction, and
    the result, emptied of its experiments, becomes that template. Either way the file is
    synced once, whole, before it is linked."""
    if os.path.exists(db):
        return
    os.makedirs(os.path.dirname(db) or ".", exist_ok=True)
    template = mlflow_template(_versions())
    part = f"{db}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        copied = template is not None and _copied(template, part)
        _opened(part)  # the tables, if not copied; the default experiment, where it runs
        if template is not None and not copied:
            _keep(part, template)
        with open(part, "rb+") as f:
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # one came meanwhile: that one is used
            os.link(part, db)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)


def _versions() -> str:
    """What makes an empty store: MLflow's and SQLAlchemy's versions, and MLflow's
    migrations (their files' names and sizes: a development install may change them
    under one version)."""
    import hashlib

    import mlflow
    import sqlalchemy

    folder = os.path.join(os.path.dirname(mlflow.__file__), "store", "db_migrations", "versions")
    try:
        files = sorted((e.name, e.stat().st_size) for e in os.scandir(folder) if e.name.endswith(".py"))
    except OSError:
        files = []
    digest = hashlib.sha256(repr(files).encode()).hexdigest()[:12]
    return f"{mlflow.__version__}-{sqlalchemy.__version__}-{digest}"


def _copied(template: str, part: str) -> bool:
    """``part`` is a copy of ``template`` that is whole: a database that passes SQLite's
    check, at a schema revision, with no experiment (MLflow makes its default one on
    opening it, where it runs, as it would in a store it migrated)."""
    import shutil
    import sqlite3

    try:
        shutil.copyfile(template, part)
        with contextlib.closing(sqlite3.connect(part)) as con:
            whole = (con.execute("PRAGMA quick_check").fetchone() == ("ok",)
                     and con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1
                     and con.execute("SELECT count(*) FROM experiments").fetchone()[0] == 0)
    except (OSError, sqlite3.Error):
        whole = False
    if not whole:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
    return whole


def _opened(part: str) -> None:
    """MLflow's store at ``part``, opened once and closed: its tables made by its migrations
    where there are none (unsynced), its default experiment made."""
    from mlflow import MlflowClient
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def unsynced(connection: Any, record: Any) -> None:  # the part file's connections only
        with contextlib.suppress(Exception):
            if os.path.abspath(connection.execute("PRAGMA database_list").fetchone()[2]) == os.path.abspath(part):
                connection.execute("PRAGMA journal_mode=MEMORY")
                connection.execute("PRAGMA synchronous=OFF")

    event.listen(Engine, "connect", unsynced)
    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{part}")
        client.search_experiments(max_results=1)
        with contextlib.suppress(Exception):  # its connections to the part file: not needed
            client._tracking_client.store.engine.dispose()
    finally:
        event.remove(Engine, "connect", unsynced)


def _keep(part: str, template: str) -> None:
    """A store just migrated, emptied of its experiments, as the template (written whole:
    a copy renamed into place). Never fatal: without a template the next store is migrated."""
    import shutil
    import sqlite3
    import tempfile

    tmp = ""
    try:
        os.makedirs(os.path.dirname(template), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(template) + ".", suffix=".part",
                                   dir=os.path.dirname(template))
        os.close(fd)
        shutil.copyfile(part, tmp)
        with contextlib.closing(sqlite3.connect(tmp)) as con:
            con.execute("DELETE FROM experiment_tags")
            con.execute("DELETE FROM experiments")
            con.commit()
        os.replace(tmp, template)
    except (OSError, sqlite3.Error) as exc:
        log.debug("sweeper: MLflow: no template store kept at %s: %s", template, exc)
    finally:
        if tmp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]


class MlflowRuns:
    """The MLflow tracker (see the module's docstring)."""

    def __init__(self, uri: str, artifacts: str | None, folder: str) -> None:
        """``uri``, ``artifacts``: as :func:`sweeper.tracking.chosen.mlflow_store` says."""
        self.uri, self.folder = uri, folder
        local = uri == SweepPaths(folder).mlflow_uri
        self.label = f"MLflow at {uri}"
        self.flag = "--mlflow" if local else f"--mlflow {uri}"
        self.artifacts = artifacts  # the artifacts of an experiment created here (None: the store's choice)
        self.hint = (f"MLflow: mlflow ui --backend-store-uri {uri}" if uri.startswith("sqlite:")
                     else f"MLflow: {uri}")
        self.client: Any = None
        self.parent = ""
        self.experiment = ""
        self.runs: dict[str, str] = {}  # trial id -> run id
        self.keys: dict[str, str] = {}  # a metric or param name -> the key MLflow takes
        self.batch: Batch | None = None  # a SQLite store: written once per flush

    # -- the sweep --------------------------------------------------------------------

    def begin(self, sweep: SweepInfo) -> dict[str, Held]:
        self._probe()
        for name in ("mlflow.store.db.utils", "alembic"):  # "Creating initial MLflow database tables..."
            quiet = logging.getLogger(name)
            if quiet.level == logging.NOTSET:  # unless the application set it
                quiet.setLevel(logging.WARNING)
        from mlflow import MlflowClient
        from mlflow.entities import ViewType

        if self.uri.startswith("sqlite:///"):
            _create_whole(self.uri.removeprefix("sqlite:///"))
        self.client = client = MlflowClient(tracking_uri=self.uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or sweep.name
        found = client.get_experiment_by_name(name)
        if found is not None and found.lifecycle_stage == "deleted":
            client.restore_experiment(found.experiment_id)
        if found is not None:
            self.experiment = found.experiment_id
        else:  # the UI's training-runs view (not its GenAI one) for an experiment of ours
            self.experiment = client.create_experiment(
                name, artifact_location=self.artifacts and f"file://{self.artifacts}",
                tags={"mlflow.experimentKind": "custom_model_development"})
        parents = self._search(f"tags.sweeper_uid = '{sweep.uid}'", ViewType.ACTIVE_ONLY)
        tags = {"sweeper_uid": sweep.uid, "sweeper_folder": os.path.abspath(sweep.folder),
                "metric": sweep.metric, "mode": sweep.mode, "search": sweep.search}
        if parents:
            self.parent = parents[0].info.run_id
            client.update_run(self.parent, status="RUNNING")
        else:
            self.parent = client.create_run(self.experiment, run_name=sweep.name,
                                            tags={k: v for k, v in tags.items() if v}).info.run_id
        self.batch = Batch.of(client, self.experiment, self.uri)
        held: dict[str, Held] = {}
        children = self._search(f"tags.`{PARENT_TAG}` = '{self.parent}'", ViewType.ACTIVE_ONLY)
        for run in sorted(children, key=lambda r: r.info.start_time or 0, reverse=True):
            tid = run.data.tags.get("trial_id")
            if not tid:
                continue
            if tid in self.runs:  # a second run for one trial (left by a crash mid-replace)
                client.delete_run(run.info.run_id)
                continue
            self.runs[tid] = run.info.run_id
            tags_ = run.data.tags
            epoch = tags_.get("sweeper_epoch")
            held[tid] = Held(tags_.get("sweeper_key", ""), int(epoch) if epoch else None,
                             tags_.get("sweeper_final") or None)
        return held

    def _probe(self) -> None:
        """A server that does not answer is found in seconds, not after MLflow's retries;
        one that hangs later costs at most HTTP_TIMEOUT_S per try and HTTP_RETRIES retries
        (unless the user set MLflow's own variables)."""
        if not self.uri.startswith(("http://", "https://")):
            return
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(HTTP_RETRIES))
        try:
            urllib.request.urlopen(self.uri.rstrip("/") + "/health", timeout=PROBE_S).close()
        except urllib.error.HTTPError:
            pass  # it answered (a proxy, an older server without /health): go on
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConnectionError(f"no answer from {self.uri}: {reason}") from None

    def _search(self, where: str, view: Any) -> list[Any]:
        out, token = [], None
        while True:
            page = self.client.search_runs([self.experiment], filter_string=where, run_view_type=view,
                                           max_results=1000, page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out

    def metrics_known(self, names: Sequence[str]) -> None:
        pass

    def flush(self) -> None:
        if self.batch is not None:
            self.batch.write()

    def end(self, state: str) -> None:
        self.flush()
        if self.client is not None and self.parent and state != "running":
            self.client.set_terminated(self.parent, {"interrupted": "KILLED", "failed": "FAILED"}.get(state, "FINISHED"))

    # -- a trial ----------------------------------------------------------------------

    def start(self, attempt: Attempt, held: Held | None) -> None:
        from mlflow.entities import Param

        old = self.runs.pop(attempt.trial_id, None)
        tags = {PARENT_TAG: self.parent, "trial_id": attempt.trial_id, "seed": str(attempt.seed),
                "device": attempt.device, "status": "running", "attempt": str(attempt.attempt),
                "sweeper_key": attempt.key}
        params = [Param(self._key(k), _text(v)) for k, v in attempt.params.items()]
        if self.batch is not None:
            if old is not None:
                self.batch.delete(old)
            run_id = self.runs[attempt.trial_id] = self.batch.create(
                attempt.name, _ms(seconds(attempt.started_at)), tags, params)
            return
        if old is not None:  # another attempt's run: this one replaces it
            self.client.delete_run(old)
        run = self.client.create_run(self.experiment, start_time=_ms(seconds(attempt.started_at)),
                                     tags=tags, run_name=attempt.name)
        run_id = self.runs[attempt.trial_id] = run.info.run_id
        for chunk in _chunks(params, 100):
            if chunk:
                self.client.log_batch(run_id, params=chunk)

    def epochs(self, attempt: Attempt, rows: list[tuple[int, dict[str, Any], float | None]], last: int) -> None:
        from mlflow.entities import Metric, RunTag

        metrics = [Metric(self._key(k), v, _ms(t or time.time()), epoch)
                   for epoch, values, t in rows for k, v in numbers(values).items()]
        if self.batch is not None:
            self.batch.log(self.runs[attempt.trial_id], metrics, {"sweeper_epoch": str(last)})
            return
        chunks = _chunks(metrics, 1000)
        for i, chunk in enumerate(chunks):
            tags = [RunTag("sweeper_epoch", str(last))] if i == len(chunks) - 1 else []
            self.client.log_batch(self.runs[attempt.trial_id], metrics=chunk, tags=tags)

    def finish(self, attempt: Attempt, result: TrialResult, final: str) -> None:
        from mlflow.entities import Metric, RunTag

        run_id = self.runs[attempt.trial_id]
        end = seconds(result.started_at) + result.duration_s
        step = result.epoch_reached or 0
        # at its last epoch and stamped now, after every epoch's point: MLflow shows a run's
        # value at its highest step, then its latest time, so the result is what shows
        now = _ms(time.time())
        metrics = [Metric(self._key(k), v, now, step) for k, v in numbers(result.metrics).items()]
        tags = {"status": result.status.value, "device": result.device, "attempt": str(result.attempts)}
        if result.error:
            tags["error"] = result.error[:5000]
        if result.epoch_reached is not None:
            tags["epoch_reached"] = str(result.epoch_reached)
        if self.batch is not None:  # in one transaction: the final tag with all the rest
            self.batch.log(run_id, metrics, tags)
            if result.log and os.path.isfile(result.log):
                self.batch.artifact(run_id, result.log)
            self.batch.terminate(run_id, result.status.mlflow, _ms(end))
            self.batch.log(run_id, [], {"sweeper_final": final})
            return
        for chunk in _chunks(metrics, 1000):
            self.client.log_batch(run_id, metrics=chunk, tags=[RunTag(k, v) for k, v in tags.items()])
        if result.log and os.path.isfile(result.log):
            self.client.log_artifact(run_id, result.log)
        self.client.set_terminated(run_id, result.status.mlflow, end_time=_ms(end))
        self.client.set_tag(run_id, "sweeper_final", final)  # last: told only once all of it is in

    def _key(self, name: str) -> str:
        """A name MLflow takes; two names that would become one key stay apart."""
        key = self.keys.get(name)
        if key is None:
            key = key_name(name)
            taken = set(self.keys.values())
            n = 2
            while key in taken:
                key, n = f"{key_name(name)[:245]}_{n}", n + 1
            self.keys[name] = key
        return key


def _text(value: Any) -> str:
    """A parameter's value as MLflow keeps it (text, at most 6000 characters)."""
    import json

    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


