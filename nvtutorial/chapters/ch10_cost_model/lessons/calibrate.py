"""Measure the numbers of notebook 10's cost model: this device's two roofs and its floors, a collective's α and β.

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch10_cost_model/lessons/calibrate.py
    torchrun --standalone --nproc-per-node 1 nvtutorial/chapters/ch10_cost_model/lessons/calibrate.py   # one device

One process per GPU with NCCL where there are GPUs, gloo on the CPU otherwise (notebook 08's ``setup``). Each
rank measures its own device: a square matrix multiply for the compute roof (bf16 and fp32 on a GPU, fp32 on the
CPU; fp32 with TF32 off, PyTorch's default) and a copy for the memory roof, each over a sweep from sizes so small
that only the floor of one call counts to sizes where the roof does; and the floor of two whole programs, the
same calls with almost no work: Adam's step on the model's tensors shrunk to one element each, and a training step
of the same model at a tiny width. With two ranks or more, all ranks time an all-reduce, an all-gather and a
reduce-scatter over a range of sizes; notebook 10 fits ``t = α + S · factor / β`` to them. Every time comes from
the course's one timer (CUDA events on a GPU, the host clock on the CPU), after untimed warm-up calls, on a GPU
warmed up first. The two sides of a program (the CPU issuing it, the GPU running it) are measured apart at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
import torch.distributed as dist

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import setup
from nvtutorial.chapters.ch08_ladder.lessons.rungs import single
from nvtutorial.chapters.ch08_ladder.lessons.train import train_step
from nvtutorial.models import transformer
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


# %% the floor of a program: the same calls, almost no work


def adam_step(shapes, device: torch.device):
    """Fused Adam's step over fp32 tensors of ``shapes``, ready to call (after the first step, which creates the
    two moments). With every shape ``(1,)``: the real step's Python calls and ops per tensor, no bytes to speak of:
    its floor (at the small sizes also its kernel launches; at the lesson's sizes the real step launches more)."""
    params = [torch.nn.Parameter(torch.randn(shape, device=device) * 0.02) for shape in shapes]
    for t in params:
        t.grad = torch.randn_like(t) * 1e-3
    optimizer = torch.optim.Adam(params, lr=1e-3, fused=True)
    optimizer.step()
    return optimizer.step


def training_step(cfg: transformer.Config, global_batch: int, device: torch.device, seed: int = 0):
    """One training step (forward, backward, fused Adam) of notebook 08's transformer ``cfg`` on ``global_batch``
    sequences, ready to call (after a first step, which creates Adam's moments)."""
    model, optimizer = single(transformer.build(cfg, seed=seed, device=device), device)
    tokens = transformer.batch(0, global_batch, cfg, seed=seed).to(device)
    train_step(model, optimizer, tokens)
    return lambda: train_step(model, optimizer, tokens)


def tiny(cfg: transformer.Config) -> transformer.Config:
    """The same model at almost no width: the same blocks, heads and MLP ratio, so the same ops, with 8 values
    per head, 8 positions and 64 tokens in the vocabulary (one sequence of it is the floor's batch)."""
    return dataclasses.replace(cfg, dim=8 * cfg.heads, seq_len=8, vocab=64)


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


def warm_up(device: torch.device, seconds: float = 0.3) -> None:
    """On a GPU, large bf16 multiplies for about ``seconds`` before anything is timed: a GPU that sat idle runs at a
    lower clock, and the first timed calls should not pay for raising it. Nothing to warm up on the CPU."""
    if device.type != "cuda":
        return
    op = matmul(4096, torch.bfloat16, device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            op()
        torch.cuda.synchronize(device)


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


def calls_per_repeat(
    op, device: torch.device, target_s: float, most: int, together: bool = False, warmup: int = 2
) -> int:
    """How many back-to-back calls of ``op`` last about ``target_s`` (at least one, at most ``most``): after
    ``warmup`` untimed calls, the median of three timed single calls decides, so that one slow call cannot make every
    repeat one call long; two calls that each outlast ``target_s`` decide at once (one call per repeat).
    ``together``: every rank gets the same number (each probe is the slowest rank's)."""
    probes = [seconds_per_call(op, 1, device, together, warmup=warmup if i == 0 else 0) for i in range(2)]
    if min(probes) < target_s:
        probes.append(seconds_per_call(op, 1, device, together, warmup=0))
    return max(1, min(most, int(target_s / max(statistics.median(probes), 1e-9))))


# %% the two sides of a program


def wait(device: torch.device) -> None:
    """Wait until the GPU has finished what was queued (nothing to wait for on the CPU: it ran every op already)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_time(op, device: torch.device, repeats: int = 5) -> float:
    """Seconds the CPU takes to issue one call of ``op`` onto an idle GPU: the host's clock stops when ``op``
    returns, before the GPU is done (the median of ``repeats``). On the CPU there is no queue: the whole call."""
    times = []
    for _ in range(repeats):
        wait(device)
        start = time.perf_counter()
        op()
        times.append(time.perf_counter() - start)
    wait(device)
    return statistics.median(times)


def sleep_cycles_per_s(device: torch.device) -> float:
    """Clock cycles per second of ``torch.cuda._sleep``, the GPU-side sleep of PyTorch's own tests."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) / 1e3)


def gpu_time(
    op, device: torch.device, calls: int = 3, issue_s: float | None = None, tries: int = 3, most_s: float = 0.5
) -> float | None:
    """Seconds per call the GPU itself spends on ``op``, with no CPU in the way: a sleep queued on the GPU first
    keeps it busy while the CPU issues ``calls`` calls; then the GPU runs their kernels back to back, each still
    launched on its own (a CUDA graph's replay skips the per-launch work in front of each kernel: expect a replay to
    be faster than this). The sleep must outlast the issuing (``issue_s``: the CPU's time per call,
    :func:`host_time`'s, measured here when not given): if the GPU was already awake when the last call was queued
    (a clock that changed, a CPU that stalled, a launch queue that filled), the time would include the CPU's gaps,
    so it is tried again with a sleep 4× as long (at most ``most_s``); None when ``tries`` sleeps all ended too
    soon."""
    if issue_s is None:
        op()
    issue = host_time(op, device) if issue_s is None else issue_s  # host_time's calls warm up too
    per_s = sleep_cycles_per_s(device)
    sleep_s = 2 * calls * issue + 0.002
    for _ in range(tries):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(per_s * min(sleep_s, most_s)))
        start.record()
        for _ in range(calls):
            op()
        asleep = not start.query()  # the GPU has not reached `start` yet: still asleep after the last call was queued
        end.record()
        end.synchronize()
        if asleep:
            return start.elapsed_time(end) / 1e3 / calls
        sleep_s *= 4
    return None


# %% main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--matmul", type=int, default=4096, help="the matrix size n (default 4096)")
    parser.add_argument("--copy-mib", type=int, default=1024, help="the copied buffer in MiB (default 1024)")
    parser.add_argument("--max-mib", type=int, default=256, help="the largest collective in MiB (default 256)")
    parser.add_argument("--layers", type=int, default=8, help="the floors' model: blocks (default 8)")
    parser.add_argument("--heads", type=int, default=16, help="the floors' model: heads (default 16)")
    args = parser.parse_args()
    device = setup()
    warm_up(device)
    # a GPU: bf16 (its fast dtype) and fp32 (what the course's transformer trains in; TF32 is off, PyTorch's default)
    dtypes = (torch.bfloat16, torch.float32) if device.type == "cuda" else (torch.float32,)
    roofs = []
    for dtype in dtypes:
        flops = 2 * args.matmul**3 / seconds_per_call(matmul(args.matmul, dtype, device), 10, device)
        floor = seconds_per_call(matmul(64, dtype, device), 100, device)  # 64³: too little work to matter
        roofs.append(f"{flops / 1e12:.3f} TFLOP/s, floor {floor * 1e6:.1f} µs ({str(dtype)[6:]})")
    bandwidth = 2 * (args.copy_mib << 20) / seconds_per_call(copy(args.copy_mib << 20, device), 10, device)
    cfg = tiny(transformer.Config(layers=args.layers, heads=args.heads))
    shapes = [(1,)] * len(transformer.parameter_shapes(cfg))
    adam = seconds_per_call(adam_step(shapes, device), 20, device)
    step = seconds_per_call(training_step(cfg, 1, device), 10, device)
    print(
        f"rank {dist.get_rank()} on {device}: matmul {', '.join(roofs)}, memory {bandwidth / 1e9:.1f} GB/s; "
        f"floors: Adam over {len(shapes)} tensors {adam * 1e6:.0f} µs, a training step of {args.layers} blocks "
        f"{step * 1e3:.2f} ms",
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
