"""train: time the lesson's DDP training step, as written and with one optimisation at a time.

Used in notebooks 03 (1 against 2 GPUs, the transports) and 04 (the optimisations). Every
configuration runs the code of ``nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py`` with at most one function
swapped for its version in ``nvtutorial/chapters/ch04_optimisations/lessons/ddp_optimised.py``: :data:`VARIANTS` maps
each name to the code it runs. For each variant and per-GPU batch size, in turn: a fresh model from the same seed; the
training set rendered once on the device (the DistributedSampler still picks each rank's samples,
but no input pipeline is measured); ``warmup`` untimed steps; ``repeats`` rounds of ``steps`` timed
steps (CUDA events on GPUs, the host clock on the CPU); with ``comm_share``, the same steps under
``model.no_sync()``, without the gradient exchange: communication share = 1 − that step ÷ the step.
Before that, on a separate copy of the model over one step, it counts the bytes DDP hands to
all-reduce and the bytes autograd saves for backward (activations).

With ``one_gpu_batch``, rank 0 also times the lesson's step on the model without DDP, alone, while
the other ranks wait: the 1-GPU reference of the scaling efficiency.

The first configuration is measured once more at the end (``aa``): two measurements of the same
code, whose gap is part of the noise of every comparison (``nvtutorial.report.verdict.compare``).
Memory (GPU only) is ``max_memory_allocated`` minus what was allocated before the model existed, at
the peak and just before the optimizer step, for every rank.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch03_ddp_training.workload \\
        --set model=full --set image_size=256 --set batch_sizes=32 --set variants=baseline,fp32,fp16
"""

from __future__ import annotations

import dataclasses
import gc
import math
import re
import statistics
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from nvtutorial import runtime
from nvtutorial.models.unet import SIZES
from nvtutorial.params import ParamError, require

if TYPE_CHECKING:
    from torch import Tensor

NAME = "train"
"""The workload's name (``nvtutorial.run("train", ...)``, ``nvtutorial list``)."""

VARIANTS = {
    "baseline": "ddp_train.build_model + ddp_train.train_step (bf16 autocast on GPUs, fp32 on the CPU)",
    "fp32": "ddp_train.train_step(..., amp=None)",
    "bf16": "ddp_train.train_step(..., amp=torch.bfloat16)",
    "fp16": "ddp_optimised.train_step_fp16(..., scaler=torch.amp.GradScaler(device.type))",
    "gradient_as_bucket_view=True": "ddp_optimised.wrap_ddp_tuned(model, device, gradient_as_bucket_view=True)",
    "bucket_cap_mb=N": "ddp_optimised.wrap_ddp_tuned(model, device, bucket_cap_mb=N)",
    "static_graph=True": "ddp_optimised.wrap_ddp_tuned(model, device, static_graph=True)",
    "no_sync accumulation": "ddp_optimised.train_step_accumulated(model, optimizer, micro_batches, ...)",
    "accumulation without no_sync": "ddp_optimised.train_step_accumulated_every_micro_batch(...)",
    "channels_last": "ddp_optimised.build_model_channels_last",
    "activation checkpointing": "ddp_optimised.build_model_checkpointed",
    "torch.compile": "ddp_optimised.build_model_compiled",
}
"""What each variant runs: the lesson's code with the function named here swapped in."""
SOLO = "1 GPU, no DDP"
SOLO_CODE = "ddp_train.train_step on build_unet(size).to(device): rank 0 alone, the other ranks wait"
"""The 1-GPU reference of a scaling run (``one_gpu_batch``): the lesson's step on the model without DDP."""

BUCKETS = re.compile(r"^bucket_cap_mb=([0-9.]+)$")
ACCUMULATING = ("no_sync accumulation", "accumulation without no_sync")


def check_variant(name: str) -> None:
    """Raise :class:`ParamError` naming the menu if ``name`` is not a variant."""
    m = BUCKETS.match(name)
    if m:
        require(float(m.group(1)) > 0, f"variant {name!r}: bucket_cap_mb must be positive")
        return
    if name not in VARIANTS or name == "bucket_cap_mb=N":
        raise ParamError(f"unknown variant {name!r}; the variants: {', '.join(VARIANTS)} (N a number of MB)")


@dataclasses.dataclass(frozen=True)
class Params:
    model: Literal["tiny", "small", "full"] = "small"
    image_size: int = 64
    batch_sizes: tuple[int, ...] = (8,)  # per GPU; every variant is measured at each
    variants: tuple[str, ...] = ("baseline",)
    one_gpu_batch: int = 0  # > 0: also time one GPU alone (rank 0, no DDP) at this batch: the scaling reference
    accumulation: int = 4  # micro-batches per optimizer step in the accumulation variants (same samples per step)
    samples: int = 256  # training set size (on the device)
    seed: int = 0
    lr: float = 1e-3
    warmup: int = 3
    steps: int = 10  # timed steps per round
    repeats: int = 3  # rounds: the spread of their medians is the noise of one configuration
    comm_share: bool = True
    count: bool = True  # all-reduce bytes and saved activations, on a copy of the model
    aa: bool = True  # the first configuration measured again at the end
    prime: bool = True  # on GPUs: run the first configuration once, unrecorded, first (clocks, cuDNN, allocator)

    def __post_init__(self) -> None:
        multiple = 2 ** SIZES[self.model]["depth"]
        require(
            self.image_size >= 8 and self.image_size % multiple == 0,
            f"image_size={self.image_size} must be a multiple of {multiple} (at least 8) for the {self.model} UNet",
        )
        require(bool(self.variants), "variants is empty: name at least one (baseline is the lesson's code)")
        require(bool(self.batch_sizes) and min(self.batch_sizes) >= 1, "batch_sizes must be at least 1 each")
        require(self.one_gpu_batch >= 0, f"one_gpu_batch={self.one_gpu_batch} must be 0 (none) or a batch size")
        for name in self.variants:
            check_variant(name)
        if any(v in ACCUMULATING for v in self.variants):
            require(self.accumulation >= 2, f"accumulation={self.accumulation} must be at least 2")
            bad = [b for b in self.batch_sizes if b % self.accumulation]
            require(
                not bad,
                f"batch size {bad[:1]} does not split into accumulation={self.accumulation} "
                "equal micro-batches: use a multiple of it",
            )
        require(self.samples >= 1 and self.lr > 0, "samples must be at least 1 and lr positive")
        require(self.warmup >= 1, f"warmup={self.warmup} must be at least 1 (the first step builds buckets)")
        require(self.steps >= 1, f"steps={self.steps} must be at least 1")
        require(self.repeats >= 2, f"repeats={self.repeats}: at least 2 rounds, or the noise is unknown")


# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Config:
    """One variant at one per-GPU batch, ready to step."""

    model: Any
    optimizer: Any
    step: Callable[[], Any]  # one optimizer step on the next batch; returns the loss tensor


def build(ctx: runtime.Context, p: Params, name: str, batch: int) -> Config:
    """The model, optimizer and step of variant ``name`` at per-GPU batch ``batch``."""
    import torch
    from torch.utils.data import BatchSampler, DistributedSampler

    from nvtutorial.chapters.ch03_ddp_training.lessons import ddp_train as lesson
    from nvtutorial.chapters.ch03_ddp_training.lessons import training
    from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised as opt
    from nvtutorial.models.segdata import make_dataset
    from nvtutorial.models.unet import build_unet

    device = ctx.device
    amp = torch.bfloat16 if ctx.is_gpu else None  # the script's --precision auto
    world, rank = (1, 0) if name == SOLO else (ctx.world_size, ctx.rank)
    builder: Callable[..., Any] = lesson.build_model
    options: dict[str, Any] = {}
    m = BUCKETS.match(name)
    if m:
        options = {"bucket_cap_mb": float(m.group(1))}
    elif name in ("gradient_as_bucket_view=True", "static_graph=True"):
        options = {name.split("=")[0]: True}
    if options:

        def tuned(size, device, seed=0):  # build_model, with wrap_ddp_tuned for wrap_ddp
            torch.manual_seed(seed)
            return opt.wrap_ddp_tuned(build_unet(size).to(device), device, **options)

        builder = tuned
    if name == SOLO:

        def solo(size, device, seed=0):  # build_model without wrap_ddp
            torch.manual_seed(seed)
            return build_unet(size).to(device)

        builder = solo

    builder = {
        "channels_last": opt.build_model_channels_last,
        "activation checkpointing": opt.build_model_checkpointed,
        "torch.compile": opt.build_model_compiled,
    }.get(name, builder)
    model = builder(p.model, device, p.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=p.lr)

    micro = p.accumulation if name in ACCUMULATING else 1
    need = batch * world
    if need > p.samples:
        raise ValueError(
            f"one step needs per-GPU batch × world size = {need} samples but samples={p.samples}: raise samples"
        )
    data = training.device_dataset(make_dataset(p.samples, p.image_size, seed=p.seed), device)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=p.seed)
    batches = _forever(sampler, BatchSampler(sampler, batch // micro, drop_last=True), data)

    if name == "fp16":
        scaler = torch.amp.GradScaler(device.type)
        step = lambda: opt.train_step_fp16(model, optimizer, *next(batches), device, scaler)  # noqa: E731
    elif name in ACCUMULATING:
        fn = (
            opt.train_step_accumulated
            if name == "no_sync accumulation"
            else opt.train_step_accumulated_every_micro_batch
        )
        step = lambda: fn(model, optimizer, [next(batches) for _ in range(micro)], device, amp)  # noqa: E731
    else:
        precision = {"fp32": None, "bf16": torch.bfloat16}.get(name, amp)
        step = lambda: lesson.train_step(model, optimizer, *next(batches), device, precision)  # noqa: E731
    return Config(model, optimizer, step)


def _forever(sampler: Any, batch_sampler: Any, data: Any) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of this rank's samples, epoch after epoch (``set_epoch`` each time)."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for indices in batch_sampler:
            yield data[indices]
        epoch += 1


# ---------------------------------------------------------------------------------------------
def count_bytes(ctx: runtime.Context, p: Params, name: str, batch: int) -> dict[str, Any]:
    """On a separate copy of the configuration, the second step's all-reduce bytes (a comm hook wrapping
    DDP's default all-reduce) and the bytes autograd saved for backward (activations, parameters left
    out), and the bytes of parameters, gradients and optimizer state (every rank holds them whole)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if name == "torch.compile":
        return {"count_note": "not counted with torch.compile (the hooks would change what is compiled)"}
    cfg = build(ctx, p, name, batch)
    sent: list[int] = []

    def hook(state, bucket):  # no annotations: DDP checks them
        sent.append(bucket.buffer().numel() * bucket.buffer().element_size())
        return default_hooks.allreduce_hook(state, bucket)

    if name != SOLO:
        cfg.model.register_comm_hook(None, hook)
    cfg.step()  # the first step builds DDP's buckets again in the order gradients arrive
    sent.clear()
    params = {q.data_ptr() for q in cfg.model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    grads: list[int] = []  # the gradients' bytes when the optimizer steps (fp16: unless the scaler skips it)
    hook = cfg.optimizer.register_step_pre_hook(
        lambda *_: grads.append(
            sum(q.grad.numel() * q.grad.element_size() for q in cfg.model.parameters() if q.grad is not None)
        )
    )
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        cfg.step()
    hook.remove()
    optimizer_bytes = sum(
        v.numel() * v.element_size()
        for state in cfg.optimizer.state.values()
        for v in state.values()
        if torch.is_tensor(v)
    )
    exchanged = {"allreduce_bytes_per_step": sum(sent), "allreduce_calls_per_step": len(sent)} if name != SOLO else {}
    return {
        **exchanged,
        "saved_activation_bytes": sum(saved.values()),
        "param_bytes": sum(q.numel() * q.element_size() for q in cfg.model.parameters()),
        "grad_bytes": grads[-1] if grads else None,
        "optimizer_bytes": optimizer_bytes or None,
    }


class _Idle(Exception):
    """This rank takes no part in the configuration (rank 0 measures one GPU alone)."""


def _memory_start(ctx: runtime.Context) -> int:
    import torch

    gc.collect()
    if not ctx.is_gpu:
        return 0
    torch.cuda.synchronize(ctx.device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(ctx.device)
    return torch.cuda.memory_allocated(ctx.device)


def per_rank(ctx: runtime.Context, value: float | None) -> list[float | None]:
    """One number from every rank (an all_reduce of a one-hot vector); None stays None."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(ctx.world_size, dtype=torch.float64, device=ctx.device)
    t[ctx.rank] = math.nan if value is None else value
    dist.all_reduce(t)
    return [None if math.isnan(v) else v for v in t.tolist()]


def measure(ctx: runtime.Context, p: Params, name: str, batch: int) -> dict[str, Any]:
    """One configuration: counted bytes, timed rounds, memory, communication share, loss per step."""
    import torch

    micro = p.accumulation if name in ACCUMULATING else 1
    world = 1 if name == SOLO else ctx.world_size
    code = SOLO_CODE if name == SOLO else VARIANTS.get(name, VARIANTS["bucket_cap_mb=N"])
    row: dict[str, Any] = {
        "variant": name,
        "code": code,
        "per_gpu_batch": batch,
        "accumulation": micro,
        "world_size": world,
        "global_batch": batch * world,
    }
    peak = at_optimizer = None
    rounds: list[float] = []
    try:
        if name == SOLO and not ctx.is_main:
            row["status"] = "idle: rank 0 measures one GPU alone"  # this rank waits (below, in per_rank)
            raise _Idle
        if p.count:
            row.update(count_bytes(ctx, p, name, batch))
        base_bytes = _memory_start(ctx)
        cfg = build(ctx, p, name, batch)
        first = ctx.timer(host=True)
        with first:
            losses = [cfg.step()]
        row["first_step_s"] = first.seconds()[0]  # with torch.compile: the compilation
        losses += [cfg.step() for _ in range(p.warmup - 1)]
        at_step: list[int] = []  # memory when every gradient exists (what gradient_as_bucket_view shrinks)
        hook = (
            cfg.optimizer.register_step_pre_hook(lambda *_: at_step.append(torch.cuda.memory_allocated(ctx.device)))
            if ctx.is_gpu
            else None
        )
        all_ms: list[float] = []
        for _ in range(p.repeats):
            timer = ctx.timer()
            for _ in range(p.steps):
                with timer:
                    losses.append(cfg.step())
            times = [1e3 * t for t in timer.seconds()]
            rounds.append(statistics.median(times))
            all_ms += times
        if hook is not None:
            hook.remove()
            at_optimizer = (max(at_step) - base_bytes) / 1e9 if at_step else None
            peak = (torch.cuda.max_memory_allocated(ctx.device) - base_bytes) / 1e9
        row.update(
            {
                "loss_curve": torch.stack(losses).tolist(),
                "step_ms_rounds": rounds,
                "step_ms": statistics.median(all_ms),
                "step_ms_min": min(all_ms),
                "step_ms_max": max(all_ms),
            }
        )
        row["samples_per_s"] = row["global_batch"] / (row["step_ms"] / 1e3)
        if p.comm_share and name in ("torch.compile", SOLO):
            row["comm_share_note"] = (
                "no gradient exchange to switch off"
                if name == SOLO
                else "not measured with torch.compile: a no_sync step would compile another graph"
            )
        elif p.comm_share:
            with cfg.model.no_sync():  # every rank follows its own gradients from here: timing only
                for _ in range(min(2, p.warmup)):
                    cfg.step()
                timer = ctx.timer()
                for _ in range(p.steps):
                    with timer:
                        cfg.step()
            row["nosync_step_ms"] = statistics.median(1e3 * t for t in timer.seconds())
            row["comm_share"] = 1.0 - row["nosync_step_ms"] / row["step_ms"]
        row["status"] = "ok"
    except _Idle:
        pass
    except Exception as exc:  # noqa: BLE001 - a variant that fails on this machine is a result, not a crash
        first_line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        row["status"] = f"failed: {type(exc).__name__}: {first_line}"
        print(f"rank {ctx.rank}: variant {name!r} failed: {type(exc).__name__}: {exc}", flush=True)
    finally:
        cfg = None
        if name == "torch.compile":
            torch._dynamo.reset()
    row["step_ms_per_rank"] = per_rank(ctx, statistics.median(rounds) if rounds else None)
    row["peak_mem_gb_per_rank"] = per_rank(ctx, peak)
    row["peak_mem_gb"] = row["peak_mem_gb_per_rank"][0]
    row["optimizer_mem_gb_per_rank"] = per_rank(ctx, at_optimizer)
    row["optimizer_mem_gb"] = row["optimizer_mem_gb_per_rank"][0]
    return row


# ---------------------------------------------------------------------------------------------
def run(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    import torch

    from nvtutorial.models.unet import build_unet, count_parameters

    if not ctx.is_gpu:
        # One thread per process: a 1-process and a 2-process CPU run then use one core per
        # "GPU" each, and the processes do not fight over cores (the CPU is a simulation).
        torch.set_num_threads(1)
    configs = [(name, batch) for name in p.variants for batch in p.batch_sizes]
    configs += [(SOLO, p.one_gpu_batch)] if p.one_gpu_batch else []
    out: dict[str, Any] = {
        "device": str(ctx.device),
        "world_size": ctx.world_size,
        "model": p.model,
        "model_params": count_parameters(build_unet(p.model)),
        "image_size": p.image_size,
        "tf32_convolutions": bool(torch.backends.cudnn.allow_tf32) if ctx.is_gpu else None,
        "precision": "bf16 autocast" if ctx.is_gpu else "fp32",
    }
    # DDP imports torch._dynamo: a big heap. Freeze what exists now, so that the collection before
    # each configuration (which frees the previous model's reference cycles) stays quick.
    import torch._dynamo  # noqa: F401

    gc.collect()
    gc.freeze()
    if p.prime and ctx.is_gpu:  # (on the CPU there are no clocks to ramp up nor kernels to autotune)
        measure(ctx, dataclasses.replace(p, repeats=2, steps=1, comm_share=False, count=False), *configs[0])
    rows = []
    todo = configs + ([configs[0]] if p.aa else [])
    for i, (name, batch) in enumerate(todo):
        ctx.progress(i, len(todo), "configurations", variant=name, batch=batch)
        repeat = p.aa and i == len(todo) - 1  # the A/A repeat: timed again, its bytes are the first's
        row = measure(ctx, dataclasses.replace(p, count=False) if repeat else p, name, batch)
        row["aa_repeat"] = repeat
        rows.append(row)
    ctx.progress(len(todo), len(todo), "configurations")
    gc.unfreeze()
    out["rows"] = rows
    return out


if __name__ == "__main__":
    runtime.main(run, Params)
