"""The Ray backend's own settings (``backend="ray"``): its options group, registered with it
(:mod:`sweeper.backends.registry`), so ``sweep(..., address="auto")``, a grid file's options and
``--address`` reach it and no other backend takes them. Light: the command line builds its
flags from it without importing Ray."""

from __future__ import annotations

from dataclasses import dataclass, field

from sweeper.errors import SweepError
from sweeper.model.options import flag


@dataclass(frozen=True)
class RayOptions:
    """How trials run on a Ray cluster."""

    #: "auto", "HOST:6379"; None starts a local Ray
    address: str | None = field(default=None, metadata=flag(
        "with `--backend ray`: the cluster (`auto`, or `HOST:6379`); none starts a local Ray (see [Ray](ray.md))"))
    #: CPUs each trial asks Ray for
    cpus_per_trial: float = field(default=1.0, metadata=flag(
        "with `--backend ray`: CPUs each trial asks Ray for (default `{default:g}`)", type=float, metavar="N"))

    def checked(self) -> RayOptions:
        if self.address is not None and (not isinstance(self.address, str) or not self.address):
            raise SweepError(f"address must be a Ray cluster's address (auto, or HOST:6379), got {self.address!r}")
        if (not isinstance(self.cpus_per_trial, (int, float)) or isinstance(self.cpus_per_trial, bool)
                or not self.cpus_per_trial > 0):
            raise SweepError(f"cpus_per_trial must be a positive number, got {self.cpus_per_trial!r}")
        return self
