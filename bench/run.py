"""Benchmark harness: sweeper against the usual ways of running one process per trial.

    python bench/run.py                 # full (~25 min on 2 cores), 3 repeats
    python bench/run.py --quick         # about 5 min, 1 repeat
    python bench/run.py --only A,B --repeats 5 --out /tmp/results.json
    python bench/run.py --quick --only E   # CLI start-up only (~1 min on 2 cores)
    python bench/run.py --only F --cases F1,F2 --methods "sweeper cli,loky" --repeats 4

Scenarios (trial functions: bench/trials.py, bench/tf_sleep.py, bench/keras_mlp.py):
  A   dispatch overhead: no-op trials, 2 slots; slot-seconds per trial and trials/s
  B1  makespan efficiency, TF-importing sleep trials, 2 slots (ideal = n*s/2)
  B2  the same on 1 slot; also the per-slot gap from one trial's end to the next's start
  C   end to end: tiny Keras MLPs, 2 slots; trials/min
  D   the sweep parent's own CPU per trial and peak RSS (sweeper only), and the time of
      ``python -m sweeper grid.py --dry-run`` on a 100,000-point grid
  F   the short trials (no longer than one TF import): 8 x 4 s and 16 x 2 s, on
      1 and 2 slots, against loky (which reuses its workers) and pool; "sweeper cli" is
      ``python -m sweeper grid.py`` on a grid file importing the trial's module (the
      grid's read and the fork server's import side by side), timed from the command
      to its exit
  E   CLI start (sweeper only): ``python -m sweeper bench/grid_tf_first.py --workers 1``, a
      grid file that imports TensorFlow at its top, 2 trials whose train does nothing.
      "command -> 1st train" runs from ``time.time()`` in this process just before it starts
      the command to ``time.time()`` as the first statement of the first trial's ``train``
      (written to a file by the trial). "no-op resume" is the same command again on the
      finished folder, from just before its start to its exit (nothing left to run). The
      unit, "1 import", is ``python bench/grid_tf_first.py`` from just before its start to
      the end of its top level (its exit is shown too), timed the same way before and after
      the methods in each repeat (median of all); the ratio column of E is against it (not
      against pool). Methods: the CLI flags of bench/methods.py's options (--no-prefetch,
      --start-method spawn). Same sizes in --quick; ``--only E`` runs it alone.

Each (scenario, method, repeat) runs in a fresh ``bench/driver.py`` process under a
timeout; whatever it leaves behind is killed (this process is a child subreaper, so
orphans come back to it). Figures are medians over repeats; methods are interleaved
within a repeat (the order rotates per repeat) to spread machine noise.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DRIVER = os.path.join(HERE, "driver.py")
GRID_100K = os.path.join(HERE, "grid_100k.py")
GRID_TF_FIRST = os.path.join(HERE, "grid_tf_first.py")

ALL_METHODS = ["sweeper", "sweeper --no-prefetch", "sweeper spawn", "naive", "pool", "loky", "ray tune", "sweeper cli"]
SWEEPERS = ALL_METHODS[:3]
SWEEPER_ONLY = {"D", "E"}  # scenarios that measure sweeper itself: --methods keeps only its variants
LABEL = {"loky": "loky (reuses)"}


# -- scenarios -----------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    title: str
    fn: str  # module:function, in bench/
    n: int
    k: int
    fixed: dict[str, Any] = field(default_factory=dict)
    methods: list[str] = field(default_factory=lambda: list(ALL_METHODS))
    long: bool = False  # B and D: long runs, averaged over many trials; --long-repeats
    timeout_s: float = 300.0  # for one whole run, after which its process tree is killed
    check_rusage: bool = False
    #: Every method's driver imports the trial's module before its clock, as a user's script
    #: does (the baselines otherwise import it only in their workers).
    import_fn: bool = False

    @property
    def ideal_s(self) -> float:
        return self.n * float(self.fixed.get("s", 0.0)) / self.k

    def grid(self) -> dict[str, Any]:
        return {"i": list(range(self.n)), **self.fixed}

    def points(self) -> list[dict[str, Any]]:
        return [{"i": i, **self.fixed} for i in range(self.n)]


def cases(quick: bool) -> dict[str, list[Case]]:
    """The scenarios, with the methods each runs by default (``--methods`` overrides).

    Every method in every scenario does not fit the time limits on 2 cores: each run of a
    process-per-trial method in B costs ~1 min (quick) to ~2.5 min (full), since each trial
    pays a TensorFlow import. So by default naive joins B only in the full run, and the
    --no-prefetch variant runs where it differs from the default (B; in quick, B2 only).
    """
    std = ["sweeper", "sweeper spawn", "pool", "loky", "ray tune"]
    if quick:
        a_n, b1, b2, c_n, d_n = 60, (6, 3.0), (4, 3.0), 6, 300
        b1_m, b2_m = std, ["sweeper", "sweeper --no-prefetch", "pool", "ray tune"]
    else:
        a_n, b1, b2, c_n, d_n = 200, (16, 5.0), (8, 4.0), 16, 2000
        b1_m = b2_m = list(ALL_METHODS)
    return {
        "A": [Case("A", f"{a_n} no-op trials, 2 slots", "trials:noop", a_n, 2, timeout_s=60 + 2.0 * a_n)],
        "B": [Case("B1", f"{b1[0]} x sleep({b1[1]:g}) TF-importing trials, 2 slots", "tf_sleep:train", b1[0], 2,
                   {"s": b1[1]}, methods=b1_m, long=True, timeout_s=120 + b1[0] * (b1[1] + 30)),
              Case("B2", f"{b2[0]} x sleep({b2[1]:g}) TF-importing trials, 1 slot", "tf_sleep:train", b2[0], 1,
                   {"s": b2[1]}, methods=b2_m, long=True, timeout_s=120 + b2[0] * (b2[1] + 30))],
        "C": [Case("C", f"{c_n} tiny Keras MLPs (2 epochs), 2 slots", "keras_mlp:train", c_n, 2,
                   methods=std, timeout_s=120 + c_n * 60)],
        "D": [Case("D", f"{d_n} no-op trials, 2 slots: the parent's own cost", "trials:noop", d_n, 2,
                   methods=["sweeper", "sweeper spawn"], long=True, timeout_s=60 + 1.0 * d_n,
                   check_rusage=True)],
        # The short-trial workload, the same sizes quick or full: trials no longer
        # than one TensorFlow import, where a fresh process per trial costs most.
        "F": [Case(f"F{j}", f"{n} x sleep({s:g}) TF-importing trials, {k} slot{'s' * (k > 1)}", "tf_sleep:train", n, k,
                   {"s": s}, methods=["sweeper", "sweeper cli", "sweeper spawn", "loky", "pool"],
                   timeout_s=120 + n * (s + 30), import_fn=True)
              for j, (n, s, k) in enumerate([(8, 4.0, 1), (16, 2.0, 2), (8, 4.0, 2), (16, 2.0, 1)], 1)],
        # The same sizes quick or full (only the repeats differ): what is measured is the
        # start of one command, not an average over trials.
        "E": [Case("E", "CLI start: command to first train, and a no-op resume; TF-importing grid file, "
                        "2 trials, 1 slot", "grid_tf_first:train", 2, 1, methods=list(SWEEPERS), timeout_s=240)],
    }


# -- figures from one run ------------------------------------------------------------------

def chain_gaps(trials: list[dict], k: int) -> list[float]:
    """Gaps when the slot of each trial is not known: rebuild k chains, first freed first used.

    Trials are taken by fn start; each (after the first k) follows the chain that ended
    earliest before it started, as a scheduler refills slots in the order they free up.
    """
    ends: list[float] = []
    gaps = []
    for t in sorted(trials, key=lambda t: t["t_start"]):
        if len(ends) < k:
            ends.append(t["t_end"])
            continue
        before = [i for i, e in enumerate(ends) if e <= t["t_start"]]
        i = min(before or range(len(ends)), key=lambda j: ends[j])
        gaps.append(t["t_start"] - ends[i])
        ends[i] = t["t_end"]
    return gaps


def group_gaps(trials: list[dict], key: str) -> list[float]:
    groups: dict[Any, list[dict]] = {}
    for t in trials:
        groups.setdefault(t.get(key), []).append(t)
    gaps = []
    for g in groups.values():
        g.sort(key=lambda t: t["t_start"])
        gaps += [b["t_start"] - a["t_end"] for a, b in zip(g, g[1:])]
    return gaps


def gaps_of(method: str, trials: list[dict], k: int) -> tuple[list[float], str]:
    timed = [t for t in trials if isinstance(t.get("t_start"), (int, float)) and isinstance(t.get("t_end"), (int, float))]
    if k == 1:
        return group_gaps([{**t, "one": 0} for t in timed], "one"), "one slot"
    if timed and all(isinstance(t.get("slot"), (int, float)) and t["slot"] >= 0 for t in timed):
        return group_gaps(timed, "slot"), "SWEEPER_SLOT"
    if method.startswith("loky"):
        return group_gaps(timed, "pid"), "worker pid"
    return chain_gaps(timed, k), "rebuilt chains (first freed, first refilled)"


def _rel(x: Any, t0: float) -> float | None:
    return round(x - t0, 3) if isinstance(x, (int, float)) else None


def med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def figures(case: Case, method: str, res: dict) -> dict[str, Any]:
    wall, n, k = res["wall_s"], case.n, case.k
    trials = res.get("trials", [])
    f: dict[str, Any] = {"wall_s": wall, "n_ok": res.get("n_ok"), "n": n, "watchdog_fired": res.get("watchdog_fired"),
                         "parent_cpu_s": res.get("parent_cpu_s"), "children_cpu_s": res.get("children_cpu_s"),
                         "parent_maxrss_mb": res.get("maxrss_mb")}
    launch = [t["t_start"] - t["started_at"] for t in trials
              if isinstance(t.get("started_at"), (int, float)) and isinstance(t.get("t_start"), (int, float))]
    if launch:  # parent starts the process -> fn starts (import of the user's module included)
        f["launch_to_fn_ms"] = 1000 * med(launch)
    if n <= 64 and trials:  # who ran when, relative to the first process start (seconds)
        t0 = min(t.get("started_at") or t.get("t_start") or 0.0 for t in trials)
        f["timeline"] = [{"slot": t.get("slot"), "pid": t.get("pid"),
                          "started": _rel(t.get("started_at"), t0), "fn_start": _rel(t.get("t_start"), t0),
                          "fn_end": _rel(t.get("t_end"), t0)} for t in sorted(trials, key=lambda t: t.get("t_start") or 0)]
    if case.name == "A":
        f["overhead_ms"] = 1000 * wall / n * k
        f["trials_per_s"] = n / wall
    elif case.name.startswith("B"):
        gaps, how = gaps_of(method, trials, k)
        f["efficiency"] = case.ideal_s / wall
        f["ideal_s"] = case.ideal_s
        f["gap_ms"] = 1000 * med(gaps) if gaps else None
        f["gap_source"] = how
    elif case.name == "C":
        f["trials_per_min"] = 60 * n / wall
        f["accuracy"] = med([t.get("accuracy") for t in trials])
        f["sklearn_digits"] = bool(trials and trials[0].get("sklearn"))
    elif case.name == "D":
        f["parent_cpu_ms_per_trial"] = 1000 * res["parent_cpu_s"] / n
        f["peak_rss_mb"] = res["maxrss_mb"]
        f["rss_before_sweep_mb"] = res.get("maxrss_before_mb")
        f["trials_per_s"] = n / wall
        f["rusage_check"] = res.get("rusage_check")
    elif case.name.startswith("F"):
        f["efficiency"] = case.ideal_s / wall
        f["ideal_s"] = case.ideal_s
        starts = [t["t_start"] for t in trials if isinstance(t.get("t_start"), (int, float))]
        if starts and isinstance(res.get("command_t0"), (int, float)):  # the driver's import included
            f["first_train_s"] = min(starts) - res["command_t0"]
        if isinstance(res.get("command_s"), (int, float)):
            f["command_s"] = res["command_s"]
        f["pids"] = len({t.get("pid") for t in trials})  # a fresh process per trial: pids == n
    elif case.name == "E":
        for key in ("first_train_s", "first_launch_s", "launch_to_train_s", "resume_s", "resume_rc", "rc",
                    "resume_trials_run"):
            if key in res:
                f[key] = res[key]
    return f


# -- running things, bounded ---------------------------------------------------------------

def become_subreaper() -> bool:
    """Orphans of our drivers (grandchildren) get re-parented to us, so we can end them."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def descendants() -> list[Any]:
    try:
        import psutil
    except ImportError:
        return []
    try:
        return psutil.Process().children(recursive=True)
    except Exception:  # noqa: BLE001
        return []


def end_tree(procs: list[Any], grace: float = 3.0) -> int:
    """Terminate, then kill, these processes (by pid, via psutil); reap what is ours."""
    if not procs:
        return 0
    import psutil

    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    reap()
    return len(procs)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def leftovers(wait_s: float = 3.0) -> int:
    """Processes still around after a run ended; give them a moment, then kill them."""
    deadline = time.monotonic() + wait_s
    while True:
        reap()
        left = [p for p in descendants() if _alive(p)]
        if not left or time.monotonic() >= deadline:
            return end_tree(left)
        time.sleep(0.1)


def _alive(p: Any) -> bool:
    try:
        import psutil

        return p.status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001
        return False


class Runner:
    def __init__(self, logdir: str, env: dict[str, str]) -> None:
        self.logdir = logdir
        self.env = env
        self.killed: list[str] = []  # runs that timed out or left processes behind
        self.t_start: float = 0.0  # of the last command(): epoch just before its start
        self.t_exit: float | None = None  # ... and just after its exit

    def driver(self, case: Case, method: str, rep: int) -> dict[str, Any]:
        spec = {"method": method, "fn": case.fn, "k": case.k, "points": case.points(), "grid": case.grid(),
                "trial_timeout": max(60.0, case.timeout_s / 2), "check_rusage": case.check_rusage,
                "import_fn": case.import_fn}
        tag = f"{case.name}_{method.replace(' ', '_').replace('-', '')}_r{rep}"
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            spec_path, result_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
            with open(spec_path, "w") as f:
                json.dump(spec, f)
            rc, why = self.command([sys.executable, DRIVER, spec_path, result_path], case.timeout_s, tag)
            if not os.path.exists(result_path):
                return {"error": why or f"driver exited {rc} without a result; see {self.log(tag)}"}
            with open(result_path) as f:
                res = json.load(f)
        if why:
            res["error"] = why
        res["command_t0"] = self.t_start  # epoch, just before the driver's start
        res["command_s"] = self.t_exit - self.t_start if self.t_exit is not None else None  # to its exit
        return res

    def log(self, tag: str) -> str:
        return os.path.join(self.logdir, f"{tag}.log")

    def command(self, argv: list[str], timeout: float, tag: str, stdout: Any = None,
                env: dict[str, str] | None = None) -> tuple[int | None, str]:
        """Run argv with a timeout; kill its whole tree on timeout, Ctrl-C, or leftovers.

        ``self.t_start`` / ``self.t_exit`` are left as the epoch times just before the start
        and just after the exit (None on a timeout).
        """
        with open(self.log(tag), "w") as log:
            self.t_exit = None
            self.t_start = time.time()  # epoch, just before the start: scenario E's clock
            proc = subprocess.Popen(argv, cwd=ROOT, env=env or self.env, stdout=stdout or log, stderr=log,
                                    start_new_session=True)
            why = ""
            try:
                proc.wait(timeout)
                self.t_exit = time.time()  # as soon as it has exited, before any clean-up here
            except subprocess.TimeoutExpired:
                self.t_exit = None
                why = f"timed out after {timeout:.0f} s and was killed"
            finally:
                if proc.poll() is None:  # timeout or Ctrl-C: the driver and all it started
                    end_tree([*_psutil_tree(proc.pid)])
                    proc.wait()
            n = leftovers()
            if n:
                self.killed.append(f"{tag}: {n} process(es) left behind, killed")
            if why:
                self.killed.append(f"{tag}: {why}")
            return proc.returncode, why


def _psutil_tree(pid: int) -> list[Any]:
    try:
        import psutil

        p = psutil.Process(pid)
        return [*p.children(recursive=True), p]
    except Exception:  # noqa: BLE001
        return []


# -- the table -----------------------------------------------------------------------------

#: (case prefix, figure key, label, format)
SHOWN = [
    ("A", "overhead_ms", "overhead ms/trial", "{:.0f}"),
    ("A", "trials_per_s", "trials/s", "{:.2f}"),
    ("B", "efficiency", "efficiency", "{:.3f}"),
    ("B", "gap_ms", "median gap ms", "{:.0f}"),
    ("C", "trials_per_min", "trials/min", "{:.1f}"),
    ("D", "parent_cpu_ms_per_trial", "parent CPU ms/trial", "{:.2f}"),
    ("D", "peak_rss_mb", "parent peak RSS MB", "{:.0f}"),
    ("E", "first_train_s", "command -> 1st train s", "{:.2f}"),
    ("F", "wall_s", "makespan s", "{:.1f}"),
    ("F", "vs_loky", "makespan / loky's", "{:.2f}x"),
    ("F", "first_train_s", "command -> 1st train s", "{:.2f}"),
    ("F", "command_s", "command -> exit s", "{:.1f}"),
    ("F", "command_vs_loky", "command -> exit / loky's", "{:.2f}x"),
    ("F", "pids", "trial processes", "{:.0f}"),
    ("E", "resume_s", "no-op resume s", "{:.2f}"),
]


def table_rows(results: dict, quick: bool) -> list[list[str]]:
    rows = []
    unit = (results.get("cli_unit") or {}).get("median_s")
    for cname, entry in results["cases"].items():
        pool = entry["methods"].get("pool", {}).get("median", {})
        if cname == "E":  # measured against one import of the grid file, not against pool
            pool = {key: unit for prefix, key, *_ in SHOWN if prefix == "E"}
        if cname == "E" and unit is not None:
            ok = isinstance(unit, (int, float)) and unit
            out = (results.get("cli_unit") or {}).get("median_exit_s")
            wall = _fmt("{:.1f}", out)
            rows.append(["E", "python grid file", wall, "1 import: start -> imported s", _fmt("{:.2f}", unit),
                         "1.00x" if ok else "-"])
            rows.append(["E", "python grid file", wall, "... -> exited s", _fmt("{:.2f}", out),
                         f"{out / unit:.2f}x" if ok and isinstance(out, (int, float)) else "-"])
        for method, m in entry["methods"].items():
            label = LABEL.get(method, method)
            if "na" in m:
                rows.append([cname, label, "-", "-", "n/a" if m["na"] != "not installed" else "not installed", "-"])
                continue
            fig = m.get("median", {})
            if not fig:
                rows.append([cname, label, "-", "-", "failed", "-"])
                continue
            wall = _fmt("{:.1f}", fig.get("wall_s"))
            loky = entry["methods"].get("loky", {}).get("median", {}).get("wall_s")
            if cname.startswith("F") and isinstance(loky, (int, float)) and isinstance(fig.get("wall_s"), (int, float)):
                fig = {**fig, "vs_loky": fig["wall_s"] / loky}
            loky_cmd = entry["methods"].get("loky", {}).get("median", {}).get("command_s")
            if cname.startswith("F") and isinstance(loky_cmd, (int, float)) and isinstance(fig.get("command_s"), (int, float)):
                fig = {**fig, "command_vs_loky": fig["command_s"] / loky_cmd}
            bad = "!" if any(r.get("n_ok") != r.get("n") or r.get("resume_trials_run") or r.get("resume_rc")
                             for r in m.get("runs", [])) else ""
            for prefix, key, name, fmt in SHOWN:
                if not cname.startswith(prefix) or key not in fig:
                    continue
                ratio = "-"
                if method != "pool" and key not in ("vs_loky", "command_vs_loky", "pids") and isinstance(pool.get(key), (int, float)) and pool[key] and \
                        isinstance(fig.get(key), (int, float)):
                    ratio = f"{fig[key] / pool[key]:.2f}x"
                rows.append([cname, label, wall, name, _fmt(fmt, fig.get(key)) + bad, ratio])
        dry = results.get("dry_run")
        if cname == "D" and dry:  # with D's rows, before E's
            rows.append(["D", "sweeper CLI", _fmt("{:.1f}", dry.get("median_s")), "100k-grid --dry-run s",
                         _fmt("{:.2f}", dry.get("median_s")), "-"])
    return rows


def _fmt(fmt: str, x: Any) -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "-"


def render(rows: list[list[str]], head: list[str]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    right = {2, 4, 5}
    out = []
    for r in [head, *rows]:
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


NOTES = """\
notes:
  vs pool = figure / the same figure for `pool` (spawn Pool, maxtasksperchild=1). Higher is better
    for efficiency, trials/s and trials/min; lower is better for overhead and gaps.
  A  bound by process start-up (spawn = fork+exec of a fresh interpreter, plus the imports of the
     worker's code) and, for sweeper, its per-trial bookkeeping (ledger fsync, trial folder, log).
     On 2 cores two start-ups compete for the same CPUs, so overhead ~= CPU cost of one start.
  B  ideal = trials * sleep / slots. What is lost per trial is the TF import (~3-4 s of CPU
     here) unless it overlaps the previous trial's sleep (standbys, or one import in the fork server) or is paid once
     (loky: workers reused). gap = next fn start - previous fn end within a slot.
  C  on 2 cores bound by total CPU work (TF import + graph building + fit per trial); overlap
     cannot help much when both cores are already busy.
  D  parent CPU = RUSAGE_SELF user+sys of the driver around sweep() (children are counted in
     RUSAGE_CHILDREN, checked by the rusage_check figure in the JSON); peak RSS = ru_maxrss of
     the dedicated driver process (Python + sweeper + pandas for the returned frame).
  E  the ratio column of E is vs 1 import, not vs pool: `python bench/grid_tf_first.py` from just
     before its start to the end of its top level (interpreter start + TensorFlow import), timed
     the same way before and after the methods of each repeat (median); its exit (TF's
     teardown included) is the "-> exited" row.
     command -> 1st train runs from time.time() here just before the command starts to
     time.time() as the first trial's train's first statement: the CLI's fork server imports what
     the grid file and the user's modules it imports name, then forks the process that reads the
     grid file (the user's module alone left to import) and ends after the read, then the trial.
     no-op resume = the same command again on the finished folder, start to exit: that one
     import, then nothing to run. The JSON
     splits the first figure at the first trial's started_at (ledger, ms): first_launch_s.
     wall_s of E = the first command (all its trials), start to exit.
  F  the issue's short trials (no longer than one TF import): makespan = wall time of the sweep call
     (sweep(), Parallel(), Pool.imap) in a fresh driver that first imported the trial's module, as
     a user's script does (that import is outside the makespan); for "sweeper cli", the wall time
     of `python -m sweeper grid.py` (its grid file imports the trial's module), start to exit,
     from a driver that imports nothing of the trial's (a CLI user writes no script).
     command -> 1st train / -> exit = from just before the driver's start to the first train's
     first statement / to the driver's exit: what the user waits for, `python script.py` for
     loky (its own import of the trial's module included), `python -m sweeper grid.py` for the
     CLI. trial processes = distinct pids (loky reuses 1 per slot; every other method
     starts one per trial). "sweeper" is the
     default (the fork server); "sweeper spawn" is --start-method spawn.
  loky reuses its worker processes: no fresh process per trial, so it frees no GPU memory (nor
     any other state) between trials; its numbers are a floor, not a like-for-like rival.
  !  = some trials did not finish ok in at least one repeat (see the JSON and bench/out/logs/);
     in E also: the resume ran a trial or exited non-zero.
"""


# -- main ----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 repeat (under 5 min on 2 cores)")
    ap.add_argument("--repeats", type=int, help="repeats per figure (default 3, quick 1); medians are shown")
    ap.add_argument("--long-repeats", type=int, default=1,
                    help="repeats for the long scenarios B and D (default 1: each run already averages "
                         "over many trials; min with --repeats)")
    ap.add_argument("--only", help="comma-separated scenarios among A,B,C,D,E (B runs B1 and B2; default all)")
    ap.add_argument("--methods", help="comma-separated subset of: " + ", ".join(ALL_METHODS))
    ap.add_argument("--cases", help="comma-separated cases of those scenarios to keep, e.g. F1,F2")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "results.json"), help="JSON of all figures")
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    if repeats < 1 or args.long_repeats < 1:
        ap.error("--repeats and --long-repeats must be >= 1")
    long_repeats = min(repeats, args.long_repeats)
    by_scenario = cases(args.quick)
    only = [s.strip().upper() for s in (args.only or ",".join(by_scenario)).split(",") if s.strip()]
    bad = [s for s in only if s not in by_scenario]
    if bad:
        ap.error(f"unknown scenario(s) {bad}; choose among {', '.join(by_scenario)}")
    selected = [c for s in only for c in by_scenario[s]]
    if args.cases:
        keep = {c.strip().upper() for c in args.cases.split(",") if c.strip()}
        selected = [c for c in selected if c.name in keep]
        if not selected:
            ap.error(f"no case named {', '.join(sorted(keep))} in {', '.join(only)}")
    if args.methods:
        wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
        for m in wanted:
            if m not in ALL_METHODS:
                ap.error(f"unknown method {m!r}; choose among {', '.join(ALL_METHODS)}")
        for c in selected:
            c.methods = [m for m in wanted if c.name not in SWEEPER_ONLY or m in SWEEPERS]

    out_dir = os.path.dirname(os.path.abspath(args.out))
    logdir = os.path.join(HERE, "out", "logs")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(logdir, exist_ok=True)
    subreaper = become_subreaper()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, ROOT, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the same for every method; keeps logs small
    runner = Runner(logdir, env)

    import importlib.util

    unavailable: dict[str, str] = {}
    if importlib.util.find_spec("ray") is None:
        unavailable["ray tune"] = "not installed"

    results: dict[str, Any] = {
        "meta": {"quick": args.quick, "repeats": repeats, "only": only, "python": platform.python_version(),
                 "cpus": os.cpu_count(), "machine": platform.platform(), "subreaper": subreaper,
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "sweeper_version": _sweeper_version()},
        "cases": {c.name: {"title": c.title, "n": c.n, "slots": c.k, "fixed": c.fixed, "fn": c.fn,
                           "repeats": long_repeats if c.long else repeats,
                           "methods": {m: {"runs": []} for m in c.methods}} for c in selected},
    }
    dry_times: list[float] = []
    unit_times: list[dict[str, float] | None] = []
    t_all = time.perf_counter()
    try:
        for rep in range(repeats):
            for case in selected:
                if rep >= (long_repeats if case.long else repeats):
                    continue
                methods = list(case.methods)
                if case.name == "E" and methods:  # the unit, before and after: a cold first import
                    unit_times.append(import_unit(runner, case, f"r{rep}a"))  # weighs less in the median
                shift = rep % max(1, len(methods))
                for method in methods[shift:] + methods[:shift]:
                    entry = results["cases"][case.name]["methods"][method]
                    if method in unavailable:
                        entry["na"] = unavailable[method]
                        continue
                    t0 = time.perf_counter()
                    res = cli_start(runner, case, method, rep) if case.name == "E" else runner.driver(case, method, rep)
                    if "na" in res:
                        unavailable[method] = entry["na"] = res["na"]
                        _say(f"[{case.name} r{rep}] {method}: n/a ({res['na']})")
                        continue
                    if "error" in res and "wall_s" not in res:
                        entry["runs"].append({"error": res["error"]})
                        _say(f"[{case.name} r{rep}] {method}: FAILED {res['error']}")
                        continue
                    fig = figures(case, method, res)
                    if "error" in res:
                        fig["error"] = res["error"]
                    entry["runs"].append(fig)
                    _say(f"[{case.name} r{rep}] {method}: wall {fig['wall_s']:.1f} s, "
                         f"{fig['n_ok']}/{fig['n']} ok ({time.perf_counter() - t0:.0f} s with start-up)"
                         + (f"; command -> 1st train {_fmt('{:.2f}', fig.get('first_train_s'))} s, "
                            f"no-op resume {_fmt('{:.2f}', fig.get('resume_s'))} s" if case.name == "E" else ""))
                if case.name == "D":
                    dry_times.append(dry_run(runner, rep))
                if case.name == "E" and methods:
                    unit_times.append(import_unit(runner, case, f"r{rep}b"))
    except KeyboardInterrupt:
        _say("interrupted: reporting what finished")
    finally:
        leftovers(0.5)

    for c in results["cases"].values():
        for m in c["methods"].values():
            runs = [r for r in m["runs"] if "wall_s" in r]
            if runs:
                m["median"] = {k: med([r.get(k) for r in runs]) for k in runs[0]
                               if isinstance(runs[0][k], (int, float)) and not isinstance(runs[0][k], bool)}
    dry_ok = [t for t in dry_times if t is not None]
    if dry_ok:
        results["dry_run"] = {"command": "python -m sweeper bench/grid_100k.py --dry-run --out <tmp> >/dev/null",
                              "points": 100_000, "runs_s": dry_ok, "median_s": med(dry_ok)}
    unit_ok = [t for t in unit_times if t is not None]
    if unit_ok:
        results["cli_unit"] = {"command": "python bench/grid_tf_first.py (imports TensorFlow, exits)",
                               "runs": unit_ok, "median_s": med([t["import_s"] for t in unit_ok]),
                               "median_exit_s": med([t["exit_s"] for t in unit_ok])}
    results["killed"] = runner.killed
    results["unavailable"] = unavailable
    results["elapsed_s"] = time.perf_counter() - t_all

    head = ["scenario", "method", "wall_s", "metric", "value", "vs pool"]
    rows = table_rows(results, args.quick)
    results["table"] = [dict(zip(head, r)) for r in rows]
    sweeper_runs = [r for c in results["cases"].values() for name, m in c["methods"].items()
                    if name.startswith("sweeper") for r in m["runs"] if "watchdog_fired" in r]
    fired, runs = sum(r["watchdog_fired"] or 0 for r in sweeper_runs), len(sweeper_runs)
    results["watchdog_fired"] = fired
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)

    print()
    print(f"sweeper benchmark ({'quick' if args.quick else 'full'}), {os.cpu_count()} CPUs: figures are medians "
          f"over {repeats} repeat(s) for A, C and E (--repeats) and {long_repeats} for B and D (--long-repeats)")
    for c in selected:
        print(f"  {c.name:<3} {c.title}" + (f"; ideal {c.ideal_s:g} s" if c.ideal_s else "")
              + f"; x{long_repeats if c.long else repeats}")
    print("  methods per scenario are the defaults of cases() unless --methods is given")
    print()
    print(render(rows, head))
    print()
    print(NOTES, end="")
    for m, why in unavailable.items():
        print(f"  {m}: {why}")
    for line in runner.killed:
        print(f"  killed: {line}")
    for c in results["cases"].values():
        for name, m in c["methods"].items():
            for r in m["runs"]:
                if "error" in r:
                    print(f"  error: {name}: {r['error']}")
    print(f"  fork watchdog: fired in {fired} trial(s) over {runs} sweeper run(s)")
    print(f"\nfigures: {args.out}; logs: {logdir}; took {results['elapsed_s']:.0f} s")
    return 0


def dry_run(runner: Runner, rep: int) -> float | None:
    with tempfile.TemporaryDirectory(prefix="bench-dry-") as tmp, open(os.devnull, "w") as null:
        t0 = time.perf_counter()
        rc, why = runner.command([sys.executable, "-m", "sweeper", GRID_100K, "--dry-run", "--out", tmp],
                                 300, f"D_dryrun_r{rep}", stdout=null)
        took = time.perf_counter() - t0
    _say(f"[D r{rep}] sweeper --dry-run of 100k points: {took:.2f} s (rc {rc})")
    return took if rc == 0 and not why else None


#: Scenario E: what to give the command line for each sweeper method (methods.RUNNERS' options).
def cli_flags(method: str) -> list[str]:
    import methods  # bench/, on sys.path as this script's folder; only the standard library at its top

    _, options = methods.RUNNERS[method]
    flags: list[str] = []
    for key, value in options.items():
        if key == "prefetch":
            flags += [] if value else ["--no-prefetch"]
        else:
            flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def cli_start(runner: Runner, case: Case, method: str, rep: int) -> dict[str, Any]:
    """Scenario E, one repeat of one method: the CLI on a fresh folder, then again on it (a resume).

    Each command is a fresh process started here (``Runner.command``); the clock is the
    epoch: ``runner.t_start`` just before the start, the first line the trials' train
    appended to the stamps file, ``runner.t_exit`` just after the exit. Nothing waits.
    """
    tag = f"E_{method.replace(' ', '_').replace('-', '')}_r{rep}"
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        stamps = os.path.join(tmp, "stamps.txt")
        env = {**runner.env, "SWEEPER_BENCH_STAMPS": stamps, "SWEEPER_BENCH_TRIALS": str(case.n)}
        argv = [sys.executable, "-m", "sweeper", GRID_TF_FIRST, "--out", tmp, "--workers", str(case.k),
                "--quiet", *cli_flags(method)]
        rc, why = runner.command(argv, case.timeout_s, tag, env=env)
        t_start, t_exit = runner.t_start, runner.t_exit
        starts = _stamps(stamps)
        rows = _results_csv(os.path.join(tmp, os.path.splitext(os.path.basename(GRID_TF_FIRST))[0]))
        if why or not starts or t_exit is None:
            return {"error": why or f"no trial's train started (exit code {rc}); see {runner.log(tag)}"}
        res: dict[str, Any] = {"wall_s": t_exit - t_start, "rc": rc, "trials": [], "n": case.n,
                               "n_ok": sum(r.get("status") == "ok" for r in rows),
                               "first_train_s": min(starts) - t_start}
        from methods import _epoch  # bench/ is this script's folder

        launches = [t for t in (_epoch(r.get("started_at")) for r in rows) if t is not None]
        if launches:  # the sweep handed the first trial to its process (ledger, ms resolution)
            res["first_launch_s"] = min(launches) - t_start
            res["launch_to_train_s"] = min(starts) - min(launches)
        rc2, why2 = runner.command(argv, case.timeout_s, tag + "_resume", env=env)
        res["resume_rc"] = rc2
        res["resume_trials_run"] = len(_stamps(stamps)) - len(starts)
        if why2 or runner.t_exit is None:
            res["error"] = f"resume: {why2}"
        else:
            res["resume_s"] = runner.t_exit - runner.t_start
    return res


def import_unit(runner: Runner, case: Case, rep: str) -> dict[str, float] | None:
    """Scenario E's unit: ``python bench/grid_tf_first.py``, one import of the grid file.

    ``import_s``: from just before the start to the line its ``__main__`` block appends once
    the module's top level has run; ``exit_s``: to its exit (TensorFlow's teardown included).
    """
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        stamps = os.path.join(tmp, "stamps.txt")
        env = {**runner.env, "SWEEPER_BENCH_STAMPS": stamps, "SWEEPER_BENCH_TRIALS": str(case.n)}
        rc, why = runner.command([sys.executable, GRID_TF_FIRST], 120, f"E_import_{rep}", env=env)
        imported = _stamps(stamps)
    if rc != 0 or why or not imported or runner.t_exit is None:
        _say(f"[E {rep}] one import of the grid file: FAILED (exit code {rc}) {why}")
        return None
    unit = {"import_s": imported[0] - runner.t_start, "exit_s": runner.t_exit - runner.t_start}
    _say(f"[E {rep}] one import of the grid file: {unit['import_s']:.2f} s, exited at {unit['exit_s']:.2f} s")
    return unit


def _stamps(path: str) -> list[float]:
    try:
        with open(path) as f:
            return [float(line.split()[0]) for line in f if line.strip()]
    except OSError:
        return []


def _results_csv(folder: str) -> list[dict[str, str]]:
    import csv

    try:
        with open(os.path.join(folder, "results.csv"), newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def _sweeper_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("sweeper")
    except Exception:  # noqa: BLE001
        return None


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    def _term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    sys.exit(main())
