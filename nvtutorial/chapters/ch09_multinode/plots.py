"""Plots for notebook 09: a training that lost a rank or a node, and the cost of the node boundary.

Each takes data and returns ``(fig, ax)``; every figure is stamped with where it was measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial.plots.style import COLOURS, figure, finish

if TYPE_CHECKING:
    from nvtutorial.chapters.ch09_multinode.lab import ElasticOutcome


def plot_recovery(outcomes: Mapping[str, ElasticOutcome]) -> tuple[Any, Any]:
    """Steps done against time, one panel per run: each attempt, each kill, and the steps done twice.

    The steps drawn twice (done before a kill, then again after the restart) are the steps lost;
    the gap after a kill is the time to recover. A run with several faults shows them all.
    """
    fig, axes = figure(9.0 * len(outcomes), 4.2, ncols=len(outcomes), squeeze=False)
    axes = axes[0]
    for ax, (name, o) in zip(axes, outcomes.items()):
        for a in sorted({a for _, a, _ in o.steps}):
            pts = [(t, s) for t, b, s in o.steps if b == a]
            ax.plot([t for t, _ in pts], [s for _, s in pts], ".", ms=4, color=f"C{a}",
                    label="first attempt" if a == 0 else f"after restart {a}")
        kills = range(len(o.kill_times)) if o.kill_times else ([0] if o.killed_at_s is not None else [])
        for i in kills:
            p = o.part(i) if o.kill_times else o
            what = p.fault.kind if p.fault is not None else "kill"
            ax.axvline(p.killed_at_s, color=COLOURS["exposed"], lw=1.2, ls="--",
                       label="SIGKILL (rank or node)" if i == 0 else None)
            if p.resumed_from is not None and p.last_step_before_kill is not None and p.steps_lost:
                ax.axhspan(p.resumed_from + 0.5, p.last_step_before_kill + 0.5, color=COLOURS["idle"], alpha=0.5,
                           label="steps done twice" if i == 0 else None)
            if p.recovery_s is not None:
                ax.annotate(f"{what} lost: {p.steps_lost} steps again,\n{p.recovery_s:.1f} s to the first new step",
                            xy=(p.killed_at_s + p.recovery_s, (p.resumed_from or 0) + 1), xytext=(-120, -48),
                            textcoords="offset points", fontsize=8, arrowprops={"arrowstyle": "->", "lw": 0.8})
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("seconds since the agents started")
        ax.set_ylabel("steps completed (rank 0)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Killed in the middle of training, brought back by torchrun from the last checkpoint")
    finish(fig, next(iter(outcomes.values())).where)
    return fig, axes


def plot_boundary(rows: Sequence[Mapping[str, Any]]) -> tuple[Any, Any]:
    """Per placement, a step split into the part without the all-reduce and the exposed communication (ms)."""
    fig, ax = figure(8, 1.2 + 0.9 * len(rows))
    names = [r["placement"] for r in rows]
    compute = [r["step without all-reduce (ms)"] or 0.0 for r in rows]
    exposed = [max(r["exposed communication (ms)"] or 0.0, 0.0) for r in rows]
    ax.barh(names, compute, color=COLOURS["compute"], label="step without the all-reduce (no_sync)")
    ax.barh(names, exposed, left=compute, color=COLOURS["exposed"], label="exposed communication")
    for i, (c, e) in enumerate(zip(compute, exposed)):
        ax.text(c + e, i, f"  {c + e:.3g} ms ({e:.3g} exposed)", va="center", fontsize=8)
    ax.set_xlabel("median step time (ms)")
    ax.set_xlim(0, max(c + e for c, e in zip(compute, exposed)) * 1.45)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("The same DDP step on each side of the node boundary")
    finish(fig, " | ".join(dict.fromkeys(r["measured on"] for r in rows)))
    return fig, ax
