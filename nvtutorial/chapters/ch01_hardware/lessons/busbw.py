"""How fast does an all-reduce move data between your GPUs? Time it, then turn the time into busbw.

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch01_hardware/lessons/busbw.py
    torchrun --standalone --nproc-per-node 2 \\
        nvtutorial/chapters/ch01_hardware/lessons/busbw.py --size-mib 1024 --iters 20

Runs with NCCL on GPUs (one per rank) and with gloo on the CPU. Used in notebook 01; the
``allreduce_bench`` workload times every size of its sweep with :func:`time_all_reduce` and
converts with :func:`bus_bandwidth`, so the course measures exactly what this file shows.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up


# %% time the all-reduce
def time_all_reduce(x: torch.Tensor, iters: int) -> float:
    """Seconds per ``dist.all_reduce(x)``, over ``iters`` calls issued back to back.

    On a GPU the calls only queue work: two CUDA events on the current stream bracket the queued
    all-reduces, and the GPU's own clock says how long they took. On the CPU (gloo) each call
    returns when its all-reduce is done, so the host clock is the right one.
    """
    if x.is_cuda:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        end.synchronize()  # wait until the GPU has reached the end event
        return start.elapsed_time(end) / 1e3 / iters  # elapsed_time() is in milliseconds
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    return (time.perf_counter() - t0) / iters


# %% from time to bandwidth
def bus_bandwidth(size_bytes: int, seconds: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce, in GB/s (10⁹ bytes per second).

    algbw = S / t is the buffer's size over the time. A ring all-reduce sends 2(n−1)/n · S bytes
    from every rank, so busbw = algbw · 2(n−1)/n: the rate each rank's link really carried, the
    number to hold against the link's bandwidth. With 2 ranks busbw = algbw.
    """
    algbw = size_bytes / seconds / 1e9
    return algbw * 2 * (world_size - 1) / world_size


# %% one measurement
def measure(size_bytes: int, iters: int, warmup: int, device: torch.device) -> dict:
    """Warm up, time ``iters`` all-reduces of ``size_bytes`` and check the sum; this rank's numbers."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x = torch.zeros(size_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):  # the first calls set up NCCL's connections and buffers: never time them
        dist.all_reduce(x)
    dist.barrier()  # start together: the slowest rank decides a collective's time
    seconds = time_all_reduce(x, iters)
    x.fill_(rank + 1)
    dist.all_reduce(x)  # every rank must now hold 1 + 2 + ... + n
    expected = world_size * (world_size + 1) / 2
    correct = bool((x == expected).all())
    return {
        "size_bytes": size_bytes,
        "seconds": seconds,
        "algbw_gbps": size_bytes / seconds / 1e9,
        "busbw_gbps": bus_bandwidth(size_bytes, seconds, world_size),
        "correct": correct,
    }


# %% main
def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=256, help="message size in MiB (default 256)")
    parser.add_argument("--iters", type=int, default=20, help="timed all-reduces (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed all-reduces first (default 5)")
    args = parser.parse_args()

    device = setup()
    world_size = dist.get_world_size()

    result = measure(int(args.size_mib * 2**20), args.iters, args.warmup, device)
    # The slowest rank decides: take the largest time over the ranks.
    slowest = torch.tensor([result["seconds"]], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    result.update(
        seconds=slowest.item(),
        algbw_gbps=result["size_bytes"] / slowest.item() / 1e9,
        busbw_gbps=bus_bandwidth(result["size_bytes"], slowest.item(), world_size),
    )
    if dist.get_rank() == 0:
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (gloo: a simulation)"
        print(
            f"{world_size} ranks on {where}: all-reduce of {args.size_mib:g} MiB in {result['seconds'] * 1e6:.1f} µs, "
            f"algbw {result['algbw_gbps']:.2f} GB/s, busbw {result['busbw_gbps']:.2f} GB/s, "
            f"sum {'correct' if result['correct'] else 'WRONG'}"
        )
    runtime.save_metrics(result)  # the course's launcher collects these numbers; under plain torchrun it does nothing
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
