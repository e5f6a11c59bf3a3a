"""The course's chapters, one folder each (``chNN_topic``): a notebook's lesson scripts, workload, result schema,
report, plots, lab and exercises together. A notebook imports its chapter:
``from nvtutorial.chapters import ch10_cost_model as ch``.

A chapter file's role is in its name (``tests/test_layout.py`` holds each role to its rules): ``lessons/`` and
``workload*.py`` run on the ranks; ``schema*.py`` and ``model*.py`` are torch-free and imported by both sides;
``report*.py``, ``problems*.py``, ``plots*.py`` and ``lab*.py`` run in the notebook kernel; ``exercises*.py`` hold a
code exercise's checker. A schema or an exercise declares its name (``NAME = "ladder"``), a workload imports its
schema's (``from ...schema import NAME as NAME``): :func:`named` finds it without importing anything, so
``nvtutorial list`` and the launcher's checks stay fast.

What a workload returns is typed: its schema (``schema*.py``, same ``NAME``) declares ``Rank``, the frozen dataclass
one rank returns (or ``rank_type(params)`` where the part run decides it); ``nvtutorial.workloads.result_type`` finds
it for a run, and ``RunResult.ranks_as`` reads every rank through it (upgrading an older layout with ``Rank.upgrade``).
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@functools.cache
def named(kind: str) -> dict[str, str]:
    """``NAME -> module`` of every chapter file ``chNN_*/<kind>*.py`` that declares ``NAME = "..."`` or imports it
    from a chapter file that does (a workload imports its schema's)."""
    found: dict[str, str] = {}
    for path in sorted(HERE.glob(f"ch[0-9][0-9]_*/{kind}*.py")):
        name = declared_name(path)
        if name is not None:
            found[name] = f"{__name__}.{path.parent.name}.{path.stem}"
    return found


def declared_name(path: Path) -> str | None:
    """The ``NAME`` a chapter file declares (a string), or imports from another chapter file; read, not imported."""
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["NAME"]:
            return str(node.value.value) if isinstance(node.value, ast.Constant) else None
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{__name__}."):
            if any(alias.name == "NAME" and alias.asname in (None, "NAME") for alias in node.names):
                return declared_name(HERE.joinpath(*(node.module or "").split(".")[2:]).with_suffix(".py"))
    return None


def files(package: str) -> tuple[str, ...]:
    """A chapter's files (modules and sub-packages), read from its folder: what its facade gives by name."""
    folder = HERE / package.rpartition(".")[2]
    found = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    found += [p.name for p in folder.iterdir() if (p / "__init__.py").exists()]
    return tuple(sorted(found))


def facade(package: str) -> tuple[tuple[str, ...], Callable[[str], Any], Callable[[], list[str]]]:
    """A chapter package's ``FILES``, ``__getattr__`` and ``__dir__`` (PEP 562): each file is imported when first
    asked for (``ch.report``), so that a rank importing a rank-side file never loads pandas or matplotlib."""
    names = files(package)

    def __getattr__(name: str) -> Any:
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}; its files are {', '.join(names)}")

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(names))

    return names, __getattr__, __dir__
