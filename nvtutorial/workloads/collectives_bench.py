"""collectives_bench: a ring all-reduce by hand against NCCL's, and sparse all-reduces, wrong and right.

Used in notebook 07. Four parts, in one run:

1. ``ring``: :func:`nvtutorial.lessons.collectives.ring_all_reduce` (reduce-scatter then all-gather
   with ``batch_isend_irecv``) against ``dist.all_reduce`` over message sizes: equal results,
   bytes sent against the formula ``2 (W-1)/W × size``, median time and bus bandwidth of each;
2. ``source``: the source tutorial's ``sparse_allreduce`` as published and the course's
   :func:`~nvtutorial.lessons.collectives.sparse_allreduce` on the same inputs (same non-zero pattern on
   every rank, same count at different positions, different counts, random densities per
   rank), each compared with ``all_reduce`` on every rank;
3. ``indexing``: what ``tensor.nonzero()`` and ``tensor[indices]`` give for 1-D, 2-D and 4-D
   tensors (no communication);
4. ``sparse``: the correct sparse all-reduce against a dense one over densities: time and bytes.

Run it under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: torch then checks every collective's shapes
across ranks before running it, so the source's ``all_gather`` of unequal sizes raises a
``RuntimeError`` instead of aborting the process (gloo) or hanging (NCCL). Without DETAIL the
cases with unequal counts are skipped for the source's version, and the row says why. The
timings use a second process group created without those checks (they add a round trip per
collective)::

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.collectives_bench
    nvtutorial run collectives_bench --nproc 2 --set sizes=4096,1048576 --set repeats=5
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Callable
from typing import Any

from nvtutorial import runtime
from nvtutorial.params import require


@dataclasses.dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (4096, 65536, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28)
    """Message sizes in bytes (fp32) for the ring against ``all_reduce``."""
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
        require(bool(self.sizes) and all(s >= 4 and s % 4 == 0 for s in self.sizes),
                f"sizes={self.sizes}: give byte counts, multiples of 4 (fp32)")
        require(self.warmup >= 0 and self.repeats >= 1,
                f"warmup={self.warmup}, repeats={self.repeats}: need warmup >= 0 and repeats >= 1")
        require(self.sparse_numel >= 1 and self.case_numel >= 16, "sparse_numel >= 1 and case_numel >= 16")
        require(all(0 < d <= 1 for d in self.densities), f"densities={self.densities} must be in (0, 1]")
        require(self.random_cases >= 0, f"random_cases={self.random_cases} must be 0 or more")


def plain_group(backend: str) -> Any:
    """A process group over all ranks created without ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s checks."""
    import torch.distributed as dist

    level = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.OFF)
    try:
        return dist.new_group(backend=backend)
    finally:
        dist.set_debug_level(level)


def time_calls(ctx: runtime.Context, fn: Callable[[Any], Any], prepare: Callable[[], Any],
               warmup: int, repeats: int) -> float:
    """Median seconds of ``fn(prepare())`` (``prepare`` is not timed), on the rank's timer
    (:meth:`~nvtutorial.runtime.Context.timer`: CUDA events on a GPU, the host clock on the CPU)."""
    for _ in range(warmup):
        fn(prepare())
    ctx.sync()
    ctx.barrier()
    timer = ctx.timer()
    for _ in range(repeats):
        arg = prepare()
        with timer:
            fn(arg)
    return statistics.median(timer.seconds())


def _all_true(flag: bool, group: Any, device: Any) -> bool:
    import torch
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def ring_rows(ctx: runtime.Context, p: Params, group: Any) -> list[dict[str, Any]]:
    """Part 1: the ring against ``all_reduce`` for every size."""
    import torch
    import torch.distributed as dist

    from nvtutorial.lessons import collectives as col

    world, rows = ctx.world_size, []
    for i, size in enumerate(p.sizes):
        numel = size // 4
        gen = torch.Generator(device=ctx.device).manual_seed(p.seed * 1000 + ctx.rank)
        x = torch.randn(numel, generator=gen, device=ctx.device)
        mine, ref = x.clone(), x.clone()
        counter = col.ByteCounter(world)
        col.ring_all_reduce(mine, group=group, counter=counter)
        dist.all_reduce(ref, group=group)
        equal = _all_true(bool(torch.equal(mine, ref)), group, ctx.device)
        formula = col.ring_allreduce_bytes(size, world)
        exact = col.ring_bytes_exact(numel, 4, world, dist.get_rank(group))
        ring_s = time_calls(ctx, lambda t: col.ring_all_reduce(t, group=group), x.clone, p.warmup, p.repeats)
        nccl_s = time_calls(ctx, lambda t: dist.all_reduce(t, group=group), x.clone, p.warmup, p.repeats)
        factor = 2 * (world - 1) / world
        rows.append({
            "size_bytes": size,
            "equal_to_all_reduce": equal,
            "ring_bytes_sent": counter.sent,
            "ring_bytes_exact": exact,
            "formula_bytes": formula,
            "ring_ms": 1e3 * ring_s,
            "all_reduce_ms": 1e3 * nccl_s,
            "ring_busbw_gbs": size * factor / ring_s / 1e9,
            "all_reduce_busbw_gbs": size * factor / nccl_s / 1e9,
            "ring_over_all_reduce": ring_s / nccl_s,
        })
        ctx.progress(i + 1, len(p.sizes), "ring vs all_reduce", size=size)
    return rows


def _cases(p: Params, rank: int) -> list[tuple[str, Any]]:
    """``(name, this rank's 1-D input)`` for every correctness case."""
    import torch

    from nvtutorial.lessons import collectives as col

    n, base = p.case_numel, max(2, p.case_numel // 50)
    s = p.seed
    cases = [
        ("same positions on every rank", col.sparse_with_count(n, base, s + 11, s + 100 + rank)),
        ("same count, different positions", col.sparse_with_count(n, base, s + 20 + rank, s + 200 + rank)),
        ("different counts", col.sparse_with_count(n, base * (1 + rank), s + 30 + rank, s + 300 + rank)),
    ]
    for c in range(p.random_cases):
        g = torch.Generator().manual_seed(s * 7919 + 31 * c + rank)
        density = 0.02 + 0.48 * float(torch.rand(1, generator=g))
        cases.append((f"random {c + 1}: density {density:.0%} on rank {rank}",
                      col.random_sparse((n,), density, s * 104729 + 97 * c + rank)))
    return cases


def source_rows(ctx: runtime.Context, p: Params, group: Any, detail: bool) -> list[dict[str, Any]]:
    """Part 2: the source's version and the course's on the same inputs, gathered over ranks."""
    import torch
    import torch.distributed as dist

    from nvtutorial.lessons import collectives as col

    rows = []
    cases = _cases(p, ctx.rank)
    for i, (name, x) in enumerate(cases):
        x = x.to(ctx.device)
        counts = torch.tensor([int((x != 0).sum())], device=ctx.device)
        all_counts = [torch.zeros_like(counts) for _ in range(ctx.world_size)]
        dist.all_gather(all_counts, counts, group=group)
        nonzero = [int(c.item()) for c in all_counts]
        for impl in ("source", "course"):
            if impl == "source" and len(set(nonzero)) > 1 and not detail:
                mine = {"ran": False, "exact": False, "checksum": None, "max_abs_error": None,
                        "error": "skipped: unequal counts; all_gather would abort (gloo) or hang (NCCL). "
                                 "Run with TORCH_DISTRIBUTED_DEBUG=DETAIL to see it raise instead"}
            else:
                mine = col.compare_with_allreduce(x, impl, group=group)
            gathered: list[Any] = [None] * ctx.world_size
            dist.all_gather_object(gathered, mine, group=group)
            ran = all(g["ran"] for g in gathered)
            checksums = {g["checksum"] for g in gathered}
            errors = [g["error"] for g in gathered if g["error"]]
            errs = [g["max_abs_error"] for g in gathered if g["max_abs_error"] is not None]
            rows.append({
                "case": name.split(":")[0] if name.startswith("random") else name,
                "implementation": impl,
                "nonzero_per_rank": nonzero,
                "ran": ran,
                "exact": ran and all(g["exact"] for g in gathered),
                "ranks_agree": ran and len(checksums) == 1,
                "max_abs_error": max(errs) if errs else None,
                "error": errors[0] if errors else None,
            })
        ctx.progress(i + 1, len(cases), "sparse all-reduce cases")
    return rows


def sparse_rows(ctx: runtime.Context, p: Params, group: Any) -> list[dict[str, Any]]:
    """Part 4: correct sparse all-reduce against dense, over densities."""
    import torch

    from nvtutorial.lessons import collectives as col

    rows, world = [], ctx.world_size
    for i, density in enumerate(p.densities):
        x = col.random_sparse((p.sparse_numel,), density, p.seed * 31 + ctx.rank, device=ctx.device)
        counter = col.ByteCounter(world)
        mine = col.sparse_allreduce(x.clone(), group=group, counter=counter)
        ref = col.dense_allreduce_mean(x.clone(), group=group)
        exact = _all_true(bool(torch.equal(mine, ref)), group, ctx.device)
        sparse_s = time_calls(ctx, lambda t: col.sparse_allreduce(t, group=group), x.clone, p.warmup, p.repeats)
        dense_s = time_calls(ctx, lambda t: col.dense_allreduce_mean(t, group=group), x.clone, p.warmup, p.repeats)
        dense_bytes = col.ring_allreduce_bytes(p.sparse_numel * 4, world)
        rows.append({
            "density": density,
            "nonzero": int((x != 0).sum()),
            "exact": exact,
            "sparse_bytes_sent": counter.sent,
            "dense_bytes_sent": dense_bytes,
            "bytes_ratio": counter.sent / dense_bytes if dense_bytes else float("nan"),
            "sparse_ms": 1e3 * sparse_s,
            "dense_ms": 1e3 * dense_s,
            "time_ratio": sparse_s / dense_s,
        })
        ctx.progress(i + 1, len(p.densities), "sparse vs dense")
    return rows


def run(ctx: runtime.Context, p: Params) -> dict:
    import torch.distributed as dist

    from nvtutorial.lessons import collectives as col

    detail = dist.get_debug_level() == dist.DebugLevel.DETAIL
    if detail:  # DETAIL also logs the size and hash of every all_gather_object's pickle: noise here
        logging.getLogger("torch.distributed.distributed_c10d").setLevel(logging.ERROR)
    print(f"rank {ctx.rank}: TORCH_DISTRIBUTED_DEBUG={'DETAIL' if detail else 'off'}; timing on a plain group",
          flush=True)
    group = plain_group(ctx.backend)
    ring = ring_rows(ctx, p, group)
    source = source_rows(ctx, p, group, detail)
    indexing = [col.source_indexing_shapes(s) for s in ((8,), (4, 6), (16, 3, 3, 3))]
    sparse = sparse_rows(ctx, p, group)
    ctx.barrier()
    dist.destroy_process_group(group)
    return {
        "debug_detail": detail,
        "world_size": ctx.world_size,
        "ring": ring,
        "ring_all_equal": all(r["equal_to_all_reduce"] for r in ring),
        "source_cases": source,
        "indexing": indexing,
        "sparse": sparse,
    }


if __name__ == "__main__":
    runtime.main(run, Params)
