"""Notebook 08's figures: memory per rank, loss against the reference, bytes, the link's weight, model size.

Each function takes data (a run's result, or a table of :mod:`nvtutorial.chapters.ch08_ladder.report`) and returns
``(fig, ax)``; every figure says where it was measured, or, for the memory model's figures, that it is
arithmetic and no run.
"""

from __future__ import annotations

from typing import Any

from nvtutorial.plots.style import figure, stamp

MODEL_ONLY = "the memory model's arithmetic (nvtutorial/chapters/ch08_ladder/report_model.py), no run"

PARTS = (("params", "parameters", "tab:blue"), ("grads", "gradients", "tab:orange"),
         ("optimizer", "Adam state", "tab:green"), ("activations", "activations", "tab:purple"),
         ("transient", "transient (est.)", "0.75"))


def memory_bars(setup: Any, rank: int = 0) -> tuple[Any, Any]:
    """Stacked bars of the memory model of every rung on one rank (GB), model state hatched where the
    rung keeps it in host memory."""
    from nvtutorial.chapters.ch08_ladder import report as ladder

    shapes = setup.shapes()
    fig, ax = figure(8.0, 4.2)
    names = list(ladder.RUNGS)
    for i, rung in enumerate(names):
        m = ladder.rank_memory(setup, rung, rank, shapes)
        left = 0.0
        for key, label, color in PARTS:
            value = getattr(m, key) / 1e9
            host = m.on_host and key in ("params", "grads", "optimizer")
            ax.barh(i, value, left=left, color=color, hatch="//" if host else None, alpha=0.45 if host else 1.0,
                    edgecolor="white", label=label if i == 0 else None)
            left += value
    ax.set_yticks(range(len(names)), [ladder.LABELS[n] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel(f"GB on rank {rank} (memory model; hatched: in host memory)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("What each rung keeps on a rank")
    stamp(fig, MODEL_ONLY, measured=False)
    return fig, ax


def loss_differences(result: Any, tolerance: float) -> tuple[Any, Any]:
    """The largest difference, over the ranks, between each rung's loss and the reference at every step
    (log scale), with the tolerance: curves that match to 1e-7 would hide each other if drawn as losses."""
    import numpy as np

    from nvtutorial.chapters.ch08_ladder import report as ladder

    fig, ax = figure(7.0, 3.8)
    reference = [m["reference"] for m in result.ranks]
    floor = 1e-9
    for g in result.ranks[0]["rungs"]:
        rung = g["rung"]
        per_rank = [ladder.rung_record(result, r, rung)["losses"] for r in range(len(result.ranks))]
        diff = np.max([np.abs(np.array(losses) - np.array(ref)) for losses, ref in zip(per_rank, reference)], axis=0)
        ax.plot(range(len(diff)), np.maximum(diff, floor), marker="o", label=ladder.LABELS[rung])
    ax.axhline(tolerance, color="crimson", linestyle="--", label=f"tolerance {tolerance:g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("|loss − one-process loss|")
    ax.set_title(f"Every rung against the one-process reference (0 is drawn at {floor:g})")
    ax.legend(fontsize=7, ncol=2)
    stamp(fig, result)
    return fig, ax


def bytes_bars(table: Any, where: Any) -> tuple[Any, Any]:
    """Bytes each rung's recorded collectives cost per step and rank as a ring, relative to DDP (from
    ``report.ladder.bytes_table``): a cost model of what ran, not measured traffic."""
    ratio = table["× DDP"].groupby(level="rung", sort=False).max()
    counted = table["recorded (ring cost)"].groupby(level="rung", sort=False).max()
    fig, ax = figure(7.0, 3.6)
    ax.barh(range(len(ratio)), ratio.values - 1.0, left=1.0, color="tab:blue")
    for i, (r, mb) in enumerate(zip(ratio.values, counted.values)):
        ax.text(max(r, 1.0), i, f"  {r:.2f}× ({mb:.3g} MB)", va="center", fontsize=8)
    ax.axvline(1.0, color="0.3", linewidth=1)
    ax.set_yticks(range(len(ratio)), list(ratio.index))
    ax.invert_yaxis()
    ax.set_xlim(min(0.5, ratio.min() - 0.1), ratio.max() * 1.35)
    ax.set_xlabel("bytes per step and rank, relative to DDP (recorded collectives, costed as a ring)")
    ax.set_title("How many bytes each rung moves")
    stamp(fig, where)
    return fig, ax


def link_need(comparisons: dict[str, Any], where: Any) -> tuple[Any, Any]:
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
    ax.set_xlabel("step time host-staged (NCCL_P2P_DISABLE=1) ÷ step time over the direct link")
    ax.set_title("Step time without the direct link (grey: within the noise, A/A gap included)")
    stamp(fig, where)
    return fig, ax


def fit_bars(table: Any, budget_label: str) -> tuple[Any, Any]:
    """The largest model each rung fits (millions of parameters, log scale), from ``report.ladder.fit_table``."""
    fig, ax = figure(7.0, 3.6)
    values = table["parameters (M)"].values
    ax.barh(range(len(table)), values, color="tab:blue")
    for i, (v, layers) in enumerate(zip(values, table["layers"].values)):
        ax.text(v, i, f"  {v:,.4g} M ({layers} blocks)", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(table)), list(table["label"]))
    ax.invert_yaxis()
    ax.set_xlim(values[values > 0].min() / 2 if (values > 0).any() else 1e-3, values.max() * 8)
    ax.set_xlabel(f"parameters of the largest model that fits (millions; memory model, {budget_label})")
    ax.set_title("How big can it get")
    stamp(fig, MODEL_ONLY, measured=False)
    return fig, ax
