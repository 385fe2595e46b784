"""What a sweep and its trials ran on: recorded, compared, shown.

A sweep's environment (:func:`of_sweep`, in the parent, cheap and without importing any
framework): Python, the host, the installed versions of the packages that decide numbers
(read from their metadata, not imported), the identity of the code (a hash of the grid
file or ``train``'s file, of each script a command names, and the git commit with a
dirty flag where the file lies in a repository), the start method, whether determinism
was asked for, and the GPUs with their driver, as NVML tells them. The ledger keeps it
(``environment``); a resumed sweep whose packages or commit changed says so
(:func:`changes`).

A trial's environment (:func:`of_trial`, in the trial process, after ``train``): the
frameworks it imported with their versions, the CUDA and cuDNN they were built with, the
host, and what determinism it switched on. Kept in the ledger with its row.

:func:`differences` compares two of them, in words: what ``status`` and ``replay`` say.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from typing import Any, Iterable, Mapping

#: Packages whose versions can change a trial's numbers (installed ones are recorded).
PACKAGES = ("numpy", "tensorflow", "tensorflow-cpu", "keras", "torch", "jax", "jaxlib", "scikit-learn", "scipy",
            "pandas", "optuna", "sweeper")
#: Frameworks a trial may import, by module: what its own record lists.
FRAMEWORKS = ("tensorflow", "keras", "torch", "jax", "jaxlib", "numpy", "sklearn")
#: Keys of a sweep's or trial's environment compared between two runs, in the order said.
COMPARED = ("code", "scripts", "git", "python", "packages", "frameworks", "cuda", "cudnn", "gpu", "driver",
            "host", "cwd", "start_method", "deterministic")


def digest(path: str) -> str | None:
    """The first 16 hex digits of a file's SHA-256; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return None


def git_state(path: str) -> dict[str, Any] | None:
    """The commit of the repository holding ``path`` and whether its tracked files have
    changes not committed; None outside a repository (or without git)."""
    folder = os.path.dirname(os.path.abspath(path))

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit[:12], "dirty": bool(dirty)}


def installed(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    """The installed version of each package that is installed (from its metadata)."""
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def scripts_of(what: str) -> dict[str, str]:
    """The files a command's template names (``what``, as :func:`sweeper.model.target.describe`
    words it: ``command 'python train.py --lr={lr}'``: train.py), each with its hash: a
    command's code lives there, not in the grid."""
    import ast

    if not what.startswith("command '") and not what.startswith('command "'):
        return {}
    try:
        template = ast.literal_eval(what[len("command "):].split(" through /bin/sh")[0])
    except (ValueError, SyntaxError):
        return {}
    if not isinstance(template, str):
        return {}
    out = {}
    for word in template.split():
        if "{" in word or not word.endswith((".py", ".sh", ".R", ".jl")):
            continue
        path = os.path.abspath(word)
        sha = digest(path)
        if sha is not None:
            out[path] = sha
    return out


def of_sweep(source: str | None, start_method: str, deterministic: bool, what: str = "") -> dict[str, Any]:
    """The parent's record of what this run of the sweep runs on (see the module docstring)."""
    from sweeper.system import gpus

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "cwd": os.getcwd(),  # where relative paths (a command's script, a data file) were read
        "platform": platform.platform(),
        "packages": installed(),
        "start_method": start_method,
        "deterministic": bool(deterministic),
    }
    if source:
        env["code"] = {"path": os.path.abspath(source), "sha256": digest(source)}
        git = git_state(source)
        if git is not None:
            env["git"] = git
    scripts = scripts_of(what)
    if scripts:
        env["scripts"] = scripts
    cards = gpus.inventory()
    if cards:
        env["gpus"] = {c.uuid: c.name for c in cards}
        env["driver"] = gpus.driver_version()
    return env


def of_trial(applied: Iterable[str] = ()) -> dict[str, Any]:
    """A trial process's own record, after ``train``: the frameworks it imported (with
    their versions and the CUDA and cuDNN they were built with), the host, and the
    frameworks it made deterministic (``applied``)."""
    env: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version()}
    frameworks = {}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module is not None else None
        if isinstance(version, str):
            frameworks[name] = version
    env["frameworks"] = frameworks
    cuda, cudnn = _built_with()
    if cuda:
        env["cuda"] = cuda
    if cudnn:
        env["cudnn"] = cudnn
    env["deterministic"] = sorted(applied)
    return env


def _built_with() -> tuple[str, str]:
    """The CUDA and cuDNN the imported frameworks were built with ("" where none says)."""
    cuda = cudnn = ""
    tf = sys.modules.get("tensorflow")
    try:
        if tf is not None:
            info = tf.sysconfig.get_build_info()
            cuda, cudnn = str(info.get("cuda_version", "") or ""), str(info.get("cudnn_version", "") or "")
    except Exception:  # noqa: BLE001 - a build that cannot say
        pass
    torch = sys.modules.get("torch")
    try:
        if torch is not None and not cuda:
            cuda = str(torch.version.cuda or "")
            version = torch.backends.cudnn.version() if cuda else None
            cudnn = str(version or "")
    except Exception:  # noqa: BLE001
        pass
    return cuda, cudnn


# -- comparing -------------------------------------------------------------------------------


def flat(sweep: Mapping[str, Any], trial: Mapping[str, Any] | None = None,
         gpu_uuid: str = "") -> dict[str, Any]:
    """One run's environment as comparable items: the sweep's, the trial's over it, the
    trial's card by its model."""
    out: dict[str, Any] = {}
    code = sweep.get("code") or {}
    if code:
        out["code"] = f"{os.path.basename(code.get('path', ''))} sha256 {code.get('sha256')}"
    for name, sha in (sweep.get("scripts") or {}).items():
        out[f"scripts:{os.path.basename(name)}"] = f"sha256 {sha}"
    git = sweep.get("git")
    if git:
        out["git"] = f"commit {git['commit']}{' with uncommitted changes' if git.get('dirty') else ''}"
    for key in ("python", "host", "cwd", "start_method", "driver"):
        if sweep.get(key) is not None:
            out[key] = sweep[key]
    for name, version in (sweep.get("packages") or {}).items():
        out[f"packages:{name}"] = version
    out["deterministic"] = "on" if sweep.get("deterministic") else "off"
    if trial:
        for key in ("host", "python", "cuda", "cudnn"):
            if trial.get(key):
                out[key] = trial[key]
        for name, version in (trial.get("frameworks") or {}).items():
            out[f"frameworks:{name}"] = version
    if gpu_uuid:
        out["gpu"] = (sweep.get("gpus") or {}).get(gpu_uuid, gpu_uuid)
    return out


def differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What differs between two flattened environments (:func:`flat`), one phrase each,
    in :data:`COMPARED`'s order: ``"code: grid.py sha256 1a2b... -> 3c4d..."``."""
    keys = sorted(set(before) | set(after), key=lambda k: (_rank(k), k))
    out = []
    for key in keys:
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        shown = key.replace("packages:", "").replace("frameworks:", "").replace("scripts:", "")
        if key == "code" and old and new and old.split()[0] == new.split()[0]:
            out.append(f"code: {old.split()[0]} was edited (sha256 {old.split()[-1]} -> {new.split()[-1]})")
        else:
            out.append(f"{shown}: {_said(old)} -> {_said(new)}")
    return out


def _rank(key: str) -> int:
    head = key.split(":")[0]
    return COMPARED.index(head) if head in COMPARED else len(COMPARED)


def _said(value: Any) -> str:
    return "none" if value is None else str(value)


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a resumed sweep says in one line each: installed packages, the commit, the
    Python and the command's scripts that changed since the folder's last run (an edited
    grid file has its own line)."""
    old, new = flat(before), flat(after)
    said = []
    packages = [d for d in differences({k: v for k, v in old.items() if k.startswith("packages:")},
                                       {k: v for k, v in new.items() if k.startswith("packages:")})]
    if packages:
        said.append("package versions changed since the last run: " + "; ".join(packages))
    for key in ("git", "python"):
        if old.get(key) != new.get(key) and old.get(key) is not None:
            said.append(f"{key} changed since the last run: {old.get(key)} -> {_said(new.get(key))}")
    scripts = differences({k: v for k, v in old.items() if k.startswith("scripts:")},
                          {k: v for k, v in new.items() if k.startswith("scripts:")})
    if scripts:
        said.append("the command's scripts changed since the last run: " + "; ".join(scripts))
    return said


def summary(sweep: Mapping[str, Any], trials: Iterable[Mapping[str, Any]],
            runs: Mapping[str, Mapping[str, Any]] | None = None, last: str = "") -> list[str]:
    """What ``status`` shows: the sweep's last run's environment in a few lines, what its
    trials imported, the trials whose own environment differs from the most common one, and
    the rows made by earlier runs (``runs``: their records by id; ``last``: the last run's
    id) with what differed then."""
    if not sweep:
        return ["environment: not recorded (the sweep ran under an earlier sweeper)"]
    gpus = sweep.get("gpus") or {}
    out = [f"environment: Python {sweep.get('python')} on {sweep.get('host')}, start method "
           f"{sweep.get('start_method')}, determinism {'on' if sweep.get('deterministic') else 'off'}"
           + (f", {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({', '.join(sorted(set(gpus.values())))}; "
              f"driver {sweep.get('driver') or '?'})" if gpus else "")]
    code, git = sweep.get("code"), sweep.get("git")
    if code:
        now = digest(code.get("path", ""))
        out.append(f"code: {code.get('path')} sha256 {code.get('sha256')}"
                   + (f", git commit {git['commit']}{' with uncommitted changes' if git.get('dirty') else ''}"
                      if git else "")
                   + (f" (edited since: sha256 now {now})" if now and now != code.get("sha256") else ""))
    for path, sha in (sweep.get("scripts") or {}).items():
        out.append(f"script: {path} sha256 {sha}")
    envs = list(trials)
    seen: dict[str, int] = {}
    for env in envs:
        own = {k: v for k, v in env.items() if k != "run"}
        if own:
            key = json.dumps(own, sort_keys=True)
            seen[key] = seen.get(key, 0) + 1
    if seen:
        common, count = max(seen.items(), key=lambda kv: kv[1])
        usual = json.loads(common)
        frameworks = ", ".join(f"{k} {v}" for k, v in (usual.get("frameworks") or {}).items())
        built = ", ".join(f"{k.upper() if k == 'cuda' else 'cuDNN'} {usual[k]}" for k in ("cuda", "cudnn")
                          if usual.get(k))
        out.append(f"trials ran with: {frameworks or 'no framework imported'}"
                   + (f" (built with {built})" if built else "")
                   + (f"; deterministic: {', '.join(usual['deterministic'])}" if usual.get("deterministic") else ""))
        others = sum(seen.values()) - count
        if others:
            differ = set()
            for key in seen:
                if key != common:
                    differ.update(differences(flat({}, usual), flat({}, json.loads(key))))
            out.append(f"{others} trial{'s' if others != 1 else ''} ran with something else: {'; '.join(sorted(differ))}")
    by_run: dict[str, int] = {}
    for env in envs:
        by_run[env.get("run", "")] = by_run.get(env.get("run", ""), 0) + 1
    for rid, n in sorted(by_run.items()):
        if rid == last:
            continue
        rows = f"{n} trial{'s' if n != 1 else ''}"
        record = (runs or {}).get(rid)
        if not rid or not record:
            out.append(f"{rows} predate the record of what each ran on")
            continue
        then = differences(flat(record.get("environment") or {}), flat(sweep))
        out.append(f"{rows} ran in an earlier run of the sweep: "
                   + ("; ".join(then) if then else "the same environment as the last run"))
    return out
