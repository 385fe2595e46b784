"""Trials as Slurm array jobs, through files in the sweep's folder (which the nodes share).

A trial started is held here until it may be submitted; held trials go to Slurm together,
as one array job whose task ``i`` runs the trial on line ``i`` of its list
(``python -m sweeper.child.batch --list <sweep>/.jobs/<array>.txt``). Its messages and
result come back through its folder's ``.job/`` files (:mod:`sweeper.child.batch`); how a
task that returned nothing ended is Slurm's to say (``squeue``, ``scontrol``: no ``sacct``)::

    engine.start ─▶ held ─▶ sbatch --array=0-(n-1)%K ──▶ Slurm ──▶ task i on a node
                                                            python -m sweeper.child.batch
    wait: every READ_S, the files of the tasks Slurm runs ◀── .job/messages: Placed, Reports
          (Placed ▶ Began: job, node, device)             ◀── .job/returned.pkl ▶ Result, Exited
          every POLL_S, one squeue for the whole sweep:
             a task gone from the queue with no result ▶ scontrol: how it ended ▶ Exited

At most ``K`` (``workers``) tasks are unfinished at a time: the first submission's array
holds every trial queued ahead, throttled by Slurm itself (``%K``, split at the cluster's
``MaxArraySize``); later ones (retries, a search's next points, the rest past
``MaxArraySize``) go once fewer than ``K`` are unfinished, as many as fill it, in one array.

A task Slurm requeues (its node failed, it was preempted) is not final: it is pending
again, begins again (its clock starts again; said in the log), and its row is written once.
A task that waits is told to the engine with Slurm's reason (``Pending``: the live view shows
it); a reason that means it never starts (:func:`~sweeper.backends.slurm.rules.never`), seen
at two looks in a row, ends it: cancelled, its row ``crashed`` naming the reason and the fix.
A driver killed meanwhile leaves the tasks queued and running; the next one adopts them
(:mod:`sweeper.backends.slurm.adoption`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shlex
import sys
import time
from typing import TYPE_CHECKING, Any

from sweeper.backends.channel import Relay, finished
from sweeper.backends.slurm import commands
from sweeper.backends.slurm.adoption import Left, comment, look, said, uid_of
from sweeper.backends.slurm.options import SlurmOptions
from sweeper.backends.slurm.rules import (
    Task,
    array_size,
    how_it_ended,
    job_name,
    named,
    never,
    not_shared,
    output_folder,
    seen_end,
    unseen_failure,
    unshared,
)
from sweeper.child.batch import JobReader, write_job, write_list
from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.protocol import Event, Exited, Pending, Placed, Requeued, Traits
from sweeper.model.trial import TrialSpec
from sweeper.store.paths import JobPaths, SweepPaths, atomic

if TYPE_CHECKING:
    from sweeper.model.options import Options
    from sweeper.model.target import Target

log = logging.getLogger("sweeper")

#: Seconds between two looks at Slurm's queue (one ``squeue`` for the whole sweep).
POLL_S = 2.0
#: Seconds between two reads of the running tasks' message files.
READ_S = 0.25
#: ``workers`` where it is not given: at most this many of the sweep's tasks at a time.
DEFAULT_WORKERS = 32
#: Seconds a task Slurm says COMPLETED may take to show its result here (a network file
#: system's attribute cache), before it is judged without one.
RESULT_GRACE_S = 10.0
#: Seconds a task may stay in Slurm's queue after its result came before it is cancelled (a
#: thread of train's that keeps its process alive).
LINGER_S = 30.0
#: Seconds before a submission that failed, after the first, is tried again.
RETRY_S = 30.0


class SlurmBackend:
    """The Backend protocol on Slurm (see the module's docstring)."""

    def __init__(self, target: Target, options: Options) -> None:
        why = commands.missing()
        if why:
            raise SweepError(why)
        self.target = target
        self.own: SlurmOptions = options.backend_options or SlurmOptions().checked()
        jobs: tuple[list[str], dict[str, str]] = self.own.jobs(options)
        self.sbatch, self.env = jobs
        self.traits = Traits(options.worker_count or DEFAULT_WORKERS, stop_word="cancelled", queues=True)
        self.relay = Relay(self.env.get(contract.MEMORY_FRACTION))
        #: what sbatch hands every job: this process's environment, and its imports' paths
        self.submit_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.tasks: dict[str, Task] = {}  #: by trial id: started here and not yet told ended
        self.held: list[str] = []  #: trial ids started, not yet submitted
        #: task id -> when its result came: told ended, still in Slurm's queue (it counts in ``workers``)
        self.lingering: dict[str, float] = {}
        self.begun: set[str] = set()  #: trial ids started by this driver (a retry adopts no task)
        self.inflight: list[Any] = []  #: scancel commands sent, not yet reaped
        self.submit_failing: float | None = None  #: when a later submission failed (retried after RETRY_S)
        self.sweep: SweepPaths | None = None
        self.name = ""  #: every job of the sweep is named so (the one squeue looks for it)
        self.looked = self.read = 0.0
        self.arrays = 0  #: arrays tried (each its own list file)
        self.submitted = 0  #: arrays Slurm took
        self.max_array = 0
        self.shared = False  #: a file a task wrote was seen here
        self.queue_failing: float | None = None
        self.cancels: dict[str, list[str]] = {}  #: what to tell scancel next: "cancel", "TERM", "KILL" -> task ids
        self.uid = ""  #: the sweep's uid (its ledger's), which each array's comment carries
        self.left = Left()  #: what earlier drivers of the sweep left in Slurm's queue
        self.told: set[str] = set()  #: the reasons never to start said already

    # -- the Backend protocol ---------------------------------------------------------

    def open(self) -> None:
        pass

    def start(self, spec: TrialSpec) -> None:
        """Hold the trial until it may be submitted; or adopt the task a killed driver left for
        it (still queued or running, or ended with its result written): no trial trains twice."""
        if self.sweep is None:
            self._first(spec)
        task = Task(spec, JobReader(spec.dir))
        if spec.trial_id in self.begun or not self.left.take(task):  # (a retry starts anew)
            write_job(spec, self.target, self.env, None)
            self.held.append(spec.trial_id)
        self.begun.add(spec.trial_id)
        self.tasks[spec.trial_id] = task
        self.relay.watch(spec.trial_id)
        return None  # its Began comes when its task runs

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Event]]:
        if self.left.adopted:  # the first wait after the trials started: said once
            log.warning("%s", said(self.left.adopted))
            self.left.adopted = []
        self._send_cancels()
        events = self._cancel_held()
        self._submit()
        if not events:
            select.select([wake], [], [], READ_S if timeout is None else min(timeout, READ_S))
        now = time.monotonic()
        if now - self.read >= READ_S:
            self.read = now
            self._started()
            for tid, task in list(self.tasks.items()):
                if task.job and (task.running or task.began):
                    events += self._heard(tid, task)
        if (self.tasks or self.lingering) and now - self.looked >= POLL_S:
            self.looked = now
            events += self._look(now)
        return events

    def drain(self, trial_id: str) -> list[tuple[str, Event]]:
        task = self.tasks.get(trial_id)
        return self._heard(trial_id, task) if task is not None and task.job else []

    def cancel(self, trial_id: str, hard: bool) -> None:
        """A held trial is dropped (its end told at the next wait); a pending task is cancelled; a
        running one is sent SIGTERM (``hard``: SIGKILL), all its processes."""
        task = self.tasks.get(trial_id)
        if task is None:
            return
        if not task.job:
            task.cancelled = "cancel"
            return
        task.cancelled = ("KILL" if hard else "TERM") if task.running else "cancel"
        self.cancels.setdefault(task.cancelled, []).append(task.job)  # sent at the next wait, together

    def _send_cancels(self) -> None:
        """The cancels asked since the last wait: one scancel for each kind, however many tasks,
        the waiting ones first; not waited for (scancel may take seconds to signal a task that
        is ending), reaped at later waits."""
        self.inflight = [p for p in self.inflight if p.poll() is None]
        for how in sorted(self.cancels, key=lambda h: h != "cancel"):
            self.inflight += commands.cancel(self.cancels[how], None if how == "cancel" else how, wait=False)
        self.cancels.clear()

    def tell(self, trial_id: str, message: Any) -> None:
        pass  # traits.answers is False: a pruner's stop is a cancel

    def close(self) -> list[tuple[str, Event]]:
        """Every task of the sweep still in Slurm's queue cancelled, at once (none outlives the
        sweep); the trials that ended meanwhile told."""
        events: list[tuple[str, Event]] = []
        for tid, task in list(self.tasks.items()):
            if task.job:
                events += self._heard(tid, task)
        left = [task.job for task in self.tasks.values() if task.job] + list(self.lingering)
        left += [job for jobs in self.cancels.values() for job in jobs]  # asked, not yet sent
        left += [job for job in self.left.queued if job not in self.left.taken]  # an earlier run's, of no trial now
        self.cancels.clear()
        if left:
            commands.cancel(list(dict.fromkeys(left)))
        for p in self.inflight:
            with contextlib.suppress(Exception):
                p.wait(timeout=commands.COMMAND_S)
        for task in self.tasks.values():
            if task.job:
                seen_end(task.spec, task.job)
        self.tasks.clear()
        self.held.clear()
        self.lingering.clear()
        return events

    # -- submitting ---------------------------------------------------------------------

    def _first(self, spec: TrialSpec) -> None:
        """The sweep's folder, its jobs' name, its uid, and what earlier drivers of it left in
        Slurm's queue, from its first trial."""
        self.sweep = SweepPaths.of_trial(spec.dir)
        output_folder(self.sweep.jobs)
        self.name = job_name(self.sweep.folder)
        self.max_array = commands.max_array_size()
        if self.max_array < 1:
            raise SweepError("this cluster has job arrays turned off (MaxArraySize=0 in its slurm.conf); sweeper "
                             "submits trials as arrays: ask its administrators, or use another backend")
        self.uid = uid_of(self.sweep.folder)
        self.left = look(self.name, self.uid, self.sweep.jobs)

    def _jobs_folder(self) -> str:
        assert self.sweep is not None
        return self.sweep.jobs

    def _unfinished(self) -> int:
        return sum(1 for t in self.tasks.values() if t.job) + len(self.lingering)

    def _submit(self) -> None:
        """Held trials to Slurm, as one array, as far as ``workers`` allows (see the module's docstring)."""
        if not self.held:
            return
        if self.submit_failing is not None and time.monotonic() - self.submit_failing < RETRY_S:
            return
        k = self.traits.capacity
        n = array_size(len(self.held), self._unfinished(), k, self.max_array)
        if not n:
            return
        submitted: tuple[str, str] | None = None
        try:
            submitted = self._array(self.held[:n], k)
        except SweepError as exc:
            if n > k:  # a cluster's limit on submitted tasks (MaxSubmitJobs): workers at a time
                with contextlib.suppress(SweepError):
                    submitted, n = self._array(self.held[:k], k), k
            if submitted is None:
                if not self.submitted:  # the first: the options are wrong, say so at once
                    raise
                if self.submit_failing is None:  # later: the controller may be busy; the trials wait
                    log.warning("sweeper: %s; trying again every %gs", exc, RETRY_S)
                self.submit_failing = time.monotonic()
                return
        job, listed = submitted
        self.submitted += 1
        self.submit_failing = None
        batch, self.held = self.held[:n], self.held[n:]
        for i, tid in enumerate(batch):  # every task's id first: close() cancels them, whatever follows
            self.tasks[tid].job, self.tasks[tid].output = f"{job}_{i}", f"{listed}_{i}.out"
        for tid in batch:
            task = self.tasks[tid]
            try:  # (a full disk here costs only the adoption of this task by a later driver)
                with atomic(JobPaths(task.spec.dir).scheduled, fsync=False) as f:
                    f.write(f"{task.job}\n{task.output}\n")
            except OSError:
                pass

    def _array(self, tids: list[str], k: int) -> tuple[str, str]:
        """One array job of these held trials, throttled to ``k``: its id and its list's path (less
        ``.txt``). The list is written first and named in the array's comment: a driver killed
        before it reads the id leaves an array the next one finds (:mod:`~sweeper.backends.slurm.adoption`)."""
        self.arrays += 1
        listed = os.path.join(self._jobs_folder(), f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{self.arrays}")
        write_list(listed + ".txt", [self.tasks[tid].spec.dir for tid in tids])
        command = (f"exec {shlex.quote(sys.executable)} -m sweeper.child.batch --list "
                   f"{shlex.quote(listed + '.txt')}")
        array = f"0-{len(tids) - 1}" + (f"%{k}" if len(tids) > k else "")
        return commands.submit(self.sbatch, self.name, commands.pattern(listed) + "_%a.out", command, array,
                               self.submit_env, comment(self.uid, listed)), listed

    def _cancel_held(self) -> list[tuple[str, Event]]:
        """Held trials the engine cancelled: never submitted, ended now."""
        events: list[tuple[str, Event]] = []
        for tid in [t for t in self.held if self.tasks[t].cancelled]:
            self.held.remove(tid)
            del self.tasks[tid]
            self.relay.forget(tid)
            events.append((tid, Exited(None, note="cancelled before Slurm ran it")))
        return events

    # -- hearing from tasks -------------------------------------------------------------

    def _started(self) -> None:
        """Tasks that started since the last look at the sweep's jobs folder, where slurmd makes
        each task's output file as it starts (one listing, not a file per task): their files
        are read from now on, before Slurm's queue says they run."""
        # (a task Slurm ran once and requeued has its file already: the queue says when it runs again)
        waiting = {os.path.basename(t.output): t for t in self.tasks.values()
                   if t.job and not t.running and t.seen is None}
        if not waiting:
            return
        try:
            present = os.listdir(self._jobs_folder())
        except OSError:
            return
        for name in present:
            task = waiting.get(name)
            if task is not None:
                task.running = self.shared = True

    def _heard(self, tid: str, task: Task) -> list[tuple[str, Event]]:
        """What a task wrote since the last read: its messages, and its result once it wrote it
        (told at once; its place in ``workers`` is freed when Slurm lets the task go)."""
        batch = task.reader.messages()
        for _, message in batch:
            if isinstance(message, Placed):
                task.began += 1
                task.host, task.running, task.requeued = message.host or task.host, True, False
                self.shared = True
        events = [(t, named(task, e)) for t, e in self.relay.events(batch)]
        out = task.reader.returned()
        if out is None:
            return events
        self.shared = True
        heard = self.relay.forget(tid)
        del self.tasks[tid]
        seen_end(task.spec, task.job)  # its result is read: no later driver adopts it (nor replays it)
        self.lingering[task.job] = time.monotonic()
        ended = finished(task.spec, out, heard.exitcode if heard.exitcode is not None else 0)
        return events + [(t, named(task, e)) for t, e in ended]

    # -- looking at Slurm's queue -------------------------------------------------------

    def _look(self, now: float) -> list[tuple[str, Event]]:
        """One squeue for the whole sweep: which tasks run, which left the queue; how those that
        left with no result ended."""
        live = commands.queue(self.name)
        if live is None:
            if self.queue_failing is None:
                self.queue_failing = now
                log.warning("sweeper: Slurm's queue cannot be read (squeue failed); looking again every %gs",
                            POLL_S)
            return []
        self.queue_failing = None
        for job, since in list(self.lingering.items()):
            if job not in live:
                del self.lingering[job]
            elif now - since > LINGER_S:  # its result came long ago; something of train's keeps it alive
                self.cancels.setdefault("cancel", []).append(job)
                self.lingering[job] = now
        events: list[tuple[str, Event]] = []
        gone: list[tuple[str, Task]] = []
        for tid, task in list(self.tasks.items()):
            if not task.job:
                continue
            seen = live.get(task.job)
            if seen is None:
                gone.append((tid, task))
                continue
            task.running = seen.state not in commands.WAITING
            if task.running and task.seen is None:
                task.seen = now
            if not task.running and task.began and not task.requeued:  # Slurm requeued it
                task.requeued = True
                events.append((tid, Requeued(f"Slurm requeued job {task.job} (its node failed, or it was "
                                             "preempted); it waits in the queue to run again, from the start")))
            events += self._waits(tid, task, "" if task.running else seen.reason or seen.state)
        events += self._gone(gone, now)
        self._check_shared(now)
        return events

    def _waits(self, tid: str, task: Task, reason: str) -> list[tuple[str, Event]]:
        """A task's reason to wait (Slurm's, "" while it runs): told when it changes; one that
        means it never starts, seen at two looks in a row, ends it (cancelled; said once)."""
        events: list[tuple[str, Event]] = []
        if reason != task.reason:
            task.reason = reason
            if reason:
                events.append((tid, Pending(reason)))
        meaning = never(reason) if reason and not task.cancelled else ""
        if not meaning or task.never != meaning:
            task.never = meaning  # (the first look that says so: the next one decides)
            return events
        del self.tasks[tid]
        seen_end(task.spec, task.job)
        self.relay.forget(tid)
        self.cancels.setdefault("cancel", []).append(task.job)
        if meaning not in self.told:
            self.told.add(meaning)
            log.warning("sweeper: Slurm never starts the sweep's tasks as asked (%s); each is cancelled and "
                        "recorded crashed: change the --slurm options, then run the same command again", meaning)
        return events + [(tid, Exited(None, note=f"Slurm never starts job {task.job} as asked: it waits for "
                                                 f"{meaning}; change that, then run the same command again",
                                      job=task.job))]

    def _gone(self, gone: list[tuple[str, Task]], now: float) -> list[tuple[str, Event]]:
        """Tasks gone from Slurm's queue: their last messages and results; how those with none
        ended (one scontrol per array job, for those Slurm ran: one cancelled while it waited
        is known already)."""
        events: list[tuple[str, Event]] = []
        for tid, task in gone:
            events += self._heard(tid, task)
        left = [(tid, task) for tid, task in gone if self.tasks.get(tid) is task]  # no result came
        asked = [task.job for _, task in left if task.ended is None
                 and not (task.cancelled and not task.running and not task.began)]
        said = commands.ended(asked) if asked else {}
        for tid, task in left:
            if task.seen is None:
                task.seen = now
            if task.ended is None:
                task.ended, task.left = said.get(task.job, commands.Ended("CANCELLED")), now
            events += self._left(tid, task, now)
        return events

    def _left(self, tid: str, task: Task, now: float) -> list[tuple[str, Event]]:
        """A task gone from Slurm's queue with no result: told ended once Slurm says how."""
        assert task.ended is not None and task.left is not None
        if task.ended.state not in commands.FINAL and task.ended.state != "UNKNOWN":
            task.ended = None  # scontrol sees it still (squeue may not show every partition): not ended
            return []
        if task.ended.state in ("COMPLETED", "UNKNOWN") and not task.cancelled and now - task.left < RESULT_GRACE_S:
            return []  # it may have returned: its result may be on its way through the file system
        if not self.shared and unseen_failure(task, task.ended):  # its node could not write in the folder
            assert self.sweep is not None
            raise not_shared(task.job, self.sweep.folder)
        del self.tasks[tid]
        seen_end(task.spec, task.job)
        heard = self.relay.forget(tid)
        code = heard.exitcode if heard.exitcode is not None else task.ended.exitcode
        ran = task.ran or (task.ended.state != "UNKNOWN" and bool(task.ended.node))
        return [(tid, how_it_ended(task.job, task.host or task.ended.node, task.output,
                                   bool(task.cancelled), task.ended, code, ran))]

    def _check_shared(self, now: float) -> None:
        """The sweep's folder must be one the nodes share (see :func:`unshared`); once a file of
        a task showed here, it is."""
        if self.shared:
            return
        assert self.sweep is not None
        self.shared = unshared(list(self.tasks.values()), now, self.sweep.folder)
