"""sendrecv_bench: point-to-point bandwidth between rank pairs, one way and both ways at once.

Used in notebook 01. Ranks pair up (0↔1, 2↔3, …). For each size S: ``one way`` sends S bytes
from the even rank to the odd one; ``both ways`` sends S bytes each way at the same time (what
nccl-tests' ``sendrecv_perf`` measures with 2 ranks). Both use ``dist.batch_isend_irecv``, so
NCCL groups the send and the receive (a lone send facing a lone send would deadlock). Reported
per direction: algbw = S / t, and busbw = algbw (nccl-tests' factor for sendrecv is 1); for
``both ways`` ``total_gbps`` adds the two directions. A link is full duplex when ``both ways``
keeps the one-way bandwidth in each direction. Each rank returns a
:class:`~nvtutorial.chapters.ch01_hardware.schema_sendrecv.Rank`.

    torchrun --standalone --nproc-per-node 2 \\
        -m nvtutorial.chapters.ch01_hardware.workload_sendrecv --set max_bytes=1073741824
    nvtutorial run sendrecv_bench --set max_bytes=1048576 --set directions=one
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nvtutorial import runtime
from nvtutorial.chapters.ch01_hardware.schema_sendrecv import (
    NAME as NAME,  # the workload's name, declared by its schema
)
from nvtutorial.chapters.ch01_hardware.schema_sendrecv import Params, Rank, Row
from nvtutorial.chapters.ch01_hardware.workload_bench import bandwidth, measure, torch_dtype


def exchange(ctx: runtime.Context, send: Any, recv: Any, two_way: bool) -> None:
    """One send/receive between this rank and its partner (rank XOR 1), grouped for NCCL."""
    import torch.distributed as dist

    peer = ctx.rank ^ 1
    if two_way:
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    elif ctx.rank % 2 == 0:
        ops = [dist.P2POp(dist.isend, send, peer)]
    else:
        ops = [dist.P2POp(dist.irecv, recv, peer)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch

    if ctx.world_size < 2 or ctx.world_size % 2:
        raise ValueError(
            f"sendrecv_bench pairs ranks 0↔1, 2↔3, …: it needs an even number of processes, got {ctx.world_size}"
        )
    dtype = torch_dtype(p.dtype)
    item = torch.empty((), dtype=dtype).element_size()
    sizes = sorted({max(item, s - s % item) for s in p.size_list()})
    send = torch.full((max(sizes) // item,), float(ctx.rank + 1), dtype=dtype, device=ctx.device)
    recv = torch.zeros_like(send)
    modes = {"one": [False], "two": [True], "both": [False, True]}[p.directions]
    rows: list[Row] = []
    total = len(sizes) * len(modes)
    for two_way in modes:
        for size in sizes:
            n = size // item
            s, r = send[:n], recv[:n]
            r.zero_()
            times, iters = measure(
                ctx,
                lambda s=s, r=r, two_way=two_way: exchange(ctx, s, r, two_way),
                p.warmup,
                p.iters,
                p.repeats,
                p.target_s,
            )
            receives = two_way or ctx.rank % 2 == 1
            ok = (not receives) or bool((r[0] == (ctx.rank ^ 1) + 1).item() and (r[-1] == (ctx.rank ^ 1) + 1).item())
            if not ok:
                raise AssertionError(
                    f"rank {ctx.rank} received {r[0].item()} from rank {ctx.rank ^ 1}, expected {(ctx.rank ^ 1) + 1}"
                )
            measured = bandwidth(ctx, size, times, lambda s, t: s / t / 1e9)
            row = Row(
                size=size,
                direction="both ways" if two_way else "one way",
                iters=iters,
                dtype=p.dtype,
                **dataclasses.asdict(measured),
                total_gbps=measured.algbw * (2 if two_way else 1),
            )
            rows.append(row)
            ctx.progress(len(rows), total, "send/recv sweep", size=size, gbps=round(row.algbw, 2))
    return Rank(
        rows=tuple(rows),
        collective="sendrecv",
        world_size=ctx.world_size,
        dtype=p.dtype,
        timer="cuda events" if ctx.is_gpu else "perf_counter",
    )


if __name__ == "__main__":
    runtime.main(run, Params)
