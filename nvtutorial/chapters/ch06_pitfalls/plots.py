"""The figures of notebook 06 (pitfalls): the input pipeline, an OOM and its fixes.
Each returns ``(fig, ax)``, stamped with where it was measured."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial.chapters.ch06_pitfalls.schema import Loader, TrainingRow, loader_typed, training_rows_typed
from nvtutorial.plots.style import COLOURS, figure, finish
from nvtutorial.results import Where

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def loader_sweep(
    per_rank: Sequence[Loader | Mapping[str, Any]],
    where: Where,
    rule: int | None = None,
    knees: Sequence[int] | None = None,
    pin_same: bool = False,
) -> tuple[Figure, Axes]:
    """Steady samples/s of the training loop against ``num_workers`` (claim C17): one line per
    ``pin_memory`` setting for the ranks together (DDP makes them move together; the table gives
    each rank), the bar spanning every window of every rank; the step alone, fed from memory, as a
    dashed line; the source's ``4 × GPUs`` as a dotted line; the fewest workers within the noise of
    the best as a star. ``per_rank``: each rank's ``dataloader`` section of the ``pitfalls`` workload, typed
    (:func:`nvtutorial.chapters.ch06_pitfalls.report_measured.loaders`) or as the run wrote it
    (``measured.ranks[r]["dataloader"]``); ``pin_same``: pinned memory changed no rate beyond the noise, so it is
    said, not drawn."""
    loaders = [loader_typed(d) for d in per_rank]
    fig, ax = figure(7.5, 4.2)
    pins = sorted({r.pin_memory for d in loaders for r in d.rows} - ({True} if pin_same else set()))
    for k, pin in enumerate(pins):
        counts, mid, low, high = _pin_line(loaders, pin)
        label = f"pin_memory={pin}" + (" (True: the same within the noise)" if pin_same else "")
        ax.errorbar(
            counts,
            mid,
            yerr=[low, high],
            marker="os"[k],
            color=f"C{k}",
            capsize=3,
            ls="-" if not pin else "--",
            label=label,
        )
        if knees is not None and not pin:
            _mark_knees(ax, knees, counts, mid)
    step = statistics.median(statistics.median(d.step_only_samples_per_s) for d in loaders)
    ax.axhline(step, color="0.3", ls=":", lw=1)
    ax.annotate(
        "the step alone (input in memory)",
        (0.01, step),
        xycoords=("axes fraction", "data"),
        fontsize=7,
        va="bottom",
        color="0.3",
    )
    if rule is not None:
        ax.axvline(rule, color="C2", ls=":", lw=1)
        ax.annotate(
            "4 × GPUs ",
            (rule, 0.02),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="C2",
            ha="right",
            va="bottom",
        )
    ax.set_xlabel("num_workers per rank")
    ax.set_ylabel("samples/s per rank, steady state")
    top = max([step] + [x for d in loaders for r in d.rows for x in r.samples_per_s])
    ax.set_ylim(0, 1.15 * top)
    ax.set_title(
        "The training loop's rate against DataLoader workers (★: fewest within the noise of the best)", fontsize=9
    )
    ax.legend(fontsize=7, loc="lower right")
    finish(fig, where)
    return fig, ax


def _pin_line(loaders: Sequence[Loader], pin: bool) -> tuple[list[int], list[float], list[float], list[float]]:
    """One ``pin_memory`` setting's line: the worker counts, the median of the ranks' medians at each, and the
    bar's extent below and above it (every window of every rank)."""
    counts = sorted({r.num_workers for d in loaders for r in d.rows if r.pin_memory == pin})
    mid, low, high = [], [], []
    for w in counts:
        rows = [r for d in loaders for r in d.rows if r.num_workers == w and r.pin_memory == pin]
        windows = [x for r in rows for x in r.samples_per_s]
        m = statistics.median([statistics.median(r.samples_per_s) for r in rows])
        mid.append(m)
        low.append(m - min(windows))
        high.append(max(windows) - m)
    return counts, mid, low, high


def _mark_knees(ax: Axes, knees: Sequence[int], counts: list[int], mid: list[float]) -> None:
    """A star at each rank's fewest workers within the noise of the best, naming the ranks."""
    for knee in sorted(set(knees)):
        who = ", ".join(str(r) for r, kn in enumerate(knees) if kn == knee)
        y = mid[counts.index(knee)]
        ax.plot([knee], [y], marker="*", ms=15, color="C3", ls="none")
        ax.annotate(f"rank {who}", (knee, y), xytext=(5, -12), textcoords="offset points", fontsize=7, color="C3")


def oom_fixes(rows: Sequence[TrainingRow | Mapping[str, Any]], cap_mib: float, where: Where) -> tuple[Figure, Axes]:
    """Peak memory of each variant of the training step against the memory cap; red = OOM. ``rows``: the training
    step's variants of the ``oom`` demo, typed (``report_measured.oom(result).training.rows``) or as the run wrote
    them (``measured.ranks[0]["oom"]["training"]["rows"]``)."""
    typed_rows = training_rows_typed(rows)
    fig, ax = figure(8.0, 0.9 + 0.6 * max(1, len(typed_rows)))
    for i, r in enumerate(typed_rows):
        colour = COLOURS["exposed"] if r.outcome == "OOM" else COLOURS["compute"]
        ax.barh(i, r.peak_reserved_mib / 1024, color=colour, height=0.6)
        note = r.outcome
        if r.step_ms:
            note += f", {r.step_ms:.0f} ms"
        ax.text(r.peak_reserved_mib / 1024, i, f"  {note}", va="center", fontsize=8)
    ax.axvline(cap_mib / 1024, color="0.2", ls="--", lw=1, label=f"the cap ({cap_mib / 1024:.1f} GiB)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_yticks(range(len(typed_rows)), [r.variant for r in typed_rows])
    ax.invert_yaxis()
    ax.set_xlabel("peak reserved GiB")
    ax.set_title("An OOM and the fixes that work")
    finish(fig, where)
    return fig, ax
