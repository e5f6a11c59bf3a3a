"""Mismatched collectives: every rank must call the same collectives, in the same order, with the same shapes.

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch06_pitfalls/lessons/collectives.py

Two traps. Shapes: each rank all-gathers a tensor whose length depends on its own data, so the
ranks disagree on the size. Order: rank 0 all-reduces a number for its log inside
``if rank == 0:``, so its next collective meets a different one on the other ranks. Without a
check, what happens is undefined: an error, a hang until the timeout, or wrong numbers. With
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every collective is first compared across the ranks (operation,
shapes, dtypes) and every rank raises a report that names the difference, before the collective
itself runs. The script runs each trap on a group created with that check on (:func:`checked_group`),
then its fix.
"""

# torch.distributed re-exports its documented API without __all__, which pyright reads as private:
# pyright: reportPrivateImportUsage=false

import torch
import torch.distributed as dist

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up


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


# %% a process group that checks every collective
def checked_group():
    """A new process group whose every collective is first compared across the ranks: what
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does for every group of a job, here for one group only."""
    previous = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        return dist.new_group()
    finally:
        dist.set_debug_level(previous)


# %% main
def main():
    device = setup()
    rank = dist.get_rank()
    group = checked_group()

    # the traps, then the fixes
    values = torch.arange(10.0 + 10 * rank, device=device)  # 10 numbers on rank 0, 20 on rank 1
    outcome = {}
    for name, gather in (("shapes", gather_broken), ("shapes fixed", gather_fixed)):
        try:
            outcome[name] = {"result": gather(values, group).tolist()}
        except RuntimeError as error:  # the check raises on every rank, before the collective runs
            outcome[name] = {"error": str(error)}
    for name, end_of_epoch in (("order", end_of_epoch_broken), ("order fixed", end_of_epoch_fixed)):
        loss_sum, stop = torch.tensor([1.0 + rank], device=device), torch.tensor([rank], device=device)
        try:
            outcome[name] = {"result": [t.tolist() for t in end_of_epoch(loss_sum, stop, rank, group)]}
        except RuntimeError as error:
            outcome[name] = {"error": str(error)}
    for name, o in outcome.items():
        said = o["error"].split("differ in the following aspects:")[-1].strip() if "error" in o else o["result"]
        print(f"rank {rank}: {name}: {said}", flush=True)
    runtime.save_metrics(outcome)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
