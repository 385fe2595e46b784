"""Every status from real Slurm jobs, and how soon each is recorded after the job's end.

    python bench/slurm_statuses.py        # about 3 minutes (Slurm's own time limit takes one)

Starts the tests' one-node Slurm (tests/slurm_cluster.py: 2 CPUs, no accounting; as root,
with Debian's slurm-wlm and munge) and runs, each as a real job of a real sweep:

* a trial that returns, raises, exits with code 3, segfaults, is SIGKILLed, raises a GPU
  out-of-memory error, and runs past sweeper's ``--timeout 5``;
* one that runs past Slurm's own time limit (``--slurm time=1``: a minute);
* one cancelled from outside the sweep (``scancel`` by hand);
* one whose node is set down mid-run (Slurm requeues it; the node comes back, it runs again);
* Ctrl-C of a sweep with two tasks running and two pending: the queue 10 s later.

For each row: its status, its error's start, and the seconds from the job's end (Slurm's
``EndTime``, whole seconds, so the figure is up to a second too high) to the row's
``recorded_at`` in the ledger.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

TRAIN = """\
import os, signal, sys, time
sys.path.insert(0, {tests!r})
import sweep_fns

def train(params):
    how = params["how"]
    if how == "slow":  # waits for its release file (or to be ended)
        open(os.path.join(os.environ["SWEEPER_TRIAL_DIR"], "started"), "w").close()
        while not os.path.exists({release!r}):
            time.sleep(0.05)
        return {{"value": 1.0}}
    return sweep_fns.crash(params)

grid = {grid!r}
"""


def end_of(job: str) -> float | None:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    found = re.search(r"\bEndTime=(\S+)", out)
    if not found or found.group(1) in ("Unknown", "None"):
        return None
    return datetime.datetime.fromisoformat(found.group(1)).timestamp()


def sweep(root: str, name: str, points: dict, *flags: str, during=None) -> tuple[list[tuple], str]:
    folder = os.path.join(root, name)
    os.makedirs(folder)
    release = os.path.join(folder, "release")
    grid = os.path.join(folder, "grid.py")
    with open(grid, "w") as f:
        f.write(TRAIN.format(tests=os.path.join(ROOT, "tests"), release=release, grid=points))
    command = [sys.executable, "-m", "sweeper", grid, "--out", folder, "--backend", "slurm", "--quiet", *flags]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = ""
    if during is not None:
        said = during(proc, os.path.join(folder, "grid"), release) or ""
    out, _ = proc.communicate(timeout=600)
    with sqlite3.connect(os.path.join(folder, "grid", "ledger.sqlite")) as db:
        rows = db.execute("SELECT name, status, error, job_id, recorded_at FROM trials ORDER BY idx").fetchall()
    return rows, said + out


def started(folder: str) -> int:
    trials = os.path.join(folder, "trials")
    return sum(os.path.exists(os.path.join(trials, t, "started")) for t in os.listdir(trials)) \
        if os.path.isdir(trials) else 0


def wait_for(check, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("waited too long")
        time.sleep(0.1)


def jobs() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T %j"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "sweeper-" in line]


def main() -> None:
    import slurm_cluster

    why = slurm_cluster.missing()
    if why:
        sys.exit(f"bench/slurm_statuses.py: {why}")
    table: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as root, slurm_cluster.one_node(os.path.join(root, "slurm")):
        node = os.uname().nodename

        def add(case: str, rows: list[tuple]) -> None:
            for name, status, error, job, recorded in rows:
                end = end_of(job)
                lag = "-" if end is None else f"{recorded - end:.1f}"
                table.append((case or name, status, (error or "").split(";")[0][:70], lag))

        rows, _ = sweep(root, "each", {"how": ["ok", "raise", "exit3", "segv", "sigkill", "oom_text", "sleep"]},
                        "--timeout", "5", "--workers", "2")
        add("", rows)
        rows, _ = sweep(root, "limit", {"how": ["slow"]}, "--slurm", "time=1")
        add("Slurm's time limit (time=1)", rows)

        def cancel(proc, folder, release):
            wait_for(lambda: started(folder) == 1)
            subprocess.run(["scancel", jobs()[0].split()[0]])

        rows, _ = sweep(root, "outside", {"how": ["slow"]}, during=cancel)
        add("scancel from outside", rows)

        def node_down(proc, folder, release):
            wait_for(lambda: started(folder) == 1)
            for t in os.listdir(os.path.join(folder, "trials")):
                os.remove(os.path.join(folder, "trials", t, "started"))
            job = jobs()[0].split()[0]
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=bench"], check=True)
            wait_for(lambda: bool(jobs()) and jobs()[0].split()[1] == "PENDING")
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
            subprocess.run(["scontrol", "update", f"jobid={job}", "starttime=now"], check=True)
            wait_for(lambda: started(folder) == 1)
            open(release, "w").close()

        rows, said = sweep(root, "requeue", {"how": ["slow"]}, during=node_down)
        add("node set down mid-run (requeued), then released", rows)
        requeue_said = [line for line in said.splitlines() if "requeued" in line]

        queue_after: list[str] = []

        def ctrl_c(proc, folder, release):
            wait_for(lambda: started(folder) == 2)
            before = jobs()
            proc.send_signal(signal.SIGINT)
            at = time.monotonic()
            wait_for(lambda: not jobs(), within=10)
            queue_after.extend([f"before: {len(before)} tasks ({', '.join(b.split()[1] for b in before)})",
                                f"empty {time.monotonic() - at:.1f} s after SIGINT; at 10 s: {jobs() or 'empty'}"])

        rows, _ = sweep(root, "ctrl_c", {"how": ["slow"], "x": [1, 2, 3, 4]}, "--workers", "2", during=ctrl_c)
        add("Ctrl-C", rows)
    widths = [max(len(r[i]) for r in [("case", "status", "error", "s after job end"), *table]) for i in range(4)]
    print("one-node Slurm, 2 CPUs, no accounting")
    for row in [("case", "status", "error", "s after job end"), *table]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print("requeue, as the console said it:", *requeue_said, sep="\n  ")
    print("Ctrl-C:", *queue_after, sep="\n  ")


if __name__ == "__main__":
    main()
