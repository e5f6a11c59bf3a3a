"""The traps of notebook 06: launching the ``pitfalls`` workload, and its parameters from the notebook's sizes.

What the runs show is read by :mod:`nvtutorial.report.pitfalls`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import launch
from ..workloads import pitfalls


def params_from(sizes: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """The entries of a notebook's size dict that are parameters of the ``pitfalls`` workload, plus ``overrides``."""
    names = {f.name for f in dataclasses.fields(pitfalls.Params)}
    out = {k: v for k, v in sizes.items() if k in names}
    out.update(overrides)
    return out


def run_trap(**kwargs: Any) -> Any:
    """``nvtutorial.run("pitfalls", **kwargs)``: the error it ends with (RunFailed, RunTimedOut), or ``None``."""
    try:
        launch.run("pitfalls", **kwargs)
    except launch.RunFailed as exc:
        return exc
    return None
