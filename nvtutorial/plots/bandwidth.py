"""The bandwidth figures of notebooks 01 and 02: busbw against message size. Each returns ``(fig, ax)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..report.bandwidth import LabRun, NcclTestsRun, is_gpu, reference_nccl_tests, rows_of
from ..units import format_size
from .style import figure, stamp


def _size_axis(ax: Any, sizes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 8:
        step = -(-len(ticks) // 8)
        ticks = ticks[::step] + ([ticks[-1]] if ticks[-1] not in ticks[::step] else [])
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t).replace(" ", "\u00a0") for t in ticks], rotation=30, ha="right", fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("message size S (bytes of the buffer)")


def plot_busbw(series: Mapping[str, Any], where: Any, physical: float | None = None,
               reference: Mapping[str, Any] | None = None, logy: bool = False,
               title: str = "all-reduce bus bandwidth") -> tuple[Any, Any]:
    """busbw against size, one line per series (a RunResult or rows); optional physical limit and
    reference points (nccl-tests on the reference machine, drawn hollow and labelled as such)."""
    fig, ax = figure()
    sizes: list[int] = []
    for label, data in series.items():
        rows = sorted(rows_of(data), key=lambda r: r["size"])
        xs = [r["size"] for r in rows]
        sizes += xs
        ax.plot(xs, [r["busbw"] for r in rows], marker="o", ms=4, label=label)
    for label, data in (reference or {}).items():
        rows = sorted(data.rows if isinstance(data, NcclTestsRun) else data, key=lambda r: r["size"])
        xs = [r["size"] for r in rows]
        sizes += xs
        ax.plot(xs, [r["busbw"] for r in rows], ls="none", marker="s", mfc="none", ms=6, label=label)
    if physical:
        ax.axhline(physical, color="0.3", ls="--", lw=1)
        ax.annotate(f"physical limit {physical:.0f} GB/s", (0.01, physical), xycoords=("axes fraction", "data"),
                    va="bottom", fontsize=8, color="0.3")
    if sizes:
        _size_axis(ax, sizes)
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.subplots_adjust(bottom=0.26)  # rotated size labels, the axis label, then the stamp
    stamp(fig, where)
    return fig, ax


def plot_lab(lab: Sequence[LabRun], title: str = "all-reduce busbw on three paths (the link A/B lab)") -> tuple[Any, Any]:
    """An A/B lab: busbw against size, one line per path with the transport its logs name; log scale.
    Used in notebook 01 (the three paths) and notebook 02 (the source's settings)."""
    series = {f"{run.path.name} ({run.transport.summary})": run.result for run in lab}
    if not is_gpu(lab[0].result):
        title += ": CPU simulation"
    return plot_busbw(series, lab[0].result, logy=True, title=title)


def plot_sweep(result: Any, expectation: Any = None) -> tuple[Any, Any]:
    """The all-reduce sweep; on GPUs with the physical limit and nccl-tests' reference points."""
    if is_gpu(result):
        return plot_busbw({"torch all_reduce (this run)": result}, result,
                          physical=expectation.physical_gbps if expectation else None,
                          reference={"nccl-tests on the reference 2× H200 (saved)": reference_nccl_tests()["default"]})
    return plot_busbw({"torch all_reduce over gloo (CPU simulation)": result}, result,
                      title="all-reduce bus bandwidth: CPU simulation, not a GPU measurement")
