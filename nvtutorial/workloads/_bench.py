"""Worker helpers shared by the bandwidth workloads (``allreduce_bench``, ``sendrecv_bench``): timed
repeats with every rank aligned, agreement between ranks, and one row of algbw/busbw per size."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from nvtutorial import runtime


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def measure(ctx: runtime.Context, op: Callable[[], Any], warmup: int, iters: int, repeats: int,
            target_s: float) -> tuple[list[float], int]:
    """Per-call seconds of each repeat (every rank aligned by a barrier first) and the iterations used.

    The first warm-up call is untimed (it may set up connections); the others estimate the
    per-call time, from which ``iters`` is reduced so that a repeat takes about ``target_s``.
    """
    op()
    ctx.sync()
    estimate = ctx.time_calls(op, warmup - 1) if warmup > 1 else None
    if estimate is not None:
        iters = max(1, min(iters, int(target_s / max(estimate, 1e-9))))
    iters = agree_min(ctx, iters)
    times = []
    for _ in range(repeats):
        ctx.barrier()
        times.append(ctx.time_calls(op, iters))
    return times, iters


def agree_min(ctx: runtime.Context, value: int) -> int:
    """The smallest ``value`` over ranks (every rank must run the same number of collectives)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def slowest(ctx: runtime.Context, seconds: float) -> float:
    """The largest value over ranks (the slowest rank decides a collective's time)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def bandwidth_row(ctx: runtime.Context, size: int, times: list[float], factor: float, **extra: Any) -> dict[str, Any]:
    """Median/min/max over repeats → time (µs), algbw, busbw (GB/s), with the repeats' spread."""
    med = slowest(ctx, statistics.median(times))
    fastest, slowest_repeat = slowest(ctx, min(times)), slowest(ctx, max(times))
    return {"size": size, **extra, "time_us": med * 1e6, "algbw": size / med / 1e9, "busbw": size / med / 1e9 * factor,
            "busbw_min": size / slowest_repeat / 1e9 * factor, "busbw_max": size / fastest / 1e9 * factor,
            "repeats": len(times)}
