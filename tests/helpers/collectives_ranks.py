"""A live pool of 2 gloo ranks (teach.ranks) and the chapter 7 workloads run on it, for the tests of
several files of tests/chapters/ch07_collectives/."""

from __future__ import annotations

import inspect
import json
import textwrap

import pytest
import torch

from nvtutorial.chapters.ch07_collectives import schema_compression
from nvtutorial.results import typed
from nvtutorial.teach import ranks

WORLD = 2


@pytest.fixture(scope="module")
def pool():
    """2 gloo ranks with TORCH_DISTRIBUTED_DEBUG=DETAIL (the source's mismatched all_gather then raises)."""
    ranks.start(
        nproc=WORLD,
        backend="gloo",
        timeout=240,
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "OMP_NUM_THREADS": "1"},
        quiet=True,
    )
    yield ranks
    ranks.stop()


@pytest.fixture(scope="module")
def plain_pool(pool):
    """The same ranks without DETAIL: torch 2.13 crashes building DDP under DETAIL on gloo."""
    ranks.restart(env={"OMP_NUM_THREADS": "1"}, quiet=True)
    return ranks


def on_pool(fn, *args) -> list:
    """Run the module-level function ``fn(*args)`` on every rank; every rank's return value."""
    source = textwrap.dedent(inspect.getsource(fn))
    result = ranks.run_code(f"{source}\n_out = {fn.__name__}(*{args!r})\n")
    assert result.ok, "\n".join(result.report())
    return ranks.pull("_out")


def workload_metrics(which, params):
    import dataclasses
    import tempfile
    from pathlib import Path

    import torch.distributed as dist

    from nvtutorial import runtime
    from nvtutorial.chapters.ch07_collectives import workload as collectives_bench
    from nvtutorial.chapters.ch07_collectives import workload_compression as compression

    module = {"collectives_bench": collectives_bench, "compression": compression}[which]
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ctx = runtime.Context(rank, rank, world_size, "gloo", torch.device("cpu"), Path(tempfile.mkdtemp()))
    return dataclasses.asdict(module.run(ctx, module.Params(**params)))  # as the launcher writes rank{R}.json


def read_back(rank_type, metrics):
    """Every rank's metrics as the kernel reads them: through JSON, typed by the workload's schema."""
    return [typed(rank_type, json.loads(json.dumps(m))) for m in metrics]


def workload_on_pool(rank_type, which, params) -> list:
    """Every rank's metrics of the chapter 7 workload ``which`` run on the pool with ``params``, read back typed."""
    return read_back(rank_type, on_pool(workload_metrics, which, params))


@pytest.fixture(scope="module")
def cpu_hooks(plain_pool) -> list[schema_compression.Rank]:
    return workload_on_pool(
        schema_compression.Rank,
        "compression",
        {
            "model": "tiny",
            "image_size": 16,
            "batch_size": 2,
            "samples": 8,
            "val_samples": 4,
            "warmup": 3,
            "steps": 2,
            "rounds": 2,
            "density_batches": 1,
            "topk_ratio": 0.01,
            "powersgd_rank": 1,
        },
    )
