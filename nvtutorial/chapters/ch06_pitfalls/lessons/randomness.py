"""Randomness under DDP: forgetting ``set_epoch``, and one seed for every rank (claim C21).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/randomness.py

``DistributedSampler(shuffle=True)`` shuffles with the seed ``seed + epoch``, and its epoch only
changes when the loop calls ``sampler.set_epoch(epoch)``: without it every epoch replays the same
order. Seeds: ``DistributedDataParallel`` copies rank 0's weights to every rank when it wraps
the model, so the weights agree whatever each rank seeded; random augmentation, though, draws
from each rank's own generator, and the same seed on every rank draws the same numbers there.
The sampler keeps its own seed (the ``seed`` argument, 0 by default), the same on every rank,
which it needs to split the data without overlap.
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up
from nvtutorial.models.unet import build_unet


class RandomCrops(Dataset):
    """Item ``i``: ``[i, x, y]``, the corner of a random 48-pixel crop of a 64-pixel image
    (drawn with ``torch.randint``, as ``torchvision.transforms.RandomCrop`` does)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i, *torch.randint(0, 17, (2,)).tolist()])


# %% set_epoch: the trap
def epoch_orders_broken(loader, epochs):
    orders = []
    for epoch in range(epochs):  # noqa: B007  the trap: the epoch never reaches the sampler
        orders.append([int(batch[k, 0]) for batch in loader for k in range(len(batch))])
    return orders


# %% set_epoch: the fix
def epoch_orders_fixed(loader, epochs):
    orders = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)  # the shuffle's seed becomes seed + epoch
        orders.append([int(batch[k, 0]) for batch in loader for k in range(len(batch))])
    return orders


# %% seeds: the trap
def seed_broken(seed, rank):
    torch.manual_seed(seed)  # the same seed on every rank


# %% seeds: the fix
def seed_fixed(seed, rank):
    torch.manual_seed(seed + rank)  # each rank its own random numbers


# %% the weights under DDP
def weights_before_and_after_ddp(device):
    """The sum of the model's weights before and after ``DDP(model)`` on this rank."""
    model = build_unet("tiny").to(device)
    before = sum(float(p.detach().double().sum()) for p in model.parameters())
    DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # broadcasts rank 0's weights
    after = sum(float(p.detach().double().sum()) for p in model.parameters())
    return before, after


# %% main
def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = setup()
    rank = dist.get_rank()

    # the traps, then the fixes
    data = RandomCrops(args.samples)
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=True, seed=args.seed))
    orders = {"broken": epoch_orders_broken(loader, args.epochs), "fixed": epoch_orders_fixed(loader, args.epochs)}
    crops = {}
    for name, seed in (("broken", seed_broken), ("fixed", seed_fixed)):
        seed(args.seed, rank)
        crops[name] = [row.tolist() for batch in loader for row in batch]
    weights = weights_before_and_after_ddp(device)  # with seed_fixed: a different seed on each rank
    print(f"rank {rank}: the order of each epoch without set_epoch {orders['broken']}, with it {orders['fixed']}")
    print(f"rank {rank}: (sample, crop x, crop y), same seed: {crops['broken']}; seed + rank: {crops['fixed']}")
    print(f"rank {rank}: weights before DDP {weights[0]:.6f}, after {weights[1]:.6f}", flush=True)
    runtime.save_metrics({"orders": orders, "crops": crops, "weights": weights})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
