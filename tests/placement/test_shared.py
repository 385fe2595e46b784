"""A GPU machine shared by several sweeps, a colleague's job and ``run --`` jobs: real sweeps
(``python -m sweeper`` processes) and real processes, on fake cards (tests/fake_nvml.py)
whose trials take memory as TensorFlow does (its whole cap the moment it starts, without
memory growth). Every sweep of a test reads and writes the same machine-wide folder
(``SWEEPER_MACHINE_DIR``); nothing else of theirs is shared."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import HERE, ROOT

CARD_MB = 16384


class Shared:
    """One fake machine: a card (or several), its board, its machine-wide folder; sweeps,
    colleagues and jobs started on it as a user would."""

    def __init__(self, root: str, cards: int = 1) -> None:
        from fake_nvml import Card, FakeNvml

        self.root = root
        self.board = os.path.join(root, "board")
        self.machine = os.path.join(root, "machine")
        os.makedirs(self.board)
        os.chmod(self.board, 0o1777)  # another user's trials take memory here too
        lock = os.path.join(self.board, ".lock")
        open(lock, "w").close()
        os.chmod(lock, 0o666)
        self.fake = FakeNvml([Card(total_mb=CARD_MB) for _ in range(cards)], board=self.board)
        self.uuid = self.fake.cards[0].uuid
        path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, "SWEEPER_FAKE_NVML": self.fake.to_json(), "SWEEPER_MACHINE_DIR": self.machine,
                    "PYTHONPATH": path}
        self.env.pop("CUDA_VISIBLE_DEVICES", None)

    def grid(self, name: str, points: list[dict]) -> str:
        path = os.path.join(self.root, f"{name}.py")
        rows = [{"board": self.board, "busy_s": 0.3, **p} for p in points]
        with open(path, "w") as f:
            f.write(f"import sys\nsys.path.insert(0, {HERE!r})\nfrom shared_fns import tf_trial as train\n\n"
                    f"grid = [{{k: [v] for k, v in p.items()}} for p in {rows!r}]\n")
        os.chmod(path, 0o644)
        return path

    def sweep(self, name: str, points: list[dict], *flags: str,
              user: tuple[str, str, str] | None = None) -> subprocess.Popen:
        """``python -m sweeper <grid> ...`` on this machine (as ``user``: its name, an interpreter
        it may run and its PYTHONPATH: :func:`as_nobody`), its output piped."""
        exe, env = sys.executable, self.env
        if user is not None:
            exe, env = user[1], {**self.env, "PYTHONPATH": user[2]}
        args = [exe, os.path.join(HERE, "fake_nvml.py"), self.grid(name, points), "--out", self.root,
                "--name", name, *flags]
        if user is not None:
            args = ["setpriv", f"--reuid={user[0]}", "--regid=nogroup", "--clear-groups", *args]
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, os.path.join(HERE, "fake_nvml.py"), *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def colleague(self, mb: int, *more: str) -> subprocess.Popen:
        """A process that is no sweep's holding ``mb`` of the first card, once it says so."""
        held = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_nvml.py"), "--hold", self.board, self.uuid,
                                 str(mb), *more], env=self.env, stdout=subprocess.PIPE, text=True)
        assert held.stdout is not None and held.stdout.readline().strip() == "holding"
        return held

    def rows(self, name: str) -> list[dict]:
        with open(os.path.join(self.root, name, "results.csv")) as f:
            return list(csv.DictReader(f))

    def records(self) -> list[dict]:
        out = []
        for entry in os.listdir(self.machine) if os.path.isdir(self.machine) else []:
            if entry.endswith(".json"):
                try:
                    with open(os.path.join(self.machine, entry)) as f:
                        out.append({**json.load(f), "owner": os.stat(os.path.join(self.machine, entry)).st_uid})
                except (OSError, ValueError):  # replaced meanwhile
                    continue
        return out

    def until(self, what, bound: float = 60.0):
        """Polls ``what()`` (a file written by another process: nothing to wait on) until it is true."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            got = what()
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError("the machine never got there")


def as_nobody() -> tuple[str, str, str] | None:
    """``nobody``, an interpreter it may run (and start processes of: this one may lie under a
    folder only root enters, a system one of the same version may not), and the PYTHONPATH
    that gives it this environment's packages; None where there is none."""
    import sysconfig

    if shutil.which("setpriv") is None or os.getuid() != 0:
        return None
    path = os.pathsep.join([ROOT, HERE, sysconfig.get_paths()["purelib"]])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for exe in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", exe, "-c",
                                "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', "
                                "'import numpy, pynvml, sweeper']).returncode)"],
                               cwd="/", env={**os.environ, "PYTHONPATH": path}, capture_output=True)
        if probe.returncode == 0:
            return "nobody", exe, path
    return None


def read_until(proc: subprocess.Popen, text: str, seen: list[str]) -> str:
    """Lines of a process's output, until one has ``text`` (kept in ``seen``)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"{text!r} never came; it said: {''.join(seen)[-3000:]}")


def finish(proc: subprocess.Popen, seen: list[str] | None = None, timeout: float = 180) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return "".join(seen or []) + out


@pytest.fixture
def shared(tmp_path):
    return Shared(str(tmp_path))


def need(i: int) -> int:
    """Trials needing 5-6 GB, as the issue's."""
    return 5120 + (i * 337) % 1025


@pytest.mark.parametrize("sweeps,flags", [(2, ["--per-gpu", "2"]), (3, ["--per-gpu", "2"]), (2, ["--per-gpu", "auto"]),
                                          (3, ["--per-gpu", "auto"])])
def test_sweeps_at_once_lose_no_trial_to_each_other_and_say_whom_they_wait_for(shared, sweeps, flags):
    """Sweeps started together on one 16 GB card, trials of 5-6 GB: each trial starts only where
    its cap fits beside what the other sweeps' trials reserved (per_gpu auto: a trial not
    measured yet reserves most of its fair share of the card, and may grow into the card's
    room: three sweeps' shares are smaller than a 6 GB trial), so none runs out of memory,
    none runs twice, and a sweep that waits says for whose trials, once."""
    auto = "auto" in flags
    release = os.path.join(shared.root, "release")  # the first trials hold the card until all sweeps are there
    procs = [shared.sweep(f"s{k}", [{"i": i, "need_mb": 6144 if auto else need(i + k), "until": release}
                                    for i in range(2)], *flags)
             for k in range(sweeps)]
    shared.until(lambda: len(shared.records()) == sweeps and any(r["want"] for r in shared.records()))
    open(release, "w").close()
    outs = [finish(p) for p in procs]
    for k, out in enumerate(outs):
        rows = shared.rows(f"s{k}")
        assert [r["status"] for r in rows] == ["ok", "ok"], out
        assert [r["attempts"] for r in rows] == ["1", "1"], out
    folders = [os.path.join(shared.root, f"s{k}") for k in range(sweeps)]
    said = [line for out in outs for line in out.splitlines() if line.startswith("sweeper: waiting:")]
    assert any(f for f in folders if any(f + " (" in line for line in said)), outs
    for out in outs:  # once per cause, not per trial
        lines = [line for line in out.splitlines() if line.startswith("sweeper: waiting:")]
        assert len(lines) <= 2 * sweeps, out
    assert shared.records() == []  # each withdrew its record when it ended


def test_a_colleagues_process_makes_trials_wait_not_fail_and_gpus_and_status_say_so(shared):
    """A process that is no sweep's holds 10 GB of the card: a sweep of the default per_gpu
    (whose trials map 95% of the card) waits, says so once naming the process, its user and
    command; ``gpus`` shows it, ``status`` says what the sweep waits for, ``--dry-run`` that
    the card is shared; once it lets go, every trial runs, none ``oom``."""
    colleague = shared.colleague(10240)
    points = [{"i": i, "need_mb": need(i)} for i in range(2)]
    dry = shared.cli(shared.grid("s", points), "--out", shared.root, "--name", "s", "--dry-run")
    assert f"gpu:0 is shared: pid {colleague.pid} (root, " in dry.stdout, dry.stdout
    sweep = shared.sweep("s", points)
    seen: list[str] = []
    line = read_until(sweep, "sweeper: waiting:", seen)
    from sweeper.placement.liveness import command

    # its command as ps shows it, cut to the line's width (where the checkout's path is long, before fake_nvml.py)
    shown = command(colleague.pid)
    assert shown.startswith(sys.executable[:40]), shown
    assert f"pid {colleague.pid} (root, {shown}) holds 10240 MB" in line, (line, shown)
    assert skeleton(line) == skeleton(next(b for b in blocks("text") if b.startswith("sweeper: waiting:"))), line
    view = shared.cli("gpus").stdout
    assert f"pid {colleague.pid} (root): 10240 MB, " in view and "waiting: " + os.path.join(shared.root, "s") in view
    status = shared.cli("status", os.path.join(shared.root, "s")).stdout
    assert "sweeper: waiting: gpu:0 has 6144 MB free" in status, status
    colleague.kill()
    colleague.wait()
    out = finish(sweep, seen)
    assert [r["status"] for r in shared.rows("s")] == ["ok", "ok"], out
    assert out.count("sweeper: waiting:") == 1, out


def test_a_colleagues_cuda_context_beside_two_trials_per_card_makes_one_wait_not_fail(shared):
    """A process that is no sweep's holds 400 MB (an idle notebook's CUDA context) beside
    ``--per-gpu 2``: each trial maps its cap and a context beside it, so two no longer fit
    and the second waits, said once naming the process; every trial ends ok, first time."""
    colleague = shared.colleague(400)
    sweep = shared.sweep("s", [{"i": i, "need_mb": need(i)} for i in range(3)], "--per-gpu", "2")
    out = finish(sweep)
    colleague.kill()
    colleague.wait()
    assert sweep.returncode == 0, out
    assert [(r["status"], r["attempts"]) for r in shared.rows("s")] == [("ok", "1")] * 3, out
    waits = [line for line in out.splitlines() if line.startswith("sweeper: waiting:")]
    assert len(waits) == 1 and f"pid {colleague.pid} (root, " in waits[0], out


def test_a_trial_larger_than_its_share_gets_its_turn_beside_a_sweep_of_two_per_card(shared):
    """A sweep of ``--per-gpu 2`` fills the card; a sweep of the default per_gpu (a trial that
    takes the whole card, more than its share) comes and waits. The first sweep's trials,
    each within its share, start no more while it waits: the card drains for it, and its
    trial runs before the first sweep's next ones (it waited for all of them)."""
    release = os.path.join(shared.root, "release")  # the first two hold the card until the second sweep waits
    first = shared.sweep("a", [{"i": i, "need_mb": 5000, "until": release if i < 2 else None} for i in range(5)],
                         "--per-gpu", "2")
    shared.until(lambda: sum(bool(h["pid"]) for r in shared.records() for h in r["holdings"]) == 2)
    second = shared.sweep("b", [{"i": 0, "need_mb": 5000}])
    folder = os.path.join(shared.root, "b")
    wanted = shared.until(lambda: next((r["want"]["since"] for r in shared.records()
                                        if r["folder"] == folder and r["want"]), None))
    open(release, "w").close()
    outs = finish(second), finish(first)
    assert [r["status"] for r in shared.rows("b")] == ["ok"], outs
    begun = float(shared.rows("b")[0]["t_start"])
    passed = [r for r in shared.rows("a") if wanted < float(r["t_start"]) < begun]
    assert len(passed) <= 1, (len(passed), outs)
    assert [r["status"] for r in shared.rows("a")] == ["ok"] * 5, outs


def test_a_sweep_waits_for_a_colleagues_memory_at_most_the_longest_wait_then_names_him(shared):
    """Nothing of the sweep runs and a stranger's memory never frees: after SWEEPER_MEMORY_WAIT
    the sweep stops taking trials with one line naming the process (exit 2); nothing is
    recorded as failed, so the same command runs them later."""
    colleague = shared.colleague(10240)
    shared.env["SWEEPER_MEMORY_WAIT"] = "1.5s"
    sweep = shared.sweep("s", [{"i": i, "need_mb": need(i)} for i in range(2)])
    out = finish(sweep)
    assert sweep.returncode == 2, out
    colleague.kill()
    colleague.wait()
    error = [line for line in out.splitlines() if line.startswith("sweeper: error:")]
    assert len(error) == 1 and "no place left for the 2 trials still queued: no trial could start for 1.5 s" in error[0]
    assert f"pid {colleague.pid} (root, " in error[0] and "set SWEEPER_MEMORY_WAIT to wait longer" in error[0]
    assert not os.path.exists(os.path.join(shared.root, "s", "results.csv")) or shared.rows("s") == []


def test_memory_a_colleague_takes_while_a_trial_starts_is_not_the_trials_failure(shared):
    """A colleague's process grows from 500 MB to 9 GB just as a trial starts (placed where
    its cap fitted): the trial runs out of memory, its line names the process, and it runs
    again once there is room, with no --retries: its row is ok, two attempts."""
    cue = os.path.join(shared.root, "starting")
    colleague = shared.colleague(500, "--grow", "9000", "--when", cue)
    sweep = shared.sweep("s", [{"i": 0, "need_mb": 5000, "cue": cue}], "--per-gpu", "2")
    seen: list[str] = []
    line = read_until(sweep, "[retry] oom", seen)
    assert f"not its own: gpu:0: pid {colleague.pid} (root, " in line and "holds 9000 MB" in line, line
    assert "it runs again once there is room" in line
    said = next(b for b in blocks("text") if b.startswith("[retry]"))  # as docs/shared.md shows it
    assert skeleton(said[said.index("(not its own:"):]) in skeleton(line), line
    colleague.kill()
    colleague.wait()
    out = finish(sweep, seen)
    rows = shared.rows("s")
    assert [(r["status"], r["attempts"]) for r in rows] == [("ok", "2")], out


def test_a_sigkilled_sweep_blocks_no_one(shared):
    """A sweep killed with SIGKILL leaves its record behind; the next reader takes it for
    dead at once (its pid no longer runs as it did) and a second sweep gets the card."""
    from sweeper.placement.machine import Machine

    first = shared.sweep("a", [{"i": 0, "need_mb": 5000, "busy_s": 60}])
    shared.until(lambda: any(h["pid"] for r in shared.records() for h in r["holdings"]))
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert shared.records(), "its record stays behind"
    assert Machine(shared.machine).read() == []  # and is dead to every reader
    second = shared.sweep("b", [{"i": i, "need_mb": 5000} for i in range(2)])
    out = finish(second)
    assert [r["status"] for r in shared.rows("b")] == ["ok", "ok"], out
    assert os.path.join(shared.root, "a") + " (" not in out


def test_another_users_sweep_reads_this_ones_record_and_never_writes_it():
    """A sweep run as ``nobody`` beside root's: it waits for root's trial (named, with its
    user) instead of running out of memory; each record is its own user's file."""
    nobody = as_nobody()
    if nobody is None:
        pytest.skip("needs root, setpriv and an interpreter nobody may run, to run a sweep as nobody")
    root = tempfile.mkdtemp(prefix="shared-users-")
    os.chmod(root, 0o777)
    try:
        shared = Shared(root)
        release = os.path.join(root, "release")  # root's trial holds the card until nobody's sweep waits
        mine = shared.sweep("root-sweep", [{"i": 0, "need_mb": 5000, "until": release}])
        shared.until(lambda: any(h["pid"] for r in shared.records() for h in r["holdings"]))
        theirs = shared.sweep("nobody-sweep", [{"i": 0, "need_mb": 5000}], user=nobody)
        shared.until(lambda: any(r["want"] and r["owner"] == 65534 for r in shared.records()))
        owners = sorted(r["owner"] for r in shared.records())
        open(release, "w").close()
        out_theirs, out_mine = finish(theirs), finish(mine)
        assert owners == [0, 65534]
        assert [r["status"] for r in shared.rows("root-sweep")] == ["ok"], out_mine
        assert [r["status"] for r in shared.rows("nobody-sweep")] == ["ok"], out_theirs
        assert f"of {os.path.join(root, 'root-sweep')} (root) holds 15864 MB" in out_theirs, out_theirs
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_second_sweeps_first_trial_starts_before_the_first_runs_its_next_few(shared):
    """Fair share: a sweep of 6 trials holds the card (two at a time); a second sweep comes and
    waits. As the first one's trials end, the second's first trial starts before the first
    sweep starts more than one other (without a share it would wait for all of them, or run out)."""
    release = os.path.join(shared.root, "release")  # the first two hold the card until the second sweep waits
    first = shared.sweep("a", [{"i": i, "need_mb": 5000, "busy_s": 1.0, "until": release if i < 2 else None}
                               for i in range(6)], "--per-gpu", "2")
    shared.until(lambda: sum(bool(h["pid"]) for r in shared.records() for h in r["holdings"]) == 2)
    second = shared.sweep("b", [{"i": i, "need_mb": 5000} for i in range(2)], "--per-gpu", "2")
    folder = os.path.join(shared.root, "b")
    wanted = shared.until(lambda: next((r["want"]["since"] for r in shared.records()
                                        if r["folder"] == folder and r["want"]), None))
    open(release, "w").close()
    outs = finish(second), finish(first)
    b = [r for r in shared.rows("b") if r["status"] == "ok"]
    assert len(b) == 2, outs
    begun = min(float(r["t_start"]) for r in b)
    passed = [r for r in shared.rows("a") if wanted < float(r["t_start"]) < begun]
    assert len(passed) <= 1, (len(passed), outs)
    assert [r["status"] for r in shared.rows("a")] == ["ok"] * 6


def test_a_run_job_waits_for_its_share_beside_a_sweep_and_exits_with_its_code(shared):
    """``python -m sweeper run --gpu-memory 4GB -- CMD`` while a sweep fills the card: the
    job waits for its turn (the sweep, beyond its share, starts no more trials meanwhile),
    runs pinned to the card with its cap, its output streamed, and exits with its code;
    no trial of the sweep runs out of memory."""
    release = os.path.join(shared.root, "release")  # the first two hold the card until the job waits
    sweep = shared.sweep("s", [{"i": i, "need_mb": 5000, "busy_s": 1.0, "until": release if i < 2 else None}
                               for i in range(5)], "--per-gpu", "2")
    shared.until(lambda: sum(bool(h["pid"]) for r in shared.records() for h in r["holdings"]) == 2)
    script = ("import os, sys, time; sys.path.insert(0, %r); import fake_nvml; "
              "fake_nvml.allocate(%r, 4000, 'tensorflow'); "
              "print('job holds', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['SWEEPER_MEMORY_LIMIT_MB'], "
              "time.time(), flush=True); time.sleep(0.5); sys.exit(7)") % (HERE, shared.board)
    job = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_nvml.py"), "run", "--gpu-memory", "4GB", "--",
                            sys.executable, "-c", script], cwd=ROOT, env=shared.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    shared.until(lambda: any(r["kind"] == "job" and r["want"] for r in shared.records()))
    open(release, "w").close()
    stdout, stderr = job.communicate(timeout=180)
    out = finish(sweep)
    assert job.returncode == 7, stderr
    said = next(line for line in stdout.splitlines() if line.startswith("job holds"))
    assert said.split()[2:4] == [shared.uuid, "4096"]
    assert [r["status"] for r in shared.rows("s")] == ["ok"] * 5, out
    began = float(said.split()[4])
    assert any(float(r["t_start"]) > began for r in shared.rows("s")), "the job waited for the whole sweep"


def test_a_run_job_passes_one_interrupt_on_to_its_command_never_two(shared):
    """``run --`` started with no terminal (a script, a scheduler) gets a SIGINT sent to its
    process group, as a Ctrl-C is: its command, in a group of its own, gets it once, passed on,
    and has all the time it takes to stop (a checkpoint's save): no second SIGINT comes. The
    job exits with the command's code."""
    script = ("import signal, sys, time\n"
              "got = []\n"
              "signal.signal(signal.SIGINT, lambda s, f: got.append(time.monotonic()))\n"
              "print('ready', flush=True)\n"
              "while not got:\n    signal.pause()\n"
              "while time.monotonic() - got[0] < 2.5:  # a graceful stop that takes a while\n    time.sleep(0.05)\n"
              "print('interrupts', len(got), flush=True)\nsys.exit(3)\n")
    job = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_nvml.py"), "run", "--", sys.executable, "-c",
                            script], cwd=ROOT, env=shared.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    read_until(job, "ready", [])
    os.killpg(job.pid, signal.SIGINT)
    stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == 3 and "interrupts 1" in stdout, (stdout, stderr)


def page() -> str:
    return open(os.path.join(ROOT, "docs", "shared.md"), encoding="utf-8").read()


def skeleton(line: str) -> str:
    """A console line with what differs between machines left out: whose and what command (in
    parentheses), paths, numbers."""
    import re

    line = re.sub(r"\((\w+)(, [^()]*)?\)", lambda m: "(U, C)" if m.group(2) else "(U)", line)
    line = re.sub(r"\S*/\S*", "P", line)
    return re.sub(r"\d+", "N", line).strip()


def blocks(kind: str) -> list[str]:
    import re

    return re.findall(rf"```{kind}\n(.*?)```", page(), re.S)


def test_the_pages_commands_run_as_pasted_and_say_what_it_shows(tmp_path):
    """docs/shared.md's commands, pasted in a folder with a grid.py and an eval.py (python -m
    sweeper as on a machine of one 16 GB card): two sweeps at once, a job beside them while they
    run, and ``gpus``, whose lines are the page's transcript's; every trial and the job end ok."""
    import shlex

    shared = Shared(str(tmp_path / "machine-root"))
    from fake_nvml import Card, FakeNvml

    shared.fake = FakeNvml([Card(name="Tesla V100-PCIE-16GB")], board=shared.board)
    shared.env.update(SWEEPER_FAKE_NVML=shared.fake.to_json(),
                      PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    work = tmp_path / "work"
    work.mkdir()
    release = str(tmp_path / "release")  # each sweep's trials hold the card until the job waits
    (work / "grid.py").write_text(f"import sys\nsys.path.insert(0, {HERE!r})\nfrom shared_fns import tf_trial as train\n"
                                  f"grid = {{'i': [0, 1, 2], 'need_mb': [5000], 'board': [{shared.board!r}], "
                                  f"'busy_s': [0.3], 'until': [{release!r}]}}\n")
    (work / "eval.py").write_text(f"import sys\nsys.path.insert(0, {HERE!r})\nimport fake_nvml\n"
                                  f"fake_nvml.allocate({shared.board!r}, 4000, 'tensorflow')\nprint('evaluated')\n")
    lines = [shlex.split(line, comments=True) for line in blocks("bash")[0].splitlines() if line.strip()]
    assert [words[:3] for words in lines] == [["python", "-m", "sweeper"]] * 4

    def start(words: list[str]) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, os.path.join(HERE, "fake_nvml.py"), *words[3:]], cwd=work,
                                env=shared.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    sweeps = [start(lines[0]), start(lines[1])]
    shared.until(lambda: sum(bool(h["pid"]) for r in shared.records() for h in r["holdings"]) == 2)
    job = start(lines[2])
    shared.until(lambda: any(r["kind"] == "job" and r["want"] for r in shared.records()))
    view = subprocess.run([sys.executable, os.path.join(HERE, "fake_nvml.py"), *lines[3][3:]], cwd=work,
                          env=shared.env, capture_output=True, text=True).stdout
    shown = {skeleton(line) for line in view.splitlines()}
    transcript = next(b for b in blocks("text") if b.startswith("gpu:0"))
    open(release, "w").close()
    out = [finish(p) for p in [*sweeps, job]]
    assert {skeleton(line) for line in transcript.splitlines()} <= shown, view
    assert job.returncode == 0 and "evaluated" in out[2], out[2]
    for name in ("grid", "colleague"):
        with open(work / "results" / name / "results.csv") as f:
            assert [r["status"] for r in csv.DictReader(f)] == ["ok"] * 3, out
