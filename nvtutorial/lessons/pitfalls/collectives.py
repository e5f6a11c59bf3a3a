"""Mismatched collectives: every rank must call the same collectives, in the same order, with the same shapes.

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc-per-node 2 nvtutorial/lessons/pitfalls/collectives.py
    torchrun --standalone --nproc-per-node 2 nvtutorial/lessons/pitfalls/collectives.py --fixed

Two traps. Shapes: each rank all-gathers a tensor whose length depends on its own data, so the
ranks disagree on the size. Order: rank 0 all-reduces a number for its log inside
``if rank == 0:``, so its next collective meets a different one on the other ranks. Without a
check, what happens is undefined: an error, a hang until the timeout, or wrong numbers. With
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every collective is first compared across the ranks (operation,
shapes, dtypes) and every rank raises a report that names the difference, before anything is
sent. The trap runs only with that check on (``group``: a process group created with it on).
"""

import argparse
import os

import torch
import torch.distributed as dist

from nvtutorial import runtime


# %% shapes: the trap
def gather_broken(values, group=None):
    """Every rank's ``values`` on every rank, rank 0's first."""
    out = [torch.empty_like(values) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, values, group=group)  # needs the same shape on every rank
    return torch.cat(out)


# %% shapes: the fix
def gather_fixed(values, group=None):
    """Every rank's ``values`` on every rank, rank 0's first, whatever their lengths."""
    n = torch.tensor([values.numel()], device=values.device)
    sizes = [torch.empty_like(n) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, n, group=group)  # first agree on the sizes
    padded = torch.zeros(int(max(sizes)), dtype=values.dtype, device=values.device)
    padded[: values.numel()] = values
    out = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(out, padded, group=group)  # then gather, every rank padded to the longest
    return torch.cat([o[: int(s)] for o, s in zip(out, sizes)])


# %% order: the trap
def end_of_epoch_broken(loss_sum, stop, rank, group=None):
    if rank == 0:
        dist.all_reduce(loss_sum, group=group)  # the total loss, for rank 0's log
        print(f"epoch loss {loss_sum.item():.3f}")
    dist.broadcast(stop, src=0, group=group)  # rank 0 decides whether to stop early
    return loss_sum, stop


# %% order: the fix
def end_of_epoch_fixed(loss_sum, stop, rank, group=None):
    dist.all_reduce(loss_sum, group=group)  # every rank takes part in every collective
    if rank == 0:
        print(f"epoch loss {loss_sum.item():.3f}")
    dist.broadcast(stop, src=0, group=group)
    return loss_sum, stop


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed", action="store_true", help="run the fixed versions")
    args = parser.parse_args()
    if not args.fixed and os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() != "DETAIL":
        parser.error("run the traps with TORCH_DISTRIBUTED_DEBUG=DETAIL: without the check a mismatch can hang, "
                     "crash or compute wrong numbers")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)

    gather = gather_fixed if args.fixed else gather_broken
    end_of_epoch = end_of_epoch_fixed if args.fixed else end_of_epoch_broken
    outcome = {}
    # %% run both
    for name, call in (("shapes", lambda: gather(torch.arange(10.0 + 10 * rank, device=device))),
                       ("order", lambda: end_of_epoch(torch.tensor([1.0 + rank], device=device),
                                                      torch.tensor([rank], device=device), rank))):
        try:
            result = call()
            outcome[name] = {"result": [t.tolist() for t in result] if isinstance(result, tuple) else result.tolist()}
            print(f"rank {rank}: {name}: {outcome[name]['result']}", flush=True)
        except RuntimeError as error:  # the DETAIL check raises on every rank, before anything is sent
            outcome[name] = {"error": str(error)}
            print(f"rank {rank}: {name}: {str(error).split('differ in the following aspects:')[-1].strip()}", flush=True)
    runtime.save_metrics(outcome)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
