"""Imported by a sweep's fork server (:mod:`sweeper.backends.local.server`): imports the
installed modules ``train`` needs (candidates listed one a line in the file named by
``SWEEPER_PRELOAD_LIST``; :mod:`sweeper.modules` keeps the installed ones), never the
user's own module, which each trial imports itself; then tries one fork (:func:`probe`),
and says ``ok``, or why not, into the FIFO named by ``SWEEPER_PRELOAD_READY``.

On anything but ``ok`` nothing is forked: trials start as spawn processes (which report an
import error the usual way).
"""

import os

from .. import contract
from . import bootstrap  # noqa: F401  (every fork starts there: imported once, here)


def _import() -> str:
    import sys
    from importlib import import_module

    from ..modules import installed

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
    for name in names:
        if name in sys.modules or not installed(name):
            continue
        try:
            import_module(name)
        except BaseException:  # noqa: BLE001 - an alias or a private module: the trial imports it
            continue
    return probe()


#: Seconds the probe fork may take to compute with each framework (a first TensorFlow op
#: takes under a second here).
PROBE_S = 10.0


def probe() -> str:
    """Fork once and compute a little with each framework the import loaded (their thread
    pools included), as a trial would. Some libraries cannot run in a fork once their
    threads have started (PyTorch after an op at the module's top level, whose OpenMP
    threads are gone in the fork; JAX once its backends are up): such a fork hangs inside
    ``train``, where no watchdog can tell it from training. So that is found out here,
    once, before any trial forks: "ok", or why the sweep must spawn."""
    import signal
    import time

    pid = os.fork()
    if pid == 0:  # the probe: a fork like any trial's, minus the trial
        code = 0
        try:
            _compute()
        except BaseException:  # noqa: BLE001
            code = 3
        os._exit(code)
    deadline = time.monotonic() + PROBE_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return "ok" if code == 0 else f"a fork failed to compute with {_loaded()} (exit code {code})"
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return f"a fork hung computing with {_loaded()} for {PROBE_S:g} s (threads started before the fork)"
        time.sleep(0.01)


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
