"""Hydra's basic sweeper, recording what the launcher returned (tests/front/test_hydra.py): each
batch's JobReturns as JSON lines in ``$RECORD``. ``hydra/sweeper=recording``."""

import json
import os

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

ConfigStore.instance().store(
    group="hydra/sweeper", name="recording", provider="tests",
    node={"_target_": "hydra_plugins.recording_sweeper.recording_sweeper.RecordingSweeper",
          "max_batch_size": None, "params": None})


class RecordingSweeper(BasicSweeper):
    def setup(self, *, hydra_context, task_function, config):
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        launch = self.launcher.launch

        def recording(job_overrides, initial_job_idx):
            returns = launch(job_overrides, initial_job_idx)
            with open(os.environ["RECORD"], "a") as f:
                for r in returns:
                    value = r._return_value
                    f.write(json.dumps({
                        "first": initial_job_idx, "overrides": list(r.overrides), "status": r.status.name,
                        "value": value if not isinstance(value, Exception) else f"{type(value).__name__}: {value}",
                        "working_dir": r.working_dir, "task_name": r.task_name,
                        "cfg": OmegaConf.to_container(r.cfg) if r.cfg is not None else None,
                        "output_dir": r.hydra_cfg.hydra.runtime.output_dir if r.hydra_cfg is not None else None,
                    }) + "\n")
            return returns

        self.launcher.launch = recording
