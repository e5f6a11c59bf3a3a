"""Notebook 03's conclusions from its runs: the lesson's checks, validation, resume, scaling, the source's table.

Pure functions of the numbers the runs returned (never launches, never draws), tested without a
GPU: each check and each claim (C1, C14, C15 and the validation half of C18) is a
:class:`~nvtutorial.report.verdict.Verdict` computed from the measurements. The ``train`` workload's
results are read typed (:mod:`~nvtutorial.chapters.ch03_ddp_training.schema`: a ``Rank`` per rank, a ``Row`` per
configuration); the committed 2× H200 reference runs (``reference/h200x2/runs/train-*``), written in an earlier
layout (a median, a minimum and a maximum per configuration), read as today's through the schema's ``upgrade``, so
the reference's verdicts are recomputed by the tests.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nvtutorial.chapters.ch03_ddp_training.report_lesson import SOURCE_VALIDATION_CHOICES as SOURCE_VALIDATION_CHOICES
from nvtutorial.chapters.ch03_ddp_training.report_lesson import grade_source_validation as grade_source_validation
from nvtutorial.chapters.ch03_ddp_training.report_lesson import identical_weights_verdict as identical_weights_verdict
from nvtutorial.chapters.ch03_ddp_training.report_lesson import resume_verdict as resume_verdict
from nvtutorial.chapters.ch03_ddp_training.report_lesson import sampler_verdict as sampler_verdict
from nvtutorial.chapters.ch03_ddp_training.report_lesson import training_verdict as training_verdict
from nvtutorial.chapters.ch03_ddp_training.report_lesson import validation_verdicts as validation_verdicts
from nvtutorial.chapters.ch03_ddp_training.report_rows import FLASH_OFF as FLASH_OFF
from nvtutorial.chapters.ch03_ddp_training.report_rows import Train as Train
from nvtutorial.chapters.ch03_ddp_training.report_rows import aa_gap_of as aa_gap_of
from nvtutorial.chapters.ch03_ddp_training.report_rows import find_row as find_row
from nvtutorial.chapters.ch03_ddp_training.report_rows import is_gpu as is_gpu
from nvtutorial.chapters.ch03_ddp_training.report_rows import measured as measured
from nvtutorial.chapters.ch03_ddp_training.report_rows import ok as ok
from nvtutorial.chapters.ch03_ddp_training.report_rows import ranks_of as ranks_of
from nvtutorial.chapters.ch03_ddp_training.report_rows import repeats_on_every_rank as repeats_on_every_rank
from nvtutorial.chapters.ch03_ddp_training.report_rows import rows_of as rows_of
from nvtutorial.chapters.ch03_ddp_training.report_rows import where as where
from nvtutorial.chapters.ch03_ddp_training.schema import SOLO, Row
from nvtutorial.report.verdict import Comparison, Verdict, compare
from nvtutorial.results import RunResult

SOURCE_TABLE = [
    # The source's part 4 (ResNet-50 on ImageNet, per epoch; its hardware unnamed).
    {"path": "1 GPU", "minutes_per_epoch": 58.0, "memory_gb_per_gpu": 24.0, "comm_share": None},
    {"path": "2 GPUs over PCIe", "minutes_per_epoch": 34.0, "memory_gb_per_gpu": 13.0, "comm_share": 0.18},
    {"path": "2 GPUs over NVLink", "minutes_per_epoch": 29.0, "memory_gb_per_gpu": 13.0, "comm_share": 0.09},
]
"""The source tutorial's results table, as printed."""

PATHS = {
    "1gpu": "1 GPU",
    "nvlink": "2 GPUs, NVLink (NCCL P2P)",
    "host": "2 GPUs, host-staged (NCCL_P2P_DISABLE=1)",
    "socket": "2 GPUs, sockets (+ NCCL_SHM_DISABLE=1)",
}
PATH_ENV = {
    "1gpu": {},
    "nvlink": {},
    "host": {"NCCL_P2P_DISABLE": "1"},
    "socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}
"""Our rows, and the environment variables that select each path for one run."""
SOURCE_ROW_FOR = {"1gpu": "1 GPU", "nvlink": "2 GPUs over NVLink", "host": "2 GPUs over PCIe"}
"""The source's row each of ours sits next to (its PCIe row: no direct GPU-to-GPU path, like host-staged)."""

CPU_NOTE = "CPU, gloo: a simulation, not a GPU measurement"
CPU_PATHS = {
    "1gpu": "1 process (CPU)",
    "nvlink": "2 processes, gloo (CPU)",
    "host": "host-staged: needs 2 GPUs",
    "socket": "sockets: needs 2 GPUs",
}
"""Our rows' names when the runs were CPU simulations: no GPU path was measured."""


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


def scaling_summary(two_gpus: Train, one_gpu: Train | None = None) -> dict[str, Any]:
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
    mem_key = "peak_mem_gb" if gpu else "counted_gb"

    def memory(row: Row, rank_rows: Sequence[Row | None]) -> list[float | None]:
        if gpu:
            return list(row.peak_mem_gb_per_rank) or [row.peak_mem_gb]
        return [counted_gb(r) for r in rank_rows]

    first = ranks_of(two_gpus)[0]
    alone = ranks_of(one_gpu if one_gpu is not None else two_gpus)[0].world_size > 1
    out: dict[str, Any] = {
        "one_gpu_batch": big,
        "one_gpu_how": "rank 0 alone while the other rank waited" if alone else "a separate one-process launch",
        "memory": mem_key,
        "where": where(two_gpus),
        "solo_memory_gb": memory(solo, [solo])[0],
        "ranks": first.world_size,
        "cpu_threads": first.cpu_threads,
        "cpu_cores": first.cpu_cores,
    }
    for name, batch in (("fixed_per_gpu", big), ("fixed_global", big // 2)):
        row = find_row(rows, "baseline", batch)
        if not ok(row):
            out[name] = None
            continue
        per_rank_rows = [find_row(rank.rows, "baseline", batch) for rank in ranks_of(two_gpus)]
        mem2 = memory(row, per_rank_rows)
        sps1 = measured(solo.samples_per_s, solo, "samples_per_s")
        sps2 = measured(row.samples_per_s, row, "samples_per_s")
        out[name] = {
            "per_gpu_batch": batch,
            "global_batch": row.global_batch,
            "samples_per_s_1": sps1,
            "samples_per_s_2": sps2,
            "speedup": sps2 / sps1,
            "efficiency": efficiency(sps2, sps1, row.world_size),
            "memory_gb_per_rank": mem2,
            "memory_ratio_per_rank": [m / out["solo_memory_gb"] if m and out["solo_memory_gb"] else None for m in mem2],
            "comm_share": row.comm_share,
            "nosync_step_ms": row.nosync_step_ms,
            "step_ms": row.step_ms,
        }
    out["solo_step_ms"] = solo.step_ms
    return out


def scaling_frame(summary: Mapping[str, Any]):
    """:func:`scaling_summary` as a DataFrame: one row per convention, memory for every rank."""
    import pandas as pd

    unit = "peak GB" if summary["memory"] == "peak_mem_gb" else "counted GB"
    rows = []
    for name, label in (("fixed_per_gpu", "fixed per-GPU batch"), ("fixed_global", "fixed global batch")):
        s = summary.get(name)
        if not s:
            continue
        entry = {
            "convention": label,
            "batch per GPU, 1 GPU → 2 GPUs": f"{summary['one_gpu_batch']} → {s['per_gpu_batch']}",
            "samples/s, 1 GPU": round(s["samples_per_s_1"], 1),
            "samples/s, 2 GPUs": round(s["samples_per_s_2"], 1),
            "speed-up": round(s["speedup"], 3),
            "efficiency %": round(100 * s["efficiency"], 1),
            f"memory, 1 GPU ({unit})": _r(summary["solo_memory_gb"], 4),
        }
        for rank, (m, ratio) in enumerate(zip(s["memory_gb_per_rank"], s["memory_ratio_per_rank"])):
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


def verdict_c1(summary: Mapping[str, Any], gpu: bool = True) -> Verdict:
    """C1: "a week on one GPU became 58 hours on two" claims 168/58 = 2.9× from a second GPU."""
    claimed = 7 * 24 / 58
    s = summary.get("fixed_per_gpu")
    w = summary.get("where", "")
    if not s:
        return Verdict("C1", "info", "not decided here: the fixed per-GPU batch run is missing", {}, w)
    if not gpu:
        return Verdict(
            "C1",
            "info",
            f"not decided on the CPU ({CPU_NOTE}); measured {s['speedup']:.2f}× with two "
            "processes on the CPU. " + _reference_says("C1"),
            {"speedup": s["speedup"]},
            w,
        )
    status = "wrong" if s["speedup"] <= 2.0 else "holds"
    return Verdict(
        "C1",
        status,
        f"claimed {claimed:.1f}× from a second GPU; measured {s['speedup']:.2f}× (efficiency "
        f"{100 * s['efficiency']:.1f} %) with the same code and per-GPU batch. Two GPUs can at most double "
        "the work done per second, so 2.9× means something else changed too (batch size, input pipeline)",
        {"claimed": claimed, "speedup": s["speedup"], "efficiency": s["efficiency"]},
        w,
    )


def verdict_c15(summary: Mapping[str, Any], gpu: bool = True, one_gpu: Mapping[str, Any] | None = None) -> Verdict:
    """C15: "memory per GPU halves with 2 GPUs": only when the per-GPU batch halves, and not quite. Decided only
    from GPU peak memory; from a CPU run's counted tensor bytes it reports the ratios as ``info``, with the one-GPU
    launch's peaks at B and B/2 (``one_gpu``: :func:`one_gpu_summary`) where it ran on a GPU."""
    g, p, w = summary.get("fixed_global"), summary.get("fixed_per_gpu"), summary.get("where", "")
    if not g or not p or None in g["memory_ratio_per_rank"] + p["memory_ratio_per_rank"]:
        return Verdict("C15", "info", "not decided here: memory was not measured for every rank", {}, w)
    what = (
        "peak allocated memory"
        if summary["memory"] == "peak_mem_gb"
        else "counted bytes of weights, gradients, optimizer state and saved activations (the CPU ranks have no "
        "allocator statistics)"
    )
    gr, pr = g["memory_ratio_per_rank"], p["memory_ratio_per_rank"]
    # Memory is deterministic to within the allocator's rounding (1 %): "the same" within 5 %, "less" below that.
    halves_only_with_global = all(abs(r - 1) < 0.05 for r in pr) and max(gr) < min(pr) - 0.01
    text = (
        f"{what} per rank, 2 GPUs ÷ 1 GPU: {', '.join(f'{x:.2f}' for x in gr)} (ranks 0, 1) with a fixed global "
        f"batch (per-GPU batch {summary['one_gpu_batch']} → {g['per_gpu_batch']}), "
        f"{', '.join(f'{x:.2f}' for x in pr)} with a fixed per-GPU batch. "
    )
    numbers = {
        "ratio_fixed_global": gr,
        "ratio_fixed_per_gpu": pr,
        "memory": summary["memory"],
        "pattern_holds": halves_only_with_global,
    }
    if not gpu or summary["memory"] != "peak_mem_gb":
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


def _one_gpu_half(one_gpu: Mapping[str, Any] | None) -> str:
    """C15's per-GPU half as the one-GPU launch measured it on a GPU (B → B/2); "" where it ran on no GPU."""
    if not one_gpu or not one_gpu["gpu"] or not (one_gpu["memory_gb"] and one_gpu["half_memory_gb"]):
        return ""
    b, big, half = one_gpu["batch"], one_gpu["memory_gb"], one_gpu["half_memory_gb"]
    return (
        f"On {one_gpu['where']}, one rank (the per-GPU half of C15): peak allocated memory {_size(big)} at per-GPU "
        f"batch {b} → {_size(half)} at {b // 2} ({half / big:.2f}×). "
    )


def _reference_says(claim: str) -> str:
    """What the committed 2× H200 reference run decided of C1 or C15, with its numbers and label."""
    ref = reference_runs()
    if not ref:
        return "The 2× H200 reference decides it (not in this copy of the course)"
    s = scaling_summary(ref["nvlink"], ref["1gpu"])
    v = verdict_c1(s) if claim == "C1" else verdict_c15(s)
    g, p = s["fixed_global"], s["fixed_per_gpu"]
    said = (
        f"{p['speedup']:.2f}× at a fixed per-GPU batch of {p['per_gpu_batch']}"
        if claim == "C1"
        else f"peak memory per rank ÷ 1 GPU {', '.join(f'{x:.2f}' for x in g['memory_ratio_per_rank'])} with a fixed "
        f"global batch, {', '.join(f'{x:.2f}' for x in p['memory_ratio_per_rank'])} with a fixed per-GPU batch"
    )
    label = f"The committed 2× H200 reference ({where(ref['nvlink'])}, reference/h200x2/runs)"
    return f"{label} measured {said} (there {claim} · {v.status})"


def scaling_verdicts(summary: Mapping[str, Any], gpu: bool, one_gpu: Train | None = None) -> list[Verdict]:
    """The efficiency of both conventions (info), C1 and C15 (``one_gpu``: the one-GPU launch, for C15)."""
    out = []
    for key, label in (("fixed_per_gpu", "fixed per-GPU batch"), ("fixed_global", "fixed global batch")):
        s = summary.get(key)
        if s:
            note = "" if gpu else f" ({CPU_NOTE})"
            out.append(
                Verdict(
                    f"03.scaling.{key}",
                    "info",
                    f"{label}: 2 GPUs give {s['speedup']:.2f}× the samples/s of 1 GPU, {100 * s['efficiency']:.1f} % "
                    f"scaling efficiency{note}",
                    {"speedup": s["speedup"], "efficiency": s["efficiency"]},
                    summary.get("where", ""),
                )
            )
    solo = one_gpu_summary(one_gpu) if one_gpu is not None else None
    return [*out, verdict_c1(summary, gpu), verdict_c15(summary, gpu, solo)]


# --- what one GPU says about two ----------------------------------------------------------------
def one_gpu_summary(run: Train) -> dict[str, Any]:
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
    return {
        "where": where(run),
        "gpu": gpu,
        "batch": big.per_gpu_batch,
        "step_ms": step,
        "half_step_ms": half_step,
        "samples_per_s": measured(big.samples_per_s, big, "samples_per_s"),
        "memory_gb": big.peak_mem_gb if gpu else counted_gb(big),
        "half_memory_gb": half.peak_mem_gb if gpu else counted_gb(half),
        "bound": step / half_step,
    }


def one_gpu_verdict(run: Train) -> Verdict:
    """What one GPU (or one process) measured of the lesson's step, and the bound it sets on two (info)."""
    s = one_gpu_summary(run)
    b, h = s["batch"], s["batch"] // 2
    text = (
        f"the lesson's step on one rank: {s['step_ms']:.2f} ms at per-GPU batch {b} ({s['samples_per_s']:.1f} "
        f"samples/s), {s['half_step_ms']:.2f} ms at {h}: half the samples in {1 / s['bound']:.2f}× the time. "
    )
    if s["memory_gb"] and s["half_memory_gb"]:
        what = "peak allocated memory" if s["gpu"] else "counted tensor bytes"
        text += (
            f"{what} {_size(s['memory_gb'])} → {_size(s['half_memory_gb'])} "
            f"({s['half_memory_gb'] / s['memory_gb']:.2f}×): the activations shrink with the batch, the weights, "
            "gradients and optimizer state do not. "
        )
    two = "two GPUs like this one" if s["gpu"] else "two such processes"
    text += (
        f"At a fixed global batch of {b} {two} run {h} each: at most {s['bound']:.2f}× these samples per second, "
        "and that only if the all-reduce is hidden entirely; at a fixed per-GPU batch, at most 2×"
    )
    numbers = {k: s[k] for k in ("batch", "step_ms", "half_step_ms", "memory_gb", "half_memory_gb", "bound")}
    return Verdict("03.one_gpu", "info", text, numbers, s["where"])


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
    summary: Mapping[str, Any],
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
    g = graded.get("fixed_global")
    if not g:
        return Verdict("03.scaling", "info", "not graded: the fixed global batch run is missing", {}, label)
    explanation = scaling_explanation(graded, True)
    if graded is not summary:
        sim = summary.get("fixed_global")
        if sim:
            explanation += (
                f" This machine's two ranks were a CPU simulation, {sim['speedup']:.2f}× ({CPU_NOTE}: "
                f"{cpu_sharing(summary)}), which does not grade a prediction about GPUs."
            )
    if one_gpu is not None and is_gpu(one_gpu):
        bound = one_gpu_summary(one_gpu)["bound"]
        explanation += (
            f" The one-GPU run above ({where(one_gpu)}) bounds two GPUs like it at {bound:.2f}×, its step at the "
            "full batch ÷ its step at half of it."
        )
    return grade_number(
        "03.scaling",
        prediction,
        g["speedup"],
        unit="×",
        where=label,
        explanation=explanation,
        limit=2.0,
        limit_name="limit of two GPUs",
        measured_name=intro,
    )


# --- the source's table: transports ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PathRow:
    """One path of the source's table: the row measured at the fixed global batch, and what C14 compares of its run."""

    row: Row
    """The 1-GPU row (at twice the batch), or the two-GPU baseline."""
    repeats_every_rank: tuple[float, ...] = ()
    """Two GPUs: the baseline's step-time repeats of every rank together (ms)."""
    aa_gap: float | None = None
    """Two GPUs: the run's A/A gap (:func:`aa_gap_of`)."""
    step_ms_per_rank: tuple[float | None, ...] = ()
    """Each rank's median step (ms): two GPUs, each rank's own row; 1 GPU, as its row gathered them."""


def transport_rows(paths: Mapping[str, Train | None], batch: int) -> dict[str, PathRow | None]:
    """``paths``: ``{"1gpu": run, "nvlink": run, "host": run, "socket": run}`` (runs or None). The row of
    each at the fixed global batch: the 1-GPU row at ``2 × batch``, the 2-GPU baseline at ``batch``."""
    out: dict[str, PathRow | None] = {}
    for key, run in paths.items():
        if run is None:
            out[key] = None
            continue
        rows = rows_of(run)
        if key == "1gpu":
            row = find_row(rows, SOLO, 2 * batch) or find_row(rows, "baseline", 2 * batch)
            out[key] = None if row is None else PathRow(row, step_ms_per_rank=row.step_ms_per_rank)
            continue
        row = find_row(rows, "baseline", batch)
        if row is None:
            out[key] = None
            continue
        each = [find_row(rank.rows, "baseline", batch) for rank in ranks_of(run)]
        out[key] = PathRow(
            row,
            repeats_every_rank=tuple(repeats_on_every_rank(run, "baseline", batch)),
            aa_gap=aa_gap_of(rows),
            step_ms_per_rank=tuple(r.step_ms if r is not None else None for r in each),
        )
    return out


def source_comparison(rows: Mapping[str, PathRow | None], epoch_images: int, gpu: bool = True):
    """Our rows next to the source's table. Two models: ours is this UNet, time per epoch = ``epoch_images`` ÷
    samples per second; the source's is ResNet-50 on ImageNet. Their minutes measure different work and are not put
    side by side: the source's rows appear as ratios only (speed-up over its one GPU, its communication share)."""
    import pandas as pd

    base = rows.get("1gpu")
    source = {r["path"]: r for r in SOURCE_TABLE}
    out = []
    for key, label in PATHS.items():
        path, src = rows.get(key), source.get(SOURCE_ROW_FOR.get(key, ""))
        entry: dict[str, Any] = {"path": label if gpu else CPU_PATHS[key]}
        if path is not None and path.row.status == "ok":
            row = path.row
            sps = measured(row.samples_per_s, row, "samples_per_s")
            entry.update(
                {
                    "per-GPU batch": row.per_gpu_batch,
                    "step ms, each rank": ", ".join(
                        f"{x:.2f}" for x in path.step_ms_per_rank or (row.step_ms,) if x is not None
                    ),
                    "UNet min/epoch": round(epoch_images / sps / 60, 2),
                    "UNet speed-up": round(sps / measured(base.row.samples_per_s, base.row, "samples_per_s"), 2)
                    if base
                    else "n/a",
                    "UNet comm share": _pct(row.comm_share) if key != "1gpu" else "—",
                }
            )
        else:
            entry.update(
                {
                    "per-GPU batch": "",
                    "step ms, each rank": "",
                    "UNet min/epoch": "not run",
                    "UNet speed-up": "",
                    "UNet comm share": "",
                }
            )
        if src:
            entry.update(
                {
                    "source's ResNet-50 speed-up": round(58.0 / src["minutes_per_epoch"], 2),
                    "source's comm share": _pct(src["comm_share"]) if src["comm_share"] is not None else "—",
                }
            )
        else:
            entry.update({"source's ResNet-50 speed-up": "—", "source's comm share": "—"})
        out.append(entry)
    return pd.DataFrame(out)


def source_table_tension() -> dict[str, float]:
    """What the source's own table implies: per 2-GPU row, the minutes left for computation once its communication
    share is taken out, against half of its one-GPU epoch (29 min). Both rows leave less than half: the two GPUs
    would compute faster than perfectly split work, unless the communication counted was hidden under computation
    (and then it cost no time). NVLink's row is exactly 2.00× with 9 % communication."""
    one = SOURCE_TABLE[0]["minutes_per_epoch"]
    out = {}
    for row in SOURCE_TABLE[1:]:
        out[row["path"]] = row["minutes_per_epoch"] * (1 - row["comm_share"]) / (one / 2)
    return out


RESNET50_FIXTURE = "ddp-resnet50-synthetic.txt"
"""torchvision ResNet-50 under DDP on the 2× H200 reference (``nvtutorial/data/h200x2/``): the source's model."""


def resnet50_reference() -> dict[str, float]:
    """Images per second of the committed ResNet-50 runs on 2× H200 (bf16 autocast, 128 images per GPU, synthetic
    data, the mean over 30 steps: one measurement each, no repeats): one GPU, two over NVLink, two host-staged, two
    over sockets (the file's last line, the run with shared memory off as well)."""
    from nvtutorial.machine.hardware import REFERENCE_DATA

    text = (REFERENCE_DATA / RESNET50_FIXTURE).read_text()
    lines = [
        dict(kv.split("=") for kv in line.split()[1:]) for line in text.splitlines() if line.startswith("ddp-bench")
    ]
    bf16 = [x for x in lines if x["amp"] == "True"]
    one = next(float(x["imgs/s"]) for x in bf16 if x["world"] == "1")
    nvlink = next(float(x["imgs/s"]) for x in bf16 if x["world"] == "2" and x["P2P_DISABLE"] == "0")
    staged = [float(x["imgs/s"]) for x in bf16 if x["world"] == "2" and x["P2P_DISABLE"] == "1"]
    return {"1gpu": one, "nvlink": nvlink, "host": staged[0], "socket": staged[1]}


def transport_comparison(rows: Mapping[str, PathRow | None], key: str) -> Comparison | None:
    """The step times of path ``key`` against NVLink's, both ranks' repeats each, under the one noise rule
    (the A/A gap: the larger of the two runs')."""
    nv, other = rows.get("nvlink"), rows.get(key)
    if not (nv and other and nv.repeats_every_rank and other.repeats_every_rank):
        return None
    gaps = [g for g in (nv.aa_gap, other.aa_gap) if g is not None]
    return compare(nv.repeats_every_rank, other.repeats_every_rank, aa_gap=max(gaps) if gaps else None)


SOURCE_C14_GAP = 34 / 29 - 1
"""How much longer the source's PCIe epoch was than its NVLink epoch (34 against 29 min): 17 %. C14 "holds" only
when the measured host-staged slowdown is within a factor of two of it."""


def verdict_c14(rows: Mapping[str, PathRow | None], gpu: bool = True, where_: str = "") -> Verdict:
    """C14: the source's table says NVLink beats PCIe (29 against 34 min, 9 % against 18 % communication)."""
    host = transport_comparison(rows, "host")
    if not gpu or host is None:
        return Verdict(
            "C14",
            "info",
            "not decided here: it needs the NVLink and host-staged runs on 2 GPUs"
            + ("" if gpu else f" ({CPU_NOTE}: gloo ignores NCCL's transports)"),
            {},
            where_,
        )
    nv, hs = rows["nvlink"], rows["host"]
    assert nv is not None and hs is not None  # transport_comparison compared them
    sock = transport_comparison(rows, "socket")
    per_rank = lambda r: ", ".join(f"{x:.2f}" for x in r.step_ms_per_rank if x is not None)  # noqa: E731
    text = (
        f"host-staged against NVLink: {host.describe('ms', 'step time')} (rank 0, 1: {per_rank(nv)} ms over NVLink, "
        f"{per_rank(hs)} ms host-staged); exposed communication {_pct(nv.row.comm_share)} against "
        f"{_pct(hs.row.comm_share)}. "
    )
    if host.status == "no change":
        text += (
            "For this model the all-reduce hides under the backward pass, so the link does not set the step "
            "time: the source's 17 % gap between NVLink and PCIe is not a property of the link alone but of how "
            "much communication a model exposes (ResNet-50's table cannot be carried over)"
        )
        status = "partly"
    elif host.status == "slower" and SOURCE_C14_GAP / 2 <= host.ratio - 1 <= 2 * SOURCE_C14_GAP:
        text += (
            f"NVLink is faster here by {host.ratio - 1:.0%}, close to the source's {SOURCE_C14_GAP:.0%} (34 against "
            "29 min); the size of the gap depends on the model"
        )
        status = "holds"
    elif host.status == "slower":
        text += (
            f"NVLink is faster here, but by {host.ratio - 1:.0%}, not the source's {SOURCE_C14_GAP:.0%}: the gap "
            "depends on how much communication the model exposes"
        )
        status = "partly"
    else:
        text += "host-staged is faster here than NVLink: the source's ordering does not hold on this machine"
        status = "wrong"
    if sock is not None:
        text += f". Sockets: {sock.describe('ms')}"
    resnet = resnet50_reference()
    resnet_gap = resnet["nvlink"] / resnet["host"]
    tension = source_table_tension()
    text += (
        f". The source's own model, ResNet-50 (bf16, 128 images per GPU, synthetic data) on the same 2× H200: "
        f"{resnet['nvlink']:.0f} images/s over NVLink against {resnet['host']:.0f} host-staged, a "
        f"{resnet_gap - 1:.1%} longer step without NVLink (one measurement each, no repeats), not "
        f"{SOURCE_C14_GAP:.0%}; scaling {resnet['nvlink'] / (2 * resnet['1gpu']):.1%} over NVLink, "
        f"{resnet['host'] / (2 * resnet['1gpu']):.1%} host-staged. "
        "And the source's table adds up only if its communication was hidden: "
        f"58 → 29 min is exactly 2.00× while 9 % of the time is said to be communication; taking that share out "
        f"leaves {tension['2 GPUs over NVLink']:.2f} (NVLink) and {tension['2 GPUs over PCIe']:.2f} (PCIe) of "
        "half the one-GPU epoch for computation, less than perfectly split work allows, unless the communication "
        "it counted was hidden (and then it added almost nothing to the step)"
    )
    return Verdict(
        "C14",
        status,
        text,
        {
            "host_vs_nvlink": host.ratio,
            "noise": host.noise,
            "socket_vs_nvlink": sock.ratio if sock else None,
            "comm_share_nvlink": nv.row.comm_share,
            "comm_share_host": hs.row.comm_share,
            "resnet50_host_vs_nvlink": resnet_gap,
            "source_compute_vs_half": tension,
        },
        where_,
    )


def show(frame: Any, where_: Any, title: str | None = None) -> None:
    """Display a table with where it was measured above it (in Jupyter: as HTML; else as text)."""
    label = getattr(where_, "label", where_)
    print((f"{title}\n" if title else "") + f"measured on: {label}")
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(frame)
            return
    except ImportError:
        pass
    print(frame.to_string(index=False))


def scaling_explanation(summary: Mapping[str, Any], gpu: bool = True) -> str:
    """Where the fixed-global-batch run lost against perfect scaling: the smaller per-GPU batch, and exposed
    communication."""
    g = summary.get("fixed_global")
    if not g:
        return "The fixed global batch run is missing."
    ideal = summary["solo_step_ms"] / 2
    text = (
        f"Two GPUs can at most double the samples per second. With a fixed global batch each GPU runs half of the "
        f"1-GPU batch: a step took {g['step_ms']:.2f} ms, where half of the 1-GPU step would be {ideal:.2f} ms."
    )
    nosync = g.get("nosync_step_ms")
    how = f"; the 1-GPU baseline: {summary['one_gpu_how']}" if summary.get("one_gpu_how") else ""
    if nosync is not None and gpu:
        text += (
            f" The same step without the gradient exchange (under no_sync) took {nosync:.2f} ms: "
            f"{nosync - ideal:+.2f} ms from the smaller per-GPU batch (a GPU is less efficient on smaller work{how}), "
            f"{g['step_ms'] - nosync:+.2f} ms from the "
            "gradient synchronisation the backward pass did not hide (the all-reduce plus DDP's bucket copies, "
            "which no_sync skips too)."
        )
    elif nosync is not None:
        text += (
            f" The same step under no_sync (no gradient exchange, no bucket copies) took {nosync:.2f} ms: "
            f"{nosync - ideal:+.2f} ms against half the 1-process step, {g['step_ms'] - nosync:+.2f} ms against "
            "no_sync. On the CPU these differences cannot be split into causes."
        )
    if not gpu:
        text += (
            f" [{CPU_NOTE}: {cpu_sharing(summary)}, and gloo moves the gradients through the CPU: these numbers "
            "say nothing about GPUs]"
        )
    return text


def cpu_sharing(summary: Mapping[str, Any]) -> str:
    """How a CPU run's processes shared the machine, from what its ranks recorded (threads, cores): they contend
    for the cores only where their threads outnumber them."""
    threads, cores, ranks = summary.get("cpu_threads"), summary.get("cpu_cores"), summary.get("ranks") or 2
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


C14_CHOICES = {"a": "NVLink faster", "b": "NVLink slower", "c": "the same within the noise"}
"""Notebook 03's prediction for C14: the step time over NVLink against host-staged transfers."""


def grade_c14(
    prediction: str | None,
    rows: Mapping[str, PathRow | None],
    gpu: bool,
    where_: str,
    reference: Mapping[str, RunResult] | None = None,
) -> Verdict:
    """Grade the prediction against the NVLink and host-staged runs: this machine's where it ran both on 2 GPUs,
    else the committed 2× H200 reference (labelled so); not graded where neither exists."""
    from nvtutorial.report.predict import grade_choice

    host = transport_comparison(rows, "host") if gpu else None
    label, note = where_, ""
    if host is None:
        reference = reference_runs() if reference is None else reference
        if not reference:
            return Verdict(
                "03.C14 prediction",
                "info",
                "not graded here: the host-staged run needs NCCL on 2 GPUs, and this copy of the course has no "
                "committed reference (reference/h200x2/runs ships with a checkout)",
                {"prediction": prediction},
                where_,
            )
        batch = rows_of(reference["host"])[0].per_gpu_batch  # the fixed global batch's, on each of two GPUs
        host = transport_comparison(transport_rows(reference, batch), "host")
        assert host is not None  # the committed runs hold both
        label = _reference_label(reference)
        note = " This machine cannot run the two transports: they need NCCL on 2 GPUs."
    described = host.describe("ms", "step time")
    if note:  # the committed rows timed one round per rank: their min, median and max are not repeats
        described = described.replace(
            f"{host.repeats[0]}+{host.repeats[1]} repeats", "each rank one round: its min/median/max steps"
        )
    answer = {"slower": "a", "faster": "b"}.get(host.status, "c")  # host slower = NVLink faster
    return grade_choice(
        "03.C14 prediction",
        prediction,
        answer,
        C14_CHOICES,
        where=label,
        explanation=f"host-staged against NVLink: {described}.{note}",
    )
