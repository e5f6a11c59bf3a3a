"""The bandwidth figures of notebooks 01 and 02. Each returns ``(fig, ax)``.

Sizes span decades, so the size axis is logarithmic with sizes as labels (1 KiB, 1 MiB, 1 GiB);
bandwidths that span decades are on a logarithmic axis labelled with plain numbers (0.1, 1, 10, 100),
never ``3×10²``. Results that are the same within their noise are drawn as their difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch01_hardware import schema_allreduce
from nvtutorial.chapters.ch01_hardware.report import NcclTestsRun, Sweep, is_gpu, reference_nccl_tests, sweep_rows
from nvtutorial.chapters.ch01_hardware.report_lab import LabRun, compare_paths
from nvtutorial.plots.style import figure, stamp
from nvtutorial.units import format_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from nvtutorial.machine.links import Expectation
    from nvtutorial.results import Where


def size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """A log₂ size axis with at most 8 labelled sizes (``1 KiB``, ``1 MiB``...)."""
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 8:
        step = -(-len(ticks) // 8)
        ticks = ticks[::step] + ([ticks[-1]] if ticks[-1] not in ticks[::step] else [])
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t).replace(" ", "\u00a0") for t in ticks], rotation=30, ha="right", fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("message size S (bytes of the buffer)")


def plain_log_axis(ax: Axes, lo: float, hi: float, axis: str = "y") -> None:
    """A log axis from ``lo`` to ``hi`` with ticks at 1, 2, 5 × 10ᵏ labelled as plain numbers."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    getattr(ax, f"set_{axis}scale")("log")
    steps = (1, 2, 5) if hi / lo < 1e3 else (1,)  # over more than three decades, powers of ten only
    ticks = [
        m * 10.0**k
        for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        for m in steps
        if lo / 1.5 <= m * 10.0**k <= hi * 1.5
    ]
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_minor_locator(NullLocator())
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def plot_busbw(
    series: Mapping[str, Sweep | Sequence[schema_allreduce.Row]],
    where: Where,
    physical: float | None = None,
    reference: Mapping[str, NcclTestsRun] | None = None,
    title: str = "all-reduce bus bandwidth",
) -> tuple[Figure, Axes]:
    """busbw against size, both on log axes, one line per series (an ``allreduce_bench`` run or its rows); optional
    physical limit and reference points (nccl-tests on the reference machine, drawn hollow and labelled as such:
    its parsed output)."""
    fig, ax = figure()
    sizes: list[int] = []
    values: list[float] = []
    for label, data in series.items():
        rows = sorted(sweep_rows(data), key=lambda r: r.size)
        sizes += [r.size for r in rows]
        values += [r.busbw for r in rows]
        ax.plot([r.size for r in rows], [r.busbw for r in rows], marker="o", ms=4, label=label)
    for label, data in (reference or {}).items():
        points = sorted(data.busbw_by_size().items())
        ref_sizes, ref_busbw = [size for size, _ in points], [busbw for _, busbw in points]
        sizes += ref_sizes
        values += [v for v in ref_busbw if v is not None]
        ax.plot(ref_sizes, ref_busbw, ls="none", marker="s", mfc="none", ms=6, label=label)
    if physical:
        values.append(physical)
        ax.axhline(physical, color="0.3", ls="--", lw=1)
        ax.annotate(
            f"physical limit {physical:.0f} GB/s",
            (0.01, physical),
            xycoords=("axes fraction", "data"),
            va="bottom",
            fontsize=8,
            color="0.3",
        )
    if sizes:
        size_axis(ax, sizes)
    positive = [v for v in values if v and v > 0]
    if positive:
        plain_log_axis(ax, min(positive), max(positive))
    ax.set_ylabel("busbw (GB/s, log scale)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.93))
    fig.subplots_adjust(bottom=0.28)  # rotated size labels, the axis label, then the stamp
    stamp(fig, where)
    return fig, ax


def plot_lab(
    lab: Sequence[LabRun], title: str = "all-reduce busbw on three paths (the link A/B lab)"
) -> tuple[Figure, Axes]:
    """An A/B lab: busbw against size, one line per path with the transport its logs name (notebook 01)."""
    series = {f"{run.path.name} ({run.transport.summary})": run.result for run in lab}
    if not is_gpu(lab[0].result):
        title += ": CPU simulation"
    return plot_busbw(series, lab[0].result, title=title)


def plot_sweep(result: Sweep, expectation: Expectation | None = None) -> tuple[Figure, Axes]:
    """The all-reduce sweep; on GPUs with the physical limit and nccl-tests' reference points."""
    if is_gpu(result):
        return plot_busbw(
            {"torch all_reduce (this run)": result},
            result,
            physical=expectation.physical_gbps if expectation else None,
            reference={"nccl-tests on the reference 2× H200 (saved)": reference_nccl_tests()["default"]},
        )
    return plot_busbw(
        {"torch all_reduce over gloo (CPU simulation)": result},
        result,
        title="all-reduce bus bandwidth: CPU simulation, not a GPU measurement",
    )


def plot_difference(
    ab: Sequence[LabRun], base: str = "default", other: str = "source's settings", title: str | None = None
) -> tuple[Figure, Axes]:
    """``other`` against ``base`` size by size as a difference in %, with each size's noise band (notebook 02).

    Two runs that measure the same thing would be one line drawn over another; their difference shows
    whether it ever leaves the noise.
    """
    runs = {run.path.name: run for run in ab}
    sizes = sorted({r.size for r in runs[base].rows} & {r.size for r in runs[other].rows})
    comparisons = [compare_paths(ab, base, other, size)[1] for size in sizes]
    fig, ax = figure(7.0, 3.6)
    change = [100 * c.change for c in comparisons]
    noise = [100 * c.noise for c in comparisons]
    ax.fill_between(
        sizes, [-n for n in noise], noise, color="0.85", label="noise (spread of the repeats, at least 1 %)"
    )
    ax.axhline(0, color="0.4", lw=1)
    ax.plot(sizes, change, marker="o", ms=5, color="tab:orange", label=f"{other} ÷ {base} − 1")
    size_axis(ax, sizes)
    top = max([abs(v) for v in change + noise] + [1.0]) * 1.5
    ax.set_ylim(-top, top)
    ax.set_ylabel("busbw difference (%)")
    ax.set_title(title or f"{other} against {base}: the difference in busbw")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.subplots_adjust(bottom=0.3)
    stamp(fig, runs[base].result)
    return fig, ax
