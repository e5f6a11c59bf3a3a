"""The figures of notebook 05 (profiling): the split of a step per rank, one step's timeline, the
price of the gradient exchange with its noise, the communication share against the batch,
telemetry, memory. Each returns ``(fig, ax)``.

Every figure is stamped with where it was measured (:func:`nvtutorial.plots.style.stamp`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch05_profiling.schema import Phase, phases_typed
from nvtutorial.chapters.ch05_profiling.schema import Split as RankSplit
from nvtutorial.plots.style import COLOURS, figure, finish
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import Where
from nvtutorial.tracesplit import Split

if TYPE_CHECKING:
    import pandas as pd

WAIT = "#E8A33D"
"""Waiting inside a collective for the other rank (skew): not the link's time."""


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bar of :func:`split_bars`, ms per profiled step; a part its split does not have (or NaN) is 0."""

    compute_ms: float
    hidden_ms: float
    exposed_ms: float
    idle_ms: float
    exposed_wait_ms: float
    """Exposed communication waiting for the other rank (0: not paired)."""
    exposed_transfer_ms: float
    """Exposed communication on the wire (0: not paired)."""

    @classmethod
    def of(cls, split: Mapping[str, object] | Split | RankSplit) -> Bar:
        """A split's bar: a :class:`~nvtutorial.tracesplit.Split` or a rank's, its dict, or a row of
        :func:`nvtutorial.chapters.ch05_profiling.report.split_frame` (``to_dict("records")``)."""

        def ms(key: str) -> float:
            value = split.get(key) if isinstance(split, Mapping) else getattr(split, key, None)
            return float(value) if isinstance(value, Real) and value == value else 0.0

        return cls(*(ms(f.name) for f in dataclasses.fields(cls)))


def split_bars(
    splits: Mapping[str, Mapping[str, object] | Split | RankSplit],
    where: Where,
    title: str = "Where the time of a DDP step goes",
):
    """Stacked horizontal bars, one per label (a rank's split, read by :meth:`Bar.of`): compute only, communication
    hidden under compute, exposed communication (split into time on the wire and waiting for the
    other rank where the row has ``exposed_wait_ms``), idle."""
    fig, ax = figure(8.0, 1.9 + 0.5 * max(1, len(splits)))
    labels = list(splits)
    totals = []
    for i, label in enumerate(labels):
        s = Bar.of(splits[label])
        exposed = (
            (
                ("exposed: on the wire", s.exposed_transfer_ms, COLOURS["exposed"]),
                ("exposed: waiting for the other rank", s.exposed_wait_ms, WAIT),
            )
            if s.exposed_transfer_ms or s.exposed_wait_ms
            else (("exposed communication", s.exposed_ms, COLOURS["exposed"]),)
        )
        parts = (
            ("compute only", s.compute_ms - s.hidden_ms, COLOURS["compute"]),
            ("communication hidden under compute", s.hidden_ms, COLOURS["hidden"]),
            *exposed,
            ("idle", s.idle_ms, COLOURS["idle"]),
        )
        left = 0.0
        for name, width, colour in parts:
            ax.barh(i, width, left=left, color=colour, label=name if i == 0 else None, height=0.6)
            left += width
        totals.append(left)
        ax.text(left, i, f"  {left:.3g} ms; exposed {s.exposed_ms:.3g} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per step (profiled)")
    ax.set_title(title, pad=30)
    ax.set_xlim(0, max(totals, default=1.0) * 1.35 or 1.0)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, frameon=False)
    finish(fig, where)
    return fig, ax


LANES = (
    ("phase", "phases"),
    ("compute", "compute"),
    ("comm", "communication"),
    ("wait", "waiting"),
    ("transfer", "on the wire"),
)


@dataclasses.dataclass(frozen=True)
class Span:
    """A row of :func:`nvtutorial.chapters.ch05_profiling.report_traces.timeline`: one interval of a rank's step."""

    rank: int
    kind: str
    """``step``, ``phase``, ``compute``, ``comm``, ``wait`` or ``transfer``."""
    lane: str
    start_ms: float
    end_ms: float
    name: str


def spans_of(frame: pd.DataFrame) -> list[Span]:
    """The timeline's rows typed, in their order."""
    columns = [f.name for f in dataclasses.fields(Span)]
    return [Span(*row) for row in frame[columns].itertuples(index=False, name=None)] if len(frame) else []


def timeline(frame: pd.DataFrame, where: Where, title: str = "One step on each rank"):
    """Broken bars per rank: its phases, its compute and its communication (waiting and on the wire
    where the ranks were paired), from :func:`nvtutorial.chapters.ch05_profiling.report_traces.timeline`."""
    all_spans = spans_of(frame)
    kinds = {s.kind for s in all_spans}
    lanes = [(k, name) for k, name in LANES if k in kinds]
    ranks = sorted({s.rank for s in all_spans})
    fig, ax = figure(9.0, 1.2 + 0.3 * max(1, len(ranks) * len(lanes)))
    colours = {"compute": COLOURS["compute"], "comm": COLOURS["comm"], "wait": WAIT, "transfer": COLOURS["exposed"]}
    yticks, ylabels = [], []
    y = 0.0
    for rank in ranks:
        sub = [s for s in all_spans if s.rank == rank]
        for kind, label in lanes:
            rows = [s for s in sub if s.kind == kind]
            spans = [(r.start_ms, r.end_ms - r.start_ms) for r in rows]
            if kind == "phase":
                ax.broken_barh(
                    spans,
                    (y - 0.35, 0.7),
                    facecolors=[COLOURS["phase"] if i % 2 == 0 else "#8FBF9F" for i in range(len(spans))],
                )
                for r in rows:
                    ax.text((r.start_ms + r.end_ms) / 2, y, r.name, ha="center", va="center", fontsize=7)
            else:
                ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colours[kind], linewidth=0)
            yticks.append(y)
            ylabels.append(f"rank {rank} {label}")
            y += 1
        for r in (s for s in sub if s.kind == "step"):
            ax.axvline(r.start_ms, color="0.6", lw=0.6, ls=":")
            ax.axvline(r.end_ms, color="0.6", lw=0.6, ls=":")
        y += 0.5
    ax.set_yticks(yticks, ylabels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds (the ranks share one clock)")
    ax.set_title(title)
    finish(fig, where)
    return fig, ax


def price(
    verdicts: Mapping[str, Verdict],
    marks: Mapping[str, float],
    where: Where,
    title: str = "What the DDP step costs over a step without exchange",
):
    """The extra milliseconds of the DDP step over each baseline, per rank, with the noise of the
    comparison as an error bar (from :func:`nvtutorial.chapters.ch05_profiling.report.price` verdicts:
    ``{"over no_sync": v, "over 1-GPU": v2}``), and vertical lines for trace-based estimates
    (``marks``: ``{"exposed on the wire (trace)": 0.2}``). Small differences stay readable: the
    axis is the difference, not the step."""
    fig, ax = figure(7.5, 1.8 + 0.45 * sum(len(v.numbers.get("extra_ms", [])) for v in verdicts.values()))
    labels, values, errors = [], [], []
    for name, v in verdicts.items():
        statuses = v.numbers.get("rank_status") or []
        for rank, (extra, noise) in enumerate(zip(v.numbers.get("extra_ms", []), v.numbers.get("noise_ms", []))):
            labels.append(f"{name}, rank {rank} ({statuses[rank] if rank < len(statuses) else v.status})")
            values.append(extra)
            errors.append(noise)
    ys = list(range(len(labels)))
    ax.errorbar(
        values,
        ys,
        xerr=errors,
        fmt="o",
        color=COLOURS["exposed"],
        ecolor="0.4",
        capsize=4,
        label="DDP step − baseline, ± noise",
    )
    ax.axvline(0, color="0.2", lw=0.8)
    styles = iter(["--", ":", "-."])
    for name, value in marks.items():
        ax.axvline(value, color=COLOURS["comm"], ls=next(styles, "--"), lw=1.2, label=name)
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.set_xlabel("extra milliseconds per step")
    ax.set_title(title, pad=34)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False)
    finish(fig, where)
    return fig, ax


SWEEP_LINES = (
    ("link_share", {"marker": "o"}, "on the wire"),
    ("exposed_link_share", {"marker": "x", "ls": "--"}, "on the wire, exposed"),
    ("comm_share_mean", {"marker": ".", "ls": ":"}, "profiler's share (waiting included)"),
)
"""The lines of :func:`comm_share_sweep` per path: a column of the sweep table, its style, its label."""


def comm_share_sweep(tables: Mapping[str, pd.DataFrame], where: Where, threshold: float = 0.15):
    """Against the per-GPU batch (log scale): the communication share the profiler reports (mean of
    the ranks, dotted), the time on the wire (solid) and its exposed part (dashed), one colour per
    path, with the source tutorial's 15 % line (claim C16). Tables:
    :func:`nvtutorial.chapters.ch05_profiling.report.sweep_table` (batches not profiled are left out)."""
    fig, ax = figure(7.0, 4.2)
    for label, table in tables.items():
        if "link_share" not in table:
            continue
        rows = table.dropna(subset=["link_share"]).sort_values("batch", kind="stable")
        if not len(rows):
            continue
        xs = list(rows["batch"])
        colour = {}
        for column, style, what in SWEEP_LINES:
            (line,) = ax.plot(xs, list(100 * rows[column]), **style, **colour, label=f"{label}: {what}")
            colour = {"color": line.get_color()}
    ax.axhline(100 * threshold, color="0.3", lw=0.8, ls="-.")
    ax.text(
        0.01,
        100 * threshold,
        f" {100 * threshold:.0f} % (the source's rule)",
        va="bottom",
        fontsize=7,
        transform=ax.get_yaxis_transform(),
    )
    ax.set_xscale("log", base=2)
    batches = sorted({int(b) for table in tables.values() if "batch" in table for b in table["batch"]})
    if batches:
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.minorticks_off()
    ax.set_ylim(0, max(ax.get_ylim()[1], 120 * threshold))
    ax.set_xlabel("per-GPU batch size")
    ax.set_ylabel("% of the profiled step")
    ax.set_title("Communication share against batch size")
    ax.legend(fontsize=7)
    finish(fig, where)
    return fig, ax


def telemetry(
    frame: pd.DataFrame | None,
    where: Where,
    phases: Sequence[Phase | Mapping[str, object]] = (),
    step_ends: Sequence[float] = (),
    dmon: pd.DataFrame | None = None,
    title: str = "NVML telemetry during the run",
):
    """GPU utilisation, NVLink bytes/s and memory against time, with the run's phases shaded and
    step ends ticked (wall-clock times from the workload: a rank's ``phases`` and ``step_ends``, typed or as the run
    wrote them, ``run.metrics["phases"]``); ``dmon`` (a frame with ``t``, ``gpu``, ``sm``) adds what
    ``nvidia-smi dmon -s u`` printed, once a second: a line stamped S (HH:MM:SS, the fraction dropped) is drawn
    over ``[S, S + 1)``, the second in which it was printed."""
    import matplotlib.pyplot as plt

    typed = phases_typed(phases)

    if frame is None or len(frame) == 0:
        reason = (frame.attrs.get("reason") if frame is not None else None) or "no telemetry"
        fig, ax = figure(8.0, 2.2)
        ax.text(
            0.5, 0.5, f"no telemetry: {reason}", ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True
        )
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title)
        finish(fig, where)
        return fig, ax
    fig, axes = plt.subplots(3, 1, figsize=(9.0, 6.5), sharex=True)
    t0 = float(frame["t"].to_numpy().min())
    for gpu, sub in frame.groupby("gpu"):
        t = sub["t"] - t0
        axes[0].plot(t, sub["sm_util_pct"], label=f"GPU {gpu} (NVML)")
        axes[1].plot(t, sub["nvlink_tx_gbs"], label=f"GPU {gpu} sent")
        axes[1].plot(t, sub["nvlink_rx_gbs"], ls="--", label=f"GPU {gpu} received")
        axes[2].plot(t, sub["mem_used_mib"] / 1024, label=f"GPU {gpu}")
    if dmon is not None and len(dmon) and "t" in dmon.columns:
        for gpu, sub in dmon.groupby("gpu"):
            label = f"GPU {gpu} dmon sm (1-s lines, each over its stamp's second)"
            axes[0].step(sub["t"] - t0, sub["sm"], where="post", lw=0.8, ls=":", label=label)
    axes[0].set_ylabel("utilisation %\n(a kernel running)")
    axes[1].set_ylabel("NVLink GB/s")
    axes[2].set_ylabel("memory used GiB")
    for i, ph in enumerate(typed):
        for ax in axes:
            ax.axvspan(ph.start - t0, ph.end - t0, color="0.85" if i % 2 == 0 else "0.93", zorder=0)
        axes[0].text((ph.start + ph.end) / 2 - t0, 103, ph.name, ha="center", va="bottom", fontsize=6, rotation=20)
    for t in step_ends:
        axes[0].axvline(t - t0, color="0.5", lw=0.4)
    axes[0].set_ylim(0, 100)
    for ax in axes:
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("seconds since sampling started")
    fig.suptitle(title, fontsize=10)
    finish(fig, where)
    return fig, axes


def memory_per_rank(memories: Sequence[Mapping[str, int | float | str]], where: Where):
    """Peak allocated and reserved memory per rank (GPU), or peak process RSS (CPU); ``memories``: each rank's
    ``memory`` (:attr:`~nvtutorial.chapters.ch05_profiling.schema.Rank.memory`, under torch's own names)."""
    fig, ax = figure(6.0, 3.4)
    ranks = list(range(len(memories)))
    if memories and "allocated_bytes.all.peak" in memories[0]:
        alloc = [float(m["allocated_bytes.all.peak"]) / 2**30 for m in memories]
        res = [float(m["reserved_bytes.all.peak"]) / 2**30 for m in memories]
        ax.bar([r - 0.2 for r in ranks], alloc, 0.4, label="peak allocated (tensors)")
        ax.bar([r + 0.2 for r in ranks], res, 0.4, label="peak reserved (allocator cache)")
        ax.set_ylabel("GiB")
        ax.set_title("GPU memory per rank (torch.cuda.memory_stats)")
    else:
        ax.bar(ranks, [float(m.get("rss_peak_mib", 0)) / 1024 for m in memories], 0.5, label="peak process RSS")
        ax.set_ylabel("GiB")
        ax.set_title("Process memory per rank (CPU run: no GPU memory)")
    ax.set_xticks(ranks, [f"rank {r}" for r in ranks])
    ax.legend(fontsize=7)
    finish(fig, where)
    return fig, ax
