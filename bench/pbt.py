"""Population-based training against the best fixed learning rate, on Ray Tune's PBT example
problem (its ``pbt_function``): accuracy grows fastest at a learning rate that rises, then
falls, with the accuracy itself, so a fixed one gets stuck. Population 4, interval 4, 200
steps; the fixed rates are a grid of 8 over the same range; and Ray Tune's own
``PopulationBasedTraining`` with the same population, interval, steps, space, factors and
quantile (its function trainable checkpointing at each interval and reusing actors, as Ray's own example does). Each
seed all three ways, side by side; 2 trials at a time in each (2 workers; Ray with 2 CPUs).

    python bench/pbt.py [--seeds 5] [--steps 200] [--no-ray] [--slurm]

Needs ``pip install "ray[tune]"`` for Ray's column. ``--slurm`` adds sweeper's PBT on the tests'
one-node Slurm (tests/slurm_cluster.py: as root, with Debian's slurm-wlm and munge), each
segment a task of its own. Prints, per method, the median over seeds of the best member's final
accuracy, its ratio to the best fixed rate's, the wall time per member-step and, for sweeper's
populations, per segment (a process, or a Slurm task, each; 2 at a time). The problem's noise
is the same for every method: each step's draws are seeded by the seed and the step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sweeper  # noqa: E402

STEPS = 200


def climb(params):
    """Ray Tune's ``pbt_function``: one step per epoch, its state in the trial's checkpoint."""
    trial = sweeper.current_trial()
    path = os.path.join(trial.checkpoint, "state.json") if trial is not None else None
    state = {"step": 0, "acc": 0.0, "rng": None}
    if path and os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    lr, acc, seed = params["lr"], state["acc"], params.get("seed", 0)
    steps = params.get("steps", STEPS)
    while state["step"] < steps:
        acc = _step(lr, acc, seed, state["step"])
        state["step"] += 1
        state["acc"] = acc
        if path:
            with open(path + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(path + ".tmp", path)
        sweeper.report(mean_accuracy=acc)
    return {"mean_accuracy": acc}


def _step(lr: float, acc: float, seed: int, step: int) -> float:
    """One step of Ray Tune's ``pbt_function``: the accuracy after it."""
    import random

    import numpy as np

    rng, nrng = random.Random(seed * 100003 + step), np.random.default_rng(seed * 100003 + step)
    midpoint = 100
    optimal = 0.01 * acc / midpoint if acc < midpoint else 0.01 - 0.01 * (acc - midpoint) / midpoint
    optimal = min(0.01, max(0.001, optimal))
    q_err = max(lr, optimal) / min(lr, optimal)
    if q_err < 3:
        acc += (1.0 / q_err) * rng.random()
    elif lr > optimal:
        acc -= (q_err - 3) * rng.random()
    return max(0.0, acc + 2 * float(nrng.normal()))


def ray_pbt(seed: int, steps: int, out: str) -> tuple[float, float]:
    """Ray Tune's PopulationBasedTraining on the same problem: the best member's final accuracy, wall seconds."""
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    def trainable(config: dict) -> None:
        state = {"step": 0, "acc": 0.0}
        checkpoint = tune.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
                state = json.load(f)
        while state["step"] < steps:
            state["acc"] = _step(config["lr"], state["acc"], seed, state["step"])
            state["step"] += 1
            if state["step"] % 4 == 0:
                with tempfile.TemporaryDirectory() as d:
                    with open(os.path.join(d, "state.json"), "w") as f:
                        json.dump(state, f)
                    tune.report({"mean_accuracy": state["acc"]}, checkpoint=tune.Checkpoint.from_directory(d))
            else:
                tune.report({"mean_accuracy": state["acc"]})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        t0 = time.monotonic()
        pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=4,
                                      hyperparam_mutations={"lr": tune.uniform(0.0001, 0.02)})
        tuner = tune.Tuner(trainable, param_space={"lr": tune.uniform(0.0001, 0.02)},
                           tune_config=tune.TuneConfig(scheduler=pbt, metric="mean_accuracy", mode="max",
                                                       num_samples=4, reuse_actors=True),
                           run_config=tune.RunConfig(stop={"training_iteration": steps}, verbose=0,
                                                     storage_path=out, name=f"ray_{seed}"))
        results = tuner.fit()
        best = max(float(r.metrics["mean_accuracy"]) for r in results if r.metrics)
        return best, time.monotonic() - t0
    finally:
        ray.shutdown()


def sweeper_pbt(seed: int, steps: int, out: str, backend: str) -> tuple[float, float, int]:
    """sweeper's population on ``backend``: the best member's final accuracy, wall seconds, segments."""
    t0 = time.monotonic()
    df = sweeper.sweep(climb, {"lr": sweeper.uniform(0.0001, 0.02), "seed": seed, "steps": steps},
                       search="pbt", metric="mean_accuracy", mode="max", out=out, name=f"pbt_{backend}", seed=seed,
                       workers=2, progress=False, pbt={"population": 4, "interval": 4}, backend=backend)
    return float(df["mean_accuracy"].max()), time.monotonic() - t0, int(df["segments"].fillna(1).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--no-ray", action="store_true", help="leave Ray Tune's column out")
    parser.add_argument("--slurm", action="store_true", help="sweeper's population on the tests' one-node Slurm too")
    args = parser.parse_args()
    with contextlib.ExitStack() as cluster:
        if args.slurm:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
            import slurm_cluster

            cluster.enter_context(slurm_cluster.one_node(cluster.enter_context(tempfile.TemporaryDirectory())))
        rows, segments = measured(args)
    table(args, rows, segments)


def measured(args: argparse.Namespace) -> tuple[list[tuple], dict[str, list[tuple[float, int]]]]:
    """Each seed each way: the rows, and sweeper's populations' (wall, segments) by backend."""
    rows, segments = [], {"local": [], "slurm": []}
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as out:
            pbt_best, pbt_wall, count = sweeper_pbt(seed, args.steps, out, "local")
            segments["local"].append((pbt_wall, count))
            slurm_best, slurm_wall = None, None
            if args.slurm:
                slurm_best, slurm_wall, count = sweeper_pbt(seed, args.steps, out, "slurm")
                segments["slurm"].append((slurm_wall, count))
            t0 = time.monotonic()
            grid = [0.0001 + i * (0.02 - 0.0001) / 7 for i in range(8)]
            fixed = sweeper.sweep(climb, {"lr": grid, "seed": [seed], "steps": [args.steps]}, metric="mean_accuracy", mode="max",
                                  out=out, name="fixed", seed=seed, workers=2, progress=False)
            fixed_wall = time.monotonic() - t0
            fixed_best = float(fixed["mean_accuracy"].max())
            ray_best, ray_wall = ray_pbt(seed, args.steps, out) if not args.no_ray else (None, None)
        rows.append((seed, pbt_best, fixed_best, pbt_wall, fixed_wall, ray_best, ray_wall, slurm_best, slurm_wall))
        print(f"seed {seed}: pbt {pbt_best:.1f} ({pbt_wall:.1f} s), best fixed lr {fixed_best:.1f} "
              f"({fixed_wall:.1f} s)" + (f", ray tune pbt {ray_best:.1f} ({ray_wall:.1f} s)" if ray_best is not None
                                         else "")
              + (f", pbt on slurm {slurm_best:.1f} ({slurm_wall:.1f} s)" if slurm_best is not None else ""), flush=True)
    return rows, segments


def table(args: argparse.Namespace, rows: list[tuple], segments: dict[str, list[tuple[float, int]]]) -> None:
    med = statistics.median
    fixed_med = med(r[2] for r in rows)
    steps = 4 * args.steps
    print()
    print(f"bench/pbt.py: {args.seeds} seeds, {args.steps} steps, population 4, interval 4, 2 at a time")
    print()
    print("| method | median final accuracy (each seed) | vs best fixed lr | wall per member-step |")
    print("| --- | --- | --- | --- |")
    methods = [("sweeper `search=\"pbt\"`", 1, 3, steps), ("best of 8 fixed lrs (a grid)", 2, 4, 8 * args.steps)]
    if not args.no_ray:
        methods.append(("Ray Tune `PopulationBasedTraining`", 5, 6, steps))
    if args.slurm:
        methods.append(("sweeper `search=\"pbt\"` on Slurm (one node)", 7, 8, steps))
    for label, at, wall, count in methods:
        values = [r[at] for r in rows]
        print(f"| {label} | {med(values):.1f} ({' '.join(f'{v:.1f}' for v in values)}) | "
              f"{med(values) / fixed_med:.2f}x | {1000 * med(r[wall] for r in rows) / count:.1f} ms |")
    print("\n| sweeper's population | segments (median) | wall per segment, 2 at a time |\n| --- | --- | --- |")
    for backend, runs in segments.items():
        if runs:
            print(f"| {backend} | {med(c for _, c in runs):.0f} | {1000 * med(w / c for w, c in runs):.0f} ms |")
    if not args.no_ray:
        print(f"\nsweeper's pbt against Ray Tune's: {med(r[1] for r in rows) / med(r[5] for r in rows):.2f}x the "
              f"median accuracy, {med(r[3] for r in rows) / med(r[6] for r in rows):.2f}x the wall time")


if __name__ == "__main__":
    main()
