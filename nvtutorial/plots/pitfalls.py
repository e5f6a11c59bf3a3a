"""The figures of notebook 06 (pitfalls): the input pipeline, an OOM and its fixes, idle time.
Each returns ``(fig, ax)``, stamped with where it was measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .style import COLOURS, figure, finish


def loader_sweep(rows: Sequence[Mapping[str, Any]], where: Any, consumes: float | None = None, knee: Any = None,
                 rule: int | None = None):
    """Samples/s of one rank's DataLoader against ``num_workers`` (with and without pinned
    memory), the training step's appetite as a line, and the knee marked (claim C17)."""
    fig, ax = figure(7.0, 4.0)
    for pin in sorted({bool(r["pin_memory"]) for r in rows}):
        sub = sorted((r for r in rows if bool(r["pin_memory"]) == pin), key=lambda r: r["num_workers"])
        ax.plot([r["num_workers"] for r in sub], [r["samples_per_s"] for r in sub], marker="o",
                label=f"pin_memory={pin}")
    if consumes:
        ax.axhline(consumes, color="0.3", ls="--", lw=0.8)
        ax.text(0, consumes, " what one training step consumes", va="bottom", fontsize=7)
    if knee is not None:
        ax.plot([knee["num_workers"]], [knee["samples_per_s"]], marker="*", ms=16, color="C3", ls="none",
                label=f"knee: {knee['num_workers']} workers (90 % of the best)")
    if rule is not None:
        ax.axvline(rule, color="C2", ls=":", lw=0.8)
        ax.text(rule, ax.get_ylim()[1] * 0.95, " 4 × GPUs", fontsize=7, color="C2", va="top")
    ax.set_xlabel("num_workers (per rank)")
    ax.set_ylabel("samples/s per rank")
    ax.set_title("The input pipeline: DataLoader throughput")
    ax.legend(fontsize=7)
    finish(fig, where)
    return fig, ax


def oom_fixes(rows: Sequence[Mapping[str, Any]], cap_mib: float, where: Any):
    """Peak memory of each variant of the training step against the memory cap; red = OOM."""
    fig, ax = figure(8.0, 0.9 + 0.6 * max(1, len(rows)))
    for i, r in enumerate(rows):
        colour = COLOURS["exposed"] if r.get("outcome") == "OOM" else COLOURS["compute"]
        ax.barh(i, r.get("peak_reserved_mib", 0) / 1024, color=colour, height=0.6)
        note = r.get("outcome", "")
        if r.get("step_ms"):
            note += f", {r['step_ms']:.0f} ms"
        ax.text(r.get("peak_reserved_mib", 0) / 1024, i, f"  {note}", va="center", fontsize=8)
    ax.axvline(cap_mib / 1024, color="0.2", ls="--", lw=1, label=f"the cap ({cap_mib / 1024:.1f} GiB)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_yticks(range(len(rows)), [r["variant"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("peak reserved GiB")
    ax.set_title("An OOM and the fixes that work")
    finish(fig, where)
    return fig, ax


def idle_bars(values: Mapping[str, float], where: Any, title: str, unit: str = "s"):
    """A few labelled durations side by side (e.g. validation patterns)."""
    fig, ax = figure(6.5, 0.9 + 0.55 * max(1, len(values)))
    labels = list(values)
    ax.barh(range(len(labels)), [values[k] for k in labels], color=COLOURS["compute"], height=0.6)
    for i, k in enumerate(labels):
        ax.text(values[k], i, f"  {values[k]:.3g} {unit}", va="center", fontsize=8)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.set_xlim(0, max(values.values(), default=1.0) * 1.3)
    finish(fig, where)
    return fig, ax
