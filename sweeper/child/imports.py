"""Caps, seeds and determinism, applied the moment a framework is imported in a trial process.

:func:`install` puts a finder on ``sys.meta_path`` before the user's module is imported,
so TensorFlow's GPU memory cap (:mod:`sweeper.system.capping`) precedes the module's own code,
whatever it touches at its top; PyTorch's, which initialises CUDA, and the seeds for
``random``, NumPy, TensorFlow, Keras and PyTorch follow with the trial (a standby imports
before it has one, and must hold no GPU memory while it waits). Under ``per_gpu="auto"``
every cap follows with the trial: it is the trial's own. In a sweep run with
``deterministic=True`` (``SWEEPER_DETERMINISTIC``), each framework's deterministic mode
follows with the seed; what was switched on is :attr:`OnImport.deterministic`, which the
trial's record keeps (JAX reads its XLA flag from the environment by itself).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import random
import sys
from typing import Any, Callable

from sweeper.child import capping
from sweeper.model import contract


def _cap_tensorflow(mod: Any) -> None:
    capping.apply_tensorflow(mod)


def _cap_torch(mod: Any) -> None:
    capping.apply_torch(mod)


def _seed_numpy(mod: Any, seed: int) -> None:
    mod.random.seed(seed)


def _seed_tensorflow(mod: Any, seed: int) -> None:
    mod.random.set_seed(seed)


def _seed_keras(mod: Any, seed: int) -> None:
    mod.utils.set_random_seed(seed)


def _seed_torch(mod: Any, seed: int) -> None:
    mod.manual_seed(seed)


#: Caps come first: they must precede anything that touches the GPU.
_CAPS: dict[str, Callable[[Any], None]] = {"tensorflow": _cap_tensorflow, "torch": _cap_torch}
#: Caps that would put a CUDA context on the card (PyTorch's initialises CUDA): in a
#: standby, applied when its trial begins, not at import, so a standby waiting beside a
#: running trial holds no GPU memory (its context would come on top of the trial's cap).
_CAPS_AT_TRIAL = {"torch"}


def _at_trial() -> set[str]:
    """The caps applied when the trial begins: PyTorch's, and every one under
    ``per_gpu="auto"``, where the cap is the trial's own (it comes in the trial's env)."""
    return set(_CAPS) if os.environ.get(contract.MEMORY_AUTO) == "1" else _CAPS_AT_TRIAL
_SEEDS: dict[str, Callable[[Any, int], None]] = {
    "numpy": _seed_numpy,
    "tensorflow": _seed_tensorflow,
    "keras": _seed_keras,
    "torch": _seed_torch,
    "jax": lambda mod, seed: None,  # seeded by its explicit keys; hooked for its determinism record
}


def _determinism_tensorflow(mod: Any) -> None:
    mod.config.experimental.enable_op_determinism()


def _determinism_torch(mod: Any) -> None:
    mod.use_deterministic_algorithms(True)
    mod.backends.cudnn.benchmark = False
    mod.backends.cudnn.deterministic = True


#: Each framework's deterministic mode, switched on with the seed when the sweep asks for
#: it; None: the environment already says it (JAX's XLA flag, from contract.determinism_env).
_DETERMINISM: dict[str, Callable[[Any], None] | None] = {
    "tensorflow": _determinism_tensorflow,
    "torch": _determinism_torch,
    "jax": None,
}


class OnImport(importlib.abc.MetaPathFinder):
    """Caps and seeds each framework now if imported, else right after its import.

    Installed before the user's module is imported (so a cap precedes the module's own
    code); the seed comes later, with the trial (a standby imports before it has one).
    """

    current: "OnImport | None" = None

    def __init__(self) -> None:
        self.seed: int | None = None
        self.done: set[str] = set()
        self._busy = False
        #: the frameworks whose deterministic mode this trial switched on
        self.deterministic: set[str] = set()

    @classmethod
    def install(cls) -> "OnImport":
        if cls.current is None:
            cls.current = cls()
            sys.meta_path.insert(0, cls.current)
            cls.current.catch_up()
        return cls.current

    def set_seed(self, seed: int) -> None:
        """The trial begins: caps left for it, then seeds ``random`` and every framework
        imported so far; later ones on import."""
        self.seed = seed
        for name in sorted(_at_trial() & self.done):
            _CAPS[name](sys.modules[name])
        random.seed(seed)
        for name, seeder in _SEEDS.items():
            if name in self.done:
                seeder(sys.modules[name], seed)
                self._determinism(name, sys.modules[name])
        self.catch_up()

    def _determinism(self, name: str, module: Any) -> None:
        """The framework's deterministic mode, where the trial's sweep asked for it."""
        if name in _DETERMINISM and os.environ.get(contract.DETERMINISTIC) == "1" and name not in self.deterministic:
            switch = _DETERMINISM[name]
            if switch is not None:
                switch(module)
            self.deterministic.add(name)

    def catch_up(self) -> None:
        """Handle what got imported before the hook, or past it (e.g. by a custom loader)."""
        for name in sorted(set(_SEEDS) - self.done):
            if name in sys.modules:
                self._ready(name, sys.modules[name])

    def _ready(self, name: str, module: Any) -> None:
        self.done.add(name)
        if name in _CAPS and (self.seed is not None or name not in _at_trial()):
            _CAPS[name](module)
        if self.seed is not None:
            _SEEDS[name](module, self.seed)
            self._determinism(name, module)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _SEEDS or fullname in self.done or self._busy:
            return None
        self._busy = True  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        inner, hook = spec.loader, self

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return inner.create_module(spec)

            def exec_module(self, module: Any) -> None:
                inner.exec_module(module)
                if fullname not in hook.done:  # a probe (find_spec alone) does not count
                    hook._ready(fullname, module)

            def __getattr__(self, name: str) -> Any:  # resources, is_package, get_code...
                return getattr(inner, name)

        spec.loader = Loader()
        return spec


def install() -> OnImport:
    """The process's hook, installed once (caps whatever is imported already, now)."""
    return OnImport.install()
