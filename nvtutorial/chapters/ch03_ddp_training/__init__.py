"""Chapter 03 (notebook ``03_ddp_training``): a complete DDP training script, read and run; validation across ranks;
checkpoints; scaling.

Its files, by role: rank side: ``workload``, ``lessons``; kernel side: ``plots``, ``report``; exercises:
``exercises_accumulation``, ``exercises_validation``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch03_ddp_training as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = ("exercises_accumulation", "exercises_validation", "plots", "report", "workload", "lessons")


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
