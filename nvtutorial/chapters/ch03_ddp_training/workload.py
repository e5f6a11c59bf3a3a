"""train: time the lesson's DDP training step, as written and with one optimisation at a time.

Used in notebooks 03 (1 against 2 GPUs, the transports) and 04 (the optimisations). Every
configuration runs the code of ``nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py`` with at most one function
swapped for another: a :class:`Variant` names the code it runs. This chapter's are here (:data:`VARIANTS`: the lesson's
step as written, in fp32 and in bf16; :data:`SOLO_VARIANT`, the 1-GPU reference); a later chapter adds its own in a
``workload_train.py`` of its folder (notebook 04's optimisations), found by that name, so that this chapter names no
later one. For each variant and per-GPU batch size, in turn: a fresh model from the same seed; the
training set rendered once on the device (the DistributedSampler still picks each rank's samples;
a batch is one gather on the device, timed with the step: no input pipeline is measured); ``warmup``
untimed steps; ``repeats`` rounds of ``steps`` timed steps (CUDA events on GPUs, the host clock on the
CPU); with ``comm_share``, the same steps under ``model.no_sync()``, without the gradient exchange:
communication share = 1 − that step ÷ the step. Before that, on a separate copy of the model over one
step, it counts the bytes DDP hands to all-reduce and the bytes autograd saves for backward (activations).

With ``one_gpu_batch``, rank 0 also times the lesson's step on the model without DDP, alone, while
the other ranks wait: the 1-GPU reference of the scaling efficiency.

The first configuration is measured once more at the end (``aa``): two measurements of the same
code, whose gap is part of the noise of every comparison (``nvtutorial.report.verdict.compare``).
Memory (GPU only) is ``max_memory_allocated`` minus what was allocated before the model existed, at
the peak and just before the optimizer step, for every rank. Each rank returns a
:class:`~nvtutorial.chapters.ch03_ddp_training.schema.Rank`, a :class:`~.schema.Row` per configuration.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch03_ddp_training.workload \\
        --set model=full --set image_size=256 --set batch_sizes=32 --set variants=baseline,fp32,fp16
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training import schema
from nvtutorial.chapters.ch03_ddp_training.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.chapters.ch03_ddp_training.schema import SOLO, Rank, Row
from nvtutorial.models.unet import SIZES, Size
from nvtutorial.params import ParamError, require

if TYPE_CHECKING:
    from torch import Tensor


@dataclasses.dataclass(frozen=True)
class Parts:
    """What a variant's step works on, built by the workload for each configuration."""

    model: Any
    """The model as built (DDP-wrapped, but for the 1-GPU reference)."""
    optimizer: Any
    batches: Iterator[tuple[Tensor, Tensor]]
    """This rank's (micro-)batches, epoch after epoch."""
    device: Any
    amp: Any
    """The lesson's autocast dtype on this device (bf16 on GPUs, None on the CPU)."""
    micro: int
    """Micro-batches per optimizer step."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration of the lesson's step: the code it runs and how the workload builds it."""

    code: str
    """What it runs: the lesson's code with the function named here swapped in (each row's ``code``)."""
    build_model: Callable[[Size, Any, int], Any] | None = None
    """In place of ``ddp_train.build_model(size, device, seed)``; None: the lesson's."""
    make_step: Callable[[Parts], Callable[[], Tensor]] | None = None
    """The step (one optimizer step on the next batch, returning the loss tensor) in place of
    ``ddp_train.train_step``; None: the lesson's, at :attr:`precision`."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """The lesson's step in this precision; ``auto``: bf16 autocast on GPUs, fp32 on the CPU (the script's)."""
    micro_batches: bool = False
    """The per-GPU batch split into ``accumulation`` micro-batches, one optimizer step over them all."""
    alone: bool = False
    """Rank 0 alone with the model without DDP; the other ranks wait."""
    count_note: str | None = None
    """Why the bytes are not counted; None: they are."""
    comm_share_note: str | None = None
    """Why the communication share is not measured; None: it is."""
    cleanup: Callable[[], None] | None = None
    """Called after the configuration, failed or not."""
    prepare: Callable[[], None] | None = None
    """Called once when a run that measures this variant starts, before any configuration (torch.compile: its
    compile workers start then, in processes of their own, while the other configurations are measured)."""


def _solo_model(size: Size, device: Any, seed: int = 0) -> Any:
    """``ddp_train.build_model`` without ``wrap_ddp``."""
    import torch

    from nvtutorial.models.unet import build_unet

    torch.manual_seed(seed)
    return build_unet(size).to(device)


VARIANTS = {
    "baseline": Variant("ddp_train.build_model + ddp_train.train_step (bf16 autocast on GPUs, fp32 on the CPU)"),
    "fp32": Variant("ddp_train.train_step(..., amp=None)", precision="fp32"),
    "bf16": Variant("ddp_train.train_step(..., amp=torch.bfloat16)", precision="bf16"),
}
"""This chapter's variants: the lesson's code as written, and its step in fp32 and in bf16."""
SOLO_VARIANT = Variant(
    "ddp_train.train_step on build_unet(size).to(device): rank 0 alone, the other ranks wait",
    build_model=_solo_model,
    alone=True,
    comm_share_note="no gradient exchange to switch off",
)
"""The 1-GPU reference of a scaling run (``one_gpu_batch``): the lesson's step on the model without DDP."""
EXTENSION = f"workload_{NAME}.py"
"""The file in which a later chapter adds variants (``VARIANTS``: name -> code; ``variant(name)``; ``NOTE``)."""


@functools.cache
def extensions() -> tuple[ModuleType, ...]:
    """The modules of later chapters that add variants to this workload (each chapter folder's :data:`EXTENSION`),
    imported when first asked for. Each gives ``VARIANTS`` (its menu: name -> code), ``variant(name)`` (its
    :class:`Variant`, or None for a name it does not know) and ``NOTE`` (a word on its names, or "")."""
    here = Path(__file__).resolve().parent  # (this module may run as __main__: its name says nothing)
    return tuple(
        importlib.import_module(f"nvtutorial.chapters.{path.parent.name}.{path.stem}")
        for path in sorted(here.parent.glob(f"ch[0-9][0-9]_*/{EXTENSION}"))
    )


def menu() -> dict[str, str]:
    """Every variant's name and the code it runs: this chapter's, then those later chapters add."""
    out = {name: v.code for name, v in VARIANTS.items()}
    for ext in extensions():
        out.update(ext.VARIANTS)
    return out


def variant(name: str) -> Variant:
    """The variant ``name`` one can ask for; :class:`ParamError` naming the menu for any other name."""
    if name in VARIANTS:
        return VARIANTS[name]
    for ext in extensions():
        found = ext.variant(name)
        if found is not None:
            return found
    notes = "".join(f" ({ext.NOTE})" for ext in extensions() if ext.NOTE)
    raise ParamError(f"unknown variant {name!r}; the variants: {', '.join(menu())}{notes}")


def check_variant(name: str) -> None:
    """Raise :class:`ParamError` naming the menu if ``name`` is not a variant."""
    variant(name)


def configuration(name: str) -> Variant:
    """What a configuration of the run measures: a variant, or the 1-GPU reference (:data:`SOLO`)."""
    return SOLO_VARIANT if name == SOLO else variant(name)


class Params(schema.Params):
    """:class:`~.schema.Params`, checked against what only the rank side knows: the UNet's depth (the image size it
    takes) and the variants' menu (later chapters add to it)."""

    def __post_init__(self) -> None:
        multiple = 2 ** SIZES[self.model]["depth"]
        require(
            self.image_size >= 8 and self.image_size % multiple == 0,
            f"image_size={self.image_size} must be a multiple of {multiple} (at least 8) for the {self.model} UNet",
        )
        super().__post_init__()
        for name in self.variants:
            check_variant(name)
        if any(variant(v).micro_batches for v in self.variants):
            require(self.accumulation >= 2, f"accumulation={self.accumulation} must be at least 2")
            bad = [b for b in self.batch_sizes if b % self.accumulation]
            require(
                not bad,
                f"batch size {bad[:1]} does not split into accumulation={self.accumulation} "
                "equal micro-batches: use a multiple of it",
            )


# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Config:
    """One variant at one per-GPU batch, ready to step."""

    model: Any
    optimizer: Any
    step: Callable[[], Any]  # one optimizer step on the next batch; returns the loss tensor


def build(ctx: runtime.Context, p: Params, name: str, batch: int) -> Config:
    """The model, optimizer and step of variant ``name`` at per-GPU batch ``batch``."""
    import torch
    from torch.utils.data import BatchSampler, DistributedSampler

    from nvtutorial.chapters.ch03_ddp_training.lessons import ddp_train as lesson
    from nvtutorial.chapters.ch03_ddp_training.lessons import training
    from nvtutorial.models.segdata import make_dataset

    v = configuration(name)
    device = ctx.device
    amp = torch.bfloat16 if ctx.is_gpu else None  # the script's --precision auto
    world, rank = (1, 0) if v.alone else (ctx.world_size, ctx.rank)
    model = (v.build_model or lesson.build_model)(p.model, device, p.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=p.lr)

    micro = p.accumulation if v.micro_batches else 1
    need = batch * world
    if need > p.samples:
        raise ValueError(
            f"one step needs per-GPU batch × world size = {need} samples but samples={p.samples}: raise samples"
        )
    data = training.device_dataset(make_dataset(p.samples, p.image_size, seed=p.seed), device)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=p.seed)
    batches = _forever(sampler, BatchSampler(sampler, batch // micro, drop_last=True), data)

    if v.make_step is not None:
        step = v.make_step(Parts(model, optimizer, batches, device, amp, micro))
    else:
        precision = {"fp32": None, "bf16": torch.bfloat16}.get(v.precision, amp)
        step = lambda: lesson.train_step(model, optimizer, *next(batches), device, precision)  # noqa: E731
    return Config(model, optimizer, step)


def _forever(sampler: Any, batch_sampler: Any, data: Any) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of this rank's samples, epoch after epoch (``set_epoch`` each time)."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for indices in batch_sampler:
            yield data[indices]
        epoch += 1


# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Counted:
    """What :func:`count_bytes` counted (the :class:`~.schema.Row` fields of the same names); None: not counted."""

    count_note: str | None = None
    allreduce_bytes_per_step: int | None = None
    allreduce_calls_per_step: int | None = None
    saved_activation_bytes: int | None = None
    param_bytes: int | None = None
    grad_bytes: int | None = None
    optimizer_bytes: int | None = None


def count_bytes(ctx: runtime.Context, p: Params, name: str, batch: int) -> Counted:
    """On a separate copy of the configuration, the second step's all-reduce bytes (a comm hook wrapping
    DDP's default all-reduce) and the bytes autograd saved for backward (activations, parameters left
    out), and the bytes of parameters, gradients and optimizer state (every rank holds them whole)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    v = configuration(name)
    if v.count_note is not None:
        return Counted(count_note=v.count_note)
    cfg = build(ctx, p, name, batch)
    sent: list[int] = []

    def hook(state, bucket):  # no annotations: DDP checks them
        sent.append(bucket.buffer().numel() * bucket.buffer().element_size())
        return default_hooks.allreduce_hook(state, bucket)

    if not v.alone:
        cfg.model.register_comm_hook(None, hook)
    cfg.step()  # the first step builds DDP's buckets again in the order gradients arrive
    sent.clear()
    params = {q.data_ptr() for q in cfg.model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    grads: list[int] = []  # the gradients' bytes when the optimizer steps (fp16: unless the scaler skips it)
    hook = cfg.optimizer.register_step_pre_hook(
        lambda *_: grads.append(
            sum(q.grad.numel() * q.grad.element_size() for q in cfg.model.parameters() if q.grad is not None)
        )
    )
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        cfg.step()
    hook.remove()
    optimizer_bytes = sum(
        t.numel() * t.element_size()
        for state in cfg.optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    )
    return Counted(
        allreduce_bytes_per_step=None if v.alone else sum(sent),
        allreduce_calls_per_step=None if v.alone else len(sent),
        saved_activation_bytes=sum(saved.values()),
        param_bytes=sum(q.numel() * q.element_size() for q in cfg.model.parameters()),
        grad_bytes=grads[-1] if grads else None,
        optimizer_bytes=optimizer_bytes or None,
    )


class _Idle(Exception):
    """This rank takes no part in the configuration (rank 0 measures one GPU alone)."""


SETTLE_S = 0.25
"""How long :func:`_settle` gives ProcessGroupNCCL's watchdog (it polls about every 100 ms) to see the work end."""


def _settle(ctx: runtime.Context) -> None:
    """Let ProcessGroupNCCL let go of a configuration's DDP buckets before the next one's memory base (review R5-1).

    ProcessGroupNCCL stashes the tensors of each asynchronous collective. ``Work.wait()`` releases them; DDP never
    calls it (it waits on the bucket's future), so they go only once the watchdog (it polls about every 100 ms) has
    seen the work end and the next collective enqueued on that process group, from any thread, releases its shelf.
    Without this, a base taken right after a configuration's last all-reduces still held its buckets (0.125 GB for
    the UNet), freed during the next configuration: on one H100 that row read one gradient copy too little, and
    `gradient_as_bucket_view` seemed to save nothing (0.003 GB; 0.129 GB once settled, as on the 2x H200 reference,
    0.130). The sleep is a margin, not a check: a watchdog held up longer would bring the error back. Every rank
    calls it (it is a collective); GPUs only."""
    import torch
    import torch.distributed as dist

    if not ctx.is_gpu:
        return
    torch.cuda.synchronize(ctx.device)
    time.sleep(SETTLE_S)
    dist.all_reduce(torch.zeros(1, device=ctx.device))
    torch.cuda.synchronize(ctx.device)


def _memory_start(ctx: runtime.Context) -> int:
    import torch

    gc.collect()
    if not ctx.is_gpu:
        return 0
    torch.cuda.synchronize(ctx.device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(ctx.device)
    return torch.cuda.memory_allocated(ctx.device)


def per_rank(ctx: runtime.Context, value: float | None) -> tuple[float | None, ...]:
    """One number from every rank (an all_reduce of a one-hot vector); None stays None."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(ctx.world_size, dtype=torch.float64, device=ctx.device)
    t[ctx.rank] = math.nan if value is None else value
    dist.all_reduce(t)
    return tuple(None if math.isnan(v) else v for v in t.tolist())


def _timed_rounds(ctx: runtime.Context, p: Params, cfg: Config, losses: list[Any], rounds: list[float]) -> list[float]:
    """``p.repeats`` rounds of ``p.steps`` timed steps: each step's loss appended to ``losses``, each round's median
    step (ms) to ``rounds`` as it ends; every step's time (ms)."""
    all_ms: list[float] = []
    for _ in range(p.repeats):
        timer = ctx.timer()
        for _ in range(p.steps):
            with timer:
                losses.append(cfg.step())
        times = [1e3 * t for t in timer.seconds()]
        rounds.append(statistics.median(times))
        all_ms += times
    return all_ms


def _nosync_step_ms(ctx: runtime.Context, p: Params, cfg: Config) -> float:
    """The median step (ms) under ``no_sync``: no gradient exchange, no bucket copies."""
    with cfg.model.no_sync():  # every rank follows its own gradients from here: timing only
        for _ in range(min(2, p.warmup)):
            cfg.step()
        timer = ctx.timer()
        for _ in range(p.steps):
            with timer:
                cfg.step()
    return statistics.median(1e3 * t for t in timer.seconds())


def measure(ctx: runtime.Context, p: Params, name: str, batch: int) -> Row:
    """One configuration: counted bytes, timed rounds, memory, communication share, loss per step."""
    import torch

    v = configuration(name)
    micro = p.accumulation if v.micro_batches else 1
    world = 1 if v.alone else ctx.world_size
    row: dict[str, Any] = {  # the Row's fields, as they are measured
        "variant": name,
        "code": v.code,
        "per_gpu_batch": batch,
        "accumulation": micro,
        "world_size": world,
        "global_batch": batch * world,
    }
    peak = at_optimizer = None
    rounds: list[float] = []
    try:
        if v.alone and not ctx.is_main:
            row["status"] = "idle: rank 0 measures one GPU alone"  # this rank waits (below, in per_rank)
            raise _Idle
        if p.count:
            row.update(dataclasses.asdict(count_bytes(ctx, p, name, batch)))
            if not v.alone:  # the counting copy's buckets (rank 0 alone has no DDP, and no peer to settle with)
                _settle(ctx)
        base_bytes = _memory_start(ctx)
        cfg = build(ctx, p, name, batch)
        first = ctx.timer(host=True)
        with first:
            losses = [cfg.step()]
        row["first_step_s"] = first.seconds()[0]  # with torch.compile: the compilation
        losses += [cfg.step() for _ in range(p.warmup - 1)]
        at_step: list[int] = []  # memory when every gradient exists (what gradient_as_bucket_view shrinks)
        hook = (
            cfg.optimizer.register_step_pre_hook(lambda *_: at_step.append(torch.cuda.memory_allocated(ctx.device)))
            if ctx.is_gpu
            else None
        )
        all_ms = _timed_rounds(ctx, p, cfg, losses, rounds)
        if hook is not None:
            hook.remove()
            at_optimizer = (max(at_step) - base_bytes) / 1e9 if at_step else None
            peak = (torch.cuda.max_memory_allocated(ctx.device) - base_bytes) / 1e9
        row.update(
            {
                "loss_curve": tuple(torch.stack(losses).tolist()),
                "step_ms_rounds": tuple(rounds),
                "step_ms": statistics.median(all_ms),
                "step_ms_min": min(all_ms),
                "step_ms_max": max(all_ms),
            }
        )
        row["samples_per_s"] = row["global_batch"] / (row["step_ms"] / 1e3)
        if p.comm_share and v.comm_share_note is not None:
            row["comm_share_note"] = v.comm_share_note
        elif p.comm_share:
            row["nosync_step_ms"] = _nosync_step_ms(ctx, p, cfg)
            row["comm_share"] = 1.0 - row["nosync_step_ms"] / row["step_ms"]
        row["status"] = "ok"
    except _Idle:
        pass
    except Exception as exc:  # noqa: BLE001 - a variant that fails on this machine is a result, not a crash
        first_line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        row["status"] = f"failed: {type(exc).__name__}: {first_line}"
        print(f"rank {ctx.rank}: variant {name!r} failed: {type(exc).__name__}: {exc}", flush=True)
    finally:
        cfg = None
        if v.cleanup is not None:
            v.cleanup()
    row["step_ms_per_rank"] = per_rank(ctx, statistics.median(rounds) if rounds else None)
    row["peak_mem_gb_per_rank"] = per_rank(ctx, peak)
    row["peak_mem_gb"] = row["peak_mem_gb_per_rank"][0]
    row["optimizer_mem_gb_per_rank"] = per_rank(ctx, at_optimizer)
    row["optimizer_mem_gb"] = row["optimizer_mem_gb_per_rank"][0]
    _settle(ctx)  # every rank is here: this configuration's buckets go before the next one's base
    return Row(**row)


def tf32_convolutions(ctx: runtime.Context) -> bool | None:
    """Whether fp32 convolutions run on TF32 tensor cores here: cuDNN's switch, on by default, and a GPU that has
    them (compute capability 8.0 or later: Ampere on); None on the CPU."""
    import torch

    if not ctx.is_gpu:
        return None
    return bool(torch.backends.cudnn.allow_tf32) and torch.cuda.get_device_capability(ctx.device) >= (8, 0)


# ---------------------------------------------------------------------------------------------
def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch

    from nvtutorial.models.unet import build_unet, count_parameters

    if not ctx.is_gpu:
        # One thread per process: a 1-process and a 2-process CPU run then use one core per
        # "GPU" each, and the processes do not fight over cores (the CPU is a simulation).
        torch.set_num_threads(1)
    configs = [(name, batch) for name in p.variants for batch in p.batch_sizes]
    configs += [(SOLO, p.one_gpu_batch)] if p.one_gpu_batch else []
    for prepare in dict.fromkeys(f for name, _ in configs if (f := configuration(name).prepare) is not None):
        try:
            prepare()
        except Exception as exc:  # noqa: BLE001 - a head start missed: the configurations still run
            print(
                f"rank {ctx.rank}: {prepare.__name__} failed, the run goes on: {type(exc).__name__}: {exc}", flush=True
            )
    with torch.device("meta"):  # counted without initialising 31 M weights
        model_params = count_parameters(build_unet(p.model))
    # DDP imports torch._dynamo: a big heap. Freeze what exists now, so that the collection before
    # each configuration (which frees the previous model's reference cycles) stays quick.
    import torch._dynamo  # noqa: F401

    gc.collect()
    gc.freeze()
    if p.prime and ctx.is_gpu:  # (on the CPU there are no clocks to ramp up nor kernels to autotune)
        measure(ctx, dataclasses.replace(p, repeats=2, steps=1, comm_share=False, count=False), *configs[0])
    rows = []
    todo = configs + ([configs[0]] if p.aa else [])
    for i, (name, batch) in enumerate(todo):
        ctx.progress(i, len(todo), "configurations", variant=name, batch=batch)
        repeat = p.aa and i == len(todo) - 1  # the A/A repeat: timed again, its bytes are the first's
        row = measure(ctx, dataclasses.replace(p, count=False) if repeat else p, name, batch)
        rows.append(dataclasses.replace(row, aa_repeat=repeat))
    ctx.progress(len(todo), len(todo), "configurations")
    gc.unfreeze()
    return Rank(
        device=str(ctx.device),
        world_size=ctx.world_size,
        model=p.model,
        model_params=model_params,
        image_size=p.image_size,
        tf32_convolutions=tf32_convolutions(ctx),
        precision="bf16 autocast" if ctx.is_gpu else "fp32",
        rows=tuple(rows),
        cpu_threads=torch.get_num_threads(),
        cpu_cores=os.cpu_count(),
    )


if __name__ == "__main__":
    runtime.main(run, Params)
