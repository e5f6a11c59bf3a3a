"""What chapter 11's workload takes and returns: frozen dataclasses, torch-free, read by both sides.

One workload (``workload.py``, by name ``overhead``), three parts, one :class:`Params`:

- ``calibrate`` (one rank): one tiny op's cost four ways, the batch-doubling sweep of the small step, a small
  all-reduce in a world of one, and (on a GPU) each lesson step's two sides, the CPU's and the GPU's
  (:class:`CalibrateRank`);
- ``step`` (one rank on a GPU): the lesson's step at each width eager and captured in one CUDA graph, and at the
  widths of ``compile_widths`` compiled with ``mode="reduce-overhead"``: the same losses and weights, each side
  measured before the step is timed (:class:`StepRank`);
- ``allreduce`` (two ranks): the small all-reduce over the pair (:class:`AllReduceRank`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from nvtutorial.chapters.ch08_ladder.schema import sizes
from nvtutorial.params import require

NAME = "overhead"
"""The workload's name (``nvtutorial.run("overhead", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""
PARTS = ("calibrate", "step", "allreduce")
VARIANTS = ("eager", "graph", "compiled")
"""The step three ways: Python issues every kernel; one CUDA graph replays all of them; ``torch.compile`` with
``mode="reduce-overhead"`` (fused kernels, replayed from its own CUDA graphs; Adam stays eager)."""


@dataclasses.dataclass(frozen=True)
class Params:
    part: Literal["calibrate", "step", "allreduce"] = "calibrate"
    # -- the transformer of notebook 08: only the width and the batch change
    vocab: int = 256
    seq_len: int = 64
    heads: int = 4
    layers: int = 2
    mlp_ratio: int = 4
    widths: tuple[int, ...] = (256, 1024)
    """The lesson's widths: a small one where overhead dominates, a wide one where the GPU's work does."""
    batches: tuple[int, ...] = (8, 16)
    """Sequences per step at each width (same length as ``widths``)."""
    # -- calibrate
    op_calls: int = 2000
    """Calls of the tiny op per timing."""
    doubling_width: int = 256
    doubling_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    # -- timing
    steps: int = 10
    """Steps per timed repeat."""
    repeats: int = 5
    check_steps: int = 6
    """Steps whose losses and final weights are compared with the eager step's (the first ``warmup`` of them warm
    the graph up)."""
    warmup: int = 3
    compile_widths: tuple[int, ...] = (256,)
    """The widths at which the step is also compiled (``torch.compile`` takes seconds to tens of seconds per width,
    cold): the small one, where the overhead it removes is the step's time."""
    # -- the all-reduce
    allreduce_bytes: tuple[int, ...] = (4, 1 << 16, 1 << 20)
    allreduce_calls: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        require(len(self.widths) == len(self.batches) >= 1, "widths and batches: one batch per width")
        require(all(w % self.heads == 0 for w in (*self.widths, self.doubling_width)), "every width: heads divide it")
        require(min((*self.batches, *self.doubling_batches)) >= 1, "batches of one sequence or more")
        require(self.op_calls >= 10 and self.allreduce_calls >= 1, "op_calls at least 10, allreduce_calls at least 1")
        require(self.steps >= 1 and self.repeats >= 2, "steps at least 1, repeats at least 2 (a spread needs two)")
        require(self.check_steps > self.warmup >= 1, "check_steps more than warmup, warmup at least 1")
        require(bool(self.allreduce_bytes) and min(self.allreduce_bytes) >= 4, "all-reduces of 4 bytes or more")
        missing = [w for w in self.compile_widths if w not in self.widths]
        require(
            self.part != "step" or not missing,
            f"compile_widths={self.compile_widths}: each one of widths={self.widths}",
        )

    def config(self, width: int) -> dict[str, int]:
        """The transformer's sizes at ``width`` (``models.transformer.Config`` fields)."""
        return sizes(self, dim=width)


# --------------------------------------------------------------------------------------------------- calibrate


@dataclasses.dataclass(frozen=True)
class OpCost:
    """One tiny op (``x.add_(1)`` on one element), seconds per call."""

    queued: float
    """Calls back to back, the device waited for once at the end: the CPU's pace when the GPU is faster."""
    waited: float
    """Each call waited for: the round trip of one call."""
    no_kernel: float
    """A view of the same tensor: Python, the dispatcher and a new tensor header, no kernel."""
    graph: float | None
    """Replayed from a CUDA graph (GPU only): the GPU's own cost per kernel, no CPU in the way."""
    replay_host: float | None = None
    """The CPU's time to issue one replay of that graph (GPU only): what a captured step still costs the CPU."""
    eager_gpu: float | None = None
    """The GPU's own time per call when the CPU launched each call on its own, queued behind a sleep (GPU only;
    notebook 10's ``gpu_time``): against :attr:`graph`, what the GPU's front end spends per eager launch. Absent from
    runs before 2026-12-08."""


@dataclasses.dataclass(frozen=True)
class DoublingPoint:
    batch: int
    seconds: float
    """Median of the repeats, per step."""
    repeats: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Sides:
    """One step at one width, its two sides measured apart (before any timing of the step itself)."""

    variant: str
    width: int
    batch: int
    host_s: float
    """Seconds the CPU takes to issue one step onto an idle GPU (on the CPU, the whole step)."""
    gpu_s: float | None
    """Seconds the GPU spends on one step with no CPU in the way (GPU only; None also where the GPU's sleep never
    outlasted the CPU's issuing, so that its own time could not be told apart)."""
    launches: int | None = None
    """Launches the CPU issues per step (kernels, copies, graph launches), counted by the profiler (GPU only)."""
    graph_launches: int | None = None
    kernels: int | None = None
    """GPU operations per step: kernels, copies and memsets (those a graph replays included)."""


@dataclasses.dataclass(frozen=True)
class AllReducePoint:
    nbytes: int
    eager: float
    """Seconds per call back to back (each repeat's slowest rank)."""
    waited: float
    graph: float | None
    """Seconds per call replayed from a CUDA graph (NCCL only)."""


@dataclasses.dataclass(frozen=True)
class CalibrateRank:
    device: str
    op: OpCost
    doubling_width: int
    doubling: tuple[DoublingPoint, ...]
    allreduce: tuple[AllReducePoint, ...]
    """The all-reduce in a world of one: no wire, only what a call costs the host (and NCCL's launch)."""
    sides: tuple[Sides, ...] = ()
    """The eager step's two sides at each lesson width (GPU only)."""
    compiled_host_s: float | None = None
    """The CPU side of the step compiled with ``mode="reduce-overhead"``, predicted before it runs: the floor, the
    fastest of :attr:`compiled_repeats` (GPU only). Where those are empty, an older calibration's: the median of five
    single calls onto an idle GPU, which on one H100 read about 1.15–1.2× the step's pace back to back (review
    RR13-1; ``reference/h100x1/runs-11``). None on the CPU, where its measurement failed (:attr:`compiled_error`),
    and in calibrations made before it was recorded."""
    compiled_repeats: tuple[float, ...] = ()
    """Seconds per step of that compiled step at the floor's tiny width (notebook 10's ``tiny``, one sequence), back to
    back, each repeat as the step part times its runs, after its warm-up; empty in older calibrations (above)."""
    compiled_error: str | None = None
    """Why :attr:`compiled_host_s` is None on a GPU (the exception), when its measurement failed."""


# --------------------------------------------------------------------------------------------------- step


@dataclasses.dataclass(frozen=True)
class VariantRun:
    variant: str
    width: int
    batch: int
    seconds: float
    """Median of the repeats, per step (``steps`` steps timed by the course's timer: CUDA events on a GPU, the host
    clock on the CPU)."""
    repeats: tuple[float, ...]
    sides: Sides
    """Measured before the timing: what the model's prediction for this run is made of."""
    losses: tuple[float, ...]
    """Losses of the checked steps (a graph's from its first replay on)."""
    loss_rel_diff: float
    """Largest |loss − eager's| / |eager's| over the steps both ran (0 for eager itself)."""
    weight_rel_diff: float
    """‖weights − eager's‖ / ‖eager's‖ after the checked steps (all the model's weights as one vector)."""
    compile_s: float | None = None
    """Seconds of the first compiled step (the compile included)."""
    sm_clock_mhz: tuple[int, int] | None = None
    """The lowest and highest SM clock read after the timed repeats (GPU, where NVML says)."""


@dataclasses.dataclass(frozen=True)
class StepRank:
    device: str
    runs: tuple[VariantRun, ...]


# --------------------------------------------------------------------------------------------------- allreduce


@dataclasses.dataclass(frozen=True)
class AllReduceRank:
    rank: int
    world: int
    device: str
    points: tuple[AllReducePoint, ...]


def rank_type(params: Mapping[str, Any]) -> type[CalibrateRank | StepRank | AllReduceRank]:
    """The dataclass one rank of a run with ``params`` returns (by its ``part``)."""
    part = params.get("part", "calibrate")
    return {"calibrate": CalibrateRank, "step": StepRank, "allreduce": AllReduceRank}[part]
