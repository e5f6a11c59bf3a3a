"""The figures of notebook 06 (pitfalls): the input pipeline, an OOM and its fixes.
Each returns ``(fig, ax)``, stamped with where it was measured."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .style import COLOURS, figure, finish


def loader_sweep(per_rank: Sequence[Mapping[str, Any]], where: Any, rule: int | None = None,
                 knees: Sequence[int] | None = None):
    """Steady samples/s of the training loop against ``num_workers``, one line per rank and
    ``pin_memory`` setting (a bar for the spread of the windows), the step alone as a dashed line
    per rank, the source's ``4 × GPUs`` as a dotted line and each rank's knee as a star (claim C17).
    ``per_rank``: each rank's ``dataloader`` block of the ``pitfalls`` workload."""
    fig, ax = figure(7.5, 4.2)
    markers = {False: "o", True: "s"}
    for rank, d in enumerate(per_rank):
        colour = f"C{rank}"
        for pin in sorted({bool(r["pin_memory"]) for r in d["rows"]}):
            rows = sorted((r for r in d["rows"] if bool(r["pin_memory"]) == pin), key=lambda r: r["num_workers"])
            x = [r["num_workers"] for r in rows]
            mid = [statistics.median(r["samples_per_s"]) for r in rows]
            low = [m - min(r["samples_per_s"]) for m, r in zip(mid, rows)]
            high = [max(r["samples_per_s"]) - m for m, r in zip(mid, rows)]
            ax.errorbar(x, mid, yerr=[low, high], marker=markers[pin], color=colour, capsize=3,
                        ls="-" if not pin else "--", label=f"rank {rank}, pin_memory={pin}")
        step = statistics.median(d["step_only_samples_per_s"])
        ax.axhline(step, color=colour, ls=":", lw=1)
        ax.annotate(f"rank {rank}: the step alone", (1.0, step), xycoords=("axes fraction", "data"), fontsize=7,
                    ha="right", va="bottom", color=colour)
        if knees is not None:
            knee = knees[rank]
            row = next(r for r in d["rows"] if r["num_workers"] == knee and not r["pin_memory"])
            ax.plot([knee], [statistics.median(row["samples_per_s"])], marker="*", ms=14, color=colour, ls="none")
    if rule is not None:
        ax.axvline(rule, color="0.4", ls=":", lw=1)
        ax.annotate(" 4 × GPUs", (rule, 0.02), xycoords=("data", "axes fraction"), fontsize=7, color="0.3")
    ax.set_xlabel("num_workers per rank")
    ax.set_ylabel("samples/s per rank, steady state")
    ax.set_ylim(bottom=0)
    ax.set_title("The training loop's rate against DataLoader workers (★: fewest within the noise of the best)")
    ax.legend(fontsize=7, loc="lower right")
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
