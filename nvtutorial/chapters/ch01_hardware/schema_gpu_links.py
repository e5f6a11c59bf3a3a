"""What one rank of ``gpu_links`` returns (``workload_gpu_links.py``), torch-free, read by both sides: the links one GPU
has, each measured with copies: its memory (a copy from one buffer on the GPU to another) and its PCIe link to the
host (host to device and device to host, from pinned and from pageable host memory). The kernel side reads it back
with ``result.metrics_as(Rank)``."""

from __future__ import annotations

import dataclasses
from typing import Literal

from nvtutorial.params import require

NAME = "gpu_links"
"""The workload's name (``nvtutorial.run("gpu_links", ...)``, ``nvtutorial list``), declared here
once: ``workload_gpu_links.py`` imports it."""

Link = Literal["memory", "host to device", "device to host"]
Host = Literal["device", "pinned", "pageable"]


@dataclasses.dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (16 << 20, 256 << 20, 1 << 30)
    warmup: int = 2
    iters: int = 20
    repeats: int = 5
    target_s: float = 0.05
    """Time a block aims at: fewer copies per block (at least one) where one copy takes longer."""

    def __post_init__(self) -> None:
        require(bool(self.sizes) and min(self.sizes) >= 1, f"sizes={self.sizes}: give at least one size >= 1 byte")
        require(self.warmup >= 1 and self.iters >= 1 and self.repeats >= 1, "warmup, iters and repeats must be >= 1")
        require(self.target_s > 0, f"target_s={self.target_s} must be positive")


@dataclasses.dataclass(frozen=True)
class Row:
    """One link, one kind of host memory, one size: the median of the timed blocks."""

    link: Link
    host: Host
    """Where the host side of a PCIe copy lives (``pinned``: page-locked; ``pageable``: ordinary memory);
    ``device`` for the memory copy, which has no host side."""
    size: int
    """Bytes copied per copy (S)."""
    bytes_moved: int
    """Bytes that cross the link per copy: S over PCIe; 2 S for a device copy, which reads S and writes S (a memory's
    datasheet bandwidth counts reads and writes together)."""
    time_us: float
    """The median block's time per copy, µs (CUDA events on the stream around the block)."""
    gbps: float
    """``bytes_moved`` ÷ time, GB/s (10⁹ bytes per second)."""
    gbps_repeats: tuple[float, ...]
    """Every timed block's GB/s."""
    iters: int
    """Copies per timed block."""

    def samples(self) -> tuple[float, ...]:
        """Every block's GB/s, what :func:`~nvtutorial.report.verdict.compare` reads."""
        return self.gbps_repeats


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank returns (``RunResult.metrics_as(Rank)``)."""

    mode: Literal["gpu", "skipped"]
    """``gpu``: copies on this rank's GPU; ``skipped``: the process had no GPU (``note`` says so, no rows)."""
    device: str = ""
    """The GPU's name (GPU runs)."""
    rows: tuple[Row, ...] = ()
    timer: str = ""
    """How the blocks were timed."""
    note: str = ""
    l2_bytes: int | None = None
    """The GPU's L2 cache (``torch.cuda.get_device_properties(dev).L2_cache_size``): a device copy whose bytes read
    and written fit in it measures the cache, not the memory. None: not recorded (runs before 2026-12-07)."""
