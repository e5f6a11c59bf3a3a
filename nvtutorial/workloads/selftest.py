"""selftest: check that N processes can form a process group and agree on an all-reduce.

Also the launcher's test subject: ``mode=crash`` makes rank 1 raise once the group is up,
``mode=abort`` kills rank 1 with SIGABRT (no Python exception: how NCCL's watchdog ends a rank),
``mode=hang`` makes rank 1 never join the all-reduce that rank 0 waits in. Used in notebook 00.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.selftest --set mode=ok
    nvtutorial run selftest --nproc 2 --set mode=crash
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Literal

from nvtutorial import runtime
from nvtutorial.params import require


@dataclasses.dataclass(frozen=True)
class Params:
    mode: Literal["ok", "crash", "abort", "hang"] = "ok"
    steps: int = 5
    numel: int = 1 << 20
    report_env: tuple[str, ...] = ()
    """Names of environment variables whose values each rank reports (e.g. NCCL_DEBUG)."""

    def __post_init__(self) -> None:
        require(self.steps >= 1, f"steps={self.steps} must be at least 1")
        require(self.numel >= 1, f"numel={self.numel} must be at least 1")


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank returns (``RunResult.ranks_as(Rank)``)."""

    device: str
    allreduce_sum: float
    """What every element of the all-reduced tensor should hold: 1 + 2 + … + world size."""
    allreduce_ok: bool
    """Always True in a returned result: every element of every step's all-reduce is checked, and a wrong sum
    raises instead."""
    median_allreduce_ms: float
    """The median of the ``steps`` all-reduces (the upper middle one for an even count, e.g. the committed run's 50),
    each timed alone on the host clock, the device synchronised at both ends; the first all-reduce, with no warm-up
    before it, is included."""
    numel: int
    env: dict[str, str | None]
    """The values of ``Params.report_env``'s variables on this rank (None: not set)."""


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch
    import torch.distributed as dist

    print(f"rank {ctx.rank}/{ctx.world_size} up: backend {ctx.backend}, device {ctx.device}", flush=True)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    timer = ctx.timer(host=True)  # the host clock, the device synchronised at both ends
    for step in range(p.steps):
        x = torch.full((p.numel,), float(ctx.rank + 1), device=ctx.device)
        if p.mode == "crash" and ctx.rank == 1:
            raise RuntimeError("selftest: rank 1 crashed on purpose (mode=crash)")
        if p.mode == "abort" and ctx.rank == 1:
            print("rank 1: aborting (mode=abort)", flush=True)
            os.abort()
        if p.mode == "hang" and ctx.rank == 1:
            print("rank 1: sleeping instead of joining the all-reduce (mode=hang)", flush=True)
            while True:
                time.sleep(1)
        with timer:
            dist.all_reduce(x)
        if not torch.all(x == expected):
            raise AssertionError(f"all-reduce gave {x[0].item()} on rank {ctx.rank}, expected {expected}")
        ctx.progress(step + 1, p.steps, "all-reduce")
    times = sorted(timer.seconds())
    return Rank(
        device=str(ctx.device),
        allreduce_sum=expected,
        allreduce_ok=True,
        median_allreduce_ms=1e3 * times[len(times) // 2],
        numel=p.numel,
        env={name: os.environ.get(name) for name in p.report_env},
    )


if __name__ == "__main__":
    runtime.main(run, Params)
