"""When the GPU waits for Python: what one call costs, one training step eager and captured, an all-reduce's α.

    torchrun --standalone --nproc-per-node 1 nvtutorial/chapters/ch11_overhead/lessons/overhead.py
    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch11_overhead/lessons/overhead.py --dim 1024

One process per GPU with NCCL where there are GPUs, gloo on the CPU otherwise (notebook 03's ``setup``). Rank 0 times
one tiny operation issued back to back and waited for one call at a time; on a GPU, notebook 08's training step
(fp32, fused Adam) eager, captured in one CUDA graph and compiled with ``torch.compile(mode="reduce-overhead")``.
Every rank then times a small all-reduce called eagerly and, with NCCL, replayed from a CUDA graph. Notebook 11's
``overhead`` workload runs these same functions.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.distributed as dist

from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import setup  # the process group, as notebook 03 sets it
from nvtutorial.chapters.ch08_ladder.lessons.rungs import LR
from nvtutorial.chapters.ch08_ladder.lessons.train import train_step  # forward, backward, update: notebook 08's
from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import wait, warm_up  # notebook 10's clock
from nvtutorial.models import transformer

# %% the clock


def per_call(op, calls: int, device: torch.device, wait_each: bool = False) -> float:
    """Seconds per call of ``op`` over ``calls`` calls on the host's clock, after one untimed call: queued (the GPU
    is waited for once, at the end: the CPU's pace or the GPU's, whichever is slower), or waited for after every
    call (``wait_each``: one call's round trip, the GPU idle while the CPU issues the next)."""
    op()
    wait(device)
    start = time.perf_counter()
    for _ in range(calls):
        op()
        if wait_each:
            wait(device)
    wait(device)
    return (time.perf_counter() - start) / calls


# %% one tiny operation


def tiny_op(device: torch.device):
    """Add 1 to a one-element tensor in place: one kernel with nothing to do on a GPU, a few instructions on the
    CPU."""
    x = torch.zeros(1, device=device)
    return lambda: x.add_(1)


def no_kernel_op(device: torch.device):
    """A view of a one-element tensor: Python, PyTorch's dispatcher and a new tensor header, and no kernel at all
    (nothing for the device to run): what a call costs before any work."""
    x = torch.zeros(1, device=device)
    return lambda: x.view(-1)


def graphed(op, calls: int, device: torch.device):
    """``calls`` calls of ``op`` captured in one CUDA graph, and the function that replays them with one launch. A
    capture records the kernels without running them; warm up first, on the side stream the capture then uses."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        op()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        for _ in range(calls):
            op()
    return graph.replay


# %% one training step, three ways


def build(cfg: transformer.Config, device: torch.device, seed: int = 0, capturable: bool = False):
    """Notebook 08's transformer and Adam as its rungs train it, fused (one kernel for every tensor); for a CUDA
    graph ``capturable`` (its step counts live on the device, so that a replay updates them: fused Adam keeps them
    there anyway, and torch refuses to capture an optimizer that does not say so)."""
    model = transformer.build(cfg, seed=seed, device=device)
    return model, torch.optim.Adam(model.parameters(), lr=LR, fused=True, capturable=capturable)


def eager_step(model, optimizer):
    """Notebook 08's step as it is: Python issues every kernel, one at a time."""
    return lambda tokens: train_step(model, optimizer, tokens)


def graphed_step(model, optimizer, warmup_batches):
    """The whole step (forward, backward, Adam) captured in one CUDA graph, after real steps on ``warmup_batches``
    (they train) on the side stream the capture then uses; returns the step that copies new tokens into the graph's
    input and replays it. What a replay touches stays where the capture put it: the input, the gradients (the
    capture allocates them, every replay refills them: no zero_grad), Adam's state, the loss."""
    static = torch.empty_like(warmup_batches[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), warnings.catch_warnings():
        # torch's note that a capturable Adam run outside a capture is slower: these steps are the warm-up
        warnings.filterwarnings("ignore", message=".*capturable=True.*")
        for tokens in warmup_batches:
            static.copy_(tokens)
            train_step(model, optimizer, static)
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)  # so that the capture allocates the gradients from the graph's memory
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        loss = train_step(model, optimizer, static)  # recorded, not run

    def step(tokens):
        static.copy_(tokens)
        graph.replay()
        return loss

    return step


def compiled_step(model, optimizer):
    """torch.compile's way: the forward pass and the loss compiled into fused kernels, their backward too, each
    replayed from a CUDA graph under mode="reduce-overhead"; Adam's step, not compiled, stays eager. dynamic=False:
    kernels for these exact shapes, as a CUDA graph replays them."""

    @torch.compile(mode="reduce-overhead", dynamic=False)
    def loss_of(tokens):
        return transformer.loss_fn(model, tokens)

    def step(tokens):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(tokens)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


# %% an all-reduce's fixed cost


def all_reduce_costs(nbytes: int, calls: int, device: torch.device) -> dict[str, float | None]:
    """Seconds per call of an all-reduce of ``nbytes`` (zeros: they stay zero): back to back (``eager``, the α of
    notebook 10 at a small size), each call waited for (``waited``), and replayed from a CUDA graph that holds
    ``calls`` of them (``graph``: no Python, no c10d, one launch for all; NCCL only, None with gloo). An average,
    not a sum: on one rank NCCL has nothing to do for an in-place sum and launches no kernel at all (the graph would
    be empty), while an average scales by 1/n, one kernel. gloo averages too (since torch 2.8: a sum, then a
    division)."""
    x = torch.zeros(max(1, nbytes // 4), device=device)

    def op():
        dist.all_reduce(x, op=dist.ReduceOp.AVG)

    costs: dict[str, float | None] = {
        "eager": per_call(op, calls, device),
        "waited": per_call(op, calls, device, wait_each=True),
        "graph": None,
    }
    if dist.get_backend() == "nccl":
        replay = graphed(op, calls, device)  # every rank captures and replays the same calls
        costs["graph"] = per_call(replay, 5, device) / calls
    return costs


# %% main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--dim", type=int, default=256, help="the transformer's width (default 256)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    args = parser.parse_args()
    device = setup()
    warm_up(device)
    rank = dist.get_rank()
    if rank == 0:
        op = tiny_op(device)
        print(
            f"one tiny op on {device}: {per_call(op, 2000, device) * 1e6:.2f} µs queued, "
            f"{per_call(op, 200, device, wait_each=True) * 1e6:.2f} µs waited for, "
            f"{per_call(no_kernel_op(device), 2000, device) * 1e6:.2f} µs with no kernel (a view)",
            flush=True,
        )
    if rank == 0 and device.type == "cuda":
        cfg = transformer.Config(vocab=256, seq_len=64, dim=args.dim, heads=4, layers=2)
        tokens = transformer.batch(0, args.batch, cfg).to(device)
        warmup = [transformer.batch(i, args.batch, cfg).to(device) for i in range(3)]
        steps = {
            "eager": eager_step(*build(cfg, device)),
            "one CUDA graph": graphed_step(*build(cfg, device, capturable=True), warmup),
            "reduce-overhead": compiled_step(*build(cfg, device)),
        }
        for name, step in steps.items():
            per_call(lambda step=step: step(tokens), 3, device)  # warm-up (and the compile)
            ms = per_call(lambda step=step: step(tokens), 20, device) * 1e3
            print(f"dim {args.dim}, batch {args.batch}, {name}: {ms:.3f} ms per step", flush=True)
    for nbytes in (4, 1 << 20):
        costs = all_reduce_costs(nbytes, 50, device)
        if rank == 0:
            print(
                f"all-reduce of {nbytes} B, {dist.get_world_size()} ranks: "
                + ", ".join(f"{k} {v * 1e6:.2f} µs" for k, v in costs.items() if v is not None),
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
