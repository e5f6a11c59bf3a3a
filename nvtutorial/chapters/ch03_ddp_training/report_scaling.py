"""Notebook 03's scaling: 1 against 2 GPUs at a fixed per-GPU and a fixed global batch (claims C1 and C15), what one
GPU says about two, and the scaling prediction, graded against GPUs only (the committed 2× H200 reference where this
machine ran the CPU simulation). Re-exported by ``report.py`` (notebook 03 reads it there); it imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nvtutorial.chapters.ch03_ddp_training.report_rows import (
    Train,
    find_row,
    is_gpu,
    measured,
    ok,
    ranks_of,
    rows_of,
    where,
)
from nvtutorial.chapters.ch03_ddp_training.schema import SOLO, Row
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult

if TYPE_CHECKING:
    import pandas as pd

CPU_NOTE = "CPU, gloo: a simulation, not a GPU measurement"


# --- scaling: 1 against 2 GPUs ----------------------------------------------------------------
def efficiency(samples_per_s_n: float, samples_per_s_1: float, n: int = 2) -> float:
    """Scaling efficiency: throughput on ``n`` GPUs ÷ (``n`` × throughput on 1 GPU)."""
    if samples_per_s_1 <= 0 or n < 1:
        raise ValueError("efficiency needs a positive 1-GPU throughput and n >= 1")
    return samples_per_s_n / (n * samples_per_s_1)


def counted_gb(row: Row | None) -> float | None:
    """Weights + gradients + optimizer state + activations saved for backward, counted tensor by tensor (GB)."""
    if row is None:
        return None
    parts = [row.param_bytes, row.grad_bytes, row.optimizer_bytes, row.saved_activation_bytes]
    counted = [x for x in parts if x is not None]
    return sum(counted) / 1e9 if len(counted) == len(parts) else None


Memory = Literal["peak_mem_gb", "counted_gb"]
"""What a scaling summary's memory is: the allocator's peak (GPUs) or the counted tensor bytes (the CPU)."""


@dataclasses.dataclass(frozen=True)
class Convention:
    """One batch convention of :func:`scaling_summary`: the 2-GPU baseline against the 1-GPU row."""

    per_gpu_batch: int
    global_batch: int
    samples_per_s_1: float
    samples_per_s_2: float
    speedup: float
    """Samples per second of 2 GPUs ÷ 1 GPU's."""
    efficiency: float
    """:func:`efficiency`: the speed-up ÷ the number of GPUs."""
    memory_gb_per_rank: list[float | None]
    memory_ratio_per_rank: list[float | None]
    """Each rank's memory ÷ the 1-GPU row's (None where either is unknown or zero)."""
    comm_share: float | None
    nosync_step_ms: float | None
    step_ms: float | None


@dataclasses.dataclass(frozen=True)
class ScalingSummary:
    """1 GPU against 2 (:func:`scaling_summary`): both batch conventions, and how the run was set up."""

    one_gpu_batch: int
    one_gpu_how: str
    """How the 1-GPU row was measured: rank 0 alone while the other waited, or a separate launch."""
    memory: Memory
    where: str
    solo_memory_gb: float | None
    ranks: int
    cpu_threads: int | None
    cpu_cores: int | None
    fixed_per_gpu: Convention | None
    """The 2-GPU baseline at the 1-GPU batch (None: not measured)."""
    fixed_global: Convention | None
    """The 2-GPU baseline at half the 1-GPU batch (None: not measured)."""
    solo_step_ms: float | None

    def conventions(self) -> list[tuple[str, Convention]]:
        """The conventions measured, by name (``fixed_per_gpu``, then ``fixed_global``)."""
        both = (("fixed_per_gpu", self.fixed_per_gpu), ("fixed_global", self.fixed_global))
        return [(name, c) for name, c in both if c is not None]


CONVENTION_LABELS = {"fixed_per_gpu": "fixed per-GPU batch", "fixed_global": "fixed global batch"}
"""The batch conventions' names in tables and verdicts."""


def scaling_summary(two_gpus: Train, one_gpu: Train | None = None) -> ScalingSummary:
    """1 GPU against 2 at a fixed per-GPU batch and at a fixed global batch, for every rank.

    ``two_gpus``: a train run with the baseline at per-GPU batches B and B/2 and (today) the 1-GPU
    row at B; ``one_gpu``: a separate 1-process run holding the 1-GPU row (the committed reference).
    Memory per rank is the allocator's peak on GPUs, the counted tensor bytes on the CPU."""
    rows = rows_of(two_gpus)
    solo_rows = rows_of(one_gpu) if one_gpu is not None else rows
    solo = find_row(solo_rows, SOLO) or (find_row(solo_rows, "baseline") if one_gpu is not None else None)
    if not ok(solo):
        raise ValueError("no 1-GPU row: run the train workload with the '1 GPU, no DDP' variant (or pass one_gpu)")
    big = solo.per_gpu_batch
    gpu = is_gpu(two_gpus)

    def memory(row: Row, rank_rows: Sequence[Row | None]) -> list[float | None]:
        if gpu:
            return list(row.peak_mem_gb_per_rank) or [row.peak_mem_gb]
        return [counted_gb(r) for r in rank_rows]

    solo_memory = memory(solo, [solo])[0]

    def convention(batch: int) -> Convention | None:
        row = find_row(rows, "baseline", batch)
        if not ok(row):
            return None
        mem2 = memory(row, [find_row(rank.rows, "baseline", batch) for rank in ranks_of(two_gpus)])
        sps1 = measured(solo.samples_per_s, solo, "samples_per_s")
        sps2 = measured(row.samples_per_s, row, "samples_per_s")
        return Convention(
            per_gpu_batch=batch,
            global_batch=row.global_batch,
            samples_per_s_1=sps1,
            samples_per_s_2=sps2,
            speedup=sps2 / sps1,
            efficiency=efficiency(sps2, sps1, row.world_size),
            memory_gb_per_rank=mem2,
            memory_ratio_per_rank=[m / solo_memory if m and solo_memory else None for m in mem2],
            comm_share=row.comm_share,
            nosync_step_ms=row.nosync_step_ms,
            step_ms=row.step_ms,
        )

    first = ranks_of(two_gpus)[0]
    alone = ranks_of(one_gpu if one_gpu is not None else two_gpus)[0].world_size > 1
    return ScalingSummary(
        one_gpu_batch=big,
        one_gpu_how="rank 0 alone while the other rank waited" if alone else "a separate one-process launch",
        memory="peak_mem_gb" if gpu else "counted_gb",
        where=where(two_gpus),
        solo_memory_gb=solo_memory,
        ranks=first.world_size,
        cpu_threads=first.cpu_threads,
        cpu_cores=first.cpu_cores,
        fixed_per_gpu=convention(big),
        fixed_global=convention(big // 2),
        solo_step_ms=solo.step_ms,
    )


def scaling_frame(summary: ScalingSummary) -> pd.DataFrame:
    """:func:`scaling_summary` as a DataFrame: one row per convention, memory for every rank."""
    import pandas as pd

    unit = "peak GB" if summary.memory == "peak_mem_gb" else "counted GB"
    rows = []
    for name, s in summary.conventions():
        entry: dict[str, str | float] = {
            "convention": CONVENTION_LABELS[name],
            "batch per GPU, 1 GPU → 2 GPUs": f"{summary.one_gpu_batch} → {s.per_gpu_batch}",
            "samples/s, 1 GPU": round(s.samples_per_s_1, 1),
            "samples/s, 2 GPUs": round(s.samples_per_s_2, 1),
            "speed-up": round(s.speedup, 3),
            "efficiency %": round(100 * s.efficiency, 1),
            f"memory, 1 GPU ({unit})": _r(summary.solo_memory_gb, 4),
        }
        for rank, (m, ratio) in enumerate(zip(s.memory_gb_per_rank, s.memory_ratio_per_rank)):
            entry[f"memory, rank {rank} ({unit})"] = _r(m, 4)
            entry[f"rank {rank} ÷ 1 GPU"] = _r(ratio, 2)
        rows.append(entry)
    return pd.DataFrame(rows)


def _size(gb: float) -> str:
    """A size given in GB, in MB below 1 GB."""
    return f"{gb:.3g} GB" if gb >= 1 else f"{1e3 * gb:.3g} MB"


def _r(x: float | None, nd: int = 2) -> float | str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, nd)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def verdict_c1(summary: ScalingSummary, gpu: bool = True) -> Verdict:
    """C1: "a week on one GPU became 58 hours on two" claims 168/58 = 2.9× from a second GPU."""
    claimed = 7 * 24 / 58
    s, w = summary.fixed_per_gpu, summary.where
    if not s:
        return Verdict("C1", "info", "not decided here: the fixed per-GPU batch run is missing", {}, w)
    if not gpu:
        return Verdict(
            "C1",
            "info",
            f"not decided on the CPU ({CPU_NOTE}); measured {s.speedup:.2f}× with two "
            "processes on the CPU. " + _reference_says("C1"),
            {"speedup": s.speedup},
            w,
        )
    status = "wrong" if s.speedup <= 2.0 else "holds"
    return Verdict(
        "C1",
        status,
        f"claimed {claimed:.1f}× from a second GPU; measured {s.speedup:.2f}× (efficiency "
        f"{100 * s.efficiency:.1f} %) with the same code and per-GPU batch. Two GPUs can at most double "
        "the work done per second, so 2.9× means something else changed too (batch size, input pipeline)",
        {"claimed": claimed, "speedup": s.speedup, "efficiency": s.efficiency},
        w,
    )


def verdict_c15(summary: ScalingSummary, gpu: bool = True, one_gpu: OneGpuSummary | None = None) -> Verdict:
    """C15: "memory per GPU halves with 2 GPUs": only when the per-GPU batch halves, and not quite. Decided only
    from GPU peak memory; from a CPU run's counted tensor bytes it reports the ratios as ``info``, with the one-GPU
    launch's peaks at B and B/2 (``one_gpu``: :func:`one_gpu_summary`) where it ran on a GPU."""
    g, p, w = summary.fixed_global, summary.fixed_per_gpu, summary.where
    if not g or not p:
        return Verdict("C15", "info", "not decided here: memory was not measured for every rank", {}, w)
    gr = [x for x in g.memory_ratio_per_rank if x is not None]
    pr = [x for x in p.memory_ratio_per_rank if x is not None]
    if len(gr) < len(g.memory_ratio_per_rank) or len(pr) < len(p.memory_ratio_per_rank):
        return Verdict("C15", "info", "not decided here: memory was not measured for every rank", {}, w)
    what = (
        "peak allocated memory"
        if summary.memory == "peak_mem_gb"
        else "counted bytes of weights, gradients, optimizer state and saved activations (the CPU ranks have no "
        "allocator statistics)"
    )
    # Memory is deterministic to within the allocator's rounding (1 %): "the same" within 5 %, "less" below that.
    halves_only_with_global = all(abs(r - 1) < 0.05 for r in pr) and max(gr) < min(pr) - 0.01
    text = (
        f"{what} per rank, 2 GPUs ÷ 1 GPU: {', '.join(f'{x:.2f}' for x in gr)} (ranks 0, 1) with a fixed global "
        f"batch (per-GPU batch {summary.one_gpu_batch} → {g.per_gpu_batch}), "
        f"{', '.join(f'{x:.2f}' for x in pr)} with a fixed per-GPU batch. "
    )
    numbers = {
        "ratio_fixed_global": gr,
        "ratio_fixed_per_gpu": pr,
        "memory": summary.memory,
        "pattern_holds": halves_only_with_global,
    }
    if not gpu or summary.memory != "peak_mem_gb":
        return Verdict(
            "C15",
            "info",
            f"not decided on the CPU ({CPU_NOTE}): C15 is about GPU memory. {text}{_one_gpu_half(one_gpu)}"
            + _reference_says("C15"),
            numbers,
            w,
        )
    text += (
        "Memory per GPU falls only when each GPU gets fewer samples, and by less than half: weights, gradients "
        "and optimizer state are whole on every GPU"
        if halves_only_with_global
        else "This run does not show the expected pattern (less with a fixed global batch, unchanged with a fixed "
        "per-GPU batch): check the batch sizes"
    )
    return Verdict("C15", "partly" if halves_only_with_global else "info", text, numbers, w)


def _one_gpu_half(one_gpu: OneGpuSummary | None) -> str:
    """C15's per-GPU half as the one-GPU launch measured it on a GPU (B → B/2); "" where it ran on no GPU."""
    if not one_gpu or not one_gpu.gpu or not (one_gpu.memory_gb and one_gpu.half_memory_gb):
        return ""
    b, big, half = one_gpu.batch, one_gpu.memory_gb, one_gpu.half_memory_gb
    return (
        f"On {one_gpu.where}, one rank (the per-GPU half of C15): peak allocated memory {_size(big)} at per-GPU "
        f"batch {b} → {_size(half)} at {b // 2} ({half / big:.2f}×). "
    )


def _reference_says(claim: str) -> str:
    """What the committed 2× H200 reference run decided of C1 or C15, with its numbers and label."""
    ref = reference_runs()
    if not ref:
        return "The 2× H200 reference decides it (not in this copy of the course)"
    s = scaling_summary(ref["nvlink"], ref["1gpu"])
    v = verdict_c1(s) if claim == "C1" else verdict_c15(s)
    g, p = s.fixed_global, s.fixed_per_gpu
    if g is None or p is None:
        raise ValueError("the committed reference runs hold both batch conventions")
    said = (
        f"{p.speedup:.2f}× at a fixed per-GPU batch of {p.per_gpu_batch}"
        if claim == "C1"
        else f"peak memory per rank ÷ 1 GPU {_ratios(g)} with a fixed global batch, {_ratios(p)} with a fixed "
        "per-GPU batch"
    )
    label = f"The committed 2× H200 reference ({where(ref['nvlink'])}, reference/h200x2/runs)"
    return f"{label} measured {said} (there {claim} · {v.status})"


def _ratios(c: Convention) -> str:
    """A convention's memory ratios per rank, two decimals each."""
    return ", ".join(f"{x:.2f}" for x in c.memory_ratio_per_rank if x is not None)


def scaling_verdicts(summary: ScalingSummary, gpu: bool, one_gpu: Train | None = None) -> list[Verdict]:
    """The efficiency of both conventions (info), C1 and C15 (``one_gpu``: the one-GPU launch, for C15)."""
    out = []
    for key, s in summary.conventions():
        note = "" if gpu else f" ({CPU_NOTE})"
        out.append(
            Verdict(
                f"03.scaling.{key}",
                "info",
                f"{CONVENTION_LABELS[key]}: 2 GPUs give {s.speedup:.2f}× the samples/s of 1 GPU, "
                f"{100 * s.efficiency:.1f} % scaling efficiency{note}",
                {"speedup": s.speedup, "efficiency": s.efficiency},
                summary.where,
            )
        )
    solo = one_gpu_summary(one_gpu) if one_gpu is not None else None
    return [*out, verdict_c1(summary, gpu), verdict_c15(summary, gpu, solo)]


# --- what one GPU says about two ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OneGpuSummary:
    """The lesson's step on one rank at per-GPU batch B and B/2 (:func:`one_gpu_summary`)."""

    where: str
    gpu: bool
    batch: int
    """B, the larger per-GPU batch."""
    step_ms: float
    half_step_ms: float
    samples_per_s: float
    memory_gb: float | None
    half_memory_gb: float | None
    bound: float
    """The step at B ÷ the step at B/2: at most this many times the samples per second from two such GPUs."""


def one_gpu_summary(run: Train) -> OneGpuSummary:
    """The lesson's step on one rank (``torchrun --nproc-per-node 1``: DDP in a world of one) at per-GPU batch ``B``
    and ``B/2``. With a fixed global batch of ``B`` each of two GPUs runs ``B/2``, so two GPUs like this one reach at
    most ``t(B) / t(B/2)`` times its samples per second (no exchange is faster than none). Memory: the allocator's
    peak on a GPU, the counted tensor bytes on the CPU."""
    rows = sorted(
        (r for r in rows_of(run) if r.variant == "baseline" and not r.aa_repeat and ok(r)),
        key=lambda r: -r.per_gpu_batch,
    )
    if len(rows) < 2 or rows[0].per_gpu_batch != 2 * rows[-1].per_gpu_batch:
        raise ValueError("the one-GPU run needs the baseline at a per-GPU batch B and at B/2")
    big, half = rows[0], rows[-1]
    gpu = is_gpu(run)
    step, half_step = measured(big.step_ms, big, "step_ms"), measured(half.step_ms, half, "step_ms")
    return OneGpuSummary(
        where=where(run),
        gpu=gpu,
        batch=big.per_gpu_batch,
        step_ms=step,
        half_step_ms=half_step,
        samples_per_s=measured(big.samples_per_s, big, "samples_per_s"),
        memory_gb=big.peak_mem_gb if gpu else counted_gb(big),
        half_memory_gb=half.peak_mem_gb if gpu else counted_gb(half),
        bound=step / half_step,
    )


def one_gpu_verdict(run: Train) -> Verdict:
    """What one GPU (or one process) measured of the lesson's step, and the bound it sets on two (info)."""
    s = one_gpu_summary(run)
    b, h = s.batch, s.batch // 2
    text = (
        f"the lesson's step on one rank: {s.step_ms:.2f} ms at per-GPU batch {b} ({s.samples_per_s:.1f} "
        f"samples/s), {s.half_step_ms:.2f} ms at {h}: half the samples in {1 / s.bound:.2f}× the time. "
    )
    if s.memory_gb and s.half_memory_gb:
        what = "peak allocated memory" if s.gpu else "counted tensor bytes"
        text += (
            f"{what} {_size(s.memory_gb)} → {_size(s.half_memory_gb)} "
            f"({s.half_memory_gb / s.memory_gb:.2f}×): the activations shrink with the batch, the weights, "
            "gradients and optimizer state do not. "
        )
    two = "two GPUs like this one" if s.gpu else "two such processes"
    text += (
        f"At a fixed global batch of {b} {two} run {h} each: at most {s.bound:.2f}× these samples per second, "
        "and that only if the all-reduce is hidden entirely; at a fixed per-GPU batch, at most 2×"
    )
    numbers = {
        "batch": s.batch,
        "step_ms": s.step_ms,
        "half_step_ms": s.half_step_ms,
        "memory_gb": s.memory_gb,
        "half_memory_gb": s.half_memory_gb,
        "bound": s.bound,
    }
    return Verdict("03.one_gpu", "info", text, numbers, s.where)


# --- predictions about GPUs are graded against GPUs -----------------------------------------------
REFERENCE_FOLDER = Path(__file__).resolve().parents[3] / "reference" / "h200x2" / "runs"
"""Where a checkout of the course keeps the 2× H200 reference runs (absent from an installed package)."""
REFERENCE_RUNS = {
    "1gpu": "train-20261130-023202-195010",
    "nvlink": "train-20261130-023119-33d830",
    "host": "train-20261130-023225-d2d818",
    "socket": "train-20261130-023250-cffba5",
}
"""The committed 2× H200 runs of notebook 03's scaling and transports (the earlier ``train`` workload)."""
REFERENCE_NOTE = (
    "the committed 2× H200 reference run (reference/h200x2/runs, the earlier train workload, with cudnn.benchmark "
    "on and bucket_cap_mb=25 passed explicitly: a 25 MiB first bucket, the default's is 1 MiB), not this machine"
)


def reference_runs(folder: Path | None = None) -> dict[str, RunResult]:
    """The committed runs of :data:`REFERENCE_RUNS` by path key; ``{}`` where any is absent."""
    base = folder or REFERENCE_FOLDER
    paths = {key: base / name / "result.json" for key, name in REFERENCE_RUNS.items()}
    return {key: RunResult.load(p) for key, p in paths.items()} if all(p.is_file() for p in paths.values()) else {}


def _reference_label(reference: Mapping[str, RunResult]) -> str:
    return f"{where(reference['nvlink'])}: {REFERENCE_NOTE}"


def grade_scaling(
    prediction: float | None,
    summary: ScalingSummary,
    run: Train,
    one_gpu: Train | None = None,
    reference: Mapping[str, RunResult] | None = None,
) -> Verdict:
    """The scaling prediction (2 GPUs ÷ 1 at a fixed global batch) is about GPUs: graded against this run where its
    ranks ran on GPUs, else against the committed 2× H200 reference (labelled so; this machine's CPU simulation quoted
    as what it is, with the bound ``one_gpu`` sets where it ran on a GPU); not graded where neither exists."""
    from nvtutorial.report.predict import grade_number

    label, intro, graded = where(run), "Measured", summary
    if not is_gpu(run):
        reference = reference_runs() if reference is None else reference
        if not reference:
            return Verdict(
                "03.scaling",
                "info",
                "not graded here: two ranks need two GPUs, and this copy of the course has no committed reference "
                f"(reference/h200x2/runs ships with a checkout); this machine's CPU simulation ({CPU_NOTE}) says "
                "nothing about GPUs",
                {"prediction": prediction},
                label,
            )
        label, intro = _reference_label(reference), "The committed 2× H200 reference measured"
        graded = scaling_summary(reference["nvlink"], reference["1gpu"])
    g = graded.fixed_global
    if not g:
        return Verdict("03.scaling", "info", "not graded: the fixed global batch run is missing", {}, label)
    explanation = scaling_explanation(graded, True)
    if graded is not summary:
        sim = summary.fixed_global
        if sim:
            explanation += (
                f" This machine's two ranks were a CPU simulation, {sim.speedup:.2f}× ({CPU_NOTE}: "
                f"{cpu_sharing(summary)}), which does not grade a prediction about GPUs."
            )
    if one_gpu is not None and is_gpu(one_gpu):
        bound = one_gpu_summary(one_gpu).bound
        explanation += (
            f" The one-GPU run above ({where(one_gpu)}) bounds two GPUs like it at {bound:.2f}×, its step at the "
            "full batch ÷ its step at half of it."
        )
    return grade_number(
        "03.scaling",
        prediction,
        g.speedup,
        unit="×",
        where=label,
        explanation=explanation,
        limit=2.0,
        limit_name="limit of two GPUs",
        measured_name=intro,
    )


def scaling_explanation(summary: ScalingSummary, gpu: bool = True) -> str:
    """Where the fixed-global-batch run lost against perfect scaling: the smaller per-GPU batch, and exposed
    communication."""
    g = summary.fixed_global
    if not g:
        return "The fixed global batch run is missing."
    step, solo = g.step_ms, summary.solo_step_ms
    if step is None or solo is None:
        raise ValueError("the fixed global batch's row and the 1-GPU row must hold their step times")
    ideal = solo / 2
    text = (
        f"Two GPUs can at most double the samples per second. With a fixed global batch each GPU runs half of the "
        f"1-GPU batch: a step took {step:.2f} ms, where half of the 1-GPU step would be {ideal:.2f} ms."
    )
    nosync = g.nosync_step_ms
    how = f"; the 1-GPU baseline: {summary.one_gpu_how}" if summary.one_gpu_how else ""
    if nosync is not None and gpu:
        text += (
            f" The same step without the gradient exchange (under no_sync) took {nosync:.2f} ms: "
            f"{nosync - ideal:+.2f} ms from the smaller per-GPU batch (a GPU is less efficient on smaller work{how}), "
            f"{step - nosync:+.2f} ms from the "
            "gradient synchronisation the backward pass did not hide (the all-reduce plus DDP's bucket copies, "
            "which no_sync skips too)."
        )
    elif nosync is not None:
        text += (
            f" The same step under no_sync (no gradient exchange, no bucket copies) took {nosync:.2f} ms: "
            f"{nosync - ideal:+.2f} ms against half the 1-process step, {step - nosync:+.2f} ms against "
            "no_sync. On the CPU these differences cannot be split into causes."
        )
    if not gpu:
        text += (
            f" [{CPU_NOTE}: {cpu_sharing(summary)}, and gloo moves the gradients through the CPU: these numbers "
            "say nothing about GPUs]"
        )
    return text


def cpu_sharing(summary: ScalingSummary) -> str:
    """How a CPU run's processes shared the machine, from what its ranks recorded (threads, cores): they contend
    for the cores only where their threads outnumber them."""
    threads, cores, ranks = summary.cpu_threads, summary.cpu_cores, summary.ranks or 2
    if not threads or not cores:
        return f"the {ranks} processes shared this machine's cores with whatever else ran on it"
    each = f"{threads} thread{'s' if threads > 1 else ''}"
    set_by = " (the workload's torch.set_num_threads(1): the launch line's OMP_NUM_THREADS does not apply)"
    set_by = set_by if threads == 1 else ""
    if ranks * threads > cores:
        return (
            f"the {ranks} processes ran {each} each on {cores} core{'s' * (cores > 1)}{set_by}: they contended for them"
        )
    return (
        f"the 1-process reference ran {each} while the other process waited, the {ranks} processes {each} each, "
        f"on {cores} cores{set_by}: enough for every thread, though they share the memory and its bandwidth"
    )
