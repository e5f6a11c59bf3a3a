"""Shared by the tests of several files (first written for tests/test_figures.py)."""

from __future__ import annotations

import itertools

from matplotlib.text import Text  # noqa: E402
from matplotlib.transforms import Bbox


def texts(fig) -> list[tuple[str, Bbox]]:
    """Every text ``fig`` draws, not empty, with its box on the canvas (tick labels only of ticks in view)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, shown = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            span = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
                if lo - span <= tick.get_loc() <= hi + span:
                    shown += [lab for lab in (tick.label1, tick.label2) if lab.get_visible()]
    drawn = [t for t in fig.findobj(Text) if id(t) not in ticks and t.get_visible()] + shown
    return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn if t.get_text().strip()]


def problems(fig) -> list[str]:
    """Texts that overlap one another, or that are wider than the figure."""
    boxes = texts(fig)
    width = fig.bbox.width
    out = [f"{a!r} is {box.width:.0f} px wide in a {width:.0f} px figure" for a, box in boxes if box.width > width]
    for (a, p), (b, q) in itertools.combinations(boxes, 2):
        if p.overlaps(q) and p.intersection(p, q).width > 2 and p.intersection(p, q).height > 2:
            out.append(f"{a!r} overlaps {b!r}")
    return out


def said(fig) -> str:
    return "\n".join(t for t, _ in texts(fig))
