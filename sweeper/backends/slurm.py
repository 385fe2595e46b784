"""(Spike, issue 41: not registered, not documented.) Trials as Slurm jobs, through files.

Each trial is one job, ``python -m sweeper.child.batch <trial dir>`` (:mod:`sweeper.child.batch`),
submitted with ``sbatch --parsable``; its messages and result come back through files in
the trial's folder, which the nodes share with the driver. How a job ended is read from
``squeue`` (still queued or running) and ``scontrol show job`` (its state and exit code,
kept ``MinJobAge`` seconds after it ends): no ``sacct``. At most one query per
``POLL_S`` seconds, whatever the number of trials.

Left for issue 41: job arrays (``%K``, split at ``MaxArraySize``), the shared-folder check,
``--slurm KEY=VALUE`` options (an options group), GPUs (``--gres``), requeued jobs,
adoption of a killed driver's jobs from the ledger, Slurm's TIMEOUT and OUT_OF_MEMORY.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import subprocess
import sys
import time
from typing import Any

from sweeper.backends.channel import Relay, finished
from sweeper.backends.slurm_options import SlurmOptions
from sweeper.child.batch import JobReader, write_job
from sweeper.child.channel import sweep_token
from sweeper.model.protocol import Exited, Traits
from sweeper.store.paths import JobPaths, atomic

#: Seconds between two looks at Slurm's queue.
POLL_S = 2.0
#: Job states that are final (``scontrol``'s words).
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


class SlurmBackend:
    def __init__(self, launch: Any) -> None:
        self.target = launch.target
        self.own = launch.options.backend_options or SlurmOptions().checked()
        self.traits = Traits(launch.options.worker_count or 2, stop_word="cancelled")
        self.relay = Relay()
        self.jobs: dict[str, tuple[Any, str, JobReader]] = {}  # trial id -> spec, job id, its files
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.looked = 0.0

    def open(self) -> None:
        pass

    def start(self, spec: Any) -> None:
        """Submit the trial's job; or adopt the one a killed driver left for it (still queued or
        running, or ended with its result written): no trial is trained twice."""
        job = _adoptable(spec)
        if job is None:
            write_job(spec, self.target, {}, sweep_token(spec.dir))
            command = f"exec {shlex.quote(sys.executable)} -m sweeper.child.batch {shlex.quote(spec.dir)}"
            done = subprocess.run(["sbatch", "--parsable", *self.own.sbatch(), f"--job-name={_name(spec)}",
                                   f"--output={os.path.join(spec.dir, '.job', 'slurm.out')}", "--wrap", command],
                                  env=self.env, capture_output=True, text=True, check=True)
            job = done.stdout.strip().split(";")[0]
            with atomic(_job_file(spec)) as f:
                f.write(job)
        self.jobs[spec.trial_id] = (spec, job, JobReader(spec.dir))
        self.relay.watch(spec.trial_id)
        return None  # its Began comes with its Placed message, from the node

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Any]]:
        select.select([wake], [], [], 0.2 if timeout is None else min(timeout, 0.2))
        events: list[tuple[str, Any]] = []
        for spec, _, reader in self.jobs.values():
            events += self.relay.events(reader.messages())
        if self.jobs and time.monotonic() - self.looked >= POLL_S:
            self.looked = time.monotonic()
            for tid, (state, code) in self._ended().items():
                events += self._exited(tid, state, code)
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Any]]:
        if trial_id not in self.jobs:
            return []
        return self.relay.events(self.jobs[trial_id][2].messages())

    def cancel(self, trial_id: str, hard: bool) -> None:
        if trial_id in self.jobs:
            signal = [] if hard else ["--signal=TERM", "--full"]
            subprocess.run(["scancel", *signal, self.jobs[trial_id][1]], capture_output=True)

    def tell(self, trial_id: str, message: Any) -> None:
        pass  # traits.answers is False: the pruner's stop is a cancel

    def close(self) -> list[tuple[str, Any]]:
        if self.jobs:
            subprocess.run(["scancel", *(job for _, job, _ in self.jobs.values())], capture_output=True)
        for spec, _, _ in self.jobs.values():
            _seen_end(spec)
        self.jobs.clear()
        return []

    def _ended(self) -> dict[str, tuple[str, int | None]]:
        """The jobs that ended since the last look: their state and exit code."""
        by_job = {job: tid for tid, (_, job, _) in self.jobs.items()}
        out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(by_job)], capture_output=True,
                             text=True)
        live = {line.split()[0] for line in out.stdout.splitlines()
                if line.split() and line.split()[1] not in FINAL}
        ended = {}
        for job, tid in by_job.items():
            if job not in live:
                ended[tid] = _state(job)
        return ended

    def _exited(self, trial_id: str, state: str, code: int | None) -> list[tuple[str, Any]]:
        spec, job, reader = self.jobs.pop(trial_id)
        _seen_end(spec)
        events = self.relay.events(reader.messages())  # what it sent before it ended
        heard = self.relay.forget(trial_id)
        exitcode = code if heard.exitcode is None else heard.exitcode
        out = reader.returned()
        if out is None:
            return [*events, (trial_id, _how(job, state, exitcode))]
        return [*events, *finished(spec, out, exitcode)]


def _name(spec: Any) -> str:
    return f"sweeper-{spec.trial_id}"


def _job_file(spec: Any) -> str:
    """Where the trial's folder keeps its job's id (the next driver adopts the job from it)."""
    return os.path.join(spec.dir, ".job", "slurm_job")


def _seen_end(spec: Any) -> None:
    """A driver saw the trial's job end (or ended it): no later driver adopts it."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(_job_file(spec))


def _adoptable(spec: Any) -> str | None:
    """The job a driver submitted for this trial and left (killed, its ssh session lost), where
    it is still queued or running under the trial's name, or ended with its result written."""
    try:
        with open(_job_file(spec)) as f:
            job = f.read().strip()
    except OSError:
        return None
    if not job.isdigit():
        return None
    if os.path.exists(JobPaths(spec.dir).returned):
        return job
    out = subprocess.run(["squeue", "-h", "-o", "%T %j", "-j", job], capture_output=True, text=True).stdout.split()
    return job if len(out) == 2 and out[0] not in FINAL and out[1] == _name(spec) else None


def _how(job: str, state: str, exitcode: int | None) -> Exited:
    """How a job that returned nothing ended, in the judge's terms: Slurm's time limit is a
    ``timeout``, its memory limit an ``oom``; a cancel from outside says so."""
    if state == "TIMEOUT":
        return Exited(exitcode, time_limit=f"Slurm's time limit (job {job})")
    if state == "OUT_OF_MEMORY":
        return Exited(exitcode, oom_killed=f"Slurm's memory limit, job {job}")
    if state == "CANCELLED":
        return Exited(exitcode, note=f"cancelled: Slurm job {job} was cancelled from outside the sweep")
    return Exited(exitcode, note=f"Slurm job {job} ended {state}")


def _state(job: str) -> tuple[str, int | None]:
    """A finished job's state and exit code (a signal as a negative code), from scontrol."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    state = re.search(r"JobState=(\S+)", out)
    code = re.search(r"ExitCode=(\d+):(\d+)", out)
    if code is None:
        return (state.group(1) if state else "UNKNOWN", None)
    status, signal = int(code.group(1)), int(code.group(2))
    return (state.group(1) if state else "UNKNOWN", -signal if signal else status)


def factory(launch: Any) -> SlurmBackend:
    return SlurmBackend(launch)
