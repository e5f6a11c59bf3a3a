"""profile_step: where the time of a DDP training step goes, and what the gradient exchange costs.

Used in notebook 05. Runs the annotated DDP step of :mod:`nvtutorial.chapters.ch05_profiling.lessons.profile_ddp` (the
code the notebook shows) on a batch that already sits on the device, so the input pipeline is
out of the picture. Every step is timed on the host clock with the device synchronised at its
end, on every rank:

1. **A/B rounds** without the profiler: the DDP step, the same step under ``model.no_sync()``
   (no gradient exchange at all) and the bare module (no DDP: the 1-GPU step), interleaved
   round by round; each round's median is one repeat for ``report.verdict.compare``;
2. **profiled steps** (``lesson.profile_steps``): each rank writes ``RUN_DIR/trace_rank{R}.json``
   and splits it (:func:`nvtutorial.tracesplit.split`: compute, communication, hidden, exposed,
   idle; one split per step too); then every rank reads all ranks' traces on the host's one
   clock and separates **waiting** for the other rank from **transfer**
   (:func:`nvtutorial.tracesplit.pair`);
3. **the wire**: one all-reduce of the gradients' bytes right after a barrier, repeated: the
   least time the exchange takes on this link, with no rank waiting for another (not on one rank: no link);
4. optionally a **batch-size sweep** (claim C16): the rounds and the profiled split at each
   per-GPU batch; an all-reduce **probe** whose NVLink traffic the parent's telemetry sees;
5. memory per rank: ``torch.cuda.memory_stats`` and a memory snapshot where it works.

Each rank returns its own numbers (:class:`~nvtutorial.chapters.ch05_profiling.schema.Rank`), and the wall-clock
times of its phases and steps so that telemetry sampled by the parent can be drawn against them.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch05_profiling.workload --set model=small
    NCCL_P2P_DISABLE=1 torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch05_profiling.workload
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvtutorial import runtime
from nvtutorial.chapters.ch05_profiling.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.chapters.ch05_profiling.schema import (
    Kinds,
    Params,
    Phase,
    Probe,
    Rank,
    Snapshot,
    Split,
    SweepRow,
    Wire,
)
from nvtutorial.results import typed

TIMING = "host clock per step, the device synchronised at its end"


def memory_report(ctx: runtime.Context) -> dict[str, int | float | str]:
    """This rank's memory: ``torch.cuda.memory_stats`` essentials on a GPU, process RSS on a CPU."""
    if ctx.is_gpu:
        import torch

        stats = torch.cuda.memory_stats(ctx.device)
        keep = [
            "allocated_bytes.all.current",
            "allocated_bytes.all.peak",
            "reserved_bytes.all.current",
            "reserved_bytes.all.peak",
            "active_bytes.all.peak",
            "num_alloc_retries",
            "num_ooms",
            "num_device_alloc",
            "num_device_free",
        ]
        out: dict[str, int | float | str] = {k: int(stats.get(k, 0)) for k in keep}
        out["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        out["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved(ctx.device) / 2**20
        out["kind"] = "torch.cuda.memory_stats"
        return out
    import psutil

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    return {
        "kind": "process RSS (CPU run: no device memory)",
        "rss_mib": psutil.Process().memory_info().rss / 2**20,
        "rss_peak_mib": peak_kib / 1024,
    }


def _snapshot(ctx: runtime.Context, steps: int, step: Callable[[], Any]) -> Snapshot:
    """Record the allocator's history over ``steps`` steps and dump a snapshot (GPU only)."""
    if not ctx.is_gpu:
        return Snapshot(written=False, reason="the memory snapshot records the CUDA caching allocator: needs a GPU")
    import torch

    path = ctx.run_dir / f"memory_snapshot_rank{ctx.rank}.pickle"
    try:
        torch.cuda.memory._record_memory_history(max_entries=20000)
        for _ in range(steps):
            step()
        torch.cuda.synchronize(ctx.device)
        torch.cuda.memory._dump_snapshot(str(path))
    except Exception as exc:  # a private API: report rather than fail the run
        return Snapshot(written=False, reason=f"{type(exc).__name__}: {exc}")
    finally:
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
    return Snapshot(
        written=True,
        path=str(path),
        bytes=path.stat().st_size,
        how_to_view="drag the file onto https://pytorch.org/memory_viz",
    )


def _ms(seconds: list[float]) -> list[float]:
    return [1e3 * s for s in seconds]


def rounds(
    steps: dict[str, Callable[[], Any]],
    n_rounds: int,
    per_round: int,
    timed: Callable[[Callable[[], Any]], float],
    ends: list[float] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Time the kinds of step interleaved: in each round, one step not counted then ``per_round`` timed
    steps of each kind, the order rotated from round to round. The step not counted is run to its end on the
    device too (untimed, its GPU work ran into the first timed step: 70 ms instead of 42 on one H100). Returns,
    per kind, every step's milliseconds (``all``) and each round's median (``repeats``: what ``compare`` takes)."""
    names = list(steps)
    out: dict[str, dict[str, list[float]]] = {n: {"all": [], "repeats": []} for n in names}
    for r in range(n_rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            timed(steps[name])  # the first step after a switch, run to its end on the device: not counted
            times = []
            for _ in range(per_round):
                times.append(1e3 * timed(steps[name]))
                if ends is not None:
                    ends.append(time.time())
            out[name]["all"] += times
            out[name]["repeats"].append(statistics.median(times))
    return out


def _split_and_pair(ctx: runtime.Context, path, pattern: str) -> Split:
    """This rank's split of its trace (average and per step), and waiting/transfer from every rank's trace."""
    from nvtutorial import tracesplit

    act = tracesplit.classify(path)
    average = tracesplit.split(act).to_dict()
    per_step = [{k: v for k, v in s.to_dict().items() if k != "phase_ms"} for s in tracesplit.split_steps(act)]
    ctx.barrier()  # every rank's trace is written
    paths = [ctx.run_dir / pattern.format(rank=r) for r in range(ctx.world_size)]
    link: dict[str, Any]
    if ctx.world_size < 2:
        link = {"reason": "one rank: no other rank to wait for"}
    elif not all(p.exists() for p in paths):
        link = {
            "reason": "the other ranks' traces are not on this host's disk: waiting and transfer need "
            "all traces of one machine"
        }
    else:
        try:
            acts = [act if p == path else tracesplit.classify(p) for p in paths]
            link = tracesplit.pair(acts)[ctx.rank].to_dict()
        except ValueError as exc:
            link = {"reason": str(exc)}
    ctx.barrier()  # every rank has read every trace
    return typed(Split, {**average, "per_step": per_step, "link": link})


def _wire(ctx: runtime.Context, numel: int, repeats: int, timed: Callable[[Callable[[], Any]], float]) -> Wire:
    """``numel`` fp32 values (the gradients' size: DDP's buckets hold them in the parameters' dtype)
    all-reduced right after a barrier, ``repeats`` times: the exchange with no rank behind."""
    import torch
    import torch.distributed as dist

    grads = torch.zeros(numel, dtype=torch.float32, device=ctx.device)
    dist.all_reduce(grads)
    seconds = []
    for _ in range(repeats):
        ctx.barrier()
        seconds.append(timed(lambda: dist.all_reduce(grads)))
    w = ctx.world_size
    return Wire(
        bytes=numel * 4,
        ms=tuple(_ms(seconds)),
        busbw_gbs=numel * 4 * 2 * (w - 1) / w / statistics.median(seconds) / 1e9 if w > 1 else None,
        how="one all_reduce of all gradient bytes after a barrier, host clock, device synchronised",
    )


def _kinds(times: dict[str, list[float]]) -> Kinds:
    """The rounds' milliseconds per kind of step (``ddp``, ``no_sync`` and, where timed, ``local``)."""
    return Kinds(ddp=tuple(times["ddp"]), no_sync=tuple(times["no_sync"]), local=_opt(times.get("local")))


def _opt(values: list[float] | None) -> tuple[float, ...] | None:
    return tuple(values) if values is not None else None


def _no_sync_step(lesson: Any, model: Any, optimizer: Any, images: Any, masks: Any, dtype: Any) -> None:
    with model.no_sync():  # backward without the gradient all-reduce
        lesson.train_step(model, optimizer, images, masks, dtype)


def _kinds_of(ctx: runtime.Context, p: Params, model: Any, optimizer: Any, dtype: Any, b: int) -> dict[str, Any]:
    """The kinds of step at per-GPU batch ``b``: DDP, DDP under ``no_sync`` and, with ``local_baseline``, the bare
    module (what one GPU alone runs)."""
    from nvtutorial.chapters.ch05_profiling.lessons import profile_ddp as lesson

    images, masks = lesson.batch(ctx.rank, b, p.image_size, ctx.device)
    out = {
        "ddp": functools.partial(lesson.train_step, model, optimizer, images, masks, dtype),
        "no_sync": functools.partial(_no_sync_step, lesson, model, optimizer, images, masks, dtype),
    }
    if p.local_baseline:
        out["local"] = functools.partial(lesson.train_step, model.module, optimizer, images, masks, dtype)
    return out


@dataclasses.dataclass
class _Clock:
    """The run's phases and progress on the wall clock, its pauses, and steps timed to their end on the device."""

    ctx: runtime.Context
    pause_s: float
    total: int
    phases: list[Phase] = dataclasses.field(default_factory=list)
    done: int = 0

    def phase(self, name: str, start: float) -> None:
        self.phases.append(Phase(name=name, start=start, end=time.time()))

    def pause(self) -> None:
        self.ctx.barrier()
        if self.pause_s:
            time.sleep(self.pause_s)

    def timed(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        self.ctx.sync()
        return time.perf_counter() - start

    def progress(self, **info: Any) -> None:
        self.done += 1
        self.ctx.progress(self.done, self.total, "profile_step", **info)


def _nvtx_marked(ctx: runtime.Context, step: Callable[[], Any]) -> None:
    """One step inside the range Nsight Systems splits its report by."""
    from nvtutorial.chapters.ch05_profiling.lessons import profile_ddp as lesson

    with lesson.mark("train_step"):
        step()
        ctx.sync()


def _profiled(
    ctx: runtime.Context, p: Params, clock: _Clock, step: Callable[[], Any], trace: Path
) -> tuple[Split | None, list[float]]:
    """Phase 2: the DDP step under the profiler (or only NVTX ranges, when Nsight Systems records): its milliseconds,
    and this rank's split of the trace."""
    from nvtutorial.chapters.ch05_profiling.lessons import profile_ddp as lesson

    split: Split | None = None
    if p.profiler:
        _, seconds = lesson.profile_steps(step, p.steps, trace, ctx.sync)
        split = _split_and_pair(ctx, trace, "trace_rank{rank}.json")
    else:
        seconds = [clock.timed(functools.partial(_nvtx_marked, ctx, step)) for _ in range(p.steps)]
    return split, _ms(seconds)


def _sweep_row(
    ctx: runtime.Context, p: Params, clock: _Clock, kinds: Callable[[int], dict[str, Callable[[], Any]]], b: int
) -> SweepRow:
    """Phase 4 at one per-GPU batch ``b``: the A/B rounds (DDP and no_sync) and, with the profiler, the split."""
    from nvtutorial.chapters.ch05_profiling.lessons import profile_ddp as lesson

    t0 = time.time()
    steps = kinds(b)
    steps.pop("local", None)
    for _ in range(2):
        steps["ddp"]()
    ctx.sync()
    ab = rounds(steps, p.sweep_rounds, p.sweep_steps, clock.timed)
    profiled: dict[str, Any] = {}
    if p.profiler:
        path = ctx.run_dir / f"sweep_b{b}_rank{ctx.rank}.json"
        lesson.profile_steps(steps["ddp"], p.sweep_steps, path, ctx.sync)
        profiled = dataclasses.asdict(_split_and_pair(ctx, path, f"sweep_b{b}_rank{{rank}}.json"))
        profiled.pop("phase_ms")
        path.unlink(missing_ok=True)  # the main trace is kept; the sweep's would only fill the disk
    ddp_ms = statistics.median(ab["ddp"]["all"])
    row = typed(
        SweepRow,
        {
            **profiled,
            "batch": b,
            "global_batch": b * ctx.world_size,
            "step_ms_unprofiled": ddp_ms,
            "samples_per_s": b * ctx.world_size / (ddp_ms / 1e3),
            "repeats": dataclasses.asdict(_kinds({k: v["repeats"] for k, v in ab.items()})),
        },
    )
    clock.phase(f"sweep batch {b}", t0)
    clock.progress(batch=b)
    return row


def _probe(ctx: runtime.Context, p: Params, clock: _Clock) -> Probe:
    """Phase 5: all-reduces of ``probe_mb`` MiB for about ``probe_s``, the same number on every rank."""
    import torch
    import torch.distributed as dist

    w = ctx.world_size
    x = torch.ones(p.probe_mb * 2**20 // 4, device=ctx.device)
    dist.all_reduce(x)
    one = clock.timed(lambda: dist.all_reduce(x))
    n = torch.tensor([max(1, math.ceil(p.probe_s / max(one, 1e-6)))], device=ctx.device)
    dist.all_reduce(n, op=dist.ReduceOp.MAX)  # every rank must run the same number
    count = int(n.item())
    t0 = time.time()
    start = time.perf_counter()
    for _ in range(count):
        dist.all_reduce(x)
    ctx.sync()
    seconds = time.perf_counter() - start
    clock.phase("all-reduce probe", t0)
    return Probe(
        mib=p.probe_mb,
        count=count,
        seconds=seconds,
        start=t0,
        end=time.time(),
        bytes_per_rank_algorithm=count * x.numel() * 4 * 2 * (w - 1) / w,
        busbw_gbs=count * x.numel() * 4 * 2 * (w - 1) / w / seconds / 1e9,
    )


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch

    from nvtutorial.chapters.ch05_profiling.lessons import profile_ddp as lesson

    t_setup = time.time()
    model, optimizer = lesson.make_model(p.model, ctx.device, p.bucket_cap_mb)
    kinds = functools.partial(_kinds_of, ctx, p, model, optimizer, torch.bfloat16 if p.amp == "bf16" else None)
    clock = _Clock(ctx, p.pause_s, total=5 + len(p.sweep) + int(p.probe_mb > 0))
    steps = kinds(p.batch_size)
    for _ in range(p.warmup):
        for step in steps.values():
            step()
    ctx.sync()
    clock.phase("setup + warm-up", t_setup)
    clock.progress()
    clock.pause()

    # 1. A/B rounds without the profiler.
    if ctx.is_gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    t0 = time.time()
    step_ends: list[float] = []
    ab = rounds(steps, p.rounds, p.round_steps, clock.timed, step_ends)
    ab_name = "A/B rounds: DDP, no_sync" + (", 1-GPU" if p.local_baseline else "")
    clock.phase(ab_name if ctx.world_size > 1 else "timed rounds (one rank)", t0)
    memory = memory_report(ctx)
    clock.progress(step_ms=statistics.median(ab["ddp"]["all"]))
    clock.pause()

    # 2. The DDP step under the profiler (or only NVTX ranges, when Nsight Systems records).
    t0 = time.time()
    trace_path = ctx.run_dir / f"trace_rank{ctx.rank}.json"
    split, profiled_ms = _profiled(ctx, p, clock, steps["ddp"], trace_path)
    clock.phase("profiled steps" if p.profiler else "NVTX-marked steps", t0)
    clock.progress()
    snapshot = _snapshot(ctx, 2, steps["ddp"]) if p.memory_snapshot else Snapshot(written=False, reason="not asked for")
    clock.progress()
    clock.pause()

    # 3. The gradients' bytes on the wire: one all-reduce right after a barrier, no rank behind (one rank: no wire).
    t0 = time.time()
    numel = sum(t.numel() for t in model.module.parameters())
    wire = _wire(ctx, numel, p.wire_repeats, clock.timed) if ctx.world_size > 1 else None
    if wire is not None:
        clock.phase("gradient bytes on the wire", t0)
    clock.progress()
    if wire is not None:  # a gap in the telemetry after a phase that ran
        clock.pause()

    # 4. The batch-size sweep: communication share against the per-GPU batch (claim C16).
    sweep_rows = [_sweep_row(ctx, p, clock, kinds, b) for b in p.sweep]
    if p.sweep:
        clock.pause()

    # 5. An all-reduce probe: a known number of bytes over the link, for the parent's telemetry.
    probe = _probe(ctx, p, clock) if p.probe_mb > 0 else None
    if probe is not None:
        clock.progress()
    return Rank(
        model=p.model,
        batch_size=p.batch_size,
        image_size=p.image_size,
        amp=p.amp,
        parameters=numel,
        gradient_mib=numel * 4 / 2**20,
        timing=TIMING,
        **_step_times(ctx, p, ab, profiled_ms),
        split=split,
        trace=str(trace_path) if p.profiler else None,
        wire=wire,
        sweep=tuple(sweep_rows),
        probe=probe,
        memory=memory,
        memory_snapshot=snapshot,
        phases=tuple(clock.phases),
        step_ends=tuple(step_ends),
        nccl_p2p_disable=os.environ.get("NCCL_P2P_DISABLE"),
    )


def _step_times(
    ctx: runtime.Context, p: Params, ab: dict[str, dict[str, list[float]]], profiled_ms: list[float]
) -> dict[str, Any]:
    """The result's step times: the A/B rounds' medians per kind, every step and repeat, and the profiled steps."""
    ddp_ms = statistics.median(ab["ddp"]["all"])
    median_of = {k: statistics.median(v["all"]) for k, v in ab.items()}
    return {
        "step_ms": ddp_ms,
        "no_sync_step_ms": median_of["no_sync"],
        "local_step_ms": median_of.get("local"),
        "ddp_gap_ms": ddp_ms - median_of["local"] if "local" in median_of else None,
        "step_ms_all": _kinds({k: v["all"] for k, v in ab.items()}),
        "step_ms_repeats": _kinds({k: v["repeats"] for k, v in ab.items()}),
        "step_ms_profiled": statistics.median(profiled_ms),
        "profiled_ms": tuple(profiled_ms),
        "profiler_overhead": (statistics.median(profiled_ms) / ddp_ms - 1) if p.profiler else None,
        "samples_per_s": p.batch_size * ctx.world_size / (ddp_ms / 1e3),
    }


if __name__ == "__main__":
    runtime.main(run, Params)
