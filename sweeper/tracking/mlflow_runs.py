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
* Written through MLflow's public client only (``MlflowClient``), into any store alike:
  what a look at the ledger sends is kept per run and written at its flush, each run in
  as few calls as the client allows (:class:`_Due`): ``create_run`` with its tags, its
  log (``log_artifact``), its end (``set_terminated``), then one ``log_batch`` with its
  parameters, metrics and the rest of its tags, within MLflow's per-call limits. The tags
  a resume reads back (``sweeper_key``, ``sweeper_epoch``, ``sweeper_final``) come in the
  last call, so a run says it holds an attempt, its epochs or its outcome only once it
  does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Sequence

from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import TrialResult
from sweeper.store.paths import SweepPaths, mlflow_template
from sweeper.tracking import Attempt, Held, SweepInfo, key_name, numbers, seconds

log = logging.getLogger("sweeper")

PARENT_TAG = "mlflow.parentRunId"
#: The sweep's run's status in MLflow, by how the sweep ended.
MLFLOW_STATUS = {SweepEnd.FINISHED: "FINISHED", SweepEnd.INTERRUPTED: "KILLED", SweepEnd.FAILED: "FAILED"}
#: How long the first look at a tracking server may take before it counts as unreachable.
PROBE_S = 5.0
#: MLflow's wait per request to a server, and its retries (its defaults: 120 s and 7).
HTTP_TIMEOUT_S, HTTP_RETRIES = 15, 2
#: MLflow's limits on one ``log_batch`` call: entities in all, parameters, tags (its
#: ``MAX_ENTITIES_PER_BATCH`` and ``MAX_PARAMS_TAGS_PER_BATCH``; its client splits a larger
#: call in an order of its own, so each call here stays within them).
MAX_ENTITIES, MAX_PARAMS, MAX_TAGS = 1000, 100, 100


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
    where there are none (unsynced), its default experiment made. Its connections to the
    part file are closed after through SQLAlchemy's own API (the engine its events name:
    MLflow keeps its engines for the life of the process)."""
    from mlflow import MlflowClient
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    engines: list[Any] = []

    def unsynced(connection: Any, record: Any) -> None:  # the part file's connections only
        with contextlib.suppress(Exception):
            if os.path.abspath(connection.execute("PRAGMA database_list").fetchone()[2]) == os.path.abspath(part):
                connection.execute("PRAGMA journal_mode=MEMORY")
                connection.execute("PRAGMA synchronous=OFF")

    def seen(connection: Any) -> None:  # the engine on the part file, to close after
        engine = connection.engine
        if engine not in engines and os.path.abspath(engine.url.database or "") == os.path.abspath(part):
            engines.append(engine)

    event.listen(Engine, "connect", unsynced)
    event.listen(Engine, "engine_connect", seen)
    try:
        MlflowClient(tracking_uri=f"sqlite:///{part}").search_experiments(max_results=1)
    finally:
        event.remove(Engine, "connect", unsynced)
        event.remove(Engine, "engine_connect", seen)
    for engine in engines:  # its connections to the part file: not needed
        with contextlib.suppress(Exception):
            engine.dispose()


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


def _calls(params: list[Any], tags: list[Any], metrics: list[Any], marks: list[Any]) -> list[tuple[list[Any], ...]]:
    """``log_batch`` calls (params, tags, metrics) within MLflow's limits, in order, with
    ``marks`` (a few tags) in the last one."""
    calls: list[tuple[list[Any], ...]] = []
    while params or tags or metrics:
        p, t = params[:MAX_PARAMS], tags[:MAX_TAGS]
        m = metrics[:MAX_ENTITIES - len(p) - len(t)]
        params, tags, metrics = params[len(p):], tags[len(t):], metrics[len(m):]
        calls.append((p, t, m))
    if calls and len(calls[-1][1]) + len(marks) <= MAX_TAGS and sum(map(len, calls[-1])) + len(marks) <= MAX_ENTITIES:
        calls[-1][1].extend(marks)
    elif marks:
        calls.append(([], list(marks), []))
    return calls


@dataclass
class _Due:
    """What a look sends to one trial's run, written at its flush (:meth:`MlflowRuns.flush`);
    each part is cleared once written."""

    run_id: str = ""  #: "" until the run is made (``make``)
    make: tuple[str, int] | None = None  #: a run to make: its name and start (ms)
    delete: str = ""  #: an earlier attempt's run, deleted first
    tags: dict[str, str] = field(default_factory=dict)
    #: the tags a resume reads back (``sweeper_key``, ``sweeper_epoch``, ``sweeper_final``): in the last call
    marks: dict[str, str] = field(default_factory=dict)
    params: list[Any] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)
    log: str = ""  #: the trial's log, as an artifact
    ended: tuple[str, int] | None = None  #: MLflow's status and the end (ms)


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
        self.runs: dict[str, str] = {}  # trial id -> run id (runs made)
        self.keys: dict[str, str] = {}  # a metric or param name -> the key MLflow takes
        self.due: dict[str, _Due] = {}  # trial id -> what this look sends to its run

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
        """What the look sent, written run by run in the order sent (:meth:`_write`)."""
        while self.due:
            tid, due = next(iter(self.due.items()))
            self._write(tid, due)
            del self.due[tid]

    def end(self, state: SweepEnd) -> None:
        self.flush()
        if self.client is not None and self.parent:
            self.client.set_terminated(self.parent, MLFLOW_STATUS[state])

    def _write(self, trial_id: str, due: _Due) -> None:
        """One run's share of a look, in as few client calls as MLflow allows: an earlier
        attempt's run deleted, the run made with its tags, its log, its parameters, metrics
        and other tags in one ``log_batch`` (more only past MLflow's limits), then its end, the
        marks last: a run is marked as holding what it holds, and is never seen finished
        before its numbers are in."""
        from mlflow.entities import RunTag

        if due.delete:  # another attempt's run: this one replaces it
            self.client.delete_run(due.delete)
            due.delete = ""
        if due.make is not None:
            name, start = due.make
            run = self.client.create_run(self.experiment, start_time=start, tags=due.tags, run_name=name)
            due.run_id = self.runs[trial_id] = run.info.run_id
            due.make, due.tags = None, {}
        if due.log and os.path.isfile(due.log):
            self.client.log_artifact(due.run_id, due.log)
        due.log = ""
        marks = [RunTag(k, v) for k, v in due.marks.items()]
        ended, due.ended = due.ended, None
        calls = _calls(due.params, [RunTag(k, v) for k, v in due.tags.items()], due.metrics,
                       [] if ended is not None else marks)
        for params, tags, metrics in calls:
            self.client.log_batch(due.run_id, metrics=metrics, params=params, tags=tags)
        if ended is not None:  # ended once it holds every number: no reader sees it finished without them
            self.client.set_terminated(due.run_id, status=ended[0], end_time=ended[1])
            if marks:
                self.client.log_batch(due.run_id, tags=marks)

    def _due(self, trial_id: str) -> _Due:
        due = self.due.get(trial_id)
        if due is None:
            due = self.due[trial_id] = _Due(run_id=self.runs[trial_id])
        return due

    # -- a trial ----------------------------------------------------------------------

    def start(self, attempt: Attempt, held: Held | None) -> None:
        from mlflow.entities import Param

        prior = self.due.pop(attempt.trial_id, None)  # unwritten: replaced, but for its deletion
        old = self.runs.pop(attempt.trial_id, None) or (prior.delete if prior is not None else "")
        self.due[attempt.trial_id] = _Due(
            make=(attempt.name, _ms(seconds(attempt.started_at))), delete=old,
            tags={PARENT_TAG: self.parent, "trial_id": attempt.trial_id, "seed": str(attempt.seed),
                  "device": attempt.device, "status": "running", "attempt": str(attempt.attempt)},
            marks={"sweeper_key": attempt.key},
            params=[Param(self._key(k), _text(v)) for k, v in attempt.params.items()])

    def epochs(self, attempt: Attempt, rows: list[tuple[int, dict[str, Any], float | None]], last: int) -> None:
        from mlflow.entities import Metric

        due = self._due(attempt.trial_id)
        due.metrics += [Metric(self._key(k), v, _ms(t or time.time()), epoch)
                        for epoch, values, t in rows for k, v in numbers(values).items()]
        due.marks["sweeper_epoch"] = str(last)

    def finish(self, attempt: Attempt, result: TrialResult, final: str) -> None:
        from mlflow.entities import Metric

        due = self._due(attempt.trial_id)
        end = seconds(result.started_at) + (result.duration_s or 0.0)  # (None: it never started)
        step = result.epoch_reached or 0
        # at its last epoch and stamped now, after every epoch's point: MLflow shows a run's
        # value at its highest step, then its latest time, so the result is what shows
        now = _ms(time.time())
        due.metrics += [Metric(self._key(k), v, now, step) for k, v in numbers(result.metrics).items()]
        due.tags.update({"status": result.status.value, "device": result.device, "attempt": str(result.attempts)})
        if result.error:
            due.tags["error"] = result.error[:5000]
        if result.epoch_reached is not None:
            due.tags["epoch_reached"] = str(result.epoch_reached)
        due.log = result.log or ""
        due.ended = (result.status.mlflow, _ms(end))
        due.marks["sweeper_final"] = final  # in the last call: told only once all of it is in

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


