"""What chapter 07's ``collectives_bench`` workload returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload.py``, on the ranks) builds one :class:`Rank` per rank; the launcher writes it to
``rank{R}.json``; the kernel side (``report.py``, ``plots.py``) reads it back typed with
``result.ranks_as(Rank)``, after :meth:`Rank.upgrade` has filled in what the older layout of the committed
2× H200 run (``reference/h200x2/runs/collectives_bench-*``) did not record. Notebook 07's cells pass the run's raw
JSON (``bench.ranks``, ``bench.ranks[0]["sparse"]``: its cells stay as the 2× H200 copy of the notebook ran them);
the report and the plots type it where it comes in, with :func:`ranks_typed` and ``results.rows_typed``. Its four parts:

- ``ring``: the lessons' ring all-reduce against ``dist.all_reduce``, per message size and way of running it
  (:class:`RingRow`);
- ``source_cases``: the source's sparse all-reduce and the correct one on the same inputs (:class:`SourceCase`);
- ``indexing``: what ``nonzero()`` and ``tensor[indices]`` give for 1-D, 2-D and 4-D tensors (:class:`IndexingRow`);
- ``sparse``: the correct sparse all-reduce against a dense one, over densities (:class:`SparseRow`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from nvtutorial.params import require
from nvtutorial.results import as_typed, with_defaults

NAME = "collectives_bench"
"""The workload's name (``nvtutorial.run("collectives_bench", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""
ONE_SLICE = "ring, 1 slice"
"""The plain ring's ``variant`` (one slice per chunk, launched from Python): what the others are compared with."""


@dataclasses.dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (4096, 65536, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28)
    """Message sizes in bytes (fp32) for the ring against ``all_reduce``."""
    slices: tuple[int, ...] = (1, 4)
    """Slices per chunk to time the ring with (1: no pipelining)."""
    graph: bool = False
    """On GPUs, also time the ring replayed from a CUDA graph (sizes of 1 MiB and more). Off by default:
    capturing NCCL point-to-point in a graph is not yet tried on the reference machine (a one-GPU
    test of a self send/recv capture hung)."""
    warmup: int = 3
    repeats: int = 10
    sparse_numel: int = 1 << 24
    """Elements of the tensor in the density sweep."""
    densities: tuple[float, ...] = (0.001, 0.01, 0.1, 0.3, 0.5, 0.9)
    case_numel: int = 4096
    """Elements of the inputs of the correctness cases."""
    random_cases: int = 4
    """Cases with a random density per rank, after the three fixed ones."""
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            bool(self.sizes) and all(s >= 4 and s % 4 == 0 for s in self.sizes),
            f"sizes={self.sizes}: give byte counts, multiples of 4 (fp32)",
        )
        require(bool(self.slices) and all(s >= 1 for s in self.slices), f"slices={self.slices}: give counts >= 1")
        require(
            self.warmup >= 1 and self.repeats >= 2,
            f"warmup={self.warmup}, repeats={self.repeats}: need warmup >= 1 and repeats >= 2",
        )
        require(self.sparse_numel >= 1 and self.case_numel >= 16, "sparse_numel >= 1 and case_numel >= 16")
        require(all(0 < d <= 1 for d in self.densities), f"densities={self.densities} must be in (0, 1]")
        require(self.random_cases >= 0, f"random_cases={self.random_cases} must be 0 or more")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RingRow:
    """The ring against ``dist.all_reduce`` at one message size, run one way (rank-local values unless said).

    A CUDA-graph row whose graph could not be captured has ``error`` and no bytes or times (``None``, ``()``).
    """

    size_bytes: int
    """The tensor's size (fp32)."""
    equal_to_all_reduce: bool
    """The ring's result equals ``dist.all_reduce``'s, bit for bit, on every rank."""
    ring_bytes_sent: float | None = None
    """Bytes this rank passed to its sends (counted by wrapping ``torch.distributed``)."""
    ring_bytes_returned: int | None = None
    """Bytes ``ring_all_reduce`` itself says it sent (``None``: not recorded, older runs)."""
    ring_bytes_exact: int | None = None
    """Bytes this rank must send: its W-1 chunks per phase as ``tensor_split`` cuts them."""
    formula_bytes: float
    """``2 (W-1)/W × size_bytes``: what each rank sends when W divides the tensor."""
    variant: str
    """How the ring ran: ``ring, 1 slice``, ``ring, 4 slices``, ``ring, 4 slices, CUDA graph``..."""
    slices: int
    """Slices per chunk (1: no pipelining)."""
    ring_ms: float | None = None
    """Median of the repeats, milliseconds; each call timed alone, CUDA events on the current stream on a GPU, the
    host clock on the CPU (the committed run too)."""
    all_reduce_ms: float | None = None
    """``dist.all_reduce``'s median on the same tensor, milliseconds, timed like ``ring_ms``."""
    ring_ms_all: tuple[float, ...] = ()
    """Every repeat, milliseconds (``()``: not kept, older runs)."""
    all_reduce_ms_all: tuple[float, ...] = ()
    ring_busbw_gbs: float | None = None
    """Bus bandwidth, GB/s: ``size × 2 (W-1)/W`` over the median time."""
    all_reduce_busbw_gbs: float | None = None
    busbw_ratio: float | None = None
    """The ring's share of ``all_reduce``'s bus bandwidth (``all_reduce_ms / ring_ms``; 1: as fast)."""
    graph: bool = False
    """Replayed from a CUDA graph (no Python between the messages)."""
    error: str | None = None
    """Why the graph could not be captured (``None``: the row was measured)."""

    @staticmethod
    def upgrade(row: Mapping[str, Any]) -> dict[str, Any]:
        """A row of the first runs' layout as today's (a copy): no ``variant``, ``slices``, ``busbw_ratio``,
        ``ring_bytes_returned`` or repeats.

        Dropped: ``ring_over_all_reduce`` (``ring_ms / all_reduce_ms``), derivable: it is the inverse of
        ``busbw_ratio``, which is computed here from the same two medians, both kept."""
        row = dict(row)
        row.pop("ring_over_all_reduce", None)
        row.setdefault("variant", ONE_SLICE)
        row.setdefault("slices", 1)
        if "busbw_ratio" not in row and row.get("ring_ms") and row.get("all_reduce_ms") is not None:
            row["busbw_ratio"] = row["all_reduce_ms"] / row["ring_ms"]
        return with_defaults(RingRow, row)


@dataclasses.dataclass(frozen=True)
class SourceCase:
    """One correctness case of a sparse all-reduce, gathered over the ranks."""

    case: str
    implementation: Literal["source", "course"]
    """``source``: the function as published; ``course``: the correct one."""
    nonzero_per_rank: tuple[int, ...]
    ran: bool
    """It returned on every rank (no error)."""
    exact: bool
    """Equal to ``all_reduce / W`` on every rank."""
    ranks_agree: bool
    """Every rank ended with the same tensor."""
    max_abs_error: float | None
    """Largest difference from ``all_reduce / W`` over the ranks that ran (``None``: none ran)."""
    error: str | None
    """The first rank's error (``skipped: ...`` where it was not run)."""


@dataclasses.dataclass(frozen=True)
class IndexingRow:
    """What the source's first two lines give for a tensor with 3 non-zeros."""

    shape: tuple[int, ...]
    nonzero_entries: int
    indices_shape: tuple[int, ...]
    """The shape of ``tensor.nonzero()``: one row per non-zero, one column per dimension."""
    values_shape: tuple[int, ...] | None
    """The shape of ``tensor[indices]`` (``None``: it raised)."""
    values_numel: int | None
    error: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseRow:
    """The correct sparse all-reduce against a dense one at one density (rank-local)."""

    density: float
    """The fraction of entries asked to be non-zero."""
    nonzero: int
    """This rank's non-zero entries."""
    exact: bool
    """Equal to the dense all-reduce on every rank."""
    sparse_bytes_sent: float
    """Bytes this rank would send were the sparse all-reduce's collectives rings (``_commcount``'s ``sent``): its
    all-gathers of the count, the padded indices and the padded values, each ``(W-1) ×`` this rank's share; not the
    bytes handed to ``torch.distributed``."""
    dense_bytes_sent: float
    """The same for the dense all-reduce: ``2 (W-1)/W ×`` the tensor's bytes."""
    bytes_ratio: float
    """Sparse ÷ dense bytes (below 1: fewer)."""
    sparse_ms: float
    """Median of the repeats, milliseconds; each call timed alone, CUDA events on the current stream on a GPU, the
    host clock on the CPU."""
    dense_ms: float
    sparse_ms_all: tuple[float, ...] = ()
    """Every repeat, milliseconds (``()``: not kept, older runs)."""
    dense_ms_all: tuple[float, ...] = ()
    time_ratio: float
    """Sparse ÷ dense median time (below 1: faster)."""


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank of ``collectives_bench`` returns."""

    debug_detail: bool
    """The run had ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (the source's mismatched ``all_gather`` then raises)."""
    world_size: int
    ring: tuple[RingRow, ...]
    ring_all_equal: bool
    """Every ring row equals ``all_reduce``'s result."""
    source_cases: tuple[SourceCase, ...]
    indexing: tuple[IndexingRow, ...]
    sparse: tuple[SparseRow, ...]

    @staticmethod
    def upgrade(data: dict[str, Any]) -> dict[str, Any]:
        """An older layout as today's. The first runs (``reference/h200x2``) timed one way of running the ring
        and kept no repeats: their ring rows have no ``variant``, ``slices``, ``busbw_ratio``, ``ring_bytes_returned``
        or repeats, and their ``ring_over_all_reduce`` (``ring_ms / all_reduce_ms``) is the inverse of
        ``busbw_ratio``: dropped, derivable from the two medians kept (:meth:`RingRow.upgrade`); their sparse rows
        have no repeats."""
        if "ring" in data:
            data["ring"] = [RingRow.upgrade(row) for row in data["ring"]]
        if "sparse" in data:
            data["sparse"] = [with_defaults(SparseRow, row) for row in data["sparse"]]
        return data


def ranks_typed(ranks: Sequence[Rank | Mapping[str, Any]]) -> list[Rank]:
    """A run's ranks typed: ``result.ranks_as(Rank)`` as they are, ``result.ranks`` (raw JSON) through the schema."""
    return [as_typed(Rank, m) for m in ranks]
