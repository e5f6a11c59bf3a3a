"""The input pipeline: a DataLoader that decodes in the training process starves the GPU (claim C17).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/input_pipeline.py --workers 0
    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/input_pipeline.py --workers 8

Every sample of the course's data set is drawn on the CPU when it is read, as an image is decoded
and augmented. With ``num_workers=0`` the training process does that between steps and the GPU
waits; with ``num_workers=N`` N processes per rank prepare batches ahead of the loop. How many
are enough is a measurement: the rate of the training loop once it runs steadily, past the
batches the workers prepared before the first step (``prefetch_factor`` per worker). The source
says ``4 × GPUs`` and ``pin_memory=True``.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up
from nvtutorial.models.segdata import make_dataset
from nvtutorial.models.unet import build_unet


# %% the trap: decoding in the training process
def make_loader_broken(dataset, sampler, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


# %% the fix: worker processes prepare the batches ahead
def make_loader_fixed(dataset, sampler, batch_size, workers, pin_memory):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        pin_memory=pin_memory,
        persistent_workers=workers > 0,
    )


# %% the training step
def train_step(model, optimizer, images, masks, device):
    images = images.to(device, non_blocking=True)  # overlaps the copy with compute when pinned
    masks = masks.to(device, non_blocking=True)
    loss = F.cross_entropy(model(images), masks)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


# %% measure: samples per second once the loop runs steadily
def steady_rates(model, optimizer, batches, device, warmup, steps, windows):
    """Samples/s of the training loop over ``windows`` windows of ``steps`` steps, after ``warmup`` steps."""
    for _ in range(warmup):  # worker start-up, and the batches they prepared before the first step
        images, masks = next(batches)
        train_step(model, optimizer, images, masks, device)
    rates = []
    for _ in range(windows):
        loss, samples, start = None, 0, time.perf_counter()
        for _ in range(steps):
            images, masks = next(batches)
            loss = train_step(model, optimizer, images, masks, device)
            samples += images.shape[0]
        if loss is not None:
            loss.item()  # wait for the device: the window ends when its last step has
        rates.append(samples / (time.perf_counter() - start))
    return rates


# %% main
def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--workers", type=int, default=0, help="num_workers per rank (0: the trap)")
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--model", default="tiny", choices=("tiny", "small", "full"))
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="steps per measured window")
    parser.add_argument("--windows", type=int, default=2)
    args = parser.parse_args()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device = setup()
    backend = dist.get_backend()

    torch.manual_seed(0)
    model = DDP(build_unet(args.model).to(device), device_ids=[local_rank] if backend == "nccl" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warmup = 2 + 2 * args.workers  # past the prefetched batches: prefetch_factor (2) per worker
    dataset = make_dataset(args.batch_size * (warmup + args.steps * args.windows) * world_size, args.image_size)
    sampler = DistributedSampler(dataset, shuffle=True)
    if args.workers == 0 and not args.pin_memory:
        loader = make_loader_broken(dataset, sampler, args.batch_size)
    else:
        loader = make_loader_fixed(dataset, sampler, args.batch_size, args.workers, args.pin_memory)
    batches = iter(loader)
    rates = steady_rates(model, optimizer, batches, device, warmup, args.steps, args.windows)
    print(
        f"rank {rank}: {args.workers} workers, pin_memory={args.pin_memory}: "
        + ", ".join(f"{r:.0f}" for r in rates)
        + " samples/s",
        flush=True,
    )
    runtime.save_metrics({"workers": args.workers, "pin_memory": args.pin_memory, "samples_per_s": rates})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
