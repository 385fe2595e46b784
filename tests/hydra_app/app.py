"""A small Hydra app for tests/front/test_hydra.py: its task function says where and how it ran.

Each job appends a line to ``runs.txt`` in the sweep folder (its overrides and pid), writes
what it saw into its job folder (``seen.json``) and returns by ``ret``: a number, a dict, or
None. ``APP_FAIL``/``APP_KILL``/``APP_OOM``/``APP_HANG`` (an lr) make that job raise, SIGKILL its
own process, run out of GPU memory, or wait for a signal.
"""

import json
import logging
import os
import signal

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig):
    runtime = HydraConfig.get().runtime
    log.info("training with lr=%s units=%s", cfg.lr, cfg.units)
    with open(os.path.join(HydraConfig.get().sweep.dir, "runs.txt"), "a") as f:
        f.write(f"{HydraConfig.get().job.num} lr={cfg.lr} units={cfg.units} pid={os.getpid()}\n")
    seen = {"pid": os.getpid(), "ppid": os.getppid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "num": HydraConfig.get().job.num, "output_dir": runtime.output_dir, "cwd": os.getcwd()}
    with open(os.path.join(runtime.output_dir, "seen.json"), "w") as f:
        json.dump(seen, f)
    if str(cfg.lr) == os.environ.get("APP_FAIL"):
        raise ValueError(f"lr={cfg.lr} diverged")
    if str(cfg.lr) == os.environ.get("APP_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    if str(cfg.lr) == os.environ.get("APP_OOM"):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    if str(cfg.lr) == os.environ.get("APP_HANG"):
        signal.pause()  # until the sweep's timeout or Ctrl-C ends it
    score = float(cfg.lr) * 10 + cfg.units / 100
    if cfg.ret == "dict":
        return {"score": score, "units_seen": cfg.units}
    if cfg.ret == "none":
        return None
    return score


if __name__ == "__main__":
    main()
