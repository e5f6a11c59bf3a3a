"""Plots for notebook 04. Each takes a typed result and ``where`` (a RunResult, EnvInfo or label) and returns
``(fig, ax)``; every figure says where it was measured, under the axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch03_ddp_training.report import Train, find_row, rows_of
from nvtutorial.chapters.ch04_optimisations import schema
from nvtutorial.chapters.ch04_optimisations.report import attention_of, comparison, kernel, label, loss_difference
from nvtutorial.plots.style import figure, finish
from nvtutorial.results import RunResult, Where

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def plot_step_changes(result: Train, variants: Sequence[str], where: Where, title: str) -> tuple[Figure, Axes]:
    """Each variant's step time relative to the baseline's (%), with the noise band of the comparison:
    a bar inside the band is "no change"."""
    found = [(v, c) for v in variants if (c := comparison(result, v)) is not None]
    fig, ax = figure(8, max(2.4, 0.5 * len(found) + 1.4))
    colours = {"faster": "C2", "slower": "C3", "no change": "0.6"}
    for i, (_, c) in enumerate(found):
        ax.barh(i, 100 * c.change, color=colours[c.status])
        ax.fill_betweenx([i - 0.4, i + 0.4], -100 * c.noise, 100 * c.noise, color="0.85", zorder=0)
        ax.text(
            100 * c.change,
            i,
            f" {c.change:+.1%} {c.status} ",
            va="center",
            ha="left" if c.change >= 0 else "right",
            fontsize=7,
        )
    ax.axvline(0, color="k", lw=1)
    ax.set_yticks(range(len(found)), [label(result, v) for v, _ in found], fontsize=8)
    ax.invert_yaxis()
    lim = max([abs(100 * c.change) for _, c in found] + [100 * c.noise for _, c in found] + [2.0]) * 1.6
    ax.set_xlim(-lim, lim)
    ax.set_xlabel("step time against the baseline (%); grey: the noise band (no change inside it)")
    ax.set_title(title)
    finish(fig, where)
    return fig, ax


def plot_loss_differences(
    result: Train, variants: Sequence[str], where: Where, title: str = "Loss per step, minus the baseline's"
) -> tuple[Figure, Axes]:
    """The loss difference to the baseline, step by step, for the variants whose losses differ at all;
    the identical ones are named, not drawn on top of each other."""
    rows = rows_of(result)
    base = find_row(rows, "baseline")
    fig, ax = figure(8, 3.6)
    same = [v for v in variants if loss_difference(result, v) == 0.0]
    for v in variants:
        row = find_row(rows, v)
        if v in same or not row or not base or not row.loss_curve:
            continue
        diff = [b - a for a, b in zip(base.loss_curve, row.loss_curve)]
        ax.plot(range(1, len(diff) + 1), diff, lw=1.2, label=label(result, v))
    ax.axhline(0, color="k", lw=1)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss − baseline's loss")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.set_title(title + (f"\nidentical to the baseline, bit for bit: {', '.join(same)}" if same else ""), fontsize=9)
    finish(fig, where)
    return fig, ax


def plot_attention(attention: RunResult | schema.Rank, where: Where) -> tuple[Figure, Axes]:
    """Attention block time per SDPA setting, log scale (the backends differ by up to 10×). The UNet is not
    drawn: it calls no attention, and its step with flash on and off is stated in words (claim C9)."""
    rows = attention_of(attention).attention
    fig, ax = figure(8, max(2.6, 0.45 * len(rows) + 1.4))
    ax.barh(range(len(rows)), [r.ms for r in rows], color="C0")
    ax.set_yticks(range(len(rows)), [r.setting for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, r in enumerate(rows):
        name = kernel(r.ops).replace("_scaled_dot_product_", "")
        ax.text(r.ms, i, f" {r.ms:.2f} ms  {name}", va="center", fontsize=7)
    ax.set_xlim(right=max(r.ms for r in rows) * 8)
    ax.set_xlabel("self-attention block, forward + backward (ms, median, log scale)")
    ax.set_title("What enable_flash_sdp and sdpa_kernel choose between: attention kernels", fontsize=9)
    finish(fig, where)
    return fig, ax
