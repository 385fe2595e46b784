"""One measured run, in its own process: ``python bench/driver.py SPEC.json RESULT.json``.

``run.py`` starts one driver per (scenario, method, repeat), so every method starts from
a fresh interpreter (no warm loky executor, no imported framework left over), the
driver's peak RSS is the sweep parent's own, and a stuck run can be killed as a tree.

The spec names the method, the trial function (``module:function``, imported here before
the clock starts, as a user's script would), the points and the slots. Only the standard
library is imported at the top: spawned children re-import this file as ``__mp_main__``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def rusage_check() -> dict[str, float]:
    """Show that RUSAGE_SELF leaves out a spawned child's CPU (it goes to RUSAGE_CHILDREN)."""
    import multiprocessing

    s0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = multiprocessing.get_context("spawn").Process(target=_burn, args=(0.5,))
    p.start()
    p.join(30)
    s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"child_burned_s": 0.5,
            "self_delta_s": (s1.ru_utime + s1.ru_stime) - (s0.ru_utime + s0.ru_stime),
            "children_delta_s": (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)}


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main(spec_path: str, result_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    import methods

    result: dict = {"method": spec["method"]}
    try:
        if spec.get("check_rusage"):
            result["rusage_check"] = rusage_check()
        runner, options = methods.RUNNERS[spec["method"]]
        import importlib

        mod_name, fn_name = spec["fn"].split(":")
        # as a user's script does: import, then run (the CLI's user has no script: its grid file imports)
        if runner is methods.run_sweeper or (spec.get("import_fn") and runner is not methods.run_sweeper_cli):
            fn = getattr(importlib.import_module(mod_name), fn_name)
        else:
            fn = methods.ByName(mod_name, fn_name)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self0, kids0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        kwargs = dict(options)
        if runner is methods.run_sweeper:
            kwargs["grid"] = spec.get("grid")
        out = runner(fn, spec["points"], spec["k"], spec["trial_timeout"], **kwargs)
        result.update(out)
        result["parent_cpu_s"] = _cpu(resource.RUSAGE_SELF) - self0
        result["children_cpu_s"] = _cpu(resource.RUSAGE_CHILDREN) - kids0
        result["maxrss_before_mb"] = rss0 / 1024.0  # Linux: kilobytes
        result["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except BaseException as exc:  # noqa: BLE001 - reported in the table, not fatal
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"[:500]
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(result_path + ".tmp", result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
