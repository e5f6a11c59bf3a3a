"""DDP training that survives a lost rank: a checkpoint every N steps, and a resume from the last one.

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 \\
        nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py --ckpt-dir ckpt
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HEAD_NODE:29400 \\
        --rdzv-id job1 --max-restarts 3 nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py \\
        --ckpt-dir /shared/ckpt

(the second line on every node, with the first node's address for HEAD_NODE). When a rank dies,
torchrun (``--max-restarts``) stops the others and starts every rank again: each new rank runs this
file from the top, finds the last checkpoint and goes on from the step after it, so the steps done
since that checkpoint are lost and done again. Runs with NCCL on GPUs and gloo on the CPU. Used in
notebook 09.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up


# %% model and data
def build(args: argparse.Namespace, device: torch.device) -> tuple[DDP, torch.optim.Optimizer, tuple]:
    """The same model, optimizer and data on every rank and in every attempt (seeded)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU()]
    for _ in range(args.layers - 1):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers, torch.nn.Linear(args.hidden, 1)).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # Adam keeps state: it must be saved too
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.samples, args.features, generator=g)
    y = torch.sin(x[:, :4].sum(dim=1, keepdim=True))  # something to learn
    return model, optimizer, (x.to(device), y.to(device))  # small: the whole set lives on the device


def batch_for(step: int, sampler: DistributedSampler, data: tuple, batch: int) -> tuple:
    """This rank's batch for global step ``step``: epoch and offset follow from the step alone."""
    per_epoch = len(sampler) // batch
    epoch, offset = divmod(step, per_epoch)
    sampler.set_epoch(epoch)  # the shuffle of that epoch, the same on every rank
    idx = list(sampler)[offset * batch : (offset + 1) * batch]
    return data[0][idx], data[1][idx]


# %% checkpoint
def save(path: str, model: DDP, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Rank 0 writes the state after ``step`` steps; the file appears whole or not at all."""
    if dist.get_rank() == 0:
        state = {
            "model": model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "world_size": dist.get_world_size(),
        }
        with open(path + ".tmp", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename: also against a machine that loses power
        os.replace(path + ".tmp", path)  # atomic: a rank killed mid-write leaves the old checkpoint
    dist.barrier()


# %% resume
def resume(path: str, model: DDP, optimizer: torch.optim.Optimizer) -> int:
    """Load the last checkpoint, if there is one, into the model and the optimizer; the steps already done.

    Rank 0's step is the reference: a rank that sees another stops. On shared storage (NFS) a node may, for a few
    seconds, still see an older file or
    none after another node renamed it (attribute caching); ranks that started from different steps would run
    different numbers of collectives and hang at the end. A rank that sees another step than rank 0 stops with
    an error instead: torchrun's next attempt reads the storage again."""
    state = torch.load(path, map_location="cpu", weights_only=True) if os.path.exists(path) else None
    mine = state["step"] if state else 0
    agreed = [mine]
    dist.broadcast_object_list(agreed, src=0)  # rank 0's step, on every rank
    if mine != agreed[0]:
        raise RuntimeError(
            f"rank {dist.get_rank()} sees a checkpoint of step {mine} at {path}, rank 0 one of step "
            f"{agreed[0]}: the shared storage does not yet look the same from every node"
        )
    if state is not None:
        model.module.load_state_dict(state["model"])  # the model inside DDP: the keys have no "module." prefix
        optimizer.load_state_dict(state["optimizer"])  # Adam's moments and step count
    return mine  # state["world_size"] is not checked: resume with the world size that saved it


# %% train
def say(text: str) -> None:
    """One line from rank 0: where this attempt's start has got (the lab reads rank 0's log)."""
    if dist.get_rank() == 0:
        print(f"rank 0 of {dist.get_world_size()}: {text}", flush=True)


def train(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    device = setup()
    rank = dist.get_rank()
    say(f"joined the process group ({dist.get_backend()}) in {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    model, optimizer, data = build(args, device)
    say(f"built the DDP model in {time.perf_counter() - t0:.2f} s")  # a new process: DDP imports torch._dynamo here
    indices = range(args.samples)  # the sampler reads only len(): any sized sequence will do
    sampler = DistributedSampler(indices, shuffle=True, seed=0, drop_last=True)  # pyright: ignore[reportArgumentType]
    path = os.path.join(args.ckpt_dir, "last.pt")
    start = resume(path, model, optimizer)
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # of this node's agent
    say(f"starting at step {start} (TORCHELASTIC_RESTART_COUNT {restarts}: failures this node's agent restarted after)")
    times, loss = [], torch.zeros(())
    for step in range(start, args.steps):
        t0 = time.perf_counter()
        x, y = batch_for(step, sampler, data, args.batch)
        with model.no_sync() if args.no_sync else contextlib.nullcontext():  # no_sync: skip the all-reduce
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()  # the step is done when the GPU is done
        times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"step {step + 1}/{args.steps} loss {loss.item():.5f}", flush=True)
        if (step + 1) % args.every == 0 or step + 1 == args.steps:
            save(path, model, optimizer, step + 1)
    weights = torch.cat([p.detach().flatten().cpu() for p in model.module.parameters()])
    return {
        "group_rank": int(os.environ["GROUP_RANK"]),
        "restarts": restarts,
        "start_step": start,
        "steps": args.steps,
        "step_times_s": times,
        "final_loss": loss.item(),
        "weights_sha256": hashlib.sha256(weights.numpy().tobytes()).hexdigest(),
    }


# %% main
def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--ckpt-dir", default="checkpoints", help="a folder every node can read and write")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps in all (default 40)")
    parser.add_argument("--every", type=int, default=10, help="a checkpoint every this many steps (default 10)")
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step (default 32)")
    parser.add_argument("--samples", type=int, default=4096, help="training set size (default 4096)")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--no-sync", action="store_true", help="skip DDP's gradient all-reduce (to time it)")
    args = parser.parse_args()
    os.makedirs(args.ckpt_dir, exist_ok=True)
    metrics = train(args)
    runtime.save_metrics(metrics)  # the course's launcher collects these; under plain torchrun it does nothing
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
