"""Notebook 10's results as numbers, tables and verdicts: the calibration's roofs and its α–β fits with their
residuals, the committed 2× H200 link against the model, the pipeline's correctness, bubble and memory, and the
capstone's correctness, fit and score. Kernel side: it reads results, never launches, never draws. The worked
problems' answer keys and graders are ``problems.py``; the model itself ``model.py``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nvtutorial.chapters.ch10_cost_model import model, schema
from nvtutorial.report.verdict import Verdict
from nvtutorial.units import bus_factor, format_size

REFERENCE_NOTE = "the committed runs in reference/h200x2, not this machine"
"""Said next to every two-GPU number that comes from the committed 2× H200 runs."""
TARGET = 0.20
"""The model's target: its median relative error against the runs (issue 24), on GPUs."""


def where(result: Any) -> str:
    return getattr(result, "label", str(result))


def ranks(result: Any, part: str) -> list[Any]:
    """Every rank's metrics of a run of the ``costmodel`` workload, typed (``schema.read``)."""
    return [schema.read(part, m) for m in result.ranks]


# --------------------------------------------------------------------------------------------------- the roofs


def roofs(calibration: Sequence[schema.CalibrationRank]) -> dict[str, model.Roof]:
    """The roofs per dtype: each rank's best matrix-multiply throughput and best copy bandwidth, then the slowest
    rank's (a synchronous step waits for it)."""
    dtypes = sorted({m.dtype for c in calibration for m in c.matmul})
    bandwidth = min(max(p.bytes_per_s for p in c.copy) for c in calibration)
    return {
        d: model.Roof(
            flops=min(max(m.flops_per_s for m in c.matmul if m.dtype == d) for c in calibration), bandwidth=bandwidth
        )
        for d in dtypes
    }


def roof_table(calibration: Sequence[schema.CalibrationRank]):  # -> pandas.DataFrame
    """Every measurement behind the roofs: TFLOP/s per matrix size and dtype, GB/s per copied buffer, per rank."""
    import pandas as pd

    rows = []
    for c in calibration:
        rows += [
            {
                "rank": c.rank,
                "device": c.device,
                "measured": f"matmul {m.n}³ {m.dtype}",
                "time (ms)": m.seconds * 1e3,
                "rate": m.flops_per_s / 1e12,
                "unit": "TFLOP/s",
            }
            for m in c.matmul
        ]
        rows += [
            {
                "rank": c.rank,
                "device": c.device,
                "measured": f"copy {format_size(p.nbytes)}",
                "time (ms)": p.seconds * 1e3,
                "rate": p.bytes_per_s / 1e9,
                "unit": "GB/s",
            }
            for p in c.copy
        ]
    return pd.DataFrame(rows).set_index(["rank", "measured"])


# --------------------------------------------------------------------------------------------------- the α–β fit


@dataclasses.dataclass(frozen=True)
class Fit:
    """``t = α + S · factor / β`` fitted to one collective's sweep, with the measurements and the residuals."""

    kind: str
    ranks: int
    link: model.Link
    sizes: tuple[int, ...]
    measured: tuple[float, ...]
    where: str

    @property
    def predicted(self) -> tuple[float, ...]:
        return tuple(model.collective_time(s, self.link, self.kind, self.ranks) for s in self.sizes)

    @property
    def residuals(self) -> tuple[float, ...]:
        """(model − measured) ÷ measured at each size."""
        return tuple(p / m - 1 for p, m in zip(self.predicted, self.measured))


def fit_link(kind: str, sizes: Sequence[int], seconds: Sequence[float], ranks: int, where: str = "") -> Fit:
    """Least squares on the *relative* residuals, so that a 1 KiB point counts as much as a 1 GiB one: minimise
    Σ((α + x·γ − t)/t)² over α ≥ 0 and γ = 1/β > 0, with x = S · factor (the bytes a rank sends)."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError(
            f"{kind}: a fit needs at least two sizes with a time each (got {len(sizes)} and {len(seconds)})"
        )
    if any(t <= 0 for t in seconds) or any(s <= 0 for s in sizes):
        raise ValueError(f"{kind}: sizes and times must be positive")
    f = bus_factor(kind, ranks)
    x = [s * f for s in sizes]
    w = [1 / t for t in seconds]
    # the normal equations of min Σ (w·α + w·x·γ − 1)² (w·t = 1)
    a11 = sum(wi * wi for wi in w)
    a12 = sum(wi * wi * xi for wi, xi in zip(w, x))
    a22 = sum((wi * xi) ** 2 for wi, xi in zip(w, x))
    b1, b2 = sum(w), sum(wi * xi for wi, xi in zip(w, x))
    det = a11 * a22 - a12 * a12
    alpha, gamma = ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det) if det > 0 else (-1.0, -1.0)
    if alpha < 0 or gamma <= 0:  # a negative latency or bandwidth fits noise, not a link: no latency, bandwidth alone
        alpha, gamma = 0.0, b2 / a22
    return Fit(
        kind=kind,
        ranks=ranks,
        link=model.Link(alpha=alpha, beta=1 / gamma),
        sizes=tuple(sizes),
        measured=tuple(seconds),
        where=where,
    )


def fits(calibration: Sequence[schema.CalibrationRank], where: str = "") -> dict[str, Fit]:
    """One fit per collective the run swept (rank 0's record: every point is already the slowest rank's)."""
    c = calibration[0]
    kinds = sorted({p.kind for p in c.collectives}, key=schema.COLLECTIVES.index)
    out = {}
    for kind in kinds:
        points = [p for p in c.collectives if p.kind == kind]
        out[kind] = fit_link(kind, [p.size for p in points], [p.seconds for p in points], c.world, where)
    return out


def fit_table(all_fits: Mapping[str, Fit]):  # -> pandas.DataFrame
    """α (µs) and β (GB/s) per collective, with the median and largest |residual|."""
    import pandas as pd

    rows = [
        {
            "collective": k,
            "α (µs)": f.link.alpha * 1e6,
            "β (GB/s)": f.link.beta / 1e9,
            "sizes": len(f.sizes),
            "median |residual|": statistics.median(abs(r) for r in f.residuals),
            "largest |residual|": max(abs(r) for r in f.residuals),
            "measured on": f.where,
        }
        for k, f in all_fits.items()
    ]
    return pd.DataFrame(rows).set_index("collective")


def residual_table(all_fits: Mapping[str, Fit]):  # -> pandas.DataFrame
    """Every point of every fit: size, measured, model, residual."""
    import pandas as pd

    rows = [
        {"collective": k, "size": format_size(s), "measured (µs)": m * 1e6, "model (µs)": p * 1e6, "residual": r}
        for k, f in all_fits.items()
        for s, m, p, r in zip(f.sizes, f.measured, f.predicted, f.residuals)
    ]
    return pd.DataFrame(rows).set_index(["collective", "size"])


# ------------------------------------------------------------------------------------------- the reference 2× H200


def reference_fit() -> Fit:
    """The all-reduce fit of the committed 2× H200 sweep (notebook 01's, 1 KiB to 1 GiB, ``reference/h200x2``)."""
    from nvtutorial.chapters.ch01_hardware import report as bandwidth
    from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs

    run = reference_runs.load("sweep")
    rows = bandwidth.rows_of(run)
    return fit_link(
        "all_reduce",
        [r["size"] for r in rows],
        [r["time_us"] * 1e-6 for r in rows],
        run.env.world_size if run.env else 2,
        reference_where(),
    )


def reference_where() -> str:
    """``2× NVIDIA H200 · NV18 · NCCL 2.28.9 · …: the committed runs in reference/h200x2, not this machine``."""
    from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs

    return f"{reference_runs.load('sweep').label}: {REFERENCE_NOTE}"


def reference_checks(fit: Fit | None = None):  # -> pandas.DataFrame
    """The reference fit against every *other* committed all-reduce measurement of the 2× H200 pair: notebook 02's
    sweep (a separate run of the course's benchmark) and the torch all-reduce saved with the fixtures (up to 4 GiB,
    4× past the fit's largest size); nccl-tests' in-place times (another program: its own, lower per-call cost)
    are shown beside them and kept out of the median."""
    import pandas as pd

    from nvtutorial.chapters.ch01_hardware import report as bandwidth
    from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs

    fit = fit or reference_fit()
    sources = [
        (
            "notebook 02's sweep (course benchmark)",
            [(r["size"], r["time_us"] * 1e-6) for r in bandwidth.rows_of(reference_runs.load("ab default"))],
        ),
        (
            "torch all-reduce (nvtutorial/data/h200x2)",
            [(r["size"], r["time_us"] * 1e-6) for r in bandwidth.reference_torch()["torch allreduce default"]],
        ),
        (
            "nccl-tests in place (another program)",
            [(r["size"], r["ip_time_us"] * 1e-6) for r in bandwidth.reference_nccl_tests()["default"].rows],
        ),
    ]
    rows = []
    for source, points in sources:
        for size, seconds in points:
            predicted = model.collective_time(size, fit.link, "all_reduce", fit.ranks)
            rows.append(
                {
                    "source": source,
                    "size": format_size(size),
                    "bytes": size,
                    "measured (µs)": seconds * 1e6,
                    "model (µs)": predicted * 1e6,
                    "error": predicted / seconds - 1,
                    "in the median": not source.startswith("nccl-tests"),
                }
            )
    return pd.DataFrame(rows)


def reference_verdict(checks: Any, fit: Fit | None = None, target: float = TARGET) -> Verdict:
    """Pass when the median |error| of the reference fit (``fit``, :func:`reference_fit` if None) against the
    committed runs (the rows ``in the median``) is within ``target``. The text explains the largest miss from the
    data: when its run measured a larger message of its own faster, the point is run-to-run spread (or a cold first
    size), not the line; and it names the fit's own largest residual, where a straight line fits least."""
    fit = fit if fit is not None else reference_fit()
    used = checks[checks["in the median"]]
    errors = [abs(e) for e in used["error"]]
    med = statistics.median(errors)
    worst = used.iloc[max(range(len(errors)), key=errors.__getitem__)]
    same = used[(used["source"] == worst["source"]) & (used["bytes"] > worst["bytes"])]
    faster = same[same["measured (µs)"] < worst["measured (µs)"]].sort_values("bytes")
    own = [m for s, m in zip(fit.sizes, fit.measured) if s == worst["bytes"]]
    i_res = max(range(len(fit.residuals)), key=lambda i: abs(fit.residuals[i]))
    numbers = {
        "median_abs_error": med,
        "largest_abs_error": max(errors),
        "points": len(errors),
        "target": target,
        "largest_at": f"{worst['source']}, {worst['size']}",
        "spread": len(faster) > 0,
        "fit_largest_residual": fit.residuals[i_res],
    }
    if med > target:
        return Verdict(
            "costmodel.reference_link",
            "fail",
            f"The α–β fit misses the other committed all-reduces by a median {med:.0%} (target {target:.0%}).",
            numbers,
            reference_where(),
        )
    miss = (
        f"the largest, {max(errors):.0%}, is {worst['size']} in {worst['source']}: "
        f"{worst['measured (µs)']:.3g} µs against the model's {worst['model (µs)']:.3g} µs"
    )
    if len(faster):
        first = faster.iloc[0]
        sweep = f" and than the fitted sweep's {own[0] * 1e6:.3g} µs at {worst['size']}" if own else ""
        miss += (
            f", slower than the same run's {first['size']} ({first['measured (µs)']:.3g} µs){sweep}: run-to-run "
            "spread (or a cold first size), not the line"
        )
    line = (
        f"The fit's own largest residual, {fit.residuals[i_res]:+.0%} at {format_size(fit.sizes[i_res])}, is where "
        "a straight line fits least (between the sizes that pay α and those that pay S/β)."
    )
    return Verdict(
        "costmodel.reference_link",
        "pass",
        f"The α–β fit of the 2× H200 sweep predicts the {len(errors)} all-reduces of the other committed runs "
        f"with a median error of {med:.0%} (target {target:.0%}); {miss}. {line}",
        numbers,
        reference_where(),
    )


# --------------------------------------------------------------------------------------------------- the calibration


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """What the model is calibrated with: the device's roofs and the pair's collectives, each with where it was
    measured (the pair's may be the committed 2× H200's, or a CPU simulation)."""

    roofs: Mapping[str, model.Roof]
    compute_dtype: str
    device_where: str
    is_gpu: bool
    links: Mapping[str, model.Link]
    link_where: str
    ranks: int = 2
    derived: tuple[str, ...] = ()
    """Collectives whose α and β were not measured but taken from the all-reduce's (said so wherever shown)."""

    def link(self, kind: str) -> model.Link:
        return self.links[kind]


def calibrated(device: Any, pair: Any | None = None) -> Calibrated:
    """The model's numbers from a calibration run of the device (``device``, a RunResult) and, with two ranks, of
    the pair (``pair``; the device run itself when it had two ranks). Without a pair: the committed 2× H200's
    all-reduce, its α and β also standing for the all-gather and reduce-scatter (which that machine did not sweep)."""
    dev = ranks(device, "calibrate")
    found = roofs(dev)
    dtype = "bfloat16" if "bfloat16" in found else "float32"
    gpu = bool(device.env and device.env.is_gpu)
    pair = pair if pair is not None else (device if dev[0].world > 1 and dev[0].collectives else None)
    if pair is not None:
        pair_fits = fits(ranks(pair, "calibrate"), where(pair))
        return Calibrated(
            found,
            dtype,
            where(device),
            gpu,
            {k: f.link for k, f in pair_fits.items()},
            where(pair),
            ranks(pair, "calibrate")[0].world,
        )
    return with_reference_link(Calibrated(found, dtype, where(device), gpu, {}, ""))


def with_reference_link(cal: Calibrated) -> Calibrated:
    """The same device, with the committed 2× H200 pair's all-reduce fit for every collective."""
    ref = reference_fit()
    return dataclasses.replace(
        cal,
        links={k: ref.link for k in schema.COLLECTIVES},
        link_where=ref.where,
        ranks=ref.ranks,
        derived=("all_gather", "reduce_scatter"),
    )


def summary(cal: Calibrated) -> str:
    """The four numbers in one paragraph, each with where it was measured."""
    lines = [f"device ({cal.device_where}):"]
    for dtype, roof in cal.roofs.items():
        lines.append(
            f"  matmul roof {dtype}: {roof.flops / 1e12:.3g} TFLOP/s; memory roof {roof.bandwidth / 1e9:.4g} GB/s; "
            f"ridge {roof.ridge:.3g} FLOP/B"
        )
    lines.append(f"pair ({cal.link_where}):")
    for kind, link in cal.links.items():
        note = " (not measured: the all-reduce's)" if kind in cal.derived else ""
        lines.append(f"  {kind}: α {link.alpha * 1e6:.3g} µs, β {link.beta / 1e9:.4g} GB/s{note}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- the model's error


def error_verdict(key: str, errors: Mapping[str, float], is_gpu: bool, where_: str, target: float = TARGET) -> Verdict:
    """The model's median relative error against the runs (``errors``: problem → model ÷ run − 1). On GPUs, pass
    within ``target``, else fail; on the CPU ``info``: the target is set for GPUs, where kernels run near their
    roofs, and a shared CPU's timings are a simulation."""
    if not errors:
        raise ValueError(f"{key}: no errors to judge")
    med = statistics.median(abs(e) for e in errors.values())
    worst = max(errors, key=lambda k: abs(errors[k]))
    numbers: dict[str, Any] = {"median_abs_error": med, "errors": dict(errors), "target": target, "worst": worst}
    numbers["statistic"] = "median" if len(errors) > 2 else ("mean" if len(errors) == 2 else "one")
    if len(errors) == 1:
        head = f"The model's error against the run is {errors[worst]:+.0%} on its one problem ({worst})."
    elif len(errors) == 2:  # the median of two is their mean: say so
        head = (
            f"The model's mean |error| against the run is {med:.0%} over 2 problems "
            f"(largest: {worst}, {errors[worst]:+.0%})."
        )
    else:
        head = (
            f"The model's median error against the run is {med:.0%} over {len(errors)} problems "
            f"(largest: {worst}, {errors[worst]:+.0%})."
        )
    if not is_gpu:
        return Verdict(
            key, "info", f"{head} A CPU simulation: the {target:.0%} target is set for GPUs.", numbers, where_
        )
    status = "pass" if med <= target else "fail"
    return Verdict(key, status, f"{head} Target: {target:.0%}.", numbers, where_)


# --------------------------------------------------------------------------------------------------- the pipeline


def schedule_runs(result: Any) -> dict[str, list[schema.ScheduleRun]]:
    """Per schedule, every stage's record (stage order)."""
    out: dict[str, list[schema.ScheduleRun]] = {}
    for rank in ranks(result, "pipeline"):
        for run in rank.runs:
            out.setdefault(run.schedule, []).append(run)
    return {k: sorted(v, key=lambda r: r.stage) for k, v in out.items()}


def pipeline_loss_verdict(result: Any, tolerance: float) -> Verdict:
    """Pass when every schedule's loss, at every step and on every stage, is within ``tolerance`` of one process's."""
    diffs = {
        s: max(abs(a - b) for r in runs for a, b in zip(r.losses, r.reference))
        for s, runs in schedule_runs(result).items()
    }
    worst = max(diffs, key=lambda k: diffs[k])
    ok = all(d <= tolerance for d in diffs.values())
    numbers = {"max_abs_diff": diffs, "tolerance": tolerance}
    if ok:
        return Verdict(
            "costmodel.pipeline.loss",
            "pass",
            f"Both schedules follow the one-process loss: largest "
            f"difference {diffs[worst]:.2g} ({worst}), within {tolerance:g}.",
            numbers,
            where(result),
        )
    return Verdict(
        "costmodel.pipeline.loss",
        "fail",
        f"{', '.join(s for s, d in diffs.items() if d > tolerance)} left "
        f"the one-process loss by more than {tolerance:g} (largest {diffs[worst]:.2g}).",
        numbers,
        where(result),
    )


def pipeline_gradient_verdict(result: Any, tolerance: float) -> Verdict:
    """Pass when every stage's step-0 gradients equal one process's within ``tolerance`` of each tensor's largest
    value. A pipeline that forgets to divide by the micro-batches is off by m − 1 (3.0 with 4)."""
    diffs = {(s, r.stage): r.grad_max_rel_diff for s, runs in schedule_runs(result).items() for r in runs}
    worst = max(diffs, key=lambda k: diffs[k])
    numbers = {"max_rel_diff": {f"{s} stage {st}": d for (s, st), d in diffs.items()}, "tolerance": tolerance}
    if diffs[worst] <= tolerance:
        return Verdict(
            "costmodel.pipeline.gradients",
            "pass",
            f"At step 0 every stage's gradients equal the one-process "
            f"gradients to {diffs[worst]:.2g} of each tensor's largest value (tolerance {tolerance:g}): the "
            "micro-batches' gradients add up to the whole batch's.",
            numbers,
            where(result),
        )
    return Verdict(
        "costmodel.pipeline.gradients",
        "fail",
        f"{worst[0]}, stage {worst[1]}: the step-0 gradients are "
        f"off by {diffs[worst]:.2g} of the tensor's largest value (tolerance {tolerance:g}); 3.0 with 4 "
        "micro-batches means summed, not averaged.",
        numbers,
        where(result),
    )


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


def bubble_table(result: Any):  # -> pandas.DataFrame
    """Per schedule: the formula's bubble, the model's with this run's own per-stage times (unequal stages), and
    the measured idle share (median over the timed steps), per stage and on average."""
    import pandas as pd

    rows = []
    for schedule, runs in schedule_runs(result).items():
        p, m = len(runs), runs[0].microbatches
        steps = range(len(runs[0].timelines))
        measured = [bubble_measured([r.timelines[t] for r in runs]) for t in steps]
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
            }
        )
    return pd.DataFrame(rows).set_index("schedule")


def in_flight_verdict(result: Any) -> Verdict:
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
            where(result),
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
        where(result),
    )


def stage_blocks(layers: int, stage: int, stages: int) -> tuple[int, int]:
    """``(first, last + 1)``: the blocks ``lessons/pipeline.py``'s ``split`` gives a stage (equal shares, the first
    stages one more when they do not divide evenly)."""
    per, extra = divmod(layers, stages)
    first = stage * per + min(stage, extra)
    return first, first + per + (stage < extra)


def pipeline_stage_memory(setup: Any, stage: int, stages: int, microbatches: int) -> dict[str, float]:
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
    return {"activations": float(activations), "transient": float(transient)}


def stage_memory_table(result: Any, setup: Any):  # -> pandas.DataFrame
    """Per schedule and stage, in MB: the model state counted on the rank (parameters, gradients, Adam), one
    micro-batch's activations by the memory model, how many micro-batches it held at once (counted on its
    timeline), their product; on a GPU the measured peak."""
    import pandas as pd

    rows = []
    for schedule, runs in schedule_runs(result).items():
        for r in runs:
            per_mb = pipeline_stage_memory(setup, r.stage, r.stages, r.microbatches)["activations"]
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


# --------------------------------------------------------------------------------------------------- the capstone


def capstone_runs(result: Any) -> dict[str, list[schema.StrategyRun]]:
    out: dict[str, list[schema.StrategyRun]] = {}
    for rank in ranks(result, "capstone"):
        for run in rank.runs:
            out.setdefault(run.strategy, []).append(run)
    return out


def capstone_correct(result: Any, strategy: str, tolerance: float, grad_tolerance: float) -> Verdict:
    """Pass when ``strategy`` ran on every rank, followed the one-process loss within ``tolerance`` and its step-0
    gradients within ``grad_tolerance``; fail otherwise, saying which."""
    runs = capstone_runs(result)[strategy]
    key = f"costmodel.capstone.correct.{strategy}"
    failed = [r for r in runs if not r.ok]
    if failed:
        return Verdict(
            key, "fail", f"{strategy} did not run: {failed[0].error}", {"error": failed[0].error}, where(result)
        )
    loss = max(abs(a - b) for r in runs for a, b in zip(r.losses, r.reference))
    grad = max(r.grad_max_rel_diff or 0.0 for r in runs)
    numbers = {"loss_diff": loss, "grad_diff": grad, "tolerance": tolerance, "grad_tolerance": grad_tolerance}
    if loss <= tolerance and grad <= grad_tolerance:
        return Verdict(
            key,
            "pass",
            f"{strategy} trains what one process trains: loss within {loss:.2g}, step-0 "
            f"gradients within {grad:.2g} of each tensor's largest value.",
            numbers,
            where(result),
        )
    return Verdict(
        key,
        "fail",
        f"{strategy} computes something else: loss off by {loss:.2g} (tolerance {tolerance:g}), "
        f"gradients by {grad:.2g} (tolerance {grad_tolerance:g}).",
        numbers,
        where(result),
    )


def measured_step(result: Any, strategy: str) -> float:
    """The strategy's step time: the median over the timed repeats of the slowest rank."""
    runs = capstone_runs(result)[strategy]
    return statistics.median(max(r.step_s[i] for r in runs) for i in range(min(len(r.step_s) for r in runs)))


def score_verdict(result: Any, strategy: str, ideal_s: float, correct: Verdict, fits: Verdict) -> Verdict:
    """``score = ideal ÷ measured``, given only to a correct strategy that fits the budget. Above 1 the calibration
    is wrong (a run beat the speed of light): the verdict says so instead of a score."""
    key = f"costmodel.capstone.score.{strategy}"
    if correct.status != "pass" or fits.status != "pass":
        why = correct if correct.status != "pass" else fits
        return Verdict(key, "info", f"No score for {strategy}: {why.text}", {"score": None}, where(result))
    measured = measured_step(result, strategy)
    score = ideal_s / measured
    numbers = {"score": score, "ideal_s": ideal_s, "measured_s": measured}
    if score > 1:
        return Verdict(
            key,
            "info",
            f"{strategy} ran in {measured * 1e3:.4g} ms, faster than its speed of light "
            f"({ideal_s * 1e3:.4g} ms): the calibration's roofs are below what this run reached; "
            "calibrate again on a quiet machine.",
            numbers,
            where(result),
        )
    return Verdict(
        key,
        "info",
        f"{strategy}: score {score:.2f} (speed of light {ideal_s * 1e3:.4g} ms, measured "
        f"{measured * 1e3:.4g} ms per step).",
        numbers,
        where(result),
    )


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
