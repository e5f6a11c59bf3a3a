"""Plots for notebook 03 (notebook 04's are in its chapter). Each takes data and ``where`` (a RunResult, EnvInfo or
label) and returns ``(fig, ax)``; every figure says where it was measured, under the axes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch03_ddp_training.report import (
    CONVENTION_LABELS,
    PATHS,
    SOURCE_ROW_FOR,
    SOURCE_TABLE,
    PathRow,
    ScalingSummary,
)
from nvtutorial.chapters.ch03_ddp_training.report_lesson import epochs_of
from nvtutorial.plots.style import figure, finish
from nvtutorial.results import RunResult, Where

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure


def plot_lesson(history: Sequence[Mapping[str, float]], where: Where) -> tuple[Figure, np.ndarray]:
    """Training and validation loss, and validation IoU, per epoch (the lesson script's run)."""
    fig, axes = figure(10, 3.8, ncols=2)
    typed = epochs_of(history)
    epochs = [h.epoch + 1 for h in typed]
    axes[0].plot(epochs, [h.train_loss for h in typed], "o-", label="training loss (rank 0's batches)")
    axes[0].plot(epochs, [h.loss for h in typed], "s-", label="validation loss (whole set, all ranks)")
    axes[0].set_xlabel("epochs trained")
    axes[0].set_ylabel("cross-entropy per pixel")
    axes[0].legend(fontsize=8)
    axes[1].plot(epochs, [h.iou for h in typed], "o-", color="C2")
    axes[1].set_xlabel("epochs trained")
    axes[1].set_ylabel("validation mean IoU (shape classes)")
    axes[1].set_ylim(0, 1)
    for ax in axes:
        ax.set_xticks(epochs)
    fig.suptitle("DDP training of the course UNet: ddp_train.py on two ranks")
    finish(fig, where)
    return fig, axes


def plot_scaling(summary: ScalingSummary, where: Where) -> tuple[Figure, np.ndarray]:
    """From 1 to 2 GPUs (or processes), for both batch conventions: the speed-up against the limit of 2×, and the
    memory each rank holds against one GPU's (1×, and half)."""
    gpu = summary.memory == "peak_mem_gb"
    one, two = ("1 GPU", "2 GPUs") if gpu else ("1 process", "2 processes")
    fig, axes = figure(10, 4.0, ncols=2)
    measured = summary.conventions()
    keys = [k for k, _ in measured]
    labels = {**CONVENTION_LABELS, "fixed_per_gpu": "fixed batch per GPU" if gpu else "fixed batch per rank"}
    x = list(range(len(keys)))
    speed = [s.speedup for _, s in measured]
    ax = axes[0]
    ax.bar(x, speed, 0.5, color=["C0", "C1"][: len(keys)])
    for level, text in ((2.0, "2×: the\nlimit"), (1.0, f"1×: {one}\nalone")):
        ax.axhline(level, color="k" if level == 2.0 else "0.5", lw=1, ls="--" if level == 2.0 else "-")
        ax.text(1.01, level, text, fontsize=7, va="center", ha="left", transform=ax.get_yaxis_transform())
    top = max([2.0, *speed]) * 1.3
    for i, (_, s) in enumerate(measured):
        ax.text(
            i,
            speed[i] + 0.03 * top,
            f"{speed[i]:.2f}× ({100 * s.efficiency:.0f} % efficiency)\n"
            f"{s.samples_per_s_1:.4g} → {s.samples_per_s_2:.4g} samples/s",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xlim(-0.5, len(keys) - 0.5)
    ax.set_ylim(0, top)
    ax.set_xticks(
        x,
        [f"{labels[k]}\n{summary.one_gpu_batch} → {s.per_gpu_batch} per rank" for k, s in measured],
        fontsize=8,
    )
    ax.set_ylabel(f"samples/s of {two} ÷ {one}'s")
    ax.set_title("Throughput", fontsize=10)
    what = "peak memory" if gpu else "counted tensor bytes"
    ax = axes[1]
    w = 0.38
    ratios = []
    for rank in range(max((len(s.memory_ratio_per_rank) for _, s in measured), default=0)):
        vals = [s.memory_ratio_per_rank[rank] or 0.0 for _, s in measured]
        ratios += vals
        ax.bar([i + (rank - 0.5) * w for i in x], vals, w, label=f"rank {rank}", color=f"C{rank + 2}")
        for i, v in enumerate(vals):
            ax.text(i + (rank - 0.5) * w, v + 0.02, f"{v:.2f}×", ha="center", va="bottom", fontsize=7)
    for level, text in ((1.0, f"1×: as\n{one}"), (0.5, "½: half")):
        ax.axhline(level, color="k", lw=1, ls="-" if level == 1.0 else ":")
        ax.text(1.01, level, text, fontsize=7, va="center", ha="left", transform=ax.get_yaxis_transform())
    ax.set_xlim(-0.5, len(keys) - 0.5)
    ax.set_ylim(0, max([1.0, *ratios]) * 1.35)
    ax.set_xticks(x, [labels[k] for k in keys], fontsize=8)
    ax.set_ylabel(f"{what} per rank ÷ {one}'s")
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    ax.set_title(f"Memory on each {'GPU' if gpu else 'rank'}", fontsize=10)
    fig.suptitle(f"From {one} to {two}")
    finish(fig, where)
    return fig, axes


def plot_source_comparison(rows: Mapping[str, PathRow | None], where: Where) -> tuple[Figure, np.ndarray]:
    """Speed-up over 1 GPU and exposed communication share per path, ours next to the source's."""
    src = {r.path: r for r in SOURCE_TABLE}
    keys = list(PATHS)
    fig, axes = figure(10, 3.8, ncols=2)
    ok = {k: p.row for k in keys if (p := rows.get(k)) is not None and p.row.status == "ok"}  # the measured rows

    def measured(k: str) -> bool:
        return k in ok

    base = ok["1gpu"].samples_per_s if measured("1gpu") else None
    ours = [(ok[k].samples_per_s or 0.0) / base if measured(k) and base else 0.0 for k in keys]
    theirs = [58.0 / src[SOURCE_ROW_FOR[k]].minutes_per_epoch if k in SOURCE_ROW_FOR else 0.0 for k in keys]
    gpu = where.env.is_gpu if isinstance(where, RunResult) and where.env is not None else True  # a run's
    short = (
        ["1 GPU", "NVLink", "host-staged\n(source: PCIe)", "sockets"]
        if gpu
        else ["1 process", "2 processes\n(gloo, CPU)", "host-staged\n(source: PCIe)", "sockets"]
    )
    w = 0.38
    x = list(range(len(keys)))
    ours_label = "ours (measured)" if gpu else "ours (CPU simulation)"
    axes[0].bar([i - w / 2 for i in x], ours, w, label=ours_label)
    axes[0].bar([i + w / 2 for i in x], theirs, w, label="source (ResNet-50, as printed)")
    axes[0].axhline(2.0, color="k", ls=":", lw=1)
    axes[0].text(-0.5, 2.0, " 2×: the limit", fontsize=7, va="bottom")
    axes[0].set_xticks(x, short, fontsize=8)
    axes[0].set_ylabel("speed-up over 1 GPU (same global batch)")
    axes[0].set_ylim(0, 2.6)
    comm_ours = [100 * (ok[k].comm_share or 0.0) if measured(k) else 0.0 for k in keys[1:]]
    comm_src = [100 * (src[SOURCE_ROW_FOR[k]].comm_share or 0.0) if k in SOURCE_ROW_FOR else 0.0 for k in keys[1:]]
    axes[1].bar([i - w / 2 for i in x[:-1]], comm_ours, w, label="ours: exposed communication")
    axes[1].bar([i + w / 2 for i in x[:-1]], comm_src, w, label="source")
    axes[1].set_xticks(x[:-1], short[1:], fontsize=8)
    axes[1].set_ylabel("communication share of a step (%)")
    axes[1].set_ylim(0, max([*comm_ours, *comm_src, 10.0]) * 1.35)
    for ax, offset in ((axes[0], 0), (axes[1], 1)):  # say in the empty slot why it is empty
        for i, k in enumerate(keys[offset:]):
            if not measured(k):
                ax.text(
                    i - w / 2,
                    0.02 * ax.get_ylim()[1],
                    "not run:\nNCCL on\n2 GPUs\nonly",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    color="0.35",
                )
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("The source's table, reproduced with the course UNet")
    finish(fig, where)
    return fig, axes
