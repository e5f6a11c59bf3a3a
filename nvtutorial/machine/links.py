"""What a GPU-to-GPU link can carry: physical limits, practical ceilings, common cards.

Used in notebook 01. All bandwidths are in GB/s (10⁹ bytes per second) **per direction**, the
unit nccl-tests' busbw is comparable with. NVIDIA quotes NVLink as the sum of both directions
("900 GB/s" for H100 SXM = 450 GB/s each way); the tables here keep the vendor figure and halve it.
Grading a learner's prediction against a run, and the source's claims about cards, are in
:mod:`nvtutorial.chapters.ch01_hardware.report_links`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

# --- Physical limits ------------------------------------------------------------------------

NVLINK_PER_LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
"""Data rate of one NVLink, per direction, by generation (P100, V100, A100, H100/H200, B200).
Consumer and workstation Ampere bridges (RTX 3090, RTX A6000) run their links slower: see CARDS."""

PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
"""Transfer rate per lane, GT/s."""
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
"""Line-code efficiency: 8b/10b up to Gen2, 128b/130b for Gen3–5, FLIT mode for Gen6."""


def nvlink_gbps(links: int, generation: int = 4, per_link: float | None = None) -> float:
    """Per-direction limit of ``links`` bonded NVLinks: 18 × 25 = 450 GB/s for NV18 on Hopper."""
    if links < 0:
        raise ValueError(f"links={links} must be >= 0")
    if per_link is None:
        if generation not in NVLINK_PER_LINK_GBPS:
            raise ValueError(f"NVLink generation {generation} unknown; known: {sorted(NVLINK_PER_LINK_GBPS)}")
        per_link = NVLINK_PER_LINK_GBPS[generation]
    return links * per_link


def pcie_gbps(generation: int, width: int = 16) -> float:
    """Per-direction limit of a PCIe link after line coding: Gen4 x16 = 31.5 GB/s, Gen5 x16 = 63 GB/s."""
    if generation not in PCIE_GTS:
        raise ValueError(f"PCIe generation {generation} unknown; known: {sorted(PCIE_GTS)}")
    if width not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"PCIe width x{width} is not a real width (1, 2, 4, 8, 16)")
    return PCIE_GTS[generation] * PCIE_ENCODING[generation] * width / 8


# --- Common cards -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Card:
    name: str
    architecture: str
    nvlink_links: int  # links between two cards of this model (0: no NVLink)
    nvlink_total_gbps: float  # vendor figure, both directions together (0: no NVLink)
    pcie_gen: int
    note: str = ""

    @property
    def nvlink_gbps(self) -> float:
        """Per direction (half the vendor's bidirectional figure)."""
        return self.nvlink_total_gbps / 2

    @property
    def pcie_gbps(self) -> float:
        return pcie_gbps(self.pcie_gen, 16)

    @property
    def has_nvlink(self) -> bool:
        return self.nvlink_links > 0

    @property
    def ratio(self) -> float | None:
        """NVLink ÷ PCIe x16 of the card's generation, per direction (``None`` without NVLink)."""
        return self.nvlink_gbps / self.pcie_gbps if self.has_nvlink else None


CARDS: tuple[Card, ...] = (
    Card("Tesla P100 SXM2", "Pascal", 4, 160, 3, "NVLink 1.0"),
    Card("Tesla V100 SXM2", "Volta", 6, 300, 3, "NVLink 2.0; the V100 PCIe card has no NVLink"),
    Card("Tesla V100 PCIe", "Volta", 0, 0, 3, "no NVLink connector"),
    Card("Quadro RTX 8000", "Turing", 2, 100, 3, "2-slot NVLink bridge between two cards"),
    Card("GeForce RTX 2080 Ti", "Turing", 2, 100, 3, "NVLink bridge between two cards"),
    Card("GeForce RTX 3090", "Ampere", 4, 112.5, 4, "NVLink bridge between two cards (the last GeForce with one)"),
    Card("RTX A6000", "Ampere", 4, 112.5, 4, "NVLink bridge between two cards"),
    Card("A100 SXM4", "Ampere", 12, 600, 4, "NVLink 3.0"),
    Card("A100 PCIe", "Ampere", 12, 600, 4, "three NVLink bridges between two cards"),
    Card(
        "GeForce RTX 4090",
        "Ada",
        0,
        0,
        4,
        "no NVLink connector; the stock driver also reports no PCIe P2P between two 4090s",
    ),
    Card("RTX 6000 Ada", "Ada", 0, 0, 4, "no NVLink connector"),
    Card("L40S", "Ada", 0, 0, 4, "no NVLink connector"),
    Card("GeForce RTX 5090", "Blackwell", 0, 0, 5, "no NVLink connector"),
    Card("H100 SXM5", "Hopper", 18, 900, 5, "NVLink 4.0"),
    Card("H100 PCIe", "Hopper", 12, 600, 5, "NVLink bridges between two cards"),
    Card("H200 SXM", "Hopper", 18, 900, 5, "NVLink 4.0; the course's reference machine"),
    Card("B200", "Blackwell", 18, 1800, 5, "NVLink 5.0"),
)
"""Vendor figures (NVIDIA datasheets): NVLink bandwidth as NVIDIA quotes it (both directions)."""

SOURCE_NVLINK_CARDS = ("GeForce RTX 3090", "GeForce RTX 4090", "Tesla V100 SXM2", "A100 SXM4", "Quadro RTX 8000")
"""The cards the source tutorial lists as "supporting NVLink" (claim C2)."""


def card(name: str) -> Card:
    """The card whose name matches ``name`` (e.g. an NVML name ``"NVIDIA H200"``), or KeyError."""
    found = find_card(name)
    if found is None:
        raise KeyError(f"no card matches {name!r}; known: {', '.join(c.name for c in CARDS)}")
    return found


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("geforce", "").replace("nvidia", "").replace("tesla", ""))


def _model(c: Card) -> str:
    return next(w for w in _words(c.name) if any(ch.isdigit() for ch in w))


def find_card(name: str) -> Card | None:
    """Best match for a GPU name as NVML prints it (``NVIDIA H100 80GB HBM3`` is the SXM part)."""
    tokens = set(_words(name))
    candidates = [c for c in CARDS if _model(c) in tokens]
    if not candidates or "nvl" in tokens:  # H100 NVL / H200 NVL: bridged PCIe cards not in the table
        return None

    def score(c: Card) -> float:
        words = set(_words(c.name))
        s = len(tokens & words)
        if ("pcie" in words) != ("pcie" in tokens):
            s -= 2  # NVML names the PCIe parts "... PCIe"; without it, the SXM part
        return s

    return max(candidates, key=score)


def card_rows() -> list[dict[str, Any]]:
    """The card table as rows (for ``pandas.DataFrame``)."""
    return [
        {
            "card": c.name,
            "architecture": c.architecture,
            "NVLink": "yes" if c.has_nvlink else "no",
            "links": c.nvlink_links or None,
            "NVLink GB/s per direction": c.nvlink_gbps or None,
            "PCIe x16": f"Gen{c.pcie_gen}",
            "PCIe GB/s per direction": round(c.pcie_gbps, 1),
            "NVLink ÷ PCIe": round(c.ratio, 1) if c.ratio else None,
            "note": c.note,
        }
        for c in CARDS
    ]


def card_frame():  # -> pandas.DataFrame
    """The card table as a DataFrame, one row per card (integer link counts, blanks where there is no NVLink)."""
    import pandas as pd

    frame = pd.DataFrame(card_rows()).set_index("card")
    frame["links"] = frame["links"].astype("Int64")
    return frame


# --- Expectation ----------------------------------------------------------------------------

REFERENCE_NCCL_TESTS = {"busbw": 347.71, "physical": 450.0, "size": 4 << 30}
"""nccl-tests' all-reduce busbw (out of place, 4 GiB) on the reference 2× H200, NV18
(``nvtutorial/data/h200x2/nccl-tests-all_reduce-nvlink.txt``): 77 % of the physical limit."""

NCCL_EFFICIENCY = {"nvlink": (0.70, 0.85), "pcie": (0.70, 0.85)}
"""A band around the reference's measured share (77 %) used to draw what to expect: measured for NVLink on
one machine only (other machines differ); for PCIe an unmeasured guess (the reference's host-staged path,
which is not a direct PCIe transfer, reached 29.3 GB/s, 46 % of Gen5 x16)."""


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What a link should deliver, per direction."""

    link: str  # "NV18", "PCIe Gen5 x16"
    physical_gbps: float
    practical_gbps: tuple[float, float]
    basis: str

    def describe(self, gpus_here: int | None = None) -> str:
        """The limit and what nccl-tests reached on the reference; ``gpus_here``: this machine's GPUs where the pair
        described is the reference's saved one (fewer than two here), None where it is this machine's."""
        ref = REFERENCE_NCCL_TESTS
        share = ref["busbw"] / ref["physical"]
        if gpus_here is not None:
            seen = (
                f"the reference 2× H200's pair, from its saved outputs (this machine has {gpus_here} GPU"
                f"{'s' * (gpus_here != 1)}): nccl-tests' all-reduce measured {ref['busbw']:.1f} GB/s there at 4 GiB, "
                f"{share:.0%} of the limit"
            )
        elif self.link.startswith("NV"):
            seen = (
                f"on the reference 2× H200 (NV18) nccl-tests' all-reduce reached {share:.0%} of the limit "
                f"({ref['busbw']:.1f} of {ref['physical']:.0f} GB/s at 4 GiB), which would be about "
                f"{share * self.physical_gbps:.0f} GB/s for this pair; other machines differ"
            )
        else:
            seen = "the course has no measured share for a direct PCIe path: measure it (nccl-tests or the sweep)"
        return f"{self.link}: physical limit {self.physical_gbps:.1f} GB/s per direction ({self.basis}); {seen}"


def expect(
    code: str,
    gpu_name: str | None = None,
    nvlink_generation: int | None = None,
    pcie_gen: int | None = None,
    pcie_width: int = 16,
) -> Expectation:
    """The expectation for a ``topo -m`` code (``"NV18"``, ``"PHB"``) between two GPUs named ``gpu_name``."""
    known = find_card(gpu_name) if gpu_name else None
    m = re.match(r"^NV(\d+)$", code)
    if m:
        links = int(m.group(1))
        if known is not None and known.has_nvlink:
            per_link = known.nvlink_gbps / known.nvlink_links
            basis = f"{links} × {per_link:g} GB/s per link for {known.name}"
        else:
            gen = nvlink_generation or 4
            per_link = NVLINK_PER_LINK_GBPS[gen]
            basis = f"{links} × {per_link:g} GB/s per link, NVLink {gen}"
        physical = links * per_link
        lo, hi = NCCL_EFFICIENCY["nvlink"]
        return Expectation(code, physical, (lo * physical, hi * physical), basis)
    gen = pcie_gen or (known.pcie_gen if known else 4)
    physical = pcie_gbps(gen, pcie_width)
    lo, hi = NCCL_EFFICIENCY["pcie"]
    basis = f"PCIe Gen{gen} x{pcie_width}, path {code}"
    if code in ("SYS", "SOC"):
        basis += "; across CPU sockets NCCL avoids P2P and stages through host memory, often slower"
    return Expectation(f"PCIe Gen{gen} x{pcie_width} ({code})", physical, (lo * physical, hi * physical), basis)


def expect_pair(topo: Any, inv: Any, a: int = 0, b: int = 1) -> Expectation:
    """The expectation between GPUs ``a`` and ``b`` of a parsed topology and an inventory (notebook 01)."""
    code = topo.link(a, b).code
    name = inv.gpus[a].name if len(inv.gpus) > a else None
    gen = None
    if len(inv.gpus) > a:
        versions = [link.version for link in inv.gpus[a].active_links if link.version]
        if versions:
            gen = int(float(versions[0]))
        pcie = inv.gpus[a].pcie_gen_max
    else:
        pcie = None
    return expect(code, gpu_name=name, nvlink_generation=gen, pcie_gen=pcie)
