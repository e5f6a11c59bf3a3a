"""The out-of-memory trap of the ``pitfalls`` workload (claims C19, C20): GPU only.

Used by notebook 06 through ``pitfalls --set parts=oom``; the training steps are those of
``nvtutorial/chapters/ch06_pitfalls/lessons/memory.py``. Kept apart because every line here needs CUDA: a
rank on the CPU only reports "skipped: needs a GPU". Each rank works alone (no collective): notebook 06 runs it as one
rank on one GPU.

1. **Fragmentation**: a cached block split by a smaller tensor, then a tensor that fits under a
   1 GiB cap (``torch.cuda.set_per_process_memory_fraction``) only if the allocator can reuse
   the split block's free part. Measured with the default allocator, with
   ``expandable_segments:True`` and with ``max_split_size_mb:256``: options of the allocator's
   configuration string (``PYTORCH_ALLOC_CONF``, or its older name ``PYTORCH_CUDA_ALLOC_CONF``), switched at run
   time here to compare them in one process, then set back to the launch's before the next parts
   (:func:`_restore_allocator`).
2. **empty_cache()**: allocated, reserved and the driver's free memory, step by step.
3. **A training step under a cap**: the course UNet without DDP (an OOM on one rank must not
   leave the other waiting in a collective); the cap is 70 % of the way from the model's
   resident memory to the step's peak, so the full batch fails and the fixes are measured:
   two half batches with gradient accumulation, and activation checkpointing. Each variant takes one
   untimed step (the first call after a change, and the OOM if it does not fit), then ``TIMED_STEPS``
   steps timed with CUDA events; checkpointing is timed once more without the cap, so that its cost in
   step time is compared with the first row under the same conditions.

It returns the ``oom`` section of the rank's result (:class:`~nvtutorial.chapters.ch06_pitfalls.schema.Oom`).
"""

from __future__ import annotations

import gc
import os
import statistics
from typing import Literal

from nvtutorial import runtime
from nvtutorial.chapters.ch06_pitfalls.schema import (
    EmptyCache,
    Fragmentation,
    MemoryState,
    Oom,
    Params,
    Training,
    TrainingRow,
)

TIMED_STEPS = 3
"""Steps timed per variant of the training step (after one untimed step): the three repeats a side that checkpointing's
cost is compared with (its 35 % on one H100 against spreads of 1 to 8 % over 5 steps)."""


def _say(ctx: runtime.Context, message: str) -> None:
    print(f"rank {ctx.rank}: {message}", flush=True)


def _set_allocator(config: str) -> None:
    import torch

    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None) or torch.cuda.memory._set_allocator_settings
    setter(config)


def launch_alloc_conf() -> str | None:
    """The allocator's configuration string at launch: ``PYTORCH_ALLOC_CONF``, else its older name
    ``PYTORCH_CUDA_ALLOC_CONF``, which torch still reads (with a deprecation warning) where the first is unset."""
    return os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or None


def restoring_conf(launch: str | None) -> str:
    """The string that sets the allocator back as the launch had it. Each setting string resets
    ``max_split_size_mb``, ``roundup_power2_divisions`` and ``garbage_collection_threshold`` to their defaults where
    it leaves them out (``AcceleratorAllocatorConfig::parseArgs``); ``expandable_segments`` keeps its last value,
    so it goes first, off, unless the launch's own string sets it."""
    launch = (launch or "").strip()
    return launch if "expandable_segments" in launch else ",".join(filter(None, ("expandable_segments:False", launch)))


def launch_max_split_mib(launch: str | None) -> float | None:
    """``max_split_size_mb`` as the launch's string sets it (None: unset, the default, no limit), read from the string
    itself rather than from torch."""
    for option in (launch or "").split(","):
        key, _, value = option.partition(":")
        if key.strip() == "max_split_size_mb":
            return float(value)
    return None


def split_expected(launch: str | None, block_mib: int, request_mib: int) -> bool:
    """Whether the native allocator may serve ``request_mib`` from a free cached block of ``block_mib`` (splitting it)
    under the launch's ``max_split_size_mb``: not where the block is at or over the limit and the request below it, nor
    where the request is at or over the limit and the block 20 MiB or more larger (``max_non_split_rounding_mb``'s
    default); the default has no limit."""
    limit = launch_max_split_mib(launch)
    if limit is None:
        return True
    if request_mib < limit:
        return block_mib < limit
    return block_mib < request_mib + 20


def probe_models(launch: str | None) -> bool:
    """Whether :func:`split_expected` models the launch's allocator: not with expandable segments on (a freed block in
    front of a segment's unmapped tail serves a request the split rule refuses, review RR4 S1), nor with
    ``roundup_power2_divisions`` or ``max_non_split_rounding_mb``, which it does not model."""
    text = (launch or "").replace(" ", "").lower()
    return not any(k in text for k in ("expandable_segments:true", "roundup_power2_divisions", "max_non_split"))


def _cached_block_split(dev, block_mib: int = 600, request_mib: int = 200) -> bool:
    """Whether a ``request_mib`` tensor was carved out of a freed, cached ``block_mib`` one (True) or needed memory of
    its own: what the allocator does now, read from the memory it reserves, not from its settings string."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved(dev)
    block = torch.empty(block_mib * 2**20, dtype=torch.uint8, device=dev)
    del block  # cached, not returned
    request = torch.empty(request_mib * 2**20, dtype=torch.uint8, device=dev)
    grew = torch.cuda.memory_reserved(dev) - base
    del request
    torch.cuda.empty_cache()
    return grew < (block_mib + request_mib / 2) * 2**20


def _restore_allocator(launch: str | None, dev=None) -> str:
    """Set the allocator back to the launch's settings and check its effect (review RR1 N3): on a GPU with the native
    allocator and settings :func:`probe_models` covers (else set, not checked), a 200 MiB tensor after a freed 600 MiB
    one splits that block exactly where the launch's own ``max_split_size_mb`` allows it (the demo's last case, 256,
    forbids it; a launch whose own limit is 600 MiB or less forbids it too, and there the probe cannot tell the two
    apart). torch's settings getter only echoes the
    last string set, and ``memory_stats()["max_split_size"]`` is recorded by the device allocator's constructor:
    neither shows the reset."""
    import torch

    wanted = restoring_conf(launch)
    _set_allocator(wanted)
    if dev is None or torch.cuda.get_allocator_backend() != "native" or not probe_models(launch):
        return wanted  # set, not checked: no GPU, another allocator, or settings the probe does not model
    expected = split_expected(launch, 600, 200)
    try:
        split = _cached_block_split(dev, 600, 200)
    except torch.OutOfMemoryError:  # a GPU too busy for the probe's 800 MiB: set, not checked
        return wanted
    if split != expected:
        raise RuntimeError(
            f"the allocator was not set back to the launch's settings ({wanted!r}): a 200 MiB tensor "
            f"{'did not split' if expected else 'split'} a cached 600 MiB block, which max_split_size_mb="
            f"{'unset' if (mib := launch_max_split_mib(launch)) is None else f'{mib:g}'} "
            f"{'allows' if expected else 'forbids'}"
        )
    return wanted


def _mib(n: float) -> float:
    return n / 2**20


def _oom_message(exc: BaseException) -> str:
    text = str(exc).strip()
    return text[:1200]


def _fragmentation(
    ctx: runtime.Context, config: str | None, cap_mib: int = 1024, sizes=(600, 200, 500)
) -> Fragmentation:
    """A cached block split by a smaller tensor, then a tensor that fits the cap only if the
    allocator can reuse the split block's free part: the classic fragmentation OOM."""
    import torch

    dev = ctx.device
    gc.collect()
    torch.cuda.empty_cache()
    if config:
        _set_allocator(config)
    total = torch.cuda.get_device_properties(dev).total_memory
    base = torch.cuda.memory_reserved(dev)
    torch.cuda.set_per_process_memory_fraction((base + cap_mib * 2**20) / total, dev)
    big, small, need = (s * 2**20 for s in sizes)
    label = config or launch_alloc_conf() or "default"
    keep = []
    message = None
    try:
        a = torch.empty(big, dtype=torch.uint8, device=dev)
        del a  # its memory stays cached by the allocator
        keep.append(torch.empty(small, dtype=torch.uint8, device=dev))
        reserved = _mib(torch.cuda.memory_reserved(dev) - base)
        allocated = _mib(torch.cuda.memory_allocated(dev))
        try:
            keep.append(torch.empty(need, dtype=torch.uint8, device=dev))
            outcome: Literal["fits", "OOM"] = "fits"
        except torch.OutOfMemoryError as exc:
            outcome, message = "OOM", _oom_message(exc)
    finally:
        keep.clear()
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
        gc.collect()
        torch.cuda.empty_cache()
    return Fragmentation(
        config=label,
        cap_mib=cap_mib,
        reserved_mib=reserved,
        allocated_mib=allocated,
        outcome=outcome,
        message=message,
        free_under_cap_mib=cap_mib - sizes[1],
    )


def _empty_cache_demo(ctx: runtime.Context, mib: int = 600) -> EmptyCache:
    """What ``empty_cache`` returns to the driver, and that it frees nothing still referenced."""
    import torch

    dev = ctx.device

    def state(step: str) -> MemoryState:
        free, _ = torch.cuda.mem_get_info(dev)
        return MemoryState(
            step=step,
            allocated_mib=_mib(torch.cuda.memory_allocated(dev)),
            reserved_mib=_mib(torch.cuda.memory_reserved(dev)),
            driver_free_mib=_mib(free),
        )

    gc.collect()
    torch.cuda.empty_cache()
    rows = [state("start")]
    x = torch.empty(mib * 2**20, dtype=torch.uint8, device=dev)
    rows.append(state(f"x = {mib} MiB tensor"))
    torch.cuda.empty_cache()
    rows.append(state("empty_cache() while x is alive"))
    del x
    rows.append(state("del x"))
    torch.cuda.empty_cache()
    rows.append(state("empty_cache() after del x"))
    return EmptyCache(rows=tuple(rows))


def _training_oom(ctx: runtime.Context, p: Params) -> Training:
    """A training step that does not fit under a cap, and the fixes that make it fit (no DDP:
    an OOM on one rank must not leave the other waiting in a collective)."""
    import torch

    from nvtutorial.chapters.ch06_pitfalls.lessons import memory
    from nvtutorial.models import segdata
    from nvtutorial.models.unet import build_unet

    dev = ctx.device
    torch.manual_seed(p.seed)
    net = build_unet(p.oom_model).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    images, masks = segdata.render(range(p.oom_batch), p.oom_image_size, device=dev)

    def step(batch_parts: int) -> None:
        if batch_parts == 1:
            memory.train_step(net, opt, images, masks)
        else:
            memory.train_step_accumulated(net, opt, images, masks, batch_parts)

    def measure(label: str, batch_parts: int, capped: bool) -> TrainingRow:
        """One variant: a first step (warm-up, and the OOM if it does not fit), then ``TIMED_STEPS`` steps each timed
        with CUDA events; the peak memory over all of them."""
        gc.collect()
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        times: tuple[float, ...] | None = None
        message = None
        try:
            step(batch_parts)  # the first step of this variant: not timed (checkpointing's first call, caches)
            times = tuple(1e3 * ctx.time_calls(lambda: step(batch_parts)) for _ in range(TIMED_STEPS))
        except torch.OutOfMemoryError as exc:
            message = _oom_message(exc)
        opt.zero_grad(set_to_none=True)
        return TrainingRow(
            variant=label,
            capped=capped,
            outcome="fits" if times is not None else "OOM",
            step_ms=statistics.median(times) if times is not None else None,
            step_ms_repeats=times,
            message=message,
            peak_allocated_mib=_mib(torch.cuda.max_memory_allocated(dev)),
            peak_reserved_mib=_mib(torch.cuda.max_memory_reserved(dev)),
        )

    step(2)  # creates the optimizer state: part of every later step's memory
    step(1)
    torch.cuda.synchronize(dev)
    base_alloc = torch.cuda.memory_allocated(dev)
    uncapped = measure(f"batch {p.oom_batch}, no cap", 1, capped=False)
    peak = uncapped.peak_allocated_mib * 2**20
    total = torch.cuda.get_device_properties(dev).total_memory
    gc.collect()
    torch.cuda.empty_cache()
    cap = torch.cuda.memory_reserved(dev) + 0.7 * (peak - base_alloc)
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), dev)
    rows = [uncapped]
    try:
        rows.append(measure(f"batch {p.oom_batch} under the cap (the OOM)", 1, capped=True))
        rows.append(measure(f"2 × batch {p.oom_batch // 2}, gradients accumulated", 2, capped=True))
        memory.checkpointed(net)
        rows.append(measure(f"batch {p.oom_batch}, activation checkpointing", 1, capped=True))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
    # checkpointing's cost in step time, against the first row: both without the cap (an allocator working under a
    # cap may free and retry, which costs time of its own)
    rows.append(measure(f"batch {p.oom_batch}, activation checkpointing, no cap", 1, capped=False))
    return Training(
        cap_mib=_mib(cap),
        model=p.oom_model,
        batch=p.oom_batch,
        image_size=p.oom_image_size,
        timed_steps=TIMED_STEPS,
        rows=tuple(rows),
    )


def oom(ctx: runtime.Context, p: Params) -> Oom:
    """The whole OOM demo on this rank (``p``: the pitfalls workload's Params)."""
    import torch

    ctx.progress(0, 1, "oom")
    if not ctx.is_gpu:
        ctx.progress(1, 1, "oom")
        msg = (
            "skipped: needs a GPU. An out-of-memory error is about the GPU's memory and its caching "
            "allocator (torch.cuda); this rank runs on the CPU (gloo), which has neither. Where a GPU is, one rank "
            "on it runs the demo: nvtutorial run pitfalls --nproc 1 --backend nccl --set parts=oom"
        )
        _say(ctx, msg)
        return Oom(skipped=msg)
    launch = launch_alloc_conf()
    frag = [_fragmentation(ctx, None)]
    # Set at run time here to compare in one process; in a job you set the same string in the
    # environment before the first CUDA allocation: PYTORCH_ALLOC_CONF=expandable_segments:True
    for config in ("expandable_segments:True", "expandable_segments:False,max_split_size_mb:256"):
        try:
            frag.append(_fragmentation(ctx, config))
        except Exception as exc:  # a private setter: report instead of failing the whole run
            frag.append(Fragmentation(config=config, outcome="not measured", message=f"{type(exc).__name__}: {exc}"))
    after = _restore_allocator(launch, ctx.device)  # the rest runs under the launch's allocator, not the last case's
    out = Oom(
        launch_alloc_conf=launch,
        allocator_after=after,
        fragmentation=tuple(frag),
        empty_cache=_empty_cache_demo(ctx),
        training=_training_oom(ctx, p),
    )
    gc.collect()  # the capped model and its optimizer went out of scope: give their memory back
    torch.cuda.empty_cache()
    ctx.progress(1, 1, "oom")
    return out
