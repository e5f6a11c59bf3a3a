"""What one rank of ``sendrecv_bench`` returns (``workload_sendrecv.py``), torch-free, read by both sides:
:class:`Rank`, a table of :class:`Row` (one per direction and size). The kernel side reads it back with
``result.metrics_as(Rank)``."""

from __future__ import annotations

import dataclasses
from typing import Literal

from nvtutorial.chapters.ch01_hardware.schema_allreduce import Dtype
from nvtutorial.params import require
from nvtutorial.units import size_sweep

NAME = "sendrecv_bench"
"""The workload's name (``nvtutorial.run("sendrecv_bench", ...)``, ``nvtutorial list``), declared here
once: ``workload_sendrecv.py`` imports it."""


@dataclasses.dataclass(frozen=True)
class Params:
    min_bytes: int = 1024
    max_bytes: int = 1 << 30
    factor: int = 4
    sizes: tuple[int, ...] = ()
    dtype: Dtype = "float32"
    directions: Literal["both", "one", "two"] = "both"  # one way, two ways at once, or both measurements
    warmup: int = 3
    iters: int = 20
    repeats: int = 5
    target_s: float = 0.1

    def __post_init__(self) -> None:
        require(self.min_bytes >= 1, f"min_bytes={self.min_bytes} must be at least 1")
        require(self.max_bytes >= self.min_bytes, f"max_bytes={self.max_bytes} must be >= min_bytes={self.min_bytes}")
        require(self.factor >= 2, f"factor={self.factor} must be at least 2")
        require(self.warmup >= 1 and self.iters >= 1 and self.repeats >= 1, "warmup, iters and repeats must be >= 1")
        require(self.target_s > 0, f"target_s={self.target_s} must be positive")

    def size_list(self) -> list[int]:
        return sorted(set(self.sizes)) if self.sizes else size_sweep(self.min_bytes, self.max_bytes, self.factor)


@dataclasses.dataclass(frozen=True)
class Row:
    """One size sent one way or both ways at once. Times are the slowest rank's (every rank reports the same row);
    rates are per direction."""

    size: int
    """Bytes sent in each direction (S)."""
    direction: Literal["one way", "both ways"]
    """``one way``: the even rank of each pair sends, the odd one receives; ``both ways``: both at once."""
    iters: int
    """Exchanges per timed repeat (fewer than ``Params.iters`` for slow sizes)."""
    dtype: Dtype
    time_us: float
    """The median repeat's time per exchange, µs."""
    algbw: float
    """S ÷ time, GB/s (10⁹ bytes per second), per direction."""
    busbw: float
    """= algbw: nccl-tests' factor for send/recv is 1."""
    busbw_min: float
    busbw_max: float
    repeats: int
    """Timed repeats."""
    busbw_repeats: tuple[float, ...]
    """Every repeat's busbw, GB/s (empty in runs saved before they were kept)."""
    total_gbps: float
    """Both directions together: algbw, or 2 × algbw both ways at once."""

    def samples(self) -> tuple[float, ...]:
        """Every repeat's busbw, what :func:`~nvtutorial.report.verdict.compare` reads; a row saved before those were
        kept gives ``(min, median, max)``, which has the same median and the same spread."""
        return self.busbw_repeats or (self.busbw_min, self.busbw, self.busbw_max)


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank returns (``RunResult.metrics_as(Rank)``): every rank the same rows."""

    rows: tuple[Row, ...]
    """Every size one way, then every size both ways (as ``Params.directions`` asks)."""
    collective: Literal["sendrecv"]
    world_size: int
    dtype: Dtype
    timer: Literal["cuda events", "perf_counter"]
    """How each repeat was timed: CUDA events on a GPU, the host clock on the CPU."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Older layouts (the committed run): rows saved before every repeat's busbw was kept."""
        if isinstance(data.get("rows"), list):
            data["rows"] = [{"busbw_repeats": []} | row for row in data["rows"]]
        return data
