"""allreduce_bench: all-reduce bandwidth over a size sweep (algbw, busbw as nccl-tests defines them).

Used in notebooks 01 and 02. The method is nccl-tests' (``all_reduce_perf``): first ``warmup``
all-reduces of the largest size; then, for each size S, ``warmup`` untimed all-reduces and
``repeats`` timed blocks of ``iters`` back-to-back all-reduces (fewer for slow sizes, so that a
block takes about ``target_s``). Each block is timed by notebook 01's lesson,
:func:`nvtutorial.chapters.ch01_hardware.lessons.busbw.time_all_reduce` (CUDA events on a GPU, the host clock on the
CPU), and converted by its :func:`~nvtutorial.chapters.ch01_hardware.lessons.busbw.bus_bandwidth`:
busbw = S / t × 2(n−1)/n. The time of a block is its slowest rank's; the reported time is the median block. nccl-tests
times one block of ``-n`` (20) with the host clock around it and also runs out of place (separate input
and output buffers); ``torch.distributed.all_reduce`` only works in place. Each size ends with a
correctness check (ranks fill r+1, the sum must be n(n+1)/2 everywhere).

With ``wire_bytes > 0`` on GPUs, rank 0 also reads NVML's NVLink data counters
(``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX``, KiB per link) before and after ``wire_iters``
all-reduces of ``wire_bytes``: the bytes its GPU really put on the wire, to compare with what a
ring all-reduce must send, 2(n−1)/n · S per GPU. Where the counters are missing the metric says
"not available" and why.

Each rank returns a :class:`~nvtutorial.chapters.ch01_hardware.schema_allreduce.Rank`: the rows of the sweep and, on
rank 0, the wire count.

    torchrun --standalone --nproc-per-node 2 \\
        -m nvtutorial.chapters.ch01_hardware.workload_allreduce --set max_bytes=1073741824
    nvtutorial run allreduce_bench --set min_bytes=1024 --set max_bytes=1048576 --set dtype=bfloat16
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

from nvtutorial import nvml, runtime
from nvtutorial.chapters.ch01_hardware.lessons.busbw import bus_bandwidth, time_all_reduce
from nvtutorial.chapters.ch01_hardware.schema_allreduce import (
    NAME as NAME,  # the workload's name, declared by its schema
)
from nvtutorial.chapters.ch01_hardware.schema_allreduce import Params, Rank, Row, Wire
from nvtutorial.chapters.ch01_hardware.workload_bench import bandwidth, measure, torch_dtype

# --- NVLink counters (rank 0, GPU) -------------------------------------------------------------------


def _nvml_handle(pynvml: Any, ctx: runtime.Context) -> Any:
    """The NVML handle of this rank's CUDA device."""
    import torch

    uuid = str(getattr(torch.cuda.get_device_properties(ctx.device), "uuid", "") or "")
    return nvml.handle_for_uuid(pynvml, uuid, ctx.local_rank)[0]


def _stable_counters(pynvml: Any, handle: Any, links: list[int], settle_s: float = 1.0) -> dict[int, tuple[int, int]]:
    """Counters read until two reads 50 ms apart agree (NVML updates them a little after the traffic)."""
    end = time.monotonic() + settle_s
    last = nvml.nvlink_counters(pynvml, handle, links)
    while time.monotonic() < end:
        time.sleep(0.05)
        now = nvml.nvlink_counters(pynvml, handle, links)
        if now == last:
            break
        last = now
    return last


def wire_bytes(ctx: runtime.Context, buf: Any, size: int, iters: int) -> Wire | None:
    """Bytes rank 0's GPU sent and received over NVLink per all-reduce of ``size`` bytes, vs the ring formula (every
    rank joins the all-reduces; the others get None)."""
    import torch.distributed as dist

    expected = 2 * (ctx.world_size - 1) / ctx.world_size * size

    def missing(reason: str) -> Wire:
        return Wire(size=size, iters=iters, expected_bytes_per_op=expected, available=False, reason=reason)

    if not ctx.is_gpu:
        return missing("CPU run: no NVLink counters (a simulation has no wire to count)")
    x = buf[: size // buf.element_size()]
    x.zero_()
    with contextlib.ExitStack() as stack:
        pynvml = stack.enter_context(nvml.nvml()) if ctx.is_main else None
        reason = None
        handle: Any = None
        links: list[int] = []
        before: dict[int, tuple[int, int]] = {}
        if ctx.is_main:
            try:
                handle = _nvml_handle(pynvml, ctx) if pynvml is not None else None
                links = nvml.active_nvlinks(pynvml, handle) if handle is not None else []
                if handle is None:
                    reason = "NVML not available"
                elif not links:
                    reason = "this GPU has no active NVLink: nothing to count"
                else:
                    before = _stable_counters(pynvml, handle, links, settle_s=0.3)
                    if not before:
                        reason = "NVML reports no NVLink data counters for this GPU (not supported by this driver)"
            except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported, FunctionNotFound on old drivers
                reason = f"NVML could not read NVLink counters: {type(exc).__name__}: {exc}"
        ctx.barrier()
        for _ in range(iters):
            dist.all_reduce(x)
        ctx.sync()
        after: dict[int, tuple[int, int]] = {}
        if ctx.is_main and reason is None:
            try:
                after = _stable_counters(pynvml, handle, links)
            except Exception as exc:  # noqa: BLE001 - any NVML failure becomes "not available"
                reason = f"NVML could not read NVLink counters after the run: {type(exc).__name__}: {exc}"
        ctx.barrier()
    if not ctx.is_main:
        return None
    if reason is not None:
        return missing(reason)
    read = sorted(set(before) & set(after))
    tx = [(after[k][0] - before[k][0]) * 1024 for k in read]  # the counters are in KiB
    rx = [(after[k][1] - before[k][1]) * 1024 for k in read]
    carrying = [k for k, t in zip(read, tx) if t > 0]
    return Wire(
        size=size,
        iters=iters,
        expected_bytes_per_op=expected,
        available=True,
        links_read=len(read),
        links_carrying=len(carrying),
        tx_bytes_per_op=sum(tx) / iters,
        rx_bytes_per_op=sum(rx) / iters,
        tx_ratio=sum(tx) / iters / expected if expected else None,
        rx_ratio=sum(rx) / iters / expected if expected else None,
        tx_bytes_per_link_per_op={str(k): t / iters for k, t in zip(read, tx) if t > 0},
    )


# --- The workload ----------------------------------------------------------------------------------


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch
    import torch.distributed as dist

    dtype = torch_dtype(p.dtype)
    item = torch.empty((), dtype=dtype).element_size()
    sizes = sorted({max(item, s - s % item) for s in p.size_list()})
    buf = torch.zeros(max(max(sizes), p.wire_bytes) // item + 1, dtype=dtype, device=ctx.device)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    for _ in range(p.warmup):  # as nccl-tests: warm up at the largest size before the sweep
        dist.all_reduce(buf[: sizes[-1] // item])
    ctx.sync()
    rows: list[Row] = []
    for i, size in enumerate(sizes):
        x = buf[: size // item]
        x.zero_()  # sums of zeros stay zero: no overflow in fp16 whatever the iteration count
        times, iters = measure(
            ctx,
            lambda x=x: dist.all_reduce(x),
            p.warmup,
            p.iters,
            p.repeats,
            p.target_s,
            timed=lambda n, x=x: time_all_reduce(x, n),
        )
        x.fill_(ctx.rank + 1)
        dist.all_reduce(x)
        ok = bool((x[0] == expected).item() and (x[-1] == expected).item())
        if not ok:
            raise AssertionError(f"all-reduce of {size} B gave {x[0].item()} on rank {ctx.rank}, expected {expected}")
        measured = bandwidth(ctx, size, times, lambda s, t: bus_bandwidth(s, t, ctx.world_size))
        rows.append(
            Row(size=size, count=size // item, dtype=p.dtype, iters=iters, correct=ok, **dataclasses.asdict(measured))
        )
        ctx.progress(i + 1, len(sizes), "all-reduce sweep", size=size, busbw=round(rows[-1].busbw, 2))
    wire = None
    if p.wire_bytes:
        size = max(item, p.wire_bytes - p.wire_bytes % item)
        counted = wire_bytes(ctx, buf, size, p.wire_iters)  # every rank joins its all-reduces
        wire = counted if ctx.is_main else None
    return Rank(
        rows=tuple(rows),
        collective="all_reduce",
        world_size=ctx.world_size,
        dtype=p.dtype,
        timer="cuda events" if ctx.is_gpu else "perf_counter",
        largest_size=rows[-1].size,
        busbw_at_largest=rows[-1].busbw,
        wire=wire,
    )


if __name__ == "__main__":
    runtime.main(run, Params)
