"""Notebook 10's figures: the floor-and-roof fits of the calibration, the roofline with the problems on it and the
ceiling each one's floor sets, the α–β fits with their residuals, the model's error per problem, the pipeline's
per-stage timelines, the capstone's scores. Each takes data and returns ``(fig, ax)`` and says where it was
measured (``plots.style``); kernel side, never launches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch10_cost_model import report
from nvtutorial.plots.style import COLOURS, figure, finish
from nvtutorial.results import RunResult, Where, typed

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def floor_fits(fits: Mapping[str, report.FloorFit], where: Where) -> tuple[Figure, np.ndarray]:
    """Each sweep's time per call against its work (log–log) with its fit ``max(α, work / rate)``: flat at the
    floor α, then the roof's line; the kernel's counterpart of the α–β plot. Left the multiplies, right the copies."""
    import numpy as np

    fig, axes = figure(9.0, 3.6, ncols=2)
    for ax, kind, unit in ((axes[0], "matmul", "FLOPs per call (2n³)"), (axes[1], "copy", "bytes moved per call")):
        for i, (what, f) in enumerate((k, f) for k, f in fits.items() if k.startswith(kind)):
            work = np.array(f.work)
            grid = np.logspace(np.log10(work.min() / 2), np.log10(work.max() * 2), 100)
            ax.plot(work, np.array(f.measured) * 1e6, "o", color=f"C{i}", label=f"{what}, measured")
            ax.plot(
                grid,
                np.maximum(f.floor, grid / f.rate) * 1e6,
                "-",
                color=f"C{i}",
                lw=1,
                label=f"floor {f.floor * 1e6:.3g} µs, roof {f.rate / (1e12 if kind == 'matmul' else 1e9):.4g} "
                + ("TFLOP/s" if kind == "matmul" else "GB/s"),
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(unit)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("time per call (µs)")
    fig.suptitle("t = max(α, work / roof): the floor of one call, then the roof")
    finish(fig, where)
    return fig, axes


def roofline(cal: report.Calibrated, points: Sequence[tuple[str, float, float, float]] = ()) -> tuple[Figure, Axes]:
    """The roofline of each measured dtype (FLOP/s against FLOPs per byte, log–log) and ``points``:
    ``(label, flops, bytes, measured seconds)`` placed at their intensity and their achieved FLOP/s, each with the
    third ceiling its floor sets: a call of F FLOPs reaches at most F ÷ α, however high the roofs (dashed)."""
    import numpy as np

    fig, ax = figure(7.0, 4.2)
    floor = cal.roofs[cal.compute_dtype].call_s
    lo = min([0.1] + [f / b for _, f, b, _ in points]) / 2
    hi = max([1e4] + [f / b * 2 for _, f, b, _ in points])
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    for i, (dtype, roof) in enumerate(cal.roofs.items()):
        ax.plot(x, np.minimum(roof.flops, x * roof.bandwidth), color=f"C{i}", label=f"roof, {dtype} matmul")
        ax.axvline(roof.ridge, color=f"C{i}", ls=":", lw=0.8)
    for j, (label, flops, nbytes, seconds) in enumerate(points):
        if floor:
            x0 = flops / nbytes
            ax.plot(
                [x0 / 4, x0 * 4],
                [flops / floor] * 2,
                "--",
                color="0.3",
                lw=1,
                label=f"ceiling of one call, F ÷ floor ({floor * 1e6:.3g} µs)" if j == 0 else None,
            )
        ax.plot(flops / nbytes, flops / seconds, "o", color=COLOURS["exposed"])
        ax.annotate(label, (flops / nbytes, flops / seconds), textcoords="offset points", xytext=(5, -10), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("The roofline: this device's measured roofs, and where two problems ran")
    ax.legend(fontsize=8, loc="lower right")
    finish(fig, cal.device_where)
    return fig, ax


def link_fit(fits: Mapping[str, report.Fit], extra: pd.DataFrame | None = None) -> tuple[Figure, Axes]:
    """Top: each collective's measured time against its size and the fitted ``α + S · factor / β`` (log–log);
    bottom: the residuals. ``extra``: a ``report.reference_checks`` table drawn as other runs' points."""
    import numpy as np

    fig, (top, bottom) = figure(7.5, 5.5, nrows=2, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for i, (kind, f) in enumerate(fits.items()):
        sizes = np.array(f.sizes, dtype=float)
        top.plot(sizes, np.array(f.measured) * 1e6, "o", color=f"C{i}", label=f"{kind}, measured")
        grid = np.logspace(np.log10(sizes.min()), np.log10(sizes.max() * (4 if extra is not None else 1)), 100)
        model_us = [report.model.collective_time(s, f.link, kind, f.ranks) * 1e6 for s in grid]
        top.plot(
            grid,
            model_us,
            "-",
            color=f"C{i}",
            lw=1,
            label=f"{kind}: α {f.link.alpha * 1e6:.3g} µs, β {f.link.beta / 1e9:.4g} GB/s",
        )
        bottom.plot(sizes, 100 * np.array(f.residuals), "o-", color=f"C{i}", lw=0.8)
    if extra is not None:
        for j, (source, rows) in enumerate(extra.groupby("source", sort=False)):
            top.plot(rows["bytes"], rows["measured (µs)"], "x^sv"[j % 4], color="0.3", label=source)
            bottom.plot(rows["bytes"], 100 * rows["error"], "x^sv"[j % 4], color="0.3")
    bottom.axhspan(-100 * report.TARGET, 100 * report.TARGET, color="0.9", zorder=0)
    bottom.axhline(0, color="0.5", lw=0.8)
    top.set_xscale("log")
    top.set_yscale("log")
    top.set_ylabel("time per call (µs)")
    top.legend(fontsize=7)
    bottom.set_ylabel("model − measured (%)")
    bottom.set_xlabel("bytes of the whole tensor")
    top.set_title("t = α + S · factor / β, fitted on relative residuals")
    finish(fig, next(iter(fits.values())).where)
    return fig, top


def errors(table: pd.DataFrame, where: Where, target: float = report.TARGET) -> tuple[Figure, Axes]:
    """The model's error against the run per timed problem (``problems.problem_table``'s ``model error``: the
    answer, an eager program's band's lower end, ÷ run − 1), with the target's band; a counted problem (the run's
    kind ``counted``: exact by construction, judged by its own verdict) is left out."""
    fig, ax = figure(7.0, 3.6)
    rows = table.dropna(subset=["model error"])
    if "run's kind" in rows:
        rows = rows[rows["run's kind"] != "counted"]
    y = range(len(rows))
    values = [100 * v for v in rows["model error"]]
    ax.barh(
        list(y), values, color=[COLOURS["compute"] if abs(v) <= 100 * target else COLOURS["exposed"] for v in values]
    )
    for i, v in zip(y, values):  # the value too: an error of 0.01 % has no visible bar
        ax.text(v, i, f" {v:+.1f} % ", va="center", ha="left" if v >= 0 else "right", fontsize=8)
    reach = max([100 * target * 1.6] + [abs(v) * 1.35 for v in values])
    ax.set_xlim(-reach, reach)
    ax.axvspan(-100 * target, 100 * target, color="0.92", zorder=0)
    ax.axvline(0, color="0.4", lw=0.8)
    ax.set_yticks(list(y), list(rows.index))
    ax.invert_yaxis()
    ax.set_xlabel(f"the model's answer ÷ run − 1 (%); shaded: ±{target:.0%}")
    ax.set_title("How far the calibrated model is from the run")
    finish(fig, where)
    return fig, ax


def timelines(result: RunResult, step: int = 0) -> tuple[Figure, np.ndarray]:
    """Each schedule's timed step ``step`` on every stage: forward passes (F, the last stage's loss included) and
    backward passes (B) of each micro-batch as boxes, on one clock the stages share (the host's clock on the CPU;
    on GPUs CUDA events from an origin each rank records when an all-reduce ends); the gaps are the bubble."""
    runs = report.schedule_runs(result)
    fig, axes = figure(
        9.0, 1.4 + 1.2 * len(runs) * max(len(v) for v in runs.values()) / 2, nrows=len(runs), squeeze=False
    )
    for ax, (schedule, stages) in zip(axes[:, 0], runs.items()):
        for r in stages:
            for e in r.timelines[step]:
                colour = COLOURS["compute"] if e.kind == "F" else COLOURS["comm"]
                ax.barh(
                    r.stage, (e.end - e.start) * 1e3, left=e.start * 1e3, color=colour, edgecolor="white", height=0.7
                )
                ax.text(
                    (e.start + e.end) / 2 * 1e3,
                    r.stage,
                    f"{e.kind}{e.microbatch}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
        ax.set_yticks([r.stage for r in stages], [f"stage {r.stage}" for r in stages])
        ax.invert_yaxis()
        ax.set_title(f"{schedule}: {stages[0].microbatches} micro-batches, step {step} of the timed ones", fontsize=9)
        ax.set_xlabel("ms from the step's start")
    finish(fig, result)
    return fig, axes[:, 0]


@dataclasses.dataclass(frozen=True)
class Score:
    """One strategy's bar in :func:`scores`: the notebook's row (a dict of these keys) typed."""

    strategy: str
    ideal_s: float
    measured_s: float
    over_budget: bool = False
    """It trained but does not fit the budget: drawn hatched and said not valid."""


def scores(rows: Sequence[Score | Mapping[str, str | float | bool]], where: Where) -> tuple[Figure, Axes]:
    """The capstone's strategies: measured step against the speed of light (``rows``: :class:`Score`, or dicts of
    its fields as the notebook builds them: strategy, ideal_s, measured_s, and ``over_budget`` for one that trained
    but does not fit the budget: hatched and said so)."""
    bars = [r if isinstance(r, Score) else typed(Score, r, "a score row") for r in rows]
    fig, ax = figure(7.0, 2.0 + 0.5 * len(bars))
    y = list(range(len(bars)))
    for flag, label, style in ((False, "measured step", {}), (True, "measured, over the budget", {"hatch": "//"})):
        ys = [i for i in y if bars[i].over_budget == flag]
        if ys:
            ax.barh(ys, [bars[i].measured_s * 1e3 for i in ys], color=COLOURS["idle"], label=label, **style)
    ax.barh(y, [b.ideal_s * 1e3 for b in bars], color=COLOURS["compute"], height=0.4, label="speed of light")
    for i, b in enumerate(bars):
        note = ", not valid" if b.over_budget else ""
        ax.text(b.measured_s * 1e3, i, f"  score {b.ideal_s / b.measured_s:.2f}{note}", va="center", fontsize=8)
    ax.set_xlim(0, 1.5 * max(max(b.measured_s, b.ideal_s) for b in bars) * 1e3)
    ax.set_yticks(y, [b.strategy for b in bars])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, frameon=False)
    ax.set_title("The capstone: each strategy against its speed of light")
    finish(fig, where)
    return fig, ax
