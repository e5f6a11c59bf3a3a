"""What one rank of ``p2p_copy`` returns (``workload_p2p.py``), torch-free, read by both sides: :class:`Rank`, a table
of :class:`Row` (one per copy direction, mode and size) and what the run could say about the two GPUs. The kernel
side reads it back with ``result.metrics_as(Rank)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

NAME = "p2p_copy"
"""The workload whose results this schema types (``workload_p2p.py``)."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One copy direction at one size, alone or with the other direction at once. Host clock, both GPUs
    synchronised at both ends of each repeat."""

    path: str
    """``cuda:0 → cuda:1``, or the host ``memcpy`` of a CPU run (labelled a simulation)."""
    mode: Literal["one way", "both at once"]
    size: int
    """Bytes copied per copy (S)."""
    time_us: float
    """The median repeat's time per round of copies, µs."""
    gbps: float
    """S ÷ time, GB/s (10⁹ bytes per second), this direction."""
    gbps_min: float
    gbps_max: float
    gbps_repeats: tuple[float, ...]
    """Every repeat's GB/s (empty in runs saved before they were kept)."""
    iters: int
    """Rounds per timed repeat."""
    busy_share: float | None = None
    """``both at once`` only: the median share of each repeat this direction's stream was busy (CUDA events)."""

    def samples(self) -> tuple[float, ...]:
        """Every repeat's GB/s, what :func:`~nvtutorial.report.verdict.compare` reads; a row saved before those were
        kept gives ``(min, median, max)``, which has the same median and the same spread."""
        return self.gbps_repeats or (self.gbps_min, self.gbps, self.gbps_max)


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank returns (``RunResult.metrics_as(Rank)``): rank 0 copies; any other rank only waits."""

    mode: Literal["gpu", "simulation", "skipped", "waits"]
    """``gpu``: copies between two GPUs; ``simulation``: a CPU run, host copies in their place; ``skipped``: fewer
    than two GPUs visible (``note`` says so, no rows); ``waits``: a rank other than 0."""
    rows: tuple[Row, ...] = ()
    peer_access: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    """``"0->1"``: whether each GPU can reach the other's memory directly (NVLink or PCIe P2P); GPU runs only."""
    timer: str | None = None
    """How the copies were timed (GPU runs)."""
    devices: tuple[str, ...] = ()
    """The names of the source and destination GPUs (GPU runs)."""
    note: str = ""
    """What a run without two GPUs did instead, or why it copied nothing."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Older layouts: rows saved before the two directions were also timed at once (each way alone, no ``mode``)
        and before every repeat's GB/s was kept (the committed run); a skipped run that said why in a row of
        Nones, and a waiting rank that gave only its ``role``."""
        if "role" in data and "mode" not in data:
            data = {"mode": "waits", "note": data.pop("role"), **data}
        if isinstance(data.get("rows"), list):
            data["rows"] = [
                {"mode": "one way", "gbps_repeats": [], "busy_share": None} | row
                for row in data["rows"]
                if row.get("size") is not None
            ]
        return data
