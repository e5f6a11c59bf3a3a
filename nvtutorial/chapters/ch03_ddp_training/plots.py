"""Plots for notebooks 03 and 04. Each takes data and ``where`` (a RunResult, EnvInfo or label) and
returns ``(fig, ax)``; every figure says where it was measured, under the axes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nvtutorial.chapters.ch03_ddp_training.report import PATHS, SOURCE_ROW_FOR, SOURCE_TABLE, find_row, rows_of
from nvtutorial.chapters.ch04_optimisations.report import comparison, loss_difference
from nvtutorial.plots.style import figure, finish


def plot_lesson(history: Sequence[Mapping[str, Any]], where: Any) -> tuple[Any, Any]:
    """Training and validation loss, and validation IoU, per epoch (the lesson script's run)."""
    fig, axes = figure(10, 3.8, ncols=2)
    epochs = [h["epoch"] + 1 for h in history]
    axes[0].plot(epochs, [h["train_loss"] for h in history], "o-", label="training loss (rank 0's batches)")
    axes[0].plot(epochs, [h["loss"] for h in history], "s-", label="validation loss (whole set, all ranks)")
    axes[0].set_xlabel("epochs trained")
    axes[0].set_ylabel("cross-entropy per pixel")
    axes[0].legend(fontsize=8)
    axes[1].plot(epochs, [h["iou"] for h in history], "o-", color="C2")
    axes[1].set_xlabel("epochs trained")
    axes[1].set_ylabel("validation mean IoU (shape classes)")
    axes[1].set_ylim(0, 1)
    for ax in axes:
        ax.set_xticks(epochs)
    fig.suptitle("DDP training of the course UNet: ddp_train.py on two ranks")
    finish(fig, where)
    return fig, axes


def plot_scaling(summary: Mapping[str, Any], where: Any) -> tuple[Any, Any]:
    """From 1 to 2 GPUs (or processes), for both batch conventions: the speed-up against the limit of 2×, and the
    memory each rank holds against one GPU's (1×, and half)."""
    gpu = summary["memory"] == "peak_mem_gb"
    one, two = ("1 GPU", "2 GPUs") if gpu else ("1 process", "2 processes")
    fig, axes = figure(10, 4.0, ncols=2)
    keys = [k for k in ("fixed_per_gpu", "fixed_global") if summary.get(k)]
    labels = {"fixed_per_gpu": "fixed batch per GPU", "fixed_global": "fixed global batch"}
    if not gpu:
        labels = {"fixed_per_gpu": "fixed batch per rank", "fixed_global": "fixed global batch"}
    x = list(range(len(keys)))
    speed = [summary[k]["speedup"] for k in keys]
    ax = axes[0]
    ax.bar(x, speed, 0.5, color=["C0", "C1"][: len(keys)])
    for level, text in ((2.0, "2×: the\nlimit"), (1.0, f"1×: {one}\nalone")):
        ax.axhline(level, color="k" if level == 2.0 else "0.5", lw=1, ls="--" if level == 2.0 else "-")
        ax.text(1.01, level, text, fontsize=7, va="center", ha="left", transform=ax.get_yaxis_transform())
    top = max([2.0, *speed]) * 1.3
    for i, k in enumerate(keys):
        s = summary[k]
        ax.text(
            i,
            speed[i] + 0.03 * top,
            f"{speed[i]:.2f}× ({100 * s['efficiency']:.0f} % efficiency)\n"
            f"{s['samples_per_s_1']:.4g} → {s['samples_per_s_2']:.4g} samples/s",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xlim(-0.5, len(keys) - 0.5)
    ax.set_ylim(0, top)
    ax.set_xticks(
        x,
        [f"{labels[k]}\n{summary['one_gpu_batch']} → {summary[k]['per_gpu_batch']} per rank" for k in keys],
        fontsize=8,
    )
    ax.set_ylabel(f"samples/s of {two} ÷ {one}'s")
    ax.set_title("Throughput", fontsize=10)
    what = "peak memory" if gpu else "counted tensor bytes"
    ax = axes[1]
    w = 0.38
    ratios = []
    for rank in range(max((len(summary[k]["memory_ratio_per_rank"]) for k in keys), default=0)):
        vals = [summary[k]["memory_ratio_per_rank"][rank] or 0.0 for k in keys]
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


def plot_source_comparison(rows: Mapping[str, Mapping[str, Any] | None], where: Any) -> tuple[Any, Any]:
    """Speed-up over 1 GPU and exposed communication share per path, ours next to the source's."""
    src = {r["path"]: r for r in SOURCE_TABLE}
    base = rows.get("1gpu")
    keys = list(PATHS)
    fig, axes = figure(10, 3.8, ncols=2)

    def measured(k: str) -> bool:
        return bool(rows.get(k)) and rows[k].get("status") == "ok"  # type: ignore[union-attr]

    ours = [rows[k]["samples_per_s"] / base["samples_per_s"] if measured(k) and base else 0.0 for k in keys]  # type: ignore[index]
    theirs = [58.0 / src[SOURCE_ROW_FOR[k]]["minutes_per_epoch"] if k in SOURCE_ROW_FOR else 0.0 for k in keys]
    gpu = getattr(getattr(where, "env", None), "is_gpu", True)
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
    comm_ours = [100 * (rows[k].get("comm_share") or 0.0) if measured(k) else 0.0 for k in keys[1:]]  # type: ignore[union-attr]
    comm_src = [100 * (src[SOURCE_ROW_FOR[k]]["comm_share"] or 0.0) if k in SOURCE_ROW_FOR else 0.0 for k in keys[1:]]
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


def plot_step_changes(result: Any, variants: Sequence[str], where: Any, title: str) -> tuple[Any, Any]:
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
    ax.set_yticks(range(len(found)), [v for v, _ in found], fontsize=8)
    ax.invert_yaxis()
    lim = max([abs(100 * c.change) for _, c in found] + [100 * c.noise for _, c in found] + [2.0]) * 1.6
    ax.set_xlim(-lim, lim)
    ax.set_xlabel("step time against the baseline (%); grey: the noise band (no change inside it)")
    ax.set_title(title)
    finish(fig, where)
    return fig, ax


def plot_loss_differences(
    result: Any, variants: Sequence[str], where: Any, title: str = "Loss per step, minus the baseline's"
) -> tuple[Any, Any]:
    """The loss difference to the baseline, step by step, for the variants whose losses differ at all;
    the identical ones are named, not drawn on top of each other."""
    rows = rows_of(result)
    base = find_row(rows, "baseline")
    fig, ax = figure(8, 3.6)
    same = [v for v in variants if loss_difference(result, v) == 0.0]
    for v in variants:
        row = find_row(rows, v)
        if v in same or not row or not base or "loss_curve" not in row:
            continue
        diff = [b - a for a, b in zip(base["loss_curve"], row["loss_curve"])]
        ax.plot(range(1, len(diff) + 1), diff, lw=1.2, label=v)
    ax.axhline(0, color="k", lw=1)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss − baseline's loss")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.set_title(title + (f"\nidentical to the baseline, bit for bit: {', '.join(same)}" if same else ""), fontsize=9)
    finish(fig, where)
    return fig, ax


def plot_attention(metrics: Mapping[str, Any], where: Any) -> tuple[Any, Any]:
    """Attention block time per SDPA setting, log scale (the backends differ by up to 10×). The UNet is not
    drawn: it calls no attention, and its step with flash on and off is stated in words (claim C9)."""
    rows = metrics["attention"]
    fig, ax = figure(8, max(2.6, 0.45 * len(rows) + 1.4))
    ax.barh(range(len(rows)), [r["ms"] for r in rows], color="C0")
    ax.set_yticks(range(len(rows)), [r["setting"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, r in enumerate(rows):
        kernel = next((o for o in r.get("ops", []) if "backward" not in o), "?").replace("_scaled_dot_product_", "")
        ax.text(r["ms"], i, f" {r['ms']:.2f} ms  {kernel}", va="center", fontsize=7)
    ax.set_xlim(right=max(r["ms"] for r in rows) * 8)
    ax.set_xlabel("self-attention block, forward + backward (ms, median, log scale)")
    ax.set_title("What enable_flash_sdp and sdpa_kernel choose between: attention kernels", fontsize=9)
    finish(fig, where)
    return fig, ax
