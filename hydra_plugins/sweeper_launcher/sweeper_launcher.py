"""The launcher Hydra finds (``hydra/launcher=sweeper``): its config, registered with Hydra's
config store, and a thin class over :mod:`sweeper.front.hydra.launcher`.

Its settings (``hydra.launcher.workers=2``, ``hydra.launcher.gpus=[0,1]``, ...) are sweeper's
options by their names and with their defaults (:mod:`sweeper.front.hydra.settings`).
"""

from __future__ import annotations

from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher

from sweeper.front.hydra.settings import defaults

TARGET = "hydra_plugins.sweeper_launcher.sweeper_launcher.SweeperLauncher"

#: hydra.launcher's node: ``_target_`` and every setting, each sweeper's default (a plain node,
#: no dataclass: Hydra re-imports plugins in each job's process, and the config that job
#: returns must still pickle; sweeper checks each setting's type itself)
NODE = {"_target_": TARGET, **defaults()}

ConfigStore.instance().store(group="hydra/launcher", name="sweeper", node=NODE, provider="sweeper")


class SweeperLauncher(Launcher):
    """Each job of a multirun a sweeper trial: a fresh process, its GPU, every end a status."""

    def __init__(self, **settings: Any) -> None:
        from omegaconf import OmegaConf

        self.settings = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                         for k, v in settings.items()}
        self.launching: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from sweeper.front.hydra.launcher import Launching

        self.launching = Launching(self.settings, config, hydra_context, task_function)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        return self.launching.launch(job_overrides, initial_job_idx)
