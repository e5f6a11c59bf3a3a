"""Notebook 03's conclusions from its runs: the lesson's checks, validation, resume, scaling, the source's table.

The lesson's checks are in ``report_lesson.py``, scaling in ``report_scaling.py``, the rows read in
``report_rows.py``; this module holds the source's table and C14, and re-exports the others (notebooks 03 and 04
read ``ch.report``). Pure functions of the numbers the runs returned (never launches, never draws), tested without a
GPU: each check and each claim (C1, C14, C15 and the validation half of C18) is a
:class:`~nvtutorial.report.verdict.Verdict` computed from the measurements. The ``train`` workload's
results are read typed (:mod:`~nvtutorial.chapters.ch03_ddp_training.schema`: a ``Rank`` per rank, a ``Row`` per
configuration); the committed 2× H200 reference runs (``reference/h200x2/runs/train-*``), written in an earlier
layout (a median, a minimum and a maximum per configuration), read as today's through the schema's ``upgrade``, so
the reference's verdicts are recomputed by the tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

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
from nvtutorial.chapters.ch03_ddp_training.report_scaling import CONVENTION_LABELS as CONVENTION_LABELS
from nvtutorial.chapters.ch03_ddp_training.report_scaling import CPU_NOTE as CPU_NOTE
from nvtutorial.chapters.ch03_ddp_training.report_scaling import REFERENCE_FOLDER as REFERENCE_FOLDER
from nvtutorial.chapters.ch03_ddp_training.report_scaling import REFERENCE_NOTE as REFERENCE_NOTE
from nvtutorial.chapters.ch03_ddp_training.report_scaling import REFERENCE_RUNS as REFERENCE_RUNS
from nvtutorial.chapters.ch03_ddp_training.report_scaling import Convention as Convention
from nvtutorial.chapters.ch03_ddp_training.report_scaling import Memory as Memory
from nvtutorial.chapters.ch03_ddp_training.report_scaling import OneGpuSummary as OneGpuSummary
from nvtutorial.chapters.ch03_ddp_training.report_scaling import ScalingSummary as ScalingSummary
from nvtutorial.chapters.ch03_ddp_training.report_scaling import _pct as _pct
from nvtutorial.chapters.ch03_ddp_training.report_scaling import _r as _r
from nvtutorial.chapters.ch03_ddp_training.report_scaling import _reference_label as _reference_label
from nvtutorial.chapters.ch03_ddp_training.report_scaling import _size as _size
from nvtutorial.chapters.ch03_ddp_training.report_scaling import counted_gb as counted_gb
from nvtutorial.chapters.ch03_ddp_training.report_scaling import cpu_sharing as cpu_sharing
from nvtutorial.chapters.ch03_ddp_training.report_scaling import efficiency as efficiency
from nvtutorial.chapters.ch03_ddp_training.report_scaling import grade_scaling as grade_scaling
from nvtutorial.chapters.ch03_ddp_training.report_scaling import one_gpu_summary as one_gpu_summary
from nvtutorial.chapters.ch03_ddp_training.report_scaling import one_gpu_verdict as one_gpu_verdict
from nvtutorial.chapters.ch03_ddp_training.report_scaling import reference_runs as reference_runs
from nvtutorial.chapters.ch03_ddp_training.report_scaling import scaling_explanation as scaling_explanation
from nvtutorial.chapters.ch03_ddp_training.report_scaling import scaling_frame as scaling_frame
from nvtutorial.chapters.ch03_ddp_training.report_scaling import scaling_summary as scaling_summary
from nvtutorial.chapters.ch03_ddp_training.report_scaling import scaling_verdicts as scaling_verdicts
from nvtutorial.chapters.ch03_ddp_training.report_scaling import verdict_c1 as verdict_c1
from nvtutorial.chapters.ch03_ddp_training.report_scaling import verdict_c15 as verdict_c15
from nvtutorial.chapters.ch03_ddp_training.schema import SOLO, Row
from nvtutorial.report.verdict import Comparison, Verdict, compare
from nvtutorial.results import RunResult, Where, label_of

if TYPE_CHECKING:
    import pandas as pd


@dataclasses.dataclass(frozen=True)
class SourceRow:
    """One row of the source tutorial's results table (ResNet-50 on ImageNet, per epoch; its hardware unnamed)."""

    path: str
    minutes_per_epoch: float
    memory_gb_per_gpu: float
    comm_share: float | None
    """The share of a step spent communicating, as printed; None for one GPU."""


SOURCE_TABLE = (
    # The source's part 4.
    SourceRow("1 GPU", minutes_per_epoch=58.0, memory_gb_per_gpu=24.0, comm_share=None),
    SourceRow("2 GPUs over PCIe", minutes_per_epoch=34.0, memory_gb_per_gpu=13.0, comm_share=0.18),
    SourceRow("2 GPUs over NVLink", minutes_per_epoch=29.0, memory_gb_per_gpu=13.0, comm_share=0.09),
)
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

CPU_PATHS = {
    "1gpu": "1 process (CPU)",
    "nvlink": "2 processes, gloo (CPU)",
    "host": "host-staged: needs 2 GPUs",
    "socket": "sockets: needs 2 GPUs",
}
"""Our rows' names when the runs were CPU simulations: no GPU path was measured."""


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
    source = {r.path: r for r in SOURCE_TABLE}
    out = []
    for key, label in PATHS.items():
        path, src = rows.get(key), source.get(SOURCE_ROW_FOR.get(key, ""))
        entry: dict[str, str | float] = {"path": label if gpu else CPU_PATHS[key]}
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
                    "source's ResNet-50 speed-up": round(58.0 / src.minutes_per_epoch, 2),
                    "source's comm share": _pct(src.comm_share) if src.comm_share is not None else "—",
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
    one = SOURCE_TABLE[0].minutes_per_epoch
    return {row.path: row.minutes_per_epoch * (1 - (row.comm_share or 0.0)) / (one / 2) for row in SOURCE_TABLE[1:]}


RESNET50_FIXTURE = "ddp-resnet50-synthetic.txt"
"""torchvision ResNet-50 under DDP on the 2× H200 reference (``nvtutorial/data/h200x2/``): the source's model."""


@dataclasses.dataclass(frozen=True)
class ResNet50:
    """Images per second of the committed ResNet-50 runs on 2× H200, per path (:func:`resnet50_reference`)."""

    one_gpu: float
    nvlink: float
    host: float
    """Two GPUs, host-staged (``NCCL_P2P_DISABLE=1``)."""
    socket: float
    """Two GPUs over sockets (shared memory off as well)."""


def resnet50_reference() -> ResNet50:
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
    return ResNet50(one_gpu=one, nvlink=nvlink, host=staged[0], socket=staged[1])


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
    resnet_gap = resnet.nvlink / resnet.host
    tension = source_table_tension()
    text += (
        f". The source's own model, ResNet-50 (bf16, 128 images per GPU, synthetic data) on the same 2× H200: "
        f"{resnet.nvlink:.0f} images/s over NVLink against {resnet.host:.0f} host-staged, a "
        f"{resnet_gap - 1:.1%} longer step without NVLink (one measurement each, no repeats), not "
        f"{SOURCE_C14_GAP:.0%}; scaling {resnet.nvlink / (2 * resnet.one_gpu):.1%} over NVLink, "
        f"{resnet.host / (2 * resnet.one_gpu):.1%} host-staged. "
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


def show(frame: pd.DataFrame, where_: Where, title: str | None = None) -> None:
    """Display a table with where it was measured above it (in Jupyter: as HTML; else as text)."""
    print((f"{title}\n" if title else "") + f"measured on: {label_of(where_)}")
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(frame)
            return
    except ImportError:
        pass
    print(frame.to_string(index=False))


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
