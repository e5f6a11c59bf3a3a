"""Plots of notebook 07: collectives by hand, sparse all-reduce, gradient density, compression hooks.

Each function takes the measured data and where it was measured, and returns ``(fig, ax)``.
"""

from __future__ import annotations

from typing import Any

from .style import figure, stamp


def ring_vs_all_reduce(rows: list[dict[str, Any]], where: Any) -> tuple[Any, Any]:
    """Bus bandwidth of the hand-written ring and of ``dist.all_reduce`` against message size."""
    fig, ax = figure()
    sizes = [r["size_bytes"] for r in rows]
    ax.plot(sizes, [r["all_reduce_busbw_gbs"] for r in rows], "o-", label="dist.all_reduce (NCCL / gloo)")
    ax.plot(sizes, [r["ring_busbw_gbs"] for r in rows], "s--", label="ring by hand (batch_isend_irecv)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("All-reduce from primitives against the library's")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    stamp(fig, where)
    return fig, ax


def sparse_vs_dense(rows: list[dict[str, Any]], where: Any) -> tuple[Any, Any]:
    """Bytes and time of the correct sparse all-reduce relative to a dense one, against density."""
    fig, ax = figure()
    rows = sorted(rows, key=lambda r: r["density"])
    d = [r["density"] for r in rows]
    ax.plot(d, [r["bytes_ratio"] for r in rows], "o-", label="bytes sent, sparse ÷ dense")
    ax.plot(d, [r["time_ratio"] for r in rows], "s-", label="time, sparse ÷ dense")
    ax.axhline(1.0, color="0.4", lw=1, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fraction of non-zero entries (density)")
    ax.set_ylabel("sparse ÷ dense (below 1: sparse wins)")
    ax.set_title("When does sending only the non-zeros pay?")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    stamp(fig, where)
    return fig, ax


def gradient_density(rows: list[dict[str, Any]], where: Any, min_numel: int = 1) -> tuple[Any, Any]:
    """Per layer: fraction of gradient entries exactly zero, near zero, and needed for 99 % of the norm."""
    rows = [r for r in rows if r["numel"] >= min_numel]
    fig, ax = figure(width=9.0, height=4.2)
    x = list(range(len(rows)))
    ax.bar([i - 0.2 for i in x], [r["frac_zero"] for r in rows], width=0.4, label="exactly zero")
    ax.bar([i + 0.2 for i in x], [r["frac_near_zero"] for r in rows], width=0.4, label="|g| ≤ 1e-3 · max |g|")
    ax.plot(x, [r["frac_for_energy"] for r in rows], "k.", label="entries holding 99 % of ‖g‖²")
    ax.set_ylim(0, 1)
    ax.set_xlabel("layer (parameter tensor, in model order)")
    ax.set_ylabel("fraction of the layer's entries")
    ax.set_title("How sparse are the UNet's gradients? (claim C23)")
    step = max(1, len(rows) // 12)
    ax.set_xticks(x[::step])
    ax.set_xticklabels([rows[i]["layer"] for i in x[::step]], rotation=45, ha="right", fontsize=7)
    ax.legend(loc="upper right", fontsize=8)
    fig.subplots_adjust(bottom=0.35)
    stamp(fig, where)
    return fig, ax


def hook_step_times(frame: Any, where: Any) -> tuple[Any, Any]:
    """Median step time of every hook, one bar per link, with the bytes each sends per step."""
    fig, ax = figure(width=8.0, height=4.2)
    links = list(dict.fromkeys(frame["link"]))
    hooks = list(dict.fromkeys(frame["hook"]))
    width = 0.8 / max(1, len(links))
    for j, link in enumerate(links):
        sub = frame[frame["link"] == link].set_index("hook")
        xs = [i + (j - (len(links) - 1) / 2) * width for i in range(len(hooks))]
        ys = [float(sub.loc[h, "step_ms"]) if h in sub.index else float("nan") for h in hooks]
        bars = ax.bar(xs, ys, width=width, label=link)
        if j == 0:
            for bar, h in zip(bars, hooks):
                if h in sub.index:
                    ax.annotate(f"{sub.loc[h, 'sent_MB_per_step']:.3g} MB", (bar.get_x() + bar.get_width() / 2,
                                bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(hooks)))
    ax.set_xticklabels(hooks)
    ax.set_ylabel("median training step (ms)")
    ax.set_title("Gradient compression: step time (labels: MB sent per step per rank)")
    ax.legend()
    stamp(fig, where)
    return fig, ax


def loss_curves(metrics: dict[str, Any], where: Any) -> tuple[Any, Any]:
    """Training loss of every step for each hook (one run), validation points as markers."""
    fig, ax = figure()
    for h in metrics["hooks"]:
        (line,) = ax.plot(range(1, len(h["train_loss"]) + 1), h["train_loss"], lw=1.2, label=h["hook"])
        ax.plot([e["step"] for e in h["evals"]], [e["loss"] for e in h["evals"]], "o", color=line.get_color(), ms=4)
    ax.axvline(metrics.get("warmup", 0) + 0.5, color="0.5", ls=":", lw=1)
    ax.set_xlabel("step (dotted line: end of the untimed warm-up; dots: validation loss)")
    ax.set_ylabel("loss")
    ax.set_title(f"Does compression change what the UNet learns? — {metrics.get('link', '')}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    stamp(fig, where)
    return fig, ax
