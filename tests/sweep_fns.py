"""Trial functions for the tests. Importable by spawned children (tests/ is on sys.path).

Nothing heavy at module level: most tests here are about processes, not models.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

import sweeper


def echo(params):
    """Reports what the child saw: its pid, its GPU pinning, its seed and params."""
    trial = sweeper.current_trial()
    return {
        "value": float(params.get("x", 0)) * 2,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "cuda": _index(os.environ.get("CUDA_VISIBLE_DEVICES", "")),
        "seed_seen": trial.seed if trial else -1,
    }


def _index(pin: str) -> float:
    """The GPU a child was pinned to, as a number where it is an index (NaN for a UUID)."""
    return float(pin) if pin.lstrip("-").isdigit() else float("nan")


def crash(params):
    """One function, many ways to die, chosen by params['how']; 'ok' returns normally."""
    how = params["how"]
    if how == "ok":
        return {"value": 1.0}
    if how == "raise":
        raise ValueError("boom from the trial")
    if how == "exit3":
        os._exit(3)
    if how == "segv":
        print("about to segfault", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "sleep":
        time.sleep(600)
    if how == "none":
        return None
    if how == "unpicklable":
        return lambda: 1
    if how == "bad_value":
        return {"acc": object()}
    if how == "reserved":
        return {"seed": 1.0}
    if how == "memory":
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = size + 512 * 1024**2
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        hoard = []
        while True:
            hoard.append(bytearray(64 * 1024**2))
    if how == "orphan":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        trial = sweeper.current_trial()
        with open(os.path.join(trial.dir, "orphan.pid"), "w") as f:
            f.write(str(child.pid))
        return {"value": 2.0}
    if how == "oom_text":
        print("2026-01-01 W allocator: Allocator (GPU_0_bfc) ran out of memory trying to allocate", flush=True)
        raise RuntimeError("CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    if how == "sleep_grandchild":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.path.join(sweeper.current_trial().dir, "orphan.pid"), "w") as f:
            f.write(str(child.pid))
        time.sleep(600)
    if how == "fork_then_die":  # the forked child holds every fd, the sentinel included
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        with open(os.path.join(sweeper.current_trial().dir, "orphan.pid"), "w") as f:
            f.write(str(pid))
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "bad_alloc":  # a C++ allocation failure: the message, then abort()
        print("terminate called after throwing an instance of 'std::bad_alloc'", flush=True)
        print("  what():  std::bad_alloc", flush=True)
        os.abort()
    if how == "ctrl_chars":  # a last log line full of terminal escapes
        print("\x1b]0;title\x07\x1b[2J\x00garbage\x1b[31m red", flush=True)
        os._exit(4)
    if how == "newline_metric":
        return {"a\nb": 1.0}
    if how.startswith("daemon_"):  # a double-forked daemon in its own session, then ...
        _daemon(os.path.join(sweeper.current_trial().dir, "daemon.pid"))
        if how == "daemon_exit":
            os._exit(3)
        if how == "daemon_sleep":
            time.sleep(600)
        return {"value": 3.0}
    raise AssertionError(f"unknown case {how}")


def _daemon(pid_file):
    """The classic daemon: fork, setsid, fork again; the grandchild sleeps, keeping every
    descriptor it inherited (the trial's sentinel and multiprocessing's pipes included)."""
    read, write = os.pipe()
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file, "w") as f:
                f.write(str(os.getpid()))
            os.write(write, b"!")
            time.sleep(600)
        os._exit(0)
    os.waitpid(first, 0)
    os.read(read, 1)  # the daemon has written its pid


def flaky(params):
    """Dies on its first attempt, succeeds on the second (uses a marker file in its folder)."""
    marker = os.path.join(sweeper.current_trial().dir, "attempted")
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(7)
    return {"value": 1.0}


def wait_for_file(params):
    """Signals that it started (a file), then waits for a release file or sleeps long."""
    trial = sweeper.current_trial()
    open(os.path.join(trial.dir, "started"), "w").close()
    release = params.get("release")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if release and os.path.exists(release):
            return {"value": float(params["x"])}
        time.sleep(0.05)
    return {"value": -1.0}


def draws(params):
    """Random numbers from Python and from NumPy imported only now (seeded on import)."""
    import random

    import numpy as np

    return {"py": random.random(), "np": float(np.random.rand())}


def gpu_env(params):
    """What GPU pinning and memory settings the child was started with, as metrics and, in
    full, in ``seen.json`` in its trial folder. Holds its slot briefly; given a fake NVML
    ``board`` (tests/fake_nvml.py), holds ``mb`` of its card until the parent has seen it."""
    import json

    began = time.time()  # its own span, in span.json: when train ran here, whenever the parent heard of it
    env = os.environ
    pin = env["CUDA_VISIBLE_DEVICES"]
    with open(os.path.join(sweeper.current_trial().dir, "seen.json"), "w") as f:
        json.dump({k: v for k, v in env.items() if k.startswith(("CUDA_", "SWEEPER_", "XLA_", "TF_"))}, f)
    if params.get("board"):
        import fake_nvml

        fake_nvml.hold(params["board"], params.get("mb", 100))
    time.sleep(params.get("hold", 0.3))
    with open(os.path.join(sweeper.current_trial().dir, "span.json"), "w") as f:
        json.dump([began, time.time()], f)
    return {
        "cuda": _index(pin),
        "n_ids": float(len(pin.split(","))),
        "pci_order": float(env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"),
        "xla_fraction": float(env.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "nan")),
        "tf_growth": float(env.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true"),
    }


def packed(params):
    """A trial on a fake card (tests/fake_nvml.py): takes ``need_mb`` of it as a framework
    does (OOM past its cap or the card's free memory), and holds it until ``peers``
    processes hold memory of that card at once (60 s at most), then ``busy_s`` more. A
    ``crash_on`` card index (or ``"all"``) crashes it there (SIGSEGV), as a faulty card would;
    ``leak_mb`` stays used on the card after it ended, by no process (``fake_nvml.leak``);
    ``epoch``: it reports its first epoch once it holds its memory."""
    import fake_nvml

    crash_on = params.get("crash_on")
    if crash_on == "all" or (crash_on is not None and os.environ["CUDA_VISIBLE_DEVICES"].endswith(
            f"-{int(crash_on):012d}")):
        os.kill(os.getpid(), signal.SIGSEGV)
    fake_nvml.allocate(params["board"], params["need_mb"])
    if params.get("leak_mb"):  # left on the card by no process once this one has ended
        fake_nvml.leak(params["board"], params["leak_mb"], os.environ["SWEEPER_TRIAL_ID"])
    if params.get("epoch"):  # its first epoch, as Keras's fit reports it, before it waits
        import sweeper

        sweeper.report(epoch=1, loss=1.0)
    deadline, met, peers = time.monotonic() + 60, 0, params.get("peers", 1)
    while met < peers and time.monotonic() < deadline:  # polls the board
        met = max(met, fake_nvml.meet(params["board"], peers))
        time.sleep(0.02)
    time.sleep(params.get("busy_s", 0.0))
    grows = (os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true"
             and os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE") == "false")
    return {"met": float(met), "cap": float(os.environ.get("SWEEPER_MEMORY_LIMIT_MB", "nan")), "grows": float(grows)}


def hog(params):
    """Holds ``mb`` MB of host memory (every page touched) and says so with a file of its pid
    in the folder ``room``; waits until ``peers`` such holders are alive at once (60 s at
    most), then ``busy_s`` more; returns the most it saw alive together."""
    import glob

    from fake_nvml import alive as live

    data = bytearray(params["mb"] << 20)
    data[::4096] = b"\x01" * len(range(0, len(data), 4096))  # resident, not just reserved
    mine = os.path.join(params["room"], str(os.getpid()))
    open(mine, "w").close()

    def alive() -> int:
        return sum(1 for f in glob.glob(os.path.join(params["room"], "*")) if live(int(os.path.basename(f))))

    deadline, met = time.monotonic() + 60, 0
    while met < params.get("peers", 1) and time.monotonic() < deadline:  # polls the folder
        met = max(met, alive())
        time.sleep(0.02)
    end = time.monotonic() + params.get("busy_s", 0.0)
    while time.monotonic() < end:
        met = max(met, alive())
        time.sleep(0.02)
    os.unlink(mine)
    return {"met": float(met), "held": float(len(data) >> 20)}


def sigkilled(params):
    """Dies of SIGKILL; with ``counter``, after counting one more OOM kill there, as the kernel's
    OOM killer counts in the memory cgroup's ``memory.events`` when it kills a process."""
    if params.get("counter"):
        with open(params["counter"], "w") as f:
            f.write("low 0\noom 1\noom_kill 1\n")
    os.kill(os.getpid(), signal.SIGKILL)


def tf_matmul(params):
    """A TensorFlow trial, capped through the real code path; runs wherever TF puts it."""
    import tensorflow as tf

    from sweeper.child import capping

    product = tf.matmul(tf.ones((4, 4)), tf.ones((4, 4)))
    return {"sum": float(tf.reduce_sum(product)), "gpus_seen": float(len(tf.config.list_physical_devices("GPU"))),
            "cap_said": float("no GPU visible" in capping.apply_tensorflow(tf))}


def oom_then_exit(params):
    """Attempt 1 runs out of memory; attempt 2 dies with exit code 3 (and says nothing)."""
    marker = os.path.join(sweeper.current_trial().dir, "attempted")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise MemoryError("out of memory")
    os._exit(3)


def probe_then_import(params):
    """Probe numpy's spec before importing it: the probe must not cost numpy its seed."""
    import importlib.util

    assert importlib.util.find_spec("numpy") is not None
    import numpy as np

    return {"np": float(np.random.rand())}


def slot_relay(params):
    """Holds its slot a while; reports when its process was created and whether the
    previous trial on its slot had exited before this one's fn started."""
    start = time.time()
    slot = os.environ["SWEEPER_SLOT"]
    relay = os.path.join(params["dir"], f"slot{slot}.pid")
    prev_alive = 0.0
    if os.path.exists(relay):
        prev_alive = float(os.path.exists(f"/proc/{int(open(relay).read())}"))
    with open(relay, "w") as f:
        f.write(str(os.getpid()))
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    created = time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))  # to 10 ms
    time.sleep(params.get("hold", 1.0))
    return {"created": created, "t_start": start, "t_end": time.time(), "slot": float(slot),
            "prev_alive": prev_alive, "pid": os.getpid(), "ppid": os.getppid()}


def reporter(params):
    """Reports three epochs through sweeper.report, then returns."""
    for epoch in range(1, 4):
        sweeper.report(epoch=epoch, loss=1.0 / epoch, acc=params["x"] * epoch)
    return {"acc": params["x"] * 3.0}


class _Item:
    """A framework scalar in the style of PyTorch and JAX: a number behind .item()."""

    def __init__(self, value):
        self._value = value

    def item(self):
        return self._value


def numpy_metrics(params):
    """Metrics of every numeric type real code returns: NumPy scalars, 0-d arrays, .item()."""
    import numpy as np

    return {"f64": np.mean([0.5, 0.7]), "f32": np.float32(0.25), "i64": np.int64(7), "arr": np.array(2.5),
            "int_arr": np.array(3), "flag": np.bool_(True), "item": _Item(0.125), "plain": 1.5}


def graceful(params):
    """A well-behaved training loop: on SIGTERM it stops after the epoch and returns what it has."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    open(os.path.join(sweeper.current_trial().dir, "started"), "w").close()
    epoch = 0
    until = params.get("until")
    for epoch in range(1, params["epochs"] + 1):
        if stop or (until and os.path.exists(until)):
            break
        time.sleep(0.05)
        sweeper.report(epoch=epoch, loss=1.0 / epoch)
    return {"epochs_done": float(epoch), "loss": 1.0 / epoch}


def own_time(params):
    """Returns the time it measured itself, then sleeps a moment, so that duration_s can be
    compared with it."""
    start = time.monotonic()
    open(os.path.join(sweeper.current_trial().dir, "started"), "w").close()
    release = params["release"]
    while not os.path.exists(release):
        time.sleep(0.02)
    return {"own_s": time.monotonic() - start}


def scored(params):
    """Scores that grow with x: the best trial has the highest."""
    score = [0.5, 0.7, 0.9][params["x"] - 1]
    return {"val_auc": score, "f1": score, "value": float(params["x"])}


def nan_first(params):
    """A metric of unknown direction; x=1 diverged (NaN)."""
    return {"value": {1: float("nan"), 2: 0.5, 3: 0.2}[params["x"]]}


def int_or_fail(params):
    """An integer metric, missing where the trial fails."""
    if params["x"] == 2:
        raise ValueError("no n for 2")
    return {"n": 3}


def const(params):
    """The same metric whatever the parameters."""
    return {"value": 1.0}


def echo2(params):
    """The same metrics as echo under another name: another function."""
    return echo(params)


def held_reporter(params):
    """Reports epoch 1; trial x=2 then writes "reported" in its folder and waits (up to
    600 s) for a "release" file there before its epoch 2, so a view can be seen mid-trial."""
    folder = sweeper.current_trial().dir
    sweeper.report(epoch=1, loss=1.0, acc=params["x"] * 1.0)
    if params["x"] == 2:
        open(os.path.join(folder, "reported"), "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(os.path.join(folder, "release")) and time.monotonic() < deadline:
            time.sleep(0.02)
    sweeper.report(epoch=2, loss=0.5, acc=params["x"] * 2.0)
    return {"acc": params["x"] * 2.0}


def stubborn(params):
    """Ignores SIGTERM, and so does a child it starts; both would sleep 600 s. Once both
    ignore it, writes "ignoring": the trial's pid, then the child's. It goes in the trial's
    folder, or in params["pids_to"] (a Ray trial's folder is a temporary one on its node)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    folder = params.get("pids_to") or sweeper.current_trial().dir
    ready = os.path.join(folder, "child_ready")
    child = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(sys.argv[1], 'w').close()\n"
        "time.sleep(600)\n"), ready])
    deadline = time.monotonic() + 60
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(os.path.join(folder, "ignoring.tmp"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.rename(os.path.join(folder, "ignoring.tmp"), os.path.join(folder, "ignoring"))
    time.sleep(600)
    return {"value": -1.0}


class _Exploding:
    """A metric value whose conversion to a number raises something other than TypeError."""

    def __float__(self):
        raise RuntimeError("device lost while reading the metric")


def exploding_metric(params):
    return {"ok_metric": 1.0, "bad": _Exploding()}


def descent(params):
    """A synthetic training run for searches: ``epochs`` epochs of ``pace`` seconds of
    work; the loss falls for good points (x < 0.5) and stays high for bad ones."""
    loss = float("nan")
    marker = os.path.join(sweeper.current_trial().dir, "failed_once")
    if params.get("fail_once") and not os.path.exists(marker):  # the first run of each point fails
        open(marker, "w").close()
        raise RuntimeError("the first attempt fails")
    for epoch in range(1, int(params.get("epochs", 20)) + 1):
        time.sleep(params.get("pace", 0.05))
        x = params["x"]
        loss = (1 + x) / epoch if x < 0.5 else 5 + x
        sweeper.report(epoch=epoch, loss=loss)
    return {"loss": loss}


def tracked(params):
    """Three epochs reported, then a result; lr >= 0.3 fails after its epochs (with
    ``fail_once``, only the first time: its rerun succeeds), by an exception, or with
    ``die`` by exiting (a crash, which ``retries`` retries)."""
    lr = params["lr"]
    for epoch in range(1, 4):
        sweeper.report(epoch=epoch, loss=1.0 / (epoch * lr), acc=lr * epoch)
    marker = os.path.join(sweeper.current_trial().dir, "failed_once")
    if lr >= 0.3 and not (params.get("fail_once") and os.path.exists(marker)):
        open(marker, "w").close()
        if params.get("die"):
            os._exit(3)
        raise ValueError("lr too high")
    return {"acc": lr * 3, "loss": 1.0 / (3 * lr)}


def final_differs(params):
    """Epochs report acc 0.1, 0.2, 0.3; the result says 0.99 (a best checkpoint's), plus a
    number too big for a float and two metric names MLflow would make one key."""
    for epoch in range(1, 4):
        sweeper.report(epoch=epoch, acc=0.1 * epoch)
    return {"acc": 0.99, "huge": 10**400, "a@b": 1.0, "a_b": 2.0}


def daemon_then_check(params):
    """Leaves a double-forked daemon, then waits (at most 20 s, on pidfds) for the daemons
    that earlier trials of the sweep left to be gone; says how many outlived their trial."""
    import select

    here = sweeper.current_trial().dir
    _daemon(os.path.join(here, "daemon.pid"))
    folder = os.path.dirname(here)
    fds, earlier = [], 0
    for name in os.listdir(folder):
        pid_file = os.path.join(folder, name, "daemon.pid")
        if name == os.path.basename(here) or not os.path.exists(pid_file):
            continue
        earlier += 1
        try:
            fds.append(os.pidfd_open(int(open(pid_file).read())))
        except ProcessLookupError:  # gone already
            continue
    deadline = time.monotonic() + 20
    alive = list(fds)
    while alive and time.monotonic() < deadline:
        ready, _, _ = select.select(alive, [], [], deadline - time.monotonic())
        alive = [fd for fd in alive if fd not in ready]
    return {"earlier": float(earlier), "outlived": float(len(alive))}


def server_killer(params):
    """x=1 (a fork) kills the fork server it was forked from, tells x=2, and exits with 7;
    x=2 waits for that, then returns; later trials just return."""
    import select

    flag = os.path.join(os.path.dirname(sweeper.current_trial().dir), "server.killed")
    forked = os.getppid() != params["sweep"]
    if params["x"] == 1 and forked:
        server = os.getppid()
        fd = os.pidfd_open(server)
        os.kill(server, signal.SIGKILL)
        select.select([fd], [], [], 30)
        open(flag, "w").close()
        os._exit(7)
    if params["x"] == 2:
        deadline = time.monotonic() + 60
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)  # polling the flag file x=1 writes
    return {"forked": float(forked), "ppid": os.getppid()}


def surface(params):
    """A score that depends mostly on ``a``, a little on ``c`` and hardly on ``b``: which
    parameters mattered is known in advance."""
    return {"score": 10.0 * params["a"] + 0.01 * params["b"] + (5.0 if params["c"] == "x" else 0.0)}


def tradeoff(params):
    """Two objectives that pull apart: accuracy grows with ``units`` and falls with the
    distance of ``lr`` from 0.01; ``size`` grows with ``units``. NumPy scalars, as a
    framework's metrics are. ``units`` 0 fails (no model)."""
    import numpy as np

    units, lr = params["units"], params["lr"]
    if units == 0:
        raise ValueError("a model needs units")
    return {"accuracy": np.float32(1.0 - 1.0 / units - abs(lr - 0.01)), "size": np.int64(10 * units)}


def urandom_score(params):
    """Not reproducible on purpose: ``noise`` comes from os.urandom, which no seed reaches;
    ``steady`` depends only on the point and the seeded ``random``."""
    import random

    return {"steady": params["x"] + random.random(), "noise": int.from_bytes(os.urandom(4), "little")}


def tradeoff_partial(params):
    """``tradeoff``, except that the smallest model (units 2) reports no ``size``."""
    out = tradeoff(params)
    if params["units"] == 2:
        del out["size"]
    return out


def ranked(params):
    """A score that is the point's ``rank``: the order of a leaderboard, chosen by the test."""
    return {"score": float(params["rank"])}


def auto_reporter(params):
    """Reports three epochs numbered by sweeper (1, 2, 3; after a pause, on from where it
    was paused), then returns the epoch it was resumed after (0: it was not)."""
    for step in range(3):
        sweeper.report(loss=1.0 / (step + 1))
    return {"resumed_after": float(os.environ.get("SWEEPER_RESUMED_EPOCH", 0))}
