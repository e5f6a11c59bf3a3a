"""gpu_links: the links one GPU has, measured with copies: its memory, and its PCIe link to the host (no NCCL).

Used in notebook 01 (the part "one GPU's links"). One process copies with ``dst.copy_(src)`` on its GPU:

- **memory**: from one buffer on the GPU to another. PyTorch issues a device-to-device ``cudaMemcpyAsync``, which
  reads S bytes from the GPU's memory and writes S bytes back: 2 S bytes per copy, counted as the memory's datasheet
  bandwidth counts them (reads and writes together);
- **host to device** and **device to host** over PCIe, from **pinned** (page-locked) host memory, which the GPU's
  copy engines reach directly, and from **pageable** memory, which the CUDA driver first copies through a pinned
  staging buffer of its own with the CPU.

For each size and link: ``warmup`` untimed copies (the first touches of the buffers), then ``repeats`` blocks of
``iters`` back-to-back copies, each block timed with two CUDA events on the current stream: the GPU's clock from the
block's first copy to its last. A pinned copy is queued (``non_blocking=True``); a pageable one returns to Python only
when it is done (``copy_`` synchronises the stream), which the events include. GB/s per block; the row keeps the
median block and every block's GB/s, and the GPU's L2 cache size: a device copy whose 2 S bytes fit in it (16 MiB on
an H100's 50 MiB) measures the cache, not the memory. One rank copies; a process without a GPU copies nothing and
says so.

    torchrun --standalone --nproc-per-node 1 -m nvtutorial.chapters.ch01_hardware.workload_gpu_links
    nvtutorial run gpu_links --nproc 1 --backend nccl --set sizes=16777216,268435456,1073741824
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from nvtutorial import runtime
from nvtutorial.chapters.ch01_hardware.schema_gpu_links import (
    NAME as NAME,  # the workload's name, declared by its schema
)
from nvtutorial.chapters.ch01_hardware.schema_gpu_links import Host, Link, Params, Rank, Row


def _copies(size: int, buffers: dict[str, Any]) -> list[tuple[Link, Host, Callable[[], Any], Any, Any]]:
    """(link, host memory, the copy, its source, its destination) for every link at ``size`` bytes."""
    gpu_a, gpu_b = buffers["gpu a"][:size], buffers["gpu b"][:size]
    pinned, pageable = buffers["pinned"][:size], buffers["pageable"][:size]
    return [
        ("host to device", "pinned", lambda: gpu_b.copy_(pinned, non_blocking=True), pinned, gpu_b),
        ("device to host", "pinned", lambda: pinned.copy_(gpu_a, non_blocking=True), gpu_a, pinned),
        ("host to device", "pageable", lambda: gpu_b.copy_(pageable), pageable, gpu_b),
        ("device to host", "pageable", lambda: pageable.copy_(gpu_a), gpu_a, pageable),
        ("memory", "device", lambda: gpu_b.copy_(gpu_a), gpu_a, gpu_b),
    ]


def _sync(dev: Any) -> None:
    if dev.type == "cuda":
        import torch

        torch.cuda.synchronize(dev)


def _measure(p: Params, dev: Any, link: Link, host: Host, size: int, copy: Callable[[], Any]) -> Row:
    """Warm-up copies, then ``repeats`` timed blocks of the same copy: one :class:`Row`."""
    for _ in range(p.warmup):
        copy()
    _sync(dev)  # the warm-up copies are done before the first timed one
    estimate = runtime.time_calls(copy, 1, device=dev)
    iters = max(1, min(p.iters, int(p.target_s / max(estimate, 1e-9))))
    seconds = [runtime.time_calls(copy, iters, device=dev) for _ in range(p.repeats)]
    moved = 2 * size if link == "memory" else size
    each = tuple(moved / s / 1e9 for s in seconds)
    med = statistics.median(seconds)
    return Row(link, host, size, moved, med * 1e6, moved / med / 1e9, each, iters)


def measure(p: Params, dev: Any, buffers: dict[str, Any], progress: Callable[..., None] | None = None) -> list[Row]:
    """Every link at every size, each copy checked against its source. ``buffers``: ``gpu a`` and ``gpu b`` on
    ``dev``, ``pinned`` and ``pageable`` on the host, each of the largest size (on a CPU ``dev``, the tests' case,
    the host clock times the blocks)."""
    rows = []
    sizes = sorted(set(p.sizes))
    for i, size in enumerate(sizes):
        for link, host, copy, src, dst in _copies(size, buffers):
            rows.append(_measure(p, dev, link, host, size, copy))
            _sync(dev)
            if not src[-16:].cpu().equal(dst[-16:].cpu()):
                raise AssertionError(f"{link} ({host}): the copy of {size} B does not match its source")
        if progress is not None:
            progress(i + 1, len(sizes), "one GPU's links", size=size)
    return rows


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch

    if not ctx.is_main:
        return Rank("skipped", note="one rank copies: this one waited")
    if not ctx.is_gpu:
        return Rank("skipped", note="no GPU in this process: its links cannot be measured (nothing was copied)")
    dev, largest = ctx.device, max(p.sizes)
    buffers = {
        "gpu a": torch.randint(0, 255, (largest,), dtype=torch.uint8, device=dev),
        "gpu b": torch.empty(largest, dtype=torch.uint8, device=dev),
        "pinned": torch.empty(largest, dtype=torch.uint8, pin_memory=True),
        "pageable": torch.ones(largest, dtype=torch.uint8),  # written once, so every page is there before timing
    }
    return Rank(
        "gpu",
        device=torch.cuda.get_device_name(dev),
        rows=tuple(measure(p, dev, buffers, ctx.progress)),
        timer="CUDA events on the current stream around each block",
        l2_bytes=torch.cuda.get_device_properties(dev).L2_cache_size,
    )


if __name__ == "__main__":
    runtime.main(run, Params)
