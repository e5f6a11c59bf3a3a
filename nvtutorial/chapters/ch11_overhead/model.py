"""The overhead regime in plain numbers (notebook 11), on notebook 10's cost model.

A step has two sides: the **CPU** issues its kernels one call at a time (Python, PyTorch's dispatcher, the launch),
and the **GPU** runs them. The CPU issues ahead while the GPU works, so the slower side sets the pace: a step takes
``max(CPU, GPU)`` at best and ``CPU + GPU`` at worst (notebook 10's ``eager_bounds``). When the CPU's side is the
larger, the step is **overhead-bound**: more work per kernel (a larger batch) costs almost nothing, and so does a
faster GPU; a CUDA graph, which issues every kernel with one launch, removes most of the CPU's side. Plain functions
of plain numbers, in seconds, FLOPs and tokens; no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from nvtutorial.chapters.ch10_cost_model.model import eager_bounds, forward_flops

Side = Literal["CPU", "GPU"]

# %% a step's two sides


def step_time(cpu_s: float, gpu_s: float) -> float:
    """Seconds per step when the CPU takes ``cpu_s`` to issue it and the GPU ``gpu_s`` to run it: the slower side,
    since the CPU queues work ahead while the GPU runs the work queued before (the lower bound of
    :func:`~nvtutorial.chapters.ch10_cost_model.model.eager_bounds`, their sum the upper)."""
    return eager_bounds(cpu_s, gpu_s)[0]


def slower_side(cpu_s: float, gpu_s: float) -> Side:
    """Which side sets the pace: ``CPU`` (overhead-bound) when issuing takes longer than running."""
    return "CPU" if cpu_s > gpu_s else "GPU"


def per_launch(cpu_s: float, launches: int) -> float:
    """The CPU's cost per launch: its time to issue a step over the launches (kernels, copies) it issued."""
    return cpu_s / launches


# %% the batch-doubling test

OVERHEAD_RATIO = 1.3
"""Doubling the batch raised the time per step by less than this factor: the work doubled, the time barely moved,
so something other than the work sets it: overhead (Horace He's test)."""
WORK_RATIO = 1.7
"""Doubling the batch raised the time by at least this factor: the time follows the work."""
NOISE_RATIO = 0.95
"""Twice the work took less than this share of the time: no regime does that; the timings moved (a busy machine)."""
Regime = Literal["noise", "overhead", "crossover", "work"]


def doubling_ratios(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """``(batch, t(2·batch) / t(batch))`` for each batch whose double was measured too (``points``: batch, seconds)."""
    times = dict(points)
    return [(b, times[2 * b] / t) for b, t in sorted(times.items()) if 2 * b in times]


def doubling_regime(ratio: float) -> Regime:
    """What doubling the batch says: ``overhead`` below :data:`OVERHEAD_RATIO`, ``work`` from :data:`WORK_RATIO`,
    ``crossover`` in between (the two sides are close); ``noise`` below :data:`NOISE_RATIO` (faster with twice the
    work: the timings moved)."""
    if ratio < NOISE_RATIO:
        return "noise"
    if ratio < OVERHEAD_RATIO:
        return "overhead"
    return "work" if ratio >= WORK_RATIO else "crossover"


def crossover_batch(points: Sequence[tuple[int, float]], floor: float | None = None) -> float:
    """The batch at which the step's work catches up with its floor, from a doubling sweep (``points``: batch,
    seconds per step): ``t(B) ≈ max(floor, B · k)`` with the floor the smallest batch's time (unless given) and ``k``
    the largest batch's seconds per sequence, so ``B* = floor / k``. Only a sweep whose largest batch left the floor
    (:func:`left_the_floor`) places it; otherwise it is a lower bound."""
    ordered = sorted(points)
    (_, smallest), (largest, t_largest) = ordered[0], ordered[-1]
    return (smallest if floor is None else floor) / (t_largest / largest)


def overhead_floor(points: Sequence[tuple[int, float]]) -> float:
    """The sweep's floor: the median time of the batches of its *leading* run of doublings that read ``overhead``
    (:func:`leading_flat`), else the smallest batch's time. Review R7-17: one smallest batch can sit below a flat
    stretch (3.61 ms under 7.8 ms); review RR7-2: an overhead doubling after the time already followed the work is
    noise, not the floor (a CPU's 8 → 16 at ×1.25 after ×1.55, ×1.46, ×1.74 gave a floor of 10.7 ms, 3.9× batch 1's)."""
    times = dict(points)
    flat = leading_flat(points)
    return statistics.median(times[b] for b in flat) if flat else times[min(times)]


def leading_flat(points: Sequence[tuple[int, float]]) -> list[int]:
    """The batches whose doubling reads ``overhead``, contiguous from the start of the sweep: the first doubling may
    read anything (a first step off the floor, cold above it or below it) and the leading ``noise`` ones are
    skipped (a warming machine: faster with twice the work); the run ends at the first doubling that reads otherwise.
    Empty when the first such doubling after those reads ``crossover`` or ``work``."""
    ratios = doubling_ratios(points)
    start = 1 if ratios and doubling_regime(ratios[0][1]) != "overhead" else 0
    while start < len(ratios) and doubling_regime(ratios[start][1]) == "noise":
        start += 1
    flat = []
    for batch, ratio in ratios[start:]:
        if doubling_regime(ratio) != "overhead":
            break
        flat.append(batch)
    return flat


def left_the_floor(points: Sequence[tuple[int, float]], floor: float | None = None) -> bool:
    """Whether the largest batch's time is at least twice the floor (the smallest batch's time unless given): its
    time then follows the work. Against the floor, not the smallest batch alone: a cold first step (8 ms against a
    3.2 ms floor on one H100) must not hide a sweep that left it."""
    ordered = sorted(points)
    return ordered[-1][1] >= 2 * (ordered[0][1] if floor is None else floor)


# %% the crossovers


def step_flops(tokens: int, seq_len: int, dim: int, hidden: int, layers: int, vocab: int) -> float:
    """FLOPs of one training step over ``tokens`` tokens: three forward passes' worth (notebook 10's count)."""
    return 3 * forward_flops(tokens, seq_len, dim, hidden, layers, vocab)


def overhead_crossover_tokens(cpu_s: float, flops_per_token: float, rate: float) -> float:
    """Tokens per step above which the GPU's work (``flops_per_token`` each at ``rate`` FLOP/s) outlasts the CPU's
    ``cpu_s`` of issuing: ``cpu_s · rate / flops_per_token``. Below it the step is overhead-bound."""
    return cpu_s * rate / flops_per_token
