"""p2p_copy: copy-engine bandwidth between two GPUs, each way alone and both ways at once (no NCCL).

Used in notebook 01. One process that sees both GPUs copies with ``dst.copy_(src)`` between
``cuda:src`` and ``cuda:dst``. With peer access (NVLink or PCIe P2P) PyTorch issues a
``cudaMemcpyAsync`` that the copy engines carry over the link: the closest a program gets to the
link's own rate, with no GPU kernel and no NCCL protocol in between.

For each size: one way ``src → dst``, one way ``dst → src``, then both at once, as NVIDIA's
``p2pBandwidthLatencyTest`` measures its bidirectional matrix: each direction on its own pair of
streams (PyTorch runs a cross-device copy on the source GPU's current stream and makes the
destination GPU's current stream wait for it, so copies on the default streams would queue behind
each other), the two directions issued together. Every mode is timed the same way: the host clock
around ``iters`` rounds, both GPUs synchronised at both ends; GB/s are per direction. The rows of
``both at once`` also say how much of the block each direction's stream was busy (CUDA events):
near 100 % for both means the two directions really ran at the same time.

Without 2 GPUs it says so: on a CPU run it times a host ``memcpy`` between two buffers instead,
labelled as a simulation; on a machine with one GPU it returns no rows and a note that it needs 2 GPUs. Each rank
returns a :class:`~nvtutorial.chapters.ch01_hardware.schema_p2p.Rank` (rank 0 copies; others wait).

    torchrun --standalone --nproc-per-node 1 \\
        -m nvtutorial.chapters.ch01_hardware.workload_p2p --set max_bytes=1073741824
    nvtutorial run p2p_copy --nproc 1 --set directions=both
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Literal

from nvtutorial import runtime
from nvtutorial.chapters.ch01_hardware.schema_p2p import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.chapters.ch01_hardware.schema_p2p import Params, Rank, Row


def _block_seconds(ops: list[Callable[[], Any]], iters: int, sync: Callable[[], None]) -> float:
    """Host seconds for ``iters`` rounds of ``ops`` (each op once per round), synchronised at both ends."""
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        for op in ops:
            op()
    sync()
    return time.perf_counter() - t0


def _row(
    path: str,
    mode: Literal["one way", "both at once"],
    size: int,
    iters: int,
    seconds: list[float],
    busy_share: float | None = None,
) -> Row:
    """One direction at one size: the median repeat's time per round, its GB/s and every repeat's."""
    each = tuple(size * iters / s / 1e9 for s in seconds)
    med = statistics.median(seconds)
    return Row(
        path=path,
        mode=mode,
        size=size,
        time_us=med / iters * 1e6,
        gbps=size * iters / med / 1e9,
        gbps_min=min(each),
        gbps_max=max(each),
        gbps_repeats=each,
        iters=iters,
        busy_share=busy_share,
    )


def _iters_for(p: Params, ops: list[Callable[[], Any]], sync: Callable[[], None]) -> int:
    for op in ops:  # the first copy between two devices enables peer access: never time it
        op()
    estimate = _block_seconds(ops, p.warmup, sync) / p.warmup
    return max(1, min(p.iters, int(p.target_s / max(estimate, 1e-9))))


def host_rows(p: Params, a: Any, b: Any, label: str) -> list[Row]:
    """The CPU stand-in: ``b.copy_(a)`` between two host buffers, timed like the GPU copies."""
    rows = []
    for size in p.size_list():
        src, dst = a[:size], b[:size]
        ops = [lambda src=src, dst=dst: dst.copy_(src)]
        iters = _iters_for(p, ops, lambda: None)
        seconds = [_block_seconds(ops, iters, lambda: None) for _ in range(p.repeats)]
        if not dst.equal(src):
            raise AssertionError(f"{label}: the copy of {size} B does not match its source")
        rows.append(_row(label, "one way", size, iters, seconds))
    return rows


def gpu_rows(p: Params, bufs: dict[int, Any], streams: dict[tuple[int, int], tuple[Any, Any]]) -> list[Row]:
    """One way each direction, then both at once, for every size (see the module docstring)."""
    import torch

    a, b = p.src, p.dst

    def sync() -> None:
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)

    def copier(s: int, d: int, size: int) -> Callable[[], None]:
        src, dst = bufs[s][0][:size], bufs[d][1][:size]
        on_src, on_dst = streams[(s, d)]

        def op() -> None:
            with torch.cuda.stream(on_src), torch.cuda.stream(on_dst):  # this direction's own pair of streams
                dst.copy_(src, non_blocking=True)

        return op

    rows: list[Row] = []
    for size in p.size_list():
        modes: list[tuple[Literal["one way", "both at once"], list[tuple[int, int]]]] = []
        if p.directions in ("one", "all"):
            modes.extend([("one way", [(a, b)]), ("one way", [(b, a)])])
        if p.directions in ("both", "all"):
            modes.append(("both at once", [(a, b), (b, a)]))
        for mode, pairs in modes:
            ops = [copier(s, d, size) for s, d in pairs]
            iters = _iters_for(p, ops, sync)
            seconds: list[float] = []
            busy: dict[tuple[int, int], list[float]] = {pair: [] for pair in pairs}
            for _ in range(p.repeats):
                marks = {
                    pair: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for pair in pairs
                }
                seconds.append(_timed(ops, iters, sync, {streams[pair][0]: mark for pair, mark in marks.items()}))
                for pair, (start, end) in marks.items():
                    busy[pair].append(start.elapsed_time(end) / 1e3)
            for s, d in pairs:
                if not (bufs[s][0][:size][-16:].cpu().equal(bufs[d][1][:size][-16:].cpu())):
                    raise AssertionError(f"cuda:{s} → cuda:{d}: the copy of {size} B does not match its source")
                share = (
                    statistics.median(t / w for t, w in zip(busy[(s, d)], seconds)) if mode == "both at once" else None
                )
                rows.append(_row(f"cuda:{s} → cuda:{d}", mode, size, iters, seconds, busy_share=share))
    return rows


def _timed(
    ops: list[Callable[[], Any]], iters: int, sync: Callable[[], None], marks: dict[Any, tuple[Any, Any]]
) -> float:
    """Host seconds of one block of ``iters`` rounds; ``marks`` (stream → start and end events) are recorded
    on each stream just before the first and just after the last copy, to show how long each one was busy."""
    sync()
    t0 = time.perf_counter()
    for stream, (start, _) in marks.items():
        start.record(stream)
    for _ in range(iters):
        for op in ops:
            op()
    for stream, (_, end) in marks.items():
        end.record(stream)
    sync()
    return time.perf_counter() - t0


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch

    sizes = p.size_list()
    if not ctx.is_main:
        return Rank(mode="waits", note="waits while rank 0 copies")
    if not ctx.is_gpu:
        a = torch.randint(0, 255, (max(sizes),), dtype=torch.uint8)
        b = torch.empty_like(a)
        rows = host_rows(p, a, b, "host memcpy (simulation, not a GPU link)")
        return Rank(
            mode="simulation",
            rows=tuple(rows),
            note="CPU run: a copy between two host buffers stands in for the GPU-to-GPU copy",
        )
    count = torch.cuda.device_count()
    if max(p.src, p.dst) >= count:
        return Rank(mode="skipped", note=f"needs 2 GPUs: this process sees {count}")
    devices = (torch.device("cuda", p.src), torch.device("cuda", p.dst))
    peer = {f"{x.index}->{y.index}": bool(torch.cuda.can_device_access_peer(x, y)) for x, y in (devices, devices[::-1])}
    bufs = {}
    for d in devices:  # a source and a destination buffer on each GPU
        bufs[d.index] = (
            torch.randint(0, 255, (max(sizes),), dtype=torch.uint8, device=d),
            torch.empty(max(sizes), dtype=torch.uint8, device=d),
        )
    streams = {(s.index, d.index): (torch.cuda.Stream(s), torch.cuda.Stream(d)) for s, d in (devices, devices[::-1])}
    rows = gpu_rows(p, bufs, streams)
    ctx.progress(1, 1, "device-to-device copy")
    return Rank(
        mode="gpu",
        rows=tuple(rows),
        peer_access=peer,
        timer="host clock, both GPUs synchronised",
        devices=tuple(torch.cuda.get_device_name(d) for d in devices),
    )


if __name__ == "__main__":
    runtime.main(run, Params)
