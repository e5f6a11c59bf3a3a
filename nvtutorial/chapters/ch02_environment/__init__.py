"""Chapter 02 (notebook ``02_environment``): versions and the doctor; what each NCCL variable does; the source's
troubleshooting table.

Its files, by role: rank side: ``lessons``; kernel side: ``report``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch02_environment as ch
"""

from __future__ import annotations

import importlib
from typing import Any

FILES = ("exercises", "report", "lessons")


def __getattr__(name: str) -> Any:  # PEP 562: each file is imported when first asked for
    if name in FILES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its files are {', '.join(FILES)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(FILES))
