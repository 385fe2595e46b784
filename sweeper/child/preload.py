"""Imported by a sweep's fork server (:mod:`sweeper.backends.local.server`): imports the
installed modules ``train`` needs (candidates listed one a line in the file named by
``SWEEPER_PRELOAD_LIST``; :mod:`sweeper.system.modules` keeps the installed ones), never the
user's own module, which each trial imports itself; then tries one fork (:func:`probe`),
and says ``ok``, or why not, into the FIFO named by ``SWEEPER_PRELOAD_READY``.

On anything but ``ok`` nothing is forked: trials start as spawn processes (which report an
import error the usual way).
"""

import os

from sweeper.child import bootstrap  # noqa: F401  (every fork starts there: imported once, here)
from sweeper.model import contract


def _import() -> str:
    import signal
    import sys

    # Ctrl-C is the sweep's, which ends this server: none of its traceback on the terminal,
    # and no terminal's signal reaches a group of its own (multiprocessing ignores SIGINT
    # here itself, but only once this import is done). The sweep started this process with
    # SIGINT blocked (Python's own start-up, before this line, would print a traceback of
    # it): ignored now, which drops one that came meanwhile, then unblocked.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    from sweeper.system.modules import warm

    # multiprocessing (3.11) does not give its fork server the sweep's sys.path: the parent's
    # own entries (a folder it added, the script's) come through the environment
    for entry in reversed(os.environ.pop(contract.PRELOAD_PATH, "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    # what importing prints (TensorFlow's C++ logs too) must not reach the sweep's console
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    try:
        with open(os.environ.pop(contract.PRELOAD_LIST, os.devnull)) as f:
            names = f.read().split()
    except OSError as exc:
        return f"its list of modules could not be read ({exc.strerror})"
    warm(names)
    return probe()


#: Seconds the probe fork may take to compute with each framework (a first TensorFlow op
#: takes under a second here).
PROBE_S = 10.0
#: Seconds it may take on a GPU: a framework's first use of a card (the driver's start,
#: its libraries loaded, kernels compiled for a new architecture) can take a minute.
PROBE_GPU_S = 120.0
#: MB the probe allocates on the card, under its cap (``capping.PROBE_CAP_MB``).
PROBE_MB = 64


def probe() -> str:
    """Fork once and compute a little with each framework the import loaded (their thread
    pools included), as a trial would. Some libraries cannot run in a fork once their
    threads have started (PyTorch after an op at the module's top level, whose OpenMP
    threads are gone in the fork; JAX once its backends are up): such a fork hangs inside
    ``train``, where no watchdog can tell it from training. So that is found out here,
    once, before any trial forks: "ok", or why the sweep must spawn.

    On a machine whose GPUs the sweep uses (the parent passes a GPU slot's environment in
    ``SWEEPER_PRELOAD_PROBE_GPU``), the fork also pins that card, caps each framework there
    as a trial's is capped, allocates and frees a little memory on it (:func:`_on_gpu`):
    a framework that looked for GPUs in the server (with none visible) sees none in its
    forks, and CUDA initialised before a fork fails in it. (That the server and its probe
    hold nothing on the card afterwards is the parent's check, through NVML:
    :class:`sweeper.backends.local.server.ForkServer`.)"""
    import json
    import signal
    import time

    gpu = json.loads(os.environ.pop(contract.PRELOAD_PROBE_GPU, "") or "{}")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the probe: a fork like any trial's, minus the trial
        os.close(read)
        why = ""
        try:
            if gpu:  # pinned and capped first, as a trial is: a framework's first op sets up its devices
                os.environ.update(gpu)
                why = _on_gpu()
            if not why:
                _compute()
        except BaseException as exc:  # noqa: BLE001
            why = f"{'on the GPU ' if gpu else ''}{type(exc).__name__}: {exc}".splitlines()[0][:300]
        os.write(write, why.encode())
        os._exit(3 if why else 0)
    os.close(write)
    limit = PROBE_GPU_S if gpu else PROBE_S
    deadline = time.monotonic() + limit
    os.set_blocking(read, False)  # a grandchild holding the pipe's other end must not hang the read
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                if code == 0:
                    return "ok"
                try:
                    why = os.read(read, 4096).decode(errors="replace")
                except BlockingIOError:
                    why = ""
                return f"a fork failed to compute with {_loaded()} (exit code {code}{': ' + why if why else ''})"
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                where = " on the GPU" if gpu else ""
                return (f"a fork hung computing with {_loaded()}{where} for {limit:g} s (threads started, or "
                        "CUDA initialised, before the fork)")
            time.sleep(0.01)
    finally:
        os.close(read)


def _loaded() -> str:
    import sys

    return ", ".join(m for m in ("numpy", "tensorflow", "torch", "jax") if m in sys.modules) or "Python"


def _compute() -> None:
    """A small computation with each framework imported, through its thread pool."""
    import sys

    if "numpy" in sys.modules:
        np = sys.modules["numpy"]
        a = np.ones((256, 256))
        float((a @ a).sum())
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        t = torch.ones(256, 256)
        float((t @ t).sum())
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        m = tf.ones((64, 64))
        float(tf.reduce_sum(tf.linalg.matmul(m, m)).numpy())
    if "jax" in sys.modules:
        jnp = sys.modules["jax"].numpy
        x = jnp.ones((64, 64))
        float((x @ x).sum())


def _on_gpu() -> str:
    """In the probe fork, pinned to a card with a cap in its environment: each framework
    the server loaded caps itself (as in a trial: :mod:`sweeper.child.capping`), puts
    :data:`PROBE_MB` on the card, computes, frees it. "" when all went well, else why not.

    A framework built for CUDA that sees no GPU here while the same framework, imported in
    a fresh process, sees one looked for GPUs in the server: every fork would train on the
    CPU, silently. (Asked only where the CUDA driver sees a card, which costs no import. A
    framework that sees none in a fresh process either is no worse in a fork.)"""
    import sys

    from sweeper.child import capping

    floats = PROBE_MB * 2**20 // 4
    blind = []
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        capping.apply_tensorflow(tf)
        if tf.config.list_physical_devices("GPU"):
            with tf.device("/GPU:0"):
                x = tf.ones((floats,))
                float(tf.reduce_sum(x).numpy())
                del x
        elif tf.test.is_built_with_cuda():
            blind.append("tensorflow")
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            capping.apply_torch(torch)
            t = torch.ones(floats, device="cuda")
            float(t.sum())
            del t
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        elif getattr(torch.version, "cuda", None):
            blind.append("torch")
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        try:
            devices = jax.devices("gpu")
        except RuntimeError:  # no GPU backend
            devices = []
        if devices:
            y = jax.device_put(jax.numpy.ones((floats,)), devices[0])
            float(y.sum())
            y.delete()
        elif _jax_has_cuda():
            blind.append("jax")
    seen = [name for name in blind if _fresh_sees_a_gpu(name)] if blind and _driver_sees_a_gpu() else []
    if seen:
        return (f"{', '.join(seen)} saw no GPU in a fork of the server, where a fresh process sees one (it "
                "looked for GPUs in the server, where none is visible, before the fork)")
    return ""


def _jax_has_cuda() -> bool:
    from importlib.util import find_spec

    return any(find_spec(name) is not None for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins"))


#: Run in a fresh process: exit 0 when the CUDA driver sees a device (no framework imported).
_DRIVER_CHECK = """
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(1)
n = ctypes.c_int(0)
sys.exit(0 if cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0 else 1)
"""


#: Run in a fresh process: exit 0 when the framework sees a GPU there (the same environment).
_FRESH_CHECK = {
    "tensorflow": "import sys, tensorflow as tf; sys.exit(0 if tf.config.list_physical_devices('GPU') else 1)",
    "torch": "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)",
    "jax": "import sys, jax\ntry:\n    jax.devices('gpu')\nexcept RuntimeError:\n    sys.exit(1)",
}


def _fresh(code: str, timeout: float) -> bool:
    import subprocess
    import sys

    try:
        return subprocess.run([sys.executable, "-c", code], timeout=timeout, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.SubprocessError):  # a check that cannot tell accuses no one
        return False


def _driver_sees_a_gpu() -> bool:
    """Whether the CUDA driver, asked from a fresh process with this environment (the
    card pinned), sees a device (quick: no framework imported)."""
    return _fresh(_DRIVER_CHECK, 60)


def _fresh_sees_a_gpu(framework: str) -> bool:
    """Whether the framework, imported in a fresh process with this environment, sees a
    GPU: if not, it cannot use the card at all (its CUDA libraries missing, a driver too
    old), and a fork is no worse than a spawn process."""
    return _fresh(_FRESH_CHECK[framework], 90)


def _tell(said: str) -> None:
    path = os.environ.pop(contract.PRELOAD_READY, "")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # the sweep is gone
        return
    try:
        os.write(fd, (said + "\n").encode())
    finally:
        os.close(fd)


_tell(_import())
