"""What one rank of ``allreduce_bench`` returns (``workload_allreduce.py``), torch-free, read by both sides:
:class:`Rank`, a table of :class:`Row` (one per size) and, on rank 0 with ``wire_bytes > 0``, the bytes NVML counted
on the NVLinks (:class:`Wire`). The kernel side reads it back with ``result.metrics_as(Rank)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

NAME = "allreduce_bench"
"""The workload's name (``nvtutorial.run("allreduce_bench", ...)``, ``nvtutorial list``), declared here
once: ``workload_allreduce.py`` imports it."""

Dtype = Literal["float32", "bfloat16", "float16", "float64", "int32"]
"""The element types the bandwidth workloads all-reduce or send (``torch.<name>``)."""


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
