"""Worker helpers shared by the bandwidth workloads (``allreduce_bench``, ``sendrecv_bench``): timed
repeats with every rank aligned, agreement between ranks, and the algbw/busbw of one size (:class:`Bandwidth`, the
part every row of their schemas shares)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

from nvtutorial import runtime


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def measure(
    ctx: runtime.Context,
    op: Callable[[], Any],
    warmup: int,
    iters: int,
    repeats: int,
    target_s: float,
    timed: Callable[[int], float] | None = None,
) -> tuple[list[float], int]:
    """Per-call seconds of each repeat (every rank aligned by a barrier first) and the iterations used.

    The first warm-up call is untimed (it may set up connections); the others estimate the
    per-call time, from which ``iters`` is reduced so that a repeat takes about ``target_s``.
    ``timed(n)`` times ``n`` back-to-back calls (default: ``ctx.time_calls(op, n)``), so a workload can
    time with the lesson's own function.
    """
    timed = timed or (lambda n: ctx.time_calls(op, n))
    op()
    ctx.sync()
    estimate = timed(warmup - 1) if warmup > 1 else None
    if estimate is not None:
        iters = max(1, min(iters, int(target_s / max(estimate, 1e-9))))
    iters = agree_min(ctx, iters)
    times = []
    for _ in range(repeats):
        ctx.barrier()
        times.append(timed(iters))
    return times, iters


def agree_min(ctx: runtime.Context, value: int) -> int:
    """The smallest ``value`` over ranks (every rank must run the same number of collectives)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def slowest(ctx: runtime.Context, seconds: list[float]) -> list[float]:
    """Each value's largest over the ranks (the slowest rank decides a collective's time)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(seconds, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


@dataclasses.dataclass(frozen=True)
class Bandwidth:
    """The measured part of a row of ``schema_allreduce.Row`` or ``schema_sendrecv.Row``, in their order (a row is
    built with ``Row(size=..., <its own fields>, **dataclasses.asdict(bandwidth))``)."""

    time_us: float
    """The median repeat's time per call, µs."""
    algbw: float
    """S ÷ time, GB/s."""
    busbw: float
    """``busbw(size, seconds)`` of the median time, GB/s."""
    busbw_min: float
    busbw_max: float
    repeats: int
    busbw_repeats: tuple[float, ...]
    """Every repeat's busbw (what :func:`~nvtutorial.report.verdict.compare` reads)."""


def bandwidth(ctx: runtime.Context, size: int, times: list[float], busbw: Callable[[int, float], float]) -> Bandwidth:
    """One size: the slowest rank's time of each repeat → the median time (µs), algbw and ``busbw(size, seconds)``
    (GB/s), the range over the repeats, and every repeat's busbw."""
    per_repeat = slowest(ctx, times)
    med = statistics.median(per_repeat)
    each = tuple(busbw(size, t) for t in per_repeat)
    return Bandwidth(
        time_us=med * 1e6,
        algbw=size / med / 1e9,
        busbw=busbw(size, med),
        busbw_min=min(each),
        busbw_max=max(each),
        repeats=len(times),
        busbw_repeats=each,
    )
