"""What notebook 01 concludes about cards and links: the source's claims C2, C3 and C5 as verdicts, and a
learner's bandwidth prediction graded against a run.

The physical limits and card data are :mod:`nvtutorial.machine.links`; the topology parser is
:mod:`nvtutorial.machine.topology`. Each ``claim_*`` is the ``decided_by`` function of its claim in
:mod:`nvtutorial.report.claims`.
"""

from __future__ import annotations

from nvtutorial.chapters.ch01_hardware import report as bandwidth
from nvtutorial.machine.links import SOURCE_NVLINK_CARDS, Expectation, card
from nvtutorial.machine.topology import Topology
from nvtutorial.report.predict import grade_number
from nvtutorial.report.verdict import Verdict
from nvtutorial.units import format_size

VENDOR = "vendor data (NVIDIA datasheets)"


def claim_c2() -> Verdict:
    """C2 "RTX 3090/4090, V100/A100, Quadro RTX 8000 support NVLink", checked against the card table."""
    wrong = [n for n in SOURCE_NVLINK_CARDS if not card(n).has_nvlink]
    right = [n for n in SOURCE_NVLINK_CARDS if card(n).has_nvlink]
    text = (
        f"{', '.join(right)} have NVLink; "
        + (f"{', '.join(wrong)} {'has' if len(wrong) == 1 else 'have'} no NVLink connector. " if wrong else "")
        + "A V100 has NVLink only in its SXM form (the V100 PCIe card has none); an A100 in its SXM form, or as a "
        "PCIe card with NVLink bridges."
    )
    status = "partly" if wrong and right else ("holds" if right else "wrong")
    return Verdict("C2", status, text, {"with_nvlink": right, "without_nvlink": wrong}, VENDOR)


def claim_c5() -> Verdict:
    """C5 "consumer NVLink is 1/4 of professional bandwidth yet 3–5× PCIe", from the vendor figures."""
    rtx = card("GeForce RTX 3090")
    pros = {
        name: rtx.nvlink_gbps / card(name).nvlink_gbps for name in ("A100 SXM4", "Tesla V100 SXM2", "Quadro RTX 8000")
    }
    ratio_pcie = rtx.ratio or 0.0
    share = pros["A100 SXM4"]
    in_claim = 3.0 <= ratio_pcie <= 5.0
    text = (
        f"RTX 3090 bridge {rtx.nvlink_gbps:.1f} GB/s per direction against PCIe 4.0 x16 {rtx.pcie_gbps:.1f} GB/s: "
        f"{ratio_pcie:.1f}×, not 3–5× (wrong). The 1/4 depends on the card: "
        + ", ".join(f"{v:.2g} of the {k}'s" for k, v in pros.items())
        + " NVLink bandwidth."
    )
    return Verdict(
        "C5",
        "holds" if in_claim else "wrong",
        text,
        {"nvlink_over_pcie": ratio_pcie, "consumer_over_pro": share, "consumer_over": pros},
        VENDOR,
    )


def claim_c3(topo: Topology | None = None) -> Verdict:
    """C3 "nvidia-smi topo -m shows NVLink as NV#", checked on a parsed output (default: the reference machine's)."""
    if topo is None:
        from nvtutorial.machine import hardware, topology

        topo = topology.read(hardware.reference_output("nvidia-smi-topo-m.txt"))
    nv = [(a, b, link) for a, b, link in topo.gpu_pairs() if link.kind == "nvlink"]
    if nv:
        a, b, link = nv[0]
        return Verdict(
            "C3",
            "holds",
            f"{a}–{b}: {link.code}, {link.nvlinks} NVLinks: topo -m names NVLink as NV#.",
            {"code": link.code, "nvlinks": link.nvlinks},
            topo.source,
        )
    return Verdict(
        "C3",
        "unverifiable",
        f"no NV# entry in {topo.source}: these GPUs have no NVLink between them, "
        "so the claim cannot be checked here (the reference machine shows NV18).",
        {"code": None},
        topo.source,
    )


# --- Grading a prediction ---------------------------------------------------------------------------

PREDICTION_SIZE = 1 << 30
"""Notebook 01 asks for the all-reduce busbw at 1 GiB."""


def grade_run(
    prediction: float | None, result: bandwidth.Sweep, expectation: Expectation, size: int = PREDICTION_SIZE
) -> Verdict:
    """Grade a prediction of the all-reduce busbw at ``size`` with :func:`~nvtutorial.teach.predict.grade_number`.

    On GPUs the run is the measurement. A CPU run cannot grade a GPU prediction: the course's own sweep
    saved on the reference machine (1 GiB) grades it instead, and the verdict says so.
    """
    physical = expectation.physical_gbps
    if bandwidth.is_gpu(result):
        rows = bandwidth.sweep_rows(result)
        at = size if any(r.size == size for r in rows) else None
        size, measured = bandwidth.at_size(rows, at)
        where = result.label
        source = f"this run, {format_size(size)}"
        measured_name = "Measured"
    else:
        size, measured = bandwidth.reference_sweep_busbw(size)
        where = "reference 2× H200 (the course's saved sweep): this run was a CPU simulation"
        source = (
            f"the course's sweep on the reference machine at {format_size(size)}, saved; this run was a CPU simulation"
        )
        measured_name = "The reference measured"
    explanation = (
        f"That is {measured / physical:.0%} of the {physical:.0f} GB/s physical limit of {expectation.link} ({source})."
    )
    copy_gbps = bandwidth.REFERENCE_COPY.gbps
    if expectation.link == "NV18" and physical == 450.0:
        explanation += (
            f" Even a copy-engine copy with no NCCL reached only {copy_gbps:.0f} GB/s "
            f"({copy_gbps / physical:.0%}) on the reference machine: link-level overhead (NVLink packet "
            "headers and flow control: NVIDIA's 25 GB/s per link is the rate before them). NCCL's protocol, its "
            f"synchronisation and the reduction cost the rest ({copy_gbps:.0f} → {measured:.0f} GB/s)."
        )
    return grade_number(
        f"busbw at {format_size(size)}",
        prediction,
        measured,
        unit="GB/s",
        where=where,
        explanation=explanation,
        limit=physical,
        limit_name=f"physical limit of {expectation.link}",
        measured_name=measured_name,
    )
