"""Chapter 06 (notebook ``06_pitfalls``): rank-0-only validation, mismatched collectives, seeds, data loading, OOM:
reproduced safely, fixed.

Its files, by role: rank side: ``workload``, ``workload_oom``, ``lessons``; kernel side: ``lab``, ``plots``,
``report``, ``report_measured``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch06_pitfalls as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = ("exercises", "lab", "plots", "report", "report_measured", "workload", "workload_oom", "lessons")


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
