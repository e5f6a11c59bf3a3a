"""Made-up results of the ``profile_step`` workload (chapter 05), typed as the workload returns them
(:class:`nvtutorial.chapters.ch05_profiling.schema.Rank`), for the readers' tests."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest

from nvtutorial.chapters.ch05_profiling import report as profiling
from nvtutorial.chapters.ch05_profiling import schema


def split(step=10.0, comm=2.0, exposed=1.0, compute=8.0, link=None, source: schema.Source = "gpu", **extra):
    """A rank's split; ``link``: ``(wait, transfer, exposed wait)`` ms where the ranks' traces were paired."""
    paired = None
    if link is not None:
        wait, transfer, exposed_wait = link
        paired = schema.Link(
            wait_ms=wait,
            transfer_ms=transfer,
            exposed_wait_ms=exposed_wait,
            exposed_transfer_ms=exposed - exposed_wait,
            last_share=0.5,
            collectives=3,
        )
    sp = schema.Split(
        source=source,
        steps=3,
        step_ms=step,
        compute_ms=compute,
        comm_ms=comm,
        hidden_ms=comm - exposed,
        exposed_ms=exposed,
        idle_ms=step - compute - exposed,
        phase_ms={"forward": 3.0, "backward": 4.0},
        rank=None,
        compute_only_ms=compute - (comm - exposed),
        comm_share=comm / step,
        exposed_share=exposed / step,
        hidden_fraction=(comm - exposed) / comm if comm else math.nan,
        link=paired,
    )
    return dataclasses.replace(sp, **extra)


def kinds(reps):
    """``{"ddp": [...], "no_sync": [...], "local": [...]}`` as the workload's :class:`schema.Kinds`."""
    return schema.Kinds(**{k: tuple(v) for k, v in reps.items()})


BASE = schema.Rank(
    model="tiny",
    batch_size=2,
    image_size=16,
    amp="fp32",
    parameters=1000,
    gradient_mib=4000 / 2**20,
    step_ms=10.0,
    local_step_ms=None,
    ddp_gap_ms=None,
    step_ms_profiled=11.0,
    profiler_overhead=0.1,
    samples_per_s=400.0,
    split=None,
    trace=None,
    sweep=(),
    probe=None,
    memory={},
    memory_snapshot=schema.Snapshot(written=False, reason="not asked for"),
    phases=(),
    step_ends=(),
    nccl_p2p_disable=None,
)
"""A rank with nothing measured but what each test gives it."""


def rank(sp=None, plain=(10.0, 10.1, 9.9), profiled=(11.0, 11.1, 10.9), repeats=None, **extra):
    given = {
        "step_ms": statistics.median(plain),
        "step_ms_profiled": statistics.median(profiled),
        "split": sp,
        "step_ms_all": schema.Kinds(ddp=tuple(plain), no_sync=()),
        "profiled_ms": tuple(profiled),
        "step_ms_repeats": kinds(repeats) if repeats is not None else None,
    }
    return dataclasses.replace(BASE, **{**given, **extra})


def probe(start=1.0, end=3.0, sent=2**30, busbw=100.0):
    return schema.Probe(
        mib=256, count=1, seconds=end - start, start=start, end=end, bytes_per_rank_algorithm=sent, busbw_gbs=busbw
    )


def sweep_row(batch, comm, exposed, step=None, link=None, repeats=None):
    """A sweep row, profiled; ``link``: ``(transfer, exposed transfer)`` ms where the ranks' traces were paired."""
    step = step if step is not None else 10.0 * batch
    sp = split(step=step, comm=comm, exposed=exposed, compute=0.5 * step)
    profiled = {k: v for k, v in dataclasses.asdict(sp).items() if k not in ("phase_ms", "per_step", "link")}
    paired = None
    if link:
        wait, exposed_wait = comm - link[0], exposed - link[1]
        paired = schema.Link(
            transfer_ms=link[0], exposed_transfer_ms=link[1], wait_ms=wait, exposed_wait_ms=exposed_wait
        )
    return schema.SweepRow(
        **profiled,
        link=paired,
        batch=batch,
        global_batch=2 * batch,
        step_ms_unprofiled=step,
        samples_per_s=100.0 * batch,
        repeats=kinds(repeats) if repeats else None,
    )


@pytest.fixture(scope="module")
def ref():
    runs = profiling.reference_runs()
    assert set(runs) == {"NVLink", "host-staged"}, "the committed profile_step runs of 2026-11-30 are missing"
    assert all(r.env is not None and r.env.is_gpu and r.env.link == "NV18" for r in runs.values())
    return runs
