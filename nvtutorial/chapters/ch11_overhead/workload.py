"""overhead: what one call costs the CPU and the GPU, and one training step eager, graphed and compiled.

Used in notebook 11, one ``part`` per run (``schema.Params``); the code that measures is the lesson
``lessons/overhead.py``:

- ``calibrate`` (one rank): one tiny op queued, waited for, a call with no kernel (a view) and (GPU) the tiny op
  replayed from a CUDA graph; the small step's time per step over a sweep of batches (the batch-doubling test); an
  all-reduce of a few sizes in a world of one; on a GPU the eager step's two sides at each lesson width: the CPU's
  time to issue it, the GPU's own time, and the launches and kernels the profiler counts; the tiny op's GPU time
  launched eagerly behind a sleep; and the CPU's time to issue the step compiled with ``reduce-overhead`` at a tiny
  width (its floor: the compiled step's prediction before it runs).
- ``step`` (one rank, GPU only): at each width the step eager and captured in one CUDA graph, and at the widths of
  ``compile_widths`` compiled with ``mode="reduce-overhead"``, each from the same seeded weights on the same batches:
  losses and weights against the eager step's, then each one's two sides, then its time per step.

On a GPU each part first warms the GPU up (notebook 10's ``warm_up``).
- ``allreduce`` (two ranks): the same all-reduces over the pair, each time the slowest rank's.

    torchrun --standalone --nproc-per-node 1 -m nvtutorial.chapters.ch11_overhead.workload --set part=calibrate
    torchrun --standalone --nproc-per-node 1 -m nvtutorial.chapters.ch11_overhead.workload --set part=step
    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch11_overhead.workload --set part=allreduce
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
import warnings
from typing import Any

from nvtutorial import runtime, tracesplit
from nvtutorial.chapters.ch11_overhead.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.chapters.ch11_overhead.schema import (
    AllReducePoint,
    AllReduceRank,
    CalibrateRank,
    DoublingPoint,
    OpCost,
    Params,
    Sides,
    StepRank,
    VariantRun,
)

__all__ = ["Params", "run"]

LAUNCH_CALLS = ("LaunchKernel", "GraphLaunch", "MemcpyAsync", "MemsetAsync")
"""Runtime and driver calls by which the CPU hands the GPU one piece of work (in a profiler trace)."""


def _device_name(ctx: runtime.Context) -> str:
    import torch

    return torch.cuda.get_device_name(ctx.device) if ctx.is_gpu else "CPU"


def _config(p: Params, width: int):  # -> models.transformer.Config
    from nvtutorial.models import transformer

    return transformer.Config(**p.config(width))


def _tokens(p: Params, cfg, batch: int, step: int, device):
    from nvtutorial.models import transformer

    return transformer.batch(step, batch, cfg, seed=p.seed).to(device)


def _repeats(op, p: Params, ctx: runtime.Context) -> tuple[tuple[float, ...], tuple[int, int] | None]:
    """``p.repeats`` timings of ``p.steps`` calls of ``op`` (seconds per call), after one untimed call; and the
    lowest and highest SM clock read after them (GPU, where NVML says; notebook 10's reader)."""
    from nvtutorial.chapters.ch10_cost_model.workload import clock_range, sm_clock_mhz

    op()
    times, clocks = [], []
    for _ in range(p.repeats):
        times.append(runtime.time_calls(op, p.steps, device=ctx.device))
        clocks.append(sm_clock_mhz(ctx))
    return tuple(times), clock_range(clocks)


# --------------------------------------------------------------------------------------------------- calibrate


def op_cost(ctx: runtime.Context, p: Params) -> OpCost:
    """The tiny op four ways, each the median of three timings (a busy CPU moves single timings a lot)."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import host_time
    from nvtutorial.chapters.ch11_overhead.lessons.overhead import graphed, no_kernel_op, per_call, tiny_op

    def median(timed) -> float:
        return statistics.median(timed() for _ in range(3))

    op = tiny_op(ctx.device)
    graph = replay_host = eager_gpu = None
    if ctx.is_gpu:
        replay = graphed(op, p.op_calls, ctx.device)
        graph = median(lambda: per_call(replay, 5, ctx.device)) / p.op_calls
        replay_host = host_time(replay, ctx.device)
        eager_gpu = queued_gpu(op, min(p.op_calls, EAGER_GPU_CALLS), ctx)
    return OpCost(
        queued=median(lambda: per_call(op, p.op_calls, ctx.device)),
        waited=median(lambda: per_call(op, max(10, p.op_calls // 10), ctx.device, wait_each=True)),
        no_kernel=median(lambda: per_call(no_kernel_op(ctx.device), p.op_calls, ctx.device)),
        graph=graph,
        replay_host=replay_host,
        eager_gpu=eager_gpu,
    )


EAGER_GPU_CALLS = 500
"""Calls of the tiny op queued behind one sleep: well under the launch queue's depth (about a thousand), beyond which
the CPU would wait for the sleeping GPU."""


def queued_gpu(op, calls: int, ctx: runtime.Context) -> float | None:
    """The GPU's own time per call of ``op`` launched eagerly, ``calls`` of them queued behind a sleep (notebook 10's
    ``gpu_time``, as the step's GPU side is measured): the median of three, None where no sleep outlasted the
    issuing."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import gpu_time

    found = [t for t in (gpu_time(op, ctx.device, calls=calls) for _ in range(3)) if t is not None]
    return statistics.median(found) if found else None


def doubling(ctx: runtime.Context, p: Params) -> tuple[DoublingPoint, ...]:
    """The eager step at ``doubling_width``, one model and optimizer for every batch of the sweep."""
    from nvtutorial.chapters.ch11_overhead.lessons.overhead import build, eager_step

    cfg = _config(p, p.doubling_width)
    step = eager_step(*build(cfg, ctx.device, p.seed))
    points = []
    for i, batch in enumerate(p.doubling_batches):
        ctx.progress(i, len(p.doubling_batches), desc=f"doubling: batch {batch}")
        tokens = _tokens(p, cfg, batch, 0, ctx.device)
        reps, _ = _repeats(lambda tokens=tokens: step(tokens), p, ctx)
        points.append(DoublingPoint(batch=batch, seconds=statistics.median(reps), repeats=reps))
    return tuple(points)


def counted(op, ctx: runtime.Context) -> dict[str, int]:
    """Launches (graph launches among them) the CPU issues and kernels the GPU runs in one call of ``op``, read from a
    profiler trace of that call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's notes on itself: nothing a learner acts on
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            op()
            torch.cuda.synchronize(ctx.device)
    path = ctx.run_dir / f"trace-count-{time.monotonic_ns()}.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in tracesplit.load(path).get("traceEvents", []) if e.get("ph") == "X"]
    path.unlink()
    calls = [str(e.get("name", "")) for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    return {
        "launches": sum(any(c in name for c in LAUNCH_CALLS) for name in calls),
        "graph_launches": sum("GraphLaunch" in name for name in calls),
        "kernels": sum(e.get("cat") in tracesplit.GPU_CATEGORIES for e in events),
    }


def sides(variant: str, op, ctx: runtime.Context, width: int, batch: int) -> Sides:
    """``op``'s two sides, each measured on its own (notebook 10's ``host_time`` and ``gpu_time``): the CPU issuing
    one call onto an idle GPU, the GPU running calls the CPU issued ahead (None where its sleep never outlasted the
    issuing); on a GPU, what the profiler counts of one call."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import gpu_time, host_time

    host = host_time(op, ctx.device)
    if not ctx.is_gpu:
        return Sides(variant, width, batch, host_s=host, gpu_s=None)
    return Sides(variant, width, batch, host_s=host, gpu_s=gpu_time(op, ctx.device, issue_s=host), **counted(op, ctx))


def calibrate(ctx: runtime.Context, p: Params) -> CalibrateRank:
    import torch

    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import warm_up
    from nvtutorial.chapters.ch11_overhead.lessons.overhead import build, eager_step

    warm_up(ctx.device)
    if not ctx.is_gpu:
        # One thread: the simulation measures what each op costs Python and the dispatcher. With more, every op's
        # parallel region waits at its barrier for a thread that a busy machine may have descheduled (milliseconds).
        torch.set_num_threads(1)
    op = op_cost(ctx, p)
    points = doubling(ctx, p)
    reduce_points = allreduce_points(ctx, p)
    measured = []
    if ctx.is_gpu:
        for width, batch in zip(p.widths, p.batches, strict=True):
            cfg = _config(p, width)
            step = eager_step(*build(cfg, ctx.device, p.seed))
            tokens = _tokens(p, cfg, batch, 0, ctx.device)
            step(tokens)
            measured.append(sides("eager", lambda step=step, tokens=tokens: step(tokens), ctx, width, batch))
            _free(ctx)
    compiled, compiled_error = compiled_floor(ctx, p) if ctx.is_gpu else ((), None)
    return CalibrateRank(
        device=_device_name(ctx),
        op=op,
        doubling_width=p.doubling_width,
        doubling=points,
        allreduce=reduce_points,
        sides=tuple(measured),
        compiled_host_s=min(compiled) if compiled else None,
        compiled_repeats=compiled,
        compiled_error=compiled_error,
    )


COMPILED_WARMUP = 10
"""Untimed steps of the compiled floor: the compile, CUDA Graph Trees' warm-up run, its recording, then replays (a
tiny step takes about a millisecond: ten cost nothing beside the compile)."""


def compiled_floor(ctx: runtime.Context, p: Params) -> tuple[tuple[float, ...], str | None]:
    """The repeats (seconds per step) of the step compiled with ``mode="reduce-overhead"`` (``dynamic=False``) at
    notebook 10's tiny width (the same blocks, heads and calls; one sequence), timed as the step part times its runs
    by default (:func:`_repeats` with :data:`FLOOR_TIMING`) after :data:`COMPILED_WARMUP` steps: a tiny step's GPU
    work is shorter than its issuing, so its fastest repeat is the CPU's rate, the compiled step's floor, measured
    before the step part runs (a tiny model compiles in seconds). Not one call onto an idle GPU: on one H100
    (1d06a7c) that read 1.87 ms where the run's steps took 1.33 ms back to back (review RR13-1). ``((), why)`` where
    it fails: the rest of the calibration stands without it."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import tiny
    from nvtutorial.chapters.ch11_overhead.lessons.overhead import build, compiled_step

    try:
        with warnings.catch_warnings():  # review RR7-7: the filter must not outlive the measurement
            warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")  # as the step part: fp32 kept
            return _compiled_host(ctx, p, compiled_step(*build(tiny(_config(p, p.widths[0])), ctx.device, p.seed)))
    except Exception as exc:  # noqa: BLE001 - a failed compile must not cost the calibration: say why instead
        return (), f"{type(exc).__name__}: {exc}"[:500]
    finally:
        _free(ctx)


FLOOR_TIMING = {"steps": Params.steps, "repeats": Params.repeats}
"""The floor's repeats: the step part's own by default (the calibration's ``steps`` and ``repeats`` time the doubling
sweep, fewer; review RR15-3)."""


def _compiled_host(ctx: runtime.Context, p: Params, step) -> tuple[tuple[float, ...], None]:
    """The compiled tiny step's repeats after :data:`COMPILED_WARMUP` calls (:func:`compiled_floor`)."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import tiny, warm_up

    tokens = _tokens(p, tiny(_config(p, p.widths[0])), 1, 0, ctx.device)
    for _ in range(COMPILED_WARMUP):
        step(tokens)
    gc.collect()  # the compile's garbage, collected now rather than inside a timed step
    warm_up(ctx.device)  # seconds of compiling: the idle GPU may have lowered its clock
    return _repeats(lambda: step(tokens), dataclasses.replace(p, **FLOOR_TIMING), ctx)[0], None


def _free(ctx: runtime.Context) -> None:
    import torch

    gc.collect()
    if ctx.is_gpu:
        torch.cuda.synchronize(ctx.device)
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------------- step


def _weights(model):
    import torch

    return torch.cat([t.detach().reshape(-1) for t in model.parameters()])


def _variant(variant: str, model, optimizer, warmup_batches):
    from nvtutorial.chapters.ch11_overhead.lessons import overhead as lesson

    if variant == "graph":
        return lesson.graphed_step(model, optimizer, warmup_batches)
    if variant == "compiled":
        return lesson.compiled_step(model, optimizer)
    return lesson.eager_step(model, optimizer)


def one_width(ctx: runtime.Context, p: Params, width: int, batch: int, variants: tuple[str, ...]) -> list[VariantRun]:
    """The step ``variants`` ways at ``width``, each from the seeded weights on the same batches: checked against
    the eager step, then its sides measured, then timed."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import warm_up
    from nvtutorial.chapters.ch11_overhead.lessons.overhead import build

    cfg = _config(p, width)
    batches = [_tokens(p, cfg, batch, s, ctx.device) for s in range(p.check_steps)]
    runs: list[VariantRun] = []
    reference: tuple[list[float], Any] | None = None
    for variant in variants:
        ctx.progress(len(runs), len(variants), desc=f"width {width}: {variant}")
        model, optimizer = build(cfg, ctx.device, p.seed, capturable=variant == "graph")
        first = p.warmup if variant == "graph" else 0  # a graph's warm-up steps train, then it replays
        step = _variant(variant, model, optimizer, batches[: p.warmup])
        compile_s = None
        losses = []
        for s in range(first, p.check_steps):
            t0 = time.perf_counter()
            losses.append(float(step(batches[s]).item()))  # read before the next step overwrites it
            if variant == "compiled" and s == 0:
                compile_s = time.perf_counter() - t0
        if variant == "compiled":
            warm_up(ctx.device)  # tens of seconds of compiling on the CPU: the idle GPU may have lowered its clock
        weights = _weights(model)
        if reference is None:
            reference = (losses, weights)
        ref_losses, ref_weights = reference[0][-len(losses) :], reference[1]
        loss_diff = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses, strict=True))
        weight_diff = float((weights - ref_weights).norm() / ref_weights.norm())
        tokens = batches[0]
        gc.collect()  # each way starts its timing from the same state as the compiled floor (review RR15-3)
        two_sides = sides(variant, lambda step=step, tokens=tokens: step(tokens), ctx, width, batch)
        reps, clock = _repeats(lambda step=step, tokens=tokens: step(tokens), p, ctx)
        runs.append(
            VariantRun(
                variant=variant,
                width=width,
                batch=batch,
                seconds=statistics.median(reps),
                repeats=reps,
                sides=two_sides,
                losses=tuple(losses),
                loss_rel_diff=loss_diff,
                weight_rel_diff=weight_diff,
                compile_s=compile_s,
                sm_clock_mhz=clock,
            )
        )
        del model, optimizer, step, weights
        _free(ctx)
    return runs


def steps(ctx: runtime.Context, p: Params) -> StepRank:
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import warm_up

    if not ctx.is_gpu:
        raise RuntimeError(
            "part=step needs a GPU: a CUDA graph replays CUDA kernels (on the CPU, notebook 11 shows the committed "
            "one-GPU run instead)"
        )
    # Inductor suggests TF32 for fp32 matrix multiplies; the lesson keeps fp32, so every variant computes the same
    warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
    warm_up(ctx.device)
    runs = []
    for width, batch in zip(p.widths, p.batches, strict=True):
        compiled = ("compiled",) if width in p.compile_widths else ()  # a cold compile: tens of seconds each
        runs += one_width(ctx, p, width, batch, ("eager", "graph", *compiled))
    return StepRank(device=_device_name(ctx), runs=tuple(runs))


# --------------------------------------------------------------------------------------------------- allreduce


def allreduce_points(ctx: runtime.Context, p: Params) -> tuple[AllReducePoint, ...]:
    """The all-reduce at each size on every rank; each time the slowest rank's."""
    import torch
    import torch.distributed as dist

    from nvtutorial.chapters.ch11_overhead.lessons.overhead import all_reduce_costs

    points = []
    for nbytes in p.allreduce_bytes:
        runs = [all_reduce_costs(nbytes, p.allreduce_calls, ctx.device) for _ in range(3)]  # the median of three
        costs = {k: statistics.median(-1.0 if (v := r[k]) is None else v for r in runs) for k in runs[0]}
        values = [costs["eager"], costs["waited"], costs["graph"]]
        slowest = torch.tensor(values, dtype=torch.float64, device=ctx.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        eager, waited, graph = slowest.tolist()
        points.append(AllReducePoint(nbytes=nbytes, eager=eager, waited=waited, graph=graph if graph >= 0 else None))
    return tuple(points)


def allreduce(ctx: runtime.Context, p: Params) -> AllReduceRank:
    return AllReduceRank(rank=ctx.rank, world=ctx.world_size, device=_device_name(ctx), points=allreduce_points(ctx, p))


def run(ctx: runtime.Context, p: Params) -> CalibrateRank | StepRank | AllReduceRank:
    if p.part == "step":
        return steps(ctx, p)
    if p.part == "allreduce":
        return allreduce(ctx, p)
    return calibrate(ctx, p)


if __name__ == "__main__":
    runtime.main(run, Params)
