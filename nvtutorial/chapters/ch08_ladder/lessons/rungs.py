"""The strategy ladder: one function per rung, from DDP to tensor parallelism.

Every rung (and ``single``, the one-process reference) takes the same freshly built model (the same
weights on every rank) and the rank's device, and returns ``(model, optimizer)`` ready for the training
step of ``train.py``. Read two neighbouring rungs side by side: what changes between them is the lesson
(notebook 08 shows each step up the ladder as a diff). Each rung runs with NCCL on GPUs, gloo on the CPU.

1. DDP: every rank holds the whole model, all its gradients and all of Adam's state; the backward pass
   all-reduces the gradients, bucket by bucket.
2. ZeRO-1 (``ZeroRedundancyOptimizer``): DDP as before, but each rank keeps Adam's state for its share of
   the parameters only, updates that share, and broadcasts it to the other ranks.
3. FSDP2 without resharding after forward (ZeRO-2-like): parameters, gradients and Adam's state are
   sharded; each block's parameters are all-gathered in forward and kept whole until its backward;
   gradients are reduce-scattered.
4. FSDP2 (ZeRO-3): each block frees its gathered parameters after its forward and all-gathers them
   again for its backward.
5. ZeRO-3 plus activation checkpointing: each block keeps only its input for the backward pass and
   recomputes the rest there.
6. ZeRO-3, checkpointing and CPU offload: the sharded parameters, gradients and Adam's state live in
   host memory, the optimizer steps on the CPU, each block's shard is copied to the GPU to be gathered.
7. Tensor parallelism: each block's matrices are split over the ranks (column-wise, then row-wise, so
   one all-reduce ends each pair in the forward pass; in the backward pass one all-reduce per pair
   sums the partial gradients of the input, the attention's three projections adding theirs first).

The data-parallel rungs (all but ``tensor_parallel``) give each rank its own half of the global batch;
tensor parallelism gives both ranks the same batch and splits the layers instead (``DATA_PARALLEL``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

from nvtutorial.models.transformer import Transformer

LR = 1e-3
"""Adam's learning rate on every rung (and in the single-process reference)."""


def single(model: nn.Module, device: torch.device):
    """The reference: one process, the whole model, the whole batch, no communication."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    return model, optimizer


def ddp(model: nn.Module, device: torch.device):
    """Rung 1, DDP: everything on every rank; the backward pass all-reduces the gradients."""
    # gradient_as_bucket_view: the gradients live in DDP's buckets, not in a second copy of them
    model = DDP(model, device_ids=[device] if device.type == "cuda" else None, gradient_as_bucket_view=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    return model, optimizer


def zero1(model: nn.Module, device: torch.device):
    """Rung 2, ZeRO-1: each rank keeps and updates Adam's state for its share, then broadcasts it."""
    model = DDP(model, device_ids=[device] if device.type == "cuda" else None, gradient_as_bucket_view=True)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=LR, fused=True)
    return model, optimizer


def fsdp_zero2(model: Transformer, device: torch.device):
    """Rung 3, FSDP2 keeping gathered parameters from forward to backward (ZeRO-2-like)."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh)  # the root: embeddings, final norm, head (kept gathered for backward)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    return model, optimizer


def fsdp_zero3(model: Transformer, device: torch.device):
    """Rung 4, FSDP2 (ZeRO-3): each block gathers its parameters again for its backward pass."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)  # the root: embeddings, final norm, head (kept gathered for backward)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    return model, optimizer


def fsdp_checkpointing(model: Transformer, device: torch.device):
    """Rung 5, ZeRO-3 with activation checkpointing: blocks recompute their activations in backward."""
    model.checkpoint_activations = True  # Transformer.forward wraps each block in torch.utils.checkpoint
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)  # the root: embeddings, final norm, head (kept gathered for backward)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    return model, optimizer


def fsdp_offload(model: Transformer, device: torch.device):
    """Rung 6, ZeRO-3, checkpointing and CPU offload: sharded state in host memory, Adam on the CPU."""
    model.checkpoint_activations = True  # Transformer.forward wraps each block in torch.utils.checkpoint
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda")  # page-locked host memory needs a GPU
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True, offload_policy=offload)
    fully_shard(model, mesh=mesh, offload_policy=offload)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    return model, optimizer


def tensor_parallel(model: Transformer, device: torch.device):
    """Rung 7, tensor parallelism: every block matrix split over the ranks, which see the same batch."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        parallelize_module(
            block,
            mesh,
            {
                # The attention's input as one replicated DTensor shared by wq, wk and wv: in the backward
                # pass their three partial input gradients add up on each rank, then one all-reduce
                # (without it each projection all-reduces its own: 3 instead of 1, as torchtitan avoids)
                "attn": PrepareModuleInput(
                    input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),), use_local_output=False
                ),
                "attn.wq": ColwiseParallel(),  # each rank computes half of the heads...
                "attn.wk": ColwiseParallel(),
                "attn.wv": ColwiseParallel(),
                "attn.wo": RowwiseParallel(),  # ...and the output projection sums the halves (all-reduce)
                "mlp.w1": ColwiseParallel(),  # half of the hidden units on each rank...
                "mlp.w2": RowwiseParallel(),  # ...summed on the way out (all-reduce)
            },
        )
    # Embeddings, norms and the head stay whole on every rank. Adam's fused kernel takes either
    # DTensors or plain tensors in one call, not both: one parameter group of each.
    params = list(model.parameters())
    optimizer = torch.optim.Adam(
        [
            {"params": [p for p in params if isinstance(p, DTensor)]},
            {"params": [p for p in params if not isinstance(p, DTensor)]},
        ],
        lr=LR,
        fused=True,
    )
    return model, optimizer


RUNGS = {f.__name__: f for f in (ddp, zero1, fsdp_zero2, fsdp_zero3, fsdp_checkpointing, fsdp_offload, tensor_parallel)}
"""The ladder, bottom to top."""
DATA_PARALLEL = {name: name != "tensor_parallel" for name in RUNGS}
"""Whether each rank trains on its own slice of the global batch (True) or on the whole batch (False)."""
