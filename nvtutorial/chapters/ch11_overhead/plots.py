"""Notebook 11's figures: the batch-doubling sweep with its floor and its work line, and the step's speed-up three
ways against the model's. Each takes data and returns ``(fig, ax)`` and says where it was measured
(``plots.style``); kernel side, never launches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch11_overhead import model
from nvtutorial.chapters.ch11_overhead.report_step import LABELS, StepRow
from nvtutorial.plots.style import figure, finish
from nvtutorial.results import Where

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def doubling(points: Sequence[tuple[int, float]], seq_len: int, where: Where) -> tuple[Figure, Axes]:
    """Time per step against tokens per step (log–log): flat on the floor while overhead sets the time, then the
    work's line ``B · k``; where they cross, the crossover (when the sweep got there)."""
    import numpy as np

    fig, ax = figure(7.0, 4.0)
    batches = np.array([b for b, _ in sorted(points)], dtype=float)
    seconds = np.array([s for _, s in sorted(points)])
    ax.plot(batches * seq_len, seconds * 1e3, "o-", label="measured")
    floor, per_seq = model.overhead_floor(points), seconds[-1] / batches[-1]
    grid = np.logspace(np.log10(batches[0]), np.log10(batches[-1]), 100)
    ax.plot(grid * seq_len, np.full_like(grid, floor * 1e3), ":", color="grey", label=f"floor {floor * 1e3:.3g} ms")
    ax.plot(grid * seq_len, grid * per_seq * 1e3, "--", color="grey", label="the work: B · (largest batch's t / B)")
    if model.left_the_floor(points, floor):
        crossover = model.crossover_batch(points, floor)
        ax.axvline(crossover * seq_len, color="C3", lw=0.8, label=f"crossover ≈ {crossover * seq_len:.0f} tokens")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens per step")
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8)
    ax.set_title("Double the batch: if the time barely moves, overhead sets it")
    finish(fig, where)
    return fig, ax


def speedups(rows: Sequence[StepRow], where: Where) -> tuple[Figure, Axes]:
    """Each way's speed over the eager step's at each width (bars, measured); the model's, predicted before the run
    (diamonds: its eager time over its time for that way; none where it made no prediction); and, smaller, the same
    from the two sides each run measured right before it was timed (crosses)."""
    import numpy as np

    fig, ax = figure(7.0, 4.0)
    widths = sorted({r.width for r in rows})
    variants = [v for v in LABELS if any(r.variant == v for r in rows)]
    eager = {r.width: r for r in rows if r.variant == "eager"}
    step = 0.8 / len(variants)

    def ratio(a: float | None, b: float | None) -> float:
        return a / b if a and b else np.nan

    for i, variant in enumerate(variants):
        got = {r.width: r for r in rows if r.variant == variant}
        pairs = [(eager.get(w), got.get(w)) for w in widths]  # the eager run and this way's, at each width
        x = np.arange(len(widths)) + (i - (len(variants) - 1) / 2) * step
        ax.bar(
            x,
            [got[w].speedup if w in got else np.nan for w in widths],
            step * 0.9,
            color=f"C{i}",
            label=f"{LABELS[variant]}, measured",
        )
        before = [ratio(e.predicted_s, g.predicted_s) if e and g else np.nan for e, g in pairs]
        during = [ratio(e.model_s, g.model_s) if e and g else np.nan for e, g in pairs]
        ax.plot(x, before, "D", color="black", ms=5, label="the model (before the run)" if i == 0 else None)
        ax.plot(x, during, "x", color="grey", ms=5, label="the sides measured during the run" if i == 0 else None)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(widths)), [f"width {w}" for w in widths])
    ax.set_ylabel("× the eager step's speed")
    ax.legend(fontsize=8)
    ax.set_title("A CUDA graph pays where the CPU's side is the slower one")
    finish(fig, where)
    return fig, ax
