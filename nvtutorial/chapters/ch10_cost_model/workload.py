"""costmodel: calibrate notebook 10's cost model on this machine, and run what its problems, pipeline and capstone ask.

Used in notebook 10, one ``part`` per run (``schema.Params``):

- ``calibrate``: each rank times square matrix multiplies (bf16 and fp32 on a GPU, fp32 on the CPU) and buffer
  copies on its own device, from sizes that only pay the floor of a call to sizes at the roofs; the floor of Adam's
  step (the model's tensors shrunk to one element each) and of a training step (the model's blocks and heads at a
  tiny width); with two ranks or more all ranks time all-reduces, all-gathers and reduce-scatters over a size
  sweep (each repeat its slowest rank's time). The code that measures is the lesson ``lessons/calibrate.py``.
- ``problems``: the quantities the worked problems ask for, measured the same way: a linear layer of the
  transformer, a decode-like skinny one, Adam's step over the transformer's parameters, one training step of the
  transformer on one device; a large and a small all-reduce, one block's all-gather, and the bytes one step of
  ZeRO-3 and of DDP issue (notebook 08's rungs, each collective recorded as it is called).
- ``pipeline``: the transformer in one stage per rank with ``lessons/pipeline.py``, for each schedule: the losses
  and step-0 gradients against one process, the bytes each stage holds, and a timeline of every micro-batch's
  forward and backward pass on every stage over the timed steps.
- ``capstone``: the one-process reference, then each strategy asked for (a rung of notebook 08, or a pipeline)
  within the memory budget (on a GPU enforced with ``torch.cuda.set_per_process_memory_fraction``): losses,
  gradients, step times, bytes held and sent; a strategy that runs out of memory is a result, not a lost run.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch10_cost_model.workload --set part=calibrate
    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch10_cost_model.workload \\
        --set part=pipeline --set layers=4
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from nvtutorial import runtime
from nvtutorial.chapters.ch10_cost_model.schema import (
    DEVICE_PROBLEMS,
    LADDER_STRATEGIES,
    LINK_PROBLEMS,
    CalibrationRank,
    CapstoneRank,
    CollectivePoint,
    CopyPoint,
    Event,
    Floor,
    Held,
    MatmulPoint,
    Measured,
    Params,
    PipelineRank,
    ProblemsRank,
    ScheduleRun,
    StrategyRun,
)
from nvtutorial.chapters.ch10_cost_model.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.params import require
from nvtutorial.units import size_sweep

__all__ = ["Params", "run"]


def _device_name(ctx: runtime.Context) -> str:
    import torch

    return torch.cuda.get_device_name(ctx.device) if ctx.is_gpu else "CPU"


def _free(ctx: runtime.Context) -> None:
    """Collect garbage and, on a GPU, return cached memory and reset the peak (notebook 08's)."""
    from nvtutorial.chapters.ch08_ladder.workload import _free as free

    free(ctx)


_NVML: list[Any] = []
"""This process's NVML handle of its GPU, opened on the first read (:func:`sm_clock_mhz`) and left open."""


def sm_clock_mhz(ctx: runtime.Context) -> int | None:
    """This GPU's SM clock now, in MHz (NVML): recorded beside the timings, since a GPU that runs at a low clock runs
    its kernels slower. None on the CPU, and where NVML cannot say (no driver library, a GPU that does not report)."""
    if not ctx.is_gpu:
        return None
    try:
        import pynvml
        import torch

        from nvtutorial import nvml

        if not _NVML:
            pynvml.nvmlInit()
            uuid = str(getattr(torch.cuda.get_device_properties(ctx.device), "uuid", "") or "")
            _NVML.append(nvml.handle_for_uuid(pynvml, uuid, ctx.local_rank)[0])
        return int(pynvml.nvmlDeviceGetClockInfo(_NVML[0], pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - NVML's many errors all mean the same here: no clock recorded
        return None


def clock_range(clocks: Any) -> tuple[int, int] | None:
    """The lowest and highest SM clock among ``clocks`` (MHz; Nones left out), or None when none was read."""
    seen = [c for c in clocks if c is not None]
    return (min(seen), max(seen)) if seen else None


def _timed(
    ctx: runtime.Context, op: Callable[[], Any], p: Params, together: bool = False, warmup: int = 2
) -> tuple[tuple[float, ...], dict[str, Any]]:
    """``p.repeats`` repeats of ``op`` (seconds per call), each of as many calls as last about ``p.target_s``
    (``lessons/calibrate.py``'s ``calls_per_repeat``: the median of three probes decides; at most ``p.iters``): a
    µs-scale call is timed over thousands of calls, not a handful. ``together``: a collective, timed by its slowest
    rank (every rank then makes the same number of calls); otherwise each rank times its own device, the ranks
    starting together; ``warmup`` untimed calls first (none where ``op`` has just run). Beside the repeats, what the
    records keep: ``iters``, the calls per repeat, and on a GPU ``sm_clock_mhz``, the lowest and highest SM clock
    read after the repeats."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import calls_per_repeat, seconds_per_call

    iters = calls_per_repeat(op, ctx.device, p.target_s, p.iters, together, warmup)
    out, clocks = [], []
    for _ in range(p.repeats):
        if not together:
            ctx.barrier()
        out.append(seconds_per_call(op, iters, ctx.device, together, warmup=0))
        clocks.append(sm_clock_mhz(ctx))
    seen = clock_range(clocks)
    return tuple(out), {"iters": iters, **({"sm_clock_mhz": list(seen)} if seen else {})}


def _sides(ctx: runtime.Context, op: Callable[[], Any]) -> dict[str, Any]:
    """On a GPU, an eager program's two sides, measured apart right before it is timed (``lessons/calibrate.py``):
    ``host_s``, the CPU's time to issue one call onto an idle GPU, and ``gpu_s``, the GPU's own time per call
    (None, with ``gpu_why``, where the GPU's sleep never outlasted the issuing). Nothing on the CPU: no queue."""
    if not ctx.is_gpu:
        return {}
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import gpu_time, host_time

    host = host_time(op, ctx.device, repeats=3)
    gpu = gpu_time(op, ctx.device, calls=1, issue_s=host, tries=2)
    why = {} if gpu is not None else {"gpu_why": "the GPU's sleep ended before the CPU had issued the call, twice"}
    return {"host_s": host, "gpu_s": gpu, **why}


def compute_dtypes(ctx: runtime.Context) -> tuple[str, ...]:
    """The dtypes whose matrix-multiply roof is measured: bf16 (the headline) and fp32 on a GPU, fp32 on the CPU."""
    return ("bfloat16", "float32") if ctx.is_gpu else ("float32",)


# --------------------------------------------------------------------------------------------------- calibrate


def calibrate(ctx: runtime.Context, p: Params) -> CalibrationRank:
    import torch

    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import collective, copy, matmul, warm_up

    require(p.matmul_sizes == tuple(sorted(p.matmul_sizes)), f"matmul_sizes={p.matmul_sizes}: from small to large")
    warm_up(ctx.device)
    matmuls, clocks = [], []
    dtypes = compute_dtypes(ctx)
    for dtype in dtypes:
        for n in p.matmul_sizes:
            ctx.progress(len(matmuls), len(p.matmul_sizes) * len(dtypes), desc=f"matmul {dtype} {n}")
            reps, seen = _timed(ctx, matmul(n, getattr(torch, dtype), ctx.device), p)
            clocks += seen.get("sm_clock_mhz", [])
            seconds = statistics.median(reps)
            clock = clock_range(seen.get("sm_clock_mhz", ()))
            matmuls.append(
                MatmulPoint(n=n, dtype=dtype, seconds=seconds, flops_per_s=2 * n**3 / seconds, sm_clock_mhz=clock)
            )
    copies = []
    for nbytes in p.copy_bytes:
        reps, seen = _timed(ctx, copy(nbytes, ctx.device), p)
        clocks += seen.get("sm_clock_mhz", [])
        seconds = statistics.median(reps)
        copies.append(CopyPoint(nbytes=nbytes, seconds=seconds, bytes_per_s=2 * nbytes / seconds))
    floors = [program_floor(ctx, p, program) for program in p.floors]
    clocks += [c for f in floors for c in f.details.get("sm_clock_mhz", [])]
    _free(ctx)
    points = []
    if ctx.world_size > 1:
        sizes = size_sweep(p.min_bytes, p.max_bytes, p.factor)
        for k, kind in enumerate(p.collectives):
            collective(kind, sizes[-1], ctx.device)[0]()  # warm-up at the largest size first, as nccl-tests does
            for i, nbytes in enumerate(sizes):
                ctx.progress(k * len(sizes) + i, len(sizes) * len(p.collectives), desc=f"{kind} sweep")
                op, size = collective(kind, nbytes, ctx.device)
                reps, _ = _timed(ctx, op, p, together=True)
                points.append(CollectivePoint(kind=kind, size=size, seconds=statistics.median(reps), repeats=reps))
    return CalibrationRank(
        rank=ctx.rank,
        world=ctx.world_size,
        device=_device_name(ctx),
        matmul=tuple(matmuls),
        copy=tuple(copies),
        collectives=tuple(points),
        floors=tuple(floors),
        sm_clock_mhz=clock_range(clocks),
        l2_bytes=getattr(torch.cuda.get_device_properties(ctx.device), "L2_cache_size", None) if ctx.is_gpu else None,
    )


def program_floor(ctx: runtime.Context, p: Params, program: str) -> Floor:
    """The floor of ``program`` (``adam_step`` or ``train_step``) with the model's sizes ``p``: the same calls with
    almost no work (``lessons/calibrate.py``)."""
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import adam_step, tiny, training_step
    from nvtutorial.models import transformer

    cfg = _config(p)
    if program == "adam_step":
        shapes = [(1,)] * len(transformer.parameter_shapes(cfg))
        op, details = adam_step(shapes, ctx.device), {"tensors": len(shapes)}
    else:
        small = tiny(cfg)
        op = training_step(small, 1, ctx.device, p.seed)
        details = {"layers": small.layers, "heads": small.heads, "dim": small.dim, "seq_len": small.seq_len, "batch": 1}
    reps, seen = _timed(ctx, op, p)
    return Floor(program=program, seconds=statistics.median(reps), repeats=reps, details={**details, **seen})


# --------------------------------------------------------------------------------------------------- problems


def _config(p: Params):  # -> models.transformer.Config
    from nvtutorial.models import transformer

    return transformer.Config(**p.config())


def _matmul(ctx: runtime.Context, p: Params, key: str, tokens: int, d_in: int, d_out: int, dtype: str) -> Measured:
    import torch

    x = torch.randn(tokens, d_in, device=ctx.device).to(getattr(torch, dtype))
    w = torch.randn(d_in, d_out, device=ctx.device).to(getattr(torch, dtype))
    y = torch.empty(tokens, d_out, device=ctx.device, dtype=getattr(torch, dtype))
    reps, seen = _timed(ctx, lambda: torch.mm(x, w, out=y), p)
    return Measured(
        key,
        statistics.median(reps),
        "s",
        reps,
        {"tokens": tokens, "d_in": d_in, "d_out": d_out, "dtype": dtype, "dtype_bytes": x.element_size(), **seen},
    )


def _floor_here(ctx: runtime.Context, p: Params, program: str) -> dict[str, Any]:
    """On a GPU, ``program``'s floor measured again in this launch, right after the program (review RR9-2: the
    calibration's floor came from another process, minutes before, on a host whose speed can move between launches)."""
    return {"floor_here_s": program_floor(ctx, p, program).seconds} if ctx.is_gpu else {}


def _adam(ctx: runtime.Context, p: Params) -> Measured:
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import adam_step
    from nvtutorial.models import transformer

    shapes = [shape for _, shape in transformer.parameter_shapes(_config(p))]
    op = adam_step(shapes, ctx.device)  # after the first step, which creates the two moments
    sides = _sides(ctx, op)
    reps, seen = _timed(ctx, op, p, warmup=0 if sides else 2)  # the sides' calls warmed it up
    n = sum(math.prod(shape) for shape in shapes)
    details = {"n_params": n, "tensors": len(shapes), **seen, **sides, **_floor_here(ctx, p, "adam_step")}
    return Measured("adam_step", statistics.median(reps), "s", reps, details)


def _train_step(ctx: runtime.Context, p: Params) -> Measured:
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import training_step
    from nvtutorial.models import transformer

    cfg = _config(p)
    op = training_step(cfg, p.global_batch, ctx.device, p.seed)  # after Adam's first step
    sides = _sides(ctx, op)
    reps, seen = _timed(ctx, op, p, warmup=0 if sides else 2)  # the sides' calls warmed it up
    n = sum(math.prod(shape) for _, shape in transformer.parameter_shapes(cfg))
    details = {
        "n_params": n,
        "tokens": p.global_batch * p.seq_len,
        **seen,
        **sides,
        **_floor_here(ctx, p, "train_step"),
    }
    return Measured("train_step", statistics.median(reps), "s", reps, details)


def _collective(ctx: runtime.Context, p: Params, key: str, kind: str, nbytes: int) -> Measured:
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import collective

    op, size = collective(kind, nbytes, ctx.device)
    reps, seen = _timed(ctx, op, p, together=True)
    return Measured(key, statistics.median(reps), "s", reps, {"kind": kind, "size": size, **seen})


def block_bytes(p: Params) -> int:
    """fp32 bytes of one block's parameters: what FSDP2 all-gathers for it."""
    from nvtutorial.models import transformer

    return 4 * sum(math.prod(s) for n, s in transformer.parameter_shapes(_config(p)) if n.startswith("blocks.0."))


def _zero3_bytes(ctx: runtime.Context, p: Params) -> Measured:
    from nvtutorial.chapters.ch08_ladder.lessons.rungs import RUNGS
    from nvtutorial.chapters.ch08_ladder.lessons.train import local_batch, train_step
    from nvtutorial.chapters.ch08_ladder.workload import collective_counter, summarise
    from nvtutorial.models import transformer

    cfg = _config(p)
    sent, kinds = {}, {}
    for rung in ("ddp", "fsdp_zero3"):
        model, optimizer = RUNGS[rung](transformer.build(cfg, seed=p.seed, device=ctx.device), ctx.device)
        tokens = transformer.batch(0, p.global_batch, cfg, seed=p.seed).to(ctx.device)
        for _ in range(2):  # DDP rebuilds its buckets after the first step and broadcasts them in the second
            train_step(model, optimizer, local_batch(tokens, rung))
        counter = collective_counter()
        with counter:
            train_step(model, optimizer, local_batch(tokens, rung))
        ctx.sync()
        sent[rung] = sum(r["sent"] for r in counter.records)
        kinds[rung] = summarise(counter.records)
        model = optimizer = None
        _free(ctx)
    return Measured(
        "zero3_bytes",
        sent["fsdp_zero3"] / sent["ddp"],
        "×",
        (),
        {"ddp_sent": sent["ddp"], "zero3_sent": sent["fsdp_zero3"], "collectives": kinds},
    )


def problems(ctx: runtime.Context, p: Params) -> ProblemsRank:
    from nvtutorial.chapters.ch10_cost_model.lessons.calibrate import warm_up

    wanted = [k for k in DEVICE_PROBLEMS + LINK_PROBLEMS if k in p.problems]
    link = [k for k in wanted if k in LINK_PROBLEMS]
    require(not link or ctx.world_size > 1, f"the problems {', '.join(link)} need two ranks or more (this run has one)")
    dtype = compute_dtypes(ctx)[0]
    warm_up(ctx.device)
    out = []
    for i, key in enumerate(wanted):
        ctx.progress(i, len(wanted), desc=key)
        if key == "mlp_matmul":
            out.append(_matmul(ctx, p, key, p.global_batch * p.seq_len, p.dim, p.mlp_ratio * p.dim, dtype))
        elif key == "decode_matmul":
            out.append(_matmul(ctx, p, key, p.decode_tokens, p.decode_dim, 4 * p.decode_dim, dtype))
        elif key == "adam_step":
            out.append(_adam(ctx, p))
        elif key == "train_step":
            out.append(_train_step(ctx, p))
        elif key == "allreduce":
            out.append(_collective(ctx, p, key, "all_reduce", p.allreduce_bytes))
        elif key == "allreduce_small":
            out.append(_collective(ctx, p, key, "all_reduce", p.small_bytes))
        elif key == "fsdp_allgather":
            out.append(_collective(ctx, p, key, "all_gather", block_bytes(p)))
        elif key == "zero3_bytes":
            out.append(_zero3_bytes(ctx, p))
        _free(ctx)
    ctx.progress(len(wanted), len(wanted), desc="problems")
    return ProblemsRank(
        rank=ctx.rank, world=ctx.world_size, device=_device_name(ctx), compute_dtype=dtype, measured=tuple(out)
    )


# --------------------------------------------------------------------------------------------------- pipeline


class _Clock:
    """Marks on one timeline that every rank shares, in seconds from the step's start. On a GPU, CUDA events (nothing
    waits for them), each rank's origin recorded on its stream right after an all-reduce, which ends on both GPUs
    together (to a few µs). On the CPU, the host clock: ``time.perf_counter`` is ``CLOCK_MONOTONIC``, one clock for
    every process of a host, so the marks stay absolute and the origin is the earliest rank's (:meth:`align`)."""

    def __init__(self, ctx: runtime.Context) -> None:
        self.ctx = ctx
        self.marks: list[Any] = []
        self.origin: Any = None
        self.base = 0.0

    def now(self) -> int:
        if self.ctx.is_gpu:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())
        return len(self.marks) - 1

    def start(self) -> None:
        import torch
        import torch.distributed as dist

        self.marks = []
        if self.ctx.is_gpu:  # the origin event follows the all-reduce on the stream: the same moment on every GPU
            dist.all_reduce(torch.zeros(1, device=self.ctx.device))
        self.origin = self.now()

    def align(self) -> None:
        """On the CPU, every rank's origin becomes the earliest rank's (an all-reduce of the start marks)."""
        if not self.ctx.is_gpu:
            import torch
            import torch.distributed as dist

            t = torch.tensor([self.marks[self.origin]], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            self.base = t.item()

    def seconds(self, index: int) -> float:
        origin, mark = self.marks[self.origin], self.marks[index]
        if self.ctx.is_gpu:
            mark.synchronize()
            return origin.elapsed_time(mark) / 1e3
        return mark - self.base


def instrument(stage: Any, clock: _Clock, record: list[tuple[str, int, int, int]], runner: Any = None) -> None:
    """Wrap the pipeline stage's forward and backward of one micro-batch so that each appends
    ``(kind, micro-batch, start mark, end mark)`` to ``record``; with the schedule ``runner``, the last stage's loss
    of a micro-batch, computed by the schedule after its forward pass, counts in that forward pass (busy, not idle)."""
    forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

    def forward_one_chunk(fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        start = clock.now()
        out = forward(fwd_chunk_id, *args, **kwargs)
        record.append(("F", fwd_chunk_id, start, clock.now()))
        return out

    def backward_one_chunk(bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        start = clock.now()
        out = backward(bwd_chunk_id, *args, **kwargs)
        record.append(("B", bwd_chunk_id, start, clock.now()))
        return out

    stage.forward_one_chunk, stage.backward_one_chunk = forward_one_chunk, backward_one_chunk
    loss = getattr(runner, "_maybe_compute_loss", None)  # torch 2.4 to 2.15: the schedules compute the loss here
    if loss is None:
        return

    def maybe_compute_loss(stage_: Any, output: Any, target_mbs: Any, mb_index: int, *args: Any, **kwargs: Any) -> Any:
        out = loss(stage_, output, target_mbs, mb_index, *args, **kwargs)
        for i in range(len(record) - 1, -1, -1) if stage_.is_last else ():  # its forward pass ends after its loss
            if record[i][:2] == ("F", mb_index):
                record[i] = (*record[i][:3], clock.now())
                break
        return out

    runner._maybe_compute_loss = maybe_compute_loss


def _held(module: Any, optimizer: Any) -> Held:
    from nvtutorial.chapters.ch08_ladder.workload import held_bytes

    h = held_bytes(module, optimizer)
    return Held(params=h["params"], grads=h["grads"], optimizer=h["optimizer"])


def _slowest(ctx: runtime.Context, seconds: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _timed_steps(
    ctx: runtime.Context, batches: Iterable[Any], stage: Any, runner: Any, optimizer: Any
) -> tuple[list[tuple[Event, ...]], list[float]]:
    """One timed training step per batch (made as it comes), each stage's passes recorded on the shared clock, the
    peak memory counted from the first: ``(timelines, step_s)``, a timeline per step and each step's time on the
    slowest rank."""
    import torch

    from nvtutorial.chapters.ch10_cost_model.lessons.pipeline import train_step

    clock, record = _Clock(ctx), []
    instrument(stage, clock, record, runner)
    if ctx.is_gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    timelines, step_s = [], []
    for tokens in batches:
        ctx.barrier()
        record.clear()
        clock.start()
        train_step(runner, stage, optimizer, tokens)
        end = clock.now()
        ctx.sync()
        clock.align()
        timelines.append(tuple(Event(kind, mb, clock.seconds(a), clock.seconds(b)) for kind, mb, a, b in record))
        step_s.append(_slowest(ctx, clock.seconds(end)))
    return timelines, step_s


def run_schedule(
    ctx: runtime.Context,
    p: Params,
    schedule: str,
    microbatches: int,
    reference: list[float],
    reference_grads: dict[str, Any],
) -> ScheduleRun:
    """One schedule from the seeded model: step-0 gradients, ``p.steps`` steps' losses, bytes held, ``p.timed``
    timed steps with a timeline each."""
    import torch

    from nvtutorial.chapters.ch08_ladder.workload import gradient_check
    from nvtutorial.chapters.ch10_cost_model.lessons.pipeline import (
        forward_backward,
        global_loss,
        model_name,
        pipeline,
        train_step,
    )
    from nvtutorial.models import transformer

    cfg = _config(p)
    require(
        p.layers >= ctx.world_size, f"layers={p.layers}: a pipeline of {ctx.world_size} stages needs a block per stage"
    )
    require(
        p.global_batch % microbatches == 0,
        f"global_batch={p.global_batch} must be a multiple of microbatches={microbatches}",
    )
    _free(ctx)
    model = transformer.build(cfg, seed=p.seed, device=ctx.device)
    module, stage, runner, optimizer = pipeline(model, ctx.device, schedule, microbatches)
    del model

    def batch(step: int) -> torch.Tensor:
        return transformer.batch(step, p.global_batch, cfg, seed=p.seed).to(ctx.device)

    # step 0's gradients, before any update, against one process's (this stage's parameters only)
    optimizer.zero_grad(set_to_none=True)
    forward_backward(runner, stage, batch(0))
    named = [(model_name(module, n), q) for n, q in module.named_parameters()]
    mine = {n: reference_grads[n] for n, _ in named}

    class _Named:  # what gradient_check reads: named_parameters() under the whole model's names
        def named_parameters(self):
            return iter(named)

    grads = gradient_check(_Named(), mine, ctx.device)
    optimizer.zero_grad(set_to_none=True)
    losses = [global_loss(train_step(runner, stage, optimizer, batch(s)), ctx.device) for s in range(p.steps)]
    held = _held(module, optimizer)

    timelines, step_s = _timed_steps(ctx, (batch(p.steps + t) for t in range(p.timed)), stage, runner, optimizer)
    peak = torch.cuda.max_memory_allocated(ctx.device) if ctx.is_gpu else None
    blocks = (module.first, module.first + len(module.blocks))
    del module, stage, runner, optimizer
    _free(ctx)
    return ScheduleRun(
        schedule=schedule,
        microbatches=microbatches,
        stage=ctx.rank,
        stages=ctx.world_size,
        blocks=blocks,
        losses=tuple(losses),
        reference=tuple(reference),
        grad_max_rel_diff=grads["max_rel_diff"],
        grad_worst=str(grads["worst"]),
        timelines=tuple(timelines),
        step_s=tuple(step_s),
        held=held,
        peak_allocated=peak,
    )


def _reference(ctx: runtime.Context, p: Params) -> tuple[list[float], dict[str, Any]]:
    """The one-process reference: its losses over ``p.steps`` steps and its step-0 gradients (on the CPU)."""
    from nvtutorial.chapters.ch08_ladder.lessons.train import train
    from nvtutorial.chapters.ch08_ladder.workload import reference_gradients
    from nvtutorial.models import transformer

    cfg = _config(p)
    losses = train("single", cfg, p.steps, p.global_batch, ctx.device, seed=p.seed)
    grads = reference_gradients(cfg, transformer.batch(0, p.global_batch, cfg, seed=p.seed).to(ctx.device), p.seed)
    _free(ctx)
    return losses, grads


def pipeline_part(ctx: runtime.Context, p: Params) -> PipelineRank:
    require(ctx.world_size > 1, "a pipeline needs two ranks or more (one stage each)")
    ctx.progress(0, len(p.schedules) + 1, desc="one-process reference")
    reference, grads = _reference(ctx, p)
    runs = []
    for i, schedule in enumerate(p.schedules):
        ctx.progress(i + 1, len(p.schedules) + 1, desc=schedule)
        runs.append(run_schedule(ctx, p, schedule, p.microbatches, reference, grads))
    ctx.progress(len(p.schedules) + 1, len(p.schedules) + 1, desc="pipeline")
    return PipelineRank(rank=ctx.rank, world=ctx.world_size, device=_device_name(ctx), runs=tuple(runs))


# --------------------------------------------------------------------------------------------------- capstone


def _ladder_strategy(
    ctx: runtime.Context, p: Params, rung: str, reference: list[float], grads: dict[str, Any]
) -> StrategyRun:
    from nvtutorial.chapters.ch08_ladder import workload as ladder

    base = ladder.Params(
        global_batch=p.global_batch,
        rungs=(rung,),
        steps=p.steps,
        warmup=1,
        timed=1,
        repeats=p.timed,
        reference=False,
        profile_steps=0,
        seed=p.seed,
    )
    lp = dataclasses.replace(base, **p.config())  # the transformer's sizes: this workload's
    g = ladder.run_rung(ctx, lp, rung, grads)
    return StrategyRun(
        strategy=rung,
        ok=True,
        error=None,
        losses=tuple(g["losses"]),
        reference=tuple(reference),
        grad_max_rel_diff=g["gradients"]["max_rel_diff"],
        step_s=tuple(g["step_s"]),
        sent_per_step=float(g["sent_per_step"]),
        held=Held(**{k: g["held"][k] for k in ("params", "grads", "optimizer")}),
        peak_allocated=g.get("peak_allocated"),
    )


def _pipeline_strategy(
    ctx: runtime.Context, p: Params, strategy: str, reference: list[float], grads: dict[str, Any]
) -> StrategyRun:
    schedule = strategy.removeprefix("pipeline_")
    r = run_schedule(ctx, p, schedule, p.microbatches, reference, grads)
    # point to point: each boundary carries the activations forward and their gradients back (fp32)
    activations = 4 * p.global_batch * p.seq_len * p.dim
    sends = (ctx.rank < ctx.world_size - 1) + (ctx.rank > 0)
    return StrategyRun(
        strategy=strategy,
        ok=True,
        error=None,
        losses=r.losses,
        reference=r.reference,
        grad_max_rel_diff=r.grad_max_rel_diff,
        step_s=r.step_s,
        sent_per_step=float(sends * activations),
        held=r.held,
        peak_allocated=r.peak_allocated,
    )


def capstone(ctx: runtime.Context, p: Params) -> CapstoneRank:
    import torch

    ctx.progress(0, len(p.strategies) + 1, desc="one-process reference")
    reference, grads = _reference(ctx, p)  # before the budget: one process needs more than a rank may use
    if ctx.is_gpu and p.budget_bytes:
        total = torch.cuda.get_device_properties(ctx.device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, p.budget_bytes / total), ctx.device)
    runs = []
    for i, strategy in enumerate(p.strategies):
        ctx.progress(i + 1, len(p.strategies) + 1, desc=strategy)
        try:
            if strategy in LADDER_STRATEGIES:
                runs.append(_ladder_strategy(ctx, p, strategy, reference, grads))
            else:
                runs.append(_pipeline_strategy(ctx, p, strategy, reference, grads))
        except torch.OutOfMemoryError as exc:  # did not fit the budget: a result
            runs.append(
                StrategyRun(
                    strategy=strategy,
                    ok=False,
                    error=f"OutOfMemoryError: {str(exc).splitlines()[0]}",
                    losses=(),
                    reference=tuple(reference),
                    grad_max_rel_diff=None,
                    step_s=(),
                    sent_per_step=0.0,
                    held=None,
                )
            )
            _free(ctx)
    ctx.progress(len(p.strategies) + 1, len(p.strategies) + 1, desc="capstone")
    return CapstoneRank(
        rank=ctx.rank, world=ctx.world_size, device=_device_name(ctx), budget_bytes=p.budget_bytes, runs=tuple(runs)
    )


# ---------------------------------------------------------------------------------------------------


PARTS = {"calibrate": calibrate, "problems": problems, "pipeline": pipeline_part, "capstone": capstone}


def run(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    return dataclasses.asdict(PARTS[p.part](ctx, p))


if __name__ == "__main__":
    runtime.main(run, Params)
