"""Chapter 09 (notebook ``09_beyond_one_machine``): two emulated nodes, NCCL across the node boundary, Slurm, a rank
and a node killed and resumed.

Its files, by role: rank side: ``lessons``; kernel side: ``lab``, ``plots``, ``report``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch09_multinode as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = ("exercises", "lab", "plots", "report", "lessons")


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
