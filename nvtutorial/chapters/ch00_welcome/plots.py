"""The figure of notebook 00: where a run's wall time goes. Returns ``(fig, ax)``."""

from __future__ import annotations

from typing import Any

from nvtutorial.plots.style import figure, stamp

STAMP_INCHES = 0.3
"""Room under the axis label for the "measured on" line, in inches (a fraction would shrink with the figure)."""


def launch_timeline(results: list[Any], names: list[str] | None = None) -> tuple[Any, Any]:
    """Horizontal bars: start-up (call to first workload line) and the rest, per run. Used in notebook 00."""
    height = 1.9 + 0.45 * len(results)
    fig, ax = figure(7.0, height)
    names = names or [r.workload for r in results]
    for i, r in enumerate(results):
        start = r.first_output_s or 0.0
        ax.barh(i, start, color="0.7", label="start-up: interpreters, torch import, rendezvous" if i == 0 else None)
        ax.barh(i, r.wall_s - start, left=start, color="tab:blue", label="workload and teardown" if i == 0 else None)
        ax.text(r.wall_s, i, f" {r.wall_s:.1f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(results)), names)
    ax.set_ylim(-0.6, len(results) - 0.4)
    ax.set_xlim(0, max(r.wall_s for r in results) * 1.15)
    ax.set_xlabel("seconds since the call")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, STAMP_INCHES / height),
        ncol=2,
        fontsize=7,
        frameon=False,
    )
    ax.set_title("Where a run's wall time goes")
    fig.subplots_adjust(left=0.14, right=0.97, top=1 - 0.4 / height, bottom=(0.85 + STAMP_INCHES) / height)
    stamp(fig, results[0])
    return fig, ax
