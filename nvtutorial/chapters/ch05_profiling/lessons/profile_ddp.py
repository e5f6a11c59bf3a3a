"""Profile DDP training steps with torch.profiler: one trace per rank, named ranges inside each step.

Used in notebook 05 (and by the ``profile_step`` workload, which measures with these functions).
Each rank trains the course's UNet with ``DistributedDataParallel`` on a batch that already sits
on its device, profiles a few steps and writes ``trace_rank{R}.json``: drag it onto
https://ui.perfetto.dev to see every operator and kernel of both ranks. Inside each step the
phases ``forward``, ``backward`` and ``optimizer`` are marked twice: a ``record_function``
range, which torch.profiler records, and an NVTX range, which Nsight Systems records.

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch05_profiling/lessons/profile_ddp.py --out traces

On GPUs it runs with NCCL and records the GPU's kernels too. On the CPU it runs with gloo and
records CPU operators only; gloo's collectives then stand for NCCL's kernels: a simulation of
the bookkeeping, not a GPU measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up
from nvtutorial.models.segdata import render
from nvtutorial.models.unet import build_unet


# %% named ranges
@contextlib.contextmanager
def mark(name):
    """A named range that both profilers see: torch.profiler (record_function) and Nsight Systems (NVTX)."""
    nvtx = torch.cuda.is_available()
    with record_function(name):
        if nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                torch.cuda.nvtx.range_pop()


# %% the annotated step
def train_step(model, optimizer, images, masks, dtype=None):
    """One DDP step with its phases marked. DDP all-reduces the gradients during ``backward``,
    bucket by bucket, while the rest of the backward pass still runs."""
    with mark("forward"):
        with torch.autocast(images.device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), masks)
    with mark("backward"):
        loss.backward()
    with mark("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.detach()


# %% the profiler
def profile_steps(step, steps, trace, sync):
    """Run ``step`` under torch.profiler: 1 step skipped, 1 warm-up, then ``steps`` recorded, each
    in a ``train_step`` range; the trace goes to ``trace``. Returns the profiler and the seconds
    each recorded step took (host clock, the device synchronised at its end)."""
    activities = [ProfilerActivity.CPU]  # operators, as the Python thread calls them
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)  # + every GPU kernel, copy and memset, timed on the GPU
    seconds = []
    plan = schedule(wait=1, warmup=1, active=steps, repeat=1)
    with profile(
        activities=activities,
        schedule=plan,
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
        acc_events=True,  # one cycle, nothing to keep across cycles; without it torch 2.11 warns on every run
    ) as prof:
        for i in range(2 + steps):
            start = time.perf_counter()
            with mark("train_step"):
                step()
                sync()  # inside the range: the step's GPU work ends within it
            if i >= 2:
                seconds.append(time.perf_counter() - start)
            prof.step()
    return prof, seconds


# %% the model on each rank
def make_model(size, device, bucket_cap_mb=25.0):
    """The course's UNet on ``device``, wrapped in DDP (which broadcasts rank 0's weights), and AdamW."""
    torch.manual_seed(0)
    net = build_unet(size).to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(net, device_ids=ids, bucket_cap_mb=bucket_cap_mb)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def batch(rank, size, image_size, device):
    """This rank's own ``size`` samples, drawn directly on the device: no input pipeline in the step."""
    return render(range(rank * size, (rank + 1) * size), image_size, 4, 0, device)


# %% main
def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="small", choices=("tiny", "small", "full"))
    parser.add_argument("--batch", type=int, default=8, help="per GPU")
    parser.add_argument("--image", type=int, default=64, help="image side in pixels")
    parser.add_argument("--steps", type=int, default=3, help="steps recorded")
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16")
    parser.add_argument("--out", default=".", help="folder for trace_rank{R}.json")
    args = parser.parse_args()

    device = setup()
    rank, gpu = dist.get_rank(), device.type == "cuda"

    model, optimizer = make_model(args.model, device)
    images, masks = batch(rank, args.batch, args.image, device)
    dtype = torch.bfloat16 if args.bf16 else None
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    for _ in range(3):  # warm-up: cuDNN picks its kernels, NCCL connects, the allocator fills
        train_step(model, optimizer, images, masks, dtype)

    trace = Path(args.out) / f"trace_rank{rank}.json"
    trace.parent.mkdir(parents=True, exist_ok=True)
    prof, seconds = profile_steps(lambda: train_step(model, optimizer, images, masks, dtype), args.steps, trace, sync)
    print(f"rank {rank}: {len(seconds)} steps recorded, median {1e3 * statistics.median(seconds):.1f} ms; {trace}")
    if rank == 0:
        key = "self_device_time_total" if gpu else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=8))
    runtime.save_metrics({"trace": str(trace), "step_ms": [1e3 * s for s in seconds]})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
