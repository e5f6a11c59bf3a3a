"""The figure of notebook 00: where a run's wall time goes. Returns ``(fig, ax)``."""

from __future__ import annotations

from typing import Any

from .style import figure, stamp


def launch_timeline(results: list[Any], names: list[str] | None = None) -> tuple[Any, Any]:
    """Horizontal bars: start-up (call to first workload line) and the rest, per run. Used in notebook 00."""
    fig, ax = figure(7.0, 1.2 + 0.5 * len(results))
    names = names or [r.workload for r in results]
    for i, r in enumerate(results):
        start = r.first_output_s or 0.0
        ax.barh(i, start, color="0.7", label="start-up: interpreters, torch import, rendezvous" if i == 0 else None)
        ax.barh(i, r.wall_s - start, left=start, color="tab:blue", label="workload and teardown" if i == 0 else None)
        ax.text(r.wall_s, i, f" {r.wall_s:.1f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(results)), names)
    ax.set_xlabel("seconds since the call")
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title("Where a run's wall time goes")
    stamp(fig, results[0])
    return fig, ax
