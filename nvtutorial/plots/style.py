"""The course's one plot style: a new figure, the stamp that says where it was measured, the colours.

Plot functions (the other modules of :mod:`nvtutorial.plots`) take data and return ``(fig, ax)``.

Every figure carries where it was measured (:func:`stamp`): real GPUs with their link and
versions, or "CPU, gloo: a simulation".
"""

from __future__ import annotations

from typing import Any


def stamp(fig: Any, where: Any, measured: bool = True) -> None:
    """Write the measurement's origin under the figure. ``where``: a RunResult, EnvInfo or str. With
    ``measured=False`` the figure is arithmetic (no run): ``where`` says what computed it, with no "measured on"."""
    label = getattr(where, "label", where)
    fig.text(0.01, 0.005, f"measured on: {label}" if measured else f"not measured: {label}", fontsize=7, color="0.35", ha="left", va="bottom")
    fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, 0.17))


def figure(width: float = 7.0, height: float = 4.0, **kwargs: Any) -> tuple[Any, Any]:
    """A new ``(fig, ax)``. In a notebook it shows when the cell ends: assign it, don't return it."""
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), **kwargs)


COLOURS = {"compute": "#4C72B0", "hidden": "#8172B2", "exposed": "#C44E52", "idle": "#CCCCCC", "comm": "#DD8452",
           "phase": "#55A868"}
"""One colour per kind of time (compute, hidden and exposed communication, idle...), the same in every figure."""


def finish(fig: Any, where: Any) -> None:
    """Lay the figure out with room at the bottom, then stamp where it was measured."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tight_layout warns about axes it cannot fit; the figure is still drawn
        fig.tight_layout(rect=(0, 0.04, 1, 1))
    stamp(fig, where)
