"""Tests of nvtutorial/chapters/ch08_ladder/exercises*.py."""

from __future__ import annotations

import types
from typing import cast

import torch

from tests.helpers.exercise_cases import _assert_judged, _cases, _judge
from tests.helpers.ranks import on_ranks


def test_the_ladder_checkers_on_two_ranks():
    for name, entry in (("ladder_fsdp", "shard"), ("ladder_tp", "mlp_plan")):
        cases = _cases(name)
        per_rank = on_ranks(_judge, 2, name, entry, cases, timeout=240)
        _assert_judged(name, per_rank, cases)


# --------------------------------------------------------------------------- notebook 08's FSDP exercise
def _fsdp_wrong_share():
    """Rank side: a candidate whose only parameter is a DTensor split along dimension 1, not 0."""
    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor

    from nvtutorial.chapters.ch08_ladder import exercises_fsdp

    def candidate(model, mesh):
        holder = torch.nn.Module()
        holder.w = torch.nn.Parameter(distribute_tensor(torch.zeros(4, 6), mesh, [Shard(1)]))
        return holder

    ctx = types.SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
    return exercises_fsdp.check_on_rank(candidate, ctx)


def _fsdp_meshes():
    """Rank side: each of the exercise's sharding functions on a one-rank sub-mesh of a two-rank world: the blocks
    must be sharded on the mesh given, not on a default mesh of the whole world."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from nvtutorial.chapters.ch08_ladder import exercises_fsdp
    from nvtutorial.models import transformer

    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("world", "alone"))["alone"]
    out = {}
    for fn in (exercises_fsdp.shard, exercises_fsdp.shard_blocks_only, exercises_fsdp.shard_without_resharding):
        model = transformer.build(transformer.Config(), device=torch.device("cpu"))
        model = fn(model, mesh) or model
        out[fn.__name__] = [
            (d.device_mesh.size(), tuple(d.to_local().shape) == tuple(d.shape))
            for d in (cast(DTensor, p) for p in model.blocks.parameters())  # fn sharded them: DTensors
        ]
    return out


# --------------------------------------------------------------------------- notebook 08's TP exercise
def _tp_optimizers():
    """Rank side: the TP checker on the solution, recording each Adam it builds (DTensors among its parameters?
    foreach?)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from nvtutorial.chapters.ch08_ladder import exercises_tp

    seen = []
    adam = torch.optim.Adam

    class Spy(adam):
        def __init__(self, params, *args, **kwargs):
            params = list(params)
            super().__init__(params, *args, **kwargs)
            seen.append((any(isinstance(p, DTensor) for p in params), self.defaults["foreach"]))

    torch.optim.Adam = Spy
    try:
        ctx = types.SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
        judged = exercises_tp.check_on_rank(exercises_tp.SOLUTION, ctx)
    finally:
        torch.optim.Adam = adam
    return judged, seen


def test_the_fsdp_checker_refuses_a_share_of_the_wrong_dimension():
    for passed, reason in on_ranks(_fsdp_wrong_share, 2, timeout=120):
        assert not passed and "(4, 3)" in reason and "(2, 6)" in reason


def test_the_fsdp_solutions_shard_on_the_mesh_they_are_given():
    for found in on_ranks(_fsdp_meshes, 2, timeout=120):
        for name, params in found.items():
            assert params and all(p == (1, True) for p in params), (name, params)


def test_the_tp_checker_keeps_dtensors_and_plain_tensors_off_the_foreach_path():
    """DTensors and plain tensors in one group: torch's default (foreach on a GPU) would mix them in one foreach
    kernel; the checker asks for the per-tensor loop."""
    for (passed, reason), seen in on_ranks(_tp_optimizers, 2, timeout=180):
        assert passed, reason
        mixed = [foreach for has_dtensor, foreach in seen if has_dtensor]
        assert mixed and all(foreach is False for foreach in mixed), seen
