"""What the launcher sends to each job's process: the task function, and Hydra's context.

* **The task function** goes by its name where one finds it again (its module and qualified
  name, and how many ``__wrapped__`` lead from there to it: 1 under ``@hydra.main``), so the
  job's process imports the app itself; else by value, with cloudpickle, as Hydra's joblib
  and submitit launchers send every task function (a closure, a callable object: what
  Hydra's own launcher test suites launch from inside a test).
* **Hydra's context** (its config loader, callbacks, the multirun's config, its singletons)
  goes by plain pickle, each class by its name, found again in the job's process. Hydra's
  plugin scan executes its plugins' modules again in the process that runs a multirun (each
  multirun after the first in one process, once its singletons are restored), so an object
  made earlier may hold a class its module no longer has under that name; such a class is
  sent by its name all the same (:class:`ByName`), never by value.
* **OmegaConf's resolvers** (the app's own among them) go by cloudpickle, as Hydra's joblib
  launcher sends them; the jobs use those the app registers on import where none can go.
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
from typing import Any, Mapping

from sweeper.errors import SweepError
from sweeper.model.callables import name_of


def named(module: Any, qualname: str) -> Any:
    """What ``qualname`` names in ``module`` (None where a part of it is missing)."""
    found = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def by_name(module: str, qualname: str) -> Any:
    """What ``module.qualname`` is in this process (a class :class:`ByName` sent)."""
    return named(sys.modules.get(module) or importlib.import_module(module), qualname)


def found_by_name(fn: Any) -> tuple[str, str, int] | None:
    """Where ``fn`` is found again by name: its module, its qualified name there, and how many
    ``__wrapped__`` lead from that name to it (1 under ``@hydra.main``); None where no name
    leads to it (a closure, a callable object, a name that leads elsewhere)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return None
    try:
        found = by_name(module, qualname)
    except ImportError:
        return None
    for depth in range(8):
        if found is fn:
            return module, qualname, depth
        found = getattr(found, "__wrapped__", None)
    return None


def by_value(fn: Any) -> bytes:
    """``fn`` pickled by value (cloudpickle), for a job's process to call; one line where it
    cannot be."""
    label = name_of(fn)
    try:
        import cloudpickle
    except ImportError:
        raise SweepError(f"the task function {label} is not found by a name in its module (a nested function, a "
                         "callable object), so it is sent to the jobs by value, which needs cloudpickle: pip install "
                         "cloudpickle (sweeper's hydra extra has it), or define it at the top level of the app's "
                         "module, under @hydra.main") from None
    try:
        blob: bytes = cloudpickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - whatever the function holds
        raise SweepError(f"the task function {label} cannot be sent to the jobs' processes ({exc}); define it at "
                         "the top level of the app's module, under @hydra.main") from None
    return blob


class ByName(pickle.Pickler):
    """Plain pickle, each class by its name, also a class whose module now has another class
    under that name (executed again by Hydra's plugin scan): the job's process finds the one
    it has, as it would for any class."""

    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, type) or "<locals>" in obj.__qualname__:
            return NotImplemented
        module = sys.modules.get(obj.__module__)
        now = named(module, obj.__qualname__) if module is not None else None
        if now is obj or not isinstance(now, type) or now.__qualname__ != obj.__qualname__:
            return NotImplemented  # pickle's own way: by name, or its own error
        return by_name, (obj.__module__, obj.__qualname__)


def context_blob(hydra_context: Any, config: Any, state: Mapping[str, Any]) -> bytes:
    """Hydra's context, the multirun's config, its singletons and OmegaConf's resolvers, as
    one file's content (:class:`ByName`); one line where the app's config store holds what
    no process can load by name."""
    out = io.BytesIO()
    try:
        ByName(out, protocol=pickle.HIGHEST_PROTOCOL).dump(
            {"hydra_context": hydra_context, "config": config, "instances": state["instances"],
             "resolvers": resolvers(state)})
    except Exception as exc:  # noqa: BLE001 - whatever the app put in Hydra's config store
        raise SweepError(f"Hydra's context cannot be sent to the jobs' processes ({exc}); define structured "
                         "configs at the top level of a module") from None
    return out.getvalue()


def resolvers(state: Mapping[str, Any]) -> bytes | None:
    """OmegaConf's resolvers by cloudpickle; None where they cannot go (or no cloudpickle)."""
    try:
        import cloudpickle
    except ImportError:
        return None
    try:
        blob: bytes = cloudpickle.dumps(state["omegaconf_resolvers"])
    except Exception:  # noqa: BLE001 - the jobs use the resolvers the app registers on import
        return None
    return blob
