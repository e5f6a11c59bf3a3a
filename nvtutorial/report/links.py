"""What notebook 01 concludes about the link: the source's claims about cards and ``topo -m``
(C2, C3, C5), and a learner's bandwidth prediction graded against a run.

The physical limits and card data are :mod:`nvtutorial.machine.links`; the topology parser is
:mod:`nvtutorial.machine.topology`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..machine.links import SOURCE_NVLINK_CARDS, Expectation, card
from ..machine.topology import Topology
from ..units import format_size
from . import bandwidth


# --- The source's claims about cards and topo -m ------------------------------------------------------

def claim_c2() -> dict[str, Any]:
    """C2 "RTX 3090/4090, V100/A100, Quadro RTX 8000 support NVLink", checked against the table."""
    wrong = [n for n in SOURCE_NVLINK_CARDS if not card(n).has_nvlink]
    right = [n for n in SOURCE_NVLINK_CARDS if card(n).has_nvlink]
    verdict = "partly wrong" if wrong else "true"
    text = (f"{', '.join(right)} have NVLink; " + (f"{', '.join(wrong)} {'has' if len(wrong) == 1 else 'have'} no NVLink connector. "
                                                   if wrong else "")
            + "Two V100s or A100s are only linked in their SXM form or with bridges (the V100 PCIe has none).")
    return {"claim": "C2", "source": "RTX 3090/4090, V100/A100 and Quadro RTX 8000 support NVLink",
            "measured": text, "verdict": verdict}


def claim_c5() -> dict[str, Any]:
    """C5 "consumer NVLink is 1/4 of pro bandwidth yet 3–5× PCIe", from the vendor figures."""
    rtx, a100 = card("GeForce RTX 3090"), card("A100 SXM4")
    ratio_pcie = rtx.ratio or 0.0
    share = rtx.nvlink_gbps / a100.nvlink_gbps
    in_claim = 3.0 <= ratio_pcie <= 5.0
    text = (f"RTX 3090 bridge {rtx.nvlink_gbps:.1f} GB/s per direction vs PCIe 4.0 x16 {rtx.pcie_gbps:.1f} GB/s: "
            f"{ratio_pcie:.1f}×; vs A100 SXM4 ({a100.nvlink_gbps:.0f} GB/s): {share:.2f} (about 1/{1 / share:.0f})")
    return {"claim": "C5", "source": "consumer NVLink is 1/4 of professional bandwidth yet 3–5× PCIe",
            "measured": text, "verdict": "true" if in_claim else f"wrong: {ratio_pcie:.1f}× PCIe, not 3–5×"}


def claim_c3(topo: Topology) -> dict[str, Any]:
    """C3 "nvidia-smi topo -m shows NVLink as NV#", checked on the parsed output."""
    nv = [(a, b, link) for a, b, link in topo.gpu_pairs() if link.kind == "nvlink"]
    if nv:
        a, b, link = nv[0]
        measured = f"{a}–{b}: {link.code} ({link.verdict.split(':')[0]}), in {topo.source}"
        verdict = "true"
    else:
        measured = f"no NV# entry in {topo.source}: this machine has no NVLink between its GPUs"
        verdict = "not testable here (no NVLink); true where NVLink exists"
    return {"claim": "C3", "source": "nvidia-smi topo -m shows NVLink as NV#", "measured": measured, "verdict": verdict}


# --- Grading a prediction ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Grade:
    prediction_gbps: float | None
    measured_gbps: float
    physical_gbps: float
    grade: str
    message: str

    @property
    def efficiency(self) -> float:
        """Measured ÷ physical limit."""
        return self.measured_gbps / self.physical_gbps if self.physical_gbps else float("nan")


def grade_prediction(prediction: float | None, measured: float, physical: float, where: str = "") -> Grade:
    """Grade a learner's busbw prediction against the measurement; states the efficiency too."""
    if measured <= 0 or physical <= 0:
        raise ValueError(f"measured={measured} and physical={physical} must be positive")
    eff = measured / physical
    tail = f"Measured {measured:.1f} GB/s = {eff:.0%} of the {physical:.0f} GB/s physical limit" + (f" ({where})" if where else "") + "."
    if prediction is None:
        return Grade(None, measured, physical, "no prediction",
                     "No prediction written: put a number in `my_prediction_gbps` before running the measurement. " + tail)
    if prediction <= 0:
        raise ValueError(f"prediction={prediction}: a bandwidth prediction must be positive GB/s")
    ratio = prediction / measured
    error = abs(ratio - 1)
    if error <= 0.10:
        grade = "excellent"
    elif error <= 0.25:
        grade = "good"
    elif 0.5 <= ratio <= 2.0:
        grade = "right order of magnitude"
    else:
        grade = "off"
    direction = "high" if ratio > 1 else "low"
    msg = (f"You predicted {prediction:.1f} GB/s; {error:.0%} too {direction} (grade: {grade}). "
           if error > 0.005 else f"You predicted {prediction:.1f} GB/s: spot on (grade: {grade}). ")
    if prediction > physical:
        msg += "No link beats its physical limit: a prediction above it cannot be right. "
    return Grade(prediction, measured, physical, grade, msg + tail)


def grade_run(prediction: float | None, result: Any, expectation: Expectation) -> Grade:
    """Grade a prediction of busbw at the largest size against an ``allreduce_bench`` run.

    On GPUs the run itself is the measurement. A CPU run cannot grade a GPU prediction: the
    prediction is then graded against the reference machine's saved torch measurement at 1 GiB,
    and the message says so.
    """
    if result.env is not None and result.env.is_gpu:
        size, measured = bandwidth.at_size(bandwidth.rows_of(result))
        return grade_prediction(prediction, measured, expectation.physical_gbps,
                                f"{format_size(size)}, {result.label}")
    size, measured = bandwidth.reference_torch_busbw()
    g = grade_prediction(prediction, measured, expectation.physical_gbps,
                         f"the reference machine's saved torch all-reduce at {format_size(size)}")
    note = "This run was a CPU simulation, so your prediction is graded against the reference machine's saved number. "
    return dataclasses.replace(g, message=note + g.message)
