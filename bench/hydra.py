"""A Hydra multirun with sweeper as its launcher, against Hydra's basic launcher, side by side.

    python bench/hydra.py                  # about 4 minutes on 2 cores
    python bench/hydra.py --jobs 100 --repeats 3

Two apps, each run as a user runs it (``python app.py -m ...``, wall time of the whole command):

* the tests' small app (tests/hydra_app: a job does nothing but write two small files) with
  ``--jobs`` jobs: Hydra's own cost per job, and sweeper's (a fresh process per job, the
  ledger, the table); and the same command again, where sweeper's resume runs nothing;
* the Keras example (experiments/hydra_digits: 4 MLPs on the digits, 8 epochs each).

The basic launcher runs the jobs one after another in Hydra's own process; sweeper runs
``workers`` at a time (2 here), each in a fresh process. Medians of ``--repeats`` runs, and
sweeper's time over the basic launcher's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = os.path.join(ROOT, "tests", "hydra_app", "app.py")
KERAS = os.path.join(ROOT, "experiments", "hydra_digits", "train.py")


def timed(args: list[str], cwd: str) -> float:
    began = time.monotonic()
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return took


def basic_keras(where: str) -> str:
    """The Keras example as the basic launcher takes it: its config without sweeper's settings."""
    folder = os.path.join(where, "hydra_digits")
    shutil.copytree(os.path.dirname(KERAS), folder)
    config = os.path.join(folder, "conf", "config.yaml")
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.split("  launcher:")[0])
    return os.path.join(folder, "train.py")


def cases(jobs: int, where: str) -> list[tuple[str, list[str], bool]]:
    """(what, the command's arguments after the script, run it twice: the second a resume)."""
    small = [SMALL, "-m", f"units=range(1,{jobs + 1})"]
    return [
        (f"small app, {jobs} jobs, basic launcher", [*small, "hydra/launcher=basic"], False),
        (f"small app, {jobs} jobs, sweeper (workers 2)", [*small, "hydra/launcher=sweeper",
                                                          "hydra.launcher.workers=2", "hydra.launcher.progress=false"], True),
        ("Keras digits, 4 jobs, basic launcher", [basic_keras(where), "-m", "hydra/launcher=basic"], False),
        ("Keras digits, 4 jobs, sweeper (workers 2)", [KERAS, "-m", "hydra.launcher.progress=false"], True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for i in range(4):
            where = tempfile.mkdtemp(prefix="bench-hydra-")
            what, command, resume = cases(args.jobs, where)[i]
            try:
                full = [*command, f"hydra.sweep.dir={where}/sweep"]
                rows.setdefault(what, []).append(timed(full, where))
                if resume:
                    rows.setdefault(f"{what}, again (resume: nothing to run)", []).append(timed(full, where))
            finally:
                shutil.rmtree(where, ignore_errors=True)
    print(f"\n{'case':<72} {'median s':>9} {'vs basic':>9}   runs")
    basics = {what.split(", ")[0] + ", " + what.split(", ")[1]: statistics.median(times)
              for what, times in rows.items() if what.endswith("basic launcher")}
    for what, times in rows.items():
        median = statistics.median(times)
        base = basics.get(what.split(", ")[0] + ", " + what.split(", ")[1])
        ratio = f"{median / base:.2f}x" if base else ""
        print(f"{what:<72} {median:>9.1f} {ratio:>9}   {', '.join(f'{t:.1f}' for t in times)}")
    print(f"\n{os.cpu_count()} CPUs; Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
