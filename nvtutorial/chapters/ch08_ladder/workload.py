"""ladder: the course transformer trained on each rung of the strategy ladder: loss, memory, bytes and time.

Used in notebook 08. Every rung of ``nvtutorial/chapters/ch08_ladder/lessons/rungs.py`` starts from a model built
from the same seed and trains with the lesson's own ``train_step``. Each rank returns a ``Rank`` of ``schema.py``,
with per rung (a ``Rung``):

- the loss of the global batch at each of ``steps`` steps, next to the one-process reference trained
  here too (every rank computes it, on its own device, with no communication);
- every parameter's whole gradient of step 0 (before any update; DTensor shards gathered) against the
  one-process reference's: a loss trained with Adam cannot show a wrong gradient *scale* (Adam's update
  hardly changes when every gradient is multiplied by a constant), the gradients can;
- the bytes of the parameters, gradients and optimizer state this rank holds after a step, counted
  tensor by tensor (the local shard of a DTensor, the local optimizer of ZeRO); on a GPU also the
  memory allocated then, what the forward pass added, and the peak over the timed steps;
- every collective of one step, recorded as it is issued (a ``TorchDispatchMode`` that sees the
  ``c10d`` and functional-collective operators): its kind and tensor bytes, and what this rank would
  send were it run as a ring (a cost model applied to the recorded sizes, not a traffic measurement);
- ``repeats`` × ``timed`` timed steps after ``warmup``; on a GPU NVML's NVLink TX counter of this
  rank's GPU around them;
- with ``profile_steps``, a ``torch.profiler`` trace per rank (``trace_<rung>_rank<R>.json.gz``)
  from which the notebook computes the exposed communication.

With ``checkpoint``, the DCP lesson (``checkpoint.py``) runs after the ladder; with ``fit_layers``, then
``fit_rung`` once more with that many blocks (the largest model the memory model predicts within its
margins; one more block is not tried). With
``init=meta`` a model is built without memory, sharded, then materialised shard by shard.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch08_ladder.workload --set layers=4
    NCCL_P2P_DISABLE=1 torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch08_ladder.workload \\
        --set reference=false
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import shutil
import statistics
import warnings
from collections import defaultdict
from typing import Any

from nvtutorial import runtime
from nvtutorial.chapters.ch08_ladder.schema import (
    LABELS,
    META_RUNGS,
    Checkpoint,
    Collective,
    FitError,
    Gradients,
    Held,
    Params,
    Rank,
    Rung,
    sizes,
)
from nvtutorial.chapters.ch08_ladder.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.params import require
from nvtutorial.results import typed

# --------------------------------------------------------------------------------------------
# What a rank holds, counted tensor by tensor


def local_bytes(t: Any) -> int:
    """Bytes of a tensor on this rank: a DTensor's local shard, else the tensor."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.to_local()
    return t.numel() * t.element_size()


def held_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """Parameters, gradients and optimizer state this rank holds, in bytes (local shards only): the fields of
    :class:`~nvtutorial.chapters.ch08_ladder.schema.Held` (a dict: chapter 10's workload reads it by key)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    params = list(model.parameters())
    local_optimizer = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    state = [v for s in local_optimizer.state.values() for v in s.values() if hasattr(v, "numel")]
    return {
        "params": sum(local_bytes(p) for p in params),
        "grads": sum(local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(local_bytes(v) for v in state),
        "param_tensors": len(params),
    }


# --------------------------------------------------------------------------------------------
# The collectives of a step, recorded as they are issued


def _sent(kind: str, nbytes: int, world: int, rank: int, root: int | None) -> float:
    """What this rank sends for a collective of ``nbytes`` (the full tensor) under a ring algorithm."""
    if kind == "all_reduce":
        return 2 * (world - 1) / world * nbytes
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (world - 1) / world * nbytes
    if kind == "broadcast":  # a chain from the root: every rank but the last forwards the tensor
        last = (root - 1) % world if root is not None else None
        return float(nbytes) if rank != last else 0.0
    return 0.0


def collective_counter():  # -> TorchDispatchMode
    """A dispatch mode that records each collective: ``mode.records`` (kind, op, bytes, sent)."""
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    def nbytes(x: Any) -> int:
        if isinstance(x, torch.Tensor):
            return x.numel() * x.element_size()
        if isinstance(x, (list, tuple)):
            return sum(nbytes(y) for y in x)
        return 0

    # op -> (kind, argument holding the full tensor, or the shard for all-gathers whose output is not an argument)
    c10d = {
        "allreduce_": ("all_reduce", "tensors"),
        "allreduce_coalesced_": ("all_reduce", "tensors"),
        "_allgather_base_": ("all_gather", "output_tensor"),
        "allgather_": ("all_gather", "output_tensors"),
        "allgather_into_tensor_coalesced_": ("all_gather", "outputs"),
        "_reduce_scatter_base_": ("reduce_scatter", "input_tensor"),
        "reduce_scatter_": ("reduce_scatter", "input_tensors"),
        "reduce_scatter_tensor_coalesced_": ("reduce_scatter", "inputs"),
        "broadcast_": ("broadcast", "tensors"),
        "alltoall_base_": ("all_to_all", "input"),
    }
    functional = {
        "all_reduce": ("all_reduce", "input"),
        "all_reduce_coalesced": ("all_reduce", "inputs"),
        "all_gather_into_tensor": ("all_gather", "input"),
        "all_gather_into_tensor_coalesced": ("all_gather", "inputs"),
        "reduce_scatter_tensor": ("reduce_scatter", "input"),
        "reduce_scatter_tensor_coalesced": ("reduce_scatter", "inputs"),
        "broadcast": ("broadcast", "input"),
        "all_to_all_single": ("all_to_all", "input"),
    }

    class CollectiveCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[dict[str, Any]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            table = {"c10d": c10d, "_c10d_functional": functional}.get(func.namespace)
            name = func._schema.name.split("::")[-1]
            if table and name in table:
                kind, arg = table[name]
                values = dict(zip((a.name for a in func._schema.arguments), args)) | kwargs
                world, rank = dist.get_world_size(), dist.get_rank()
                size = nbytes(values[arg])
                if func.namespace == "_c10d_functional" and kind == "all_gather":
                    size *= int(values["group_size"])  # the input is this rank's shard
                root = None
                if kind == "broadcast":
                    root = int(values["root_rank"] if "root_rank" in values else values["src"])
                self.records.append(
                    {
                        "kind": kind,
                        "op": f"{func.namespace}.{name}",
                        "bytes": size,
                        "sent": _sent(kind, size, world, rank, root),
                    }
                )
            return func(*args, **kwargs)

    return CollectiveCounter()


def summarise(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind of collective: calls, tensor bytes, bytes sent by this rank (the fields of
    :class:`~nvtutorial.chapters.ch08_ladder.schema.Collective`; dicts: chapter 10's workload writes them as they
    are)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0, "bytes": 0, "sent": 0.0})
    for r in records:
        out[r["kind"]]["calls"] += 1
        out[r["kind"]]["bytes"] += r["bytes"]
        out[r["kind"]]["sent"] += r["sent"]
    return dict(out)


# --------------------------------------------------------------------------------------------
# The gradients of step 0 against the one-process reference


def reference_gradients(cfg: Any, tokens: Any, seed: int) -> dict[str, Any]:
    """The one-process model's gradient of every parameter for ``tokens`` (the global batch), kept on the CPU: the
    device memory each rung measures next holds none of it (:func:`gradient_check` copies one tensor at a time)."""
    import torch

    from nvtutorial.models import transformer

    model = transformer.build(cfg, seed=seed, device=tokens.device)
    transformer.loss_fn(model, tokens).backward()
    out = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            raise RuntimeError(f"the one-process reference computed no gradient for {name}")
        out[name] = p.grad.detach().cpu()
    del model
    if tokens.device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def full_gradients(model: Any, device: Any):  # -> Iterator[tuple[str, torch.Tensor]]
    """Every parameter's whole gradient, by the plain model's parameter name: a DTensor's shards gathered from
    every rank (a collective: every rank must iterate), DDP's ``module.`` prefix dropped."""
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        g = p.grad
        if isinstance(g, DTensor):  # an offloaded shard lives on the CPU: gather it on the rank's device
            local = g.to_local().to(device)
            g = DTensor.from_local(
                local, g.device_mesh, g.placements, run_check=False, shape=g.shape, stride=g.stride()
            ).full_tensor()
        yield name.removeprefix("module."), g


def gradient_check(model: Any, reference: dict[str, Any], device: Any) -> dict[str, Any]:
    """How far this rung's step-0 gradients are from the reference's: the largest difference relative to the
    largest reference value of its tensor (``max_rel_diff``, worst tensor ``worst``), and the ratio of the
    gradients' global norms (``norm_ratio``: 2.0 for summed instead of averaged gradients): the fields of
    :class:`~nvtutorial.chapters.ch08_ladder.schema.Gradients` (a dict: chapter 10's workload reads it by key).

    Computed on ``device``, where the gradients are: each reference tensor is copied there, one at a time (the
    lesson model's 2.2 GB of gradients compare in milliseconds on a GPU, in seconds per rung on the host)."""
    import torch

    worst, rel, missing = None, 0.0, []
    got_sq = torch.zeros((), dtype=torch.float64, device=device)
    ref_sq = torch.zeros((), dtype=torch.float64, device=device)
    for name, g in full_gradients(model, device):
        if g is None:
            missing.append(name)
            continue
        r = reference[name].to(device)
        g = g.detach().reshape(r.shape)
        d = ((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
        if d >= rel:
            worst, rel = name, d
        got_sq += g.double().square().sum()
        ref_sq += r.double().square().sum()
    got, ref = got_sq.item(), ref_sq.item()
    return {
        "max_rel_diff": rel,
        "worst": worst,
        "norm_ratio": (got / ref) ** 0.5 if ref else None,
        "missing": missing,
    }


# --------------------------------------------------------------------------------------------
# One rung


def _free(ctx: runtime.Context) -> None:
    gc.collect()
    if ctx.is_gpu:
        import torch

        torch.cuda.synchronize(ctx.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(ctx.device)


def _nvlink_tx(ctx: runtime.Context) -> tuple[int | None, str]:
    # The NVLink byte counter of notebook 07 (nvml.py underneath), reused as is.
    from nvtutorial.chapters.ch07_collectives.workload_compression import nvlink_tx_bytes

    return nvlink_tx_bytes(ctx)


def train_rung(
    ctx: runtime.Context, p: Params, rung: str, reference_grads: dict[str, Any] | None = None, desc: str | None = None
) -> Rung:
    """Train, count, time and (optionally) trace one rung from a freshly built model; with ``reference_grads``
    first compare its gradients of step 0 (no update) with them. ``desc`` names its progress bar (default: the
    rung's label, :data:`~nvtutorial.chapters.ch08_ladder.schema.LABELS`)."""
    import torch

    from nvtutorial.chapters.ch08_ladder.lessons.train import global_loss, local_batch, train_step
    from nvtutorial.models import transformer

    cfg = transformer.Config(**sizes(p))
    _free(ctx)
    model, optimizer = _build(ctx, p, rung, cfg)
    step_no = 0

    def step() -> torch.Tensor:
        nonlocal step_no
        assert model is not None and optimizer is not None  # None only once the rung is done
        tokens = transformer.batch(step_no, p.global_batch, cfg, seed=p.seed).to(ctx.device)
        step_no += 1
        return train_step(model, optimizer, local_batch(tokens, rung))

    ctx.progress(0, 1, desc=desc or LABELS.get(rung, rung))
    gradients = None
    if reference_grads is not None:
        gradients = _step0_gradients(ctx, p, cfg, rung, model, optimizer, reference_grads)
    losses = tuple(global_loss(step(), rung) for _ in range(p.steps))
    held = typed(Held, held_bytes(model, optimizer))
    allocated_after_step = None
    if ctx.is_gpu:
        ctx.sync()
        allocated_after_step = torch.cuda.memory_allocated(ctx.device)

    collectives, sent = _recorded(ctx, step)
    forward_added = _forward_added(ctx, p, cfg, rung, model, optimizer, step_no) if ctx.is_gpu else None
    repeats, tx_per_step, tx_note = _timed(ctx, p, step)
    peak_allocated = torch.cuda.max_memory_allocated(ctx.device) if ctx.is_gpu else None
    trace = _profile(ctx, rung, lambda: step(), p.profile_steps) if p.profile_steps else None
    model = optimizer = None  # the last references: _free can release their memory
    _free(ctx)
    ctx.barrier()
    ctx.progress(1, 1, desc=desc or LABELS.get(rung, rung))
    return Rung(
        rung=rung,
        layers=p.layers,
        gradients=gradients,
        losses=losses,
        held=held,
        allocated_after_step=allocated_after_step,
        collectives=collectives,
        sent_per_step=sent,
        forward_added=forward_added,
        step_s=tuple(repeats),
        step_s_median=statistics.median(repeats),
        peak_allocated=peak_allocated,
        nvlink_tx_bytes_per_step=tx_per_step,
        nvlink_note=tx_note,
        trace=trace,
    )


def _build(ctx: runtime.Context, p: Params, rung: str, cfg: Any) -> tuple[Any, Any]:
    """A fresh model of ``cfg`` wrapped by ``rung``, and its optimizer: built on the meta device, then materialised
    and initialised from the seed (``init="meta"``), or built on the device from the seed."""
    import torch

    from nvtutorial.chapters.ch08_ladder.lessons.rungs import RUNGS
    from nvtutorial.models import transformer

    if p.init != "meta":
        return RUNGS[rung](transformer.build(cfg, seed=p.seed, device=ctx.device), ctx.device)
    model, optimizer = RUNGS[rung](transformer.build(cfg, device="meta"), ctx.device)
    model.to_empty(device=ctx.device)
    torch.manual_seed(p.seed)
    with warnings.catch_warnings():  # on a CPU mesh DTensor warns that its RNG tracker is CUDA-only
        warnings.filterwarnings("ignore", message="DTensor random operators")
        transformer.init_weights(model)
    return model, optimizer


def _step0_gradients(
    ctx: runtime.Context, p: Params, cfg: Any, rung: str, model: Any, optimizer: Any, reference: dict[str, Any]
) -> Gradients:
    """Forward and backward of step 0's batch, no update (the model is unchanged): the gradients against the
    ``reference``'s."""
    from nvtutorial.chapters.ch08_ladder.lessons.train import local_batch
    from nvtutorial.models import transformer

    tokens = transformer.batch(0, p.global_batch, cfg, seed=p.seed).to(ctx.device)
    transformer.loss_fn(model, local_batch(tokens, rung)).backward()
    gradients = typed(Gradients, gradient_check(model, reference, ctx.device))
    optimizer.zero_grad(set_to_none=True)
    return gradients


def _recorded(ctx: runtime.Context, step: Any) -> tuple[dict[str, Collective], float]:
    """One step with every collective recorded (untimed: the recording costs time): the totals per kind of
    collective, and the bytes this rank sent."""
    counter = collective_counter()
    with counter:
        step()
    ctx.sync()
    collectives = {kind: typed(Collective, totals) for kind, totals in summarise(counter.records).items()}
    return collectives, sum(r["sent"] for r in counter.records)


def _forward_added(
    ctx: runtime.Context, p: Params, cfg: Any, rung: str, model: Any, optimizer: Any, step_no: int
) -> int:
    """What the forward pass of batch ``step_no`` adds to the device's memory (activations, and parameters kept
    gathered); then its backward, no update, and the peak reset for the timed steps (GPU only)."""
    import torch

    from nvtutorial.chapters.ch08_ladder.lessons.train import local_batch
    from nvtutorial.models import transformer

    optimizer.zero_grad(set_to_none=True)
    ctx.sync()
    before = torch.cuda.memory_allocated(ctx.device)
    tokens = transformer.batch(step_no, p.global_batch, cfg, seed=p.seed).to(ctx.device)
    loss = transformer.loss_fn(model, local_batch(tokens, rung))
    ctx.sync()
    added = torch.cuda.memory_allocated(ctx.device) - before
    loss.backward()
    del loss, tokens
    optimizer.zero_grad(set_to_none=True)  # no update: the timed steps follow
    torch.cuda.reset_peak_memory_stats(ctx.device)
    return added


def _timed(ctx: runtime.Context, p: Params, step: Any) -> tuple[list[float], float | None, str]:
    """The warm-up steps, then ``repeats`` timed repeats of ``timed`` steps each: their seconds per step, the NVLink
    bytes sent per step over them (None where NVML cannot count them) and the note on that count."""
    for _ in range(p.warmup):
        step()
    tx_before, tx_note = _nvlink_tx(ctx)
    repeats = []
    for _ in range(p.repeats):
        ctx.barrier()
        repeats.append(ctx.time_calls(step, iters=p.timed))
    tx_after = _nvlink_tx(ctx)[0]
    if tx_before is None or tx_after is None:
        return repeats, None, tx_note
    return repeats, (tx_after - tx_before) / (p.repeats * p.timed), tx_note


def run_rung(
    ctx: runtime.Context, p: Params, rung: str, reference_grads: dict[str, Any] | None = None, desc: str | None = None
) -> dict[str, Any]:
    """:func:`train_rung`'s record as a dict (``dataclasses.asdict``): chapter 10's capstone reads it by key."""
    return dataclasses.asdict(train_rung(ctx, p, rung, reference_grads, desc))


def _profile(ctx: runtime.Context, rung: str, step: Any, steps: int) -> str:
    """Trace ``steps`` steps (after one untraced) into ``trace_<rung>_rank<R>.json.gz``; its file name."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.is_gpu else [])
    step()
    ctx.sync()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function("train_step"):
                step()
                ctx.sync()
    path = ctx.run_dir / f"trace_{rung}_rank{ctx.rank}.json"
    prof.export_chrome_trace(str(path))
    with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return f"{path.name}.gz"


# --------------------------------------------------------------------------------------------


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch

    from nvtutorial.chapters.ch08_ladder.lessons.train import train
    from nvtutorial.models import transformer

    cfg = transformer.Config(**sizes(p))
    require(
        p.global_batch % ctx.world_size == 0,
        f"global_batch={p.global_batch} must be a multiple of the {ctx.world_size} ranks: each data-parallel rank "
        "trains on an equal share (else the mean of the ranks' losses is not the global batch's)",
    )
    grads = reference = None
    if p.reference:
        ctx.progress(0, 1, desc="one-process reference")
        reference = tuple(train("single", cfg, p.steps, p.global_batch, ctx.device, seed=p.seed))
        grads = reference_gradients(cfg, transformer.batch(0, p.global_batch, cfg, seed=p.seed).to(ctx.device), p.seed)
        _free(ctx)
    rungs = tuple(train_rung(ctx, p, rung, grads) for rung in p.rungs)
    grads = None
    checkpoint = None
    if p.checkpoint:
        from nvtutorial.chapters.ch08_ladder.lessons.checkpoint import resume_check

        ctx.progress(0, 1, desc="checkpoint")
        small = dataclasses.replace(cfg, dim=min(cfg.dim, 256), heads=min(cfg.heads, 4), layers=min(cfg.layers, 2))
        done = resume_check(small, ctx.run_dir / "checkpoint", ctx.device, global_batch=p.global_batch)
        checkpoint = typed(Checkpoint, {**done, "config": dataclasses.asdict(small)})
    fit = fit_error = None
    if p.fit_layers:
        init = "meta" if p.fit_rung in META_RUNGS else "full"
        big = dataclasses.replace(
            p,
            rungs=(p.fit_rung,),
            layers=p.fit_layers,
            init=init,
            steps=1,
            warmup=0,
            timed=1,
            repeats=2,
            profile_steps=0,
        )
        try:
            fit = train_rung(
                ctx,
                big,
                p.fit_rung,
                desc=f"the largest model: {LABELS.get(p.fit_rung, p.fit_rung)}, {p.fit_layers} blocks",
            )
        except torch.OutOfMemoryError as exc:  # the model's estimate was too low: a result, not a lost run
            fit_error = FitError(p.fit_rung, p.fit_layers, f"OutOfMemoryError: {str(exc).splitlines()[0]}")
            _free(ctx)
    return Rank(
        config=cfg,
        global_batch=p.global_batch,
        world_size=ctx.world_size,
        rank=ctx.rank,
        device=str(ctx.device),
        reference=reference,
        rungs=rungs,
        checkpoint=checkpoint,
        fit=fit,
        fit_error=fit_error,
    )


if __name__ == "__main__":
    runtime.main(run, Params)
