"""The judge: how a trial ended, as a :class:`~sweeper.model.trial.Status` and one line of error.

Every status is decided here, for both backends and for command trials:

* in the trial process, :func:`returned` and :func:`raised` judge what ``train`` returned
  or raised (``ok``, ``error``, ``oom``, or the status a :class:`TrialFailed` names); a
  child process of the trial that failed (``CalledProcessError``) saying memory ran out,
  in its captured output or in the trial's log, is ``oom`` too (:func:`child_oom`);
* for a command trial, :func:`command_exit` judges the command's exit code and log;
* in the parent, :func:`judge` turns what is known of an ended trial into its verdict:
  a stop the parent asked for (timeout, Ctrl-C) wins over anything the trial said
  afterwards; else the trial's own :class:`~sweeper.model.protocol.Result`; else how its
  process died (:func:`exited`: exit code or signal, the log's last words, the backend's
  note), where out-of-memory is told from the log. An ``oom`` gets a hint that names
  what to change (:func:`oom_hint`).

A new way to end (search pruning a trial, say) is a new branch here and nowhere else.
"""

from __future__ import annotations

import signal
import subprocess
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from sweeper.model.metrics import BadResult, normalise
from sweeper.model.protocol import Began, Exited, Result
from sweeper.model.text import printable
from sweeper.model.trial import Status

#: Longest error kept for a trial that died (its log has the rest).
MAX_ERROR = 300

_OOM_TEXTS = (
    "resource_exhausted",
    "resourceexhausted",
    "out of memory",
    "cuda_error_out_of_memory",
    "oom when allocating",
    "failed to allocate",
    # allocator failures in native code: C++ operator new, CUDA, cuBLAS/cuDNN, malloc's ENOMEM
    "std::bad_alloc",
    "bad_alloc",
    "cudaerrormemoryallocation",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cannot allocate memory",
)


class TrialFailed(Exception):
    """A trial ended with a given status (a command that crashed, say), said plainly."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Verdict:
    status: Status
    error: str = ""
    metrics: dict[str, int | float] = field(default_factory=dict)


# -- in the trial process ------------------------------------------------------------------


def returned(value: Any) -> Verdict:
    """What ``train`` returned: metrics (``ok``), or an ``error`` saying what is expected."""
    try:
        return Verdict(Status.OK, "", normalise(value))
    except BadResult as exc:
        return Verdict(Status.ERROR, str(exc))


def raised(exc: BaseException, log_tail: Callable[[], list[str]] = list) -> Verdict:
    """What ``train`` raised: ``oom`` for out-of-memory (any framework, or a child process
    of the trial that failed saying so), the status of a :class:`TrialFailed`, else
    ``error`` with the exception's last line. ``log_tail``: the last lines of this
    attempt's log (:func:`sweeper.child.context.attempt_tail`), read only for a failed child."""
    if isinstance(exc, TrialFailed):
        return Verdict(exc.status, message(exc))
    if isinstance(exc, BadResult):
        return Verdict(Status.ERROR, message(exc))
    if is_oom(exc):
        return Verdict(Status.OOM, last_line(exc))
    said = child_oom(exc, log_tail)
    if said:
        return Verdict(Status.OOM, f"a child process ran out of memory ({said}): {last_line(exc)}"[:MAX_ERROR])
    return Verdict(Status.ERROR, last_line(exc))


def child_oom(exc: BaseException, log_tail: Callable[[], list[str]] = list) -> str:
    """The line that says memory ran out, from a child process whose failure ``exc`` reports
    (a ``subprocess.CalledProcessError``, raised or in its chain); "" if none says so.

    The child's words are where its stderr went: in the error's captured ``stderr`` /
    ``stdout`` (``capture_output=True``), else inherited into the trial's log, so the tail
    of this attempt's log is read. Only for a failed child: a trial's own warnings in its
    log never turn an unrelated exception into ``oom``.
    """
    failed = [e for e in _chain(exc) if isinstance(e, subprocess.CalledProcessError)]
    if not failed:
        return ""
    for err in failed:
        for output in (err.stderr, err.stdout):
            if isinstance(output, bytes):
                output = output.decode("utf-8", "replace")
            if isinstance(output, str):
                line = _oom_line(output[-16384:].splitlines())
                if line:
                    return line
    return _oom_line(log_tail())


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, each once."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


def _oom_line(lines: list[str]) -> str:
    return next((line.strip() for line in lines if text_says_oom(line)), "")


def last_line(exc: BaseException) -> str:
    """The exception's last line (a carriage return does not end a line here: the text
    before it stays, escaped when printed); see :func:`message` for one that cannot say it."""
    try:
        str(exc)  # traceback would put "<exception str() failed>" in its place, and not for every failure
        return traceback.format_exception_only(type(exc), exc)[-1].strip().split("\n")[-1]
    except BaseException as why:  # noqa: BLE001 - whatever rendering it raises: the trial's error
        return _unrendered(exc, why)


def message(exc: BaseException) -> str:
    """``str(exc)``; for an exception that cannot render its message (its ``__str__`` raises,
    even ``SystemExit``, or returns no text) its type's name and a note saying so, so that
    the trial is an ``error`` like any other, never a process that died judging it."""
    try:
        return str(exc)
    except BaseException as why:  # noqa: BLE001 - see above
        return _unrendered(exc, why)


def _unrendered(exc: BaseException, why: BaseException) -> str:
    """What stands for the message of an exception that cannot render it."""
    cls = type(exc)
    module, name = getattr(cls, "__module__", None), getattr(cls, "__qualname__", cls.__name__)
    shown = name if module in (None, "__main__", "builtins") else f"{module}.{name}"
    return f"{shown}: (its message could not be rendered: {type(why).__name__})"


def command_exit(code: int, tail: list[str]) -> Verdict:
    """A command that exited non-zero: ``oom`` if its log says memory ran out, else ``crashed``."""
    how = f"exit code {code}" if code > 0 else _signal_name(-code)
    last = next((t for t in reversed(tail) if t.strip()), "")
    status = Status.OOM if text_says_oom("\n".join(tail)) else Status.CRASHED
    return Verdict(status, f"the command ended with {how}; last log line: {last}"[:MAX_ERROR])


# -- in the parent ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """Everything the parent knows of a trial that ended."""

    began: Began  #: where it ran
    exited: Exited  #: how its process ended
    result: Result | None = None  #: what it said, if it said anything
    stop: Status | None = None  #: a stop the parent asked for first (timeout, interrupted)
    why: str = ""  #: the stop's reason
    tail: tuple[str, ...] = ()  #: its log's last lines from this attempt
    reported: dict[str, Any] = field(default_factory=dict)  #: its last per-epoch metrics


def judge(ending: Ending) -> Verdict:
    """The trial's status, error (one printable line) and metrics.

    A stop the parent asked for decides the status even when the trial then returned
    metrics (a SIGTERM handler that stops training and returns): partial metrics are
    kept, but never as ``ok``. Whatever the status, a row's metrics are those of the last
    epoch the trial reported, overridden by what ``train`` returned: so every row has the
    columns its trial reported (a ``pruned`` one, what the pruner judged it by).
    """
    result = ending.result
    returned = dict(result.metrics) if result is not None else {}
    metrics = {**returned, **{k: v for k, v in ending.reported.items() if k not in returned}}  # returned first
    if ending.stop is not None:
        verdict = Verdict(ending.stop, ending.why, metrics)
    elif result is not None:
        verdict = Verdict(result.status, result.error, metrics)
    else:
        verdict = exited(ending.exited, list(ending.tail))
        verdict = Verdict(verdict.status, verdict.error, metrics)
    error = verdict.error
    if verdict.status is Status.OOM and ending.exited.crowded:  # others took the memory it was placed with
        error = f"{error} (not its own: {ending.exited.crowded})"
    elif verdict.status is Status.OOM:
        place = ending.began
        device = "cpu" if ending.exited.oom_killed else place.device  # the host's memory ran out
        error = f"{error} (hint: {oom_hint(device, place.cap_mb, place.fraction, place.packed, place.alone_mb)})"
    return Verdict(verdict.status, printable(error), verdict.metrics)


def exited(how: Exited, tail: list[str]) -> Verdict:
    """A process that ended without a result: name how, and look for out-of-memory in its log."""
    if how.cancelled:
        return Verdict(Status.INTERRUPTED, "cancelled")
    code = how.exitcode
    if how.oom_killed:
        return Verdict(Status.OOM, f"killed by the kernel's out-of-memory killer ({how.oom_killed})"[:MAX_ERROR])
    if how.time_limit:
        return Verdict(Status.TIMEOUT, f"ran past {how.time_limit} and was ended by it"[:MAX_ERROR])
    if code is None and how.note:  # the backend knows no more than its own words
        return Verdict(Status.CRASHED, how.note[:MAX_ERROR])
    if code is not None and code < 0:
        what = _signal_name(-code)
        if -code == signal.SIGKILL:
            what += " (killed from outside: often the kernel's out-of-memory killer, see dmesg)"
    else:
        what = f"exit code {code}"
    last = next((t.strip() for t in reversed(tail) if t.strip()), "")
    if text_says_oom("\n".join(tail)):
        return Verdict(Status.OOM, f"ran out of memory and died ({what}): {last}"[:MAX_ERROR])
    detail = (f" ({how.note})" if how.note else "") + (f"; last log line: {last}" if last else "")
    return Verdict(Status.CRASHED, f"died with {what} before returning a result{detail}"[:MAX_ERROR])


def unreadable(exc: BaseException) -> Result:
    """A result the parent could not read back (its pickle names a class it cannot import)."""
    return Result(Status.ERROR, {}, f"its result could not be read back by the sweep: {type(exc).__name__}: {exc}")


def oom_hint(device: str, cap_mb: int | None = None, fraction: str | None = None, packed: bool = False,
             alone_mb: int | None = None) -> str:
    """What to change after an out-of-memory, given where the trial ran (``alone_mb``: the
    size of the card it had to itself, the sweep's largest)."""
    if not device or device == "cpu":
        return "host memory ran out; run fewer trials at once (--workers) or use a smaller batch size"
    if packed and alone_mb:
        return (f"no card here can hold it: it ran out with {device}, the largest card ({alone_mb} MB), to itself "
                f"under a cap of {cap_mb} MB, after two OOMs; use a smaller batch size or model, or a larger card")
    if packed:
        return (f"it ran under a cap of {cap_mb} MB on {device}, from what per_gpu auto predicted; a first OOM "
                "runs again with 1.5x, a second with the largest card to itself; a --gpu-memory hint or --memory-keys "
                "that tell sizes apart predict better")
    if cap_mb:
        cap = f"a cap of {cap_mb} MB"
    elif fraction:
        cap = f"a cap of {fraction} of the card"
    else:
        cap = "memory growth"
    return (f"it ran under {cap} on {device}; give each trial more with a lower --per-gpu "
            "or a higher --memory-fraction, or use a smaller batch size")


# -- out of memory ---------------------------------------------------------------------------


def is_oom(exc: BaseException) -> bool:
    """Whether an exception means out of memory (GPU or host), for any framework."""
    if isinstance(exc, MemoryError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"ResourceExhaustedError", "OutOfMemoryError"}:
        return True
    return text_says_oom(message(exc))


def text_says_oom(text: str) -> bool:
    """Whether a log or message says that memory ran out."""
    low = text.lower()
    return any(t in low for t in _OOM_TEXTS)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
