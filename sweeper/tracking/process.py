"""The trackers' own process: TensorBoard, MLflow and Optuna kept current outside the sweep's interpreter.

::

    the sweep (parent)                               python -m sweeper.tracking.process
    ──────────────────                               ──────────────────────────────────
    TrackerProcess ──stdin: the sweep, in JSON─────> a Mirror per tracker, each in a thread
                                                     of its own, reading the ledger
                   <─stdout: sweeper's lines, ────── (read-only) about once a second
                     how far each tracker got,
                     "need": a running trial's
                     parameters (no row yet)
                   ──stdin: those parameters──────>
    close(state)   ──stdin: the end, then EOF─────>  a last look, the trackers closed; exit

The parent only starts the process, answers its rare questions from a thread that
sleeps in a read, and at the end tells it how the sweep ended and waits while it makes
headway, giving up after a minute with none (Ctrl-C ends the wait). A tracker's work (protocol buffers, MLflow's store)
never shares the engine's interpreter, and the parent never imports TensorBoard or
MLflow. The process:

* ends with the sweep: its stdin closing without an end (the sweep was killed, even by
  SIGKILL) ends it at once, and on Linux the kernel kills it when its parent dies;
* never sees Ctrl-C (a session of its own, SIGINT ignored): the sweep tells it how it ended;
* runs as an idle task where Linux allows (:func:`lower_priority`; else at :data:`NICE`),
  so on a busy machine the trials come first;
* prints nothing: its stdout is its channel to the parent and its stderr a temporary
  file (MLflow's "View run" lines and its logging never reach the console); sweeper's
  own lines (a tracker that failed) are said through the sweep's ``sweeper`` logger,
  as they come.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import SimpleNamespace
from typing import IO, Any, Callable, Mapping

from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import TrialSpec
from sweeper.tracking import SweepInfo, Tracker

log = logging.getLogger("sweeper")

#: Seconds the sweep waits at its end for the trackers' process while it makes no headway
#: (sends nothing and, where the sweep can tell, uses next to no CPU): a process still sending
#: is waited for however long it takes on a busy machine; Ctrl-C ends the wait.
END_WAIT_S = 60.0
#: CPU seconds in which the trackers' process shows it is still working (its threads that
#: wait on a server use a little now and then; one look at a large sweep takes seconds).
WORKING_CPU_S = 0.5
#: The trackers' process's niceness, added to the sweep's, where it cannot be an idle
#: task (below): a nice-19 process still gets a few percent of a core beside the trials.
NICE = 19


def lower_priority(nice: int) -> str:
    """Make this process yield to every other: on Linux an idle task (``SCHED_IDLE``),
    which runs only on a core nothing else wants, and whose core the kernel counts as
    idle when it places a waking process (a nice-19 one still takes a small share;
    bench/trackers.py measured 1.08x for this against 1.10x for nice 19, within the
    noise); elsewhere ``nice``. Returns what it did."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    with contextlib.suppress(OSError):
        os.nice(nice)
        return f"nice {nice}"
    return "unchanged"


class TrackerProcess:
    """The parent's side: starts the trackers' process and, at the end, waits for it.

    ``trackers``: the parent's own copies (their labels, flags and hints, for messages;
    they send nothing); the process makes its own from ``options`` (``tensorboard``,
    ``mlflow``, ``optuna``). ``specs`` finds a trial's spec by id, for a running trial the process
    cannot place from the ledger (called from the thread that reads the process)."""

    def __init__(self, folder: str, options: Mapping[str, Any], trackers: list[Tracker], info: SweepInfo,
                 specs: Callable[[str], TrialSpec | None]) -> None:
        self.folder, self.all, self.specs = folder, list(trackers), specs
        self.failed: set[int] = set()  # trackers that failed (each said so itself): no hint for them
        self.said: set[int] = set()  # trackers whose trouble was said (failed, or their process ended)
        self.closed: set[int] = set()  # trackers that sent everything and closed the sweep
        self.progress: dict[int, tuple[int, int]] = {}  # tracker -> (outcomes sent, trials on record)
        self._ending = False
        self._lock = threading.Lock()
        self._told = threading.Event()  # the sweep was sent: anything else comes after it
        self._moved = time.monotonic()  # when the process last sent anything
        self._err: IO[bytes] = tempfile.TemporaryFile()
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-P", "-m", "sweeper.tracking.process"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self._err, env=_env(), start_new_session=True)
        except (OSError, ValueError) as exc:  # no interpreter to start (an embedded one): said, never fatal
            self._proc = None
            self.failed.update(range(len(self.all)))
            self.said.update(range(len(self.all)))
            log.warning("sweeper: warning: %s not shown (their process could not start: %s); the ledger keeps "
                        "every result; show it later with: python -m sweeper export %s %s",
                        ", ".join(t.label for t in self.all), exc, folder, " ".join(t.flag for t in self.all))
            return
        header = {"parent": os.getpid(), "folder": folder, "tensorboard": bool(options.get("tensorboard")),
                  "mlflow": options.get("mlflow"), "optuna": options.get("optuna"), "info": info.to_json(),
                  "nice": NICE, "level": log.getEffectiveLevel()}
        self._reader = threading.Thread(target=self._read, args=(header,), name="sweeper-trackers", daemon=True)
        self._reader.start()

    @property
    def trackers(self) -> list[Tracker]:
        """The trackers still shown to (none that failed)."""
        return [t for i, t in enumerate(self.all) if i not in self.failed]

    def _read(self, header: dict[str, Any]) -> None:
        """The parent's thread: sends the sweep (a large grid's domains may fill the pipe
        until the process reads them: not in the sweep's thread), then says what the
        process says."""
        from sweeper.system import procs

        procs.leave_signals_to_the_main_thread()
        try:
            self._send(header)
        finally:
            self._told.set()
        assert self._proc is not None and self._proc.stdout is not None
        try:
            for line in self._proc.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                self._on(message)
        except Exception as exc:  # the pipe, closed under it: the process is gone
            log.debug("sweeper: trackers: %s", exc)
        if not self._ending:
            self._lost()

    def _on(self, message: dict[str, Any]) -> None:
        self._moved = time.monotonic()
        if "log" in message:
            level, text = message["log"]
            log.log(int(level), "%s", text)
        if "need" in message:
            known = {}
            for tid in message["need"]:
                spec = self.specs(tid)
                if spec is not None:
                    known[tid] = [spec.name, spec.index, spec.params, spec.seed, spec.dir]
            self._send({"known": known})
        if "sent" in message:
            i, sent, total = message["sent"]
            self.progress[int(i)] = (int(sent), int(total))
        if "failed" in message:
            self.failed.add(int(message["failed"]))
            self.said.add(int(message["failed"]))
        if "closed" in message:
            self.closed.add(int(message["closed"]))
        if "cpu" in message:
            log.debug("sweeper: trackers: their process used %.1f s of CPU (priority: %s)", float(message["cpu"]),
                      message.get("priority", "?"))

    def _send(self, message: dict[str, Any]) -> None:
        with self._lock:
            try:
                assert self._proc is not None and self._proc.stdin is not None
                self._proc.stdin.write((json.dumps(message, default=str) + "\n").encode())
                self._proc.stdin.flush()
            except (OSError, ValueError):  # the process is gone (or the pipe closed): said elsewhere
                pass

    def _lost(self) -> None:
        """The process ended while the sweep ran: said once, for the trackers still shown."""
        assert self._proc is not None
        code = self._proc.wait()
        left = [i for i in range(len(self.all)) if i not in self.said]
        self.said.update(left)
        if left:
            log.warning("sweeper: warning: %s stopped (%s); the sweep goes on and the ledger keeps every "
                        "result; replay it later with: python -m sweeper export %s %s",
                        ", ".join(self.all[i].label for i in left), self._why(code), self.folder,
                        " ".join(self.all[i].flag for i in left))

    def _why(self, code: int) -> str:
        """Why the process ended: the signal that killed it, or its exit status and the last
        line it wrote to stderr (a traceback's)."""
        if code < 0:
            return f"the trackers' process was killed by signal {-code}"
        try:
            self._err.seek(0, os.SEEK_END)
            self._err.seek(max(0, self._err.tell() - 4096))
            lines = [ln.strip() for ln in self._err.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        what = f"the trackers' process ended with exit code {code}"
        return f"{what}: {lines[-1][:300]}" if lines else what

    def close(self, state: SweepEnd, timeout: float | None = None) -> None:
        """Tell the process how the sweep ended (``state``) and wait for the last outcomes
        to be sent, for as long as it makes headway: the wait ends once it has made none for
        ``timeout`` seconds (:data:`END_WAIT_S`), or at Ctrl-C. What is not sent by then is
        said in one line, with the export that finishes it."""
        if self._proc is None:
            return
        timeout = END_WAIT_S if timeout is None else timeout
        self._ending = True
        why, started = "", time.monotonic()
        try:
            self._told.wait(timeout)
            self._send({"end": state.value})
            with self._lock, contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            code = self._wait_while_it_moves(timeout)
            if code != 0:
                why = self._why(code)
        except subprocess.TimeoutExpired:
            why = f"no headway in {timeout:.0f}s"
        except KeyboardInterrupt:
            why = "its wait was ended by Ctrl-C"
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
            self._tidy(self._proc.pid)
        self._reader.join(5.0)
        log.debug("sweeper: trackers: the sweep waited %.1f s for them at its end", time.monotonic() - started)
        left = [i for i in range(len(self.all)) if i not in self.said and i not in self.closed]
        if left:
            total = self._on_record()
            told = "; ".join(f"{self.all[i].label}: {_count(self.progress.get(i), total)}" for i in left)
            log.warning("sweeper: warning: %s, when the sweep ended (%s); the ledger keeps every result; finish "
                        "it with: python -m sweeper export %s %s", told, why or "the trackers' process ended",
                        self.folder, " ".join(self.all[i].flag for i in left))
            self.said.update(left)
        for stream in (self._proc.stdout, self._err):
            if stream is not None:
                stream.close()

    def _wait_while_it_moves(self, patience: float) -> int:
        """The process's exit code, once it ends; ``TimeoutExpired`` once it has sent nothing
        and used under :data:`WORKING_CPU_S` of CPU in ``patience`` seconds (a tracking
        server that does not answer). On a busy machine its last look can take minutes of
        wall time and send nothing until it ends: that is headway too, as its CPU time shows."""
        from sweeper.system import procs

        assert self._proc is not None
        cpu, moved = procs.cpu_seconds(self._proc.pid), time.monotonic()
        while True:
            now_cpu = procs.cpu_seconds(self._proc.pid)
            if now_cpu is not None and cpu is not None and now_cpu >= cpu + WORKING_CPU_S:
                cpu, moved = now_cpu, time.monotonic()
            still = time.monotonic() - max(moved, self._moved)
            if still >= patience:
                raise subprocess.TimeoutExpired(self._proc.args, patience)
            try:
                return self._proc.wait(min(patience - still, 1.0))
            except subprocess.TimeoutExpired:
                continue

    def _on_record(self) -> int | None:
        """How many trials the ledger holds (what a tracker shows once all is sent)."""
        import sqlite3

        from sweeper.store.paths import SweepPaths

        try:
            db = sqlite3.connect(f"file:{SweepPaths(self.folder).ledger}?mode=ro", uri=True, timeout=5)
            try:
                return int(db.execute("SELECT count(*) FROM trials").fetchone()[0])
            finally:
                db.close()
        except sqlite3.Error:
            return None

    def _tidy(self, pid: int) -> None:
        """What a killed process left half made in the sweep folder: the local MLflow
        store's part file (``mlflow.db.<pid>.<thread>.part``), the TensorBoard state's temporary file,
        the lock Optuna takes on the sweep's journal while it writes (no other process writes there)."""
        from sweeper.store.paths import OPTUNA_JOURNAL

        for pattern in (f"*.{pid}.part", f"*.{pid}.*.part", os.path.join("tensorboard", f"*.tmp{pid}"),
                        f"{OPTUNA_JOURNAL}.lock*"):
            for path in glob.glob(os.path.join(glob.escape(self.folder), pattern)):
                with contextlib.suppress(OSError):
                    os.remove(path)


def _env() -> dict[str, str]:
    """The sweep's environment, in which the process imports this very sweeper: its folder
    first on the path unless it is where packages are installed anyway (``-P`` keeps the
    current folder off the path: a ``sweeper`` folder there is not this one)."""
    import site

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    installed = {os.path.abspath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _count(progress: tuple[int, int] | None, total: int | None) -> str:
    sent = progress[0] if progress is not None else 0
    total = total if total is not None else (progress[1] if progress is not None else None)
    return f"{sent:,} of {total:,} trials sent" if total is not None else f"{sent:,} trials sent"


# -- the process's side -------------------------------------------------------------------


class _Channel:
    """Lines to the parent, one JSON object each, from any thread."""

    def __init__(self, fd: int) -> None:
        self._out = os.fdopen(fd, "w", buffering=1)
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            try:
                self._out.write(json.dumps(message, default=str) + "\n")
            except (OSError, ValueError):  # the parent is gone: nothing to tell
                pass


class _Relay(logging.Handler):
    """sweeper's own lines, said by the parent's ``sweeper`` logger."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        self.channel.send({"log": [record.levelno, record.getMessage()]})


def _tie_to(parent: int) -> None:
    """Die with the parent (Linux: the kernel sends SIGKILL); stdin's EOF does it elsewhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before that took hold
        os._exit(0)


def main() -> int:
    """``python -m sweeper.tracking.process``: started by a sweep (:class:`TrackerProcess`)."""
    from sweeper.tracking.chosen import make
    from sweeper.tracking.mirror import Background, Mirror

    header = json.loads(sys.stdin.buffer.readline() or b"null")
    if not header:
        return 0
    _tie_to(header["parent"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    priority = lower_priority(int(header.get("nice", 0)))
    channel = _quiet(int(header.get("level", logging.WARNING)))
    folder = header["folder"]
    known: dict[str, TrialSpec] = {}
    asked: set[str] = set()
    ask = threading.Lock()

    def specs(tid: str) -> TrialSpec | None:  # from the trackers' threads
        spec = known.get(tid)
        if spec is None:
            with ask:
                if tid in asked:
                    return None
                asked.add(tid)
            channel.send({"need": [tid]})
        return spec

    trackers = make(SimpleNamespace(tensorboard=header["tensorboard"], mlflow=header["mlflow"],
                                    optuna=header.get("optuna")), folder)
    mirrors = [Mirror(folder, [t], SweepInfo.from_json(header["info"]), specs) for t in trackers]
    told: dict[int, tuple[int, int]] = {}

    def after(mirror: Mirror) -> None:  # from a tracker's thread, after each look
        i = mirrors.index(mirror)
        if not mirror.trackers:
            if told.get(i) != (-1, -1):
                told[i] = (-1, -1)
                channel.send({"failed": i})
            return
        now = (mirror.sent(mirror.trackers[0]), len(mirror.recorded))
        if told.get(i) != now:
            told[i] = now
            channel.send({"sent": [i, *now]})

    threads = [Background(m, after) for m in mirrors]
    state = _answers_until_the_end(known)
    if state is None:  # the sweep is gone without a word: so is this process
        os._exit(0)
    for thread in threads:
        thread.stop(state)
    waiting = dict(enumerate(threads))
    while waiting:
        for i, thread in list(waiting.items()):
            if thread.wait(0.05):
                del waiting[i]
                if mirrors[i].trackers:
                    channel.send({"closed": i})
    usage = resource.getrusage(resource.RUSAGE_SELF)
    channel.send({"cpu": usage.ru_utime + usage.ru_stime, "priority": priority})
    return 0


def _quiet(level: int) -> "_Channel":
    """The channel to the sweep (this process's stdout as it came), with stdout itself sent
    nowhere (MLflow prints there) and sweeper's log lines relayed through the channel."""
    channel = _Channel(os.dup(1))
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")
    sweeper_log = logging.getLogger("sweeper")
    sweeper_log.handlers[:] = [_Relay(channel)]
    sweeper_log.propagate = False
    sweeper_log.setLevel(level)
    return channel


def _answers_until_the_end(known: dict[str, TrialSpec]) -> SweepEnd | None:
    """Read the sweep's answers (trials' specs, into ``known``) until it says how it ended:
    that state, or None where its pipe closed without a word."""
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        known.update((tid, TrialSpec(trial_id=tid, name=name, index=index, params=params, seed=seed, dir=dir_))
                     for tid, (name, index, params, seed, dir_) in message.get("known", {}).items())
        if "end" in message:
            return SweepEnd(message["end"])
    return None


if __name__ == "__main__":
    sys.exit(main())
