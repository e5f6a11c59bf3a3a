"""The workloads: one module each, runnable with torchrun or through :func:`nvtutorial.launch.run`.

A module here is a workload when it defines ``Params`` (a frozen dataclass) and ``run``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import ModuleType


class UnknownWorkload(LookupError):
    pass


def names() -> list[str]:
    """Every workload's name, sorted."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            found.append(info.name)
    return sorted(found)


def load(name: str) -> ModuleType:
    """The workload module ``name``; an unknown name raises :class:`UnknownWorkload` listing them."""
    available = names()
    if name not in available:
        raise UnknownWorkload(f"unknown workload {name!r}; available: {', '.join(available)}")
    module = importlib.import_module(f"{__name__}.{name}")
    if not (dataclasses.is_dataclass(getattr(module, "Params", None)) and callable(getattr(module, "run", None))):
        raise UnknownWorkload(f"{module.__name__} is not a workload: it needs a Params dataclass and run()")
    return module


def summary(name: str) -> str:
    """The first line of a workload's docstring."""
    doc = (load(name).__doc__ or "").strip()
    first = doc.splitlines()[0] if doc else name
    return first.split(":", 1)[1].strip() if first.startswith(f"{name}:") else first
