"""Validation on rank 0 alone: a DDP job that stalls (and dies at the timeout), and its fix (claim C18).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/validation.py  # the trap
    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/validation.py \\
        --fixed                                 # the fix
    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/validation.py \\
        --val-samples 100000 --pg-timeout 5     # the trap, ended by the process group's timeout

The trap: after each epoch rank 0 validates alone on the whole validation set while rank 1 goes
on to the next epoch. Rank 1's first backward all-reduces the gradients (DDP) and that
all-reduce cannot finish before rank 0 joins it: rank 1 waits for as long as rank 0 validates,
and when that is longer than the process group's timeout (10 minutes by default with NCCL, 30 with gloo), the job dies.
Where rank 1's host thread waits depends on the backend: with gloo (CPU) inside
``loss.backward()``, since DDP waits for a CPU collective there; with NCCL the all-reduce is only
queued on the GPU, backward returns, and the host blocks at the next point that waits for the
GPU: ``loss.item()``. The fix: every rank validates its own share of the set and one
``all_reduce`` adds the sums, so every rank gets the loss of the whole set.
"""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons import ddp_train  # its setup(): the process group, as 03 sets it up
from nvtutorial.models.segdata import make_dataset
from nvtutorial.models.unet import build_unet


# %% train
def train_one_epoch(model, loader, optimizer, device):
    for images, masks in loader:
        images, masks = images.to(device), masks.to(device)
        loss = F.cross_entropy(model(images), masks)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients during backward
        optimizer.step()
        last = loss.item()  # the number, for the log: the host waits here for the device to finish
    return last


# %% evaluate
def evaluate(net, dataset, device, batch_size=16):
    """The summed pixel loss and the number of pixels over ``dataset``, in this process alone."""
    total, pixels = 0.0, 0
    net.eval()
    with torch.no_grad():
        for images, masks in DataLoader(dataset, batch_size=batch_size):
            images, masks = images.to(device), masks.to(device)
            total += F.cross_entropy(net(images), masks, reduction="sum").item()
            pixels += masks.numel()
    net.train()
    return total, pixels


# %% the trap
def validate_rank0_only(model, val_set, rank, world_size, device):
    if rank == 0:
        total, pixels = evaluate(model.module, val_set, device)  # the whole set, one process
        return total / pixels
    return None


# %% the fix
def validate_all_ranks(model, val_set, rank, world_size, device):
    share = Subset(val_set, range(rank, len(val_set), world_size))  # every sample on exactly one rank
    total, pixels = evaluate(model.module, share, device)
    sums = torch.tensor([total, pixels], dtype=torch.float64, device=device)
    dist.all_reduce(sums)  # the sums of every rank, on every rank
    return (sums[0] / sums[1]).item()


# %% the loop
def fit(model, optimizer, sampler, loader, val_set, validate, epochs, rank, world_size, device):
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        loss = train_one_epoch(model, loader, optimizer, device)
        print(f"rank {rank}: epoch {epoch} trained (last loss {loss:.4f}), validating", flush=True)
        val_loss = validate(model, val_set, rank, world_size, device)
        print(f"rank {rank}: epoch {epoch} validation loss {val_loss}", flush=True)
    return val_loss


# %% setup
def setup(model_size, image_size, samples, val_samples, batch_size, device):
    """The DDP model, its optimizer, the training sampler and loader, the validation set."""
    torch.manual_seed(0)
    net = build_unet(model_size).to(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_set = make_dataset(samples, image_size)
    sampler = DistributedSampler(train_set, shuffle=True)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)
    return model, optimizer, sampler, loader, make_dataset(val_samples, image_size, seed=1)


# %% main
def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--fixed", action="store_true", help="validate on every rank (the fix)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--model", default="tiny", choices=("tiny", "small", "full"))
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--val-samples", type=int, default=41, help="odd: the ranks' shares differ by one")
    parser.add_argument("--pg-timeout", type=float, help="seconds a collective may wait (default: PyTorch's)")
    args = parser.parse_args()
    device = ddp_train.setup(datetime.timedelta(seconds=args.pg_timeout) if args.pg_timeout else None)
    rank, world_size, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
    model, optimizer, sampler, loader, val_set = setup(
        args.model, args.image_size, args.samples, args.val_samples, args.batch_size, device
    )
    validate = validate_all_ranks if args.fixed else validate_rank0_only
    val_loss = fit(model, optimizer, sampler, loader, val_set, validate, args.epochs, rank, world_size, device)

    # the check: one process over the whole set gives the same loss
    total, pixels = evaluate(model.module, val_set, device)
    print(f"rank {rank}: one process over the whole set: {total / pixels}", flush=True)
    runtime.save_metrics({"val_loss": val_loss, "single_process_val_loss": total / pixels, "backend": backend})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
