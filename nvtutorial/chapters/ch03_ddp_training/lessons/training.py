"""The lesson's DDP training (``ddp_train.py``) packaged for the workloads of notebooks 05, 06 and 07.

The code the course teaches is ``nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py`` (notebook 03); notebook
04 changes it one function at a time. Workloads that train the same UNet for another purpose
(profiling, the pitfall traps, gradient compression) need the model, the optimizer, the loaders and the
step bundled in one object, with a few measurement options (data already on the device, DDP's options, fp16, channels
last); this module gives them that, calling the lesson's functions for the step and the validation. It names no later
chapter: DDP's options and the fp16 step are written here as notebook 04 writes them (``wrap_ddp_tuned``,
``train_step_fp16``), and ``tests/test_training.py`` holds them to notebook 04's, bit for bit::

    s = training.setup(ctx, model="full", batch_size=16, image_size=256, amp="bf16")
    for epoch in range(epochs):
        for images, masks in training.batches(s, epoch):     # sampler.set_epoch(epoch) first
            loss = training.train_step(s, images, masks)     # ddp_train.train_step
    metrics = training.evaluate(s, ctx)                      # ddp_train.validation_sums + all_reduce
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from nvtutorial.chapters.ch03_ddp_training.lessons import ddp_train
from nvtutorial.models.segdata import DeviceShapes, make_dataset
from nvtutorial.models.unet import SIZES, build_unet

AMP_DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
VAL_SEED_OFFSET = 1_000_000
"""The validation set is the same generator with ``seed + VAL_SEED_OFFSET``: other images."""
DDP_OPTIONS = {"bucket_cap_mb": None, "gradient_as_bucket_view": False, "static_graph": False}
"""DDP's tuning options :func:`setup` passes unless ``ddp_kwargs`` says otherwise, each at DDP's own default (as
notebook 04's ``wrap_ddp_tuned`` leaves them): ``bucket_cap_mb=None`` caps each gradient bucket at 25 MiB and the
first at 1 MiB (a number, 25 too, caps every bucket, the first included, at it). Chapter 07's compression hooks
compress one bucket at a time; its committed 2x H200 runs trained with these default buckets."""


@dataclasses.dataclass
class TrainSetup:
    """Everything a training loop needs; returned by :func:`setup`."""

    model: nn.Module  # the DDP-wrapped model, on ``device``
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None  # only for amp="fp16"
    amp: str  # "fp32" | "fp16" | "bf16"
    loader: DataLoader  # training batches; its DistributedSampler is ``sampler``
    sampler: DistributedSampler
    val_loader: DataLoader  # validation batches, DistributedSampler(shuffle=False)
    device: torch.device
    channels_last: bool
    classes: int = 4
    batch_size: int = 8  # per GPU (per rank)
    world_size: int = 1
    data: str = "loader"

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all ranks: per-GPU batch × world size."""
        return self.batch_size * self.world_size

    @property
    def module(self) -> nn.Module:
        """The model without its DDP wrapper (what a checkpoint saves)."""
        return getattr(self.model, "module", self.model)


def check_setup_args(
    *,
    model: str,
    batch_size: int,
    image_size: int,
    samples: int,
    val_samples: int,
    classes: int,
    amp: str,
    num_workers: int,
    data: str = "loader",
    pin_memory: bool = False,
) -> None:
    """Raise ``ValueError`` naming the fix for arguments :func:`setup` cannot use."""
    if model not in SIZES:
        raise ValueError(f"model={model!r}: use one of {', '.join(SIZES)}")
    if amp not in AMP_DTYPES:
        raise ValueError(f"amp={amp!r}: use fp32, fp16 or bf16")
    if data not in ("loader", "device"):
        raise ValueError(f"data={data!r}: use loader (DataLoader from the CPU) or device (rendered once on the device)")
    multiple = 2 ** SIZES[model]["depth"]
    if image_size < 8 or image_size % multiple:
        raise ValueError(f"image_size={image_size} must be a multiple of {multiple} (at least 8) for the {model} UNet")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    if samples < 1 or val_samples < 1:
        raise ValueError(f"samples={samples} and val_samples={val_samples} must be at least 1")
    if classes < 2:
        raise ValueError(f"classes={classes} must be at least 2")
    if num_workers < 0:
        raise ValueError(f"num_workers={num_workers} must be 0 or more")
    if data == "device" and (num_workers or pin_memory):
        raise ValueError("data=device keeps the set on the device already: use num_workers=0 and pin_memory=False")


def setup(
    ctx: Any,
    *,
    model: str = "small",
    batch_size: int = 8,
    image_size: int = 64,
    samples: int = 256,
    val_samples: int = 64,
    classes: int = 4,
    seed: int = 0,
    lr: float = 1e-3,
    amp: str = "fp32",
    channels_last: bool = False,
    num_workers: int = 0,
    pin_memory: bool = False,
    ddp_kwargs: dict | None = None,
    data: str = "loader",
    checkpointing: bool = False,
    compile: bool = False,
) -> TrainSetup:
    """Model, optimizer, loaders and samplers for this rank; the model wrapped in DDP. (Over 80 lines: one keyword per
    knob notebooks 03–07 turn, read in the order a training run is built, so a reader sees every knob's effect in one
    place.)

    ``batch_size`` is per GPU: the global batch is ``batch_size × world size``. ``data="device"``
    renders the training set once on the device (no input pipeline in the measurement); the
    DistributedSampler still picks each rank's samples. ``ddp_kwargs`` go to
    ``DistributedDataParallel`` (``gradient_as_bucket_view``, ``bucket_cap_mb``, ``static_graph``; the others as in
    :data:`DDP_OPTIONS`). ``checkpointing`` turns on activation
    checkpointing in the UNet's blocks; ``compile`` wraps the DDP model in ``torch.compile``.
    """
    check_setup_args(
        model=model,
        batch_size=batch_size,
        image_size=image_size,
        samples=samples,
        val_samples=val_samples,
        classes=classes,
        amp=amp,
        num_workers=num_workers,
        data=data,
        pin_memory=pin_memory,
    )
    device = ctx.device
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    net = build_unet(model, classes=classes).to(device)  # type: ignore[arg-type]
    net.checkpointing = checkpointing
    if channels_last:
        net = net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # stubs lack memory_format
    unknown = sorted(set(ddp_kwargs or {}) - set(DDP_OPTIONS))
    if unknown:
        raise TypeError(f"ddp_kwargs: {', '.join(unknown)} not one of DDP's options here ({', '.join(DDP_OPTIONS)})")
    options = {**DDP_OPTIONS, **(ddp_kwargs or {})}
    ddp: nn.Module = DDP(net, device_ids=[device.index] if device.type == "cuda" else None, **options)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=lr)
    if compile:
        ddp = torch.compile(ddp)  # type: ignore[assignment]
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None

    train_set = make_dataset(samples, image_size, classes, seed)
    val_set = make_dataset(val_samples, image_size, classes, seed + VAL_SEED_OFFSET)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    val_sampler = DistributedSampler(val_set, num_replicas=world, rank=rank, shuffle=False)
    if data == "device":
        loader = DataLoader(
            device_dataset(train_set, device),
            sampler=BatchSampler(sampler, batch_size, drop_last=True),
            batch_size=None,
        )
        val_loader = DataLoader(device_dataset(val_set, device), batch_size=batch_size, sampler=val_sampler)
    else:
        common = {
            "num_workers": num_workers,
            "pin_memory": pin_memory and device.type == "cuda",
            "persistent_workers": num_workers > 0,
        }
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True, **common)
        val_loader = DataLoader(val_set, batch_size=batch_size, sampler=val_sampler, drop_last=False, **common)
    return TrainSetup(
        model=ddp,
        optimizer=optimizer,
        scaler=scaler,
        amp=amp,
        loader=loader,
        sampler=sampler,
        val_loader=val_loader,
        device=device,
        channels_last=channels_last,
        classes=classes,
        batch_size=batch_size,
        world_size=world,
        data=data,
    )


_DEVICE_SETS: dict[tuple, DeviceShapes] = {}


def device_dataset(base: Any, device: torch.device) -> DeviceShapes:
    """``base`` rendered on ``device``, kept for the life of the process (variants share it)."""
    key = (base.samples, base.image_size, base.classes, base.seed, str(device))
    if key not in _DEVICE_SETS:
        _DEVICE_SETS[key] = DeviceShapes(base, device)
    return _DEVICE_SETS[key]


def release_device_datasets() -> None:
    """Forget the data sets :func:`device_dataset` keeps (frees their device memory)."""
    _DEVICE_SETS.clear()


def autocast(s: TrainSetup) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``s.amp`` (a no-op context for fp32)."""
    dtype = AMP_DTYPES[s.amp]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=s.device.type, dtype=dtype)


def to_device(s: TrainSetup, images: Tensor, masks: Tensor) -> tuple[Tensor, Tensor]:
    """Copy a batch to the device; ``non_blocking`` overlaps it with compute when the source is pinned."""
    images = images.to(s.device, non_blocking=True)
    masks = masks.to(s.device, non_blocking=True)
    if s.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, masks


def loss_fn(logits: Tensor, masks: Tensor) -> Tensor:
    """Pixel-wise cross-entropy in fp32, the mean of the per-pixel losses (the lesson's loss)."""
    return F.cross_entropy(logits.float(), masks, reduction="none").mean()


def train_step(s: TrainSetup, images: Tensor, masks: Tensor) -> Tensor:
    """One optimizer step on one batch: :func:`ddp_train.train_step` (fp32 or bf16), or in fp16 with the setup's
    GradScaler (notebook 04's ``train_step_fp16``). Returns the detached loss."""
    if s.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    if s.amp == "fp16":
        assert s.scaler is not None  # setup makes one for fp16
        images, masks = to_device(s, images, masks)
        with autocast(s):
            logits = s.model(images)
        loss = loss_fn(logits, masks)
        s.scaler.scale(loss).backward()  # the scaled loss: small gradients do not underflow to 0
        s.scaler.step(s.optimizer)  # unscales; skips the step if a gradient is inf or NaN
        s.scaler.update()
        s.optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return ddp_train.train_step(s.model, s.optimizer, images, masks, s.device, amp=AMP_DTYPES[s.amp])


def metrics_from_counts(acc: Tensor, classes: int) -> dict[str, Any]:
    """Sums laid out as :func:`ddp_train.validation_sums` returns them -> ``loss``, ``iou`` (mean over the
    shape classes present), ``iou_per_class``, ``pixels``, ``samples``."""
    acc = acc.double().cpu()
    inter, union = acc[3 : 3 + classes], acc[3 + classes :]
    per_class = [float(i / u) if u > 0 else float("nan") for i, u in zip(inter.tolist(), union.tolist())]
    fg = [v for v in per_class[1:] if v == v]
    return {
        "loss": float(acc[0] / acc[1]) if acc[1] > 0 else float("nan"),
        "iou": sum(fg) / len(fg) if fg else float("nan"),
        "iou_per_class": per_class,
        "pixels": int(acc[1]),
        "samples": int(acc[2]),
    }


def evaluate(s: TrainSetup, ctx: Any = None) -> dict[str, Any]:
    """Validation loss and IoU over the WHOLE validation set, every rank taking part
    (:func:`ddp_train.validation_sums`, padding skipped, one ``all_reduce`` of the sums)."""
    acc = ddp_train.validation_sums(s.model, s.val_loader, s.device, AMP_DTYPES[s.amp], s.classes)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(acc)
    return metrics_from_counts(acc, s.classes)


def evaluate_single_process(s: TrainSetup) -> dict[str, Any]:
    """The reference: one process, the whole validation set in order, no sampler, no padding,
    the model without its DDP wrapper. Call it on one rank only (it uses no collective)."""
    loader = DataLoader(s.val_loader.dataset, batch_size=s.batch_size, shuffle=False)
    acc = ddp_train.validation_sums(s.module, loader, s.device, AMP_DTYPES[s.amp], s.classes)
    return metrics_from_counts(acc, s.classes)


def batches(s: TrainSetup, epoch: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
    """The training batches of one epoch, after ``sampler.set_epoch(epoch)``."""
    s.sampler.set_epoch(epoch)
    yield from s.loader


def infinite_batches(s: TrainSetup, set_epoch: bool = True) -> Iterator[tuple[int, Tensor, Tensor]]:
    """``(epoch, images, masks)`` forever, epoch after epoch (``set_epoch`` on unless told not to)."""
    epoch = 0
    while True:
        if set_epoch:
            s.sampler.set_epoch(epoch)
        for images, masks in s.loader:
            yield epoch, images, masks
        epoch += 1
