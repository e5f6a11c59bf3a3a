"""Notebook 11's first two measurements: what one tiny op costs (the CPU's pace against the GPU's) and the
batch-doubling test with its floor, crossover and graded prediction. Re-exported by ``report.py``; it imports nothing
of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from nvtutorial.chapters.ch11_overhead import model
from nvtutorial.chapters.ch11_overhead.schema import CalibrateRank, OpCost, Params
from nvtutorial.report.predict import grade_number
from nvtutorial.report.verdict import Verdict

DOUBLING_KEY = "11.doubling"
"""The doubling prediction's grade (shown under its question, which names the batches)."""


def us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


# ------------------------------------------------------------------------------------------- one tiny op


def op_table(op: OpCost):  # -> pandas.DataFrame
    import pandas as pd

    rows = [
        ("queued: calls back to back, waited for once", op.queued),
        ("waited for after each call", op.waited),
        ("a view instead: Python and the dispatcher, no kernel", op.no_kernel),
        ("replayed from a CUDA graph: the GPU's own cost", op.graph),
        ("the CPU's cost of one replay (all the graph's calls)", op.replay_host),
    ]
    frame = pd.DataFrame([{"how": how, "µs per call": us(s)} for how, s in rows if s is not None]).set_index("how")
    return frame


def op_verdict(op: OpCost, where: str) -> Verdict:
    """What one tiny op costs: on a GPU the CPU's pace against the GPU's (a graph replay); on the CPU, no queue."""
    numbers = {"queued_us": us(op.queued), "waited_us": us(op.waited), "no_kernel_us": us(op.no_kernel)}
    python = f"a call that launches no kernel (a view) costs {us(op.no_kernel):.1f} µs: Python and the dispatcher"
    if op.graph is None:
        text = (
            f"One tiny op costs {us(op.queued):.1f} µs issued back to back and {us(op.waited):.1f} µs waited for: "
            f"the CPU has no queue, each op runs before the next is issued; {python}. A CPU simulation of the "
            "per-op cost: on a GPU the CPU only issues the op, and the GPU runs it."
        )
        return Verdict("overhead.per_op", "info", text, numbers, where, "One op's cost")
    ratio = op.queued / op.graph
    numbers.update(graph_us=us(op.graph), cpu_over_gpu=ratio)
    text = (
        f"The CPU issues one tiny op every {us(op.queued):.1f} µs; replayed from a CUDA graph the GPU runs one in "
        f"{us(op.graph):.2f} µs: the GPU could take {ratio:.2g}× more small kernels than the CPU can issue. "
        f"Waited for one by one, an op costs {us(op.waited):.1f} µs (the round trip); {python}."
    )
    return Verdict("overhead.per_op", "info", text, numbers, where, "One op's cost")


# ------------------------------------------------------------------------------------------- the batch-doubling test


def doubling_points(calib: CalibrateRank) -> list[tuple[int, float]]:
    return [(p.batch, p.seconds) for p in calib.doubling]


def doubling_table(calib: CalibrateRank, p: Params):  # -> pandas.DataFrame
    import pandas as pd

    ratios = dict(model.doubling_ratios(doubling_points(calib)))
    rows = []
    for batch, seconds in doubling_points(calib):
        ratio = ratios.get(batch // 2) if batch % 2 == 0 else None
        rows.append(
            {
                "batch": batch,
                "tokens": batch * p.seq_len,
                "ms per step": seconds * 1e3,
                "× the half batch's": ratio,
                "doubling says": model.doubling_regime(ratio) if ratio is not None else "",
            }
        )
    return pd.DataFrame(rows).set_index("batch")


def doubling_verdict(calib: CalibrateRank, p: Params, batch: int, where: str) -> Verdict:
    """The batch-doubling test at ``batch``: the time of twice the batch over the batch's; and where the step's work
    catches up with its floor (:func:`model.crossover_batch`), or that the sweep never left the floor."""
    points = doubling_points(calib)
    ratios = dict(model.doubling_ratios(points))
    if batch not in ratios:
        raise ValueError(f"batch {batch} and {2 * batch} were not both measured: {[b for b, _ in points]}")
    ratio = ratios[batch]
    regime = model.doubling_regime(ratio)
    floor = model.overhead_floor(points)
    crossover = model.crossover_batch(points, floor)
    left = model.left_the_floor(points, floor)
    grew = (
        f"it grew by {ratio - 1:.0%} for twice the work" if ratio >= 1 else "it did not grow (within the run's noise)"
    )
    meaning = {
        "noise": "faster with twice the work: noise (the machine's timings moved between the two), not a regime",
        "overhead": f"{grew}: the floor still dominates, overhead-bound",
        "crossover": "the time grew, but less than the work: the two sides are close",
        "work": "the time followed the work: the work sets the pace",
    }[regime]
    if left:
        where_work = (
            f"its work catches up with its floor of {floor * 1e3:.3g} ms ({_floor_from(points)}) at about "
            f"{crossover:.0f} sequences ({crossover * p.seq_len:.0f} tokens) per step"
        )
    else:
        largest = max(b for b, _ in points)
        where_work = f"even {largest} sequences per step did not leave its floor of {floor * 1e3:.3g} ms"
    text = f"Doubling the batch from {batch} to {2 * batch} made the step {ratio:.2f}× as long: {meaning}; "
    text += f"{where_work}."
    early = [b for b, r in ratios.items() if model.doubling_regime(r) == "work" and 2 * b <= crossover]
    if left and ((regime == "overhead" and batch >= crossover) or early):
        text += (
            " The two readings disagree (the doubling and the fit of the whole sweep"
            + (f": the time followed the work from batch {early[0]}, below the crossover" if early else "")
            + "): single steps moved, as on a busy machine; run the calibration again."
        )
    numbers = {"ratio": ratio, "regime": regime, "crossover_batch": crossover if left else None, "floor_s": floor}
    return Verdict("overhead.doubling", "info", text, numbers, where, "The batch-doubling test")


def _floor_from(points: Sequence[tuple[int, float]]) -> str:
    """Where the floor came from (:func:`model.overhead_floor`); where it is not the smallest batch's time, what the
    exercise's ``crossover_batch`` (which takes that time as the floor) gives instead (review RR7-2)."""
    flat = model.leading_flat(points)
    if not flat or flat == [min(points)[0]]:
        return "the smallest batch's time, as in the exercise"
    which = f"batches {flat[0]} to {flat[-1]}" if len(flat) > 1 else f"batch {flat[0]}"
    smallest = min(points)[1]
    theirs = model.crossover_batch(points)
    return (
        f"the median of {which}, whose doubling reads overhead; the exercise takes the smallest batch's "
        f"{smallest * 1e3:.3g} ms instead and gets {theirs:.0f} sequences"
    )


def grade_doubling(prediction: float | None, calib: CalibrateRank, batch: int, where: str) -> Verdict:
    ratio = dict(model.doubling_ratios(doubling_points(calib)))[batch]
    return grade_number(
        DOUBLING_KEY,
        prediction,
        ratio,
        unit="×",
        where=where,
        right_within=0.15,
        explanation=(
            "Twice the work in each kernel; when the CPU issuing the kernels sets the pace, the time barely moves "
            "(a ratio near 1), when the work does, it doubles (near 2)."
        ),
        question=f"How many times as long a step of {2 * batch} sequences takes as one of {batch}",
    )
