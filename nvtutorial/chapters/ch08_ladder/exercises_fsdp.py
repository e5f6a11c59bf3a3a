"""Exercise (notebook 08): shard the transformer with FSDP2, ZeRO-3 style: each block its own unit, then the root.

The learner writes ``shard(model, mesh)``. The checker, on 2 real ranks: every parameter must be a
DTensor holding this rank's ``torch.chunk`` share of dimension 0; every block and the root must be FSDP
units; three training steps must match the one-process reference within the tolerance; and one step
must all-gather each block twice (forward and backward: resharded after forward) and the root once.
"""

from __future__ import annotations

from typing import Any

NAME = "ladder_fsdp"
"""The exercise's name (``teach.check.check("ladder_fsdp", ...)``)."""

NOTEBOOK = "08_strategy_ladder"
TASK = "write shard(model, mesh): fully_shard each block of model.blocks (resharding after forward), then the root"
KIND = "function"
ENTRY = "shard"
TIMEOUT = 120.0


def shard(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)
    return model


def shard_blocks_only(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return model


def shard_root_only(model, mesh):
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=mesh)
    return model


def shard_without_resharding(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh)
    return model


SOLUTION = shard
WRONG = {
    "blocks only": (shard_blocks_only, "root"),
    "root only": (shard_root_only, "its own FSDP unit"),
    "no resharding": (shard_without_resharding, "all-gathers"),
}


def check_on_rank(candidate: Any, ctx: Any) -> tuple[bool, str]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from nvtutorial.chapters.ch08_ladder.exercises_check import (
        TOLERANCE,
        device_of,
        local_shape,
        train_against_reference,
    )
    from nvtutorial.chapters.ch08_ladder.lessons.rungs import LR
    from nvtutorial.models import transformer

    world, rank, device = dist.get_world_size(), dist.get_rank(), device_of(ctx)
    model: transformer.Transformer = transformer.build(transformer.Config(), device=device)
    mesh = init_device_mesh(device.type, (world,))
    try:
        model = candidate(model, mesh) or model
    except Exception as exc:  # noqa: BLE001 - the learner's code: any failure becomes the reason
        return False, f"shard() raised {type(exc).__name__}: {exc}"
    for name, p in model.named_parameters():
        if not isinstance(p, DTensor):
            return False, (
                f"{name} is a plain tensor, whole on every rank: only modules passed to fully_shard are "
                "sharded; call fully_shard(model, mesh=mesh) on the root after the blocks"
            )
        want = local_shape(tuple(p.shape), 0, world, rank)
        if tuple(p.to_local().shape) != want:
            return False, f"{name}: this rank holds {tuple(p.to_local().shape)}, not its share {want} of dimension 0"
    for i, block in enumerate(model.blocks):
        if not isinstance(block, FSDPModule):
            return False, (
                f"blocks.{i} is not its own FSDP unit: its parameters are gathered together with the "
                "whole model, so every rank holds all of them at once; fully_shard each block first"
            )
    if not isinstance(model, FSDPModule):
        return False, "the root is not an FSDP unit: call fully_shard(model, mesh=mesh) after the blocks"
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    diff, records = train_against_reference(model, optimizer, "fsdp_zero3", device, count_last=True)
    assert records is not None  # count_last=True: the last step's collectives were recorded
    if diff > TOLERANCE:
        return False, f"the loss left the one-process reference by {diff:.2g} (tolerance {TOLERANCE:g})"
    gathers = sum(1 for r in records if r["kind"] == "all_gather")
    layers = len(model.blocks)
    if gathers != 2 * layers + 1:
        return False, (
            f"{gathers} all-gathers per step where ZeRO-3 makes {2 * layers + 1} (each block twice, the "
            "root once): without reshard_after_forward=True a block keeps its gathered parameters from "
            "forward to backward (ZeRO-2-like, more memory)"
        )
    return True, (
        f"every parameter sharded, {layers} blocks and the root each an FSDP unit, {gathers} all-gathers "
        f"per step, loss within {diff:.1g} of the one-process reference"
    )
