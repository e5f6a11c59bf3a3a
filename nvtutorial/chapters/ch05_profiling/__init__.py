"""Chapter 05 (notebook ``05_profiling``): the time split of a DDP step on every rank; waiting against time on the
wire; NVTX; telemetry.

Its files, by role: rank side: ``workload``, ``lessons``; kernel side: ``lab``, ``plots``, ``report``,
``report_monitoring``, ``report_traces``; exercises: ``exercises_exposed``, ``exercises_waiting``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch05_profiling as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = (
    "exercises_exposed",
    "exercises_waiting",
    "lab",
    "plots",
    "report",
    "report_monitoring",
    "report_traces",
    "workload",
    "lessons",
)


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
