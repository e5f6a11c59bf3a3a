"""Notebook 11's figures: the batch-doubling sweep with its floor and its work line, and the step's speed-up three
ways against the model's. Each takes data and returns ``(fig, ax)`` and says where it was measured
(``plots.style``); kernel side, never launches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nvtutorial.chapters.ch11_overhead import model
from nvtutorial.chapters.ch11_overhead.report import LABELS
from nvtutorial.plots.style import figure, finish


def doubling(points: Sequence[tuple[int, float]], seq_len: int, where: str) -> tuple[Any, Any]:
    """Time per step against tokens per step (log–log): flat on the floor while overhead sets the time, then the
    work's line ``B · k``; where they cross, the crossover (when the sweep got there)."""
    import numpy as np

    fig, ax = figure(7.0, 4.0)
    batches = np.array([b for b, _ in sorted(points)], dtype=float)
    seconds = np.array([s for _, s in sorted(points)])
    ax.plot(batches * seq_len, seconds * 1e3, "o-", label="measured")
    floor, per_seq = seconds[0], seconds[-1] / batches[-1]
    grid = np.logspace(np.log10(batches[0]), np.log10(batches[-1]), 100)
    ax.plot(grid * seq_len, np.full_like(grid, floor * 1e3), ":", color="grey", label=f"floor {floor * 1e3:.3g} ms")
    ax.plot(grid * seq_len, grid * per_seq * 1e3, "--", color="grey", label="the work: B · (largest batch's t / B)")
    if model.left_the_floor(points):
        crossover = model.crossover_batch(points)
        ax.axvline(crossover * seq_len, color="C3", lw=0.8, label=f"crossover ≈ {crossover * seq_len:.0f} tokens")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens per step")
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8)
    ax.set_title("Double the batch: if the time barely moves, overhead sets it")
    finish(fig, where)
    return fig, ax


def speedups(rows: Sequence[Mapping[str, Any]], where: str) -> tuple[Any, Any]:
    """Each way's speed over the eager step's at each width (bars, measured) and the model's (diamonds: the
    model's eager time over its time for that way, each the slower of its own two sides; none where a GPU side
    could not be measured)."""
    import numpy as np

    fig, ax = figure(7.0, 4.0)
    widths = sorted({r["width"] for r in rows})
    variants = [v for v in LABELS if any(r["variant"] == v for r in rows)]
    model_eager = {r["width"]: r["model_s"] for r in rows if r["variant"] == "eager"}
    step = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        got = {r["width"]: r for r in rows if r["variant"] == variant}
        x = np.arange(len(widths)) + (i - (len(variants) - 1) / 2) * step
        measured = [got[w]["speedup"] if w in got else np.nan for w in widths]
        predicted = [
            model_eager[w] / got[w]["model_s"] if w in got and model_eager.get(w) and got[w]["model_s"] else np.nan
            for w in widths
        ]
        ax.bar(x, measured, step * 0.9, color=f"C{i}", label=f"{LABELS[variant]}, measured")
        ax.plot(x, predicted, "D", color="black", ms=5, label="the model" if i == 0 else None)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(widths)), [f"width {w}" for w in widths])
    ax.set_ylabel("× the eager step's speed")
    ax.legend(fontsize=8)
    ax.set_title("A CUDA graph pays where the CPU's side is the slower one")
    finish(fig, where)
    return fig, ax
