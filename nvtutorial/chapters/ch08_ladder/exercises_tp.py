"""Exercise (notebook 08): the tensor-parallel plan of the transformer's MLP.

The learner writes ``mlp_plan()``, returning the ``parallelize_module`` plan for ``mlp.w1`` and ``mlp.w2`` (the
attention plan is given: the rung's, ``rungs.tensor_parallel``). The checker, on 2 real ranks: both matrices must be
split
(``w1`` by its rows, the hidden units; ``w2`` by its columns, the same hidden units), three training
steps must run and match the one-process reference within the tolerance.
"""

from __future__ import annotations

from typing import Any

NAME = "ladder_tp"
"""The exercise's name (``teach.check.check("ladder_tp", ...)``)."""

NOTEBOOK = "08_strategy_ladder"
TASK = "write mlp_plan(): the ParallelStyle of mlp.w1 and of mlp.w2, so that one all-reduce ends the MLP"
KIND = "function"
ENTRY = "mlp_plan"
TIMEOUT = 120.0


def mlp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel()}


def mlp_plan_colwise_both():
    from torch.distributed.tensor.parallel import ColwiseParallel

    return {"mlp.w1": ColwiseParallel(), "mlp.w2": ColwiseParallel()}


def mlp_plan_empty():
    return {}


SOLUTION = mlp_plan
WRONG = {
    "column-wise twice": (mlp_plan_colwise_both, "share of the hidden units"),
    "no plan": (mlp_plan_empty, "not split"),
}


def check_on_rank(candidate: Any, ctx: Any) -> tuple[bool, str]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        parallelize_module,
    )

    from nvtutorial.chapters.ch08_ladder.exercises_check import (
        TOLERANCE,
        device_of,
        local_shape,
        train_against_reference,
    )
    from nvtutorial.chapters.ch08_ladder.lessons.rungs import LR
    from nvtutorial.models import transformer

    world, rank, device = dist.get_world_size(), dist.get_rank(), device_of(ctx)
    try:
        plan = candidate()
    except Exception as exc:  # noqa: BLE001 - the learner's code: any failure becomes the reason
        return False, f"mlp_plan() raised {type(exc).__name__}: {exc}"
    if not isinstance(plan, dict) or not all(isinstance(k, str) for k in plan):
        return False, f"mlp_plan() must return a dict from module names to ParallelStyles, not {type(plan).__name__}"
    model = transformer.build(transformer.Config(), device=device)
    mesh = init_device_mesh(device.type, (world,))
    attention = {
        "attn": PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),), use_local_output=False
        ),
        "attn.wq": ColwiseParallel(),
        "attn.wk": ColwiseParallel(),
        "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(),
    }  # the rung's attention plan (lessons/ladder/rungs.py)
    try:
        for block in model.blocks:
            parallelize_module(block, mesh, {**attention, **plan})
    except Exception as exc:  # noqa: BLE001 - the learner's code: any failure becomes the reason
        return False, f"parallelize_module rejected the plan: {type(exc).__name__}: {exc}"
    hidden_dim = {"mlp.w1": 0, "mlp.w2": 1}  # where the hidden units are in each weight (out × in)
    for name, dim in hidden_dim.items():
        weight = model.blocks[0].get_submodule(name).weight
        if not isinstance(weight, DTensor):
            return False, f"{name} is not split: each rank holds the whole matrix, so the MLP is not parallel"
        want = local_shape(tuple(weight.shape), dim, world, rank)
        if tuple(weight.to_local().shape) != want:
            return False, (
                f"{name}: this rank holds a shard of shape {tuple(weight.to_local().shape)}, not {want} (its share "
                "of the hidden units): w1 splits its output rows (column-wise), w2 its input columns (row-wise)"
            )
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=LR, foreach=False)  # DTensors and plain tensors in one group
    try:
        diff, _ = train_against_reference(model, optimizer, "tensor_parallel", device)
    except RuntimeError as exc:
        return False, (
            f"the forward pass failed ({str(exc).splitlines()[0][:160]}): a column-wise layer leaves its "
            "output split over the hidden units, so the next layer must take a split input (row-wise)"
        )
    if diff > TOLERANCE:
        return False, f"the loss left the one-process reference by {diff:.2g} (tolerance {TOLERANCE:g})"
    return True, f"w1 split by rows, w2 by columns, loss within {diff:.1g} of the one-process reference"
