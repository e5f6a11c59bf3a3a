"""profile_step: where the time of a DDP training step goes (compute, communication, overlap).

Used in notebook 05. Runs the course UNet's DDP step (:func:`nvtutorial.lessons.training.train_step`)
on a batch that already sits on the device, so the input pipeline is out of the picture, and:

1. times steps without the profiler (median), then the same steps under ``torch.profiler``:
   the difference is the profiler's overhead;
2. writes each rank's trace to ``RUN_DIR/trace_rank{R}.json`` (open it in
   https://ui.perfetto.dev) and computes the split of a step from it
   (:func:`nvtutorial.tracesplit.split`): compute, communication, hidden, exposed, idle;
3. marks ``forward``, ``backward`` and ``optimizer`` inside each step, as NVTX ranges (what
   Nsight Systems shows) and ``record_function`` ranges (what torch.profiler shows), set by
   hooks on the model and the optimizer, so the training step itself is not edited;
4. optionally sweeps the per-GPU batch size and computes the communication share at each
   (claim C16), runs an all-reduce probe whose NVLink traffic the parent's telemetry can see,
   and times the same step without DDP (the 1-GPU step: no gradient exchange at all);
5. reports memory per rank: ``torch.cuda.memory_stats`` and peaks, and a memory snapshot
   (``torch.cuda.memory._record_memory_history`` / ``_dump_snapshot``) where it works.

Every rank returns its own numbers, and wall-clock times of its phases and steps so that
telemetry sampled by the parent can be drawn against them.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.profile_step --set model=small
    NCCL_P2P_DISABLE=1 torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.profile_step
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import statistics
import time
from typing import Any, Literal

from nvtutorial import runtime
from nvtutorial.params import require


@dataclasses.dataclass(frozen=True)
class Params:
    model: Literal["tiny", "small", "full"] = "small"
    batch_size: int = 8  # per GPU
    image_size: int = 64
    amp: Literal["fp32", "fp16", "bf16"] = "fp32"
    channels_last: bool = False
    bucket_cap_mb: float = 25.0  # DDP's gradient bucket size (its default)
    warmup: int = 3
    timed_steps: int = 10  # steps timed without the profiler
    steps: int = 4  # steps under the profiler
    profiler: bool = True  # False when the run goes under Nsight Systems (both use CUPTI)
    sweep: tuple[int, ...] = ()  # per-GPU batch sizes for the communication-share sweep
    sweep_steps: int = 3
    local_baseline: bool = True  # also time the step without DDP (the 1-GPU step)
    probe_mb: int = 0  # all-reduce probe (MiB) for NVLink telemetry; 0 = none
    probe_s: float = 1.0
    memory_snapshot: bool = True  # GPU only
    pause_s: float = 0.0  # idle gap between phases, so telemetry shows where one ends
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, f"batch_size={self.batch_size} must be at least 1")
        require(self.warmup >= 1, f"warmup={self.warmup} must be at least 1 (the first steps are slow)")
        require(self.timed_steps >= 1 and self.steps >= 1, "timed_steps and steps must be at least 1")
        require(all(b >= 1 for b in self.sweep), f"sweep={self.sweep}: batch sizes must be at least 1")
        require(self.sweep_steps >= 1, f"sweep_steps={self.sweep_steps} must be at least 1")
        require(self.probe_mb >= 0 and self.probe_s > 0, "probe_mb must be >= 0 and probe_s > 0")
        require(self.pause_s >= 0, f"pause_s={self.pause_s} must be >= 0")
        require(self.bucket_cap_mb > 0, f"bucket_cap_mb={self.bucket_cap_mb} must be positive")


class PhaseMarks:
    """NVTX and ``record_function`` ranges ``forward``, ``backward``, ``optimizer`` set by hooks.

    ``forward`` runs from the model's forward pre-hook to its forward hook; ``backward`` from
    there to the optimizer's step pre-hook (so it includes the loss); ``optimizer`` until the
    step post-hook. Nothing in the training step changes.
    """

    def __init__(self, model: Any, optimizer: Any, nvtx: bool) -> None:
        self.nvtx = nvtx
        self.current: Any = None
        self.handles = [
            model.register_forward_pre_hook(lambda m, a: self._open("forward")),
            model.register_forward_hook(lambda m, a, o: self._open("backward")),
            optimizer.register_step_pre_hook(lambda o, a, k: self._open("optimizer")),
            optimizer.register_step_post_hook(lambda o, a, k: self.close()),
        ]

    def _open(self, name: str) -> None:
        import torch

        self.close()
        rf = torch.profiler.record_function(name)
        rf.__enter__()
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        self.current = rf

    def close(self) -> None:
        import torch

        if self.current is not None:
            self.current.__exit__(None, None, None)
            if self.nvtx:
                torch.cuda.nvtx.range_pop()
            self.current = None

    def remove(self) -> None:
        self.close()
        for h in self.handles:
            h.remove()


def _median_ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def memory_report(ctx: runtime.Context) -> dict[str, Any]:
    """This rank's memory: ``torch.cuda.memory_stats`` essentials on a GPU, process RSS on a CPU."""
    if ctx.is_gpu:
        import torch

        stats = torch.cuda.memory_stats(ctx.device)
        keep = ["allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "active_bytes.all.peak", "num_alloc_retries", "num_ooms",
                "num_device_alloc", "num_device_free"]
        out: dict[str, Any] = {k: int(stats.get(k, 0)) for k in keep}
        out["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        out["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved(ctx.device) / 2**20
        out["kind"] = "torch.cuda.memory_stats"
        return out
    import psutil

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    return {"kind": "process RSS (CPU run: no device memory)", "rss_mib": psutil.Process().memory_info().rss / 2**20,
            "rss_peak_mib": peak_kib / 1024}


def _snapshot(ctx: runtime.Context, steps: int, step) -> dict[str, Any]:
    """Record the allocator's history over ``steps`` steps and dump a snapshot (GPU only)."""
    if not ctx.is_gpu:
        return {"written": False, "reason": "the memory snapshot records the CUDA caching allocator: needs a GPU"}
    import torch

    path = ctx.run_dir / f"memory_snapshot_rank{ctx.rank}.pickle"
    try:
        torch.cuda.memory._record_memory_history(max_entries=20000)
        for _ in range(steps):
            step()
        torch.cuda.synchronize(ctx.device)
        torch.cuda.memory._dump_snapshot(str(path))
    except Exception as exc:  # a private API: report rather than fail the run
        return {"written": False, "reason": f"{type(exc).__name__}: {exc}"}
    finally:
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
    return {"written": True, "path": str(path), "bytes": path.stat().st_size,
            "how_to_view": "drag the file onto https://pytorch.org/memory_viz"}


def _profile(ctx: runtime.Context, step, n: int, path, timed) -> tuple[list[float], Any]:
    """Run ``n`` steps under torch.profiler, each in a ``train_step`` range (timed like the
    unprofiled steps, by ``timed``); export the trace and compute its split."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from nvtutorial import tracesplit

    def marked() -> None:
        with record_function(tracesplit.STEP_ANNOTATION):
            step()
            ctx.sync()  # inside the range: the step's GPU work ends within it

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.is_gpu else [])
    with profile(activities=activities) as prof:
        times = [timed(marked) for _ in range(n)]
    prof.export_chrome_trace(str(path))
    return times, tracesplit.split(path)


def run(ctx: runtime.Context, p: Params) -> dict:
    import torch
    import torch.distributed as dist

    from nvtutorial import tracesplit
    from nvtutorial.lessons import training
    from nvtutorial.models import segdata

    phases: list[dict[str, Any]] = []

    def phase(name: str, start: float) -> None:
        phases.append({"name": name, "start": start, "end": time.time()})

    def pause() -> None:
        ctx.barrier()
        if p.pause_s:
            time.sleep(p.pause_s)

    t_setup = time.time()
    batches = sorted({p.batch_size, *p.sweep})
    s = training.setup(ctx, model=p.model, batch_size=p.batch_size, image_size=p.image_size,
                       samples=max(batches) * ctx.world_size, val_samples=ctx.world_size, amp=p.amp,
                       channels_last=p.channels_last, seed=p.seed, ddp_kwargs={"bucket_cap_mb": p.bucket_cap_mb})

    def batch(b: int):
        # Each rank its own samples, drawn straight on the device: no input pipeline in the step.
        return segdata.render(range(ctx.rank * b, (ctx.rank + 1) * b), p.image_size, s.classes, p.seed, ctx.device)

    images, masks = batch(p.batch_size)
    marks = PhaseMarks(s.model, s.optimizer, nvtx=ctx.is_gpu)
    timed = ctx.time_calls

    def step() -> None:
        training.train_step(s, images, masks)

    total = 4 + len(p.sweep) + int(p.probe_mb > 0) + int(p.local_baseline)
    done = 0
    for _ in range(p.warmup):
        step()
    ctx.sync()
    phase("setup + warm-up", t_setup)
    done += 1
    ctx.progress(done, total, "profile_step")
    pause()

    # 1. Steps without the profiler.
    if ctx.is_gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    t0 = time.time()
    step_times, step_ends = [], []
    for _ in range(p.timed_steps):
        step_times.append(timed(step))
        step_ends.append(time.time())
    phase("timed steps", t0)
    memory = memory_report(ctx)
    done += 1
    ctx.progress(done, total, "profile_step", step_ms=_median_ms(step_times))
    pause()

    # 2. The same steps under the profiler (or only NVTX ranges, when Nsight Systems records).
    t0 = time.time()
    trace_path = ctx.run_dir / f"trace_rank{ctx.rank}.json"
    split: dict[str, Any] | None = None
    if p.profiler:
        prof_times, sp = _profile(ctx, step, p.steps, trace_path, timed)
        split = sp.to_dict()
    else:
        def nvtx_marked() -> None:  # the step range Nsight Systems splits its report by
            if ctx.is_gpu:
                torch.cuda.nvtx.range_push(tracesplit.STEP_ANNOTATION)
            step()
            ctx.sync()
            if ctx.is_gpu:
                torch.cuda.nvtx.range_pop()

        prof_times = [timed(nvtx_marked) for _ in range(p.steps)]
    phase("profiled steps" if p.profiler else "NVTX-marked steps", t0)
    done += 1
    ctx.progress(done, total, "profile_step")

    snapshot = _snapshot(ctx, 2, step) if p.memory_snapshot else {"written": False, "reason": "not asked for"}
    done += 1
    ctx.progress(done, total, "profile_step")
    pause()

    # 3. The batch-size sweep: communication share against the per-GPU batch (claim C16).
    sweep_rows = []
    for b in p.sweep:
        t0 = time.time()
        images, masks = batch(b)
        for _ in range(2):
            step()
        ctx.sync()
        plain = [timed(step) for _ in range(p.sweep_steps)]
        path = ctx.run_dir / f"sweep_b{b}_rank{ctx.rank}.json"
        if p.profiler:
            _, sp = _profile(ctx, step, p.sweep_steps, path, timed)
            row = sp.to_dict()
            row.pop("phase_ms", None)
            path.unlink(missing_ok=True)  # the main trace is kept; the sweep's would only fill the disk
        else:
            row = {}
        row.update(batch=b, global_batch=b * ctx.world_size, step_ms_unprofiled=_median_ms(plain),
                   samples_per_s=b * ctx.world_size / statistics.median(plain))
        sweep_rows.append(row)
        phase(f"sweep batch {b}", t0)
        done += 1
        ctx.progress(done, total, "profile_step", batch=b)
    images, masks = batch(p.batch_size)
    if p.sweep:
        pause()

    # 4. An all-reduce probe: a known number of bytes over the link, for the parent's telemetry.
    probe: dict[str, Any] = {}
    if p.probe_mb > 0:
        x = torch.ones(p.probe_mb * 2**20 // 4, device=ctx.device)
        dist.all_reduce(x)
        ctx.sync()
        one = timed(lambda: dist.all_reduce(x))
        n = torch.tensor([max(1, math.ceil(p.probe_s / max(one, 1e-6)))], device=ctx.device)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)  # every rank must run the same number
        count = int(n.item())
        t0 = time.time()
        probe_timer = ctx.timer(host=True)  # the host clock, the device synchronised at both ends
        with probe_timer:
            for _ in range(count):
                dist.all_reduce(x)
        seconds = probe_timer.seconds()[0]
        phase("all-reduce probe", t0)
        w = ctx.world_size
        probe = {"mib": p.probe_mb, "count": count, "seconds": seconds, "start": t0, "end": time.time(),
                 "bytes_per_rank_algorithm": count * x.numel() * 4 * 2 * (w - 1) / w,
                 "busbw_gbs": count * x.numel() * 4 * 2 * (w - 1) / w / seconds / 1e9}
        del x
        done += 1
        ctx.progress(done, total, "profile_step")
        pause()

    # 5. The step without DDP: what one GPU alone takes for the same per-GPU batch (last: the
    #    ranks' weights drift apart from here on, which does not matter for timing).
    local_ms = None
    if p.local_baseline:
        t0 = time.time()
        marks.remove()
        local = dataclasses.replace(s, model=s.module)
        for _ in range(2):
            training.train_step(local, images, masks)
        local_times = [timed(lambda: training.train_step(local, images, masks)) for _ in range(p.timed_steps)]
        local_ms = _median_ms(local_times)
        phase("1-GPU step (no DDP)", t0)
        done += 1
        ctx.progress(done, total, "profile_step")
    else:
        marks.remove()

    ddp_ms = _median_ms(step_times)
    out: dict[str, Any] = {
        "model": p.model, "batch_size": p.batch_size, "image_size": p.image_size, "amp": p.amp,
        "parameters": sum(t.numel() for t in s.module.parameters()),
        "gradient_mib": sum(t.numel() * t.element_size() for t in s.module.parameters()) / 2**20,
        "step_ms": ddp_ms,
        "step_ms_profiled": _median_ms(prof_times),
        "profiler_overhead": (_median_ms(prof_times) / ddp_ms - 1) if p.profiler else None,
        "local_step_ms": local_ms,
        "ddp_gap_ms": (ddp_ms - local_ms) if local_ms is not None else None,
        "samples_per_s": p.batch_size * ctx.world_size / (ddp_ms / 1e3),
        "split": split,
        "trace": str(trace_path) if p.profiler else None,
        "sweep": sweep_rows,
        "probe": probe,
        "memory": memory,
        "memory_snapshot": snapshot,
        "phases": phases,
        "step_ends": step_ends,
        "nccl_p2p_disable": os.environ.get("NCCL_P2P_DISABLE"),
    }
    return out


if __name__ == "__main__":
    runtime.main(run, Params)
