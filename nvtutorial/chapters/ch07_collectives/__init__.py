"""Chapter 07 (notebook ``07_custom_collectives``): a ring all-reduce from send/recv, a correct sparse all-reduce,
compression hooks.

Its files, by role: rank side: ``workload``, ``workload_compression``, ``workload_density``, ``lessons``; kernel
side: ``plots``, ``report``, ``report_compression``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch07_collectives as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = (
    "exercises",
    "plots",
    "report",
    "report_compression",
    "workload",
    "workload_compression",
    "workload_density",
    "lessons",
)


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
