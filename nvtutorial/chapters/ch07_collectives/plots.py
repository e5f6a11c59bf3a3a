"""Plots of notebook 07: the ring against NCCL, sparse against dense, gradient density, compression hooks.

Each function takes the measured data (the typed rows of ``schema.py`` and ``schema_compression.py``, or the raw JSON
notebook 07 passes, typed where it comes in by ``results.rows_typed`` and ``schema_compression.rank_typed``) and
where it was measured, and returns ``(fig, ax)``. Where values are close, the figures show ratios against the
baseline, not the values themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial.chapters.ch01_hardware.plots import size_axis
from nvtutorial.chapters.ch07_collectives.schema import RingRow, SparseRow
from nvtutorial.chapters.ch07_collectives.schema_compression import DensityRow, Rank, rank_typed
from nvtutorial.plots.style import figure, finish, plain_log_ticks
from nvtutorial.results import Where, rows_typed

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Raw = Mapping[str, Any]
"""A rank's metrics, or one of its rows, as the run's JSON holds them: what notebook 07 passes."""


def ring_share(rows: Sequence[RingRow | Raw], where: Where, target: float | None = None) -> tuple[Figure, Axes]:
    """The ring's bus bandwidth as a share of ``all_reduce``'s, against message size, one line per way
    of running it (one rank's ``Rank.ring``, or ``report.ring_rows``)."""
    fig, ax = figure()
    timed = [r for r in rows_typed(RingRow, rows) if r.error is None]
    for v in dict.fromkeys(r.variant for r in timed):
        sub = sorted((r for r in timed if r.variant == v), key=lambda r: r.size_bytes)
        ax.plot([r.size_bytes for r in sub], [r.busbw_ratio for r in sub], "o-", label=v)
    ax.axhline(1.0, color="0.4", lw=1, ls=":")
    if target:
        ax.axhline(target, color="#C44E52", lw=1, ls="--", label=f"the course's goal ({target:.0%})")
    size_axis(ax, [r.size_bytes for r in timed])
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis, "×")
    ax.set_xlabel("message size")
    ax.set_ylabel("ring busbw ÷ dist.all_reduce busbw")
    ax.set_title("A ring from send/recv against the library's all-reduce (1 = as fast)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    finish(fig, where)
    return fig, ax


def sparse_vs_dense(rows: Sequence[SparseRow | Raw], where: Where) -> tuple[Figure, Axes]:
    """Bytes and time of the correct sparse all-reduce relative to a dense one, against density (``Rank.sparse``)."""
    fig, ax = figure()
    by_density = sorted(rows_typed(SparseRow, rows), key=lambda r: r.density)
    d = [r.density for r in by_density]
    ax.plot(d, [r.bytes_ratio for r in by_density], "o-", label="bytes sent, sparse ÷ dense")
    ax.plot(d, [r.time_ratio for r in by_density], "s-", label="time, sparse ÷ dense")
    ax.axhline(1.0, color="0.4", lw=1, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis, "×")
    ax.set_xlabel("fraction of non-zero entries (density)")
    ax.set_ylabel("sparse ÷ dense (below 1: sparse wins)")
    ax.set_title("When does sending only the non-zeros pay?")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    finish(fig, where)
    return fig, ax


def gradient_density(rows: Sequence[DensityRow | Raw], where: Where, min_numel: int = 1) -> tuple[Figure, Axes]:
    """Per layer: fraction of gradient entries exactly zero, near zero, and needed for 99 % of the norm
    (``Rank.density``)."""
    rows = [r for r in rows_typed(DensityRow, rows) if r.numel >= min_numel]
    fig, ax = figure(width=9.0, height=4.4)
    x = list(range(len(rows)))
    ax.bar([i - 0.2 for i in x], [r.frac_zero for r in rows], width=0.4, label="exactly zero")
    ax.bar([i + 0.2 for i in x], [r.frac_near_zero for r in rows], width=0.4, label="|g| ≤ 1e-3 · max |g|")
    ax.plot(x, [r.frac_for_energy for r in rows], "k.", label="entries holding 99 % of ‖g‖²")
    ax.axhline(0.075, color="#C44E52", lw=1, ls="--", label="non-zeros allowed for an 85 % saving (7.5 %)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("layer (parameter tensor, in model order)")
    ax.set_ylabel("fraction of the layer's entries")
    ax.set_title("How sparse are the UNet's gradients? (claim C23)")
    step = max(1, len(rows) // 12)
    ax.set_xticks(x[::step])
    ax.set_xticklabels([rows[i].layer for i in x[::step]], rotation=45, ha="right", fontsize=7)
    ax.legend(loc="upper right", fontsize=7)
    finish(fig, where)
    return fig, ax


def hook_step_times(frame: pd.DataFrame, where: Where) -> tuple[Figure, Axes]:
    """Each hook's step time ÷ no compression's on each link, with the noise band of ``compare``
    (a bar inside its band is "no change"), labelled with the MB each rank sends per step."""
    fig, ax = figure(width=8.0, height=4.4)
    links = list(dict.fromkeys(frame["link"]))
    hooks = [h for h in dict.fromkeys(frame["hook"]) if h != "none"]
    width = 0.8 / max(1, len(links))
    for j, link in enumerate(links):
        sub = frame[frame["link"] == link].set_index("hook")
        for i, h in enumerate(hooks):
            if h not in sub.index:
                continue
            x = i + (j - (len(links) - 1) / 2) * width
            ratio, noise = float(sub.loc[h, "step_vs_none"]), float(sub.loc[h, "noise_pct"]) / 100
            ax.bar(x, ratio - 1, bottom=1, width=width * 0.9, color=f"C{j}", label=link if i == 0 else None)
            ax.errorbar(x, 1, yerr=[[noise], [noise]], fmt="none", ecolor="0.3", capsize=3, lw=1)
            ax.annotate(
                f"{sub.loc[h, 'sent_MB_per_step']:.3g} MB",
                (x, max(ratio, 1 + noise)),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.axhline(1.0, color="0.3", lw=1)
    ax.set_xticks(range(len(hooks)))
    ax.set_xticklabels(hooks)
    ax.set_ylabel("step time ÷ no compression (whisker: noise)")
    ax.set_title("Gradient compression: does the step get faster? (labels: MB sent per step per rank)")
    ax.legend(fontsize=8)
    finish(fig, where)
    return fig, ax


def loss_differences(metrics: Rank | Raw, where: Where) -> tuple[Figure, Axes]:
    """Each hook's training loss minus no compression's, step by step (hooks that trained identically
    are named in the title instead of drawn as a flat line on top of each other)."""
    metrics = rank_typed(metrics)
    fig, ax = figure()
    hooks = {h.hook: h.train_loss for h in metrics.hooks}
    base = hooks.get("none", ())
    same = []
    for name, loss in hooks.items():
        if name == "none":
            continue
        diff = [a - b for a, b in zip(loss, base)]
        if not any(diff):
            same.append(name)
            continue
        ax.plot(range(1, len(diff) + 1), diff, lw=1.2, label=name)
    ax.axhline(0.0, color="0.3", lw=1)
    ax.axvline(metrics.warmup + 0.5, color="0.5", ls=":", lw=1)
    ax.set_yscale("symlog", linthresh=1e-5)
    ax.set_xlabel("step (dotted line: end of the untimed warm-up)")
    ax.set_ylabel("loss − loss without compression")
    title = f"Does compression change what the UNet learns? — {metrics.link}"
    if same:
        title += f"\nidentical to no compression (not drawn): {', '.join(same)}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    finish(fig, where)
    return fig, ax
