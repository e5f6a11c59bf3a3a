"""What one rank of ``allreduce_bench`` returns (``workload_allreduce.py``), torch-free, read by both sides:
:class:`Rank`, a table of :class:`Row` (one per size) and, on rank 0 with ``wire_bytes > 0``, the bytes NVML counted
on the NVLinks (:class:`Wire`). The kernel side reads it back with ``result.metrics_as(Rank)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from nvtutorial.params import require
from nvtutorial.units import size_sweep

NAME = "allreduce_bench"
"""The workload's name (``nvtutorial.run("allreduce_bench", ...)``, ``nvtutorial list``), declared here
once: ``workload_allreduce.py`` imports it."""

Dtype = Literal["float32", "bfloat16", "float16", "float64", "int32"]
"""The element types the bandwidth workloads all-reduce or send (``torch.<name>``)."""


@dataclasses.dataclass(frozen=True)
class Params:
    min_bytes: int = 1024
    max_bytes: int = 1 << 30
    factor: int = 4
    sizes: tuple[int, ...] = ()  # explicit sizes in bytes; when given, min/max/factor are ignored
    dtype: Dtype = "float32"
    warmup: int = 5  # untimed all-reduces: at the largest size first, then before each size (nccl-tests' -w)
    iters: int = 20  # all-reduces per timed repeat, at most (nccl-tests' -n, 20 by default)
    repeats: int = 5
    target_s: float = 0.1  # per repeat; fewer iterations for slow sizes
    wire_bytes: int = 0  # > 0: measure NVLink bytes on the wire around all-reduces of this size (GPU)
    wire_iters: int = 5

    def __post_init__(self) -> None:
        require(self.min_bytes >= 1, f"min_bytes={self.min_bytes} must be at least 1")
        require(self.max_bytes >= self.min_bytes, f"max_bytes={self.max_bytes} must be >= min_bytes={self.min_bytes}")
        require(self.factor >= 2, f"factor={self.factor} must be at least 2")
        require(all(s >= 1 for s in self.sizes), f"sizes={self.sizes}: every size must be at least 1 byte")
        require(self.warmup >= 1, f"warmup={self.warmup} must be at least 1 (the first call sets up NCCL's channels)")
        require(self.iters >= 1 and self.repeats >= 1, f"iters={self.iters}, repeats={self.repeats} must be >= 1")
        require(self.target_s > 0, f"target_s={self.target_s} must be positive")
        require(self.wire_bytes >= 0 and self.wire_iters >= 1, "wire_bytes must be >= 0 and wire_iters >= 1")

    def size_list(self) -> list[int]:
        return sorted(set(self.sizes)) if self.sizes else size_sweep(self.min_bytes, self.max_bytes, self.factor)


@dataclasses.dataclass(frozen=True)
class Row:
    """One size of the sweep. Times are the slowest rank's (every rank reports the same row)."""

    size: int
    """Bytes of the all-reduced buffer (S)."""
    count: int
    """Elements of ``dtype`` in it."""
    dtype: Dtype
    iters: int
    """All-reduces per timed repeat (fewer than ``Params.iters`` for slow sizes)."""
    correct: bool
    """This rank's first and last elements held n(n+1)/2 after the check's all-reduce (a wrong sum raises: a saved
    row is always True)."""
    time_us: float
    """The median repeat's time per all-reduce, µs."""
    algbw: float
    """S ÷ time, GB/s (10⁹ bytes per second)."""
    busbw: float
    """algbw × 2(n−1)/n, GB/s: nccl-tests' bus bandwidth."""
    busbw_min: float
    busbw_max: float
    repeats: int
    """Timed repeats."""
    busbw_repeats: tuple[float, ...]
    """Every repeat's busbw, GB/s (empty in runs saved before they were kept)."""

    def samples(self) -> tuple[float, ...]:
        """Every repeat's busbw, what :func:`~nvtutorial.report.verdict.compare` reads; a row saved before those were
        kept gives ``(min, median, max)``, which has the same median and the same spread."""
        return self.busbw_repeats or (self.busbw_min, self.busbw, self.busbw_max)


@dataclasses.dataclass(frozen=True)
class Wire:
    """Bytes rank 0's GPU put on its NVLinks per all-reduce of ``size`` (NVML's data counters read before and after
    ``iters`` all-reduces), against what a ring all-reduce must send. The counts are None where ``available`` is not."""

    size: int
    """Bytes of the all-reduced buffer."""
    iters: int
    """All-reduces between the two reads of the counters."""
    expected_bytes_per_op: float
    """2(n−1)/n · S: what each GPU of a ring sends per all-reduce."""
    available: bool
    """Whether the counters were read (not on a CPU, nor without NVLink, nor where NVML has no counters)."""
    reason: str | None = None
    """Why they were not read (None: they were)."""
    links_read: int | None = None
    """NVLinks whose counters were read."""
    links_carrying: int | None = None
    """Of those, the links that sent anything."""
    tx_bytes_per_op: float | None = None
    """Bytes sent over all links per all-reduce."""
    rx_bytes_per_op: float | None = None
    """Bytes received over all links per all-reduce."""
    tx_ratio: float | None = None
    """``tx_bytes_per_op`` ÷ ``expected_bytes_per_op`` (None where nothing is expected: one rank)."""
    rx_ratio: float | None = None
    tx_bytes_per_link_per_op: Mapping[str, float] | None = None
    """Bytes sent per all-reduce on each link that carried any, by link number (as a string: JSON's keys)."""


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank returns (``RunResult.metrics_as(Rank)``): every rank the same rows; rank 0 also the wire."""

    rows: tuple[Row, ...]
    collective: Literal["all_reduce"]
    world_size: int
    dtype: Dtype
    timer: Literal["cuda events", "perf_counter"]
    """How each repeat was timed: CUDA events on a GPU, the host clock on the CPU."""
    largest_size: int
    """Bytes of the sweep's largest size."""
    busbw_at_largest: float
    """busbw there, GB/s."""
    wire: Wire | None = None
    """Rank 0 with ``wire_bytes > 0`` only."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Older layouts (the committed runs): rows saved before every repeat's busbw was kept, and a wire count that
        wrote only the fields of its case (no ``reason`` where it was counted, no counts where it was not)."""
        if isinstance(data.get("rows"), list):
            data["rows"] = [{"busbw_repeats": []} | row for row in data["rows"]]
        if isinstance(data.get("wire"), dict):
            data["wire"] = {f.name: None for f in dataclasses.fields(Wire) if f.default is None} | data["wire"]
        return data
