"""Measure the four numbers of notebook 10's cost model: this device's two roofs and a collective's α and β.

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch10_cost_model/lessons/calibrate.py
    torchrun --standalone --nproc-per-node 1 nvtutorial/chapters/ch10_cost_model/lessons/calibrate.py   # roofs only

One process per GPU with NCCL where there are GPUs, gloo on the CPU otherwise (notebook 08's ``setup``). Each
rank measures its own device: a square matrix multiply for the compute roof (bf16 and fp32 on a GPU, fp32 on the
CPU; fp32 with TF32 off, PyTorch's default) and
a copy for the memory roof. With two ranks or more, all ranks time an all-reduce, an all-gather and a
reduce-scatter over a range of sizes; notebook 10 fits ``t = α + S · factor / β`` to them. Every time comes from
the course's one timer (CUDA events on a GPU, the host clock on the CPU), after untimed warm-up calls.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import setup
from nvtutorial.units import bus_factor, format_size, size_sweep

# %% the compute roof: a matrix multiply


def matmul(n: int, dtype: torch.dtype, device: torch.device):
    """One ``n × n`` by ``n × n`` multiply, ready to call: ``2 n³`` FLOPs (a multiply and an add per term)."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    c = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=c)


# %% the memory roof: a copy


def copy(nbytes: int, device: torch.device):
    """One copy of an ``nbytes`` buffer into another, ready to call: every byte read once and written once
    (``2 · nbytes`` cross memory). Larger than every cache, so that memory, not a cache, is measured."""
    x = torch.ones(nbytes // 4, device=device)
    y = torch.empty_like(x)
    return lambda: y.copy_(x)


# %% a collective of S bytes


def collective(kind: str, nbytes: int, device: torch.device):
    """One ``kind`` collective of about ``nbytes`` (fp32, a multiple of the ranks), ready to call; and its exact
    bytes. ``nbytes`` is the whole tensor: the all-gather's output, the reduce-scatter's input."""
    world = dist.get_world_size()
    numel = max(world, nbytes // 4 // world * world)
    whole = torch.ones(numel, device=device)
    part = torch.ones(numel // world, device=device)
    # torch 2.13 renames the two tensor-in, tensor-out collectives (the old names still work, with a warning)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    ops = {
        "all_reduce": lambda: dist.all_reduce(whole),
        "all_gather": lambda: gather(whole, part),
        "reduce_scatter": lambda: scatter(part, whole),
    }
    return ops[kind], 4 * numel


# %% the clock


def seconds_per_call(op, iters: int, device: torch.device, together: bool = False, warmup: int = 1) -> float:
    """Seconds per call of ``op`` over ``iters`` back-to-back calls, after ``warmup`` untimed calls (the first call
    picks a kernel, sets up NCCL's connections). ``together``: the ranks start at a barrier and the slowest rank's
    time is returned, since a collective ends when its last rank does."""
    for _ in range(warmup):
        op()
    if together:
        dist.barrier()
    seconds = runtime.time_calls(op, iters, device=device)
    if together:
        t = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        seconds = t.item()
    return seconds


# %% main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--matmul", type=int, default=4096, help="the matrix size n (default 4096)")
    parser.add_argument("--copy-mib", type=int, default=1024, help="the copied buffer in MiB (default 1024)")
    parser.add_argument("--max-mib", type=int, default=256, help="the largest collective in MiB (default 256)")
    args = parser.parse_args()
    device = setup()
    # a GPU: bf16 (its fast dtype) and fp32 (what the course's transformer trains in; TF32 is off, PyTorch's default)
    dtypes = (torch.bfloat16, torch.float32) if device.type == "cuda" else (torch.float32,)
    roofs = []
    for dtype in dtypes:
        flops = 2 * args.matmul**3 / seconds_per_call(matmul(args.matmul, dtype, device), 10, device)
        roofs.append(f"{flops / 1e12:.3f} TFLOP/s ({str(dtype)[6:]})")
    bandwidth = 2 * (args.copy_mib << 20) / seconds_per_call(copy(args.copy_mib << 20, device), 10, device)
    print(
        f"rank {dist.get_rank()} on {device}: matmul {', '.join(roofs)}, memory {bandwidth / 1e9:.1f} GB/s",
        flush=True,
    )
    if dist.get_world_size() > 1:
        for kind in ("all_reduce", "all_gather", "reduce_scatter"):
            for nbytes in size_sweep(1 << 10, args.max_mib << 20, 16):
                op, size = collective(kind, nbytes, device)
                seconds = seconds_per_call(op, 5, device, together=True)
                busbw = size * bus_factor(kind, dist.get_world_size()) / seconds / 1e9
                if dist.get_rank() == 0:
                    print(f"{kind:>14} {format_size(size):>9}: {seconds * 1e6:10.1f} µs, busbw {busbw:8.2f} GB/s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
