"""What the overhead chapters' tests (10, 11) share: whether a rank's imports stay clear of the kernel side's heavy
modules, checked in a fresh interpreter (the test process has imported them long before)."""

from __future__ import annotations

import ast
import subprocess
import sys

KERNEL_MODULES = ("pandas", "matplotlib")
"""What the notebook kernel loads to read and draw, and a rank never needs."""


def kernel_modules_loaded(*modules: str) -> list[str]:
    """Which of :data:`KERNEL_MODULES` a fresh Python has loaded once it has imported ``modules`` (dotted names; a
    rank's files should leave it empty)."""
    code = f"import sys; import {', '.join(modules)}; print(sorted(m for m in {KERNEL_MODULES!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return ast.literal_eval(out.strip())
