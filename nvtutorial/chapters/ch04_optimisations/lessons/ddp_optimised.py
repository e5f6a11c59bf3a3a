"""The optimisations of notebook 04, each a change to one function of ``ddp_train.py``.

Every function here is its counterpart in ``nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py`` with one
change; notebook 04 shows the difference (``teach.show_diff(ddp_train.wrap_ddp, ddp_optimised.wrap_ddp_tuned)``) and
the ``train`` workload times it against the unchanged script. Swap one in and run the script to try it.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import wrap_ddp
from nvtutorial.models.unet import build_unet


# %% fp16 and a GradScaler
def train_step_fp16(model, optimizer, images, masks, device, scaler):
    """The step in fp16: the scaler multiplies the loss so that small gradients do not underflow to 0.

    ``scaler = torch.amp.GradScaler(device.type)``, made once (it adapts its scale from step to step).
    """
    images, masks = images.to(device, non_blocking=True), masks.to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=torch.float16):
        logits = model(images)
    loss = F.cross_entropy(
        logits.float(), masks, reduction="none"
    ).mean()  # per pixel, then the mean: repeatable on CUDA
    scaler.scale(loss).backward()  # DDP all-reduces (averages) the scaled gradients here
    scaler.step(optimizer)  # unscales; skips the step if a gradient is inf or NaN
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


# %% DDP's options
def wrap_ddp_tuned(model, device, bucket_cap_mb=None, gradient_as_bucket_view=False, static_graph=False):
    """DDP with its tuning options, each at DDP's own default unless given (so a variant changes one thing)."""
    return DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        # a gradient bucket's cap in MiB (one all-reduce each; a bucket closes once it reaches the cap).
        # None: DDP's 25 MiB, the first bucket's 1 MiB; a number, 25 too, caps every bucket, the first included.
        bucket_cap_mb=bucket_cap_mb,
        gradient_as_bucket_view=gradient_as_bucket_view,  # .grad is a view into its bucket: no copy
        static_graph=static_graph,  # the same parameters used every step: less bookkeeping
    )


# %% gradient accumulation with no_sync
def train_step_accumulated(model, optimizer, micro_batches, device, amp: torch.dtype | None = torch.bfloat16):
    """One optimizer step over several equal micro-batches: the same update as one step on all of them.

    Under ``model.no_sync()`` backward only adds to ``.grad``; the last micro-batch's backward all-reduces
    the sum, so the ranks exchange gradients once per optimizer step instead of once per micro-batch.
    """
    mean_loss = 0.0
    for i, (images, masks) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else model.no_sync():
            images, masks = images.to(device, non_blocking=True), masks.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                logits = model(images)
            loss = F.cross_entropy(logits.float(), masks, reduction="none").mean() / len(micro_batches)
            loss.backward()  # adds this micro-batch's share of the mean to .grad
            mean_loss += loss.detach()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return mean_loss


def train_step_accumulated_every_micro_batch(
    model, optimizer, micro_batches, device, amp: torch.dtype | None = torch.bfloat16
):
    """The same update, without ``no_sync``: every micro-batch's backward all-reduces."""
    mean_loss = 0.0
    for images, masks in micro_batches:
        images, masks = images.to(device, non_blocking=True), masks.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), masks, reduction="none").mean() / len(micro_batches)
        loss.backward()  # adds this micro-batch's share of the mean to .grad
        mean_loss += loss.detach()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return mean_loss


# %% channels_last
def build_model_channels_last(size, device, seed=0):
    """The model's weights in NHWC order, the layout tensor-core convolutions work in (inputs follow)."""
    torch.manual_seed(seed)
    net = build_unet(size).to(device, memory_format=torch.channels_last)  # type: ignore[call-overload]  # stubs omit it
    return wrap_ddp(net, device)


# %% activation checkpointing
def build_model_checkpointed(size, device, seed=0):
    """Each UNet block keeps only its input in forward and recomputes the rest in backward (UNet._block)."""
    torch.manual_seed(seed)
    model = build_unet(size).to(device)
    model.checkpointing = True
    return wrap_ddp(model, device)


# %% torch.compile
def build_model_compiled(size, device, seed=0):
    """The DDP model compiled: fused kernels; the graph is split at DDP's buckets, which still overlap backward."""
    torch.manual_seed(seed)
    return torch.compile(wrap_ddp(build_unet(size).to(device), device))
