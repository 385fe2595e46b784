"""The app's own code, as a multirun again tells what changed since a job kept from an earlier
run was made.

The app's own code is the file that defines the task function, the other ``.py`` files
beside it, and each module Hydra's process has imported from that folder or below (a package
of the app's, imported at the top of its script). Installed code is not the app's own (a
package's version is in the sweep's recorded environment), nor is the sweep folder's.

The launcher reads the files' digests when a multirun launches (:func:`app_code`); each
job's process notes them beside its return (:func:`sweeper.front.hydra.task.keep`). A job
``ok`` on record is kept, as a resume keeps one (the command line keeps its trials when the
grid file changed, and says so), and the multirun says in one line, before any job runs,
which kept jobs were made by other code and what changed (:func:`changed_line`).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Mapping

from sweeper.model.callables import source_of
from sweeper.system.environment import digest

#: The app's files by their path from its folder, each with its content's digest.
Code = Mapping[str, str]


def app_code(task_function: Any, sweep_folder: str) -> dict[str, str]:
    """The app's own files now ({} where the task function's file is installed code, or none)."""
    defining = source_of(task_function) or source_of(type(task_function))
    if not defining:
        return {}
    folder = os.path.dirname(os.path.realpath(defining))
    skipped = (*_installed(), os.path.realpath(sweep_folder) + os.sep)
    if (folder + os.sep).startswith(skipped):
        return {}
    paths = {os.path.join(folder, name) for name in _listed(folder) if name.endswith(".py")}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            path = os.path.realpath(path)
            if path.startswith(folder + os.sep) and not path.startswith(skipped):
                paths.add(path)
    out = {}
    for path in sorted(paths):
        sha = digest(path)
        if sha is not None:
            out[os.path.relpath(path, folder)] = sha
    return out


def changed_line(made: Iterable[tuple[str, Code]], now: Code) -> str | None:
    """One line for the jobs kept that were made by other code (each its number and the code
    it ran with), naming the files edited, added or gone; None where every one ran this code."""
    nums, differ, seen = [], set(), set()
    for num, code in made:
        if dict(code) == dict(now):
            continue
        nums.append(f"#{num}")
        differ |= {p for p in {*code, *now} if code.get(p) != now.get(p)}
        seen |= set(code)
    if not nums:
        return None
    added, gone = differ - seen, differ - set(now)  # new to every such job; no more
    edited = differ - added - gone
    what = "; ".join(f"{word}: {_some(sorted(paths))}" for word, paths in
                     (("edited", edited), ("added", added), ("gone", gone)) if paths)
    jobs = f"job {nums[0]}" if len(nums) == 1 else f"{len(nums)} jobs ({_some(nums)})"
    rows = "its row is" if len(nums) == 1 else "their rows are"
    return (f"the app's code changed since {jobs} on record ran ok ({what}): {rows} kept as made, as a resume keeps "
            "every job ok on record; hydra.launcher.fresh=true runs every job again")


def _some(items: list[str], shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _listed(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _installed() -> tuple[str, ...]:
    """Where installed code lives: the standard library, site-packages (a virtual environment's
    inside the app's folder among them), the user's site-packages."""
    import site
    import sysconfig

    roots = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)
