"""What one rank of chapter 06's ``pitfalls`` workload returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload.py`` and ``workload_oom.py``, on the ranks) builds a :class:`Rank`, one optional section per
part measured (``dataloader``, ``oom``); the launcher writes it to ``rank{R}.json``; the kernel side reads it back
typed (``report_measured.py``, ``plots.py``) with ``result.ranks_as(rank_type(result.params))``.

The committed reference run of 2026-11-30 (commit 15fcf4b) comes from an older workload that ran the traps themselves
(``--set trap=...``; they run as lesson scripts now) and timed the DataLoader alone: its ranks are
:class:`TrapsRank`, which :func:`rank_type` picks from the run's parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from nvtutorial.params import require
from nvtutorial.results import as_typed, rows_typed, with_defaults

NAME = "pitfalls"
"""The workload's name (``nvtutorial.run("pitfalls", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""

Part = Literal["dataloader", "oom"]
Model = Literal["tiny", "small", "full"]


@dataclasses.dataclass(frozen=True)
class Params:
    parts: tuple[Part, ...] = ("dataloader",)
    model: Literal["tiny", "small", "full"] = "tiny"
    loader_image_size: int = 64
    loader_batch: int = 8
    workers: tuple[int, ...] = (0, 1, 2)
    pin_workers: tuple[int, ...] = ()
    """The worker counts also measured with ``pin_memory=True`` on a GPU (empty: every count in ``workers``)."""
    steps: int = 4
    windows: int = 2
    shard_samples: int = 256
    oom_model: Literal["tiny", "small", "full"] = "full"
    oom_batch: int = 16
    oom_image_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        require(len(self.parts) >= 1, "parts: name at least one of dataloader, oom")
        require(all(w >= 0 for w in self.workers) and len(self.workers) >= 2, "workers: two or more counts >= 0")
        require(set(self.pin_workers) <= set(self.workers), "pin_workers: counts among workers")
        require(self.loader_batch >= 1 and self.steps >= 1, "loader_batch and steps must be at least 1")
        require(self.windows >= 2, f"windows={self.windows}: at least 2 (a spread needs repeats)")
        require(self.oom_batch >= 2 and self.oom_batch % 2 == 0, f"oom_batch={self.oom_batch}: an even number >= 2")
        require(self.shard_samples >= 16, "shard_samples must be at least 16")


# --------------------------------------------------------------------------------------------------- the loader


@dataclasses.dataclass(frozen=True)
class LoaderRow:
    """The training loop fed by one DataLoader configuration, on this rank."""

    num_workers: int
    pin_memory: bool
    warmup_steps: int
    """Steps before the measured windows (past what the workers prepared before the first step)."""
    samples_per_s: tuple[float, ...]
    """This rank's steady rate in each measured window."""


@dataclasses.dataclass(frozen=True)
class Shards:
    """The same samples read from one file each and from a few shard files (rank 0's disk, warm page cache)."""

    samples: int
    bytes_per_sample: int
    per_shard: int
    one_file_per_sample_us: tuple[float, ...]
    """Microseconds per sample, each repeat."""
    shards_us: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Loader:
    """Claim C17's measurement: the training loop's steady rate per DataLoader configuration (``dataloader``)."""

    rows: tuple[LoaderRow, ...]
    step_only_samples_per_s: tuple[float, ...]
    """The same loop fed from a batch already on the device: what the step alone takes, each window."""
    cpu_cores: int | None
    ranks: int
    gpus: int
    """0 on a CPU run."""
    rule_of_thumb_workers: int
    """The source's ``4 × GPUs`` (4 × ranks)."""
    batch: int
    image_size: int
    model: Model
    steps: int
    """Steps per measured window."""
    shards: Shards | None
    """Rank 0 only (None on the other ranks)."""


# --------------------------------------------------------------------------------------------------- out of memory


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fragmentation:
    """The fragmentation case under one allocator configuration: a cached block split by a smaller tensor, then a
    tensor that fits under the cap only if the allocator reuses the split block's free part."""

    config: str
    """The allocator's configuration (``PYTORCH_CUDA_ALLOC_CONF``'s options), or ``default``."""
    cap_mib: int | None = None
    reserved_mib: float | None = None
    allocated_mib: float | None = None
    outcome: Literal["fits", "OOM", "not measured"]
    message: str | None = None
    """The OOM's message, or why the configuration could not be measured (None: it fit)."""
    free_under_cap_mib: int | None = None


@dataclasses.dataclass(frozen=True)
class MemoryState:
    """Allocated, reserved and the driver's free memory after one step of the ``empty_cache()`` demo (MiB)."""

    step: str
    allocated_mib: float
    reserved_mib: float
    driver_free_mib: float


@dataclasses.dataclass(frozen=True)
class EmptyCache:
    rows: tuple[MemoryState, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRow:
    """One variant of the training step.

    Today's rows: the variant's first step untimed (warm-up; where an OOM shows), then, if it fit,
    :attr:`Training.timed_steps` steps, each timed alone with CUDA events on the current stream; the peak memory over
    all of them. The 2026-11-30 rows (the committed run, :attr:`Training.timed_steps` None): after two untimed steps
    of the whole model (which created the optimizer state), one timed step per variant on the host clock
    (``perf_counter``, the device synchronised before and after), the peak memory over that step; every row after
    the first under the memory cap, and the checkpointed row's step the first after checkpointing was switched on."""

    variant: str
    capped: bool
    """Measured under the memory cap."""
    outcome: Literal["fits", "OOM"]
    step_ms: float | None = None
    """The median timed step, ms (None: it did not fit). In the 2026-11-30 run: the variant's one timed step, on the
    host clock with the device synchronised (see the class)."""
    step_ms_repeats: tuple[float, ...] | None = None
    """Each timed step, ms, CUDA events (None: it did not fit, or the 2026-11-30 run, which timed one step)."""
    message: str | None = None
    """The OOM's message (None: it fit)."""
    peak_allocated_mib: float
    peak_reserved_mib: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Training:
    """A training step that does not fit under a cap, and the fixes that make it fit (no DDP)."""

    cap_mib: float
    model: Model
    batch: int
    image_size: int
    timed_steps: int | None = None
    """Steps timed per variant, after one untimed step (None: the 2026-11-30 run, which timed one step per variant,
    on the host clock, after two untimed steps before the first variant)."""
    rows: tuple[TrainingRow, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Oom:
    """Claims C19 and C20's measurements (``oom``): GPU only; a CPU run says so in ``skipped`` and nothing else."""

    launch_alloc_conf: str | None = None
    """The allocator's configuration at launch (``PYTORCH_ALLOC_CONF``, else ``PYTORCH_CUDA_ALLOC_CONF``)."""
    allocator_after: str | None = None
    """The settings the demo set back after the fragmentation case, under which ``empty_cache()`` and the training
    step ran (None: runs before 2026-12-07, which left ``max_split_size_mb:256`` set for them)."""
    fragmentation: tuple[Fragmentation, ...] = ()
    empty_cache: EmptyCache | None = None
    training: Training | None = None
    skipped: str | None = None
    """Why nothing was measured (a CPU run); None on a GPU."""


# --------------------------------------------------------------------------------------------------- one rank


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank of ``pitfalls`` returns: the parts asked for (``parts``), each its own section."""

    parts: tuple[Part, ...]
    dataloader: Loader | None = None
    """None: not asked for."""
    oom: Oom | None = None
    """None: not asked for."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """A run written before the result was typed: a part's section has only the keys of its case (a row that
        fit has no ``message``, a CPU run's ``oom`` only ``skipped``); the rest takes its default."""
        return with_defaults(Rank, data)


# --------------------------------------------------------------------------------------------------- 2026-11-30


@dataclasses.dataclass(frozen=True)
class LoaderAloneRow:
    """The DataLoader alone (each batch copied to the device, no training step), one configuration."""

    num_workers: int
    pin_memory: bool
    first_batch_s: float
    samples_per_s: float
    """One rate, without the start-up."""
    samples_per_s_with_startup: float


@dataclasses.dataclass(frozen=True)
class ShardsOnce:
    samples: int
    bytes_per_sample: int
    per_shard: int
    one_file_per_sample_us: float
    shards_us: float


@dataclasses.dataclass(frozen=True)
class LoaderAlone:
    """The 2026-11-30 workload's input-pipeline measurement: the DataLoader timed alone, and what the step alone
    consumes (``step_consumes_samples_per_s``); it says how many workers feed the step, not the loop's rate."""

    rows: tuple[LoaderAloneRow, ...]
    cpu_cores: int | None
    ranks: int
    step_consumes_samples_per_s: float
    knee_workers: int | None
    shards: ShardsOnce | None
    rule_of_thumb_workers: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrapsRank:
    """One rank of the ``pitfalls`` workload as it was on 2026-11-30 (``--set trap=...``; the committed reference):
    it ran the traps itself. The traps that run as lesson scripts now are kept as the run wrote them (read by
    nothing); its out-of-memory demo is today's (:class:`Oom`), its loader the loader alone (:class:`LoaderAlone`)."""

    traps: tuple[str, ...]
    fixed: bool
    debug: str
    """``TORCH_DISTRIBUTED_DEBUG``."""
    seconds: dict[str, float]
    """Per trap, the seconds it took."""
    oom: Oom | None = None
    rank0_validation: dict[str, Any] | None = None
    mismatched_shapes: dict[str, Any] | None = None
    mismatched_order: dict[str, Any] | None = None
    no_set_epoch: dict[str, Any] | None = None
    seeds: dict[str, Any] | None = None
    dataloader: LoaderAlone | None = None

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Its OOM demo read as today's: the training rows carried no ``capped`` flag (every row after the first was
        measured under the cap), the parts a row's case lacks take their defaults."""
        oom = data.get("oom")
        if isinstance(oom, Mapping) and isinstance(training := oom.get("training"), Mapping):
            rows = _capped(training.get("rows", []))
            data["oom"] = {**oom, "training": {**training, "rows": rows}}  # copies: the run's own JSON stays as read
        return with_defaults(TrapsRank, data)


def rank_type(params: Mapping[str, Any]) -> type[Rank] | type[TrapsRank]:
    """What one rank of a run with these parameters returns: today's :class:`Rank`, or :class:`TrapsRank` for a run of
    the 2026-11-30 workload (its parameters name the traps it ran: ``trap``)."""
    return TrapsRank if "trap" in params else Rank


# --------------------------------------------------------------------------------------------------- raw JSON
# What notebook 06's cells pass the plots and readers: sections and rows as the run wrote them (``measured.ranks[r]``).


def loader_typed(value: Loader | Mapping[str, Any]) -> Loader:
    """One rank's ``dataloader`` section typed: a :class:`Loader` as it is, raw JSON (``measured.ranks[r]
    ["dataloader"]``) through :func:`~nvtutorial.results.typed`."""
    return as_typed(Loader, value)


def loader_rows_typed(rows: Iterable[LoaderRow | Mapping[str, Any]]) -> tuple[LoaderRow, ...]:
    """One rank's loader rows typed: :class:`LoaderRow` as they are, raw JSON (``d["rows"]`` of a ``dataloader``
    section) through :func:`~nvtutorial.results.typed`."""
    return rows_typed(LoaderRow, rows)


def training_rows_typed(rows: Sequence[TrainingRow | Mapping[str, Any]]) -> tuple[TrainingRow, ...]:
    """The training step's rows typed: :class:`TrainingRow` as they are, raw JSON (``measured.ranks[0]["oom"]
    ["training"]["rows"]``) through :func:`~nvtutorial.results.typed`, the 2026-11-30 run's rows read as
    :meth:`TrapsRank.upgrade` reads them (:func:`_capped`)."""
    return rows_typed(TrainingRow, _capped(rows))


def _capped(rows: Sequence[Any]) -> list[Any]:
    """The training rows of the 2026-11-30 run carried no ``capped`` flag: every row after the first was measured
    under the cap. Rows as JSON get it (copies: the run's own JSON stays as read); typed rows have it."""
    return [{**r, "capped": r.get("capped", i > 0)} if isinstance(r, Mapping) else r for i, r in enumerate(rows)]
