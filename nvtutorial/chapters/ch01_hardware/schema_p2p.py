"""What one rank of ``p2p_copy`` returns (``workload_p2p.py``), torch-free, read by both sides: :class:`Rank`, a table
of :class:`Row` (one per copy direction, mode and size) and what the run could say about the two GPUs. The kernel
side reads it back with ``result.metrics_as(Rank)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from nvtutorial.params import require
from nvtutorial.units import size_sweep

NAME = "p2p_copy"
"""The workload's name (``nvtutorial.run("p2p_copy", ...)``, ``nvtutorial list``), declared here
once: ``workload_p2p.py`` imports it."""


@dataclasses.dataclass(frozen=True)
class Params:
    min_bytes: int = 1 << 20
    max_bytes: int = 1 << 30
    factor: int = 4
    sizes: tuple[int, ...] = ()
    src: int = 0
    dst: int = 1
    directions: Literal["one", "both", "all"] = "all"  # each way alone, both at once, or all three
    warmup: int = 2
    iters: int = 10
    repeats: int = 5
    target_s: float = 0.1

    def __post_init__(self) -> None:
        require(self.min_bytes >= 1 and self.max_bytes >= self.min_bytes, "need 1 <= min_bytes <= max_bytes")
        require(self.factor >= 2, f"factor={self.factor} must be at least 2")
        require(
            self.src >= 0 and self.dst >= 0 and self.src != self.dst, f"src={self.src} and dst={self.dst} must differ"
        )
        require(self.warmup >= 1 and self.iters >= 1 and self.repeats >= 1, "warmup, iters and repeats must be >= 1")
        require(self.target_s > 0, f"target_s={self.target_s} must be positive")

    def size_list(self) -> list[int]:
        return sorted(set(self.sizes)) if self.sizes else size_sweep(self.min_bytes, self.max_bytes, self.factor)


@dataclasses.dataclass(frozen=True)
class Row:
    """One copy direction at one size, alone or with the other direction at once.

    Today's runs: each repeat is timed on the host clock around its ``iters`` rounds, both GPUs synchronised at both
    ends. Rows written before commit abd0e78 (2026-12-01), the committed run ``p2p_copy-20261130-014850-e85a55``
    among them (its :attr:`Rank.timer` is None), were timed with CUDA events on the source GPU's current stream
    around the repeat's copies, one direction at a time, the destination GPU not synchronised."""

    path: str
    """``cuda:0 → cuda:1``, or the host ``memcpy`` of a CPU run (labelled a simulation)."""
    mode: Literal["one way", "both at once"]
    size: int
    """Bytes copied per copy (S)."""
    time_us: float
    """The median repeat's time per round of copies (one copy per direction in the round), µs."""
    gbps: float
    """S ÷ time, GB/s (10⁹ bytes per second), this direction."""
    gbps_min: float
    gbps_max: float
    gbps_repeats: tuple[float, ...]
    """Every repeat's GB/s (empty in runs saved before they were kept)."""
    iters: int
    """Rounds per timed repeat."""
    busy_share: float | None = None
    """``both at once`` only: the share of each repeat between this direction's first and last copy on its stream
    (CUDA events recorded on that stream before the first copy and after the last, over the host-timed repeat; gaps
    between the copies count as busy), the median over the repeats."""

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
    """How the copies were timed (GPU runs): today the host clock, both GPUs synchronised. None in the committed run
    of 2026-11-30, which timed them with CUDA events on the source GPU's stream (see :class:`Row`)."""
    devices: tuple[str, ...] = ()
    """The names of the source and destination GPUs (GPU runs)."""
    note: str = ""
    """What a run without two GPUs did instead, or why it copied nothing."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Older layouts: rows saved before the two directions were also timed at once (each way alone, no ``mode``)
        and before every repeat's GB/s was kept (the committed run, 2026-11-30: timed with CUDA events on the source
        GPU's stream, one direction at a time, not on today's host clock; ``timer`` None); a skipped run that said
        why in a row of Nones, and a waiting rank that gave only its ``role``.

        Dropped: the skipped run's row of Nones (its text, ``skipped: needs 2 GPUs, N visible``, repeats
        :attr:`Rank.note`); ``role``, whose text becomes :attr:`Rank.note`."""
        if "role" in data and "mode" not in data:
            data = {"mode": "waits", "note": data.pop("role"), **data}
        if isinstance(data.get("rows"), list):
            data["rows"] = [
                {"mode": "one way", "gbps_repeats": [], "busy_share": None} | row
                for row in data["rows"]
                if row.get("size") is not None
            ]
        return data
