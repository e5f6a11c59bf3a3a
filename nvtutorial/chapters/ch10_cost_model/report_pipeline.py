"""Notebook 10's pipeline as numbers, tables and verdicts: its loss and gradients against one process, the bubble
measured on the stages' timelines, the handoffs between stages, the micro-batches each stage held and its memory.
Re-exported by ``report.py``, where the notebook reads them; it imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch10_cost_model import model, schema
from nvtutorial.chapters.ch10_cost_model.schema import ranks
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult, label_of

if TYPE_CHECKING:
    import pandas as pd

    from nvtutorial.chapters.ch08_ladder.report_model import Setup


def schedule_runs(result: RunResult) -> dict[str, list[schema.ScheduleRun]]:
    """Per schedule, every stage's record (stage order)."""
    out: dict[str, list[schema.ScheduleRun]] = {}
    for rank in ranks(result, "pipeline"):
        for run in rank.runs:
            out.setdefault(run.schedule, []).append(run)
    return {k: sorted(v, key=lambda r: r.stage) for k, v in out.items()}


def pipeline_loss_verdict(result: RunResult, tolerance: float) -> Verdict:
    """Pass when every schedule's loss, at every step and on every stage, is within ``tolerance`` of one process's."""
    diffs = {
        s: max(abs(a - b) for r in runs for a, b in zip(r.losses, r.reference))
        for s, runs in schedule_runs(result).items()
    }
    worst = max(diffs, key=lambda k: diffs[k])
    ok = all(d <= tolerance for d in diffs.values())
    numbers = {"max_abs_diff": diffs, "tolerance": tolerance, "worst": worst}
    text = (
        f"Both schedules follow the one-process loss: largest difference {diffs[worst]:.2g} ({worst}), within "
        f"{tolerance:g}."
        if ok
        else f"{', '.join(s for s, d in diffs.items() if d > tolerance)} left the one-process loss by more than "
        f"{tolerance:g} (largest {diffs[worst]:.2g})."
    )
    return Verdict("costmodel.pipeline.loss", "pass" if ok else "fail", text, numbers, label_of(result))


def pipeline_gradient_verdict(result: RunResult, tolerance: float) -> Verdict:
    """Pass when every stage's step-0 gradients equal one process's within ``tolerance`` of each tensor's largest
    value. A pipeline that forgets to divide by the micro-batches is off by m − 1 (3.0 with 4)."""
    diffs = {(s, r.stage): r.grad_max_rel_diff for s, runs in schedule_runs(result).items() for r in runs}
    worst = max(diffs, key=lambda k: diffs[k])
    numbers = {"max_rel_diff": {f"{s} stage {st}": d for (s, st), d in diffs.items()}, "tolerance": tolerance}
    ok = diffs[worst] <= tolerance
    text = (
        f"At step 0 every stage's gradients equal the one-process gradients to {diffs[worst]:.2g} of each tensor's "
        f"largest value (tolerance {tolerance:g}): the micro-batches' gradients add up to the whole batch's."
        if ok
        else f"{worst[0]}, stage {worst[1]}: the step-0 gradients are off by {diffs[worst]:.2g} of the tensor's "
        f"largest value (tolerance {tolerance:g}); 3.0 with 4 micro-batches means summed, not averaged."
    )
    return Verdict("costmodel.pipeline.gradients", "pass" if ok else "fail", text, numbers, label_of(result))


def timeline_busy(events: Sequence[schema.Event]) -> float:
    return sum(e.end - e.start for e in events)


def bubble_measured(stages: Sequence[Sequence[schema.Event]]) -> tuple[float, list[float]]:
    """``(mean idle share, idle share per stage)`` of one step: the window runs from the first forward pass on any
    stage to the last backward pass on any stage; a stage is idle when it runs no micro-batch in it."""
    start = min(e.start for events in stages for e in events)
    end = max(e.end for events in stages for e in events)
    idle = [1 - timeline_busy(events) / (end - start) for events in stages]
    return statistics.fmean(idle), idle


def peak_in_flight(events: Sequence[schema.Event]) -> int:
    """The most micro-batches a stage held at once: forward passes done whose backward pass has not ended."""
    held = peak = 0
    for e in sorted(events, key=lambda e: (e.end, e.kind == "F")):
        held += 1 if e.kind == "F" else -1
        peak = max(peak, held)
    return peak


def handoffs(stages: Sequence[Sequence[schema.Event]]) -> tuple[list[float], list[float]]:
    """``(early, waits)`` of one step, from each dependency between neighbouring stages: stage s + 1's forward pass
    of a micro-batch needs stage s's, stage s's backward pass needs stage s + 1's. ``early``: how long before its
    input was finished a pass started (positive only when the clocks disagree: nothing can start before its input
    exists). ``waits``: for a stage that was idle when its input was finished, how long it took to start: the
    message, and the time the waiting rank took to run again."""
    early, waits = [], []
    for s in range(len(stages) - 1):
        for kind, producer, consumer in (("F", stages[s], stages[s + 1]), ("B", stages[s + 1], stages[s])):
            done = {e.microbatch: e.end for e in producer if e.kind == kind}
            ordered = sorted(consumer, key=lambda e: e.start)
            for i, e in enumerate(ordered):
                if e.kind != kind or e.microbatch not in done:
                    continue
                ready = done[e.microbatch]
                early.append(ready - e.start)
                free = ordered[i - 1].end if i else -math.inf
                if free <= ready <= e.start:
                    waits.append(e.start - ready)
    return early, waits


CAUSALITY_S = 50e-6
"""How early a pass may start before its input was finished on the timelines before the clocks are called wrong:
more than the skew of an all-reduce's end on two GPUs (a few µs) and the host clock's reading (below a µs)."""


def clocks_verdict(result: RunResult, tolerance_s: float = CAUSALITY_S) -> Verdict:
    """Pass when, on every timed step of every schedule, no stage started a micro-batch more than ``tolerance_s``
    before the stage it depends on had finished it (:func:`handoffs`): the ranks' timelines share one clock, so the
    bubble measured across them is the bubble. Fail otherwise: the clocks disagree by at least that much."""
    worst: dict[str, float] = {}
    for schedule, runs in schedule_runs(result).items():
        for t in range(min(len(r.timelines) for r in runs)):
            early, _ = handoffs([r.timelines[t] for r in runs])
            worst[schedule] = max([worst.get(schedule, 0.0), *early])
    bad = {k: v for k, v in worst.items() if v > tolerance_s}
    numbers = {"earliest_start_before_input_s": worst, "tolerance_s": tolerance_s}
    if bad:
        k = max(bad, key=lambda x: bad[x])
        return Verdict(
            "costmodel.pipeline.clocks",
            "fail",
            f"{k}: a stage started a micro-batch {bad[k] * 1e3:.3g} ms before the stage it depends on had finished "
            f"it: impossible, so the ranks' clocks disagree by at least that much, and the bubble measured across "
            f"them is off by as much (tolerance {tolerance_s * 1e6:.3g} µs).",
            numbers,
            label_of(result),
        )
    return Verdict(
        "costmodel.pipeline.clocks",
        "pass",
        f"On every timeline each micro-batch starts after the stage it depends on has finished it (within "
        f"{tolerance_s * 1e6:.3g} µs): the stages share one clock.",
        numbers,
        label_of(result),
    )


def bubble_table(result: RunResult):  # -> pandas.DataFrame
    """Per schedule: the formula's bubble, the model's with this run's own per-stage times (unequal stages), the
    measured idle share (median over the timed steps), per stage and on average, and the median and largest time a
    stage took to start a micro-batch once its input was finished while it was idle (:func:`handoffs`)."""
    import pandas as pd

    rows = []
    for schedule, runs in schedule_runs(result).items():
        p, m = len(runs), runs[0].microbatches
        steps = range(len(runs[0].timelines))
        measured = [bubble_measured([r.timelines[t] for r in runs]) for t in steps]
        waits = [w for t in steps for w in handoffs([r.timelines[t] for r in runs])[1]]
        per_stage = [statistics.median(x[1][s] for x in measured) for s in range(p)]
        stage_s = [statistics.median(timeline_busy(r.timelines[t]) / m for t in steps) for r in runs]
        span = model.pipeline_time(stage_s, m)
        uneven = statistics.fmean(1 - m * t / span for t in stage_s)
        rows.append(
            {
                "schedule": schedule,
                "stages": p,
                "micro-batches": m,
                "formula": model.bubble(p, m),
                "model, this run's stage times": uneven,
                "measured": statistics.median(x[0] for x in measured),
                **{f"measured, stage {s}": v for s, v in enumerate(per_stage)},
                "step (ms)": statistics.median(runs[0].step_s) * 1e3,
                "handoff (ms, median)": statistics.median(waits) * 1e3 if waits else None,
                "handoff (ms, largest)": max(waits) * 1e3 if waits else None,
            }
        )
    return pd.DataFrame(rows).set_index("schedule")


def handoff_verdict(bubbles: pd.DataFrame, send_s: float, message_bytes: float, where_: str) -> Verdict:
    """The median handoff of each schedule (:func:`bubble_table`) against ``send_s``, one micro-batch's message by
    ``α + S/β`` with the all-reduce's α and β standing in for a send's (the run sweeps no send): ``info``. On gloo
    (``where_`` is the run's label) that α covers two exchanges or more and likely overstates one send; on GPUs
    most of it is the per-call host cost that a send pays too (notebook 10's α against nccl-tests): an estimate, not
    a bound. A handoff above it is most likely the host: the receiving rank running again after its wait, then
    Python before the pass."""
    handoffs = {str(k): v / 1e3 for k, v in bubbles["handoff (ms, median)"].to_dict().items() if v is not None}
    gloo = "gloo" in where_
    numbers = {"handoff_s": handoffs, "send_s": send_s, "message_bytes": message_bytes, "likely_overstated": gloo}
    if not handoffs:
        return Verdict("costmodel.pipeline.handoff", "info", "No stage waited idle for its input.", numbers, where_)
    said = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in handoffs.items())
    why = (
        "on gloo an all-reduce is two exchanges or more, so this likely overstates one send"
        if gloo
        else "most of that α is the per-call host cost, which a send pays too: an estimate, not a bound"
    )
    head = (
        f"A stage that sat idle started a micro-batch a median {said} after its neighbour had finished it; one "
        f"micro-batch's activations ({message_bytes / 1e3:.4g} kB) cost {send_s * 1e3:.3g} ms by α + S/β, the "
        f"all-reduce's α and β standing in for a send's (the run sweeps no send; {why})"
    )
    above = {k: v for k, v in handoffs.items() if v > send_s}
    if above:
        text = (
            f"{head}: {', '.join(above)} took longer than that estimate, most likely the host (the receiving rank "
            "running again after its wait, then Python before the pass)."
        )
    else:
        text = f"{head}: every handoff was within that estimate: nothing here points at the host."
    return Verdict("costmodel.pipeline.handoff", "info", text, numbers | {"above": sorted(above)}, where_)


def in_flight_verdict(result: RunResult) -> Verdict:
    """Pass when each stage's peak number of micro-batches in flight, counted from its timeline, is what the
    schedule promises (``model.in_flight``): all of them under GPipe, ``stages − stage`` under 1F1B."""
    counted, expected = {}, {}
    for schedule, runs in schedule_runs(result).items():
        for r in runs:
            label = f"{schedule} stage {r.stage}"
            counted[label] = max(peak_in_flight(t) for t in r.timelines)
            expected[label] = model.in_flight(r.stage, r.stages, r.microbatches, schedule)
    bad = [k for k in counted if counted[k] != expected[k]]
    numbers = {"counted": counted, "expected": expected}
    if bad:
        return Verdict(
            "costmodel.pipeline.in_flight",
            "fail",
            "Micro-batches held at once differ from the schedule's: "
            + "; ".join(f"{k}: {counted[k]}, expected {expected[k]}" for k in bad)
            + ".",
            numbers,
            label_of(result),
        )
    return Verdict(
        "costmodel.pipeline.in_flight",
        "pass",
        "Counted on the timelines, each stage held at most "
        + ", ".join(f"{v} ({k})" for k, v in counted.items())
        + " micro-batches' activations at once, as "
        "each schedule promises: GPipe keeps all of them until the backward passes start, 1F1B at most "
        "p − s on stage s of p: one for each stage from this one to the last.",
        numbers,
        label_of(result),
    )


def stage_blocks(layers: int, stage: int, stages: int) -> tuple[int, int]:
    """``(first, last + 1)``: the blocks ``lessons/pipeline.py``'s ``split`` gives a stage (equal shares, the first
    stages one more when they do not divide evenly)."""
    per, extra = divmod(layers, stages)
    first = stage * per + min(stage, extra)
    return first, first + per + (stage < extra)


@dataclasses.dataclass(frozen=True)
class StageMemory:
    """Bytes of one micro-batch on a pipeline stage (:func:`pipeline_stage_memory`)."""

    activations: float
    transient: float
    """The last stage's logits' gradients, held only while its backward pass starts; 0 on the other stages."""


def pipeline_stage_memory(setup: Setup, stage: int, stages: int, microbatches: int) -> StageMemory:
    """Bytes of one micro-batch's activations on a stage (notebook 08's memory model: what autograd saves in each
    of its blocks, and on the last stage the final norm, the logits and the loss), and the transient logits'
    gradients of the last stage."""
    from nvtutorial.chapters.ch08_ladder.report_model import FLOAT, block_activations

    micro = dataclasses.replace(setup, global_batch=max(1, setup.global_batch // microbatches), world=1)
    first, last = stage_blocks(setup.layers, stage, stages)
    tokens = micro.tokens("ddp")
    activations = (last - first) * block_activations(micro, "ddp")
    transient = 0.0
    if stage == stages - 1:
        activations += FLOAT * tokens * (2 * setup.dim + 2 + setup.vocab)
        transient = 2 * FLOAT * tokens * setup.vocab
    return StageMemory(float(activations), float(transient))


def stage_memory_table(result: RunResult, setup: Setup):  # -> pandas.DataFrame
    """Per schedule and stage, in MB: the model state counted on the rank (parameters, gradients, Adam), one
    micro-batch's activations by the memory model, how many micro-batches it held at once (counted on its
    timeline), their product; on a GPU the measured peak."""
    import pandas as pd

    rows = []
    for schedule, runs in schedule_runs(result).items():
        for r in runs:
            per_mb = pipeline_stage_memory(setup, r.stage, r.stages, r.microbatches).activations
            held = max(peak_in_flight(t) for t in r.timelines)
            rows.append(
                {
                    "schedule": schedule,
                    "stage": r.stage,
                    "blocks": f"{r.blocks[0]}–{r.blocks[1] - 1}",
                    "params": r.held.params / 1e6,
                    "grads": r.held.grads / 1e6,
                    "Adam": r.held.optimizer / 1e6,
                    "activations per micro-batch": per_mb / 1e6,
                    "held at once": held,
                    "activations (model)": held * per_mb / 1e6,
                    "peak measured": r.peak_allocated / 1e6 if r.peak_allocated is not None else None,
                }
            )
    return pd.DataFrame(rows).set_index(["schedule", "stage"])
