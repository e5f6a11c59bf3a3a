"""The course's one plot style: a new figure, the stamp that says where it was measured, the colours.

Plot functions (the other modules of :mod:`nvtutorial.plots`) take data and return ``(fig, ax)``.

Every figure carries where it was measured (:func:`stamp`): real GPUs with their link and
versions, or "CPU, gloo: a simulation".
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot  # noqa: F401 - loaded with the plots (a notebook's setup cell), not by the first figure's cell

from nvtutorial.i18n import _, language, tr
from nvtutorial.results import Where, label_of

CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Microsoft YaHei",
    "SimHei",
    "PingFang SC",
    "Heiti SC",
)
"""Fonts that draw Simplified Chinese, the first one installed is used for a figure's Chinese words."""


def cjk_font() -> str | None:
    """The first of :data:`CJK_FONTS` that matplotlib knows here; None without one (then figures stay English: a
    font without the glyphs draws boxes)."""
    from matplotlib import font_manager

    known = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in known), None)


def stamp(fig: Any, where: Where, measured: bool = True) -> None:
    """Write the measurement's origin under the figure (:func:`~nvtutorial.results.label_of`). With
    ``measured=False`` the figure is arithmetic (no run): ``where`` says what computed it, with no "measured on"."""
    label = label_of(where)
    font = cjk_font() if language() == "zh" else None
    if font is None:  # English, or no font here to draw Chinese with
        text = f"measured on: {label}" if measured else f"not measured: {label}"
        style: dict[str, Any] = {}
    else:
        label = tr(label)
        text = _("measured on: {where}", where=label) if measured else _("not measured: {where}", where=label)
        style = {"fontfamily": [font, "DejaVu Sans"]}
    fig.text(0.01, 0.005, text, fontsize=7, color="0.35", ha="left", va="bottom", **style)
    fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, 0.17))


def figure(width: float = 7.0, height: float = 4.0, **kwargs: Any) -> tuple[Any, Any]:
    """A new ``(fig, ax)``. In a notebook it shows when the cell ends: assign it, don't return it."""
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), **kwargs)


COLOURS = {
    "compute": "#4C72B0",
    "hidden": "#8172B2",
    "exposed": "#C44E52",
    "idle": "#CCCCCC",
    "comm": "#DD8452",
    "phase": "#55A868",
}
"""One colour per kind of time (compute, hidden and exposed communication, idle...), the same in every figure."""


def finish(fig: Any, where: Where, measured: bool = True) -> None:
    """Lay the figure out with room at the bottom, then stamp where it was measured (``measured=False``: that it
    is arithmetic, see :func:`stamp`)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tight_layout warns about axes it cannot fit; the figure is still drawn
        fig.tight_layout(rect=(0, 0.04, 1, 1))
    stamp(fig, where, measured)


def plain_log_ticks(axis: Any, unit: str = "", subs: tuple[float, ...] = (1.0, 2.0, 5.0), label: Any = None) -> None:
    """Tick labels of a log axis as plain numbers (0.1, 1, 10, 1,000; 1e-06 below 0.001) instead of powers of
    ten, with ``unit``; ``subs``: the ticks within a decade; ``label``: a function that writes a tick's value."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def plain(v: float) -> str:
        return f"{v:,.12g}{unit}" if v >= 1e-3 else f"{v:.0e}{unit}"

    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda v, _: (label or plain)(v)))
