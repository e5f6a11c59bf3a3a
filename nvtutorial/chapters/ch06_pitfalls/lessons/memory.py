"""Out of memory: a training step that does not fit, and the two fixes that make it fit (claims C19, C20).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/memory.py

GPU only: an out-of-memory error is about the GPU's memory and PyTorch's caching allocator; on a
CPU the script says it skipped. Each rank works on its own GPU with no collective (an OOM on
one rank of a DDP job leaves the others waiting in their next all-reduce). To provoke the error
safely on a large GPU, the process is capped (``torch.cuda.set_per_process_memory_fraction``)
between what the model needs at rest and what a step on the whole batch needs. The fixes lower
the peak of the activations kept for backward: the batch in parts with the gradients
accumulated (the same update), or activation checkpointing (recomputed in backward). Freeing
the cache (``torch.cuda.empty_cache()``) is no fix: PyTorch reuses its cache anyway.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from nvtutorial import runtime
from nvtutorial.models.segdata import render
from nvtutorial.models.unet import build_unet


# %% the trap: one step on the whole batch
def train_step(model, optimizer, images, masks):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images).float(), masks)
    loss.backward()  # every activation of the whole batch is alive until here
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


# %% fix 1: the batch in parts, gradients accumulated
def train_step_accumulated(model, optimizer, images, masks, parts=2):
    for part_images, part_masks in zip(images.chunk(parts), masks.chunk(parts)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(part_images).float(), part_masks) / parts
        loss.backward()  # frees this part's activations; the gradients add up
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


# %% fix 2: activation checkpointing
class Checkpointed(torch.nn.Module):
    """A block whose activations are recomputed in backward instead of kept."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def checkpointed(unet):
    for blocks in (unet.encoders, unet.decoders):
        for i in range(len(blocks)):
            blocks[i] = Checkpointed(blocks[i])
    unet.bottleneck = Checkpointed(unet.bottleneck)
    return unet


# %% main
def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--model", default="full", choices=("tiny", "small", "full"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=256)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: needs a GPU (an out-of-memory error is about the GPU's memory and its allocator)", flush=True)
        runtime.save_metrics({"skipped": "needs a GPU"})
        return
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = build_unet(args.model).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images, masks = render(range(args.batch_size), args.image_size, device=device)

    # the cap: 70 % of the way from the memory at rest to the peak of a whole-batch step
    train_step(model, optimizer, images, masks)  # creates the optimizer's state
    torch.cuda.reset_peak_memory_stats(device)
    at_rest = torch.cuda.memory_allocated(device)
    train_step(model, optimizer, images, masks)
    peak = torch.cuda.max_memory_allocated(device)
    torch.cuda.empty_cache()
    cap = torch.cuda.memory_reserved(device) + 0.7 * (peak - at_rest)
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(device).total_memory, device)

    # under the cap
    outcome = {}
    for name, step in (
        ("whole batch", lambda: train_step(model, optimizer, images, masks)),
        ("2 parts, accumulated", lambda: train_step_accumulated(model, optimizer, images, masks, 2)),
        ("checkpointed", lambda: train_step(checkpointed(model), optimizer, images, masks)),
    ):
        try:
            step()
            outcome[name] = "fits"
        except torch.OutOfMemoryError as error:
            outcome[name] = "OOM: " + str(error).split(".")[0]
            optimizer.zero_grad(set_to_none=True)
        print(f"{name}: {outcome[name]} (cap {cap / 2**30:.2f} GiB)", flush=True)
    runtime.save_metrics({"cap_gib": cap / 2**30, "outcome": outcome})


if __name__ == "__main__":
    main()
