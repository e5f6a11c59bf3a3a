"""Chapter 04 (notebook ``04_optimisations``): mixed precision, DDP's bucket options, no_sync, channels_last,
torch.compile: each a diff and an A/B.

Its files, by role: rank side: ``workload_attention``, ``lessons``; kernel side: ``report``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch04_optimisations as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = ("report", "workload_attention", "lessons")


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
