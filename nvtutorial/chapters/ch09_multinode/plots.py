"""Plots for notebook 09: a training that lost a rank or a node, and the cost of the node boundary.

Each takes data and returns ``(fig, ax)``; every figure is stamped with where it was measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial.plots.style import COLOURS, figure, finish

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from nvtutorial.chapters.ch09_multinode.schema_outcome import ElasticOutcome


def plot_recovery(outcomes: Mapping[str, ElasticOutcome]) -> tuple[Figure, np.ndarray]:
    """Steps done against time from the agents' start, one panel per run: the start-up before the first step and
    each fault's recovery (from the kill to the first new step) shaded and timed, each attempt's steps, each kill,
    and the steps done twice. The title says how much of the run was training."""
    fig, axes = figure(10.0 * len(outcomes), 4.4, ncols=len(outcomes), squeeze=False)
    axes = axes[0]
    for ax, (name, o) in zip(axes, outcomes.items()):
        first_steps = {a: min(t for t, b, _ in o.steps if b == a) for a in {a for _, a, _ in o.steps}}
        end = max([t for t, _, _ in o.steps] + [t for t, _ in o.events] + [1.0])
        top = max([s for _, _, s in o.steps] + [1])
        if 0 in first_steps:
            _draw_start_up(ax, first_steps[0], top)
        for a in sorted(first_steps):
            pts = [(t, s) for t, b, s in o.steps if b == a]
            ax.plot(
                [t for t, _ in pts],
                [s for _, s in pts],
                ".",
                ms=5,
                color=f"C{a}",
                label="first attempt" if a == 0 else f"after restart {a}",
            )
        kills = range(len(o.kill_times)) if o.kill_times else ([0] if o.killed_at_s is not None else [])
        for i in kills:
            _draw_fault(ax, o.part(i) if o.kill_times else o, i, top)
        training = sum(max(t for t, b, _ in o.steps if b == a) - first_steps[a] for a in first_steps)
        ax.set_xlim(0, end * 1.02)
        ax.set_ylim(0, top * 1.22)
        ax.set_title(
            f"{name}: {training:.1f} s of the {end:.0f} s were training steps; the rest: start-up, recovery and "
            "the agents' exit",
            fontsize=10,
        )
        ax.set_xlabel("seconds since the torchrun agents started")
        ax.set_ylabel("steps completed (rank 0)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Killed in the middle of training, brought back by torchrun from the last checkpoint")
    finish(fig, next(iter(outcomes.values())).where)
    return fig, axes


def _draw_start_up(ax: Axes, first_step: float, top: float) -> None:
    """The start-up before the first step: shaded and timed."""
    ax.axvspan(0, first_step, color=COLOURS["idle"], alpha=0.6, lw=0, label="start-up: agents, imports, rendezvous")
    ax.text(first_step / 2, top * 1.02, f"start-up\n{first_step:.1f} s", ha="center", va="bottom", fontsize=8)


def _draw_fault(ax: Axes, p: ElasticOutcome, i: int, top: float) -> None:
    """Fault ``i`` (``p``: the outcome as seen from it): the kill, the recovery shaded and timed, the steps done twice;
    only the first fault's are labelled."""
    if p.killed_at_s is None:  # no kill: nothing to draw (plot_recovery draws only the kills)
        return
    what = p.fault.kind if p.fault is not None else "kill"
    ax.axvline(
        p.killed_at_s, color=COLOURS["exposed"], lw=1.2, ls="--", label="SIGKILL (rank or node)" if i == 0 else None
    )
    if p.recovery_s is not None:
        ax.axvspan(
            p.killed_at_s,
            p.killed_at_s + p.recovery_s,
            color=COLOURS["exposed"],
            alpha=0.12,
            lw=0,
            label="recovery: kill to first new step" if i == 0 else None,
        )
        ax.text(
            p.killed_at_s + p.recovery_s / 2,
            top * 1.02,
            f"{what} lost: back after\n{p.recovery_s:.1f} s, {p.steps_lost} steps again",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if p.resumed_from is not None and p.last_step_before_kill is not None and p.steps_lost:
        ax.axhspan(
            p.resumed_from + 0.5,
            p.last_step_before_kill + 0.5,
            color=COLOURS["phase"],
            alpha=0.15,
            lw=0,
            label="steps done twice" if i == 0 else None,
        )


def plot_boundary(rows: Sequence[Mapping[str, Any]]) -> tuple[Figure, Axes]:
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
