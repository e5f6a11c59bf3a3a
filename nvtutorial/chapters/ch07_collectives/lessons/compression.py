"""Gradient compression as DDP communication hooks: PyTorch's fp16, bf16 and PowerSGD, and a top-k hook.

Used in notebook 07: shown from this file; the ``compression`` workload trains the course UNet
with each hook. A communication hook replaces the all-reduce DDP runs for each bucket of
gradients. Train a small model with one of them, and check that the replicas stay identical::

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch07_collectives/lessons/compression.py --hook topk

NCCL on GPUs, gloo on the CPU.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up

HOOKS = ("none", "fp16", "bf16", "powersgd", "topk")


def all_gather_flat(output, input, group=None, async_op=False):
    """Every rank's ``input`` concatenated into ``output`` (``all_gather_single`` in newer torch)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, input, group=group, async_op=async_op)


# %% a top-k hook with error feedback
class TopKState:
    """What :func:`topk_hook` keeps between steps: the ratio, the step, and per bucket what it has not sent."""

    def __init__(self, process_group=None, ratio=0.01, start_iter=2):
        group = process_group if process_group is not None else dist.group.WORLD
        if group is None:
            raise RuntimeError("TopKState needs a process group: call dist.init_process_group first")
        self.group = group
        self.ratio, self.start_iter, self.iter = ratio, start_iter, 0
        self.residuals = {}  # bucket index -> gradient not sent yet (error feedback)


def topk_hook(
    state: TopKState,
    bucket: dist.GradBucket,  # type: ignore[attr-defined]  # public (torch's docs); its stubs do not re-export it
) -> torch.futures.Future[torch.Tensor]:
    """Each rank sends the k largest entries of gradient + residual; what it does not send waits in the residual."""
    buffer = bucket.buffer()
    plain = state.iter < state.start_iter  # DDP rebuilds its buckets after step 1: plain all-reduce until then
    if bucket.is_last():
        state.iter += 1
    if plain:
        return default_hooks.allreduce_hook(state.group, bucket)
    world = state.group.size()
    acc = buffer + state.residuals.get(bucket.index(), 0)
    k = max(1, int(state.ratio * acc.numel()))
    idx = acc.abs().topk(k, sorted=False).indices
    values = acc[idx]
    acc[idx] = 0
    state.residuals[bucket.index()] = acc  # next step adds it back: nothing is lost, only delayed
    # Indices and values travel as raw bytes in one message, so one all-gather moves both.
    packed = torch.cat([idx.to(torch.int32).view(torch.uint8), values.view(torch.uint8)])
    gathered = packed.new_empty(world * packed.numel())
    work = all_gather_flat(gathered, packed, group=state.group, async_op=True)

    def decompress(fut):
        rows = gathered.view(world, -1)  # one row per rank: k indices, then k values
        all_idx = rows[:, : 4 * k].contiguous().view(torch.int32).reshape(-1).long()
        all_val = rows[:, 4 * k :].contiguous().view(buffer.dtype).reshape(-1)
        return buffer.zero_().index_add_(0, all_idx, all_val).div_(world)

    return work.get_future().then(decompress)  # type: ignore[union-attr]  # async_op=True returns a Work, not None


# %% register one
def register(ddp_model, name, process_group=None, topk_ratio=0.01, powersgd_rank=1, start_iter=2):
    """Install compression ``name`` (one of ``HOOKS``) on a DDP model before its first step; returns its state."""
    if name == "none":  # DDP's own all-reduce of the fp32 gradients
        return None
    if name in ("fp16", "bf16"):  # cast to 16 bits, all-reduce, cast back: half the bytes
        hook = default_hooks.fp16_compress_hook if name == "fp16" else default_hooks.bf16_compress_hook
        ddp_model.register_comm_hook(process_group, hook)
        return process_group
    if name == "powersgd":  # each n×m gradient sent as rank-r factors P (n×r) and Q (m×r), with error feedback
        state = powerSGD_hook.PowerSGDState(
            process_group=process_group,
            matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=start_iter,
            random_seed=0,
        )
        ddp_model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    if name == "topk":
        state = TopKState(process_group, topk_ratio, start_iter)
        ddp_model.register_comm_hook(state, topk_hook)
        return state
    raise ValueError(f"unknown compression {name!r}: use one of {', '.join(HOOKS)}")


# %% train with it
def train(hook, steps, device):
    """A small DDP model trained with ``hook``; returns the first and last loss and whether every rank
    ends with the same weights (every rank applied the same averaged gradient)."""
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    register(ddp, hook, topk_ratio=0.05)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)  # each rank its own batches
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=data).to(device)
        loss = F.cross_entropy(ddp(x), x[:, :8].argmax(dim=1))  # learnable: which of 8 inputs is largest
        optimizer.zero_grad()
        loss.backward()  # the hook runs here, bucket by bucket
        optimizer.step()
        losses.append(loss.item())
    highest = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lowest = highest.clone()
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    same = torch.equal(highest, lowest)
    print(
        f"rank {rank}: hook {hook}: loss {losses[0]:.3f} -> {losses[-1]:.3f}; weights identical on every rank: {same}"
    )
    return {"first_loss": losses[0], "last_loss": losses[-1], "identical": same}


def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hook", choices=HOOKS, default="topk")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    device = setup()
    train(args.hook, args.steps, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
