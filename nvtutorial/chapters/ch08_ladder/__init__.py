"""Chapter 08 (notebook ``08_strategy_ladder``): one transformer trained DDP, ZeRO-1, FSDP2, checkpointing, CPU
offload, tensor parallel.

Its files, by role: rank side: ``workload``, ``lessons``; kernel side: ``plots``,
``report``, ``report_model``; exercises: ``exercises_check``, ``exercises_fsdp``, ``exercises_tp``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch08_ladder as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = ("exercises_check", "exercises_fsdp", "exercises_tp", "lessons", "plots", "report", "report_model", "workload")


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
