"""A ring all-reduce from point-to-point messages: a reduce-scatter, then an all-gather.

Used in notebook 07: shown from this file, timed against ``dist.all_reduce`` by the
``collectives_bench`` workload, and written by you in the exercise ``ring_allreduce``.
Every rank checks its result against ``dist.all_reduce``::

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch07_collectives/lessons/collectives.py
    torchrun --standalone --nproc-per-node 4 \\
        nvtutorial/chapters/ch07_collectives/lessons/collectives.py --numel 1000003 --slices 4

NCCL with one GPU per rank where there are enough GPUs, else gloo on the CPU.
"""

import argparse

import torch
import torch.distributed as dist

from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import (
    setup,
)  # the process group, as notebook 03 sets it up


# %% the ring
def ring_all_reduce(tensor, group=None, slices=1):
    """Sum ``tensor`` over the ranks of ``group``, in place, sending only to the right neighbour.

    The tensor is cut into W chunks (W ranks) and each chunk into ``slices`` slices.
    Reduce-scatter, W-1 steps: at step s rank r sends chunk r-s to the right and adds chunk
    r-s-1, which arrives from the left; then rank r holds the full sum of chunk r+1.
    All-gather, W-1 steps: the summed chunks travel on around the ring into place.
    Returns the bytes this rank sent: 2 (W-1)/W of the tensor.
    """
    if not tensor.is_contiguous():
        raise ValueError("ring_all_reduce works in place on a contiguous tensor: call .contiguous() first")
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1:
        return 0
    peer = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))  # P2POp wants global ranks
    right, left = peer((rank + 1) % world), peer((rank - 1) % world)
    chunks = [c.tensor_split(slices) for c in tensor.view(-1).tensor_split(world)]
    inbox = [torch.empty_like(s) for s in chunks[0]]  # chunk 0 is the largest
    # On a GPU the adds run on their own stream, so that slice j+1 travels while slice j is added.
    main = torch.cuda.current_stream() if tensor.is_cuda else None
    adds = torch.cuda.Stream() if tensor.is_cuda else None
    if adds and main:
        adds.wait_stream(main)  # the input may still be being written on the main stream
    added: list = [None] * slices  # the event that marks the last add into each slice
    sent = 0
    for step in range(2 * (world - 1)):
        reduce = step < world - 1
        s = step if reduce else step - (world - 1)
        send_c = (rank - s) % world if reduce else (rank + 1 - s) % world
        recv_c = (rank - s - 1) % world if reduce else (rank - s) % world
        for j in range(slices):
            send, target = chunks[send_c][j], chunks[recv_c][j]
            recv = inbox[j][: target.numel()] if reduce else target  # all-gather: straight into place
            # Both directions at once. Empty slices (fewer elements than W × slices) are not sent:
            # the neighbour knows they are empty too.
            ops = [
                dist.P2POp(op, t, peer, group)
                for op, t, peer in ((dist.isend, send, right), (dist.irecv, recv, left))
                if t.numel()
            ]
            if not ops:
                continue
            if main and added[j] is not None:
                main.wait_event(added[j])  # NCCL launches after the main stream's work so far
            works = dist.batch_isend_irecv(ops)
            sent += send.numel() * send.element_size()
            if not reduce:
                for w in works:
                    w.wait()  # GPU: the main stream waits for the transfer; the host does not
                continue
            with torch.cuda.stream(adds):  # a no-op on the CPU (adds is None)
                for w in works:
                    w.wait()  # GPU: the add stream waits for the transfer; the host does not
                target.add_(recv)
                if adds:
                    added[j] = adds.record_event()
    if adds and main:
        main.wait_stream(adds)  # the caller's next kernels see every add
    return sent


# %% check it against dist.all_reduce
def check(numel, slices, device):
    """Run the ring on a random tensor and compare with dist.all_reduce; print and return what was found."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x = torch.randn(numel, generator=torch.Generator().manual_seed(rank)).to(device)
    mine, reference = x.clone(), x.clone()
    sent = ring_all_reduce(mine, slices=slices)
    dist.all_reduce(reference)
    equal = torch.equal(mine, reference)  # 2 ranks: every element is a + b, bit-equal; more: another order
    error = (mine - reference).abs().max().item()
    size = x.numel() * x.element_size()
    print(
        f"rank {rank}: ring == dist.all_reduce bit for bit: {equal} (largest difference {error:.2g}); "
        f"sent {sent} bytes = {sent / size:.4f} × the tensor (2(W-1)/W = {2 * (world_size - 1) / world_size:.4f})"
    )
    return {"equal": equal, "max_abs_error": error, "sent_bytes": sent, "size_bytes": size}


def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--numel", type=int, default=(1 << 20) + 3, help="fp32 elements to all-reduce")
    parser.add_argument("--slices", type=int, default=1, help="slices per chunk (pipelining)")
    args = parser.parse_args()
    device = setup()
    found = check(args.numel, args.slices, device)
    try:
        from nvtutorial.runtime import save_metrics  # reports to the course's launcher; nothing elsewhere

        save_metrics(found)
    except ImportError:
        pass
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
