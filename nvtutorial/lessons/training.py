"""DDP training done right: setup, one training step, and validation over every rank.

Used in notebooks 03 and 04, and by the profiling, pitfall and compression workloads. This is
the source tutorial's part 3, complete: the process group itself comes from
:mod:`nvtutorial.runtime` (``init_process_group``, ``LOCAL_RANK``, ``torch.cuda.set_device``,
teardown); this module adds the model wrapped in ``DistributedDataParallel``, the
``DistributedSampler``, ``non_blocking`` copies from pinned memory, mixed precision with the
``torch.amp`` spellings, and a validation that is right about the padding DistributedSampler
adds.

Typical use inside a workload's ``run(ctx, p)``::

    s = training.setup(ctx, model="full", batch_size=16, image_size=256, amp="bf16")
    for epoch in range(epochs):
        s.sampler.set_epoch(epoch)            # without it every epoch has the same order
        for images, masks in s.loader:
            loss = training.train_step(s, images, masks)
    metrics = training.evaluate(s, ctx)      # {"loss": ..., "iou": ...} over the whole set
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from ..models.segdata import DeviceShapes, make_dataset
from ..models.unet import SIZES, build_unet

AMP_DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
VAL_SEED_OFFSET = 1_000_000
"""The validation set is the same generator with ``seed + VAL_SEED_OFFSET``: other images."""


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


def check_setup_args(*, model: str, batch_size: int, image_size: int, samples: int, val_samples: int,
                     classes: int, amp: str, num_workers: int, data: str = "loader", pin_memory: bool = False) -> None:
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


def setup(ctx: Any, *, model: str = "small", batch_size: int = 8, image_size: int = 64,
          samples: int = 256, val_samples: int = 64, classes: int = 4, seed: int = 0,
          lr: float = 1e-3, amp: str = "fp32", channels_last: bool = False,
          num_workers: int = 0, pin_memory: bool = False,
          ddp_kwargs: dict | None = None, data: str = "loader", checkpointing: bool = False,
          compile: bool = False) -> TrainSetup:
    """Model, optimizer, loaders and samplers for this rank; the model wrapped in DDP.

    ``batch_size`` is per GPU: the global batch is ``batch_size × world size``. ``data="device"``
    renders the training set once on the device (no input pipeline in the measurement); the
    DistributedSampler still picks each rank's samples. ``ddp_kwargs`` go to
    ``DistributedDataParallel`` (``gradient_as_bucket_view``, ``bucket_cap_mb``, ``static_graph``...).
    ``checkpointing`` turns on activation checkpointing in the UNet's blocks; ``compile`` wraps
    the DDP model in ``torch.compile`` (compiled on the first step).
    """
    check_setup_args(model=model, batch_size=batch_size, image_size=image_size, samples=samples,
                     val_samples=val_samples, classes=classes, amp=amp, num_workers=num_workers,
                     data=data, pin_memory=pin_memory)
    device = ctx.device
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    net = build_unet(model, classes=classes).to(device)  # type: ignore[arg-type]
    net.checkpointing = checkpointing
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    kwargs = dict(ddp_kwargs or {})
    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device.index])
        kwargs.setdefault("output_device", device.index)
    ddp: nn.Module = DDP(net, **kwargs)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=lr)
    if compile:
        ddp = torch.compile(ddp)  # type: ignore[assignment]
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None

    train_set = make_dataset(samples, image_size, classes, seed)
    val_set = make_dataset(val_samples, image_size, classes, seed + VAL_SEED_OFFSET)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    val_sampler = DistributedSampler(val_set, num_replicas=world, rank=rank, shuffle=False)
    if data == "device":
        dev_train = device_dataset(train_set, device)
        dev_val = device_dataset(val_set, device)
        loader = DataLoader(dev_train, sampler=BatchSampler(sampler, batch_size, drop_last=True), batch_size=None)
        val_loader = DataLoader(dev_val, sampler=BatchSampler(val_sampler, batch_size, drop_last=False), batch_size=None)
    else:
        common = {"num_workers": num_workers, "pin_memory": pin_memory and device.type == "cuda",
                  "persistent_workers": num_workers > 0}
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True, **common)
        val_loader = DataLoader(val_set, batch_size=batch_size, sampler=val_sampler, drop_last=False, **common)
    return TrainSetup(model=ddp, optimizer=optimizer, scaler=scaler, amp=amp, loader=loader, sampler=sampler,
                      val_loader=val_loader, device=device, channels_last=channels_last, classes=classes,
                      batch_size=batch_size, world_size=world, data=data)


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
    """Pixel-wise cross-entropy, computed in fp32 whatever the autocast dtype.

    The mean is taken outside ``cross_entropy``: PyTorch lists ``NLLLoss`` on CUDA as
    non-deterministic (see ``torch.use_deterministic_algorithms``), so the reduced loss could
    differ in its last bits from run to run; the per-pixel losses and this mean do not.
    """
    return F.cross_entropy(logits.float(), masks, reduction="none").mean()


def _backward(s: TrainSetup, loss: Tensor) -> None:
    if s.scaler is not None:
        s.scaler.scale(loss).backward()
    else:
        loss.backward()


def _optimizer_step(s: TrainSetup) -> None:
    if s.scaler is not None:
        s.scaler.step(s.optimizer)
        s.scaler.update()
    else:
        s.optimizer.step()
    s.optimizer.zero_grad(set_to_none=True)


def train_step(s: TrainSetup, images: Tensor, masks: Tensor) -> Tensor:
    """One optimizer step on one batch: copy, forward (autocast), loss, backward (DDP averages
    the gradients across ranks during it), step, ``zero_grad(set_to_none=True)``.

    Returns the detached loss tensor: call ``.item()`` only when you need the number, since it
    waits for the GPU.
    """
    images, masks = to_device(s, images, masks)
    with autocast(s):
        logits = s.model(images)
    loss = loss_fn(logits, masks)
    _backward(s, loss)
    _optimizer_step(s)
    return loss.detach()


def train_step_accumulated(s: TrainSetup, batches: Sequence[tuple[Tensor, Tensor]], sync: bool = True,
                           no_sync: bool = True) -> Tensor:
    """One optimizer step over several micro-batches (gradient accumulation).

    With ``no_sync=True`` every micro-batch but the last runs under ``model.no_sync()``, so DDP
    all-reduces once per optimizer step instead of once per micro-batch (``no_sync=False``: the
    naive way, same result, more communication). ``sync=False`` skips communication on the
    last micro-batch too: a step with no gradient exchange at all, used to measure the
    communication share (each rank then follows its own gradients: never train that way).
    Returns the mean loss of the micro-batches (detached).
    """
    if not batches:
        raise ValueError("train_step_accumulated needs at least one micro-batch")
    losses = []
    n = len(batches)
    for i, (images, masks) in enumerate(batches):
        images, masks = to_device(s, images, masks)
        last = i == n - 1
        communicate = sync if last else (sync and not no_sync)
        with contextlib.nullcontext() if communicate else s.model.no_sync():
            with autocast(s):
                logits = s.model(images)
            loss = loss_fn(logits, masks)
            _backward(s, loss / n)
        losses.append(loss.detach())
    _optimizer_step(s)
    return torch.stack(losses).mean()


def evaluation_counts(s: TrainSetup, rank: int, world_size: int, n_samples: int, model: nn.Module | None = None,
                      loader: Any = None) -> Tensor:
    """This rank's sums for the validation set, padding excluded, as one float64 tensor:
    ``[loss_sum, pixels, samples, intersection[classes], union[classes]]``.

    DistributedSampler(shuffle=False) gives rank ``r`` the positions ``r, r + W, r + 2W, ...``
    of the index list padded (by repeating its start) to a multiple of ``W``; a position
    ``>= n_samples`` is padding, a duplicate that must not count twice. ``loader`` defaults to
    ``s.val_loader``; ``model`` to ``s.model``.
    """
    net = model if model is not None else s.model
    loader = loader if loader is not None else s.val_loader
    c = s.classes
    acc = torch.zeros(3 + 2 * c, dtype=torch.float64, device=s.device)
    position = 0
    was_training = net.training
    net.eval()
    classes = torch.arange(c, device=s.device).view(c, 1, 1, 1)
    with torch.no_grad():
        for images, masks in loader:
            images, masks = to_device(s, images, masks)
            b = images.shape[0]
            global_pos = rank + world_size * torch.arange(position, position + b, device=s.device)
            keep = global_pos < n_samples
            position += b
            with autocast(s):
                logits = net(images)
            pixel_loss = F.cross_entropy(logits.float(), masks, reduction="none")  # [B, H, W]
            acc[0] += (pixel_loss.sum(dim=(1, 2)).double() * keep).sum()
            acc[1] += keep.sum().double() * masks[0].numel()
            acc[2] += keep.sum().double()
            pred = logits.argmax(dim=1)
            kept = keep.view(1, b, 1, 1)
            p_is = pred.unsqueeze(0) == classes
            m_is = masks.unsqueeze(0) == classes
            acc[3:3 + c] += (p_is & m_is & kept).sum(dim=(1, 2, 3)).double()
            acc[3 + c:] += ((p_is | m_is) & kept).sum(dim=(1, 2, 3)).double()
    net.train(was_training)
    return acc


def metrics_from_counts(acc: Tensor, classes: int) -> dict[str, Any]:
    """``loss`` = summed pixel loss / pixels; ``iou`` = mean IoU over the foreground classes
    present (IoU of class c = intersection / union summed over the whole set)."""
    acc = acc.double().cpu()
    inter, union = acc[3:3 + classes], acc[3 + classes:]
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
    """Validation loss and IoU over the WHOLE validation set, every rank taking part.

    Each rank sums its losses, pixel counts, intersections and unions (skipping the padding
    DistributedSampler added); one ``all_reduce(SUM)`` adds the sums of all ranks; then one
    division. The same numbers on every rank, equal to a single process's on the same data.
    """
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    n = len(s.val_loader.dataset)  # type: ignore[arg-type]
    acc = evaluation_counts(s, rank, world, n)
    if world > 1:
        dist.all_reduce(acc, op=dist.ReduceOp.SUM)
    return metrics_from_counts(acc, s.classes)


def evaluate_single_process(s: TrainSetup) -> dict[str, Any]:
    """The reference: one process, the whole validation set in order, no sampler, no padding,
    the model without its DDP wrapper. Call it on one rank only (it uses no collective)."""
    dataset = s.val_loader.dataset
    if isinstance(dataset, DeviceShapes):
        batch_sampler = BatchSampler(range(len(dataset)), s.batch_size, drop_last=False)
        loader: Any = DataLoader(dataset, sampler=batch_sampler, batch_size=None)
    else:
        loader = DataLoader(dataset, batch_size=s.batch_size, shuffle=False)
    n = len(dataset)  # type: ignore[arg-type]
    return metrics_from_counts(evaluation_counts(s, 0, 1, n, model=s.module, loader=loader), s.classes)


def evaluate_naive(s: TrainSetup, ctx: Any = None) -> dict[str, Any]:
    """The source tutorial's pattern, for comparison: each rank averages its own batches'
    mean losses (padding included) and the ranks' averages are averaged with ``all_reduce``.
    Biased whenever the set does not split evenly or the last batch is short."""
    rank_losses = []
    was_training = s.model.training
    s.model.eval()
    with torch.no_grad():
        for images, masks in s.val_loader:
            images, masks = to_device(s, images, masks)
            with autocast(s):
                logits = s.model(images)
            rank_losses.append(F.cross_entropy(logits.float(), masks))
    s.model.train(was_training)
    mean = torch.stack(rank_losses).mean().double()
    samples = torch.tensor(float(_sampler_len(s.val_loader)), dtype=torch.float64, device=s.device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        dist.all_reduce(samples, op=dist.ReduceOp.SUM)
        mean /= dist.get_world_size()
    return {"loss": float(mean), "samples": int(samples)}


def _sampler_len(loader: DataLoader) -> int:
    """Samples this rank's DistributedSampler yields (padding included)."""
    sampler = loader.sampler
    if isinstance(sampler, BatchSampler):  # data="device": the BatchSampler wraps the DistributedSampler
        sampler = sampler.sampler
    return len(sampler)  # type: ignore[arg-type]


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
