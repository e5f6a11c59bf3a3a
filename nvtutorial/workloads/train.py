"""train: DDP training of the course UNet, and every training knob measured one at a time.

Used in notebooks 03 (DDP training, scaling, the source's table) and 04 (optimisations). One
launch can do any of three things, in this order:

1. ``shuffle_epochs=N``: record the order in which each rank's DistributedSampler serves the
   training set over N epochs, with and without ``sampler.set_epoch(epoch)``.
2. ``epochs=N``: the lesson: train N epochs (DataLoader, DistributedSampler, ``set_epoch``,
   pinned memory and ``non_blocking`` copies), validate over every rank after each epoch
   (correctly, naively and single-process for comparison), save a checkpoint from rank 0
   (``checkpoint_at``/``checkpoint``), and with ``resume_check=true`` resume from it in a
   fresh model and optimizer and compare the losses with the uninterrupted run.
3. ``variants=A,B,...``: the benchmark: each variant is ``base`` or ``key=value+key=value``
   overriding this launch's knobs (amp, batch_size, channels_last, compile,
   gradient_as_bucket_view, bucket_cap_mb, static_graph, accumulation, no_sync,
   checkpointing, flash_sdp, data, num_workers, pin_memory). Each gets a fresh model and
   optimizer, ``warmup`` untimed steps, ``steps`` timed steps (CUDA events on GPU), then,
   with ``comm_share=true``, the same number of steps with DDP's gradient exchange switched
   off (``no_sync``): communication share = 1 - (step without exchange / step with it),
   the part of a step spent waiting for communication that the backward pass did not hide.
   Before the first variant is measured, it runs once unrecorded (``prime``): the first
   steps of a process pay for clock ramp-up, cuDNN autotuning and allocator growth.

Memory is ``torch.cuda.max_memory_allocated`` minus what was allocated before the variant's
setup (the pre-rendered data set of ``data=device`` is not counted), and the same difference
just before the optimizer steps, when every gradient exists (``optimizer_mem_gb``); "n/a" on CPU.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.train \\
        --set model=full --set image_size=256 --set batch_size=32 --set amp=bf16 \\
        --set data=device --set variants=base,amp=fp32,channels_last=true
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
from typing import Any, Literal

from nvtutorial import runtime
from nvtutorial import params as params_mod
from nvtutorial.params import require
from nvtutorial.models.unet import SIZES

KNOBS = ("amp", "batch_size", "channels_last", "compile", "gradient_as_bucket_view", "bucket_cap_mb",
         "static_graph", "accumulation", "no_sync", "checkpointing", "flash_sdp", "data", "num_workers",
         "pin_memory")
"""The keys a variant may override."""


@dataclasses.dataclass(frozen=True)
class Params:
    # model and data
    model: Literal["tiny", "small", "full"] = "small"
    image_size: int = 64
    batch_size: int = 8  # per GPU (per rank); the global batch is batch_size × world size
    samples: int = 256  # training set size
    val_samples: int = 61  # validation set size (odd on purpose: DistributedSampler pads it)
    classes: int = 4
    seed: int = 0
    lr: float = 1e-3
    # knobs (a variant overrides them)
    amp: Literal["fp32", "fp16", "bf16"] = "fp32"
    channels_last: bool = False
    compile: bool = False
    gradient_as_bucket_view: bool = False
    bucket_cap_mb: float = 25.0
    static_graph: bool = False
    accumulation: int = 1  # micro-batches per optimizer step
    no_sync: bool = True  # with accumulation > 1: skip the all-reduce on all but the last micro-batch
    checkpointing: bool = False  # activation checkpointing in the UNet blocks
    flash_sdp: bool = True  # torch.backends.cuda.enable_flash_sdp (no attention in a UNet: no effect)
    data: Literal["loader", "device"] = "loader"
    num_workers: int = 0
    pin_memory: bool = False
    cudnn_benchmark: bool = True
    # part 1: the sampler's order
    shuffle_epochs: int = 0
    # part 2: the lesson
    epochs: int = 0
    set_epoch: bool = True
    checkpoint_at: int = -1  # save a checkpoint after this epoch (0-based); -1: never
    resume_check: bool = False  # resume from that checkpoint in a fresh setup and compare
    checkpoint: str | None = None  # where to save it (default: RUN_DIR/checkpoint.pt)
    resume: str | None = None  # load this checkpoint before the lesson and continue after its epoch
    # part 3: the benchmark
    variants: tuple[str, ...] = ()
    warmup: int = 5
    steps: int = 15
    comm_share: bool = True
    prime: bool = True  # run the first variant once, unrecorded, before measuring (clocks, autotuning, caches)

    def __post_init__(self) -> None:
        multiple = 2 ** SIZES[self.model]["depth"]
        require(self.image_size >= 8 and self.image_size % multiple == 0,
                f"image_size={self.image_size} must be a multiple of {multiple} (at least 8) for the {self.model} UNet")
        require(self.samples >= 1 and self.val_samples >= 1, "samples and val_samples must be at least 1")
        require(self.classes >= 2, f"classes={self.classes} must be at least 2")
        require(self.lr > 0, f"lr={self.lr} must be positive")
        _check_knobs(self)
        require(self.epochs >= 0 and self.shuffle_epochs >= 0, "epochs and shuffle_epochs must be 0 or more")
        require(self.warmup >= 0, f"warmup={self.warmup} must be 0 or more")
        require(self.steps >= 1, f"steps={self.steps} must be at least 1")
        require(self.checkpoint_at < self.epochs, f"checkpoint_at={self.checkpoint_at} must be below epochs={self.epochs}")
        require(not self.resume_check or 0 <= self.checkpoint_at < self.epochs - 1,
                f"resume_check needs a checkpoint before the last epoch: 0 <= checkpoint_at <= {self.epochs - 2}")
        require(not self.resume_check or self.resume is None, "resume_check starts from scratch: leave resume unset")
        require(self.epochs > 0 or self.variants or self.shuffle_epochs > 0,
                "nothing to do: set epochs, variants or shuffle_epochs")
        for v in self.variants:
            _check_knobs(_merged(self, v), f"variant {v!r}: ")


def variant_overrides(variant: str) -> dict[str, Any]:
    """``"amp=bf16+channels_last=true"`` -> ``{"amp": "bf16", "channels_last": True}``; ``base`` -> ``{}``."""
    variant = variant.strip()
    if variant in ("", "base"):
        return {}
    types_ = params_mod.fields(Params)
    out: dict[str, Any] = {}
    for item in variant.split("+"):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise params_mod.ParamError(f"variant {variant!r}: {item!r} is not KEY=VALUE (write e.g. amp=bf16+channels_last=true)")
        if key not in KNOBS:
            raise params_mod.ParamError(f"variant {variant!r}: unknown knob {key!r}; knobs: {', '.join(KNOBS)}")
        out[key] = params_mod._coerce(key, types_[key], value.strip())
    return out


def _check_knobs(k: Any, where: str = "") -> None:
    """The checks on the knobs a variant may change (``k``: a Params or a namespace of knobs)."""
    require(k.batch_size >= 1, f"{where}batch_size={k.batch_size} must be at least 1")
    require(k.bucket_cap_mb > 0, f"{where}bucket_cap_mb={k.bucket_cap_mb} must be positive")
    require(k.accumulation >= 1, f"{where}accumulation={k.accumulation} must be at least 1")
    require(k.num_workers >= 0, f"{where}num_workers={k.num_workers} must be 0 or more")
    require(not (k.data == "device" and (k.num_workers or k.pin_memory)),
            f"{where}data=device renders the set on the device already: use num_workers=0 and pin_memory=false")


def _merged(p: Any, variant: str) -> Any:
    """The knobs of ``p`` with a variant's overrides, as a namespace (no validation of ``p`` itself)."""
    import types

    over = variant_overrides(variant)
    if over.get("data") == "device":
        over.setdefault("num_workers", 0)
        over.setdefault("pin_memory", False)
    return types.SimpleNamespace(**{**{name: getattr(p, name) for name in KNOBS}, **over})


def knobs_for(p: Params, variant: str) -> Params:
    """This launch's parameters with a variant's overrides applied (and checked).

    ``data=device`` also turns loader workers and pinning off unless the variant sets them.
    """
    return dataclasses.replace(p, **{name: getattr(_merged(p, variant), name) for name in KNOBS})


# ---------------------------------------------------------------------------------------------
def _setup(ctx: runtime.Context, k: Params):
    from nvtutorial.lessons import training

    ddp_kwargs: dict[str, Any] = {"gradient_as_bucket_view": k.gradient_as_bucket_view,
                                  "bucket_cap_mb": k.bucket_cap_mb, "static_graph": k.static_graph}
    return training.setup(ctx, model=k.model, batch_size=k.batch_size, image_size=k.image_size, samples=k.samples,
                          val_samples=k.val_samples, classes=k.classes, seed=k.seed, lr=k.lr, amp=k.amp,
                          channels_last=k.channels_last, num_workers=k.num_workers, pin_memory=k.pin_memory,
                          ddp_kwargs=ddp_kwargs, data=k.data, checkpointing=k.checkpointing, compile=k.compile)


def _set_flash(enabled: bool) -> bool:
    import torch

    before = torch.backends.cuda.flash_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(enabled)
    return before


def shuffle_orders(ctx: runtime.Context, p: Params, show: int = 8) -> dict[str, Any]:
    """The first ``show`` sample indices this rank gets in each epoch, with and without set_epoch."""
    from torch.utils.data import DistributedSampler

    from nvtutorial.models.segdata import make_dataset

    dataset = make_dataset(p.samples, 8, p.classes, p.seed)  # only its length matters
    with_set, without = [], []
    sampler_a = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=p.seed)
    sampler_b = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=p.seed)
    full_with = []
    for epoch in range(p.shuffle_epochs):
        sampler_a.set_epoch(epoch)
        order = list(sampler_a)
        full_with.append(order)
        with_set.append(order[:show])
        without.append(list(sampler_b)[:show])
    return {"with_set_epoch": with_set, "without_set_epoch": without,
            "per_rank_samples": len(sampler_a),
            "identical_without": all(o == without[0] for o in without),
            "identical_with": len(full_with) > 1 and all(o == full_with[0] for o in full_with)}


def _epoch_losses(s: Any, p: Params, epoch: int, set_epoch: bool) -> list[float]:
    """Train one epoch; the per-step losses (one host sync at the end of the epoch)."""
    import torch

    from nvtutorial.lessons import training

    if set_epoch:
        s.sampler.set_epoch(epoch)
    losses = []
    group: list = []
    for images, masks in s.loader:
        group.append((images, masks))
        if len(group) == p.accumulation:
            if p.accumulation == 1:
                losses.append(training.train_step(s, *group[0]))
            else:
                losses.append(training.train_step_accumulated(s, group, no_sync=p.no_sync))
            group = []
    return torch.stack(losses).tolist() if losses else []


def lesson(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    """Part 2: train, validate every epoch, checkpoint, optionally resume and compare."""
    import torch

    cudnn_before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    if ctx.is_gpu and p.resume_check:
        # The same losses after a resume need the same kernels: no autotuning, deterministic cuDNN.
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    try:
        return _lesson(ctx, p)
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn_before


def _lesson(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    from torch.utils.data import BatchSampler

    from nvtutorial.lessons import checkpoint as ckpt
    from nvtutorial.lessons import training

    s = _setup(ctx, p)
    sampler_len = len(s.sampler)
    val_sampler = s.val_loader.sampler
    val_sampler = val_sampler.sampler if isinstance(val_sampler, BatchSampler) else val_sampler
    info: dict[str, Any] = {
        "per_gpu_batch": s.batch_size, "global_batch": s.global_batch * p.accumulation,
        "accumulation": p.accumulation,
        "train_samples": p.samples, "samples_per_rank": sampler_len,
        "steps_per_epoch": sampler_len // s.batch_size // p.accumulation,
        "val_samples": p.val_samples, "val_samples_per_rank": len(val_sampler),
        "val_padding": len(val_sampler) * ctx.world_size - p.val_samples,
    }
    start_epoch, step = 0, 0
    if p.resume:
        meta = ckpt.load_checkpoint(p.resume, s)
        start_epoch, step = meta["epoch"] + 1, meta["step"]
        info["resumed_from_epoch"] = meta["epoch"]
    path = p.checkpoint or str(ctx.run_dir / "checkpoint.pt")
    history: list[dict[str, Any]] = [{"epoch": start_epoch - 1, "step": step, **_val_brief(training.evaluate(s, ctx))}]
    step_losses: list[list[float]] = []
    epochs = ctx.timer(host=True)
    for epoch in range(start_epoch, p.epochs):
        with epochs:
            losses = _epoch_losses(s, p, epoch, p.set_epoch)
        step += len(losses)
        step_losses.append(losses)
        val = training.evaluate(s, ctx)
        history.append({"epoch": epoch, "step": step, "train_loss": statistics.fmean(losses) if losses else math.nan,
                        **_val_brief(val)})
        ctx.progress(epoch + 1 - start_epoch, p.epochs - start_epoch, "lesson epochs", loss=round(history[-1]["val_loss"], 4))
        if epoch == p.checkpoint_at or (p.checkpoint and epoch == p.epochs - 1):
            ckpt.save_checkpoint(path, s, epoch=epoch, step=step)
            info["checkpoint"] = {"path": path, "epoch": epoch, "step": step}
    # Validation three ways, on the trained model.
    val_correct = training.evaluate(s, ctx)
    val_naive = training.evaluate_naive(s, ctx)
    val_single = training.evaluate_single_process(s) if ctx.is_main else None
    ctx.barrier()
    out: dict[str, Any] = {
        **info, "history": history, "step_losses": step_losses, "train_s": sum(epochs.seconds(), 0.0),
        "val": val_correct, "val_naive": val_naive, "val_single": val_single,
        "weights_checksum": _checksum(s.module),
    }
    if p.resume_check:
        out["resume"] = _resume_check(ctx, p, path, step_losses, val_correct)
    del s
    gc.collect()
    return out


def _val_brief(val: dict[str, Any]) -> dict[str, Any]:
    return {"val_loss": val["loss"], "val_iou": val["iou"]}


def _checksum(module: Any) -> float:
    import torch

    with torch.no_grad():
        return float(sum(p.double().sum().item() * (i + 1) for i, p in enumerate(module.parameters())))


def _resume_check(ctx: runtime.Context, p: Params, path: str, step_losses: list[list[float]],
                  val_uninterrupted: dict[str, Any]) -> dict[str, Any]:
    """A fresh model and optimizer, loaded from the checkpoint, trained on to the end."""
    from nvtutorial.lessons import checkpoint as ckpt
    from nvtutorial.lessons import training

    s = _setup(ctx, p)  # new model, optimizer and loaders; the checkpoint decides the state
    meta = ckpt.load_checkpoint(path, s)
    resumed: list[list[float]] = []
    for epoch in range(meta["epoch"] + 1, p.epochs):
        resumed.append(_epoch_losses(s, p, epoch, p.set_epoch))
    reference = step_losses[meta["epoch"] + 1:]
    flat_ref = [x for e in reference for x in e]
    flat_res = [x for e in resumed for x in e]
    diff = max((abs(a - b) for a, b in zip(flat_ref, flat_res)), default=math.nan)
    val = training.evaluate(s, ctx)
    return {"from_epoch": meta["epoch"], "from_step": meta["step"], "losses_uninterrupted": reference,
            "losses_resumed": resumed, "max_abs_loss_diff": diff, "identical": flat_ref == flat_res,
            "val_uninterrupted": val_uninterrupted["loss"], "val_resumed": val["loss"],
            "weights_checksum": _checksum(s.module)}


# ---------------------------------------------------------------------------------------------
def _memory_start(ctx: runtime.Context) -> int:
    import torch

    gc.collect()
    if not ctx.is_gpu:
        return 0
    torch.cuda.synchronize(ctx.device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(ctx.device)
    return torch.cuda.memory_allocated(ctx.device)


def _per_rank(ctx: runtime.Context, value: float | None) -> list[float | None]:
    """One number from every rank (an all_reduce of a one-hot vector); None stays None."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(ctx.world_size, dtype=torch.float64, device=ctx.device)
    t[ctx.rank] = math.nan if value is None else value
    dist.all_reduce(t)
    return [None if math.isnan(v) else v for v in t.tolist()]


def measure_variant(ctx: runtime.Context, p: Params, variant: str) -> dict[str, Any]:
    """Fresh model and optimizer with the variant's knobs; timed steps; memory; loss curve."""
    import torch

    from nvtutorial.lessons import training

    k = knobs_for(p, variant)
    if k.data == "device":  # render the data sets before the memory baseline
        from nvtutorial.models.segdata import make_dataset

        training.device_dataset(make_dataset(k.samples, k.image_size, k.classes, k.seed), ctx.device)
        training.device_dataset(make_dataset(k.val_samples, k.image_size, k.classes, k.seed + training.VAL_SEED_OFFSET),
                                ctx.device)
    need = k.batch_size * ctx.world_size * k.accumulation
    if need > k.samples:
        raise ValueError(f"variant {variant!r}: one step needs {need} samples but samples={k.samples}: raise samples")
    flash_before = _set_flash(k.flash_sdp)
    base_bytes = _memory_start(ctx)
    row: dict[str, Any] = {"variant": variant, "amp": k.amp, "per_gpu_batch": k.batch_size,
                           "accumulation": k.accumulation, "world_size": ctx.world_size,
                           "global_batch": k.batch_size * ctx.world_size * k.accumulation}
    s = batches = None
    at_optimizer = None
    try:
        s = _setup(ctx, k)
        batches = training.infinite_batches(s)

        def step(sync: bool = True):
            group = [next(batches)[1:] for _ in range(k.accumulation)]
            if k.accumulation == 1 and sync:
                return training.train_step(s, *group[0])
            return training.train_step_accumulated(s, group, sync=sync, no_sync=k.no_sync)

        first = ctx.timer(host=True)
        with first:
            losses = [step()]
        row["first_step_s"] = first.seconds()[0]  # includes compilation with compile=true
        for _ in range(max(0, k.warmup - 1)):
            losses.append(step())
        # Memory just before each optimizer step, when every gradient exists: what
        # gradient_as_bucket_view shrinks (the peak itself usually comes earlier, in backward).
        at_step: list[int] = []
        hook = (s.optimizer.register_step_pre_hook(lambda *_: at_step.append(torch.cuda.memory_allocated(ctx.device)))
                if ctx.is_gpu else None)
        timer = ctx.timer()
        for _ in range(k.steps):
            with timer:
                losses.append(step())
        times = [1e3 * t for t in timer.seconds()]
        if hook is not None:
            hook.remove()
            at_optimizer = (max(at_step) - base_bytes) / 1e9 if at_step else None  # fp16: every step skipped
        row["loss_curve"] = torch.stack(losses).tolist()
        row["step_ms"] = statistics.median(times)
        row["step_ms_min"], row["step_ms_max"] = min(times), max(times)
        row["samples_per_s"] = row["global_batch"] / (row["step_ms"] / 1e3)
        peak = (torch.cuda.max_memory_allocated(ctx.device) - base_bytes) / 1e9 if ctx.is_gpu else None
        if k.comm_share and k.compile:
            row["comm_share_note"] = "not measured with compile=true: a no_sync step would compile another graph"
        elif k.comm_share:
            for _ in range(min(2, k.warmup)):
                step(sync=False)
            timer = ctx.timer()
            for _ in range(k.steps):
                with timer:
                    step(sync=False)
            row["nosync_step_ms"] = statistics.median(1e3 * t for t in timer.seconds())
            row["comm_share"] = 1.0 - row["nosync_step_ms"] / row["step_ms"]
        row["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a knob that fails on this machine is a result, not a crash
        peak = None
        row["status"] = f"failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        print(f"rank {ctx.rank}: variant {variant!r} failed: {type(exc).__name__}: {exc}", flush=True)
    finally:
        s = batches = None
        _set_flash(flash_before)
        if k.compile:
            torch._dynamo.reset()
    row["peak_mem_gb_per_rank"] = _per_rank(ctx, peak)
    row["peak_mem_gb"] = row["peak_mem_gb_per_rank"][0]
    row["optimizer_mem_gb_per_rank"] = _per_rank(ctx, at_optimizer)
    row["optimizer_mem_gb"] = row["optimizer_mem_gb_per_rank"][0]
    return row


# ---------------------------------------------------------------------------------------------
def run(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    import torch

    from nvtutorial.models.unet import build_unet, count_parameters

    if ctx.is_gpu:
        torch.backends.cudnn.benchmark = p.cudnn_benchmark
    else:
        # One thread per process: a 1-process and a 2-process CPU run then use one core per
        # "GPU" each, and the processes do not fight over cores (the CPU is a simulation).
        torch.set_num_threads(1)
    need = p.batch_size * ctx.world_size * p.accumulation
    if p.epochs and need > p.samples:
        raise ValueError(f"one step needs batch_size × world size × accumulation = {need} samples, "
                         f"but samples={p.samples}: raise samples or lower batch_size")
    out: dict[str, Any] = {
        "device": str(ctx.device), "world_size": ctx.world_size,
        "model": p.model, "model_params": count_parameters(build_unet(p.model, p.classes)),
        "image_size": p.image_size, "per_gpu_batch": p.batch_size, "global_batch": need,
        "tf32_convolutions": bool(torch.backends.cudnn.allow_tf32) if ctx.is_gpu else None,
    }
    if p.shuffle_epochs:
        out["shuffle"] = shuffle_orders(ctx, p)
    if p.epochs:
        out["lesson"] = lesson(ctx, p)
    rows = []
    if p.variants:
        # DDP imports torch._dynamo: a big heap. Freeze what exists now, so that the collection
        # before each variant (which frees the previous model's reference cycles) stays quick.
        import torch._dynamo  # noqa: F401  (what DDP imports on first use)

        gc.collect()
        gc.freeze()
    if p.variants and p.prime:
        measure_variant(ctx, dataclasses.replace(p, steps=1), p.variants[0])
    for i, variant in enumerate(p.variants):
        ctx.progress(i, len(p.variants), "variants", variant=variant)
        row = measure_variant(ctx, p, variant)
        rows.append(row)
        ctx.progress(i + 1, len(p.variants), "variants", variant=variant, step_ms=round(row.get("step_ms", math.nan), 2))
    if p.variants:
        gc.unfreeze()
    out["rows"] = rows
    return out


if __name__ == "__main__":
    runtime.main(run, Params)
