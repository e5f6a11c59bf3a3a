"""C10 on one GPU (review R5-1): gradient_as_bucket_view's saving, and the memory base that hid it.

    python scripts/ab_c10_memory.py   # one GPU, NCCL, a world of one; without a GPU: the CPU aliasing check, exit 0

Each side: a fresh ``ddp_optimised.wrap_ddp_tuned(build_unet("full"))`` (gbv False: the baseline's DDP), AdamW, 5 steps
of ``ddp_train.train_step`` (bf16), batch 32 of 256x256; one JSON line: memory in the optimizer's step pre-hook (max of
steps 3-5) and the peak, minus the base; the grads' views and storages. Base ``workload``: the workload's
``_memory_start`` right after the previous side; ``settled``: a 0.5 s wait and one collective first (their frees
reported). One fp32 copy of the gradients is 0.124 GB.

Run so far on the CPU only (its aliasing check); the one-H100 numbers of review R5-1 came from the workload itself,
run with and without a settled base (2026-12-07).
"""

import json
import os
import sys
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist

from nvtutorial.chapters.ch03_ddp_training import workload
from nvtutorial.chapters.ch03_ddp_training.lessons import ddp_train
from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised
from nvtutorial.models.unet import build_unet


def gb(n):
    return round(n / 1e9, 4)


def emit(row):
    print(json.dumps(row), flush=True)


def grads_of(model, spans=None):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    storages = {g.untyped_storage().data_ptr(): g.untyped_storage().nbytes() for g in grads}
    out = {"grads": len(grads), "grad_views": sum(g._base is not None for g in grads), "grad_storages": len(storages)}
    if spans is not None:  # (a, n): where each bucket's storage lies
        out["grads_in_bucket"] = sum(any(a <= g.data_ptr() < a + n for a, n in spans.values()) for g in grads)
    return {**out, "grad_storage_gb": gb(sum(storages.values()))}


def base_of(dev, mode):
    ctx = SimpleNamespace(is_gpu=True, device=dev)
    if mode == "workload":
        return workload._memory_start(ctx), {}
    m0 = workload._memory_start(ctx)  # gc, synchronize, memory_allocated
    time.sleep(0.5)  # NCCL's watchdog looks at its works every 100 ms
    m1 = torch.cuda.memory_allocated(dev)
    dist.all_reduce(torch.zeros(1, device=dev))  # the group's next collective: the retired works' tensors go
    m2 = workload._memory_start(ctx)
    return m2, {"freed_by_wait_gb": gb(m0 - m1), "freed_by_next_collective_gb": gb(m1 - m2)}


def side(dev, data, gbv, mode, steps=5):
    base, extra = base_of(dev, mode)
    torch.manual_seed(0)
    model = ddp_optimised.wrap_ddp_tuned(build_unet("full").to(dev), dev, gradient_as_bucket_view=gbv)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mem, seen = [], {}  # the pre-hook returns None (a value would replace step()'s arguments)
    opt.register_step_pre_hook(lambda *_: mem.append(torch.cuda.memory_allocated(dev)) or seen.update(grads_of(model)))
    for _ in range(steps):
        idx = torch.randint(0, len(data[0]), (32,), device=dev)
        ddp_train.train_step(model, opt, data[0][idx], data[1][idx], dev)
    peak = torch.cuda.max_memory_allocated(dev)
    out = {"gradient_as_bucket_view": gbv, "base": mode, "optimizer_mem_gb": gb(max(mem[2:]) - base)}
    return {**out, "peak_gb": gb(peak - base), **seen, **extra}


def cpu_alias_check():
    """gloo, the tiny UNet: after backward, do the grads lie in DDP's buckets (a comm hook notes where they are)?"""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    x, cpu = torch.rand(2, 3, 16, 16), torch.device("cpu")
    y = (x[:, 0] > 0.5).long()
    for gbv in (False, True):
        torch.manual_seed(0)
        model = ddp_optimised.wrap_ddp_tuned(build_unet("tiny"), cpu, gradient_as_bucket_view=gbv)
        spans, seen = {}, {}

        def hook(state, bucket, spans=spans):
            storage = bucket.buffer().untyped_storage()
            spans[bucket.index()] = (storage.data_ptr(), storage.nbytes())
            return default_hooks.allreduce_hook(state, bucket)

        model.register_comm_hook(None, hook)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt.register_step_pre_hook(lambda *_, m=model, s=seen, b=spans: s.update(grads_of(m, b)))
        for _ in range(3):
            ddp_train.train_step(model, opt, x, y, cpu, amp=None)
        emit({"device": "cpu", "gradient_as_bucket_view": gbv, **seen, "buckets": len(spans)})


def main():
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29571"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    if not torch.cuda.is_available():
        emit({"device": "cpu", "torch": torch.__version__, "note": "no GPU: memory not measured, aliasing check only"})
        dist.init_process_group("gloo")
        cpu_alias_check()
    else:
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
        data = (torch.rand(64, 3, 256, 256, device=dev), torch.randint(0, 4, (64, 256, 256), device=dev))
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        emit({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "nccl": nccl})
        sides = ((False, "settled"), (True, "settled"), (False, "workload"), (True, "workload"), (False, "settled"))
        for gbv, mode in sides:
            emit(side(dev, data, gbv, mode))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
