"""Trial functions for tests/api/test_metric_types_and_bad_alloc.py: metrics of unusual numeric types, and a
trial whose child process dies of ``std::bad_alloc``. Importable by spawned children
(tests/ is on sys.path); run as a script, it is that child.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys


def numbers(params):
    """The metric ``m`` as params['what'] says: complex (three ways), or every real NumPy type."""
    import numpy as np

    what = params["what"]
    if what == "np_complex":
        return {"m": np.complex128(1 + 2j), "other": 1.0}
    if what == "py_complex":
        return {"m": 1 + 2j, "other": 1.0}
    if what == "complex_0d":
        return {"m": np.array(3 + 4j), "other": 1.0}
    return {"m": np.longdouble(0.1), "other": 1.0, "f16": np.float16(0.5), "f32": np.float32(0.25),
            "ld_0d": np.array(0.75, dtype=np.longdouble), "i8": np.int8(-3), "u16": np.uint16(65535),
            "i32": np.int32(-7), "u32": np.uint32(4_000_000_000), "i64": np.int64(2**40), "b": np.bool_(True)}


#: The argument that makes this file the dying child (it must not itself say "bad_alloc":
#: a CalledProcessError's message holds the command line).
CHILD = "die-like-cpp"


def child_abort(params):
    """Run a child that dies as a C++ program does when operator new fails, with its
    stderr inherited (into the trial's log) or captured, as params['capture'] says."""
    argv = [sys.executable, os.path.abspath(__file__), CHILD]
    subprocess.run(argv, check=True, capture_output=bool(params["capture"]))
    return {"value": 1.0}


def _die_like_cpp() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
    sys.stderr.write("terminate called after throwing an instance of 'std::bad_alloc'\n"
                     "  what():  std::bad_alloc\n")
    sys.stderr.flush()
    os.abort()


if __name__ == "__main__" and sys.argv[1:] == [CHILD]:
    _die_like_cpp()
