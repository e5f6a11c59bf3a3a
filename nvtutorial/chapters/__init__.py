"""The course's chapters, one folder each (``chNN_topic``): a notebook's lesson scripts, workload, result schema,
report, plots, lab and exercises together. A notebook imports its chapter:
``from nvtutorial.chapters import ch10_cost_model as ch``.

A chapter file's role is in its name (``tests/test_layout.py`` holds each role to its rules): ``lessons/`` and
``workload*.py`` run on the ranks; ``schema*.py`` and ``model*.py`` are torch-free and imported by both sides;
``report*.py``, ``problems*.py``, ``plots*.py`` and ``lab*.py`` run in the notebook kernel; ``exercises*.py`` hold a
code exercise's checker. A workload or an exercise declares its name (``NAME = "ladder"``): :func:`named` finds it
without importing anything, so ``nvtutorial list`` and the launcher's checks stay fast.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

HERE = Path(__file__).resolve().parent


@functools.cache
def named(kind: str) -> dict[str, str]:
    """``NAME -> module`` of every chapter file ``chNN_*/<kind>*.py`` that declares ``NAME = "..."``."""
    found: dict[str, str] = {}
    for path in sorted(HERE.glob(f"ch[0-9][0-9]_*/{kind}*.py")):
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "NAME"
                and isinstance(node.value, ast.Constant)
            ):
                found[str(node.value.value)] = f"{__name__}.{path.parent.name}.{path.stem}"
    return found
