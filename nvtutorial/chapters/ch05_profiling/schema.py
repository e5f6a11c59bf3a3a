"""What one rank of chapter 05's ``profile_step`` workload returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload.py``, on the ranks) builds a :class:`Rank`; the launcher writes it to ``rank{R}.json``; the
kernel side reads it back typed with ``result.ranks_as(Rank)`` (``report.py``, ``plots.py``). Times are milliseconds
per step unless a name says otherwise; ``start``/``end`` are wall-clock seconds (``time.time()``), for telemetry.

The committed reference runs (2026-11-30) predate the A/B rounds, the wire and the paired traces: :meth:`Rank.upgrade`
reads them into this layout, those parts left at their defaults (``None`` or empty).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Literal

from nvtutorial.params import require
from nvtutorial.results import rows_typed, with_defaults

NAME = "profile_step"
"""The workload's name (``nvtutorial.run("profile_step", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""

Model = Literal["tiny", "small", "full"]
Source = Literal["gpu", "cpu", "nsys"]
"""What a split was read from: CUDA kernels (``torch.profiler``), CPU ops (gloo: a simulation), Nsight Systems."""


@dataclasses.dataclass(frozen=True)
class Params:
    """What ``profile_step`` runs (``KEY=VALUE`` on the command line, checked before launch)."""

    model: Model = "small"
    batch_size: int = 8  # per GPU
    image_size: int = 64
    amp: Literal["fp32", "bf16"] = "fp32"
    bucket_cap_mb: float = 25.0  # DDP's bucket cap in MiB, passed: it caps the first bucket too (unset: 1 MiB)
    warmup: int = 3
    rounds: int = 3  # A/B rounds: DDP, no_sync and 1-GPU steps interleaved
    round_steps: int = 3  # timed steps of each kind per round
    local_baseline: bool = True  # also time the bare module (the 1-GPU step)
    steps: int = 4  # steps recorded by the profiler
    profiler: bool = True  # False when the run goes under Nsight Systems (both use CUPTI)
    wire_repeats: int = 5  # all-reduces of the gradients' bytes after a barrier
    sweep: tuple[int, ...] = ()  # per-GPU batch sizes for the communication-share sweep
    sweep_rounds: int = 2
    sweep_steps: int = 2
    probe_mb: int = 0  # all-reduce probe (MiB) for NVLink telemetry; 0 = none
    probe_s: float = 1.0
    memory_snapshot: bool = True  # GPU only
    pause_s: float = 0.0  # idle gap between phases, so telemetry shows where one ends
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, f"batch_size={self.batch_size} must be at least 1")
        require(self.warmup >= 1, f"warmup={self.warmup} must be at least 1 (the first steps are slow)")
        require(
            self.rounds >= 2 and self.sweep_rounds >= 2,
            f"rounds={self.rounds}, sweep_rounds={self.sweep_rounds}: compare needs at least 2 repeats a side",
        )
        require(
            self.round_steps >= 1 and self.steps >= 1 and self.sweep_steps >= 1,
            "round_steps, steps and sweep_steps must be at least 1",
        )
        require(self.wire_repeats >= 2, f"wire_repeats={self.wire_repeats} must be at least 2")
        require(all(b >= 1 for b in self.sweep), f"sweep={self.sweep}: batch sizes must be at least 1")
        require(self.probe_mb >= 0 and self.probe_s > 0, "probe_mb must be >= 0 and probe_s > 0")
        require(self.pause_s >= 0, f"pause_s={self.pause_s} must be >= 0")
        require(self.bucket_cap_mb > 0, f"bucket_cap_mb={self.bucket_cap_mb} must be positive")


@dataclasses.dataclass(frozen=True)
class Kinds:
    """Milliseconds per kind of step, from the interleaved A/B rounds (every step, or each round's median)."""

    ddp: tuple[float, ...]
    """The DDP step."""
    no_sync: tuple[float, ...]
    """The same step under ``model.no_sync()``: no gradient exchange."""
    local: tuple[float, ...] | None = None
    """The bare module, no DDP (the 1-GPU step); None: not timed (``local_baseline=false``, or a sweep)."""

    def measured(self) -> dict[str, tuple[float, ...]]:
        """The kinds timed, in the order the rounds ran them: ``{"ddp": ..., "no_sync": ..., "local": ...}``."""
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}


@dataclasses.dataclass(frozen=True)
class StepSplit:
    """The split of one profiled step (ms): ``compute_only + hidden + exposed + idle = step``
    (:class:`nvtutorial.tracesplit.Split`, written with its derived shares)."""

    source: Source
    steps: int
    step_ms: float
    compute_ms: float
    comm_ms: float
    hidden_ms: float
    """Communication with compute of this rank under it."""
    exposed_ms: float
    """Communication with no compute under it: what overlapping could still win."""
    idle_ms: float
    rank: int | None
    compute_only_ms: float
    comm_share: float
    """Communication over the step (NaN for an empty step)."""
    exposed_share: float
    hidden_fraction: float
    """Hidden over communication (NaN without communication)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Link:
    """This rank's communication split by when the other ranks arrived (ms per step,
    :class:`nvtutorial.tracesplit.Waiting`), from every rank's trace on the host's one clock; where the traces
    could not be paired, only ``reason`` (the numbers None)."""

    rank: int | None = None
    steps: int | None = None
    collectives: int | None = None
    """Collectives per step."""
    comm_ms: float | None = None
    wait_ms: float | None = None
    """Inside a collective before the last rank joined it: waiting for the other rank (skew)."""
    transfer_ms: float | None = None
    """After it: data on the wire, and the collective's own latency."""
    exposed_ms: float | None = None
    exposed_wait_ms: float | None = None
    exposed_transfer_ms: float | None = None
    last_share: float | None = None
    """Share of the collectives this rank was the last to join."""
    reason: str | None = None
    """Why the ranks' traces were not paired (None: they were)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Split:
    """This rank's average profiled step (ms), split from its own trace: ``compute_only + hidden + exposed + idle =
    step``; with each step's split and, where every rank's trace was on this host, waiting against transfer."""

    source: Source
    steps: int
    step_ms: float
    compute_ms: float
    comm_ms: float
    hidden_ms: float
    exposed_ms: float
    idle_ms: float
    phase_ms: dict[str, float]
    """Compute inside each marked phase (``forward``, ``backward``, ``optimizer``)."""
    rank: int | None
    compute_only_ms: float
    comm_share: float
    exposed_share: float
    hidden_fraction: float
    per_step: tuple[StepSplit, ...] = ()
    """Each profiled step's split: the repeats behind the average (empty in the reference runs)."""
    link: Link | None = None
    """Waiting against transfer (None: not computed, as in the reference runs)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One per-GPU batch size of the sweep (claim C16): the profiled split of its steps (the split's fields, None
    when the run was not profiled), then the batch's own numbers."""

    source: Source | None = None
    steps: int | None = None
    step_ms: float | None = None
    """The profiled step."""
    compute_ms: float | None = None
    comm_ms: float | None = None
    hidden_ms: float | None = None
    exposed_ms: float | None = None
    idle_ms: float | None = None
    rank: int | None = None
    compute_only_ms: float | None = None
    comm_share: float | None = None
    exposed_share: float | None = None
    hidden_fraction: float | None = None
    per_step: tuple[StepSplit, ...] = ()
    link: Link | None = None
    batch: int
    """Per GPU."""
    global_batch: int
    step_ms_unprofiled: float
    """The median DDP step of the rounds, without the profiler; in the committed runs, the median of the batch's
    ``sweep_steps`` steps, each timed with CUDA events (see :attr:`Rank.timing`)."""
    samples_per_s: float
    """Of all ranks together, from ``step_ms_unprofiled``."""
    repeats: Kinds | None = None
    """Each round's median per kind (DDP, no_sync); None in the reference runs."""

    @property
    def split(self) -> Split | None:
        """The profiled split of this batch (None: the run was not profiled)."""
        if (
            self.source is None
            or self.steps is None
            or self.step_ms is None
            or self.compute_ms is None
            or self.comm_ms is None
            or self.hidden_ms is None
            or self.exposed_ms is None
            or self.idle_ms is None
            or self.compute_only_ms is None
            or self.comm_share is None
            or self.exposed_share is None
            or self.hidden_fraction is None
        ):
            return None
        return Split(
            source=self.source,
            steps=self.steps,
            step_ms=self.step_ms,
            compute_ms=self.compute_ms,
            comm_ms=self.comm_ms,
            hidden_ms=self.hidden_ms,
            exposed_ms=self.exposed_ms,
            idle_ms=self.idle_ms,
            phase_ms={},
            rank=self.rank,
            compute_only_ms=self.compute_only_ms,
            comm_share=self.comm_share,
            exposed_share=self.exposed_share,
            hidden_fraction=self.hidden_fraction,
            per_step=self.per_step,
            link=self.link,
        )


@dataclasses.dataclass(frozen=True)
class Wire:
    """The gradients' bytes all-reduced right after a barrier, repeated: the exchange with no rank behind."""

    bytes: int
    """fp32 gradients: 4 bytes per parameter."""
    ms: tuple[float, ...]
    """Each repeat."""
    busbw_gbs: float | None
    """Bus bandwidth of the median repeat, GB/s (None: one rank, nothing exchanged)."""
    how: str


@dataclasses.dataclass(frozen=True)
class Probe:
    """An all-reduce repeated for about ``probe_s`` seconds: a known number of bytes for the parent's telemetry."""

    mib: int
    """The all-reduced tensor's size."""
    count: int
    seconds: float
    start: float
    end: float
    bytes_per_rank_algorithm: float
    """Bytes each rank sends in all the all-reduces, by the ring algorithm: ``2 (w - 1) / w`` of the tensor each."""
    busbw_gbs: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The CUDA allocator's memory snapshot of two steps (GPU only)."""

    written: bool
    path: str | None = None
    bytes: int | None = None
    how_to_view: str | None = None
    reason: str | None = None
    """Why none was written (None: it was)."""


@dataclasses.dataclass(frozen=True)
class Phase:
    """A phase of the run on the wall clock, for telemetry drawn against it."""

    name: str
    start: float
    end: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rank:
    """What one rank of ``profile_step`` returns (``result.ranks_as(Rank)``)."""

    model: Model
    batch_size: int
    """Per GPU."""
    image_size: int
    amp: Literal["fp32", "bf16"]
    parameters: int
    gradient_mib: float
    """fp32 gradients: 4 bytes per parameter, in MiB."""
    timing: str | None = None
    """How the steps were timed: today :data:`workload.TIMING` (the host clock per step, the device synchronised at
    its end). None in the committed 2× H200 runs (2026-11-30, commit 15fcf4b), which timed each step alone with CUDA
    events on the current stream (``ctx.time_calls``): GPU-clock times, not the clock today's runs use."""
    step_ms: float
    """The median DDP step of the A/B rounds (no profiler); in the committed runs (no rounds), the median of their
    10 timed steps (``timed_steps``)."""
    no_sync_step_ms: float | None = None
    local_step_ms: float | None
    """The median 1-GPU step (the bare module); None: not timed. In the committed runs, the median of
    ``timed_steps`` steps timed last, after the profiled steps, the sweep and the probe."""
    ddp_gap_ms: float | None
    """``step_ms - local_step_ms``."""
    step_ms_all: Kinds | None = None
    """Every timed step of the rounds, per kind (None in the reference runs)."""
    step_ms_repeats: Kinds | None = None
    """Each round's median, per kind: the repeats ``compare`` takes (None in the reference runs)."""
    step_ms_profiled: float
    """The median profiled step (or NVTX-marked, with ``profiler=false``)."""
    profiled_ms: tuple[float, ...] = ()
    profiler_overhead: float | None
    """``step_ms_profiled / step_ms - 1`` (None: not profiled)."""
    samples_per_s: float
    """Of all ranks together."""
    split: Split | None
    """None: not profiled (``profiler=false``, under Nsight Systems)."""
    trace: str | None
    """This rank's ``torch.profiler`` trace (None: not profiled)."""
    wire: Wire | None = None
    """None: one rank (no other rank to exchange with), or the reference runs (no wire then)."""
    sweep: tuple[SweepRow, ...]
    probe: Probe | None
    """None: no probe (``probe_mb=0``)."""
    memory: dict[str, int | float | str]
    """``torch.cuda.memory_stats``'s essentials under torch's own names (``allocated_bytes.all.peak``, ...) and
    ``max_memory_*_mib`` on a GPU, process RSS (``rss_mib``, ``rss_peak_mib``) on a CPU; ``kind`` says which."""
    memory_snapshot: Snapshot
    phases: tuple[Phase, ...]
    step_ends: tuple[float, ...]
    """Wall-clock ends of the timed steps of the rounds."""
    nccl_p2p_disable: str | None
    """``NCCL_P2P_DISABLE`` as the rank saw it (``"1"``: host-staged)."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """An older layout read as this one: the run with no probe wrote ``{}`` for it (now None); every part a
        layout did not write (the reference runs of 2026-11-30: no rounds, no wire, no paired traces; a run not
        profiled: no split in its sweep rows) takes its default, nested parts included."""
        if data.get("probe") == {}:
            data["probe"] = None
        return with_defaults(Rank, data)


# --------------------------------------------------------------------------------------------------- raw JSON


def phases_typed(phases: Iterable[Phase | Mapping[str, object]]) -> tuple[Phase, ...]:
    """A rank's phases typed: :class:`Phase` as they are, raw JSON (``run.metrics["phases"]``, what notebook 05's
    telemetry cell passes) through :func:`~nvtutorial.results.typed`."""
    return rows_typed(Phase, phases)
