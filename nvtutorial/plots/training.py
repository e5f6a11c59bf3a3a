"""Plots for notebooks 03 and 04. Each takes data and ``where`` (a RunResult, EnvInfo or label)
and returns ``(fig, ax)``; every figure is stamped with where it was measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .style import figure, stamp


def plot_lesson(lesson: Mapping[str, Any], where: Any) -> tuple[Any, Any]:
    """Training loss per step, validation loss and IoU per epoch (the lesson run)."""
    fig, axes = figure(10, 4, ncols=2)
    losses = [x for epoch in lesson["step_losses"] for x in epoch]
    axes[0].plot(range(1, len(losses) + 1), losses, lw=1, label="training loss (rank 0's batches)")
    hist = lesson["history"]
    axes[0].plot([h["step"] for h in hist], [h["val_loss"] for h in hist], "o-", label="validation loss (all ranks)")
    axes[0].set_xlabel("optimizer step")
    axes[0].set_ylabel("cross-entropy")
    axes[0].legend(fontsize=8)
    axes[1].plot([h["epoch"] + 1 for h in hist], [h["val_iou"] for h in hist], "o-", color="C2")
    axes[1].set_xlabel("epochs trained")
    axes[1].set_ylabel("validation mean IoU (shape classes)")
    axes[1].set_ylim(0, 1)
    fig.suptitle("DDP training of the course UNet: loss falls, IoU rises")
    stamp(fig, where)
    return fig, axes


def plot_scaling(summary: Mapping[str, Any], where: Any) -> tuple[Any, Any]:
    """Samples/s on 1 and 2 GPUs, and memory per GPU, for both batch conventions."""
    fig, axes = figure(10, 4, ncols=2)
    labels, one, two, m1, m2 = [], [], [], [], []
    for key, label in (("fixed_global", "fixed global batch"), ("fixed_per_gpu", "fixed per-GPU batch")):
        s = summary.get(key)
        if not s:
            continue
        labels.append(f"{label}\n(eff. {100 * s['efficiency']:.1f} %)")
        one.append(s["samples_per_s_1"])
        two.append(s["samples_per_s_2"])
        m1.append(s["memory_gb_1"] or 0.0)
        m2.append(s["memory_gb_2"] or 0.0)
    x = range(len(labels))
    w = 0.38
    axes[0].bar([i - w / 2 for i in x], one, w, label="1 GPU")
    axes[0].bar([i + w / 2 for i in x], two, w, label="2 GPUs")
    axes[0].plot([i + w / 2 for i in x], [2 * v for v in one], "k_", ms=30, mew=2, label="2 × 1 GPU (perfect)")
    axes[0].set_xticks(list(x), labels, fontsize=8)
    axes[0].set_ylabel("samples / s")
    axes[0].legend(fontsize=8)
    axes[1].bar([i - w / 2 for i in x], m1, w, label="1 GPU")
    axes[1].bar([i + w / 2 for i in x], m2, w, label="each of 2 GPUs")
    axes[1].set_xticks(list(x), [lbl.split("\n")[0] for lbl in labels], fontsize=8)
    axes[1].set_ylabel("peak memory per GPU (GB)" if any(m1) else "peak memory: n/a on CPU")
    axes[1].legend(fontsize=8)
    fig.suptitle("Scaling from 1 to 2 GPUs")
    stamp(fig, where)
    return fig, axes


def plot_source_comparison(rows: Mapping[str, Mapping[str, Any] | None], where: Any) -> tuple[Any, Any]:
    """Speed-up over 1 GPU and exposed communication share per path, ours next to the source's."""
    from ..report.training import PATHS, SOURCE_ROW_FOR, SOURCE_TABLE

    src = {r["path"]: r for r in SOURCE_TABLE}
    base = rows.get("1gpu")
    fig, axes = figure(10, 4, ncols=2)
    keys = list(PATHS)
    ours = [(rows[k]["samples_per_s"] / base["samples_per_s"]) if (rows.get(k) and base and rows[k].get("status") == "ok"
                                                                     and base.get("status") == "ok") else 0.0 for k in keys]
    theirs = [src["1 GPU"]["minutes_per_epoch"] / src[SOURCE_ROW_FOR[k]]["minutes_per_epoch"] if k in SOURCE_ROW_FOR else 0.0
              for k in keys]
    is_gpu = getattr(getattr(where, "env", None), "is_gpu", True)
    short = (["1 GPU", "NVLink", "host-staged\n(source: PCIe)", "sockets"] if is_gpu
             else ["1 process", "2 processes\n(gloo)", "host-staged\n(not run)", "sockets\n(not run)"])
    w = 0.38
    x = range(len(keys))
    axes[0].bar([i - w / 2 for i in x], ours, w, label="ours (measured)")
    axes[0].bar([i + w / 2 for i in x], theirs, w, label="source (ResNet-50, as printed)")
    axes[0].axhline(2.0, color="k", ls=":", lw=1)
    axes[0].set_xticks(list(x), short, fontsize=8)
    axes[0].set_ylabel("speed-up over 1 GPU")
    axes[0].legend(fontsize=8)
    comm_ours = [100 * (rows[k].get("comm_share") or 0.0) if rows.get(k) and rows[k].get("status") == "ok" else 0.0 for k in keys[1:]]
    comm_src = [100 * (src[SOURCE_ROW_FOR[k]]["comm_share"] or 0.0) if k in SOURCE_ROW_FOR else 0.0 for k in keys[1:]]
    x2 = range(len(keys) - 1)
    axes[1].bar([i - w / 2 for i in x2], comm_ours, w, label="ours: exposed communication")
    axes[1].bar([i + w / 2 for i in x2], comm_src, w, label="source")
    axes[1].set_xticks(list(x2), short[1:], fontsize=8)
    axes[1].set_ylabel("communication share of a step (%)")
    axes[1].legend(fontsize=8)
    fig.suptitle("The source's table, reproduced with the course UNet")
    stamp(fig, where)
    return fig, axes


def _chosen(rows: Sequence[Mapping[str, Any]], variants: Sequence[str]) -> list[Mapping[str, Any]]:
    """The measured rows of ``variants``, in the order of ``variants``."""
    by = {r["variant"]: r for r in rows if r.get("status") == "ok"}
    return [by[v] for v in variants if v in by]


def _label(row: Mapping[str, Any]) -> str:
    return f"base ({row.get('amp', '?')})" if row["variant"] == "base" else str(row["variant"])


def plot_loss_curves(rows: Sequence[Mapping[str, Any]], variants: Sequence[str], where: Any,
                     title: str = "Loss per step") -> tuple[Any, Any]:
    """The loss curves of some variants, overlaid (same data, same initial weights)."""
    fig, ax = figure(7, 4)
    for row in _chosen(rows, variants):
        ax.plot(range(1, len(row["loss_curve"]) + 1), row["loss_curve"], label=_label(row), lw=1.2)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.legend(fontsize=8)
    stamp(fig, where)
    return fig, ax


def plot_variants(rows: Sequence[Mapping[str, Any]], variants: Sequence[str], where: Any,
                  title: str = "Step time and memory") -> tuple[Any, Any]:
    """Median step time per variant (bars, min–max as a whisker), peak memory per rank written beside."""
    chosen = _chosen(rows, variants)
    fig, ax = figure(8, max(2.6, 0.55 * len(chosen) + 1.4))
    ms = [r["step_ms"] for r in chosen]
    lo = [r["step_ms"] - r.get("step_ms_min", r["step_ms"]) for r in chosen]
    hi = [r.get("step_ms_max", r["step_ms"]) - r["step_ms"] for r in chosen]
    ax.barh(range(len(chosen)), ms, xerr=[lo, hi], color="C0", ecolor="0.4", capsize=3)
    ax.set_yticks(range(len(chosen)), [_label(r) for r in chosen], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("step time (ms): median, whisker from fastest to slowest timed step")
    for i, r in enumerate(chosen):
        mem = r.get("peak_mem_gb")
        text = f"  {mem:.2f} GB peak" if mem is not None else "  memory n/a"
        ax.text(r.get("step_ms_max", r["step_ms"]), i, text, va="center", ha="left", fontsize=7, color="C3")
    ax.set_xlim(0, max([r.get("step_ms_max", r["step_ms"]) for r in chosen] + [1.0]) * 1.35)
    fig.subplots_adjust(left=0.32)
    ax.set_title(title)
    stamp(fig, where)
    return fig, ax


def plot_ranking(ranking: Any, where: Any) -> tuple[Any, Any]:
    """Throughput of each knob relative to the baseline (the closing ranking)."""
    fig, ax = figure(8, max(3.0, 0.35 * len(ranking) + 1.5))
    values = [v if isinstance(v, (int, float)) else 0.0 for v in ranking["throughput vs base"]]
    colours = ["C2" if v >= 1.03 else ("C3" if v < 0.97 else "0.6") for v in values]
    ax.barh(range(len(values)), values, color=colours)
    ax.set_yticks(range(len(values)), list(ranking["knob"]), fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xlabel("throughput relative to the baseline (1 = no change)")
    ax.set_title("What each knob bought")
    stamp(fig, where)
    return fig, ax


def plot_attention(metrics: Mapping[str, Any], where: Any) -> tuple[Any, Any]:
    """Attention block time per SDPA setting, and the UNet with flash on and off."""
    fig, axes = figure(10, 4, ncols=2)
    rows = metrics["attention"]
    axes[0].barh(range(len(rows)), [r["ms"] for r in rows], color="C0")
    axes[0].set_yticks(range(len(rows)), [r["setting"] for r in rows], fontsize=8)
    axes[0].invert_yaxis()
    axes[0].set_xlabel("attention block fwd+bwd (ms, median)")
    u = metrics["unet"]
    axes[1].bar([0, 1], [u["ms_flash_on"], u["ms_flash_off"]], color=["C0", "C1"])
    axes[1].set_xticks([0, 1], ["flash on", "flash off"])
    axes[1].set_ylabel(f"UNet ({u['model']}) fwd+bwd (ms)")
    axes[1].set_title(f"SDPA calls in a UNet forward: {u['sdpa_calls']}", fontsize=9)
    fig.suptitle("enable_flash_sdp changes attention kernels only")
    stamp(fig, where)
    return fig, axes
