"""What chapter 10's workload takes and returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload.py``, on the ranks) builds one of the ``*Rank`` results below and returns it as a dict;
the launcher writes it to ``rank{R}.json``; the kernel side reads it back with :func:`read` (``report.py``), typed.
One workload, four parts, one :class:`Params`:

- ``calibrate``: the roofs and floors of each rank's device (matrix multiplies and copies over a size sweep, the
  floor of Adam's step and of a training step) and, with two ranks or more, collectives timed over a size sweep
  (:class:`CalibrationRank`);
- ``problems``: the quantities the worked problems ask for, measured (:class:`ProblemsRank`);
- ``pipeline``: the transformer trained in pipeline stages, per-stage timelines (:class:`PipelineRank`);
- ``capstone``: the capstone task trained with the strategies asked for (:class:`CapstoneRank`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

from nvtutorial.chapters.ch08_ladder.schema import sizes
from nvtutorial.params import require
from nvtutorial.results import RunResult, typed

NAME = "costmodel"
"""The workload's name (``nvtutorial.run("costmodel", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""
PARTS = ("calibrate", "problems", "pipeline", "capstone")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
DEVICE_PROBLEMS = ("mlp_matmul", "decode_matmul", "adam_step", "train_step")
"""Problems one device answers: they run on every rank, each on its own device."""
PROGRAMS = ("adam_step", "train_step")
"""Device problems that are whole eager programs (many calls each): the calibration measures each one's floor."""
LINK_PROBLEMS = ("allreduce", "allreduce_small", "fsdp_allgather", "zero3_bytes")
"""Problems a pair answers: they need two ranks or more."""
SCHEDULES = ("gpipe", "1f1b")
LADDER_STRATEGIES = ("ddp", "zero1", "fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing", "tensor_parallel")
"""Notebook 08's rungs the capstone accepts (CPU offload is left out: it trades the budget for host memory)."""
STRATEGIES = LADDER_STRATEGIES + tuple(f"pipeline_{s}" for s in SCHEDULES)


@dataclasses.dataclass(frozen=True)
class Params:
    part: Literal["calibrate", "problems", "pipeline", "capstone"] = "calibrate"
    # -- calibrate
    matmul_sizes: tuple[int, ...] = (64, 256, 1024, 2048, 4096, 8192)
    """Square matrix multiplies n × n × n: the small ones measure the floor of one call, the large ones the compute
    roof (the best rate is the roof)."""
    copy_bytes: tuple[int, ...] = (1 << 16, 1 << 20, 1 << 24, 1 << 28, 1 << 30)
    """Buffers copied (each byte read once and written once): the small ones measure the floor, the largest the
    memory roof (larger than every cache, so that memory, not a cache, is measured)."""
    floors: tuple[str, ...] = PROGRAMS
    """Programs whose floor the calibration measures, on the model's sizes below: Adam's step on the model's
    tensors shrunk to one element each, the training step of the same blocks and heads at a tiny width."""
    collectives: tuple[str, ...] = COLLECTIVES
    min_bytes: int = 1 << 10
    max_bytes: int = 1 << 30
    factor: int = 4
    iters: int = 10_000
    """The most calls per timed repeat: a repeat makes as many calls as last about ``target_s`` (the median of three
    probe calls decides), at least one."""
    repeats: int = 5
    target_s: float = 0.05
    # -- the transformer of notebook 08 (problems, pipeline, capstone)
    vocab: int = 32768
    seq_len: int = 512
    dim: int = 2048
    heads: int = 16
    layers: int = 8
    mlp_ratio: int = 4
    global_batch: int = 8
    # -- problems
    problems: tuple[str, ...] = DEVICE_PROBLEMS + LINK_PROBLEMS
    decode_tokens: int = 16
    decode_dim: int = 8192
    allreduce_bytes: int = 64 << 20
    small_bytes: int = 1 << 20
    # -- pipeline and capstone
    schedules: tuple[str, ...] = SCHEDULES
    microbatches: int = 4
    steps: int = 3
    """Steps whose losses are compared with the one-process reference."""
    timed: int = 3
    """Timed steps (after one untimed); the pipeline records a timeline of each."""
    strategies: tuple[str, ...] = ("fsdp_zero3",)
    budget_bytes: int = 0
    """Capstone: the memory each GPU may use (enforced with ``set_per_process_memory_fraction``); 0: no limit."""
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            bool(self.matmul_sizes) and all(n >= 16 for n in self.matmul_sizes), "matmul_sizes: sizes of 16 or more"
        )
        require(
            bool(self.copy_bytes) and all(b >= 1 << 16 for b in self.copy_bytes),
            "copy_bytes: buffers of 64 KiB or more",
        )
        bad = [f for f in self.floors if f not in PROGRAMS]
        require(not bad, f"floors={self.floors}: use some of {', '.join(PROGRAMS)}")
        bad = [c for c in self.collectives if c not in COLLECTIVES]
        require(not bad, f"collectives={self.collectives}: use some of {', '.join(COLLECTIVES)}")
        require(
            1 <= self.min_bytes <= self.max_bytes and self.factor >= 2, "need 1 <= min_bytes <= max_bytes, factor >= 2"
        )
        require(
            self.iters >= 1 and self.repeats >= 2 and self.target_s > 0,
            "iters at least 1, repeats at least 2 (a spread needs two), target_s positive",
        )
        require(self.dim % self.heads == 0, f"dim={self.dim} must be a multiple of heads={self.heads}")
        bad = [p for p in self.problems if p not in DEVICE_PROBLEMS + LINK_PROBLEMS]
        require(not bad, f"problems={self.problems}: use some of {', '.join(DEVICE_PROBLEMS + LINK_PROBLEMS)}")
        bad = [s for s in self.schedules if s not in SCHEDULES]
        require(not bad and bool(self.schedules), f"schedules={self.schedules}: use some of {', '.join(SCHEDULES)}")
        bad = [s for s in self.strategies if s not in STRATEGIES]
        require(not bad and bool(self.strategies), f"strategies={self.strategies}: use some of {', '.join(STRATEGIES)}")
        require(
            self.microbatches >= 1 and self.steps >= 1 and self.timed >= 2,
            "microbatches and steps at least 1, timed at least 2 (a spread needs two)",
        )
        require(self.global_batch >= 1 and self.decode_tokens >= 1 and self.decode_dim >= 1, "sizes must be positive")
        require(self.allreduce_bytes >= 64 and self.small_bytes >= 64, "collective sizes of 64 bytes or more")
        require(self.budget_bytes >= 0, f"budget_bytes={self.budget_bytes} must be 0 (no limit) or more")

    def config(self) -> dict[str, int]:
        """The transformer's sizes (``models.transformer.Config`` fields)."""
        return sizes(self)


# --------------------------------------------------------------------------------------------------- calibrate


@dataclasses.dataclass(frozen=True)
class MatmulPoint:
    n: int
    dtype: str
    seconds: float
    """Median of the repeats, per multiply."""
    flops_per_s: float
    sm_clock_mhz: tuple[int, int] | None = None
    """GPU only: the lowest and highest SM clock read after its repeats (the bf16 roof is the clock the power cap
    allows); None where NVML had none, and in runs before 2026-12-08."""


@dataclasses.dataclass(frozen=True)
class CopyPoint:
    nbytes: int
    """The buffer's size: a copy reads it once and writes it once (``2 · nbytes`` moved)."""
    seconds: float
    bytes_per_s: float


@dataclasses.dataclass(frozen=True)
class Floor:
    """One program's floor: the same calls with almost no work, timed like everything else."""

    program: str
    seconds: float
    """Median of the repeats, per call of the whole program."""
    repeats: tuple[float, ...]
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What was shrunk: Adam's ``tensors``; the step's ``layers``, ``heads``, ``dim``, ``seq_len``, ``batch``."""


@dataclasses.dataclass(frozen=True)
class CollectivePoint:
    kind: str
    size: int
    """Bytes of the whole tensor (the gathered output of an all-gather, the input of a reduce-scatter)."""
    seconds: float
    """Median over the repeats of each repeat's slowest rank."""
    repeats: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class CalibrationRank:
    rank: int
    world: int
    device: str
    """``torch.cuda.get_device_name`` or ``CPU``."""
    matmul: tuple[MatmulPoint, ...]
    copy: tuple[CopyPoint, ...]
    collectives: tuple[CollectivePoint, ...] = ()
    floors: tuple[Floor, ...] = ()
    """Each program's floor (:data:`PROGRAMS`); none in runs before the floors were measured (2026-12-07)."""
    sm_clock_mhz: tuple[int, int] | None = None
    """GPU only: the lowest and highest SM clock (MHz, NVML) read after the timed repeats; None where NVML had none
    (and in runs before it was recorded)."""
    l2_bytes: int | None = None
    """GPU only: the L2 cache's size: a copy whose bytes fit in it measures the cache, not memory."""


# --------------------------------------------------------------------------------------------------- problems


@dataclasses.dataclass(frozen=True)
class Measured:
    """One problem's answer as a run measured it: seconds (median over repeats) or a count."""

    key: str
    value: float
    unit: str
    repeats: tuple[float, ...] = ()
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The problem's sizes; ``iters`` (calls per repeat) and, on a GPU, ``sm_clock_mhz`` (lowest, highest); an eager
    program's two sides on a GPU, measured apart before it was timed: ``host_s`` (the CPU issuing one call onto an
    idle GPU) and ``gpu_s`` (the GPU's own time; None with ``gpu_why`` where it could not be measured)."""


@dataclasses.dataclass(frozen=True)
class ProblemsRank:
    rank: int
    world: int
    device: str
    compute_dtype: str
    measured: tuple[Measured, ...]

    def get(self, key: str) -> Measured:
        for m in self.measured:
            if m.key == key:
                return m
        raise KeyError(f"the run measured no problem {key!r}; it measured {', '.join(m.key for m in self.measured)}")


# --------------------------------------------------------------------------------------------------- pipeline


@dataclasses.dataclass(frozen=True)
class Event:
    """One micro-batch's forward (``F``) or backward (``B``) pass on a stage, in seconds from the step's start."""

    kind: Literal["F", "B"]
    microbatch: int
    start: float
    end: float


@dataclasses.dataclass(frozen=True)
class Held:
    """Bytes this rank holds after a step: its parameters, their gradients, the optimizer's state."""

    params: int
    grads: int
    optimizer: int


@dataclasses.dataclass(frozen=True)
class ScheduleRun:
    schedule: str
    microbatches: int
    stage: int
    stages: int
    blocks: tuple[int, int]
    """The model's blocks this stage holds: ``first``, ``last + 1``."""
    losses: tuple[float, ...]
    reference: tuple[float, ...]
    grad_max_rel_diff: float
    """Largest step-0 gradient difference against one process, relative to each tensor's largest value."""
    grad_worst: str
    timelines: tuple[tuple[Event, ...], ...]
    """One per timed step."""
    step_s: tuple[float, ...]
    held: Held
    peak_allocated: int | None = None
    """GPU only: the peak memory of the timed steps."""


@dataclasses.dataclass(frozen=True)
class PipelineRank:
    rank: int
    world: int
    device: str
    runs: tuple[ScheduleRun, ...]


# --------------------------------------------------------------------------------------------------- capstone


@dataclasses.dataclass(frozen=True)
class StrategyRun:
    strategy: str
    ok: bool
    error: str | None
    losses: tuple[float, ...]
    reference: tuple[float, ...]
    grad_max_rel_diff: float | None
    step_s: tuple[float, ...]
    sent_per_step: float
    """Bytes this rank would send per step were its collectives run as rings (recorded as issued)."""
    held: Held | None
    peak_allocated: int | None = None


@dataclasses.dataclass(frozen=True)
class CapstoneRank:
    rank: int
    world: int
    device: str
    budget_bytes: int
    runs: tuple[StrategyRun, ...]


PartRank = CalibrationRank | ProblemsRank | PipelineRank | CapstoneRank
"""What one rank of a run returns, whichever part it ran."""
RESULTS: dict[str, type[PartRank]] = {
    "calibrate": CalibrationRank,
    "problems": ProblemsRank,
    "pipeline": PipelineRank,
    "capstone": CapstoneRank,
}


# --------------------------------------------------------------------------------------------------- reading back


def rank_type(params: Mapping[str, Any]) -> type:
    """What one rank of a run with these parameters returns: the part run decides it."""
    part = params.get("part", Params.part)
    if part not in RESULTS:
        raise ValueError(f"unknown part {part!r}; the parts are {', '.join(PARTS)}")
    return RESULTS[part]


def read(part: str, metrics: Mapping[str, Any]) -> PartRank:
    """One rank's metrics of a run of ``part`` as its typed result."""
    if part not in RESULTS:
        raise ValueError(f"unknown part {part!r}; the parts are {', '.join(PARTS)}")
    return typed(RESULTS[part], metrics)


@overload
def ranks(result: RunResult, part: Literal["calibrate"]) -> list[CalibrationRank]: ...
@overload
def ranks(result: RunResult, part: Literal["problems"]) -> list[ProblemsRank]: ...
@overload
def ranks(result: RunResult, part: Literal["pipeline"]) -> list[PipelineRank]: ...
@overload
def ranks(result: RunResult, part: Literal["capstone"]) -> list[CapstoneRank]: ...
def ranks(result: RunResult, part: str) -> Sequence[PartRank]:
    """Every rank's metrics of a run of the ``costmodel`` workload's ``part``, typed (:func:`read`)."""
    return [read(part, m) for m in result.ranks]
