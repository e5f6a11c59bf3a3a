"""pitfalls: the classic DDP traps, each reproduced safely, diagnosed, and fixed.

Used in notebook 06. ``trap`` names one or more traps; ``fixed=true`` runs the correct pattern
of the traps that fail, ``catch=true`` records a mismatch's error instead of failing (the
other traps always show the trap and the fix side by side):

* ``rank0_validation`` (claim C18): rank 0 validates alone while rank 1 starts the next epoch
  and waits in DDP's gradient all-reduce. Shorter than the process-group timeout it only
  idles rank 1; longer, the run dies with a timeout. Run it with a short ``pg_timeout``.
  Fixed: every rank validates its shard and the sums are all-reduced
  (:func:`nvtutorial.lessons.training.evaluate`).
* ``mismatched_shapes`` / ``mismatched_order``: the ranks call collectives that do not match.
  With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every collective is checked first and both ranks
  raise a report naming the difference; without it (``detail=false``) the run crashes, hangs
  or computes garbage. ``catch=true`` records the report and goes on (with the check only:
  it raises before anything is sent, so the group stays usable).
* ``no_set_epoch``: without ``sampler.set_epoch(epoch)`` every epoch has the same order.
* ``seeds`` (claim C21): DDP broadcasts rank 0's weights, so different seeds still start from
  the same model; the same seed everywhere gives every rank the same random augmentation.
* ``dataloader`` (claim C17): samples/s against ``num_workers`` and ``pin_memory`` on this
  machine, next to what the training step consumes; one file per sample against shards.
* ``oom`` (claims C19, C20; GPU only): an out-of-memory reproduced under a memory cap, then
  fixed by gradient accumulation and activation checkpointing; a fragmentation OOM fixed by the
  allocator's ``expandable_segments`` / ``max_split_size_mb`` (options of
  ``PYTORCH_CUDA_ALLOC_CONF``, not functions); what ``empty_cache()`` does and does not do.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.pitfalls --set trap=no_set_epoch,seeds
    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.pitfalls --set trap=mismatched_order
    nvtutorial run pitfalls --set trap=rank0_validation --pg-timeout 5

The notebook launches the traps with :mod:`nvtutorial.experiments.pitfalls` and reads the
results with :mod:`nvtutorial.report.pitfalls` (:func:`~nvtutorial.report.pitfalls.where_ranks`,
the flight recorder, the verdicts...). The out-of-memory trap lives in
:mod:`nvtutorial.workloads._oom` (GPU only).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any, Literal

from nvtutorial import runtime
from nvtutorial.params import require
from nvtutorial.units import knee

Trap = Literal["rank0_validation", "mismatched_shapes", "mismatched_order", "no_set_epoch", "seeds", "dataloader", "oom"]
FAILING = ("rank0_validation", "mismatched_shapes", "mismatched_order")
"""Traps that end the run with an error unless ``fixed`` (or, for mismatches, ``catch``)."""


@dataclasses.dataclass(frozen=True)
class Params:
    trap: tuple[Trap, ...] = ("no_set_epoch",)
    fixed: bool = False
    catch: bool = False
    detail: bool = True  # mismatches: check every collective across ranks (TORCH_DISTRIBUTED_DEBUG=DETAIL)
    model: Literal["tiny", "small", "full"] = "tiny"
    image_size: int = 32
    batch_size: int = 4
    samples: int = 32
    val_samples: int = 20
    validation_s: float = 15.0  # rank0_validation: how long rank 0's lone validation lasts
    short_validation_s: float = 1.0  # fixed rank0_validation: a lone validation shorter than the timeout
    epochs: int = 3
    workers: tuple[int, ...] = (0, 1, 2)
    loader_batch: int = 16
    loader_batches: int = 8
    loader_image_size: int = 64
    shard_samples: int = 256
    oom_model: Literal["tiny", "small", "full"] = "full"
    oom_batch: int = 16
    oom_image_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        require(len(self.trap) >= 1, "trap: name at least one trap")
        require(self.batch_size >= 1 and self.samples >= self.batch_size, "samples must be at least batch_size")
        require(self.validation_s > 0 and self.short_validation_s > 0, "validation times must be positive")
        require(self.epochs >= 2, f"epochs={self.epochs}: at least 2 to compare orders")
        require(all(w >= 0 for w in self.workers) and len(self.workers) >= 1, "workers: one or more counts >= 0")
        require(self.loader_batch >= 1 and self.loader_batches >= 2, "loader_batch >= 1 and loader_batches >= 2")
        require(self.oom_batch >= 2 and self.oom_batch % 2 == 0, f"oom_batch={self.oom_batch}: an even number >= 2")
        require(self.shard_samples >= 16, "shard_samples must be at least 16")


# =========================================================================== the workload

def run(ctx: runtime.Context, p: Params) -> dict:
    out: dict[str, Any] = {"traps": list(p.trap), "fixed": p.fixed,
                           "debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF")}
    from nvtutorial.workloads import _oom

    handlers = {"rank0_validation": _rank0_validation, "mismatched_shapes": _mismatched_shapes,
                "mismatched_order": _mismatched_order, "no_set_epoch": _no_set_epoch, "seeds": _seeds,
                "dataloader": _dataloader, "oom": _oom.oom}
    out["seconds"] = {}
    for i, name in enumerate(p.trap):
        ctx.progress(i, len(p.trap), f"trap {name}")
        ctx.barrier()
        trap = runtime.Timer()  # the host clock, as it is: nothing synchronised
        with trap:
            out[name] = handlers[name](ctx, p)
        out["seconds"][name] = trap.seconds()[0]
    ctx.progress(len(p.trap), len(p.trap), "traps")
    return out


def _say(ctx: runtime.Context, message: str) -> None:
    print(f"rank {ctx.rank}: {message}", flush=True)


# --------------------------------------------------------------------------- rank-0-only validation

def _rank0_validation(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    from nvtutorial.lessons import training

    # A fatal signal (the NCCL watchdog aborts a process whose collective timed out) then
    # prints every thread's Python stack into this rank's log: where it was stuck.
    faulthandler.enable(all_threads=True)
    # Flight-recorder dumps go to the run (older name of the variable: TORCH_NCCL_DEBUG_INFO_TEMP_FILE).
    os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(ctx.run_dir / "nccl_trace_rank_"))

    s = training.setup(ctx, model=p.model, batch_size=p.batch_size, image_size=p.image_size, samples=p.samples,
                       val_samples=p.val_samples, seed=p.seed)

    def one_epoch(epoch: int) -> float:
        s.sampler.set_epoch(epoch)
        loss = float("nan")
        for images, masks in s.loader:
            loss = training.train_step(s, images, masks).item()  # .item(): the usual logging, and a sync
        return loss

    def lone_validation(seconds: float) -> tuple[dict[str, Any], int]:
        """Rank 0 validates the whole set alone (``model.module``, one process), repeated until
        ``seconds`` have passed: a validation as long as a real one, scaled down."""
        end, passes, metrics = time.perf_counter() + seconds, 0, {}
        while True:
            metrics = training.evaluate_single_process(s)
            passes += 1
            if time.perf_counter() >= end:
                return metrics, passes

    one_epoch(0)
    ctx.barrier()
    if not p.fixed:
        if ctx.rank == 0:
            _say(ctx, f"validating alone for {p.validation_s:g} s (the trap); rank 1 goes on to epoch 1")
            lone_validation(p.validation_s)
            _say(ctx, "validation done, back to training")
        else:
            _say(ctx, "epoch 1: the first step's backward enters DDP's all-reduce and waits for rank 0")
        one_epoch(1)
        return {"completed": True, "note": f"rank 0's validation ({p.validation_s:g} s) ended before the process-group timeout"}

    # Fixed, part 1: a lone validation shorter than the timeout does not fail, but rank 1 idles.
    alone, first_step, all_ranks = runtime.Timer(), runtime.Timer(), runtime.Timer()  # host clock, no sync
    alone_metrics: dict[str, Any] = {}
    with alone:
        if ctx.rank == 0:
            alone_metrics, _ = lone_validation(p.short_validation_s)
    with first_step:
        s.sampler.set_epoch(1)
        images, masks = next(iter(s.loader))
        training.train_step(s, images, masks).item()
    ctx.barrier()
    # Fixed, part 2: every rank validates its shard; one all_reduce of sums; one division.
    with all_ranks:
        together = training.evaluate(s, ctx)
    single = training.evaluate_single_process(s)  # the reference: one process, the whole set
    return {
        "lone_validation_s": alone.seconds()[0] if ctx.rank == 0 else None,
        "first_step_s": first_step.seconds()[0],  # rank 1: mostly waiting for rank 0 to come back
        "all_ranks_validation_s": all_ranks.seconds()[0],
        "all_ranks_metrics": {k: together[k] for k in ("loss", "iou", "samples")},
        "single_process_metrics": {"loss": single["loss"], "iou": single["iou"]},
        "agrees_with_single_process": abs(together["loss"] - single["loss"]) <= 1e-5 * max(1.0, abs(single["loss"])),
        "lone_metrics": {"loss": alone_metrics.get("loss"), "iou": alone_metrics.get("iou")} if alone_metrics else None,
    }


# --------------------------------------------------------------------------- mismatched collectives

_CHECKED: dict[str, Any] = {}


def checked_group(ctx: runtime.Context, p: Params) -> Any:
    """The process group the mismatch demos use.

    ``detail=true``: a group whose every collective is first checked across ranks (op, shapes,
    dtypes), as ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does for every group of a job; here it is
    switched on for this one group only (``dist.set_debug_level`` around ``new_group``), so
    the rest of the run is not slowed down. ``detail=false``: the default group, unchecked.
    """
    import torch.distributed as dist

    if not p.detail or os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        return None
    if "group" not in _CHECKED:
        previous = dist.get_debug_level()
        dist.set_debug_level(dist.DebugLevel.DETAIL)
        try:
            _CHECKED["group"] = dist.new_group()
        finally:
            dist.set_debug_level(previous)
    return _CHECKED["group"]


def _mismatch(ctx: runtime.Context, p: Params, body, fixed_body) -> dict[str, Any]:
    """The trap (raises, or with ``catch`` reports the error), then with ``fixed`` the fix."""
    if p.catch and not p.detail:
        raise ValueError("catch=true needs detail=true: without the DETAIL check a mismatch breaks the process "
                         "group (a crash, a hang or wrong numbers), so there is nothing to catch safely")
    group = checked_group(ctx, p)
    out: dict[str, Any] = {"checked": p.detail}
    if p.catch or not p.fixed:
        if not p.detail:
            _say(ctx, "no DETAIL check: expect a crash, a hang until the process-group timeout, or wrong numbers")
        try:
            body(group)
            out["trap"] = {"raised": None, "message": "no error: the collectives happened to match"}
        except RuntimeError as exc:
            if not p.catch:
                raise
            out["trap"] = {"raised": type(exc).__qualname__, "message": str(exc)[:3000],
                           "difference": mismatch_difference(str(exc))}
    if p.fixed:
        ctx.barrier()
        out["fix"] = fixed_body(group)
    return out


def _mismatched_shapes(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    def trap(group: Any) -> None:
        x = torch.ones(10 + 10 * ctx.rank, device=ctx.device)  # 10 elements on rank 0, 20 on rank 1
        _say(ctx, f"all_reduce of a tensor of shape {tuple(x.shape)}")
        dist.all_reduce(x, group=group)
        ctx.sync()

    def fix(group: Any) -> dict[str, Any]:
        # Agree on the size first, pad to it, reduce, cut back.
        x = torch.ones(10 + 10 * ctx.rank, device=ctx.device)
        n = torch.tensor([x.numel()], device=ctx.device)
        dist.all_reduce(n, op=dist.ReduceOp.MAX, group=group)
        padded = torch.zeros(int(n.item()), device=ctx.device)
        padded[: x.numel()] = x
        dist.all_reduce(padded, group=group)
        return {"shape_each_rank": x.numel(), "agreed_shape": int(n.item()), "sum_of_first": float(padded[0])}

    return _mismatch(ctx, p, trap, fix)


def _mismatched_order(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    a = torch.ones(8, device=ctx.device)
    b = torch.full((8,), float(ctx.rank), device=ctx.device)

    def trap(group: Any) -> None:
        if ctx.rank == 0:
            _say(ctx, "all_reduce, then broadcast")
            dist.all_reduce(a, group=group)
            dist.broadcast(b, src=0, group=group)
        else:
            _say(ctx, "broadcast, then all_reduce")
            dist.broadcast(b, src=0, group=group)
            dist.all_reduce(a, group=group)
        ctx.sync()

    def fix(group: Any) -> dict[str, Any]:
        dist.all_reduce(a, group=group)
        dist.broadcast(b, src=0, group=group)
        return {"all_reduce": float(a[0]), "broadcast": float(b[0])}

    return _mismatch(ctx, p, trap, fix)


def mismatch_difference(message: str) -> str:
    """The "Collectives differ in the following aspects" part of a DETAIL mismatch report."""
    m = re.search(r"Collectives differ in the following aspects:\s*(.*)", message, re.DOTALL)
    return " ".join(m.group(1).split()) if m else ""


# --------------------------------------------------------------------------- set_epoch

def epoch_orders(samples: int, world: int, rank: int, epochs: int, set_epoch: bool, seed: int = 0,
                 first: int = 8) -> list[list[int]]:
    """The first ``first`` indices rank ``rank``'s DistributedSampler gives in each epoch."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=True, seed=seed)  # type: ignore[arg-type]
    orders = []
    for epoch in range(epochs):
        if set_epoch:
            sampler.set_epoch(epoch)
        orders.append(list(sampler)[:first])
    return orders


def _no_set_epoch(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    out = {}
    for label, flag in (("without_set_epoch", False), ("with_set_epoch", True)):
        orders = epoch_orders(p.samples, ctx.world_size, ctx.rank, p.epochs, flag, p.seed)
        out[label] = {"orders": orders, "identical_every_epoch": all(o == orders[0] for o in orders)}
    return out


# --------------------------------------------------------------------------- seeds

class _Augmented:
    """A dataset whose item is the random crop offset its augmentation draws (global RNG)."""

    def __init__(self, n: int, image_size: int, crop: int) -> None:
        self.n, self.room = n, image_size - crop

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        return torch.tensor([i, int(torch.randint(0, self.room + 1, (1,))), int(torch.randint(0, self.room + 1, (1,)))])


def _gather(ctx: runtime.Context, values: list[float]) -> list[list[float]]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    out = [torch.zeros_like(t) for _ in range(ctx.world_size)]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def _seeds(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from nvtutorial.models.unet import build_unet

    require(p.samples >= 8 * ctx.world_size, f"seeds needs samples >= {8 * ctx.world_size} (8 per rank)")
    # Initialisation: a different seed on every rank, then DDP.
    torch.manual_seed(p.seed + ctx.rank)
    net = build_unet(p.model).to(ctx.device)

    def checksum() -> float:
        return float(sum(t.detach().double().sum() for t in net.parameters()))

    before = _gather(ctx, [checksum()])
    DDP(net, device_ids=[ctx.device.index] if ctx.is_gpu else None)  # broadcasts rank 0's weights
    after = _gather(ctx, [checksum()])

    # Augmentation: the crop offsets each rank's loader draws, same seed vs seed + rank.
    crops = {}
    for label, seed in (("same_seed", p.seed), ("seed_plus_rank", p.seed + ctx.rank)):
        ds = _Augmented(p.samples, 64, 48)
        sampler = DistributedSampler(ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=p.seed)  # type: ignore[arg-type]
        torch.manual_seed(seed)
        rows = torch.cat([b for b in DataLoader(ds, batch_size=4, sampler=sampler)])[:8]
        gathered = _gather(ctx, rows.flatten().tolist())
        per_rank = [[[int(v) for v in r[k:k + 3]] for k in range(0, len(r), 3)] for r in gathered]
        same = sum(a[1:] == b[1:] for a, b in zip(per_rank[0], per_rank[-1]))
        crops[label] = {"per_rank": per_rank, "identical_crops": same, "of": len(per_rank[0]),
                        "same_samples": sum(a[0] == b[0] for a, b in zip(per_rank[0], per_rank[-1]))}
    return {"checksums_before_ddp": [b[0] for b in before], "checksums_after_ddp": [a[0] for a in after],
            "equal_before": len({round(b[0], 6) for b in before}) == 1,
            "equal_after": len({round(a[0], 6) for a in after}) == 1, "crops": crops}


# --------------------------------------------------------------------------- the input pipeline


def _loader_rate(ctx: runtime.Context, loader, batches: int) -> dict[str, float]:
    t0 = time.perf_counter()
    first = None
    n = n_after_first = 0
    for i, (images, masks) in enumerate(loader):
        images = images.to(ctx.device, non_blocking=True)
        masks = masks.to(ctx.device, non_blocking=True)
        n += images.shape[0]
        if first is None:
            ctx.sync()
            first = time.perf_counter()
        else:
            n_after_first += images.shape[0]
        if i + 1 >= batches:
            break
    ctx.sync()
    end = time.perf_counter()
    return {"first_batch_s": (first or end) - t0, "samples_per_s": n_after_first / max(end - (first or end), 1e-9),
            "samples_per_s_with_startup": n / (end - t0)}


def _shards(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    """Read the same samples from one file each and from a few shard files (rank 0's disk, warm cache)."""
    import numpy as np

    from nvtutorial.models import segdata

    root = ctx.run_dir / f"files_rank{ctx.rank}"
    (root / "single").mkdir(parents=True, exist_ok=True)
    (root / "shards").mkdir(parents=True, exist_ok=True)
    images, masks = segdata.render(range(p.shard_samples), p.loader_image_size)
    arr = np.concatenate([(images.numpy() * 255).astype(np.uint8).reshape(p.shard_samples, -1),
                          masks.numpy().astype(np.uint8).reshape(p.shard_samples, -1)], axis=1)
    per_shard = 64
    for i in range(p.shard_samples):
        np.save(root / "single" / f"{i:06d}.npy", arr[i])
    for k in range(0, p.shard_samples, per_shard):
        np.save(root / "shards" / f"shard-{k // per_shard:04d}.npy", arr[k:k + per_shard])

    def read(folder: Path) -> float:
        timer = runtime.Timer()  # the host clock: file reads, no device
        with timer:
            for f in sorted(folder.iterdir()):
                np.load(f)
        return timer.seconds()[0]

    single, shards = min(read(root / "single") for _ in range(2)), min(read(root / "shards") for _ in range(2))
    for f in list((root / "single").iterdir()) + list((root / "shards").iterdir()):
        f.unlink()
    return {"samples": p.shard_samples, "bytes_per_sample": int(arr.shape[1]), "per_shard": per_shard,
            "one_file_per_sample_us": 1e6 * single / p.shard_samples, "shards_us": 1e6 * shards / p.shard_samples}


def _dataloader(ctx: runtime.Context, p: Params) -> dict[str, Any]:
    from torch.utils.data import DataLoader, DistributedSampler

    from nvtutorial.lessons import training
    from nvtutorial.models import segdata

    ds = segdata.make_dataset(max(p.samples, p.loader_batch * p.loader_batches * ctx.world_size), p.loader_image_size,
                              seed=p.seed)
    sampler = DistributedSampler(ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=p.seed)
    pins = (False, True) if ctx.is_gpu else (False,)
    rows = []
    for workers in p.workers:
        for pin in pins:
            ctx.barrier()  # both ranks load at the same time, as in training
            loader = DataLoader(ds, batch_size=p.loader_batch, sampler=sampler, num_workers=workers, pin_memory=pin,
                                persistent_workers=False)
            rows.append({"num_workers": workers, "pin_memory": pin, **_loader_rate(ctx, loader, p.loader_batches)})
            del loader
    # What the training step consumes, with its input already on the device.
    s = training.setup(ctx, model=p.model, batch_size=p.loader_batch, image_size=p.loader_image_size,
                       samples=p.loader_batch * ctx.world_size, val_samples=ctx.world_size, seed=p.seed)
    images, masks = segdata.render(range(p.loader_batch), p.loader_image_size, device=ctx.device)
    for _ in range(2):
        training.train_step(s, images, masks)
    ctx.sync()
    timer = ctx.timer(host=True)  # the host clock, the device synchronised at both ends
    for _ in range(5):
        with timer:
            training.train_step(s, images, masks)
    consumes = p.loader_batch / statistics.median(timer.seconds())
    k = knee([r for r in rows if not r["pin_memory"]])
    return {"rows": rows, "cpu_cores": os.cpu_count(), "ranks": ctx.world_size, "step_consumes_samples_per_s": consumes,
            "knee_workers": k["num_workers"] if k else None, "shards": _shards(ctx, p) if ctx.is_main else None,
            "rule_of_thumb_workers": 4 * ctx.world_size}


if __name__ == "__main__":
    runtime.main(run, Params)
