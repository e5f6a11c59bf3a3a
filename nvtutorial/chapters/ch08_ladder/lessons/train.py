"""Train the course transformer on one rung of the strategy ladder (notebook 08).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch08_ladder/lessons/train.py --rung fsdp_zero3
    python nvtutorial/chapters/ch08_ladder/lessons/train.py --rung single          # the one-process reference

One process per GPU with NCCL where there are GPUs, gloo on the CPU otherwise. Every rank builds
the same model from the same seed; the rung (``rungs.py``) wraps it; every step trains on the same
global batch a single process would see: the data-parallel rungs split it between the ranks, tensor
parallelism gives every rank all of it. Rank 0 prints the loss of the whole global batch.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up
from nvtutorial.chapters.ch08_ladder.lessons.rungs import DATA_PARALLEL, RUNGS, single
from nvtutorial.models import transformer

# %% the batch each rank trains on


def local_batch(tokens: torch.Tensor, rung: str) -> torch.Tensor:
    """This rank's part of the global batch: its own slice (data parallel), or all of it."""
    if rung == "single" or not DATA_PARALLEL[rung]:
        return tokens
    return tokens.chunk(dist.get_world_size())[dist.get_rank()]


# %% one training step


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
    """Forward, backward, update. The gradients stay until the next step frees them (under DDP they live in
    its buckets, which persist)."""
    optimizer.zero_grad(set_to_none=True)
    loss = transformer.loss_fn(model, tokens)
    loss.backward()
    optimizer.step()
    return loss.detach()


def global_loss(loss: torch.Tensor, rung: str) -> float:
    """The loss of the whole global batch: the mean of the ranks' losses when they saw different slices."""
    if rung != "single" and DATA_PARALLEL[rung]:
        loss = loss.clone()
        dist.all_reduce(loss)  # a sum, then a division: the mean (ReduceOp.AVG in one call; gloo has it too)
        loss /= dist.get_world_size()
    return loss.item()


# %% the run


def train(
    rung: str, cfg: transformer.Config, steps: int, global_batch: int, device: torch.device, seed: int = 0
) -> list[float]:
    """``steps`` steps of ``rung`` from the seeded model; the loss of each step's global batch."""
    model = transformer.build(cfg, seed=seed, device=device)  # the same weights on every rank
    model, optimizer = (single if rung == "single" else RUNGS[rung])(model, device)
    losses = []
    for step in range(steps):
        tokens = transformer.batch(step, global_batch, cfg, seed=seed).to(device)
        losses.append(global_loss(train_step(model, optimizer, local_batch(tokens, rung)), rung))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--rung", default="fsdp_zero3", choices=["single", *RUNGS])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    cfg = transformer.Config(dim=args.dim, layers=args.layers)
    if args.rung == "single":  # a world of one: the reference needs no process group
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        for step, loss in enumerate(train("single", cfg, args.steps, args.global_batch, device)):
            print(f"step {step}: loss {loss:.6f}")
        return
    device = setup()
    losses = train(args.rung, cfg, args.steps, args.global_batch, device)
    if dist.get_rank() == 0:
        for step, loss in enumerate(losses):
            print(f"{args.rung} step {step}: loss {loss:.6f}")
    runtime.save_metrics({"rung": args.rung, "losses": losses})  # for `nvtutorial.run(this file)`; else nothing
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
