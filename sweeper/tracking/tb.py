"""``--tensorboard``: a sweep in TensorBoard's HParams dashboard and its scalar charts.

``<out>/<name>/tensorboard/`` holds one run (folder) per trial, named as the trial::

    tensorboard/
        events...sweeper-experiment     the HParams experiment: each parameter with its
                                        domain (a grid's values, a search's range), the
                                        result metrics as columns
        <trial name>/events...sweeper   session start (the parameters), per-epoch reports
                                        as scalars ``epoch/<metric>`` (step = epoch), the
                                        result's metrics as ``<metric>``, session end
                                        with the trial's status
        .sweeper.json                   what each trial's folder shows (to resume)

Written with the ``tensorboard`` package's record writer and protocol buffers only: the
parent never imports TensorFlow (the package's summary helpers would). A trial that
starts again (a retry, a rerun) has its folder written anew. A TensorBoard left running
shows a rewritten folder's new content after it reloads (``--reload_multifile true``
or a restart); new trials and epochs appear as they come.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import socket
import time
from typing import IO, Any, Sequence

from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import Status, TrialResult
from sweeper.store.paths import SweepPaths, atomic, set_aside
from sweeper.tracking import Attempt, Domain, Held, SweepInfo, domains_of_points, numbers, seconds

STATE = ".sweeper.json"
EXPERIMENT = ".sweeper-experiment"
_COUNT = itertools.count()
_PB: Any = None


@functools.lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def _pb() -> Any:
    """TensorBoard's protocol buffers and record writer, imported on first use and then
    kept (an import statement per event cost more than the event)."""
    global _PB
    if _PB is None:
        from types import SimpleNamespace

        from google.protobuf import struct_pb2
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        _PB = SimpleNamespace(struct_pb2=struct_pb2, event_pb2=event_pb2, summary_pb2=summary_pb2,
                              api_pb2=api_pb2, metadata=metadata, plugin_data_pb2=plugin_data_pb2,
                              RecordWriter=RecordWriter)
    return _PB


class _EventFile:
    """One event file: TensorBoard's record framing around serialized ``Event`` protos."""

    def __init__(self, folder: str, suffix: str) -> None:
        pb = _pb()
        os.makedirs(folder, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{_host()}.{os.getpid()}."
                f"{next(_COUNT)}{suffix}")
        self.path = os.path.join(folder, name)
        self._file: IO[bytes] = open(self.path, "ab")
        self._writer = pb.RecordWriter(self._file)
        self._event = pb.event_pb2.Event
        self.add(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def summary(self, values: list[Any], step: int = 0, wall_time: float | None = None) -> None:
        self.add(self._event(wall_time=wall_time or time.time(), step=step,
                             summary=_pb().summary_pb2.Summary(value=values)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _hparams_value(tag: str, data: Any) -> Any:
    """A summary value carrying HParams plugin data (what the plugin's summary helpers make)."""
    pb = _pb()
    return pb.summary_pb2.Summary.Value(tag=tag, metadata=pb.metadata.create_summary_metadata(data),
                                        tensor=pb.metadata.NULL_TENSOR)


def _scalar(tag: str, value: float) -> Any:
    return _pb().summary_pb2.Summary.Value(tag=tag, simple_value=value)


class TensorBoardFiles:
    """The TensorBoard tracker (see the module's docstring)."""

    flag = "--tensorboard"

    def __init__(self, folder: str) -> None:
        self.root = SweepPaths(folder).tensorboard
        self.label = f"TensorBoard files in {self.root}"
        # this folder, not the sweep's: TensorBoard names a run by its path below the logdir,
        # so each run (and HParams session) is named as its trial, not "tensorboard/<trial>"
        self.hint = f"TensorBoard: tensorboard --logdir {_shown(self.root)}"
        self.domains: dict[str, Domain] = {}
        self.metrics: list[str] = []
        self.open: dict[str, _EventFile] = {}
        self.state: dict[str, Any] = {}
        self.uid = ""
        self._dirty = False  # the state file is behind: written at the next flush

    # -- the sweep --------------------------------------------------------------------

    def begin(self, sweep: SweepInfo) -> dict[str, Held]:
        import tensorboard  # noqa: F401  (installed, or the failure names it)

        self.uid, self.domains = sweep.uid, dict(sweep.domains)
        path = os.path.join(self.root, STATE)
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            state = {}
        if state.get("uid") not in (None, sweep.uid) and os.path.isdir(self.root):
            # another sweep's files (before --fresh): kept beside, as the old ledger is
            set_aside(self.root)
            state = {}
        os.makedirs(self.root, exist_ok=True)
        self.state = {"uid": sweep.uid, "trials": state.get("trials", {}), "metrics": state.get("metrics", [])}
        self.metrics = list(self.state["metrics"])
        if self.metrics:  # else written with the first result's metrics: a TensorBoard already
            self._experiment()  # running reads an experiment once, and infers one until then
        return {tid: Held(key, epoch, final) for tid, (key, epoch, final, _) in self.state["trials"].items()}

    def metrics_known(self, names: Sequence[str]) -> None:
        names = [*names, "epoch_reached"]
        if set(names) != set(self.metrics):
            self.metrics = sorted(set(names))
            self.state["metrics"] = self.metrics
            self._experiment()
            self._dirty = True

    def _experiment(self) -> None:
        """The HParams experiment: parameters with their domains, metrics as columns. Written
        anew (one file) when what it declares changes."""
        pb = _pb()
        struct_pb2, api_pb2, metadata, plugin_data_pb2 = pb.struct_pb2, pb.api_pb2, pb.metadata, pb.plugin_data_pb2
        infos = []
        for name, domain in sorted(self.domains.items()):
            kind = domain.kind
            info = api_pb2.HParamInfo(name=name, type=_DATA_TYPE[kind], differs=len(domain.values) != 1)
            if domain.low is not None and domain.high is not None:
                info.domain_interval.CopyFrom(api_pb2.Interval(min_value=domain.low, max_value=domain.high))
            else:
                info.domain_discrete.CopyFrom(struct_pb2.ListValue(values=[_value(v, kind) for v in domain.values]))
            infos.append(info)
        metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m), display_name=m) for m in self.metrics]
        experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics, time_created_secs=time.time())
        for old in os.listdir(self.root):
            if old.endswith(EXPERIMENT):
                os.remove(os.path.join(self.root, old))
        events = _EventFile(self.root, EXPERIMENT)
        events.summary([_hparams_value(metadata.EXPERIMENT_TAG,
                                       plugin_data_pb2.HParamsPluginData(experiment=experiment))])
        events.close()

    def flush(self) -> None:
        """The state file, once per look at the ledger (not once per trial: it lists them all)."""
        if self._dirty:
            self._save()

    def end(self, state: SweepEnd) -> None:
        for events in self.open.values():
            events.close()
        self.open.clear()
        self._save()

    # -- a trial ----------------------------------------------------------------------

    def start(self, attempt: Attempt, held: Held | None) -> None:
        metadata, plugin_data_pb2 = _pb().metadata, _pb().plugin_data_pb2
        old = self.open.pop(attempt.trial_id, None)
        if old is not None:
            old.close()
        folder = self._folder(attempt.name)
        shutil.rmtree(folder, ignore_errors=True)  # another attempt's events are not this one's
        unknown = domains_of_points([{k: v for k, v in attempt.params.items() if k not in self.domains}])
        if unknown:  # a parameter the sweep did not declare (export of a changed grid)
            self.domains.update(unknown)
            if self.metrics:
                self._experiment()
        start = plugin_data_pb2.SessionStartInfo(start_time_secs=seconds(attempt.started_at))
        for name, value in attempt.params.items():
            start.hparams[str(name)].CopyFrom(_value(value, self.domains[str(name)].kind))
        events = self.open[attempt.trial_id] = _EventFile(folder, ".sweeper")
        events.summary([_hparams_value(metadata.SESSION_START_INFO_TAG,
                                       plugin_data_pb2.HParamsPluginData(session_start_info=start))],
                       wall_time=seconds(attempt.started_at))
        events.flush()
        self.state["trials"][attempt.trial_id] = [attempt.key, None, None, attempt.name]
        self._dirty = True

    def epochs(self, attempt: Attempt, rows: list[tuple[int, dict[str, Any], float | None]], last: int) -> None:
        events = self._events(attempt)
        for epoch, metrics, t in rows:
            values = [_scalar(f"epoch/{k}", v) for k, v in numbers(metrics).items()]
            if values:
                events.summary(values, step=epoch, wall_time=t)
        events.flush()
        self.state["trials"][attempt.trial_id][1] = last
        self._dirty = True

    def finish(self, attempt: Attempt, result: TrialResult, final: str) -> None:
        pb = _pb()
        api_pb2, metadata, plugin_data_pb2 = pb.api_pb2, pb.metadata, pb.plugin_data_pb2
        events = self._events(attempt)
        end_time = seconds(result.started_at) + (result.duration_s or 0.0)  # (None: it never started)
        values = [_scalar(k, v) for k, v in numbers(result.metrics).items()]
        if result.epoch_reached is not None:
            values.append(_scalar("epoch_reached", float(result.epoch_reached)))
        if values:
            events.summary(values, step=result.epoch_reached or 0, wall_time=end_time)
        status = api_pb2.Status.Value(tb_status(result.status))
        info = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=end_time)
        events.summary([_hparams_value(metadata.SESSION_END_INFO_TAG,
                                       plugin_data_pb2.HParamsPluginData(session_end_info=info))],
                       step=result.epoch_reached or 0, wall_time=end_time)
        events.close()
        del self.open[attempt.trial_id]
        self.state["trials"][attempt.trial_id][2] = final
        self._dirty = True

    def _events(self, attempt: Attempt) -> _EventFile:
        """The trial's open event file; after a resume, a new one beside its earlier ones."""
        events = self.open.get(attempt.trial_id)
        if events is None:
            events = self.open[attempt.trial_id] = _EventFile(self._folder(attempt.name), ".sweeper")
        return events

    def _folder(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _save(self) -> None:
        with atomic(os.path.join(self.root, STATE), fsync=False) as f:
            f.write(json.dumps(self.state))  # one write (json.dump writes it in pieces)
        self._dirty = False


def _shown(path: str) -> str:
    """A path as a user would type it: relative to here when it is below here."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


_DATA_TYPE = {"bool": 2, "number": 3, "string": 1}  # api_pb2.DataType: BOOL, FLOAT64, STRING


def _value(value: Any, kind: str) -> Any:
    """A parameter's value as the HParams plugin keeps it, of its domain's kind."""
    struct_pb2 = _pb().struct_pb2
    if kind == "bool" and isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return struct_pb2.Value(number_value=float(value))
    return struct_pb2.Value(string_value=value if isinstance(value, str) else json.dumps(value))


def tb_status(status: Status) -> str:
    """TensorBoard's session status (:attr:`Status.tensorboard`). A running trial has none
    yet (TensorBoard shows it as unknown): TensorBoard keeps the first status it reads of
    a session, so the one written is the last."""
    return status.tensorboard
