"""Notebook 11's tables and verdicts: the per-op costs, the batch-doubling test, the model's predictions of the step
three ways and how far each was, the training they must share, the all-reduce's fixed cost split, the crossovers;
and the committed one-GPU run the notebook shows where this machine has no GPU. Kernel side: never launches.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from nvtutorial.chapters.ch11_overhead import model
from nvtutorial.chapters.ch11_overhead.report_floor import DOUBLING_KEY as DOUBLING_KEY
from nvtutorial.chapters.ch11_overhead.report_floor import doubling_points as doubling_points
from nvtutorial.chapters.ch11_overhead.report_floor import doubling_table as doubling_table
from nvtutorial.chapters.ch11_overhead.report_floor import doubling_verdict as doubling_verdict
from nvtutorial.chapters.ch11_overhead.report_floor import grade_doubling as grade_doubling
from nvtutorial.chapters.ch11_overhead.report_floor import op_table as op_table
from nvtutorial.chapters.ch11_overhead.report_floor import op_verdict as op_verdict
from nvtutorial.chapters.ch11_overhead.report_floor import us as us
from nvtutorial.chapters.ch11_overhead.schema import (
    AllReducePoint,
    CalibrateRank,
    OpCost,
    Params,
    Sides,
    StepRank,
    rank_type,
)
from nvtutorial.params import build
from nvtutorial.report.predict import grade_number
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult
from nvtutorial.units import format_size

TARGET = 0.20
"""The model's error on each step (eager, graph, compiled) at each width, on one GPU: issue 29's target."""
GRAPH_TOLERANCE = 1e-4
"""Largest relative difference of a graphed step's losses, and of its weights (as one vector), from the eager step's.
A graph replays the same kernels on the same numbers, so at most rounding, and one thing rounding can do: Adam's
first update moves every weight by ±lr whatever its gradient's size, so a gradient of about zero whose sign differs
moves that weight by 2·lr (2e-3, about 4e-5 of the weights' norm at width 256). This allows one or two such."""
COMPILED_TOLERANCE = 1e-3
"""The compiled step's: Inductor fuses and reorders the arithmetic, so fp32 rounding differs a little more, and more
gradients of about zero change sign."""
REFERENCE = Path(__file__).resolve().parents[3] / "reference"
"""Where a checkout keeps the committed GPU runs (``reference/<machine>/runs-11/``)."""
LABELS = {"eager": "eager", "graph": "one CUDA graph", "compiled": "reduce-overhead"}


def typed(run: RunResult) -> Any:
    """Rank 0 of an ``overhead`` run, typed by its part (``schema.rank_type``)."""
    return run.metrics_as(rank_type(run.params))


def params(run: RunResult) -> Params:
    """The run's parameters, typed: the sizes its numbers belong to."""
    return build(Params, run.params)


def step_flops(s: Sides, p: Params) -> float:
    """FLOPs of the step whose sides ``s`` are (its width and batch, the rest of the transformer from ``p``)."""
    return model.step_flops(s.batch * p.seq_len, p.seq_len, s.width, p.mlp_ratio * s.width, p.layers, p.vocab)


# ------------------------------------------------------------------------------------------- the step, three ways


@dataclasses.dataclass(frozen=True)
class Prediction:
    variant: str
    width: int
    batch: int
    cpu_s: float
    gpu_s: float
    launches: int | None = None
    """Launches the CPU issues per step (the profiler's count), where known before the run."""

    @property
    def seconds(self) -> float:
        return model.step_time(self.cpu_s, self.gpu_s)

    @property
    def upper_s(self) -> float:
        return self.cpu_s + self.gpu_s

    @property
    def side(self) -> str:
        return model.slower_side(self.cpu_s, self.gpu_s)


def graph_gpu_s(s: Sides, op: OpCost) -> float:
    """The graph's GPU side, predicted from the eager step's (``s``, measured): a kernel replayed from a graph skips
    what the GPU's front end spends on a kernel launched on its own, the tiny op's GPU time per call launched
    eagerly behind a sleep less its time per call replayed from a graph (``op``), over the step's kernels; never
    above the eager side, never below its kernels × one replayed empty kernel (review RR7-3: a noisy saving must not
    make it negative). Without those two (a calibration before 2026-12-08, or a failed measurement): the eager side,
    an upper estimate."""
    if s.gpu_s is None:
        raise ValueError(f"width {s.width}: the eager step's GPU side was not measured")
    if op.eager_gpu is None or op.graph is None or not s.kernels:
        return s.gpu_s
    return max(s.gpu_s - s.kernels * max(op.eager_gpu - op.graph, 0.0), s.kernels * op.graph)


def graph_cpu_s(op: OpCost) -> float:
    """The graph's CPU side, at least (review RR7-5): one replay of the tiny op's graph and one queued tiny op, the
    eager copy of the batch into the graph's input. The step's graph has more nodes than the tiny op's one; what
    that adds to the launch is not measured, so this is a floor."""
    if op.replay_host is None:
        raise ValueError("the calibration measured no replay: it needs a GPU")
    return op.replay_host + op.queued


CPU_ESTIMATE = {
    "eager": "measured",
    "graph": "at least: one replay + the input copy",
    "compiled": "the compiled step's floor",
}
"""What each prediction's CPU side is (review RR7-5: the graph's is a floor)."""


def predictions(calib: CalibrateRank, compile_widths: Collection[int] | None = None) -> list[Prediction]:
    """The model's step three ways at each width, before the run, from the calibration: eager from its two sides; a
    graph costs the CPU at least :func:`graph_cpu_s` and the GPU :func:`graph_gpu_s`;
    reduce-overhead costs the CPU what the same compiled step costs at the tiny width (its floor,
    ``compiled_host_s``) and the GPU the graph's side. A width whose GPU side could not be measured has none, and
    reduce-overhead none where its floor was not measured (:func:`unpredicted_why`), nor at a width the step part's
    plan does not compile (``compile_widths``, known before it runs; None: every width)."""
    if calib.op.replay_host is None or not calib.sides:
        raise ValueError("the calibration measured no step sides: they need a GPU")
    out = []
    for s in calib.sides:
        if s.gpu_s is None:
            continue
        graph = graph_gpu_s(s, calib.op)
        out.append(Prediction("eager", s.width, s.batch, s.host_s, s.gpu_s, s.launches))
        out.append(Prediction("graph", s.width, s.batch, graph_cpu_s(calib.op), graph))
        if calib.compiled_host_s is not None and (compile_widths is None or s.width in compile_widths):
            out.append(Prediction("compiled", s.width, s.batch, calib.compiled_host_s, graph))
    return out


def unpredicted_why(calib: CalibrateRank) -> str:
    """Why the calibration predicts no reduce-overhead step ("" where it does)."""
    if calib.compiled_host_s is not None:
        return ""
    if calib.compiled_error:
        return f"its floor, the compiled step at a tiny width, failed in the calibration ({calib.compiled_error})"
    return "the compiled step's floor, its prediction before the run, was not recorded in that calibration run"


def gpu_side_note(calib: CalibrateRank) -> str:
    """How the graph's GPU side was predicted, in numbers (:func:`graph_gpu_s`)."""
    op = calib.op
    if op.eager_gpu is None or op.graph is None:
        return (
            "The graph's GPU side is the eager step's: this calibration did not measure a kernel launched on its own "
            "against one replayed, so it is an upper estimate (a replay skips the front end's per-launch work)."
        )
    return (
        f"The graph's GPU side is the eager step's less its kernels × {us(max(op.eager_gpu - op.graph, 0.0)):.2f} µs: "
        f"the tiny op took the GPU {us(op.eager_gpu):.2f} µs per call launched on its own behind a sleep and "
        f"{us(op.graph):.2f} µs replayed from a graph (the front end's work per launch a replay skips). Two things "
        "pull it apart from the step's own saving: a kernel longer than that work hides some of it (the prediction "
        "then runs low), a launch with kilobytes of arguments (fused Adam's) costs more than the tiny op's (high); "
        "the graph's run says which won."
    )


def graph_gpu_check(preds: Sequence[Prediction], rows: Sequence[Mapping[str, Any]]) -> str:
    """Review RR7-3: the graph's GPU side predicted before the run (:func:`graph_gpu_s`) against the one its run
    measured right before it was timed, at each width both have; and the saving per kernel the step launch shows, its
    eager step's GPU side less its graph's over the eager step's kernels (review RR13-5: both from the one launch;
    "" where no width has both)."""
    said = {(p.variant, p.width): p.gpu_s for p in preds}
    eager = {r["width"]: r for r in rows if r["variant"] == "eager"}
    parts = []
    for r in rows:
        predicted, own = said.get(("graph", r["width"])), eager.get(r["width"])
        if r["variant"] != "graph" or predicted is None or r["gpu_s"] is None or own is None:
            continue
        if not own["kernels"] or own["gpu_s"] is None:
            continue
        saving = (own["gpu_s"] - r["gpu_s"]) / own["kernels"]
        parts.append(
            f"width {r['width']}: predicted {predicted * 1e3:.3g} ms, measured {r['gpu_s'] * 1e3:.3g} ms "
            f"({predicted / r['gpu_s'] - 1:+.1%}; a saving of {us(saving):.2f} µs per kernel)"
        )
    if not parts:
        return ""
    return f"The graph's GPU side, predicted before the run against the one its run measured: {'; '.join(parts)}."


def prediction_table(preds: Sequence[Prediction]):  # -> pandas.DataFrame
    """The predictions; the CPU's µs per launch only where the CPU's side is the slower (review R7-9: where the GPU's
    is, the CPU's side also holds time spent waiting on the busy GPU, not what one launch costs)."""
    import pandas as pd

    rows = [
        {
            "width": p.width,
            "step": LABELS[p.variant],
            "launches": p.launches,
            "CPU µs per launch": (
                model.per_launch(p.cpu_s, p.launches) * 1e6 if p.launches and p.side == "CPU" else None
            ),
            "CPU issues it (ms)": p.cpu_s * 1e3,
            "the CPU side is": CPU_ESTIMATE[p.variant],
            "GPU runs it (ms)": p.gpu_s * 1e3,
            "model: the slower side (ms)": p.seconds * 1e3,
            "if nothing overlapped (ms)": p.upper_s * 1e3,
            "slower side": p.side,
        }
        for p in preds
    ]
    return pd.DataFrame(rows).set_index(["width", "step"])


def step_rows(step: StepRank, preds: Sequence[Prediction], target: float = TARGET) -> list[dict[str, Any]]:
    """One row per run. ``predicted_s``: the model's time for it, made before the run from the calibration
    (:func:`predictions`; None where none was made); ``error``: that prediction against the run's fastest repeat
    (the chapter's convention), ``within``: whether ``|error| ≤ target`` (issue 29's grade). Beside it, the run's
    consistency with its own two sides, measured right before it was timed: ``model_s`` the slower, ``upper_s``
    their sum, ``sides_error`` the slower against the fastest repeat, ``in_band`` whether that repeat lies within
    ``[model_s · (1 − target), upper_s · (1 + target)]``."""
    before = {(p.variant, p.width): p.seconds for p in preds}
    eager = {r.width: r.seconds for r in step.runs if r.variant == "eager"}
    rows = []
    for r in step.runs:
        cpu, gpu, fastest = r.sides.host_s, r.sides.gpu_s, min(r.repeats)
        lower, upper = (model.step_time(cpu, gpu), cpu + gpu) if gpu is not None else (None, None)
        predicted = before.get((r.variant, r.width))
        error = predicted / fastest - 1 if predicted is not None else None
        rows.append(
            {
                "width": r.width,
                "batch": r.batch,
                "variant": r.variant,
                "measured_s": r.seconds,
                "fastest_s": fastest,
                "spread": (max(r.repeats) - fastest) / r.seconds,
                "predicted_s": predicted,
                "error": error,
                "within": abs(error) <= target if error is not None else None,
                "model_s": lower,
                "upper_s": upper,
                "sides_error": lower / fastest - 1 if lower is not None else None,
                "in_band": lower * (1 - target) <= fastest <= upper * (1 + target) if lower and upper else None,
                "speedup": eager[r.width] / r.seconds if r.width in eager else None,
                "cpu_s": cpu,
                "gpu_s": gpu,
                "side": model.slower_side(cpu, gpu) if gpu is not None else None,
                "launches": r.sides.launches,
                "kernels": r.sides.kernels,
                "compile_s": r.compile_s,
                "sm_clock": f"{r.sm_clock_mhz[0]}–{r.sm_clock_mhz[1]}" if r.sm_clock_mhz else None,
            }
        )
    return rows


def step_table(rows: Sequence[Mapping[str, Any]]):  # -> pandas.DataFrame
    import pandas as pd

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    frame = pd.DataFrame(
        [
            {
                "width": r["width"],
                "step": LABELS[r["variant"]],
                "model before the run (ms)": ms(r["predicted_s"]),
                "fastest (ms)": ms(r["fastest_s"]),
                "model error": "—" if r["error"] is None else f"{r['error']:+.1%}",
                "within the target": r["within"],
                "measured (ms)": ms(r["measured_s"]),
                "during the run: slower side (ms)": ms(r["model_s"]),
                "at most: the sum (ms)": ms(r["upper_s"]),
                "within the band": r["in_band"],
                "× eager's speed": r["speedup"],
                "CPU (ms)": ms(r["cpu_s"]),
                "GPU (ms)": ms(r["gpu_s"]),
                "launches the CPU issues": r["launches"],
                "GPU operations (kernels, copies)": r["kernels"],
                "compile (s)": r["compile_s"],
                "SM clock (MHz)": r.get("sm_clock"),
            }
            for r in rows
        ]
    )
    return frame.set_index(["width", "step"])


def _named(r: Mapping[str, Any]) -> str:
    return f"{LABELS[r['variant']]} at width {r['width']}"


def _row_said(r: Mapping[str, Any]) -> str:
    ran = f"ran {r['fastest_s'] * 1e3:.3g} ms"
    if r["error"] is None:
        return f"{_named(r)} not predicted, {ran}"
    return f"{_named(r)} predicted {r['predicted_s'] * 1e3:.3g} ms, {ran} ({r['error']:+.1%})"


def recorded(run: RunResult) -> bool:
    """Whether a calibration run recorded the tiny op's eager GPU time at all (the key, None included): runs before
    commit 863ebb4 have no such key (review RR7-1: None on a current run is a failed measurement, not an older one)."""
    return "eager_gpu" in run.metrics.get("op", {})


def older_model(was_recorded: bool) -> str:
    """Why a calibration's predictions are not today's model's ("" where they are): one made before the graph's GPU
    side was predicted from a graph replay (review R7-3, ``was_recorded`` False: :func:`recorded`) predicted it from
    eager kernels, an upper estimate."""
    if was_recorded:
        return ""
    return (
        "This calibration predates the model's graph prediction from a replay and the compiled floor: its graph "
        "prediction is the eager GPU side, an upper estimate, so this is information, not the target's grade."
    )


def unmeasured_note(calib: CalibrateRank, was_recorded: bool) -> str:
    """On a current calibration whose tiny op's eager GPU time came back None (no sleep outlasted the issuing): what
    the graph's prediction stood on instead ("" otherwise). Graded all the same (review RR7-1)."""
    if not was_recorded or calib.op.eager_gpu is not None or calib.op.graph is None:
        return ""
    return (
        "The tiny op's eager GPU time was not measured (no sleep outlasted the issuing): the graph's GPU side is the "
        "eager one, an upper estimate."
    )


def model_verdict(
    rows: Sequence[Mapping[str, Any]],
    where: str,
    missing: str = "",
    target: float = TARGET,
    older: str = "",
    note: str = "",
) -> Verdict:
    """Issue 29's target, each way's prediction made before the run against its fastest repeat (:func:`step_rows`):
    fail when one is off by more than ``target`` or a run had no prediction (``missing``: why,
    :func:`unpredicted_why`); pass when none is off and every run was predicted; info instead of fail when the
    predictions are an older model's (``older``: why, :func:`older_model`). The text lists every row, then ``note``
    (:func:`unmeasured_note`), which changes no status."""
    if not rows:
        raise ValueError("no step was measured")
    graded = [r for r in rows if r["error"] is not None]
    missed = [_named(r) for r in graded if not r["within"]]
    unpredicted = [_named(r) for r in rows if r["error"] is None]
    numbers: dict[str, Any] = {f"{r['variant']} {r['width']}": r["error"] for r in graded}
    numbers |= {"target": target, "missed": missed, "unpredicted": unpredicted}
    reasons = _unpredicted_said(rows, missing)
    if graded:
        numbers["median_abs_error"] = statistics.median(abs(r["error"]) for r in graded)
    listed = "; ".join(_row_said(r) for r in rows)
    gap = f" Not predicted before the run: {reasons}." * bool(unpredicted)
    title = "The model (before the run) against the run"
    if missed:
        text = f"The prediction made before the run is off by more than {target:.0%} for {', '.join(missed)}: "
        status = "info" if older else "fail"
        said = " ".join(x for x in (f"{text}{listed}.{gap}", older, note) if x)
        return Verdict("overhead.model", status, said, numbers, where, title)
    if unpredicted:  # review RR7-4: the target is not met where a way went unpredicted; an older run's is info
        text = (
            f"Not predicted before the run: {reasons}; the predictions made lie "
            f"within {target:.0%} of their runs' fastest repeats: {listed}."
        )
        said = " ".join(x for x in (text, older, note) if x)
        return Verdict("overhead.model", "info" if older else "fail", said, numbers, where, title)
    text = f"Each way, predicted before the run, lies within {target:.0%} of its run's fastest repeat: {listed}."
    return Verdict("overhead.model", "pass", " ".join(x for x in (text, note) if x), numbers, where, title)


def _unpredicted_said(rows: Sequence[Mapping[str, Any]], missing: str) -> str:
    """Each run without a prediction and why (review RR15-4: a compiled run at a width the predictions were not made
    for is not a missing GPU side): ``missing`` is why the floor itself is missing (:func:`unpredicted_why`)."""
    why: dict[str, list[str]] = {}
    for r in rows:
        if r["error"] is not None:
            continue
        if r["variant"] == "compiled":
            reason = missing or "its width was not among the compile widths the predictions were made for"
        else:
            reason = "the calibration measured no GPU side at its width"
        why.setdefault(reason, []).append(_named(r))
    return "; ".join(f"{', '.join(names)}, because {reason}" for reason, names in why.items())


def floor_note(calib: CalibrateRank) -> str:
    """Where the compiled floor is an older calibration's single calls onto an idle GPU ("" otherwise; review
    RR15-1): what that does to the reduce-overhead prediction."""
    if calib.compiled_host_s is None or calib.compiled_repeats:
        return ""
    return (
        "This calibration timed the compiled floor as single calls onto an idle GPU (the median of five), not back to "
        "back as the runs are: on one H100 a single call read about 1.15–1.2× the step's pace back to back, so its "
        "reduce-overhead prediction runs that much high."
    )


def consistency_verdict(rows: Sequence[Mapping[str, Any]], where: str, target: float = TARGET) -> Verdict:
    """Information, not the target: whether each run's fastest repeat lies within the band of its own two sides,
    measured right before it was timed (the slower to their sum, ``target`` of slack either side); names the run
    that left its band, or whose GPU side could not be measured."""
    if not rows:
        raise ValueError("no step was measured")
    graded = [r for r in rows if r["in_band"] is not None]
    unmeasured = [_named(r) for r in rows if r["in_band"] is None]
    numbers: dict[str, Any] = {f"{r['variant']} {r['width']}": r["sides_error"] for r in graded} | {"target": target}
    numbers["unmeasured"] = unmeasured
    gap = f"; not graded, its GPU side not measured: {', '.join(unmeasured)}" if unmeasured else ""
    title = "The two sides measured during the run bracket it (consistency)"
    if not graded:
        text = f"No step could be graded: the GPU side of each could not be told apart from the CPU's{gap}."
        return Verdict("overhead.consistency", "info", text, numbers, where, title)
    median = statistics.median(abs(r["sides_error"]) for r in graded)
    numbers["median_abs_error"] = median
    out = [r for r in graded if not r["in_band"]]
    numbers["outside"] = [f"{x['variant']} {x['width']}" for x in out]
    if not out:
        text = (
            f"Every run lies within the band of the two sides measured right before it, from the slower to their sum "
            f"({target:.0%} either side); {_slower_said(graded)}{gap}."
        )
        return Verdict("overhead.consistency", "info", text, numbers, where, title)
    r = max(out, key=lambda r: abs(r["sides_error"]))
    why = (
        "slower than both sides one after the other: something the two sides leave out (a synchronisation, "
        "a clock that dropped) held it up"
        if r["fastest_s"] > r["upper_s"] * (1 + target)
        else "faster than its slower side: that side was measured under other conditions than the timed steps"
    )
    text = (
        f"{_named(r)} ran in {r['fastest_s'] * 1e3:.3g} ms (its fastest repeat), outside the band of its own sides, "
        f"{r['model_s'] * 1e3:.3g} to {r['upper_s'] * 1e3:.3g} ms ({target:.0%} either side): {why}. "
        f"{_slower_said(graded).capitalize()}{gap}."
    )
    return Verdict("overhead.consistency", "info", text, numbers, where, title)


def _slower_said(graded: Sequence[Mapping[str, Any]]) -> str:
    """The slower side against the fastest repeat, apart for each kind of side (review RR13-2): a GPU side is timed
    as the run is, so its median says little; a CPU side is one call onto an idle GPU, and each such row is named."""
    gpu = [abs(r["sides_error"]) for r in graded if r["side"] == "GPU"]
    cpu = [f"{_named(r)} {r['sides_error']:+.0%}" for r in graded if r["side"] == "CPU"]
    parts = []
    if gpu:
        median = statistics.median(gpu)
        parts.append(f"where the GPU is the slower side (timed as the run is), it is off by a median {median:.0%}")
    if cpu:
        parts.append(f"where the CPU is (one call onto an idle GPU, against steps back to back), by {', '.join(cpu)}")
    return "; ".join(parts)


def correctness_verdict(step: StepRank, where: str) -> Verdict:
    """Pass when every graphed step trained what the eager step trained to rounding (:data:`GRAPH_TOLERANCE`) and
    every compiled one to :data:`COMPILED_TOLERANCE`."""
    tolerance = {"eager": 0.0, "graph": GRAPH_TOLERANCE, "compiled": COMPILED_TOLERANCE}
    worst: dict[str, float] = {}
    for r in step.runs:
        worst[r.variant] = max(worst.get(r.variant, 0.0), r.loss_rel_diff, r.weight_rel_diff)
    bad = [v for v, d in worst.items() if d > tolerance[v]]
    numbers = {f"{v}_max_rel_diff": d for v, d in worst.items()}
    said = ", ".join(f"{LABELS[v]} {worst[v]:.1e} (at most {tolerance[v]:.0e})" for v in worst if v != "eager")
    if bad:
        text = (
            f"Not the same training: {', '.join(LABELS[v] for v in bad)} moved away from the eager step's losses or "
            f"weights ({said}): a graph replays the kernels it captured, so a difference means the capture ran on "
            "other inputs or missed a step's update."
        )
        return Verdict("overhead.same_training", "fail", text, numbers, where, "The same training")
    text = (
        f"Each way trained what the eager step trained, from the same weights on the same batches: largest relative "
        f"difference of the losses and the weights {said}."
    )
    return Verdict("overhead.same_training", "pass", text, numbers, where, "The same training")


def grade_speedups(mine: Mapping[str, float | None], rows: Sequence[Mapping[str, Any]], where: str) -> list[Verdict]:
    """The learner's predicted speed-ups (``"graph, small"``, ``"compiled, small"``, ``"graph, wide"``) against the
    run's (the eager step's time over the variant's)."""
    widths = sorted({r["width"] for r in rows})
    by = {(r["variant"], "small" if r["width"] == widths[0] else "wide"): r for r in rows}
    out = []
    for key, prediction in mine.items():
        variant, size = (part.strip() for part in key.split(","))
        row, eager = by.get((variant, size)), by.get(("eager", size))
        if row is None or row["speedup"] is None or eager is None:
            continue
        out.append(
            grade_number(
                f"11.speedup {key}",
                prediction,
                row["speedup"],
                unit="×",
                where=where,
                explanation=(
                    f"The eager step took {eager['measured_s'] * 1e3:.3g} ms, {LABELS[variant]} "
                    f"{row['measured_s'] * 1e3:.3g} ms: {_speedup_why(row, eager)}."
                ),
                question=f"How many times as fast {LABELS[variant]} runs the step at width {row['width']}",
            )
        )
    return out


def _speedup_why(row: Mapping[str, Any], eager: Mapping[str, Any]) -> str:
    """Why a way ran as fast as it did, from the sides each run measured right before it (review R7-6)."""
    ms = lambda s: f"{s * 1e3:.3g} ms"  # noqa: E731
    if eager["gpu_s"] is None or row["gpu_s"] is None:
        return f"a graph removes most of the eager step's CPU side ({ms(eager['cpu_s'])}); its GPU side: not measured"
    if eager["side"] == "GPU":
        return (
            f"the eager step's CPU side ({ms(eager['cpu_s'])}) was already hidden under its GPU side "
            f"({ms(eager['gpu_s'])}); {_gpu_shrink(row, eager)}"
        )
    if row["side"] == "CPU":
        left = " (guards, CUDA Graph Trees' bookkeeping, the eager Adam)" * (row["variant"] == "compiled")
        return (
            f"it left a CPU side over {row['launches']} launches{left}: {ms(row['cpu_s'])} for one call onto an "
            f"idle GPU, {ms(row['measured_s'])} per step back to back, above its GPU side of "
            f"{ms(row['gpu_s'])}: still overhead-bound, short of the {eager['measured_s'] / row['gpu_s']:.2g}× its "
            "GPU side alone would give"
        )
    return (
        f"it removed most of the eager step's CPU side ({ms(eager['cpu_s'])}), not its GPU side "
        f"({ms(eager['gpu_s'])}): the step came down to its GPU side ({ms(row['gpu_s'])})"
    )


def _gpu_shrink(row: Mapping[str, Any], eager: Mapping[str, Any]) -> str:
    """What is left to gain once the eager CPU side is hidden: the GPU side's own change (review RR7-6)."""
    ms = lambda s: f"{s * 1e3:.3g} ms"  # noqa: E731
    sides = f"{ms(eager['gpu_s'])} → {ms(row['gpu_s'])}"
    if row["gpu_s"] >= eager["gpu_s"]:
        return f"{LABELS[row['variant']]}'s GPU side did not shrink ({sides}), so there was nothing left to gain"
    why = "the front end's per-launch work a replay skips" if row["variant"] == "graph" else "fewer, fused kernels"
    return f"{LABELS[row['variant']]}'s gain is its GPU side's own shrink ({sides}: {why})"


# ------------------------------------------------------------------------------------------- the all-reduce


def allreduce_table(points: Sequence[AllReducePoint]):  # -> pandas.DataFrame
    import pandas as pd

    rows = [
        {
            "size": format_size(p.nbytes),
            "back to back (µs)": us(p.eager),
            "each waited for (µs)": us(p.waited),
            "replayed from a CUDA graph (µs)": us(p.graph),
            "the host's share": None if p.graph is None else 1 - p.graph / p.eager,
        }
        for p in points
    ]
    return pd.DataFrame(rows).set_index("size")


def allreduce_verdict(points: Sequence[AllReducePoint], world: int, where: str) -> Verdict:
    """The smallest all-reduce's fixed cost, split: the part a CUDA graph removes is the host's (Python, c10d, the
    launch); what is left is NCCL's own on the GPU: with one rank no wire, with two the link's latency too."""
    p = min(points, key=lambda q: q.nbytes)
    numbers: dict[str, Any] = {"eager_us": us(p.eager), "waited_us": us(p.waited), "world": world}
    head = (
        f"An all-reduce of {format_size(p.nbytes)}: the host issues one every {us(p.eager):.1f} µs back to back (a "
        f"throughput cost) and {us(p.waited):.1f} µs waited for one by one (its latency)"
    )
    if p.graph is None:
        who = (
            "in a world of one gloo process (no peer: what a call costs Python and gloo's own path)"
            if world == 1
            else f"on {world} gloo processes over the loopback"
        )
        text = (
            f"An all-reduce of {format_size(p.nbytes)} costs {us(p.eager):.1f} µs per call back to back {who}, "
            f"{us(p.waited):.1f} µs waited for one by one: a CPU simulation, where a gloo call on CPU tensors returns "
            "only once it is done, so the two measure the same thing (their difference is a shared CPU's noise). A "
            "CUDA graph cannot hold a gloo collective: the committed 2× H200 numbers below split the α of a pair of "
            "GPUs."
        )
        return Verdict("overhead.allreduce", "info", text, numbers, where, "An all-reduce's fixed cost")
    share = 1 - p.graph / p.eager
    numbers.update(graph_us=us(p.graph), host_share=share, host_over_gpu=p.eager / p.graph)
    if world == 1:
        text = (
            f"{head} in a world of one; replayed from a CUDA graph, the GPU's own work per call, NCCL's one kernel for "
            f"a world of one (an average scales by 1/n), is {us(p.graph):.2f} µs, {p.eager / p.graph:.2g}× less: "
            "back to back that work hides under the host's, and a call is host-bound (Python, c10d's bookkeeping, "
            "NCCL's enqueue, the launch). One rank has no peer and no wire: notebook 10's α, fitted on two GPUs, adds "
            "the link and NCCL's latency between GPUs, which only two GPUs can show."
        )
    else:
        text = (
            f"{head} on {world} GPUs; replayed from a CUDA graph a call costs {us(p.graph):.2f} µs, NCCL's own work "
            f"with the link's latency, {p.eager / p.graph:.2g}× less than the host's pace: back to back that work "
            "hides under the host's, and a PyTorch call is host-bound."
        )
    return Verdict("overhead.allreduce", "info", text, numbers, where, "An all-reduce's fixed cost")


def reference_split():  # -> pandas.DataFrame
    """The committed 2× H200's all-reduce: the α a PyTorch call pays (notebook 10's fit of the sweep) against
    nccl-tests' whole all-reduce at its smallest size (its own, lighter host path)."""
    import pandas as pd

    from nvtutorial.chapters.ch01_hardware import report as bandwidth
    from nvtutorial.chapters.ch10_cost_model import report as costs

    fit = costs.reference_fit()
    smallest = min(bandwidth.reference_nccl_tests()["default"].rows, key=lambda r: r["size"])
    return pd.DataFrame(
        [
            {"what": "α of a PyTorch all-reduce (fit of the 1 KiB to 1 GiB sweep)", "µs": fit.link.alpha * 1e6},
            {
                "what": f"nccl-tests, a whole {format_size(smallest['size'])} all-reduce (in place)",
                "µs": smallest["ip_time_us"],
            },
        ]
    ).set_index("what")


# ------------------------------------------------------------------------------------------- the crossovers


def parameter_shapes(p: Params, width: int) -> list[tuple[str, tuple[int, ...]]]:
    """The lesson transformer's parameters at ``width``, in ``named_parameters()`` order, by arithmetic: the kernel
    need not import torch for them (seconds on a GPU machine). A test holds it to ``models.transformer``'s."""
    d, h = width, p.mlp_ratio * width
    block = [("norm1.weight", (d,)), ("norm1.bias", (d,))]
    block += [(f"attn.{w}.weight", (d, d)) for w in ("wq", "wk", "wv", "wo")]
    block += [("norm2.weight", (d,)), ("norm2.bias", (d,)), ("mlp.w1.weight", (h, d)), ("mlp.w2.weight", (d, h))]
    blocks = [(f"blocks.{i}.{name}", shape) for i in range(p.layers) for name, shape in block]
    ends = [("norm.weight", (d,)), ("norm.bias", (d,)), ("head.weight", (p.vocab, d))]
    return [("tok.weight", (p.vocab, d)), ("pos.weight", (p.seq_len, d)), *blocks, *ends]


def ddp_model(p: Params, width: int) -> tuple[int, int]:
    """``(parameters, DDP's buckets)`` of the lesson's transformer at ``width`` (notebook 10's bucket rule)."""
    from nvtutorial.chapters.ch08_ladder.report_model import Setup
    from nvtutorial.chapters.ch10_cost_model import model as costs
    from nvtutorial.chapters.ch10_cost_model import problems

    shapes = parameter_shapes(p, width)
    grads = problems.ddp_gradients(Setup(**p.config(width), global_batch=1, world=2), shapes)
    return sum(math.prod(shape) for _, shape in shapes), len(costs.ddp_buckets(grads))


def crossovers(calib: CalibrateRank, p: Params, link: Any, roof: float | None = None) -> dict[str, float | None]:
    """The crossovers between regimes, from this calibration (its sizes ``p``) and ``link`` (α, β):

    - ``doubling_tokens``: tokens per step where the doubling sweep's work meets its floor (None: it never left it);
    - ``closed_form_tokens`` (GPU): the same from the two sides of the small step, both at its width: the tokens at
      which its GPU side, growing with the tokens at the rate it reached, catches up with its CPU side;
    - ``ddp_tokens`` (GPU): tokens per GPU above which DDP's backward pass outlasts its all-reduces, α included, for
      the small step's model (fp32 gradients, two GPUs, its buckets; notebook 10's ``ddp_critical_tokens`` at the rate
      that step reached);
    - ``closed_form_roof_tokens``, ``ddp_roof_tokens`` (GPU, with ``roof``): the same two at the fp32 roof ``roof``
      (FLOP/s), the fastest rate possible, so upper estimates; the small step's rate, mostly per-kernel time rather
      than per-token work, gives the lower (review R7-7);
    - ``collective_bytes``: bytes above which an all-reduce costs its bytes rather than its α."""
    from nvtutorial.chapters.ch10_cost_model import model as costs

    points = doubling_points(calib)
    out: dict[str, float | None] = {
        "doubling_tokens": (
            model.crossover_batch(points, model.overhead_floor(points)) * p.seq_len
            if model.left_the_floor(points, model.overhead_floor(points))
            else None
        ),
        "closed_form_tokens": None,
        "ddp_tokens": None,
        "collective_bytes": costs.crossover_bytes(link),
    }
    small = small_step(calib)
    if small is not None and small.gpu_s:
        tokens = small.batch * p.seq_len
        out["closed_form_tokens"] = model.overhead_crossover_tokens(
            small.host_s, step_flops(small, p) / tokens, step_flops(small, p) / small.gpu_s
        )
        n, buckets = ddp_model(p, small.width)
        rate = costs.Roof(step_flops(small, p) / small.gpu_s, 1.0)
        out["ddp_tokens"] = costs.ddp_critical_tokens(rate, link, n_params=n, buckets=buckets)
        if roof:
            flops = step_flops(small, p) / tokens
            out["closed_form_roof_tokens"] = model.overhead_crossover_tokens(small.host_s, flops, roof)
            top = costs.Roof(roof, 1.0)
            out["ddp_roof_tokens"] = costs.ddp_critical_tokens(top, link, n_params=n, buckets=buckets)
    return out


def small_step(calib: CalibrateRank) -> Sides | None:
    """The eager step's sides at the smallest width whose GPU side was measured (None on the CPU)."""
    measured = [s for s in calib.sides if s.gpu_s]
    return min(measured, key=lambda s: s.width) if measured else None


def regime_map(
    calib: CalibrateRank, p: Params, link: Any, link_where: str, where: str, roof: tuple[float, str] | None = None
):  # -> pandas.DataFrame
    """:func:`crossovers` as a table: each one, where it lies, what holds below it, where it was measured (the two
    that need a GPU's sides only where the calibration has them; with ``roof``, the fp32 roof and where it was
    measured, each of those two as a bracket from the small step's rate to the roof's)."""
    import pandas as pd

    found = crossovers(calib, p, link, roof[0] if roof else None)
    largest = max(b for b, _ in doubling_points(calib)) * p.seq_len
    rows = [
        (
            f"the doubling sweep (width {calib.doubling_width}) leaves its floor",
            _tokens(found["doubling_tokens"], "per step") or f"above {largest:,} tokens per step (not reached)",
            "overhead-bound: more tokens per step cost almost nothing",
            where,
        )
    ]
    small = small_step(calib)
    if small is not None and found["closed_form_tokens"] is not None:
        n, buckets = ddp_model(p, small.width)
        rows.append(
            (
                f"the same in closed form at width {small.width}: CPU side × tokens ÷ GPU side, from the GPU's rate at "
                f"{small.batch * p.seq_len} tokens (its GPU side is mostly per-kernel time, which does not grow with "
                "the tokens until the kernels fill the GPU: a lower bound)"
                + " to the fp32 roof's (an upper bound)"
                * bool(roof),
                _bracket(found["closed_form_tokens"], found.get("closed_form_roof_tokens"), "per step"),
                "overhead-bound",
                where + (f"; roof: {roof[1]}" if roof else ""),
            )
        )
        rows.append(
            (
                f"DDP can hide all but its last bucket (width {small.width}: {n / 1e6:.3g} M parameters, {buckets} "
                "buckets, fp32 gradients, 2 GPUs, α included; from the rate at the small step's batch, a lower bound"
                + ", to the fp32 roof's, an upper bound)" * bool(roof)
                + ")" * (not roof),
                _bracket(found["ddp_tokens"], found.get("ddp_roof_tokens"), "per GPU"),
                "the gradients' all-reduces outlast the backward pass",
                f"rate: {where}; link: {link_where}" + (f"; roof: {roof[1]}" if roof else ""),
            )
        )
    rows.append(
        (
            "an all-reduce (2 GPUs) costs its bytes",
            format_size(found["collective_bytes"] or 0),
            "a call costs mostly α, whatever its size",
            link_where,
        )
    )
    return pd.DataFrame(rows, columns=["crossover", "above", "below it", "measured on"]).set_index("crossover")


def _tokens(value: float | None, per: str) -> str:
    return "" if value is None else f"{value:,.0f} tokens {per}"


def _bracket(low: float | None, high: float | None, per: str) -> str:
    return _tokens(low, per) if high is None or low is None else f"{low:,.0f} to {high:,.0f} tokens {per}"


def reference_fp32() -> tuple[float, str]:
    """The committed one-H200's fp32 multiply roof (notebook 10's calibration at the lesson's sizes) and where."""
    from nvtutorial.chapters.ch10_cost_model import report as costs

    run = costs.reference_device("calibrate")
    said = f"{costs.where(run)}: notebook 10's fp32 roof, the committed run in reference/h200x1"
    return costs.calibrated(run).roofs["float32"].flops, said


def reference_link() -> tuple[Any, str]:
    """The committed 2× H200's all-reduce α and β (notebook 10's fit) and where they were measured."""
    from nvtutorial.chapters.ch10_cost_model import report as costs

    return costs.reference_fit().link, costs.reference_where()


# ------------------------------------------------------------------------------------------- the committed run


def committed(root: Path = REFERENCE) -> dict[str, Any]:
    """The newest committed one-GPU runs of notebook 11 (``reference/<machine>/runs-11/*/result.json``): the machine
    whose newest ``step`` run is the newest, its newest ``step`` and ``calibrate`` runs and the machine's folder name
    (``kind``); empty when no machine has both."""
    machines: dict[str, dict[str, RunResult]] = {}
    for path in sorted(root.glob("*/runs-11/*/result.json"), key=lambda p: p.parent.name):
        run = RunResult.load(path)
        run.run_dir = path.parent
        if Path(run.workload).name == "overhead" and run.ok:
            machines.setdefault(path.parents[2].name, {})[run.params.get("part", "calibrate")] = run
    complete = {kind: runs for kind, runs in machines.items() if {"calibrate", "step"} <= set(runs)}
    if not complete:
        return {}
    kind = max(complete, key=lambda k: complete[k]["step"].run_dir.name)
    return {**complete[kind], "kind": kind}


def committed_where(run: RunResult, kind: str) -> str:
    return f"{run.label}: the committed run in reference/{kind}, not this machine"
