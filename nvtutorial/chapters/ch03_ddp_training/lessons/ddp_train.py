"""Train the course UNet with DistributedDataParallel, one process per GPU (notebook 03).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py \\
        --epochs 3 --checkpoint-dir ckpt
    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py \\
        --epochs 3 --resume ckpt/epoch1.pt

With GPUs: NCCL, the GPU of LOCAL_RANK, bf16 autocast. Without: gloo on the CPU in fp32 (bf16 autocast
runs on the CPU too, ``--precision bf16``, but was 3-7x slower than fp32 on the course's test CPU).
Each rank trains on its own share of the set; DDP averages the gradients during backward, so every
rank holds the same weights after every step. After each epoch every rank validates its share, one
all_reduce adds the sums, and rank 0 saves a checkpoint.
"""

import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from nvtutorial import runtime
from nvtutorial.models.segdata import make_dataset
from nvtutorial.models.unet import build_unet


# %% the process group
def setup(timeout=None):
    """Join the process group (torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE); this process's device.

    NCCL on GPU number LOCAL_RANK when every rank of this node has a GPU of its own, else gloo on the CPU: every
    rank decides alike, so their backends agree. ``timeout`` (a timedelta): how long a collective may wait.
    Every lesson of the course starts with this function."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))  # 0 when one process runs without torchrun
    if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1")):
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before any other CUDA work
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    return device


# %% the model
def build_model(size, device, seed=0):
    """The UNet on this rank's device, wrapped in DDP."""
    torch.manual_seed(seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    return wrap_ddp(build_unet(size).to(device), device)


def wrap_ddp(model, device):
    """DDP all-reduces the gradients in buckets during backward, overlapping the rest of it."""
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


# %% the data
def make_loaders(args, device):
    """Batches of this rank's share of the training and validation sets; ``batch_size`` is per GPU."""
    train_set = make_dataset(args.samples, args.image_size, seed=0)
    val_set = make_dataset(args.val_samples, args.image_size, seed=1)  # other images
    common = {
        "batch_size": args.batch_size,
        "num_workers": args.workers,
        "persistent_workers": args.workers > 0,
        # pinned memory: .to(device, non_blocking=True) does not make the CPU wait; on the GPU the copy still
        # runs in stream order, before the forward (overlapping it with compute needs a side stream)
        "pin_memory": device.type == "cuda",
    }
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # each rank a disjoint 1/world of the set
    train_loader = DataLoader(train_set, sampler=sampler, drop_last=True, **common)
    return train_loader, DataLoader(val_set, sampler=DistributedSampler(val_set, shuffle=False), **common)


# %% one training step
def train_step(model, optimizer, images, masks, device, amp: torch.dtype | None = torch.bfloat16):
    """One optimizer step on this rank's batch; the loss as a tensor (``.item()`` would wait for the GPU)."""
    images, masks = images.to(device, non_blocking=True), masks.to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=amp, enabled=amp is not None):  # amp=None: fp32
        logits = model(images)
    loss = F.cross_entropy(
        logits.float(), masks, reduction="none"
    ).mean()  # per pixel, then the mean: repeatable on CUDA
    loss.backward()  # DDP all-reduces (averages) the gradients here, bucket by bucket
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


# %% validation
@torch.no_grad()
def validation_sums(model, loader, device, amp: torch.dtype | None = torch.bfloat16, classes=4):
    """This rank's [loss sum, pixels, samples, intersections, unions], skipping DistributedSampler's padding.

    DistributedSampler(shuffle=False) gives rank r the positions r, r + W, r + 2W... of the set, padded to
    a multiple of W by repeating its first samples: a position >= len(dataset) is a duplicate."""
    sampler = loader.sampler
    rank, world = (sampler.rank, sampler.num_replicas) if isinstance(sampler, DistributedSampler) else (0, 1)
    sums = torch.zeros(3 + 2 * classes, dtype=torch.float64, device=device)
    cls, seen = torch.arange(classes, device=device).view(-1, 1, 1, 1), 0
    model.eval()
    for images, masks in loader:
        images, masks = images.to(device, non_blocking=True), masks.to(device, non_blocking=True)
        keep = rank + world * torch.arange(seen, seen + len(images), device=device) < len(loader.dataset)
        seen += len(images)
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            logits = model(images)[keep]
        masks, pred = masks[keep], logits.argmax(dim=1)
        sums[0] += F.cross_entropy(logits.float(), masks, reduction="none").double().sum()
        sums[1] += masks.numel()  # pixels
        sums[2] += len(masks)  # samples
        sums[3 : 3 + classes] += ((pred == cls) & (masks == cls)).sum(dim=(1, 2, 3))
        sums[3 + classes :] += ((pred == cls) | (masks == cls)).sum(dim=(1, 2, 3))
    model.train()
    return sums


def evaluate(model, loader, device, amp: torch.dtype | None = torch.bfloat16, classes=4):
    """Loss per pixel and mean IoU of the shape classes over the WHOLE set, the same on every rank."""
    sums = validation_sums(model, loader, device, amp, classes)
    if isinstance(loader.sampler, DistributedSampler):  # each rank holds a share: add them up
        dist.all_reduce(sums)  # a SUM: every rank now holds the totals
    inter, union = sums[4 : 3 + classes], sums[4 + classes :]  # class 0 (the background) left out
    return {
        "loss": (sums[0] / sums[1]).item(),
        "iou": (inter / union)[union > 0].mean().item(),
        "samples": int(sums[2]),
    }


# %% checkpoints
def save_checkpoint(path, model, optimizer, epoch):
    """Rank 0 writes (every rank holds the same weights); everyone waits until the file is complete."""
    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # a crash while writing leaves the previous file whole
    dist.barrier()


def load_checkpoint(path, model, optimizer, device):
    """Every rank loads onto its own device, tensors and plain containers only; the epoch to continue with."""
    state = torch.load(path, map_location=device, weights_only=True)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1


# %% the training loop
def train(args, device):
    """Train to ``args.epochs`` (from a checkpoint with ``--resume``): the model, and a row of numbers per epoch."""
    amp = torch.bfloat16 if args.precision == "bf16" or (args.precision == "auto" and device.type == "cuda") else None
    model = build_model(args.model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    train_loader, val_loader = make_loaders(args, device)
    start = load_checkpoint(args.resume, model, optimizer, device) if args.resume else 0
    history = []
    if dist.get_rank() == 0:
        runtime.progress(start, args.epochs, "epochs")  # a bar under the course's launcher, else a line
    for epoch in range(start, args.epochs):
        # a new shuffle every epoch, the same on every rank
        train_loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]  # make_loaders's DistributedSampler
        losses = [train_step(model, optimizer, images, masks, device, amp) for images, masks in train_loader]
        history.append(
            {
                "epoch": epoch,
                "train_loss": torch.stack(losses).mean().item(),
                **evaluate(model, val_loader, device, amp),
            }
        )
        if dist.get_rank() == 0:
            runtime.progress(
                epoch + 1,
                args.epochs,
                "epochs",
                train_loss=history[-1]["train_loss"],
                val_loss=history[-1]["loss"],
                iou=history[-1]["iou"],
            )
        if args.checkpoint_dir:
            save_checkpoint(os.path.join(args.checkpoint_dir, f"epoch{epoch}.pt"), model, optimizer, epoch)
    runtime.save_metrics({"history": history, "weights_sha256": fingerprint(model)})  # only under the launcher
    return model, history


def fingerprint(model):
    """A digest of every weight's bits: equal digests on two ranks, identical weights."""
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()


# %% main
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="small", choices=["tiny", "small", "full"])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8, help="per GPU: the global batch is this × world size")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--val-samples", type=int, default=61)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"], help="auto: bf16 on GPUs")
    parser.add_argument("--checkpoint-dir", help="rank 0 saves DIR/epoch{N}.pt after every epoch")
    parser.add_argument("--resume", help="a checkpoint to continue from")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    device = setup()
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
    train(args, device)
    dist.destroy_process_group()
