"""Notebook 11's step three ways: the model's predictions of the step eager, in one CUDA graph and compiled with
``mode="reduce-overhead"``, made before the run from the calibration; each run against its prediction and against its
own two sides (:class:`StepRow`); the training they must share; the learner's speed-ups graded. Re-exported by
``report.py``; it imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Mapping, Sequence

from nvtutorial.chapters.ch11_overhead import model
from nvtutorial.chapters.ch11_overhead.report_floor import us
from nvtutorial.chapters.ch11_overhead.schema import CalibrateRank, OpCost, Sides, StepRank
from nvtutorial.report.predict import grade_number
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult

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
LABELS = {"eager": "eager", "graph": "one CUDA graph", "compiled": "reduce-overhead"}


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


def graph_gpu_check(preds: Sequence[Prediction], rows: Sequence[StepRow]) -> str:
    """Review RR7-3: the graph's GPU side predicted before the run (:func:`graph_gpu_s`) against the one its run
    measured right before it was timed, at each width both have; and the saving per kernel the step launch shows, its
    eager step's GPU side less its graph's over the eager step's kernels (review RR13-5: both from the one launch;
    "" where no width has both)."""
    said = {(p.variant, p.width): p.gpu_s for p in preds}
    eager = {r.width: r for r in rows if r.variant == "eager"}
    parts = []
    for r in rows:
        predicted, own = said.get(("graph", r.width)), eager.get(r.width)
        if r.variant != "graph" or predicted is None or r.gpu_s is None or own is None:
            continue
        if not own.kernels or own.gpu_s is None:
            continue
        saving = (own.gpu_s - r.gpu_s) / own.kernels
        parts.append(
            f"width {r.width}: predicted {predicted * 1e3:.3g} ms, measured {r.gpu_s * 1e3:.3g} ms "
            f"({predicted / r.gpu_s - 1:+.1%}; a saving of {us(saving):.2f} µs per kernel)"
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


@dataclasses.dataclass(frozen=True)
class StepRow:
    """One run of the step part (:func:`step_rows`): what it measured, the model's prediction made before it, and its
    consistency with its own two sides, measured right before it was timed."""

    width: int
    batch: int
    variant: str
    measured_s: float
    """The median of its repeats, per step."""
    fastest_s: float
    spread: float
    """The repeats' range over the median."""
    predicted_s: float | None
    """The model's time for it, made before the run from the calibration (None where none was made)."""
    error: float | None
    """That prediction against the fastest repeat (the chapter's convention)."""
    within: bool | None
    """Whether ``|error| ≤ target`` (issue 29's grade)."""
    model_s: float | None
    """The slower of its own two sides (None where its GPU side was not measured)."""
    upper_s: float | None
    """The sum of its two sides."""
    sides_error: float | None
    """The slower side against the fastest repeat."""
    in_band: bool | None
    """Whether the fastest repeat lies within ``[model_s · (1 − target), upper_s · (1 + target)]``."""
    speedup: float | None
    """The eager step's median at its width over its own."""
    cpu_s: float
    gpu_s: float | None
    side: str | None
    """The slower side, ``"CPU"`` or ``"GPU"``."""
    launches: int | None
    kernels: int | None
    compile_s: float | None
    sm_clock: str | None
    """The lowest to the highest SM clock read after the timed repeats (MHz), where NVML said."""


def step_rows(step: StepRank, preds: Sequence[Prediction], target: float = TARGET) -> list[StepRow]:
    """One row per run (:class:`StepRow`). ``predicted_s``: the model's time for it, made before the run from the
    calibration (:func:`predictions`; None where none was made); ``error``: that prediction against the run's fastest
    repeat (the chapter's convention), ``within``: whether ``|error| ≤ target`` (issue 29's grade). Beside it, the
    run's consistency with its own two sides, measured right before it was timed: ``model_s`` the slower, ``upper_s``
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
            StepRow(
                width=r.width,
                batch=r.batch,
                variant=r.variant,
                measured_s=r.seconds,
                fastest_s=fastest,
                spread=(max(r.repeats) - fastest) / r.seconds,
                predicted_s=predicted,
                error=error,
                within=abs(error) <= target if error is not None else None,
                model_s=lower,
                upper_s=upper,
                sides_error=lower / fastest - 1 if lower is not None else None,
                in_band=lower * (1 - target) <= fastest <= upper * (1 + target) if lower and upper else None,
                speedup=eager[r.width] / r.seconds if r.width in eager else None,
                cpu_s=cpu,
                gpu_s=gpu,
                side=model.slower_side(cpu, gpu) if gpu is not None else None,
                launches=r.sides.launches,
                kernels=r.sides.kernels,
                compile_s=r.compile_s,
                sm_clock=f"{r.sm_clock_mhz[0]}–{r.sm_clock_mhz[1]}" if r.sm_clock_mhz else None,
            )
        )
    return rows


def step_table(rows: Sequence[StepRow]):  # -> pandas.DataFrame
    import pandas as pd

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    frame = pd.DataFrame(
        [
            {
                "width": r.width,
                "step": LABELS[r.variant],
                "model before the run (ms)": ms(r.predicted_s),
                "fastest (ms)": ms(r.fastest_s),
                "model error": "—" if r.error is None else f"{r.error:+.1%}",
                "within the target": r.within,
                "measured (ms)": ms(r.measured_s),
                "during the run: slower side (ms)": ms(r.model_s),
                "at most: the sum (ms)": ms(r.upper_s),
                "within the band": r.in_band,
                "× eager's speed": r.speedup,
                "CPU (ms)": ms(r.cpu_s),
                "GPU (ms)": ms(r.gpu_s),
                "launches the CPU issues": r.launches,
                "GPU operations (kernels, copies)": r.kernels,
                "compile (s)": r.compile_s,
                "SM clock (MHz)": r.sm_clock,
            }
            for r in rows
        ]
    )
    return frame.set_index(["width", "step"])


def _named(r: StepRow) -> str:
    return f"{LABELS[r.variant]} at width {r.width}"


def _row_said(r: StepRow) -> str:
    ran = f"ran {r.fastest_s * 1e3:.3g} ms"
    if r.error is None or r.predicted_s is None:
        return f"{_named(r)} not predicted, {ran}"
    return f"{_named(r)} predicted {r.predicted_s * 1e3:.3g} ms, {ran} ({r.error:+.1%})"


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
    rows: Sequence[StepRow],
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
    graded = [r for r in rows if r.error is not None]
    missed = [_named(r) for r in graded if not r.within]
    unpredicted = [_named(r) for r in rows if r.error is None]
    numbers: dict[str, object] = {f"{r.variant} {r.width}": r.error for r in graded}
    numbers |= {"target": target, "missed": missed, "unpredicted": unpredicted}
    reasons = _unpredicted_said(rows, missing)
    if graded:
        numbers |= {"median_abs_error": statistics.median(abs(r.error) for r in rows if r.error is not None)}
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


def _unpredicted_said(rows: Sequence[StepRow], missing: str) -> str:
    """Each run without a prediction and why (review RR15-4: a compiled run at a width the predictions were not made
    for is not a missing GPU side): ``missing`` is why the floor itself is missing (:func:`unpredicted_why`)."""
    why: dict[str, list[str]] = {}
    for r in rows:
        if r.error is not None:
            continue
        if r.variant == "compiled":
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


def consistency_verdict(rows: Sequence[StepRow], where: str, target: float = TARGET) -> Verdict:
    """Information, not the target: whether each run's fastest repeat lies within the band of its own two sides,
    measured right before it was timed (the slower to their sum, ``target`` of slack either side); names the run
    that left its band, or whose GPU side could not be measured."""
    if not rows:
        raise ValueError("no step was measured")
    graded = [r for r in rows if r.in_band is not None]
    unmeasured = [_named(r) for r in rows if r.in_band is None]
    numbers: dict[str, object] = {f"{r.variant} {r.width}": r.sides_error for r in graded}
    numbers |= {"target": target, "unmeasured": unmeasured}
    gap = f"; not graded, its GPU side not measured: {', '.join(unmeasured)}" if unmeasured else ""
    title = "The two sides measured during the run bracket it (consistency)"
    if not graded:
        text = f"No step could be graded: the GPU side of each could not be told apart from the CPU's{gap}."
        return Verdict("overhead.consistency", "info", text, numbers, where, title)
    out = [r for r in graded if not r.in_band]
    numbers |= {"median_abs_error": statistics.median(_off(r) for r in graded)}
    numbers |= {"outside": [f"{x.variant} {x.width}" for x in out]}
    if not out:
        text = (
            f"Every run lies within the band of the two sides measured right before it, from the slower to their sum "
            f"({target:.0%} either side); {_slower_said(graded)}{gap}."
        )
        return Verdict("overhead.consistency", "info", text, numbers, where, title)
    r = max(out, key=_off)
    assert r.model_s is not None and r.upper_s is not None  # a row's band is known only where both sides are
    why = (
        "slower than both sides one after the other: something the two sides leave out (a synchronisation, "
        "a clock that dropped) held it up"
        if r.fastest_s > r.upper_s * (1 + target)
        else "faster than its slower side: that side was measured under other conditions than the timed steps"
    )
    text = (
        f"{_named(r)} ran in {r.fastest_s * 1e3:.3g} ms (its fastest repeat), outside the band of its own sides, "
        f"{r.model_s * 1e3:.3g} to {r.upper_s * 1e3:.3g} ms ({target:.0%} either side): {why}. "
        f"{_slower_said(graded).capitalize()}{gap}."
    )
    return Verdict("overhead.consistency", "info", text, numbers, where, title)


def _off(r: StepRow) -> float:
    """How far a graded row's slower side was from its fastest repeat, either way (:func:`consistency_verdict`)."""
    if r.sides_error is None:
        raise ValueError(f"{_named(r)}: its GPU side was not measured, so it has no band to be graded against")
    return abs(r.sides_error)


def _slower_said(graded: Sequence[StepRow]) -> str:
    """The slower side against the fastest repeat, apart for each kind of side (review RR13-2): a GPU side is timed
    as the run is, so its median says little; a CPU side is one call onto an idle GPU, and each such row is named."""
    gpu = [_off(r) for r in graded if r.side == "GPU"]
    cpu = [f"{_named(r)} {r.sides_error:+.0%}" for r in graded if r.side == "CPU"]
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


def grade_speedups(mine: Mapping[str, float | None], rows: Sequence[StepRow], where: str) -> list[Verdict]:
    """The learner's predicted speed-ups (``"graph, small"``, ``"compiled, small"``, ``"graph, wide"``) against the
    run's (the eager step's time over the variant's)."""
    widths = sorted({r.width for r in rows})
    by = {(r.variant, "small" if r.width == widths[0] else "wide"): r for r in rows}
    out = []
    for key, prediction in mine.items():
        variant, size = (part.strip() for part in key.split(","))
        row, eager = by.get((variant, size)), by.get(("eager", size))
        if row is None or row.speedup is None or eager is None:
            continue
        out.append(
            grade_number(
                f"11.speedup {key}",
                prediction,
                row.speedup,
                unit="×",
                where=where,
                explanation=(
                    f"The eager step took {eager.measured_s * 1e3:.3g} ms, {LABELS[variant]} "
                    f"{row.measured_s * 1e3:.3g} ms: {_speedup_why(row, eager)}."
                ),
                question=f"How many times as fast {LABELS[variant]} runs the step at width {row.width}",
            )
        )
    return out


def _speedup_why(row: StepRow, eager: StepRow) -> str:
    """Why a way ran as fast as it did, from the sides each run measured right before it (review R7-6)."""
    ms = lambda s: f"{s * 1e3:.3g} ms"  # noqa: E731
    if eager.gpu_s is None or row.gpu_s is None:
        return f"a graph removes most of the eager step's CPU side ({ms(eager.cpu_s)}); its GPU side: not measured"
    if eager.side == "GPU":
        return (
            f"the eager step's CPU side ({ms(eager.cpu_s)}) was already hidden under its GPU side "
            f"({ms(eager.gpu_s)}); {_gpu_shrink(row.variant, row.gpu_s, eager.gpu_s)}"
        )
    if row.side == "CPU":
        left = " (guards, CUDA Graph Trees' bookkeeping, the eager Adam)" * (row.variant == "compiled")
        return (
            f"it left a CPU side over {row.launches} launches{left}: {ms(row.cpu_s)} for one call onto an "
            f"idle GPU, {ms(row.measured_s)} per step back to back, above its GPU side of "
            f"{ms(row.gpu_s)}: still overhead-bound, short of the {eager.measured_s / row.gpu_s:.2g}× its "
            "GPU side alone would give"
        )
    return (
        f"it removed most of the eager step's CPU side ({ms(eager.cpu_s)}), not its GPU side "
        f"({ms(eager.gpu_s)}): the step came down to its GPU side ({ms(row.gpu_s)})"
    )


def _gpu_shrink(variant: str, gpu_s: float, eager_gpu_s: float) -> str:
    """What is left to gain once the eager CPU side is hidden: the GPU side's own change, from the eager step's
    ``eager_gpu_s`` to the way's ``gpu_s`` (review RR7-6)."""
    sides = f"{eager_gpu_s * 1e3:.3g} ms → {gpu_s * 1e3:.3g} ms"
    if gpu_s >= eager_gpu_s:
        return f"{LABELS[variant]}'s GPU side did not shrink ({sides}), so there was nothing left to gain"
    why = "the front end's per-launch work a replay skips" if variant == "graph" else "fewer, fused kernels"
    return f"{LABELS[variant]}'s gain is its GPU side's own shrink ({sides}: {why})"
