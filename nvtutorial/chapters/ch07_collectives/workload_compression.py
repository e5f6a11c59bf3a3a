"""compression: the course UNet trained with each gradient-compression hook; bytes, time, accuracy.

Used in notebook 07. One run sweeps the hooks in this process, each on a fresh model with the
same initial weights and the same batches, installed by
:func:`nvtutorial.chapters.ch07_collectives.lessons.compression.register` (``none``, ``fp16``, ``bf16``, ``powersgd``,
``topk``: the lesson's code). For each: ``warmup`` untimed steps (they include the plain all-reduce steps that PowerSGD
and top-k need before compressing, so the timed steps are all compressed), then ``steps`` timed steps: median step
time, bytes sent per step per rank (what the hooks hand to ``torch.distributed``, counted by
wrapping it; DDP's own all-reduce for ``none``), on a GPU also rank 0's NVLink TX counter from NVML,
the training loss of every step and the validation loss and IoU at the end (and every
``eval_every`` steps). The sweep runs ``rounds`` times, in forward then reverse order, so that
a drift of the machine does not fall on one hook: the step time pools every round's steps, and
the rounds' medians are the repeats that ``report.verdict.compare`` judges. Before the sweep it
measures how sparse the UNet's local gradients really are, layer by layer (claim C23). A hook
this torch cannot install (bf16 needs a CUDA build with NCCL) is reported as skipped, with why.
On CPU ranks of a machine with GPUs, torch is told there is no GPU (PowerSGD's hook would
otherwise call ``torch.cuda.synchronize`` on the CPU device). Each rank returns a
:class:`~nvtutorial.chapters.ch07_collectives.schema_compression.Rank` (``schema_compression.py``).

Run it once as is (NVLink between the GPUs) and once host-staged::

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch07_collectives.workload_compression
    NCCL_P2P_DISABLE=1 torchrun --standalone --nproc-per-node 2 \\
        -m nvtutorial.chapters.ch07_collectives.workload_compression
    nvtutorial run compression --nproc 2 --set model=tiny --set image_size=32 --set steps=5
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import statistics
from typing import Any

from nvtutorial import runtime
from nvtutorial.chapters.ch07_collectives.schema_compression import (
    HOOK_NAMES,
    DensityRow,
    DensitySummaries,
    Eval,
    Hook,
    HookName,
    Params,
    Rank,
)
from nvtutorial.chapters.ch07_collectives.schema_compression import (
    NAME as NAME,  # the workload's name, declared by its schema
)
from nvtutorial.workloads._commcount import ring_sent

# --------------------------------------------------------------------------------------------
# NVML's NVLink byte counters (rank 0, on a GPU)


def nvlink_tx_bytes(ctx: runtime.Context) -> tuple[int | None, str]:
    """``(bytes, note)``: NVML's ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`` (KiB, data payload,
    cumulative) summed over this GPU's links, in bytes; ``(None, why)`` where it is not available."""
    if not ctx.is_gpu:
        return None, "not available: no GPU (CPU run)"
    import torch

    from nvtutorial import nvml

    with nvml.nvml() as pynvml:
        if pynvml is None:
            return None, "not available: NVML not found"
        try:
            uuid = str(getattr(torch.cuda.get_device_properties(ctx.device), "uuid", "") or "")
            handle, how = nvml.handle_for_uuid(pynvml, uuid, ctx.local_rank)
            counters = nvml.nvlink_counters(pynvml, handle, nvml.active_nvlinks(pynvml, handle))
        except Exception as exc:  # NVMLError_NotSupported, missing symbols in old drivers, ...
            return None, f"not available: {type(exc).__name__}: {exc}"
        if not counters:
            return None, "not available: no link reported NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"
        return 1024 * sum(tx for tx, _ in counters.values()), f"{len(counters)} links, GPU matched by {how}"


# --------------------------------------------------------------------------------------------
# The sweep


def hide_gpus_from_cpu_rank(ctx: runtime.Context) -> bool:
    """On a CPU (gloo) rank where CUDA is available, make torch report no GPU, as
    ``CUDA_VISIBLE_DEVICES=""`` would have: PowerSGD's hook calls ``torch.cuda.synchronize(device)``
    whenever CUDA is available, which fails for a CPU device. Returns whether it had to."""
    import torch

    if ctx.is_gpu or not torch.cuda.is_available():
        return False
    torch.cuda.is_available = lambda: False  # this rank computes on the CPU only
    return True


def _local_gradient_density(
    ctx: runtime.Context, s: Any, batches: list[tuple[Any, Any]], topk_ratio: float
) -> tuple[DensityRow, ...]:
    """Per-layer density of this rank's own gradients (``no_sync``: before any averaging), summed
    over ``batches``, the way a rank would hand them to a sparse all-reduce."""
    from nvtutorial.chapters.ch03_ddp_training.lessons import training
    from nvtutorial.chapters.ch07_collectives.workload_density import gradient_density

    s.optimizer.zero_grad(set_to_none=True)
    with s.model.no_sync():
        for images, masks in batches:
            images, masks = training.to_device(s, images, masks)
            with training.autocast(s):
                logits = s.model(images)
            training.loss_fn(logits, masks).backward()
    rows = gradient_density(s.module, topk_ratio=topk_ratio)
    s.optimizer.zero_grad(set_to_none=True)
    return tuple(rows)


def _first_batches(s: Any, n: int) -> list[tuple[Any, Any]]:
    """The first ``n`` (images, masks) batches of a setup's training data."""
    from nvtutorial.chapters.ch03_ddp_training.lessons import training

    return [(images, masks) for _, images, masks in itertools.islice(training.infinite_batches(s), n)]


def can_install(name: str) -> str | None:
    """Why this torch cannot install hook ``name`` (``None``: it can)."""
    import torch

    if name == "bf16" and not (torch.version.cuda or torch.version.hip):
        return "skipped: DDP installs the bf16 hook only in a CUDA (or ROCm) build of torch with NCCL"
    return None


def _setup(ctx: runtime.Context, p: Params) -> Any:
    """Notebook 03's training set-up (``training.setup``) at this run's sizes, its data on the device."""
    from nvtutorial.chapters.ch03_ddp_training.lessons import training

    return training.setup(
        ctx,
        model=p.model,
        batch_size=p.batch_size,
        image_size=p.image_size,
        samples=p.samples,
        val_samples=p.val_samples,
        seed=p.seed,
        lr=p.lr,
        data="device",
    )


def _timed_steps(
    ctx: runtime.Context, p: Params, s: Any, batches: Any, losses: list[Any]
) -> tuple[Any, Any, list[Eval]]:
    """The steps after the warm-up, each timed, their collectives counted, evaluated every ``p.eval_every`` steps
    (not after the last), each loss appended to ``losses``: ``(count, timer, evals)``, once every rank is done."""
    from nvtutorial.chapters.ch03_ddp_training.lessons import training
    from nvtutorial.workloads._commcount import counting

    total = p.warmup + p.steps
    evals: list[Eval] = []
    timer = ctx.timer()  # each timed step
    with counting(ctx.world_size) as count:
        for step in range(p.warmup, total):
            _, images, masks = next(batches)
            with timer:
                losses.append(training.train_step(s, images, masks))
            if p.eval_every and (step + 1) % p.eval_every == 0 and step + 1 < total:
                evals.append(_eval(s, ctx, step + 1))
    ctx.sync()
    return count, timer, evals


def run_hook(
    ctx: runtime.Context, p: Params, name: str, measure_density: bool
) -> tuple[Hook, dict[str, tuple[DensityRow, ...]]]:
    """Train a fresh model with compression ``name``: its metrics (rank-local; one round, so its round medians are
    its own median) and, with ``measure_density``, the gradients' density before and after (``initial``,
    ``trained``)."""
    import torch

    from nvtutorial.chapters.ch03_ddp_training.lessons import training
    from nvtutorial.chapters.ch07_collectives.lessons import compression
    from nvtutorial.workloads._commcount import counting

    s = _setup(ctx, p)
    density: dict[str, tuple[DensityRow, ...]] = {}
    if measure_density:
        density["initial"] = _local_gradient_density(ctx, s, _first_batches(s, p.density_batches), p.topk_ratio)
    state = compression.register(
        s.model, name, topk_ratio=p.topk_ratio, powersgd_rank=p.powersgd_rank, start_iter=p.start_iter
    )
    grad_bytes = sum(q.numel() * q.element_size() for q in s.module.parameters() if q.requires_grad)
    total = p.warmup + p.steps
    losses: list[torch.Tensor] = []
    tx_before = tx_note = None
    batches = training.infinite_batches(s)
    with counting(ctx.world_size) as warm_count:
        for _ in range(p.warmup):
            _, images, masks = next(batches)
            losses.append(training.train_step(s, images, masks))
    ctx.sync()
    ctx.barrier()
    compressed_when_timed = _compressing(name, state)
    if ctx.is_main:
        tx_before, tx_note = nvlink_tx_bytes(ctx)
    count, timer, evals = _timed_steps(ctx, p, s, batches, losses)
    tx_after = nvlink_tx_bytes(ctx)[0] if ctx.is_main else None
    if name == "none":  # DDP's own all-reduce runs in C++, out of the counter's sight: every gradient, every step
        count.add("all_reduce", grad_bytes * p.steps, ring_sent("all_reduce", grad_bytes, ctx.world_size) * p.steps)
    times = timer.seconds()
    evals.append(_eval(s, ctx, total))
    if measure_density:
        density["trained"] = _local_gradient_density(ctx, s, _first_batches(s, p.density_batches), p.topk_ratio)
    step_ms_median = 1e3 * statistics.median(times)
    out = Hook(
        hook=hook_name(name),
        compressed_when_timed=compressed_when_timed,
        step_ms_median=step_ms_median,
        step_ms_all=tuple(1e3 * t for t in times),
        sent_bytes_per_step=count.sent / p.steps,
        payload_bytes_per_step=count.payload / p.steps,
        collective_calls_per_step=count.calls / p.steps,
        warmup_calls=warm_count.calls,
        dense_bytes_per_step=ring_sent("all_reduce", grad_bytes, ctx.world_size),
        train_loss=tuple(float(x) for x in torch.stack(losses).tolist()),
        evals=tuple(evals),
        final_val_loss=evals[-1].loss,
        final_iou=evals[-1].iou,
        nvlink_tx_bytes_per_step=(tx_after - tx_before) / p.steps
        if tx_before is not None and tx_after is not None
        else None,
        nvlink_note=tx_note,
        params=sum(q.numel() for q in s.module.parameters()),
        topk_residual_norm=float(sum(r.float().norm() ** 2 for r in state.residuals.values()) ** 0.5)
        if isinstance(state, compression.TopKState)  # compression "topk"
        else None,
        step_ms_round_medians=(step_ms_median,),
        train_loss_rounds_equal=True,
    )
    del s, state, batches, losses, timer
    gc.collect()
    if ctx.is_gpu:
        torch.cuda.empty_cache()
    return out, density


def hook_name(name: str) -> HookName:
    """``name`` as one of :data:`HOOK_NAMES` (``Params`` refuses any other)."""
    return HOOK_NAMES[HOOK_NAMES.index(name)]


def _compressing(name: str, state: Any) -> bool:
    """Whether the hook has left its plain all-reduce warm-up (always true for none, fp16, bf16)."""
    if name == "powersgd":
        return state.iter >= state.start_powerSGD_iter
    if name == "topk":
        return state.iter >= state.start_iter
    return True


def _eval(s: Any, ctx: runtime.Context, step: int) -> Eval:
    from nvtutorial.chapters.ch03_ddp_training.lessons import training

    m = training.evaluate(s, ctx)
    return Eval(step=step, loss=m["loss"], iou=m["iou"])


def pool_rounds(rounds: list[Hook]) -> Hook:
    """One hook's metrics over all rounds: the first round's curves and accuracy (every round
    trains from the same weights on the same batches), every round's steps pooled for the time,
    each round's median kept (the repeats a comparison judges), the NVLink bytes averaged."""
    first = rounds[0]
    times = tuple(t for r in rounds for t in r.step_ms_all)
    tx = [r.nvlink_tx_bytes_per_step for r in rounds if r.nvlink_tx_bytes_per_step is not None]
    return dataclasses.replace(
        first,
        step_ms_median=statistics.median(times),
        step_ms_all=times,
        nvlink_tx_bytes_per_step=statistics.mean(tx) if tx else None,
        step_ms_round_medians=tuple(r.step_ms_median for r in rounds),
        train_loss_rounds_equal=all(r.train_loss == first.train_loss for r in rounds),
    )


def link_name(ctx: runtime.Context) -> str:
    """How the two GPUs exchange gradients in this run: ``NVLink (NV18)`` or ``PCIe peer-to-peer``
    (direct), ``host-staged`` (``NCCL_P2P_DISABLE=1``), or ``gloo (CPU)``."""
    if not ctx.is_gpu:
        return "gloo (CPU)"
    if os.environ.get("NCCL_P2P_DISABLE", "0") not in ("0", ""):
        return "host-staged"
    from nvtutorial import nvml

    label = nvml.link_label()
    return f"NVLink ({label})" if label and label.startswith("NV") else "PCIe peer-to-peer"


def run(ctx: runtime.Context, p: Params) -> Rank:
    link = link_name(ctx)
    hidden = hide_gpus_from_cpu_rank(ctx)
    print(
        f"rank {ctx.rank}: compression sweep {', '.join(p.hooks)} on {link}"
        + ("; GPUs hidden from this CPU rank" if hidden else ""),
        flush=True,
    )
    skipped = {name: why for name in p.hooks if (why := can_install(name))}
    hooks = [name for name in p.hooks if name not in skipped]
    by_hook: dict[str, list[Hook]] = {name: [] for name in hooks}
    density: dict[str, tuple[DensityRow, ...]] = {}
    order = [(r, name) for r in range(p.rounds) for name in (hooks if r % 2 == 0 else hooks[::-1])]
    for i, (round_, name) in enumerate(order):
        r, measured = run_hook(ctx, p, name, measure_density=(i == 0 and p.density_batches > 0))
        density.update(measured)
        by_hook[name].append(r)
        ctx.progress(i + 1, len(order), "hooks", hook=name, round=round_ + 1, step_ms=round(r.step_ms_median, 2))
    from nvtutorial.chapters.ch07_collectives.workload_density import density_summary

    initial, trained = density.get("initial"), density.get("trained")
    return Rank(
        link=link,
        nccl_p2p_disable=os.environ.get("NCCL_P2P_DISABLE"),
        gpus_hidden_from_cpu_rank=hidden,
        hooks=tuple(pool_rounds(by_hook[name]) for name in hooks),
        skipped_hooks=skipped,
        density=trained if trained is not None else initial if initial is not None else (),
        density_initial=initial or (),
        density_summary=DensitySummaries(
            initial=density_summary(initial) if initial is not None else None,
            trained=density_summary(trained) if trained is not None else None,
        ),
        topk_ratio=p.topk_ratio,
        powersgd_rank=p.powersgd_rank,
        steps=p.steps,
        rounds=p.rounds,
        warmup=p.warmup,
        model=p.model,
    )


if __name__ == "__main__":
    runtime.main(run, Params)
