"""A sparse all-reduce: the source tutorial's version as published, and one that is correct.

Used in notebook 07 (claim C22): shown from this file, and run on inputs whose non-zero entries
differ from rank to rank by the ``collectives_bench`` workload. Each rank compares both versions
with ``dist.all_reduce`` then ``/ W``::

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc-per-node 2 \\
        nvtutorial/chapters/ch07_collectives/lessons/sparse_allreduce.py

``TORCH_DISTRIBUTED_DEBUG=DETAIL`` makes torch compare every collective's shapes across the
ranks first, so the source's ``all_gather`` of unequal sizes raises an error instead of
aborting the process (gloo) or hanging (NCCL). NCCL on GPUs, gloo on the CPU.
"""

import torch
import torch.distributed as dist

from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up

world_size = 2  # the source reads a global world_size it never defines; check() sets it


def all_gather_flat(output, input, group=None):
    """Every rank's ``input`` concatenated into ``output`` (``all_gather_single`` in newer torch)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, input, group=group)


# %% the source's version
# 自定义allreduce  (the source's code; only the punctuation its text lost was put back)
def source_sparse_allreduce(tensor):
    # 只同步非零梯度
    indices = tensor.nonzero()
    values = tensor[indices]
    # 收集所有rank的稀疏梯度
    gathered = [torch.zeros_like(values) for _ in range(world_size)]
    torch.distributed.all_gather(gathered, values)
    # 计算均值
    stacked = torch.stack(gathered)
    mean = stacked.mean(dim=0)
    # 写回原tensor
    tensor.zero_()
    tensor[indices] = mean


# %% a correct version
def sparse_allreduce(tensor, group=None):
    """Average ``tensor`` over the ranks, in place, sending only its non-zero entries.

    1. all-gather every rank's count of non-zeros;
    2. pad the flat indices and the values to the largest count (an all-gather needs the same
       size on every rank) and all-gather them;
    3. scatter-add every rank's entries into zeros, at *their* positions, then divide by W.
    Returns the bytes this rank handed to the all-gathers (counts, indices, values).
    """
    world = dist.get_world_size(group)
    flat = tensor.view(-1)
    positions = flat.nonzero().view(-1)
    count = torch.tensor([positions.numel()], device=tensor.device)
    counts = torch.empty(world, dtype=count.dtype, device=tensor.device)
    all_gather_flat(counts, count, group=group)
    sizes = counts.tolist()  # the host needs the sizes to allocate: one device-to-host copy
    largest = max(sizes)
    idx = torch.zeros(largest, dtype=torch.int32 if flat.numel() < 2**31 else torch.int64, device=tensor.device)
    val = torch.zeros(largest, dtype=tensor.dtype, device=tensor.device)
    idx[: positions.numel()] = positions
    val[: positions.numel()] = flat[positions]
    all_idx = idx.new_empty(world * largest)
    all_val = val.new_empty(world * largest)
    all_gather_flat(all_idx, idx, group=group)
    all_gather_flat(all_val, val, group=group)
    total = torch.zeros_like(flat)
    for r, n in enumerate(sizes):  # indices are unique within a rank: each index_add_ is exact
        total.index_add_(0, all_idx[r * largest : r * largest + n].long(), all_val[r * largest : r * largest + n])
    flat.copy_(total.div_(world))
    return sum(t.numel() * t.element_size() for t in (count, idx, val))


# %% both against dist.all_reduce
def check(device):
    """Both versions on inputs whose non-zeros differ between ranks, against all_reduce / W; returns the verdicts."""
    global world_size
    rank, world_size = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(rank)  # each rank: its own values at its own positions
    x = (torch.randn(4096, generator=g) * (torch.rand(4096, generator=g) < 0.05 * (rank + 1))).to(device)
    reference = x.clone()
    dist.all_reduce(reference)
    reference /= world_size
    found = {}
    for name, fn in (("the source's", source_sparse_allreduce), ("the correct", sparse_allreduce)):
        y = x.clone()
        try:
            fn(y)
            found[name] = f"equal to all_reduce / W: {torch.equal(y, reference)}"
        except Exception as exc:  # the source's all_gather of unequal sizes, under DETAIL
            found[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        print(f"rank {rank}: {int((x != 0).sum())} non-zeros; {name} sparse_allreduce {found[name]}")
    return found


def main():
    device = setup()
    check(device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
