"""One GPU's own links, predicted and measured (notebook 01, the part "one GPU's links"): its memory, and its PCIe link
to the host.

The limits are what NVML says about the GPU (:class:`Limits`): PCIe generation × lanes × the rate per lane after the
line code (:func:`nvtutorial.machine.links.pcie_gbps`), and the memory's bus width × clock × 2
(:class:`nvtutorial.machine.hardware.MemoryPeak`). The ``gpu_links`` run (``workload_gpu_links.py``) measures copies;
:func:`verdict` says what share of its limit each link reached and what that means, :func:`grade` grades a learner's
prediction of the pinned host-to-device rate. The run is started by
:func:`nvtutorial.chapters.ch01_hardware.lab.gpu_links`. Two readings guard against what a copy's median alone would
say: a device copy whose bytes fit in the GPU's L2 cache measures the cache (:func:`cache`), and a pinned PCIe copy is
read at every size from :data:`PCIE_STEADY` on, by its median and its best block (:func:`pcie_reading`): a link that
carried its rate in some block is not a narrow link.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
BEYOND_L2 = 4
"""A device copy reads the memory's bandwidth once its bytes read and written (2 S) exceed this many times the L2 cache;
where 2 S fits in the L2 it reads the cache (an H100's 16 MiB copy: 3.70 TB/s, above HBM3's 3.35), in between
partly."""
PCIE_STEADY = 256 << 20
"""From this size on a pinned copy's time is the link's: its verdict reads every such size (the largest size where the
run has none)."""
IN_L2 = {"in L2": "fit in it", "partly in L2": f"stay within {BEYOND_L2}× of it"}
"""Why a device copy measured the L2 cache, by :func:`cache`'s answer."""
L2_BYTES = {"NVIDIA H100 80GB HBM3": 50 << 20}
"""The L2 cache PyTorch reports (``L2_cache_size``) for the GPU of a saved run made before the workload recorded it:
the H100 of ``reference/h100x1/runs`` (50 MiB, as PyTorch 2.11 reported it on those machines)."""


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
"""The limits of the reference machine's H200, shown where this machine has no GPU and the course no saved run."""

SAVED_LIMITS = {
    "NVIDIA H100 80GB HBM3": Limits(
        "NVIDIA H100 80GB HBM3",
        "the H100 of the saved run in reference/h100x1: its PCIe link and memory as NVML read them there",
        "PCIe Gen5 x16",
        pcie_gbps(5, 16),
        "5120-bit bus × 2619 MHz × 2 (NVML there)",
        5120 / 8 * 2619e6 * 2 / 1e9,
    ),
    "NVIDIA H200": REFERENCE_LIMITS,
}
"""The limits of each GPU the course has a saved one-GPU run of (``reference/h*x1/runs``), shown with that run."""


def saved_limits(gpu: str | None) -> Limits:
    """The limits that go with a saved run of ``gpu`` (None: no saved run, the reference H200's)."""
    if gpu is None:
        return REFERENCE_LIMITS
    return SAVED_LIMITS.get(gpu) or Limits(gpu, "a saved run's GPU: the course has no record of its limits")


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
    """The part's run (this machine's, or a saved one), or no rows and why (``note``)."""

    rows: Sequence[Row]
    label: str
    note: str = ""
    result: RunResult[Rank] | None = None
    here: bool = False
    """Whether the rows were measured on this machine (else: a saved run)."""
    l2_bytes: int | None = None
    """The GPU's L2 cache, from the run (or :data:`L2_BYTES`); None: unknown."""

    def largest(self) -> int:
        return max(r.size for r in self.rows)

    def sizes(self) -> list[int]:
        return sorted({r.size for r in self.rows})

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
                        "share of the limit": self._share(r, limit),
                        "copies per block": r.iters,
                    }
                    for r in self.rows
                ]
            )
        frame.attrs["where"] = self.label
        return frame

    def _share(self, r: Row, limit: float | None) -> str | None:
        """The row's share of its limit; for a device copy that ran (partly) in L2, that instead: not the memory's."""
        where = cache(r.size, self.l2_bytes) if r.link == "memory" else None
        if where is not None:
            return f"{where} ({format_size(self.l2_bytes or 0)}): not the memory's"
        return f"{r.gbps / limit:.0%}" if limit else None


def cache(size: int, l2_bytes: int | None) -> str | None:
    """Where a device copy of ``size`` bytes runs from: ``in L2`` where its 2 S bytes fit in the L2 cache, ``partly in
    L2`` up to :data:`BEYOND_L2` × the L2, None beyond (the memory) or where the L2's size is unknown."""
    if not l2_bytes or 2 * size > BEYOND_L2 * l2_bytes:
        return None
    return "in L2" if 2 * size <= l2_bytes else "partly in L2"


def l2_of(rank: Rank) -> int | None:
    """The L2 cache of the run's GPU: recorded by the run, or :data:`L2_BYTES` for a saved run made before."""
    return rank.l2_bytes or L2_BYTES.get(rank.device)


def reading(share: float) -> str:
    """What a copy's share of its limit says (PCIe or memory, the same thresholds): ``as expected``, ``below`` or
    ``above the limit``."""
    if share > ABOVE_LIMIT:
        return "above the limit"
    return "below" if share < EXPECTED_SHARE else "as expected"


WHY = {
    ("pcie", "above the limit"): "NVML's generation or width is not the link's (a virtual machine's bridge?)",
    ("pcie", "below"): (
        "no block reached what a pinned copy usually does, as a narrower or slower link would give: check the link "
        "under load (nvidia-smi -q -d PCI: current generation and width), a slot with fewer lanes, a PCIe switch "
        "shared with another device, or a virtual machine's IOMMU"
    ),
    ("pcie", "varies"): (
        "the link carries its rate; something else (another process, the host's memory, the IOMMU) slowed some copies"
    ),
    ("memory", "above the limit"): "NVML's memory clock or bus width is not the memory's peak",
    ("memory", "below"): (
        "slower than a device copy usually is: another process on the GPU, or clocks held low "
        "(nvidia-smi -q -d CLOCK,PERFORMANCE)"
    ),
}
"""What to check when a link reads ``below``, ``varies`` or ``above the limit``."""


@dataclasses.dataclass(frozen=True)
class Varied:
    """The size whose blocks varied most (the slowest median): its blocks' range, GB/s."""

    size: int
    min: float
    max: float


@dataclasses.dataclass(frozen=True)
class Carried:
    """The fastest size's median where it reached :data:`EXPECTED_SHARE` of the limit: the link carried its rate."""

    size: int
    gbps: float


@dataclasses.dataclass(frozen=True)
class LinkReading:
    """A copy's rate, its share of the limit (None without one) and what that says (:func:`reading`); for a pinned
    PCIe copy read at every steady size (:func:`pcie_reading`) also its best block's share and, where it ``varies``,
    which size varied and which carried the rate; for the memory, the size read."""

    gbps: float
    share: float | None
    reading: str | None
    best_share: float | None = None
    varied: Varied | None = None
    carried: Carried | None = None
    size: int | None = None

    def numbers(self) -> dict[str, object]:
        """The verdict's numbers: the fields this reading has (a memory reading its size; a PCIe reading with a limit
        its best block, and the varied and carried sizes where it varies)."""
        out: dict[str, object] = {"gbps": self.gbps, "share": self.share}
        if self.best_share is not None:
            out["best_share"] = self.best_share
        if self.reading == "varies" and self.best_share is not None:
            out["varied"] = dataclasses.asdict(self.varied) if self.varied else None
            out["carried"] = dataclasses.asdict(self.carried) if self.carried else None
        out["reading"] = self.reading
        if self.size is not None:
            out["size"] = self.size
        return out


def _share(gbps: float, limit: float | None, size: int | None = None) -> LinkReading:
    share = gbps / limit if limit else None
    return LinkReading(gbps, share, reading(share) if share is not None else None, size=size)


def pcie_reading(run: GpuLinks, direction: str, limit: float | None) -> LinkReading:
    """A pinned copy's rate at the largest size (its median block) and what the run says of the link, read at every
    size from :data:`PCIE_STEADY` on (the largest alone where there is none): ``above the limit`` (a median above it),
    ``below`` (no block at any of them reached :data:`EXPECTED_SHARE`: the link itself), ``varies`` (a median below
    it, but a block that reached it: the link carried its rate), ``as expected``; None without a limit."""
    steady = [s for s in run.sizes() if s >= PCIE_STEADY] or [run.largest()]
    rows = [r for s in steady if (r := run.row(direction, "pinned", s))]
    if limit is None:
        return _share(rows[-1].gbps, None)
    medians = [r.gbps / limit for r in rows]
    best = [max(r.samples()) / limit for r in rows]
    varied = carried = None
    if max(medians) > ABOVE_LIMIT:
        word = "above the limit"
    elif max(best) < EXPECTED_SHARE:
        word = "below"
    elif min(medians) < EXPECTED_SHARE:
        word = "varies"
        worst, top = min(rows, key=lambda r: r.gbps), max(rows, key=lambda r: r.gbps)
        varied = Varied(worst.size, min(worst.samples()), max(worst.samples()))
        carried = Carried(top.size, top.gbps) if top.gbps >= EXPECTED_SHARE * limit else None
    else:
        word = "as expected"
    return LinkReading(rows[-1].gbps, medians[-1], word, max(best), varied, carried)


def _varies(direction: str, got: LinkReading, limit: float) -> str:
    v, top = got.varied, got.carried
    assert v is not None  # a reading that varies names the size that varied
    carried = (
        f"{top.gbps:.1f} GB/s, {top.gbps / limit:.0%}, at {format_size(top.size)}"
        if top
        else f"its best block {v.max:.1f} GB/s, {v.max / limit:.0%}"
    )
    return (
        f"{direction} varies: {v.min:.1f}–{v.max:.1f} GB/s between blocks at {format_size(v.size)} "
        f"({carried}): {WHY[('pcie', 'varies')]}"
    )


def _pcie_sentence(run: GpuLinks, lim: Limits, numbers: dict[str, object]) -> str:
    pinned = [d for d in ("host to device", "device to host") if run.row(d, "pinned")]
    parts = []
    said: dict[str, LinkReading] = {}
    for d in pinned:
        said[d] = got = pcie_reading(run, d, lim.pcie_gbps)
        numbers[f"{d}, pinned"] = got.numbers()
        parts.append(f"{d} {got.gbps:.1f} GB/s" + (f" ({got.share:.0%})" if got.share else ""))
    text = "Pinned: " + ", ".join(parts)
    if lim.pcie_gbps:
        limit = lim.pcie_gbps
        steady = f" at every size from {format_size(PCIE_STEADY)}" if run.largest() >= PCIE_STEADY else ""
        odd = sorted({g.reading for g in said.values() if g.reading} - {"as expected", "varies"})
        varied = [_varies(d, g, limit) for d, g in said.items() if g.reading == "varies"]
        text += f" of the {limit:.1f} GB/s of {lim.pcie}" + (
            f": at least {EXPECTED_SHARE:.0%}{steady}, as a pinned copy usually reaches (each packet's header and the "
            "flow control take the rest)"
            if not odd and not varied
            else "; " + "; ".join([*(f"{w}: {WHY[('pcie', w)]}" for w in odd), *varied])
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


def _memory_sentence(run: GpuLinks, lim: Limits, numbers: dict[str, object]) -> str:
    copies = [r for s in run.sizes() if (r := run.row("memory", "device", s))]
    if not copies:
        return ""
    cached = [r for r in copies if cache(r.size, run.l2_bytes)]
    l2 = format_size(run.l2_bytes or 0)
    kinds = dict.fromkeys(cache(r.size, run.l2_bytes) for r in cached)
    why = " or ".join(IN_L2[k] + (f" ({k})" if len(kinds) > 1 else "") for k in kinds if k)
    text = (
        " Inside the GPU, the copies of "
        + ", ".join(f"{format_size(r.size)} ({cache(r.size, run.l2_bytes)}, {r.gbps:,.0f} GB/s)" for r in cached)
        + f" measured its {l2} L2 cache, not the memory: their bytes read and written {why}."
        if cached
        else ""
    )
    beyond = [r for r in copies if r not in cached]
    if not beyond:
        numbers["memory"] = None
        return text + f" No size here is beyond it: give sizes of at least {format_size(PCIE_STEADY)}."
    r = beyond[-1]
    got = _share(r.gbps, lim.memory_gbps, r.size)
    numbers["memory"] = got.numbers()
    text += f" A copy inside the GPU of {format_size(r.size)} moved {r.gbps:,.0f} GB/s (bytes read + written)"
    if got.share is None or got.reading is None:
        return text + "; NVML gave no memory peak to compare it with."
    word = got.reading
    text += f", {got.share:.0%} of the {lim.memory_gbps:,.0f} GB/s of {lim.memory}"
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
    """Each PCIe link at every size from :data:`PCIE_STEADY` (median and best block), the memory at the largest size
    beyond its L2 cache, pageable against pinned (:func:`compare`), memory against PCIe."""
    if not run.rows:
        pcie, memory, ratio = lim.parts()
        text = f"{run.note}. The limits of the {lim.gpu}: {pcie}, to the host; its memory: {memory}" + (
            f": {ratio}." if ratio else "."
        )
        return Verdict("one GPU's links", "info", text, {}, lim.source)
    numbers: dict[str, object] = {"size": run.largest(), "l2_bytes": run.l2_bytes}
    text = (
        f"At {format_size(run.largest())}: " + _pcie_sentence(run, lim, numbers) + _memory_sentence(run, lim, numbers)
    )
    if not run.here:
        text = f"{run.note[:1].upper()}{run.note[1:]}; a saved run of {lim.gpu}. " + text
    return Verdict("one GPU's links", "info", text, numbers, run.label)


GRADE_WHY = {
    "as expected": "a pinned copy is a DMA by the GPU's copy engines, and PCIe spends the rest on each packet's header "
    "and on flow control.",
    "varies": "its blocks varied, and the verdict below says why that is not the link.",
    "below": "below the {share:.0%} a pinned copy usually reaches: the verdict below says what to check.",
    "above the limit": "above it: {above}.",
}
"""Why the pinned host-to-device rate is what it is, by :func:`pcie_reading`'s reading (the grade's explanation)."""


def grade(prediction: float | None, run: GpuLinks, lim: Limits) -> Verdict:
    """Grade a prediction of the pinned host-to-device rate at the largest size (GB/s) against the run (or a saved
    run); with neither, say what bounds it. The explanation follows :func:`pcie_reading`: headers and flow control
    explain the rest only where the link reads ``as expected``."""
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
    why = "NVML gave no PCIe link to compare it with."
    if lim.pcie_gbps:
        word = pcie_reading(run, "host to device", lim.pcie_gbps).reading
        assert word is not None  # read against a limit
        why = (
            f"That is {measured.gbps / lim.pcie_gbps:.0%} of the {lim.pcie_gbps:.1f} GB/s of {lim.pcie}: "
            + GRADE_WHY[word].format(share=EXPECTED_SHARE, above=WHY[("pcie", "above the limit")])
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
        measured_name="Measured" if run.here else f"A saved run of {lim.gpu} measured",
    )
