"""A batch queue in miniature, from outside sweeper: each trial a job that shares only the
filesystem with the sweep, ``python -m sweeper.child.batch <trial dir>`` run as its own
process (where a Slurm backend would ``sbatch`` the same command). Its messages and its
result come back through files (:mod:`sweeper.child.batch`), and the sweep's answers to its
reports go to it through one; how it ended, from the process, as a scheduler would say.
Registered through ``sweeper.backends.register``."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from typing import Any

from sweeper.backends import Launch
from sweeper.backends.channel import Relay, finished
from sweeper.child.batch import JobReader, write_job
from sweeper.child.channel import sweep_token
from sweeper.model.protocol import Exited, Traits


class BatchBackend:
    def __init__(self, launch: Launch) -> None:
        self.target = launch.target
        self.traits = Traits(launch.options.worker_count or 2, stop_word="cancelled", answers=True)
        self.relay = Relay()
        self.jobs: dict[str, tuple[Any, subprocess.Popen[bytes], JobReader]] = {}
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

    def open(self) -> None:
        pass

    def start(self, spec: Any) -> None:
        write_job(spec, self.target, {"CUDA_VISIBLE_DEVICES": "-1"}, sweep_token(spec.dir))
        job = subprocess.Popen([sys.executable, "-m", "sweeper.child.batch", spec.dir], env=self.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.jobs[spec.trial_id] = (spec, job, JobReader(spec.dir))
        self.relay.watch(spec.trial_id)
        return None  # its Began comes with its Placed message

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Any]]:
        select.select([wake], [], [], 0.1 if timeout is None else min(timeout, 0.1))  # a queue is polled
        events: list[tuple[str, Any]] = []
        for tid, (spec, job, reader) in list(self.jobs.items()):
            ended = job.poll() is not None  # before reading: what it sent before it ended is in
            events += self.relay.events(reader.messages())
            if ended:
                events += self._ended(tid)
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Any]]:
        if trial_id not in self.jobs:
            return []
        return self.relay.events(self.jobs[trial_id][2].messages())

    def cancel(self, trial_id: str, hard: bool) -> None:
        if trial_id in self.jobs:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.jobs[trial_id][1].pid, signal.SIGKILL if hard else signal.SIGTERM)

    def tell(self, trial_id: str, message: Any) -> None:
        if trial_id in self.jobs:  # into its .job/answers, which the job reads at each report
            self.jobs[trial_id][2].answer(message)

    def close(self) -> list[tuple[str, Any]]:
        for _, job, _ in self.jobs.values():
            job.kill()
            job.wait()
        self.jobs.clear()
        return []

    def _ended(self, trial_id: str) -> list[tuple[str, Any]]:
        spec, job, reader = self.jobs.pop(trial_id)
        heard = self.relay.forget(trial_id)
        exitcode = job.returncode if heard.exitcode is None else heard.exitcode
        out = reader.returned()
        if out is None:  # killed, or it died before it returned
            return [(trial_id, Exited(exitcode))]
        return finished(spec, out, exitcode)


def factory(launch: Launch) -> BatchBackend:
    return BatchBackend(launch)
