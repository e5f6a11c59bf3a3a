"""Notebook 08's figures: memory per rank, loss against the reference, bytes, the link's weight, model size.

Each function takes data (a run's result, or a table of :mod:`nvtutorial.chapters.ch08_ladder.report`) and returns
``(fig, ax)``; every figure says where it was measured, or, for the memory model's figures, that it is
arithmetic and no run.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, cast

from nvtutorial.plots.style import figure, finish, plain_log_ticks
from nvtutorial.results import Where

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from nvtutorial.chapters.ch08_ladder.report_model import Setup
    from nvtutorial.report.verdict import Comparison
    from nvtutorial.results import RunResult

MODEL_ONLY = "the memory model's arithmetic (nvtutorial/chapters/ch08_ladder/report_model.py), no run"

PARTS = (
    ("params", "parameters", "tab:blue"),
    ("grads", "gradients", "tab:orange"),
    ("optimizer", "Adam state", "tab:green"),
    ("activations", "activations", "tab:purple"),
    ("transient", "transient (est.)", "0.75"),
)


def memory_bars(setup: Setup, rank: int = 0) -> tuple[Figure, Axes]:
    """Stacked bars of the memory model of every rung on one rank (MB, or GB for the lesson sizes), model state
    hatched where the rung keeps it in host memory."""
    from nvtutorial.chapters.ch08_ladder import report as ladder

    shapes = setup.shapes()
    memory = {rung: ladder.rank_memory(setup, rung, rank, shapes) for rung in ladder.RUNGS}
    largest = max(sum(getattr(m, key) for key, _, _ in PARTS) for m in memory.values())
    scale, unit = (1e9, "GB") if largest >= 1e9 else (1e6, "MB")
    fig, ax = figure(8.5, 4.2)
    names = list(memory)
    for i, rung in enumerate(names):
        m = memory[rung]
        left = 0.0
        for key, label, color in PARTS:
            value = getattr(m, key) / scale
            host = m.on_host and key in ("params", "grads", "optimizer")
            ax.barh(
                i,
                value,
                left=left,
                color=color,
                hatch="//" if host else None,
                alpha=0.45 if host else 1.0,
                edgecolor="white",
                label=label if i == 0 else None,
            )
            left += value
    ax.set_yticks(range(len(names)), [ladder.LABELS[n] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} on rank {rank} (memory model; hatched: kept in host memory)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("What each rung keeps on a rank")
    finish(fig, MODEL_ONLY, measured=False)
    return fig, ax


def loss_differences(result: RunResult, tolerance: float) -> tuple[Figure, Axes]:
    """The largest difference, over the ranks, between each rung's loss and the one-process reference at every
    step (log scale), with the tolerance. Rungs whose loss equals the reference's bit for bit at every step are
    named in the title, not drawn: they would all lie on one line."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    from nvtutorial.chapters.ch08_ladder import report as ladder

    ms = ladder.ranks(result)
    diffs = {}
    for g in ms[0].rungs:
        diffs[g.rung] = np.max(
            [np.abs(np.array(m.rung(g.rung).losses) - np.array(ladder.reference_losses(m))) for m in ms], axis=0
        )
    same = [rung for rung, d in diffs.items() if not d.any()]
    drawn = {rung: d for rung, d in diffs.items() if rung not in same}
    positive = [v for d in drawn.values() for v in d if v > 0]
    floor = min(positive + [tolerance]) / 10  # where an exact 0 of a drawn rung sits, below everything else
    fig, ax = figure(8.5, 3.9)
    markers = "osD^vP*X"
    for k, (rung, d) in enumerate(drawn.items()):
        ax.plot(
            range(len(d)),
            np.where(d > 0, d, floor),
            marker=markers[k % len(markers)],
            ms=6 - k % 3,
            label=ladder.LABELS[rung],
        )
    steps = len(next(iter(diffs.values()))) if diffs else 1
    ax.axhline(tolerance, color="crimson", linestyle="--", lw=1)
    ax.text(steps - 1, tolerance, f"tolerance {tolerance:g} ", color="crimson", fontsize=8, ha="right", va="bottom")
    if drawn and any((d == 0).any() for d in drawn.values()):
        ax.axhline(floor, color="0.6", lw=0.8, linestyle=":")
        ax.text(steps - 1, floor, "0: exactly the reference's loss ", color="0.4", fontsize=7, ha="right", va="bottom")
    ax.set_yscale("log")
    ax.set_ylim(floor / 3, tolerance * 10)
    plain_log_ticks(ax.yaxis, subs=(1.0,))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.2, steps - 0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("|loss − one-process loss|")
    if drawn:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="differs", title_fontsize=7)
    else:
        ax.text(
            0.5,
            0.4,
            "every rung's loss is the reference's, bit for bit, at every step in this run",
            ha="center",
            transform=ax.transAxes,
            fontsize=9,
        )
    title = "Each rung's loss against the one-process reference"
    if same:
        title += "\n" + "\n".join(
            textwrap.wrap(
                "identical at every step, bit for bit, in this run: " + ", ".join(ladder.LABELS[r] for r in same), 95
            )
        )
    ax.set_title(title, fontsize=9)
    finish(fig, result)
    return fig, ax


def bytes_bars(table: pd.DataFrame, where: Where) -> tuple[Figure, Axes]:
    """MB each rung's recorded collectives cost per step and rank as a ring (the larger rank's; from
    ``report.ladder.bytes_table``), bars from zero, DDP's marked: a cost model of what ran, not measured traffic."""
    counted = cast("pd.Series", table["recorded (ring cost)"].groupby(level="rung", sort=False).max())
    ddp = counted.iloc[0]
    fig, ax = figure(8.5, 3.8)
    ax.barh(range(len(counted)), counted.values, color="tab:blue")
    ax.axvline(ddp, color="0.3", linewidth=1, linestyle="--")
    ax.text(ddp, -0.7, " DDP's bytes", fontsize=8, color="0.3", va="bottom")
    for i, mb in enumerate(counted.values):
        ax.text(mb, i, f"  {mb / ddp:.2f}× DDP ({mb:.3g} MB)" if ddp else f"  {mb:.3g} MB", va="center", fontsize=8)
    ax.set_yticks(range(len(counted)), list(counted.index))
    ax.set_ylim(len(counted) - 0.4, -1.0)
    ax.set_xlim(0, counted.max() * 1.45)
    ax.set_xlabel("MB per step and rank (recorded collectives, costed as a ring)")
    ax.set_title("How many bytes each rung moves")
    finish(fig, where)
    return fig, ax


def link_need(comparisons: dict[str, Comparison], where: Where) -> tuple[Figure, Axes]:
    """Step time host-staged ÷ step time over the direct link, per rung, with the noise band of each
    comparison (the repeats' spread and the A/A gap between the two direct launches, whichever is larger)."""
    from nvtutorial.chapters.ch08_ladder import report as ladder

    names = list(comparisons)
    fig, ax = figure(7.0, 3.6)
    for i, rung in enumerate(names):
        c = comparisons[rung]
        color = {"slower": "crimson", "faster": "tab:green"}.get(c.status, "0.6")
        ax.barh(i, c.ratio - 1.0, left=1.0, color=color)
        ax.errorbar(c.ratio, i, xerr=c.noise * c.ratio, color="black", capsize=3, linewidth=1)
        ax.text(max(c.ratio, 1.0) + c.noise * c.ratio, i, f"  {c.ratio:.2f}× ({c.status})", va="center", fontsize=8)
    ax.axvline(1.0, color="0.3", linewidth=1)
    ax.set_yticks(range(len(names)), [ladder.LABELS[n] for n in names])
    ax.invert_yaxis()
    hi = max(c.ratio * (1 + c.noise) for c in comparisons.values())
    ax.set_xlim(min(0.9, min(c.ratio for c in comparisons.values()) - 0.05), hi * 1.25)
    ax.set_xlabel("host-staged step time (NCCL_P2P_DISABLE=1) ÷ step time over the direct link")
    ax.set_title("Step time without the direct link (grey: within the noise, A/A gap included)")
    finish(fig, where)
    return fig, ax


def _params(millions: float) -> str:
    """Parameters, given in millions, as 0.33 M, 7.23 B."""
    return f"{millions / 1000:,.3g} B" if millions >= 1000 else f"{millions:,.3g} M"


def fit_bars(table: pd.DataFrame, budget_label: str, device_memory: bool = True) -> tuple[Figure, Axes]:
    """The largest model each rung fits (parameters, log scale), from ``report.ladder.fit_table``. Without a GPU
    (``device_memory=False``: the budget is the parameters cell's, not a device's) the rung that offloads to host
    memory is named, not drawn: there, host memory is the only memory, and its bar would measure nothing."""
    shown = table if device_memory else table.loc[table["state in"] != "host"]
    left_out = [] if device_memory else list(table[table["state in"] == "host"]["label"])
    fig, ax = figure(8.5, 3.8)
    values = shown["parameters (M)"].to_numpy()
    ax.barh(range(len(shown)), values, color="tab:blue")
    for i, (v, layers) in enumerate(zip(values, shown["layers"].to_numpy())):
        ax.text(v, i, f"  {_params(v)} ({layers} blocks)", va="center", fontsize=8)
    ax.set_xscale("log")
    positive = values[values > 0]
    ax.set_xlim(positive.min() / 2 if len(positive) else 1e-3, values.max() * 6)
    plain_log_ticks(ax.xaxis, subs=(1.0, 3.0), label=_params)
    ax.set_yticks(range(len(shown)), list(shown["label"]))
    ax.invert_yaxis()
    ax.set_xlabel("parameters of the largest model that fits (log scale)")
    title = f"How big can it get: the memory model, with {budget_label}"
    if left_out:
        title += (
            f"; not drawn: {', '.join(left_out)} (without a GPU, host memory is the only memory: nothing "
            "moves off a device)"
        )
    ax.set_title("\n".join(textwrap.wrap(title, 95)), fontsize=9)
    finish(fig, MODEL_ONLY, measured=False)
    return fig, ax
