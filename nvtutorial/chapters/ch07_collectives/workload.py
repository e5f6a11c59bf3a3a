"""collectives_bench: the lessons' ring all-reduce against NCCL's, and the sparse all-reduces, wrong and right.

Used in notebook 07. It runs the code of :mod:`nvtutorial.chapters.ch07_collectives.lessons.collectives` and
:mod:`nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce` as the learner reads it, in four parts:

1. ``ring``: ``ring_all_reduce`` against ``dist.all_reduce`` for each message size: equal
   results, the bytes each rank passed to its sends (counted by wrapping ``torch.distributed``)
   against ``2 (W-1)/W × size``, median time and bus bandwidth, and the ring's share of
   ``all_reduce``'s bus bandwidth, for each number of ``slices`` (pipelining) and, on GPUs with
   ``graph``, replayed from a CUDA graph (no Python between the messages);
2. ``source_cases``: the source's ``sparse_allreduce`` as published and the correct one on the
   same inputs (same non-zero positions on every rank, same count at other positions, other
   counts, random densities per rank), each compared with ``all_reduce`` on every rank;
3. ``indexing``: what ``tensor.nonzero()`` and ``tensor[indices]`` give for 1-D, 2-D, 4-D tensors;
4. ``sparse``: the correct sparse all-reduce against a dense one over densities: bytes and time.

Run it under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: torch then checks every collective's shapes
across ranks first, so the source's ``all_gather`` of unequal sizes raises an error instead of
aborting the process (gloo) or hanging (NCCL); without it those cases are skipped for the
source's version. The timings use a second process group created without those checks. Each rank returns a
:class:`~nvtutorial.chapters.ch07_collectives.schema.Rank` (``schema.py``)::

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc-per-node 2 \\
        -m nvtutorial.chapters.ch07_collectives.workload
    nvtutorial run collectives_bench --nproc 2 --set sizes=4096,1048576 --set repeats=5
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import statistics
from collections.abc import Callable
from typing import Any, Literal

from nvtutorial import runtime
from nvtutorial.chapters.ch07_collectives.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.chapters.ch07_collectives.schema import (
    ONE_SLICE,
    IndexingRow,
    Params,
    Rank,
    RingRow,
    SourceCase,
    SparseRow,
)


def plain_group(backend: str) -> Any:
    """A process group over all ranks created without ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s checks."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import DebugLevel, get_debug_level

    level = get_debug_level()
    dist.set_debug_level(DebugLevel.OFF)  # type: ignore[attr-defined]  # public; torch's stubs do not re-export it
    try:
        return dist.new_group(backend=backend)
    finally:
        dist.set_debug_level(level)  # type: ignore[attr-defined]  # public; torch's stubs do not re-export it


def time_calls(
    ctx: runtime.Context, fn: Callable[[Any], Any], prepare: Callable[[], Any], warmup: int, repeats: int
) -> list[float]:
    """Seconds of each of ``repeats`` calls ``fn(prepare())`` (``prepare`` is not timed), on the
    rank's timer (:meth:`~nvtutorial.runtime.Context.timer`: CUDA events on a GPU, the host clock on the CPU)."""
    for _ in range(warmup):
        fn(prepare())
    ctx.sync()
    ctx.barrier()
    timer = ctx.timer()
    for _ in range(repeats):
        arg = prepare()
        with timer:
            fn(arg)
    return timer.seconds()


def all_true(flag: bool, group: Any, device: Any) -> bool:
    """Whether ``flag`` holds on every rank."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def ring_bytes(numel: int, element_size: int, world: int, rank: int) -> int:
    """Bytes rank ``rank`` sends in ``ring_all_reduce`` of ``numel`` elements: the W-1 chunks it
    sends in each phase, as ``tensor_split`` cuts them (``2 (W-1)/W ×`` the tensor when W divides it)."""
    if world == 1:
        return 0
    sizes = [numel // world + (1 if c < numel % world else 0) for c in range(world)]
    reduce_scatter = sum(sizes[(rank - s) % world] for s in range(world - 1))
    all_gather = sum(sizes[(rank + 1 - s) % world] for s in range(world - 1))
    return (reduce_scatter + all_gather) * element_size


def graph_of(ctx: runtime.Context, fn: Callable[[Any], Any], buffer: Any) -> Any:
    """A CUDA graph of ``fn(buffer)`` (warmed up on a side stream first, as ``torch.cuda.graph`` asks)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(buffer)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(buffer)
    return graph


def _variant(slices: int, graph: bool = False) -> str:
    """The row's name: ``ring, 1 slice``, ``ring, 4 slices``, ``ring, 4 slices, CUDA graph``."""
    name = ONE_SLICE if slices == 1 else f"ring, {slices} slices"
    return f"{name}, CUDA graph" if graph else name


def ring_rows(ctx: runtime.Context, p: Params, group: Any) -> list[RingRow]:
    """Part 1: the ring against ``all_reduce`` for every size and way of running it."""
    import torch
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce
    from nvtutorial.workloads._commcount import counting

    world, rank = ctx.world_size, dist.get_rank(group)
    rows: list[RingRow] = []
    factor = 2 * (world - 1) / world
    for i, size in enumerate(p.sizes):
        numel = size // 4
        x = torch.randn(numel, generator=torch.Generator().manual_seed(p.seed * 1000 + ctx.rank)).to(ctx.device)
        mine, ref = x.clone(), x.clone()
        with counting(world) as count:
            returned = ring_all_reduce(mine, group=group)
        dist.all_reduce(ref, group=group)
        base = RingRow(  # the size's bytes and correctness; each way of running the ring adds its times
            size_bytes=size,
            equal_to_all_reduce=all_true(bool(torch.equal(mine, ref)), group, ctx.device),
            ring_bytes_sent=count.sent,
            ring_bytes_returned=returned,
            ring_bytes_exact=ring_bytes(numel, 4, world, rank),
            formula_bytes=factor * size,
            variant=_variant(1),
            slices=1,
        )
        ref_s = time_calls(ctx, lambda t: dist.all_reduce(t, group=group), x.clone, p.warmup, p.repeats)
        for slices in p.slices:
            fn = functools.partial(ring_all_reduce, group=group, slices=slices)
            rows.append(_timed(base, slices, time_calls(ctx, fn, x.clone, p.warmup, p.repeats), ref_s, factor))
        ctx.progress(i + 1, len(p.sizes), "ring vs all_reduce", size=size)
    return rows


def _timed(
    base: RingRow, slices: int, times: list[float], ref_times: list[float], factor: float, graph: bool = False
) -> RingRow:
    """``base`` (the size's bytes and correctness) timed one way: the ring's and ``all_reduce``'s seconds."""
    ring_s, ref_s, size = statistics.median(times), statistics.median(ref_times), base.size_bytes
    return dataclasses.replace(
        base,
        variant=_variant(slices, graph),
        slices=slices,
        ring_ms=1e3 * ring_s,
        all_reduce_ms=1e3 * ref_s,
        ring_ms_all=tuple(1e3 * t for t in times),
        all_reduce_ms_all=tuple(1e3 * t for t in ref_times),
        ring_busbw_gbs=size * factor / ring_s / 1e9,
        all_reduce_busbw_gbs=size * factor / ref_s / 1e9,
        busbw_ratio=ref_s / ring_s,
        graph=graph,
    )


def graph_rows(ctx: runtime.Context, p: Params, group: Any, cpu_group: Any, ring: list[RingRow]) -> list[RingRow]:
    """The ring replayed from a CUDA graph (GPUs, 1 MiB and more): the same kernels, without Python
    launching them one by one. Run last, and agreed on over a CPU group, so that a rank that cannot
    capture stops every rank's attempt and spoils nothing else."""
    import torch

    from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce

    rows: list[RingRow] = []
    firsts = {r.size_bytes: r for r in ring if r.slices == p.slices[0]}
    for size, base in firsts.items():
        if size < 1 << 20:
            continue
        x = torch.randn(size // 4, generator=torch.Generator().manual_seed(p.seed * 1000 + ctx.rank)).to(ctx.device)
        for slices in p.slices:
            error, graph = None, None
            try:
                graph = graph_of(ctx, lambda t, k=slices: ring_all_reduce(t, group=group, slices=k), x.clone())
            except Exception as exc:  # capture is not supported everywhere (torch, NCCL versions)
                error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
            if not all_true(error is None, cpu_group, "cpu"):
                failed = RingRow(
                    size_bytes=base.size_bytes,
                    equal_to_all_reduce=base.equal_to_all_reduce,
                    formula_bytes=base.formula_bytes,
                    variant=_variant(slices, graph=True),
                    slices=slices,
                    graph=True,
                    error=error or "another rank could not capture the graph",
                )
                return [*rows, failed]
            assert graph is not None  # every rank captured its graph (error is None)
            times = time_calls(ctx, lambda _, g=graph: g.replay(), lambda: None, p.warmup, p.repeats)
            ref = [t / 1e3 for t in base.all_reduce_ms_all]
            rows.append(_timed(base, slices, times, ref, 2 * (ctx.world_size - 1) / ctx.world_size, graph=True))
            graph = None
            torch.cuda.synchronize()
        ctx.progress(len(rows), len(p.slices) * len(firsts), "ring from a CUDA graph")
    return rows


# --------------------------------------------------------------------------------------------
# Sparse all-reduce


def random_sparse(numel: int, density: float, seed: int) -> Any:
    """A 1-D fp32 tensor with about ``density`` of its entries non-zero, the pattern drawn from ``seed``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(numel, generator=g) < density
    values = torch.randn(numel, generator=g)
    values[values == 0] = 1.0  # a drawn zero would make the pattern smaller than asked
    return values * keep


def sparse_with_count(numel: int, count: int, pattern_seed: int, value_seed: int) -> Any:
    """A 1-D tensor with exactly ``count`` non-zeros: positions from ``pattern_seed``, values from ``value_seed``."""
    import torch

    positions = torch.randperm(numel, generator=torch.Generator().manual_seed(pattern_seed))[:count]
    values = torch.randn(count, generator=torch.Generator().manual_seed(value_seed))
    values[values == 0] = 1.0
    out = torch.zeros(numel)
    out[positions] = values
    return out


def cases(p: Params, rank: int) -> list[tuple[str, Any]]:
    """``(name, this rank's input)`` for every correctness case."""
    import torch

    n, base, s = p.case_numel, max(2, p.case_numel // 50), p.seed
    out = [
        ("same positions on every rank", sparse_with_count(n, base, s + 11, s + 100 + rank)),
        ("same count, different positions", sparse_with_count(n, base, s + 20 + rank, s + 200 + rank)),
        ("different counts", sparse_with_count(n, base * (1 + rank), s + 30 + rank, s + 300 + rank)),
    ]
    for c in range(p.random_cases):
        density = 0.02 + 0.48 * float(torch.rand(1, generator=torch.Generator().manual_seed(s * 7919 + 31 * c + rank)))
        out.append((f"random {c + 1}", random_sparse(n, density, s * 104729 + 97 * c + rank)))
    return out


def compare_with_allreduce(x: Any, implementation: str, group: Any) -> dict[str, Any]:
    """One sparse all-reduce of this rank's ``x`` against ``all_reduce`` then ``/ W``.

    ``"source"`` runs the source's function (on the default group, as written; its errors are
    part of the lesson), ``"course"`` the correct one on ``group``. The reference runs first, so
    a failing source call cannot leave a peer waiting in it.
    """
    import torch
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons import sparse_allreduce as lesson

    reference = x.clone()
    dist.all_reduce(reference, group=None if implementation == "source" else group)
    reference /= dist.get_world_size()
    y = x.clone()
    try:
        if implementation == "source":
            lesson.world_size = dist.get_world_size()  # the global the source reads
            lesson.source_sparse_allreduce(y)
        else:
            lesson.sparse_allreduce(y, group=group)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        return {
            "ran": False,
            "exact": False,
            "error": f"{type(exc).__name__}: {first[:300]}",
            "max_abs_error": None,
            "checksum": None,
        }
    # a number that changes when values move between positions: do the ranks hold the same tensor?
    weights = torch.arange(1, y.numel() + 1, dtype=torch.float64, device=y.device)
    return {
        "ran": True,
        "exact": bool(torch.equal(y, reference)),
        "error": None,
        "max_abs_error": float((y - reference).abs().max()) if y.numel() else 0.0,
        "checksum": float((y.double().reshape(-1) * weights).sum()),
    }


def source_rows(ctx: runtime.Context, p: Params, group: Any, detail: bool) -> list[SourceCase]:
    """Part 2: the source's version and the correct one on the same inputs, gathered over ranks."""
    import torch.distributed as dist

    rows = []
    all_cases = cases(p, ctx.rank)
    for i, (name, x) in enumerate(all_cases):
        x = x.to(ctx.device)
        nonzero: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(nonzero, int((x != 0).sum()), group=group)
        impls: tuple[Literal["source", "course"], ...] = ("source", "course")
        for impl in impls:
            if impl == "source" and len(set(nonzero)) > 1 and not detail:
                mine = {
                    "ran": False,
                    "exact": False,
                    "checksum": None,
                    "max_abs_error": None,
                    "error": "skipped: unequal counts; all_gather would abort (gloo) or hang (NCCL). "
                    "Run with TORCH_DISTRIBUTED_DEBUG=DETAIL to see it raise instead",
                }
            else:
                mine = compare_with_allreduce(x, impl, group)
            gathered: list[Any] = [None] * ctx.world_size
            dist.all_gather_object(gathered, mine, group=group)
            ran = all(g["ran"] for g in gathered)
            errs = [g["max_abs_error"] for g in gathered if g["max_abs_error"] is not None]
            rows.append(
                SourceCase(
                    case=name,
                    implementation=impl,
                    nonzero_per_rank=tuple(nonzero),
                    ran=ran,
                    exact=ran and all(g["exact"] for g in gathered),
                    ranks_agree=ran and len({g["checksum"] for g in gathered}) == 1,
                    max_abs_error=max(errs) if errs else None,
                    error=next((g["error"] for g in gathered if g["error"]), None),
                )
            )
        ctx.progress(i + 1, len(all_cases), "sparse all-reduce cases")
    return rows


def indexing_rows() -> list[IndexingRow]:
    """Part 3: what the source's first two lines give for 1-D, 2-D and 4-D tensors with 3 non-zeros."""
    import torch

    rows = []
    for shape in ((8,), (4, 6), (16, 3, 3, 3)):
        t = torch.zeros(shape)
        flat = t.view(-1)
        flat[torch.linspace(0, flat.numel() - 1, steps=3).long()] = 1.0
        indices = t.nonzero()
        values_shape, values_numel, error = None, None, None
        try:
            values = t[indices]
            values_shape, values_numel = tuple(values.shape), values.numel()
        except IndexError as exc:
            error = f"IndexError: {exc}"
        rows.append(IndexingRow(shape, 3, tuple(indices.shape), values_shape, values_numel, error))
    return rows


def sparse_rows(ctx: runtime.Context, p: Params, group: Any) -> list[SparseRow]:
    """Part 4: the correct sparse all-reduce against a dense one, over densities."""
    import torch
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce import sparse_allreduce
    from nvtutorial.workloads._commcount import counting

    def dense(t: Any) -> Any:
        dist.all_reduce(t, group=group)
        return t.div_(ctx.world_size)

    rows: list[SparseRow] = []
    world = ctx.world_size
    for i, density in enumerate(p.densities):
        x = random_sparse(p.sparse_numel, density, p.seed * 31 + ctx.rank).to(ctx.device)
        mine, ref = x.clone(), x.clone()
        with counting(world) as sparse_count:
            sparse_allreduce(mine, group=group)
        with counting(world) as dense_count:
            dense(ref)
        exact = all_true(bool(torch.equal(mine, ref)), group, ctx.device)
        sparse_s = time_calls(ctx, lambda t: sparse_allreduce(t, group=group), x.clone, p.warmup, p.repeats)
        dense_s = time_calls(ctx, dense, x.clone, p.warmup, p.repeats)
        rows.append(
            SparseRow(
                density=density,
                nonzero=int((x != 0).sum()),
                exact=exact,
                sparse_bytes_sent=sparse_count.sent,
                dense_bytes_sent=dense_count.sent,
                bytes_ratio=sparse_count.sent / dense_count.sent,
                sparse_ms=1e3 * statistics.median(sparse_s),
                dense_ms=1e3 * statistics.median(dense_s),
                sparse_ms_all=tuple(1e3 * t for t in sparse_s),
                dense_ms_all=tuple(1e3 * t for t in dense_s),
                time_ratio=statistics.median(sparse_s) / statistics.median(dense_s),
            )
        )
        ctx.progress(i + 1, len(p.densities), "sparse vs dense")
    return rows


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import DebugLevel, get_debug_level

    detail = get_debug_level() == DebugLevel.DETAIL
    if detail:  # DETAIL also logs the size and hash of every all_gather_object's pickle: noise here
        logging.getLogger("torch.distributed.distributed_c10d").setLevel(logging.ERROR)
    print(
        f"rank {ctx.rank}: TORCH_DISTRIBUTED_DEBUG={'DETAIL' if detail else 'off'}; timing on a plain group", flush=True
    )
    group = plain_group(ctx.backend)
    cpu_group = plain_group("gloo") if ctx.backend != "gloo" else group
    ring = ring_rows(ctx, p, group)
    source = source_rows(ctx, p, group, detail)
    sparse = sparse_rows(ctx, p, group)
    if p.graph and ctx.is_gpu:
        ring += graph_rows(ctx, p, group, cpu_group, ring)
    ctx.barrier()
    for g in {id(group): group, id(cpu_group): cpu_group}.values():
        dist.destroy_process_group(g)
    return Rank(
        debug_detail=detail,
        world_size=ctx.world_size,
        ring=tuple(ring),
        ring_all_equal=all(r.equal_to_all_reduce for r in ring),
        source_cases=tuple(source),
        indexing=tuple(indexing_rows()),
        sparse=tuple(sparse),
    )


if __name__ == "__main__":
    runtime.main(run, Params)
