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
``MaxArraySize``, points with sbatch options of their own) go once fewer than ``K`` are
unfinished, as many as fill it, in one array (:mod:`~sweeper.backends.slurm.submission`).

A task Slurm requeues (its node failed, it was preempted) is not final: it is pending
again, begins again (its clock starts again; said in the log), and its row is written once.
A task that waits is told to the engine with Slurm's reason (``Pending``: the live view shows
it); a reason that means it never starts (:func:`~sweeper.backends.slurm.rules.never`), where
Slurm's own sizes confirm it or it stands for ``NEVER_AFTER_S``, ends it: cancelled, its row
``crashed`` naming the reason and the fix. A task that ran and ended before its trial began
(an import that fails on the node, a set-up line) is told as begun when its output file
showed, and ended naming that file. A driver killed meanwhile leaves the tasks queued and
running; the next one adopts them (:mod:`sweeper.backends.slurm.adoption`); whatever an
earlier run left that no trial of this one takes is cancelled once the first trials started.
The driver beats in the folder (:mod:`~sweeper.backends.slurm.driver`) for other machines to
see; a task's mark in its trial's folder goes once the engine has recorded what it made of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from typing import TYPE_CHECKING, Any

from sweeper.backends.channel import Relay, finished
from sweeper.backends.slurm import commands, driver
from sweeper.backends.slurm.adoption import Left, cancelled, look, said, uid_of
from sweeper.backends.slurm.options import SlurmOptions
from sweeper.backends.slurm.rules import (
    Task,
    appeared,
    gives_up,
    how_it_ended,
    job_name,
    last_line,
    named,
    never,
    not_shared,
    output_folder,
    seen_end,
    unseen_failure,
)
from sweeper.backends.slurm.submission import Submitter, submit_env
from sweeper.child.batch import JobReader, write_job
from sweeper.errors import SweepError
from sweeper.model import contract
from sweeper.model.protocol import Began, Event, Exited, Pending, Placed, Requeued, Traits
from sweeper.model.trial import TrialSpec
from sweeper.store.paths import SweepPaths

if TYPE_CHECKING:
    from sweeper.model.settings import Settings
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


class SlurmBackend:
    """The Backend protocol on Slurm (see the module's docstring)."""

    def __init__(self, target: Target, settings: Settings) -> None:
        why = commands.missing()
        if why:
            raise SweepError(why)
        self.target, self.resources = target, settings.resources
        self.own = settings.backend if isinstance(settings.backend, SlurmOptions) else SlurmOptions().checked()
        self.own.jobs(self.resources)  # (a mistake in the options is said now, before the first trial)
        self.traits = Traits(self.resources.workers or DEFAULT_WORKERS, "cancelled", queues=True, answers=True)
        self.relay = Relay(self.own.jobs(self.resources)[1].get(contract.MEMORY_FRACTION))
        self.tasks: dict[str, Task] = {}  #: by trial id: started here and not yet told ended
        #: task id -> when its result came: told ended, still in Slurm's queue (it counts in ``workers``)
        self.lingering: dict[str, float] = {}
        self.begun: set[str] = set()  #: trial ids started by this driver (a retry adopts no task)
        self.inflight: list[Any] = []  #: scancel commands sent, not yet reaped
        self.sweep: SweepPaths | None = None
        self.submitter: Submitter | None = None  #: made with the sweep's folder, at its first trial
        self.name = ""  #: every job of the sweep is named so (the one squeue looks for it)
        self.looked = self.read = 0.0
        self.shared = False  #: a file a task wrote was seen here
        self.queue_failing: float | None = None
        self.cancels: dict[str, list[str]] = {}  #: what to tell scancel next: "cancel", "TERM", "KILL" -> task ids
        self.uid = ""  #: the sweep's uid (its ledger's), which each array's comment carries
        self.left = Left()  #: what earlier drivers of the sweep left in Slurm's queue
        self.tidied = False  #: what the earlier drivers left and no trial took is cancelled
        self.told: set[str] = set()  #: the reasons never to start said already
        self.unmark: list[tuple[TrialSpec, str]] = []  #: tasks told ended: their marks go once that is on record

    # -- the Backend protocol ---------------------------------------------------------

    def open(self) -> None:
        pass

    def start(self, spec: TrialSpec) -> None:
        """Hold the trial until it may be submitted; or adopt the task a killed driver left for
        it (still queued or running, or ended with its result written): no trial trains twice."""
        if self.submitter is None:
            self._first(spec)
        assert self.submitter is not None
        task = Task(spec, JobReader(spec.dir))
        if spec.trial_id in self.begun or not self.left.take(task):  # (a retry starts anew)
            sbatch, env = self.own.jobs(self.resources, spec.params)
            write_job(spec, self.target, env, None)
            self.submitter.hold(spec.trial_id, spec.dir, sbatch)
        self.begun.add(spec.trial_id)
        self.tasks[spec.trial_id] = task
        self.relay.watch(spec.trial_id)
        return None  # its Began comes when its task runs

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Event]]:
        self._unmark()
        if not self.tidied:  # the first wait after the trials started: what no trial took goes
            self._tidy()
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

    def _unmark(self) -> None:
        """The marks of the tasks told ended at the last wait go: what the engine made of them is on record."""
        for spec, job in self.unmark:
            seen_end(spec, job)
        self.unmark.clear()

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
        """Into its ``.job/answers``, for the run that sent the batch (:meth:`JobReader.answer`)."""
        if trial_id in self.tasks:
            self.tasks[trial_id].reader.answer(message)

    def close(self) -> list[tuple[str, Event]]:
        """Every task of the sweep still in Slurm's queue cancelled, at once (none outlives the
        sweep), an array whose answer was lost too; the trials that ended meanwhile told."""
        self._unmark()
        events: list[tuple[str, Event]] = []
        for tid, task in list(self.tasks.items()):
            if task.job:
                events += self._heard(tid, task)
        left = [task.job for task in self.tasks.values() if task.job] + list(self.lingering)
        left += [job for jobs in self.cancels.values() for job in jobs]  # asked, not yet sent
        left += [job for job in self.left.queued if job not in self.left.taken]  # an earlier run's, of no trial now
        if self.submitter is not None and self.submitter.doubted:  # an array sbatch did not answer for: by its uid
            left += [t for t, q in (commands.queue(self.name) or {}).items() if q.comment.startswith(f"sweeper/{self.uid}/")]
        self.cancels.clear()
        if left:
            commands.cancel(list(dict.fromkeys(left)))
        for p in self.inflight:
            with contextlib.suppress(Exception):
                p.wait(timeout=commands.COMMAND_S)
        if self.sweep is not None:
            driver.stop(self.sweep.jobs)
        self.tasks.clear()
        self.lingering.clear()
        return events

    # -- submitting ---------------------------------------------------------------------

    def _first(self, spec: TrialSpec) -> None:
        """The sweep's folder, its jobs' name, its uid, and what earlier drivers of it left in
        Slurm's queue, from its first trial: another ledger's cancelled at once; a live driver
        elsewhere (another login node, a detached one) refused."""
        self.sweep = SweepPaths.of_trial(spec.dir)
        output_folder(self.sweep.jobs)
        os.makedirs(self.sweep.jobs, exist_ok=True)
        other = driver.elsewhere(self.sweep.jobs)
        if other is not None:
            raise SweepError(f"another driver runs this sweep now ({other}; its heartbeat in {self.sweep.jobs} is "
                             f"{other.age:.0f}s old); stop it first (Ctrl-C there, or scancel its job), or give "
                             "this run another --name")
        driver.beat(self.sweep.jobs)
        self.name = job_name(self.sweep.folder)
        max_array = commands.max_array_size()
        if max_array < 1:
            raise SweepError("this cluster has job arrays turned off (MaxArraySize=0 in its slurm.conf); sweeper "
                             "submits trials as arrays: ask its administrators, or use another backend")
        self.uid = uid_of(self.sweep.folder)
        self.left = look(self.name, self.uid, self.sweep.jobs)
        if self.left.strays:
            commands.cancel(self.left.strays)
            log.warning("%s", cancelled(self.left.strays, "they ran for another ledger of it (--fresh set it aside)"))
        self.submitter = Submitter(self.name, self.uid, self.sweep.jobs, self.traits.capacity, max_array,
                                   submit_env(), self.own.slurm_setup)

    def _tidy(self) -> None:
        """Said once: what this run took over; what earlier runs left that no trial of this run
        took, cancelled now (it would hold nodes for nothing until the sweep ends)."""
        self.tidied = True
        if self.left.adopted:
            log.warning("%s", said(self.left.adopted))
            self.left.adopted = []
        untaken = [job for job in self.left.queued if job not in self.left.taken]
        if untaken:
            self.cancels.setdefault("cancel", []).extend(untaken)
            self.left.queued = {}
            log.warning("%s", cancelled(untaken, "no trial of this run is theirs"))

    def _unfinished(self) -> int:
        return sum(1 for t in self.tasks.values() if t.job) + len(self.lingering)

    def _submit(self) -> None:
        """Held trials to Slurm, as arrays, as far as ``workers`` allows: each task's id, output
        file and submission time, and its mark in its trial's folder."""
        assert self.submitter is not None
        for array, job in self.submitter.due(self._unfinished()):
            for i, tid in enumerate(array.tids):
                task = self.tasks.get(tid)
                if task is None:  # ended meanwhile (its answer was lost, the engine cancelled it): its task goes
                    self.cancels.setdefault("cancel", []).append(f"{job}_{i}")
                    continue
                task.job, task.output, task.submitted = f"{job}_{i}", array.output(i), array.at
                if task.cancelled:
                    self.cancels.setdefault("cancel", []).append(task.job)
            attempts = [self.tasks[t].spec.attempt if t in self.tasks else 0 for t in array.tids]
            array.mark(job, self.uid, attempts)

    def _cancel_held(self) -> list[tuple[str, Event]]:
        """Trials the engine cancelled before Slurm took them: ended now (one whose array's
        answer was lost: its task, once found, is cancelled)."""
        assert self.submitter is not None
        events: list[tuple[str, Event]] = []
        for tid in [t for t, task in self.tasks.items() if task.cancelled and not task.job]:
            self.submitter.drop(tid)
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
            present = os.listdir(self.sweep.jobs if self.sweep is not None else "")
        except OSError:
            return
        for name in present:
            task = waiting.get(name)
            if task is not None:
                task.running = self.shared = True
                task.appeared = task.appeared or time.time()

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
        self.unmark.append((task.spec, task.job))  # its result is read: no later driver adopts it once recorded
        self.lingering[task.job] = time.monotonic()
        ended = finished(task.spec, out, heard.exitcode if heard.exitcode is not None else 0)
        return events + [(t, named(task, e)) for t, e in ended]

    # -- looking at Slurm's queue -------------------------------------------------------

    def _look(self, now: float) -> list[tuple[str, Event]]:
        """One squeue for the whole sweep: which tasks run, which left the queue; how those that
        left with no result ended. The driver's heartbeat, touched."""
        if self.sweep is not None:
            driver.beat(self.sweep.jobs)
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
            events += self._waits(tid, task, "" if task.running else seen.reason or seen.state, now)
        events += self._gone(gone, now)
        return events

    def _waits(self, tid: str, task: Task, reason: str, now: float) -> list[tuple[str, Event]]:
        """A task's reason to wait (Slurm's, "" while it runs): told when it changes; one that
        means it never starts ends it (cancelled; said once), where Slurm's sizes confirm it at
        once, else once it stood for ``NEVER_AFTER_S``."""
        events: list[tuple[str, Event]] = []
        if reason != task.reason:
            task.reason = reason
            if reason:
                events.append((tid, Pending(reason)))
        meaning = never(reason) if reason and not task.cancelled else ""
        seen_before = bool(meaning) and task.never == meaning
        confirmed = seen_before and reason.startswith("PartitionConfig") and commands.beyond_partition(task.job)
        if not gives_up(task, meaning, now, confirmed):
            return events
        del self.tasks[tid]
        self.unmark.append((task.spec, task.job))
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
        said_ = commands.ended(asked) if asked else {}
        for tid, task in left:
            if task.seen is None:
                task.seen = now
            if task.ended is None:
                task.ended, task.left = said_.get(task.job, commands.Ended("CANCELLED")), now
            events += self._left(tid, task, now)
        return events

    def _left(self, tid: str, task: Task, now: float) -> list[tuple[str, Event]]:
        """A task gone from Slurm's queue with no result: told ended once Slurm says how. One
        that ran and ended before its trial began is told begun first, when its output file
        showed, and its end names that file."""
        assert task.ended is not None and task.left is not None
        if task.ended.state not in commands.FINAL and task.ended.state != "UNKNOWN":
            task.ended = None  # scontrol sees it still (squeue may not show every partition): not ended
            return []
        if task.ended.state in ("COMPLETED", "UNKNOWN") and not task.cancelled and now - task.left < RESULT_GRACE_S:
            return []  # it may have returned: its result may be on its way through the file system
        if not self.shared and unseen_failure(task, task.ended):  # its node works in another folder
            assert self.sweep is not None
            raise not_shared(task.job, self.sweep.folder)
        del self.tasks[tid]
        self.unmark.append((task.spec, task.job))
        heard = self.relay.forget(tid)
        code = heard.exitcode if heard.exitcode is not None else task.ended.exitcode
        ran = task.ran or (task.ended.state != "UNKNOWN" and bool(task.ended.node))
        host = task.host or task.ended.node
        events: list[tuple[str, Event]] = []
        if ran and not task.began:  # it ran: its attempt counts, from when its output file showed
            task.host = host
            events.append((tid, named(task, Began(0, "", where="", at=appeared(task)))))
        early = last_line(task.output) if ran and not task.began and not task.cancelled else None
        return events + [(tid, how_it_ended(task.job, host, task.output, bool(task.cancelled), task.ended, code,
                                            ran, early))]
