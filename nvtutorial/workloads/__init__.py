"""The workloads: one module each, runnable with torchrun or through :func:`nvtutorial.launch.run`.

A module is a workload when it defines ``Params`` (a frozen dataclass) and ``run``. The course's tools live here
(``selftest``); each chapter's workloads live in its folder (``nvtutorial/chapters/chNN_topic/workload*.py``) and
import their name from their schema (``NAME = "ladder"`` in ``schema.py``). :func:`module` gives the module
``python -m`` (and ``torchrun -m``) runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import PurePath
from types import ModuleType
from typing import Any


class UnknownWorkload(LookupError):
    pass


def modules() -> dict[str, str]:
    """Every workload's name and the module that runs it, sorted by name."""
    from nvtutorial.chapters import named

    found = {
        info.name: f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")
    }
    found.update(named("workload"))
    return dict(sorted(found.items()))


def names() -> list[str]:
    """Every workload's name, sorted."""
    return list(modules())


def module(name: str) -> str:
    """The module that runs workload ``name`` (``python -m MODULE``); an unknown name raises
    :class:`UnknownWorkload`."""
    available = modules()
    if name not in available:
        raise UnknownWorkload(f"unknown workload {name!r}; available: {', '.join(available)}")
    return available[name]


def load(name: str) -> ModuleType:
    """The workload module ``name``; an unknown name raises :class:`UnknownWorkload` listing them."""
    module_name = module(name)
    module_ = importlib.import_module(module_name)
    return _checked(module_)


def _checked(module: ModuleType) -> ModuleType:
    if not (dataclasses.is_dataclass(getattr(module, "Params", None)) and callable(getattr(module, "run", None))):
        raise UnknownWorkload(f"{module.__name__} is not a workload: it needs a Params dataclass and run()")
    return module


def summary(name: str) -> str:
    """The first line of a workload's docstring."""
    doc = (load(name).__doc__ or "").strip()
    first = doc.splitlines()[0] if doc else name
    return first.split(":", 1)[1].strip() if first.startswith(f"{name}:") else first


def result_type(workload: str, params: Mapping[str, Any] | None = None) -> type:
    """The frozen dataclass one rank of a run of ``workload`` returns: its schema's ``Rank`` (or
    ``rank_type(params)``). ``workload`` is a workload's name or, for a run of a lesson script, the script's path
    (its schema is named after the script). A workload with no schema raises ``LookupError``."""
    from nvtutorial.chapters import named

    name = PurePath(workload).stem if workload.endswith(".py") else workload
    schemas = named("schema")
    if name in schemas:
        owner = importlib.import_module(schemas[name])
    else:  # the course's own tools (nvtutorial/workloads/*.py) declare their Rank beside their run()
        try:
            owner = importlib.import_module(module(name))
        except UnknownWorkload:
            raise LookupError(f"no schema declares what {workload!r} returns") from None
    pick = getattr(owner, "rank_type", None)
    found = pick(dict(params or {})) if callable(pick) else getattr(owner, "Rank", None)
    if not isinstance(found, type):
        raise LookupError(f"{owner.__name__} declares no Rank (the dataclass one rank of {name!r} returns)")
    return found
