"""profile_step: where the time of a DDP training step goes (compute, communication, overlap).

Used in notebook 05. Runs the course UNet's DDP step (:func:`nvtutorial.training.train_step`)
on a batch that already sits on the device, so the input pipeline is out of the picture, and:

1. times steps without the profiler (median), then the same steps under ``torch.profiler``:
   the difference is the profiler's overhead;
2. writes each rank's trace to ``RUN_DIR/trace_rank{R}.json`` (open it in
   https://ui.perfetto.dev) and computes the split of a step from it
   (:func:`nvtutorial.traces.split`): compute, communication, hidden, exposed, idle;
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
from collections.abc import Mapping, Sequence
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

    from nvtutorial import traces

    def marked() -> None:
        with record_function(traces.STEP_ANNOTATION):
            step()
            ctx.sync()  # inside the range: the step's GPU work ends within it

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.is_gpu else [])
    with profile(activities=activities) as prof:
        times = [timed(marked) for _ in range(n)]
    prof.export_chrome_trace(str(path))
    return times, traces.split(path)


def run(ctx: runtime.Context, p: Params) -> dict:
    import torch
    import torch.distributed as dist

    from nvtutorial import segdata, traces, training

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
                torch.cuda.nvtx.range_push(traces.STEP_ANNOTATION)
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
        t1 = time.perf_counter()
        for _ in range(count):
            dist.all_reduce(x)
        ctx.sync()
        seconds = time.perf_counter() - t1
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


# =========================================================================== reading results (parent side)
# Used by notebook 05; none of these touch CUDA.

def params_from(sizes: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """The entries of a notebook's size dict that are parameters of this workload, plus ``overrides``."""
    names = {f.name for f in dataclasses.fields(Params)}
    out = {k: v for k, v in sizes.items() if k in names}
    out.update(overrides)
    return out


def split_frame(res: Any, path: str | None = None):  # -> pandas.DataFrame
    """The split each rank computed from its own trace, one row per rank (milliseconds per step)."""
    import pandas as pd

    rows = []
    for rank, m in enumerate(res.ranks):
        sp = dict(m.get("split") or {})
        if not sp:
            continue
        sp.pop("phase_ms", None)
        sp["rank"] = rank
        if path:
            sp["path"] = path
        rows.append(sp)
    cols = ["path", "rank", "step_ms", "compute_ms", "compute_only_ms", "comm_ms", "hidden_ms", "exposed_ms", "idle_ms", "comm_share",
            "exposed_share", "hidden_fraction", "source"]
    frame = pd.DataFrame(rows)
    return frame[[c for c in cols if c in frame.columns]].round(4)


def describe_split(frame: Any) -> list[str]:
    """What the split says, one line per rank, from :func:`split_frame`'s rows."""
    out = []
    for row in frame.to_dict("records"):
        comm, hidden, exposed = row["comm_ms"], row["hidden_ms"], row["exposed_ms"]
        hidden_pct = f"{100 * hidden / comm:.0f} %" if comm > 0 else "none"
        out.append(f"rank {row['rank']}: step {row['step_ms']:.3f} ms = compute {row['compute_ms']:.3f} ms, communication "
                   f"{comm:.3f} ms ({100 * row['comm_share']:.1f} % of the step; {hidden_pct} of it hidden under compute), "
                   f"exposed communication {exposed:.3f} ms ({100 * row['exposed_share']:.1f} %), idle {row['idle_ms']:.3f} ms")
    if len(out) > 1:
        comms = [r["comm_ms"] for r in frame.to_dict("records")]
        if max(comms) > 1.5 * max(min(comms), 1e-9):
            slow = frame.to_dict("records")[comms.index(max(comms))]["rank"]
            out.append(f"rank {slow}'s collectives last longer: a collective's time includes waiting inside it for the "
                       "other rank to arrive, so the rank that is ahead shows more 'communication'")
    return out


def phase_frame(res: Any):  # -> pandas.DataFrame
    """Compute time per phase (forward, backward, optimizer) per rank, from the NVTX-marked ranges."""
    import pandas as pd

    return pd.DataFrame([{"rank": r, **{f"{k}_ms": round(v, 4) for k, v in ((m.get("split") or {}).get("phase_ms") or {}).items()}}
                         for r, m in enumerate(res.ranks)])


def overhead_frame(res: Any):  # -> pandas.DataFrame
    """Median step time with and without torch.profiler, per rank."""
    import pandas as pd

    return pd.DataFrame([{"rank": r, "step_ms": round(m["step_ms"], 3), "step_ms_profiled": round(m["step_ms_profiled"], 3),
                          "overhead_%": round(100 * m["profiler_overhead"], 1) if m.get("profiler_overhead") is not None else None}
                         for r, m in enumerate(res.ranks)])


def gap_row(res: Any) -> dict[str, float]:
    """1-GPU step, DDP step, their gap, and the exposed communication (means over ranks)."""
    ranks = res.ranks
    local = statistics.mean(m["local_step_ms"] for m in ranks) if all(m.get("local_step_ms") for m in ranks) else float("nan")
    ddp = statistics.mean(m["step_ms"] for m in ranks)
    exposed = statistics.mean(m["split"]["exposed_ms"] for m in ranks) if all(m.get("split") for m in ranks) else float("nan")
    gap = ddp - local
    return {"local_step_ms": local, "step_ms": ddp, "gap_ms": gap, "exposed_ms": exposed,
            "predicted_ms": local + exposed, "exposed_over_gap": exposed / gap if gap > 0 else float("nan"),
            "scaling_efficiency": local / ddp if ddp > 0 else float("nan")}


def gap_frame(results: Mapping[str, Any]):  # -> pandas.DataFrame
    """:func:`gap_row` for each path (``{"NVLink": res, "host-staged": res2}``)."""
    import pandas as pd

    return pd.DataFrame([{"path": k, **{c: round(v, 4) for c, v in gap_row(r).items()}} for k, r in results.items()])


def verdict_gap(frame: Any) -> list[str]:
    """One line per path: how much of the 2-GPU step's extra time the exposed communication explains."""
    out = []
    for row in frame.to_dict("records"):
        gap, exposed = row["gap_ms"], row["exposed_ms"]
        if math.isnan(gap) or math.isnan(exposed):
            out.append(f"{row['path']}: not measured")
            continue
        out.append(f"{row['path']}: DDP step {row['step_ms']:.3f} ms vs 1-GPU step {row['local_step_ms']:.3f} ms: "
                   f"gap {gap:.3f} ms; exposed communication {exposed:.3f} ms "
                   f"({'explains ' + format(100 * exposed / gap, '.0f') + ' % of the gap' if gap > 0 else 'while the gap is not positive'}; "
                   f"difference {gap - exposed:+.3f} ms). Scaling efficiency {100 * row['scaling_efficiency']:.1f} %.")
    return out


def memory_frame(res: Any):  # -> pandas.DataFrame
    """Memory per rank in MiB: torch.cuda.memory_stats essentials (GPU) or process RSS (CPU)."""
    import pandas as pd

    rows = []
    for r, m in enumerate(res.ranks):
        mem = m.get("memory", {})
        row: dict[str, Any] = {"rank": r, "kind": mem.get("kind")}
        for k, v in mem.items():
            if k.endswith(("_bytes.all.peak", "_bytes.all.current")):
                row[k.replace("_bytes.all.", "_").replace(".", "_") + "_mib"] = round(v / 2**20, 1)
            elif k.startswith("num_") or k.endswith("_mib"):
                row[k] = round(v, 1) if isinstance(v, float) else v
        rows.append(row)
    return pd.DataFrame(rows)


def sweep_rows(res: Any) -> list[dict[str, Any]]:
    """The batch sweep, the ranks' communication and exposed shares averaged per batch size."""
    per_batch: dict[int, list[dict[str, Any]]] = {}
    for m in res.ranks:
        for row in m.get("sweep", []):
            per_batch.setdefault(row["batch"], []).append(row)
    out = []
    for b in sorted(per_batch):
        rows = per_batch[b]
        out.append({"batch": b, "global_batch": rows[0]["global_batch"],
                    "step_ms": statistics.mean(r["step_ms_unprofiled"] for r in rows),
                    "samples_per_s": statistics.mean(r["samples_per_s"] for r in rows),
                    **{k: statistics.mean(r[k] for r in rows) for k in ("comm_ms", "exposed_ms", "comm_share", "exposed_share")
                       if all(k in r for r in rows)}})
    return out


def verdict_c16(rows_by_path: Mapping[str, Sequence[Mapping[str, Any]]], threshold: float = 0.15) -> list[str]:
    """Claim C16 ("above 15 % communication, compress or raise the batch"), from the sweep."""
    out = []
    for path, rows in rows_by_path.items():
        rows = sorted(rows, key=lambda r: r["batch"])
        if len(rows) < 2 or "comm_share" not in rows[0]:
            out.append(f"{path}: no sweep")
            continue
        a, b = rows[0], rows[-1]
        below = [r["batch"] for r in rows if r["comm_share"] <= threshold]
        falls = b["comm_share"] < a["comm_share"]
        out.append(f"{path}: communication share {100 * a['comm_share']:.0f} % at batch {a['batch']} -> "
                   f"{100 * b['comm_share']:.0f} % at batch {b['batch']} ({'falls' if falls else 'does not fall'} as the batch grows); "
                   f"exposed {100 * a['exposed_share']:.0f} % -> {100 * b['exposed_share']:.0f} %; "
                   + (f"below {100 * threshold:.0f} % from batch {below[0]}" if below else f"never below {100 * threshold:.0f} %")
                   + (". Raising the batch lowers the share, as the rule assumes; the exposed share is what costs time"
                      if falls else ". The share did not fall here: the rule's premise does not hold on this run"))
    return out


def probe_traffic(sampler: Any, res: Any) -> list[dict[str, Any]]:
    """NVLink bytes NVML counted during the all-reduce probe, against what the algorithm sends."""
    probe = res.metrics.get("probe") or {}
    if not probe or not getattr(sampler, "available", False):
        return []
    counted = sampler.nvlink_bytes(probe["start"], probe["end"])
    rows = []
    for gpu, c in counted.items():
        expected = probe["bytes_per_rank_algorithm"]
        rows.append({"gpu": gpu, "nvml_sent_gib": c["tx_bytes"] / 2**30, "nvml_received_gib": c["rx_bytes"] / 2**30,
                     "all_reduce_sends_gib": expected / 2**30, "sent_over_expected": c["tx_bytes"] / expected if expected else None,
                     "seconds": c["seconds"]})
    return rows


if __name__ == "__main__":
    runtime.main(run, Params)
