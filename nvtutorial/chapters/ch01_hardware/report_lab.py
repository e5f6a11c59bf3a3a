"""The link A/B lab of notebooks 01 and 02: the same all-reduce sweep on several NCCL paths, what each
path's logs say NCCL used, and the verdicts the runs decide (NVLink against host-staged, claim C7).

Every A/B goes through :func:`~nvtutorial.report.verdict.compare` on the repeats of each size. The runs
are started by :func:`nvtutorial.chapters.ch01_hardware.lab.run_lab` and drawn by
:mod:`nvtutorial.chapters.ch01_hardware.plots`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch01_hardware import schema_allreduce
from nvtutorial.chapters.ch01_hardware.report import (
    Sweep,
    at_size,
    is_gpu,
    reference_nccl_tests,
    saved_label,
    sweep_rows,
)
from nvtutorial.report.verdict import Comparison, Verdict, compare
from nvtutorial.units import format_size

if TYPE_CHECKING:
    from nvtutorial.machine.nccl_debug import TransportReport


@dataclasses.dataclass(frozen=True)
class LabPath:
    """One path of an A/B lab (``lab.LAB_PATHS``): its name, the environment that selects it, what it means."""

    name: str
    env: dict[str, str]
    meaning: str


@dataclasses.dataclass
class LabRun:
    """One path of an A/B lab: the path (:class:`LabPath`: name, env, meaning), its ``allreduce_bench`` run, and the
    transport NCCL reported (:class:`~nvtutorial.machine.nccl_debug.TransportReport`)."""

    path: LabPath
    result: Sweep
    transport: TransportReport

    @property
    def rows(self) -> tuple[schema_allreduce.Row, ...]:
        """The run's rows (rank 0's, typed)."""
        return sweep_rows(self.result)


def _runs(lab: Sequence[LabRun]) -> dict[str, LabRun]:
    return {run.path.name: run for run in lab}


def common_largest_size(lab: Sequence[LabRun]) -> int:
    sizes = set.intersection(*({r.size for r in run.rows} for run in lab))
    if not sizes:
        raise ValueError("the lab's runs have no size in common")
    return max(sizes)


def lab_ratio(lab: Sequence[LabRun], a: str = "default", b: str = "P2P off") -> tuple[float, int]:
    """busbw(a) ÷ busbw(b) at the largest size both measured, and that size."""
    runs = _runs(lab)
    size = common_largest_size([runs[a], runs[b]])
    return at_size(runs[a].rows, size)[1] / at_size(runs[b].rows, size)[1], size


def compare_paths(lab: Sequence[LabRun], base: str, other: str, size: int | None = None) -> tuple[int, Comparison]:
    """``other`` against ``base`` at ``size`` (default: the largest both measured), busbw, higher is better."""
    runs = _runs(lab)
    size = size or common_largest_size([runs[base], runs[other]])
    pick = {name: next(r for r in runs[name].rows if r.size == size) for name in (base, other)}
    return size, compare(pick[base].samples(), pick[other].samples(), lower_is_better=False)


def lab_rows(lab: Sequence[LabRun]) -> list[dict[str, object]]:
    """One row per path: NCCL variables, transport read from its logs, busbw at its largest size, and how many
    times faster the first path (default) was at the largest size both measured (given in its own column)."""
    rows = []
    for run in lab:
        size, value = at_size(run.rows)
        ratio, common = lab_ratio(lab, lab[0].path.name, run.path.name) if run is not lab[0] else (None, None)
        rows.append(
            {
                "path": run.path.name,
                "NCCL variables": " ".join(f"{k}={v}" for k, v in run.path.env.items()) or "—",
                "transport (from NCCL_DEBUG)": run.transport.summary,
                "largest size": format_size(size),
                "busbw there (GB/s)": round(value, 3),
                "largest common size": format_size(common) if common else "—",  # the first path: itself
                f"{lab[0].path.name} ÷ this, at the largest common size": "—" if ratio is None else round(ratio, 2),
            }
        )
    return rows


def _reference_sentence() -> str:
    ref = reference_nccl_tests()
    return (
        "on the reference 2× H200 nccl-tests measured "
        + ", ".join(f"{name} {run.busbw_at(1 << 30):.1f} GB/s" for name, run in ref.items())
        + " at 1 GiB (saved)"
    )


def lab_verdict(lab: Sequence[LabRun]) -> Verdict:
    """What the lab shows: each other path against the first (default), with the transport its logs name."""
    first = lab[0]
    where = first.result.label
    if len(lab) < 2:
        why = (
            "CPU simulation: the other paths differ only in NCCL_* variables, which gloo ignores, so they were not "
            "launched"
            if not is_gpu(first.result)
            else "only one path was run"
        )
        return Verdict("link A/B lab", "info", f"{why}; {_reference_sentence()}.", {}, where)
    parts, worst = [], None
    for run in lab[1:]:
        size, c = compare_paths(lab, first.path.name, run.path.name)
        parts.append(
            f"{run.path.name} ({run.transport.summary}) {c.ratio:.3g}× the default's busbw at {format_size(size)}"
        )
        if worst is None or c.ratio < worst[1].ratio:
            worst = (run.path.name, c, size)
    assert worst is not None  # lab[1:] is not empty
    name, c, size = worst
    text = f"default path: {first.transport.summary}; " + "; ".join(parts) + "."
    if not is_gpu(first.result):
        text = "CPU simulation (gloo ignores NCCL_* variables: any difference is CPU noise): " + text
    return Verdict(
        "link A/B lab", c.status, text, {"slowest_path": name, "ratio": c.ratio, "noise": c.noise, "size": size}, where
    )


def _measures_c5(lab: Sequence[LabRun]) -> bool:
    """Whether the lab ran NVLink and the host-staged path on GPUs (else C5 is read from the saved nccl-tests)."""
    return is_gpu(lab[0].result) and "P2P off" in _runs(lab)


def nvlink_over_staged(lab: Sequence[LabRun]) -> tuple[float, int]:
    """``(busbw over NVLink ÷ host-staged, size)``: the lab's at the largest size both measured where it ran both on
    GPUs (:func:`compare`'s ratio), else the reference machine's saved nccl-tests at 4 GiB."""
    if not _measures_c5(lab):
        ref = reference_nccl_tests()
        nvlink, staged = ref["default"].busbw_at(4 << 30), ref["P2P off"].busbw_at(4 << 30)
        assert nvlink is not None and staged is not None  # the saved runs reach 4 GiB
        return nvlink / staged, 4 << 30
    size, c = compare_paths(lab, "P2P off", "default")
    return c.ratio, size


def claim_nvlink_vs_pcie(lab: Sequence[LabRun]) -> Verdict:
    """The measured side of C5 on this machine: NCCL over NVLink against NCCL staged through host memory."""
    ratio, size = nvlink_over_staged(lab)
    if not _measures_c5(lab):
        return Verdict(
            "C5 (measured)",
            "info",
            f"Not measured here; on the reference 2× H200 (saved nccl-tests) NVLink ÷ host-staged = {ratio:.1f}× "
            "at 4 GiB. The ratio depends on the machine: an RTX 3090 bridge against PCIe 4.0 gives about 1.8× "
            "by vendor figures.",
            {"ratio": ratio, "size": size},
            "reference 2× H200 (saved nccl-tests)",
        )
    return Verdict(
        "C5 (measured)",
        "info",
        f"NCCL over NVLink ÷ NCCL staged through host memory (NCCL_P2P_DISABLE=1: each GPU's kernels write to "
        f"and read from a shared buffer in host memory over their own PCIe link) = {ratio:.1f}× at "
        f"{format_size(size)}. Host-staged is not PCIe peer-to-peer, but "
        "it is what NCCL does between these GPUs without NVLink. Machine-dependent: an RTX 3090 bridge gives "
        "about 1.8× by vendor figures.",
        {"ratio": ratio, "size": size},
        lab[0].result.label,
    )


def grade_lab_ratio(prediction: float | None, lab: Sequence[LabRun]) -> Verdict:
    """Grade a prediction of NVLink's busbw ÷ the host-staged path's (NCCL_P2P_DISABLE=1) against the lab, or
    against the reference machine's saved nccl-tests where the lab did not run both paths on GPUs."""
    from nvtutorial.report.predict import grade_number

    ratio, size = nvlink_over_staged(lab)
    here = _measures_c5(lab)
    return grade_number(
        "NVLink ÷ host-staged",
        prediction,
        ratio,
        unit="×",
        where=lab[0].result.label if here else "reference 2× H200 (saved nccl-tests)",
        measured_name="Measured" if here else "The reference measured (saved nccl-tests)",
        explanation=f"At {format_size(size)}. Host-staged is NCCL's SHM transport: the sending GPU's "
        "kernel writes into a shared, pinned buffer in host memory over its own PCIe link, "
        "and the receiving GPU's kernel reads it over its own (with NCCL_SHM_USE_CUDA_MEMCPY, "
        "copy engines do the same); no CPU copies anything. Each byte crosses each GPU's PCIe "
        "link once and host memory twice (a write, a read), and GPU loads from host memory "
        "are slow, so it runs well below even one PCIe link's rate.",
    )


# --- Claim C7: the source's NCCL settings ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class C7Size:
    """One size of the C7 A/B: ``other`` against ``base`` (:func:`compare`) and each run's repeats there."""

    size: int
    comparison: Comparison
    repeats: tuple[int, int]

    @property
    def ratio(self) -> float:
        """other ÷ base, to four digits (as the table shows it and the verdict reads it)."""
        return round(self.comparison.ratio, 4)

    def table_row(self, base: str, other: str) -> dict[str, object]:
        c = self.comparison
        return {
            "size": format_size(self.size),
            f"{base} busbw": round(c.baseline, 3),
            f"{other} busbw": round(c.candidate, 3),
            "ratio": self.ratio,
            "noise": f"±{c.noise:.1%}",
            "repeats": f"{self.repeats[0]}+{self.repeats[1]}",
            "verdict": c.status,
        }


def c7_sizes(
    ab: Sequence[LabRun], base: str = "default", other: str = "source's settings", min_size: int = 16 << 20
) -> list[C7Size]:
    """Size by size (≥ ``min_size`` on GPUs): ``other`` against ``base`` through :func:`compare`."""
    runs = _runs(ab)
    sizes = sorted({r.size for r in runs[base].rows} & {r.size for r in runs[other].rows})
    if is_gpu(runs[base].result):
        sizes = [s for s in sizes if s >= min_size]
    out = []
    for size in sizes:
        _, c = compare_paths(ab, base, other, size)
        base_n, other_n = (next(r for r in runs[name].rows if r.size == size).repeats for name in (base, other))
        out.append(C7Size(size, c, (base_n, other_n)))
    return out


def c7_rows(
    ab: Sequence[LabRun], base: str = "default", other: str = "source's settings", min_size: int = 16 << 20
) -> list[dict[str, object]]:
    """:func:`c7_sizes` as a table's rows (sizes readable, busbw to three decimals, the noise as ±%)."""
    return [s.table_row(base, other) for s in c7_sizes(ab, base, other, min_size)]


def claim_c7(
    ab: Sequence[LabRun], base: str = "default", other: str = "source's settings", min_size: int = 16 << 20
) -> Verdict:
    """C7 "NCCL_NET_GDR_LEVEL=3 and NCCL_IB_DISABLE=1 help": the A/B size by size, NCCL's own log, the control."""
    runs = _runs(ab)
    a, b = runs[base], runs[other]
    rows = c7_sizes(ab, base, other, min_size)
    where = saved_label(a.result)
    faster = [r for r in rows if r.comparison.status == "faster"]
    slower = [r for r in rows if r.comparison.status == "slower"]
    numbers: dict[str, float | None] = {
        "sizes": len(rows),
        "faster": len(faster),
        "slower": len(slower),
        "no_change": sum(r.comparison.status == "no change" for r in rows),
        "largest_change": max((abs(r.ratio - 1) for r in rows), default=None),
    }
    if not is_gpu(a.result):
        return Verdict(
            "C7",
            "unverifiable",
            "CPU simulation: gloo ignores every NCCL_* variable, so both runs took the "
            "same path and the comparison above only shows the method. NCCL reads NCCL_NET_GDR_LEVEL and "
            "NCCL_IB_DISABLE for its network transport, which two GPUs joined by NVLink do not use; only GPUs can "
            "decide the claim (the README gives the reference 2× H200's runs).",
            numbers,
            where,
        )
    if not rows:
        return Verdict("C7", "unverifiable", "the two runs have no size in common: nothing to compare", numbers, where)
    read = [k for k in b.path.env if k in b.transport.env_set]
    unread = [k for k in b.path.env if k not in b.transport.env_set]
    log = (
        f"NCCL's log shows it read {', '.join(read) or 'neither'}"
        + (
            f" and never read {', '.join(unread)} (NCCL reads NCCL_NET_GDR_LEVEL only when it weighs GPUDirect RDMA "
            "for a NIC that supports it; NCCL_IB_DISABLE=1 turns off NCCL's own InfiniBand/RoCE transport, and "
            "unless a network plugin is installed (e.g. aws-ofi-nccl) only sockets remain, and sockets have no "
            "GPUDirect RDMA)"
            if unread
            else ""
        )
        + "; "
    )
    transports = (
        f"transport {a.transport.summary} in both runs"
        if a.transport.summary == b.transport.summary
        else (f"transports {a.transport.summary} and {b.transport.summary}")
    )
    control = ""
    if "P2P off" in runs:
        size, c = compare_paths(ab, base, "P2P off")
        numbers["control_ratio"] = c.ratio
        control = (
            f" The control, NCCL_P2P_DISABLE=1, changes the transport in use and is {c.status} "
            f"({c.ratio:.2g}× at {format_size(size)}): the measurement sees a change where there is one."
        )
    worst = max(rows, key=lambda r: abs(r.ratio - 1))
    if faster:
        return Verdict(
            "C7",
            "partly",
            f"{log}{transports}; faster beyond the noise at "
            f"{', '.join(format_size(r.size) for r in faster)}: repeat the A/B before believing it.{control}",
            numbers,
            where,
        )
    change = (
        "busbw unchanged within noise at every size"
        if not slower
        else (f"slower at {', '.join(format_size(r.size) for r in slower)}")
    )
    return Verdict(
        "C7",
        "wrong",
        f"No help between these two GPUs: {log}{transports}; {change} (largest difference "
        f"{worst.ratio - 1:+.1%} at {format_size(worst.size)}, noise ±{worst.comparison.noise:.1%}).{control}",
        numbers,
        where,
    )


C7_CHOICES = {
    "a": "faster: busbw rises beyond the noise",
    "b": "slower: busbw falls beyond the noise",
    "c": "no change: every difference is within the noise",
}
"""Notebook 02's prediction: what the source's NCCL settings do to the all-reduce between two GPUs."""
REFERENCE_C7_ANSWER = "c"
"""What the reference 2× H200 runs answered (``tests/chapters/ch01_hardware/test_report.py`` recomputes it
from them)."""


def c7_answer(ab: Sequence[LabRun]) -> str:
    """The letter of :data:`C7_CHOICES` that the A/B runs give."""
    statuses = {r.comparison.status for r in c7_sizes(ab)}
    return "a" if "faster" in statuses else ("b" if "slower" in statuses else "c")


def grade_c7(prediction: str | None, ab: Sequence[LabRun]) -> Verdict:
    """Grade the prediction against these runs on GPUs, against the reference machine's runs on a CPU."""
    from nvtutorial.report.predict import grade_choice

    explanation = (
        "NCCL_NET_GDR_LEVEL and NCCL_IB_DISABLE act only on NCCL's network transport. Two GPUs joined by NVLink, as "
        "on the reference, talk over P2P: NVLink is faster than a path through a NIC, so NCCL does not send their "
        "traffic through the network, and the settings cannot move it. (Within a PCIe server NCCL may route a GPU "
        "pair through a NIC that both reach faster than they reach each other, ncclTopoCheckNet; "
        "NCCL_NET_DISABLE_INTRA=1 forbids it. There these variables can matter.)"
    )
    where = saved_label(ab[0].result)
    if is_gpu(ab[0].result):
        v = grade_choice("C7 prediction", prediction, c7_answer(ab), C7_CHOICES, where=where, explanation=explanation)
    else:
        v = grade_choice(
            "C7 prediction",
            prediction,
            REFERENCE_C7_ANSWER,
            C7_CHOICES,
            where="reference 2× H200 (saved runs): this run was a CPU simulation",
            explanation=explanation + " A CPU run cannot decide it: gloo ignores NCCL_* variables.",
        )
    saved = where != ab[0].result.label or not is_gpu(ab[0].result)
    return dataclasses.replace(v, text=v.text.replace("The run says", "The reference's saved runs say")) if saved else v
