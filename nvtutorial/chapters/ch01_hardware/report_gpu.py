"""One GPU's own links, predicted and measured (notebook 01, the part "one GPU's links"): its memory, and its PCIe link
to the host.

The limits are what NVML says about the GPU (:class:`Limits`): PCIe generation × lanes × the rate per lane after the
line code (:func:`nvtutorial.machine.links.pcie_gbps`), and the memory's bus width × clock × 2
(:class:`nvtutorial.machine.hardware.MemoryPeak`). The ``gpu_links`` run (``workload_gpu_links.py``) measures copies;
:func:`verdict` says what share of its limit each link reached and what that means, :func:`grade` grades a learner's
prediction of the pinned host-to-device rate. The run is started by
:func:`nvtutorial.chapters.ch01_hardware.lab.gpu_links`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial.chapters.ch01_hardware.schema_gpu_links import Rank, Row
from nvtutorial.machine.links import pcie_gbps
from nvtutorial.report.verdict import Verdict, compare
from nvtutorial.results import RunResult
from nvtutorial.units import format_size

if TYPE_CHECKING:
    from nvtutorial.machine.hardware import MemoryPeak
    from nvtutorial.nvml import GPUDetail

EXPECTED_SHARE = 0.70
"""Below this share of its limit a pinned PCIe copy or a device copy is slower than the link usually gives: pinned
copies reach about 80–90 % of PCIe after its line code (each packet's header and the link's flow control take the
rest), a device-to-device copy about as much of the memory's peak."""
ABOVE_LIMIT = 1.02
"""Above this share of its limit the limit is wrong for this copy (2 %: rounding of the reported clocks)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a GPU's two links should carry at most, per direction, GB/s; None where NVML could not say."""

    gpu: str
    source: str
    pcie: str | None = None
    pcie_gbps: float | None = None
    memory: str | None = None
    memory_gbps: float | None = None

    def of(self, link: str) -> float | None:
        return self.memory_gbps if link == "memory" else self.pcie_gbps

    def parts(self) -> tuple[str, str, str]:
        """The PCIe link, the memory, and how they compare, in words."""
        pcie = f"{self.pcie}, {self.pcie_gbps:.1f} GB/s per direction" if self.pcie_gbps else "NVML gave no PCIe link"
        memory = f"{self.memory}, {self.memory_gbps:,.0f} GB/s" if self.memory_gbps else "NVML gave no memory peak"
        ratio = (
            f"the memory carries {self.memory_gbps / self.pcie_gbps:.0f}× what the PCIe link carries each way"
            if self.memory_gbps and self.pcie_gbps
            else ""
        )
        return pcie, memory, ratio

    def describe(self) -> str:
        pcie, memory, ratio = self.parts()
        return f"{self.gpu} ({self.source})\n  link to the host: {pcie}\n  its memory: {memory}\n  {ratio}"


REFERENCE_LIMITS = Limits(
    "NVIDIA H200",
    "the reference H200: its PCIe link as NVML read it there, its memory from NVIDIA's datasheet",
    "PCIe Gen5 x16",
    pcie_gbps(5, 16),
    "HBM3e, 4.8 TB/s (datasheet)",
    4800.0,
)
"""The limits of the reference machine's H200, shown where this machine has no GPU."""


def limits(gpu: GPUDetail | None, peak: MemoryPeak | None) -> Limits:
    """This GPU's limits from NVML: its PCIe link at the highest generation and width NVML gives for the link
    (``nvmlDeviceGetMaxPcieLinkGeneration``: the lower of the GPU's and the slot's; the current one drops when the GPU
    idles), and its memory peak; the reference H200's without a GPU."""
    if gpu is None:
        return REFERENCE_LIMITS
    gen, width = gpu.pcie_gen_max or gpu.pcie_gen, gpu.pcie_width_max or gpu.pcie_width
    try:
        pcie: float | None = pcie_gbps(gen, width)  # type: ignore[arg-type] - None is refused there, as unknown
    except ValueError:  # NVML gave no generation or width, or one the course does not know
        pcie = None
    return Limits(
        gpu.name,
        "this machine's GPU 0, as NVML reads it: its PCIe link's highest generation and width",
        f"PCIe Gen{gen} x{width}" if pcie else None,
        pcie,
        peak.describe() if peak else None,
        peak.gbps if peak else None,
    )


@dataclasses.dataclass
class GpuLinks:
    """The part's run (this machine's, or the reference H200's saved one), or no rows and why (``note``)."""

    rows: Sequence[Row]
    label: str
    note: str = ""
    result: RunResult[Rank] | None = None
    here: bool = False
    """Whether the rows were measured on this machine (else: the reference's saved run)."""

    def largest(self) -> int:
        return max(r.size for r in self.rows)

    def row(self, link: str, host: str, size: int | None = None) -> Row | None:
        size = self.largest() if size is None else size
        return next((r for r in self.rows if (r.link, r.host, r.size) == (link, host, size)), None)

    def frame(self, lim: Limits):  # -> pandas.DataFrame
        """One line per link, kind of host memory and size: GB/s (median block, range) against the link's limit."""
        import pandas as pd

        if not self.rows:
            frame = pd.DataFrame([{"link": "memory and PCIe", "GB/s": None, "note": self.note}])
        else:
            frame = pd.DataFrame(
                [
                    {
                        "link": r.link,
                        "host memory": r.host if r.link != "memory" else "—",
                        "size": format_size(r.size),
                        "GB/s": round(r.gbps, 1),
                        "GB/s min": round(min(r.samples()), 1),
                        "GB/s max": round(max(r.samples()), 1),
                        "limit GB/s": round(limit, 1) if (limit := lim.of(r.link)) else None,
                        "share of the limit": f"{r.gbps / limit:.0%}" if limit else None,
                        "copies per block": r.iters,
                    }
                    for r in self.rows
                ]
            )
        frame.attrs["where"] = self.label
        return frame


def reading(share: float) -> str:
    """What a copy's share of its limit says (PCIe or memory, the same thresholds): ``as expected``, ``below`` or
    ``above the limit``."""
    if share > ABOVE_LIMIT:
        return "above the limit"
    return "below" if share < EXPECTED_SHARE else "as expected"


WHY = {
    ("pcie", "above the limit"): "NVML's generation or width is not the link's (a virtual machine's bridge?)",
    ("pcie", "below"): (
        "slower than a pinned copy usually is: check the link under load (nvidia-smi -q -d PCI: current generation "
        "and width), a slot with fewer lanes, a PCIe switch shared with another device, or a virtual machine's IOMMU"
    ),
    ("memory", "above the limit"): "NVML's memory clock or bus width is not the memory's peak",
    ("memory", "below"): (
        "slower than a device copy usually is: another process on the GPU, or clocks held low "
        "(nvidia-smi -q -d CLOCK,PERFORMANCE)"
    ),
}
"""What to check when a link reads ``below`` or ``above the limit``."""


def _share(gbps: float, limit: float | None) -> dict[str, Any]:
    share = gbps / limit if limit else None
    return {"gbps": gbps, "share": share, "reading": reading(share) if share is not None else None}


def _pcie_sentence(run: GpuLinks, lim: Limits, numbers: dict[str, Any]) -> str:
    pinned = [r for d in ("host to device", "device to host") if (r := run.row(d, "pinned"))]
    parts = []
    for r in pinned:
        numbers[f"{r.link}, pinned"] = got = _share(r.gbps, lim.pcie_gbps)
        parts.append(f"{r.link} {r.gbps:.1f} GB/s" + (f" ({got['share']:.0%})" if got["share"] else ""))
    text = "Pinned: " + ", ".join(parts)
    if lim.pcie_gbps:
        odd = {numbers[f"{r.link}, pinned"]["reading"] for r in pinned} - {"as expected"}
        text += f" of the {lim.pcie_gbps:.1f} GB/s of {lim.pcie}" + (
            f": at least {EXPECTED_SHARE:.0%}, as a pinned copy usually reaches (each packet's header and the flow "
            "control take the rest)"
            if not odd
            else "; " + "; ".join(f"{w}: {WHY[('pcie', w)]}" for w in sorted(odd))
        )
    ratios = []
    for d in ("host to device", "device to host"):
        slow, fast = run.row(d, "pageable"), run.row(d, "pinned")
        if slow and fast:
            c = compare(fast.samples(), slow.samples(), lower_is_better=False)
            numbers[f"{d}, pageable ÷ pinned"] = {"ratio": c.ratio, "status": c.status}
            ratios.append(f"{d} {c.ratio:.2f}× pinned ({c.status})")
    if ratios:
        text += (
            ". Pageable: " + ", ".join(ratios) + ": the driver copies pageable memory through a pinned buffer of its "
            "own with the CPU, so pin what crosses every step (a DataLoader's pin_memory=True)"
        )
    return text + "."


def _memory_sentence(run: GpuLinks, lim: Limits, numbers: dict[str, Any]) -> str:
    r = run.row("memory", "device")
    if r is None:
        return ""
    numbers["memory"] = got = _share(r.gbps, lim.memory_gbps)
    text = f" A copy inside the GPU moved {r.gbps:,.0f} GB/s (bytes read + written)"
    if got["share"] is None:
        return text + "; NVML gave no memory peak to compare it with."
    word = got["reading"]
    text += f", {got['share']:.0%} of the {lim.memory_gbps:,.0f} GB/s of {lim.memory}"
    text += (
        f": at least {EXPECTED_SHARE:.0%}, as a device copy usually reaches."
        if word == "as expected"
        else f"; {word}: {WHY[('memory', word)]}."
    )
    fast = run.row("host to device", "pinned")
    if fast:
        numbers["memory_over_pcie"] = r.gbps / fast.gbps
        text += (
            f" Measured, the GPU's memory carried {r.gbps / fast.gbps:.0f}× what its PCIe link did: data that "
            "crosses PCIe every step costs that much more than data that stays on the GPU."
        )
    return text


def verdict(run: GpuLinks, lim: Limits) -> Verdict:
    """Each link at the largest size against its limit, pageable against pinned (:func:`compare`), memory against
    PCIe."""
    if not run.rows:
        pcie, memory, ratio = lim.parts()
        text = f"{run.note}. The limits of the {lim.gpu}: {pcie}, to the host; its memory: {memory}" + (
            f": {ratio}." if ratio else "."
        )
        return Verdict("one GPU's links", "info", text, {}, lim.source)
    numbers: dict[str, Any] = {"size": run.largest()}
    text = (
        f"At {format_size(run.largest())}: " + _pcie_sentence(run, lim, numbers) + _memory_sentence(run, lim, numbers)
    )
    if not run.here:
        text = f"Not measured here ({run.note}); the reference H200's saved run. " + text
    return Verdict("one GPU's links", "info", text, numbers, run.label)


def grade(prediction: float | None, run: GpuLinks, lim: Limits) -> Verdict:
    """Grade a prediction of the pinned host-to-device rate at the largest size (GB/s) against the run (or the
    reference H200's saved run); with neither, say what bounds it."""
    from nvtutorial.report.predict import grade_number, question_of

    measured = run.row("host to device", "pinned") if run.rows else None
    if measured is None:
        bound = f"{lim.pcie_gbps:.1f} GB/s, the limit of {lim.pcie}" if lim.pcie_gbps else "no limit NVML could give"
        return Verdict(
            "pinned host to device",
            "info",
            f"Nothing to grade against: {run.note}. Your prediction must stay under {bound}.",
            {"prediction": prediction},
            lim.source,
            question_of("pinned host to device"),
        )
    why = (
        f"That is {measured.gbps / lim.pcie_gbps:.0%} of the {lim.pcie_gbps:.1f} GB/s of {lim.pcie}: "
        "a pinned copy is a DMA by the GPU's copy engines, and PCIe spends the rest on each packet's header and "
        "on flow control."
        if lim.pcie_gbps
        else "NVML gave no PCIe link to compare it with."
    )
    return grade_number(
        "pinned host to device",
        prediction,
        measured.gbps,
        unit="GB/s",
        where=run.label,
        explanation=f"At {format_size(measured.size)}. {why}",
        limit=lim.pcie_gbps,
        limit_name=f"limit of {lim.pcie}",
        measured_name="Measured" if run.here else "The reference H200 measured (saved run)",
    )
