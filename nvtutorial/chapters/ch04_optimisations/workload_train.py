"""Notebook 04's optimisations as variants of chapter 03's ``train`` workload.

Each variant is the code of ``nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py`` with one function swapped
for its version in ``nvtutorial/chapters/ch04_optimisations/lessons/ddp_optimised.py`` (:data:`VARIANTS` names it).
The ``train`` workload (``ch03_ddp_training/workload.py``) finds this file by its name and adds these variants to its
own, so a run is still ``nvtutorial.run("train", params={"variants": (...)})``:

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch03_ddp_training.workload \\
        --set model=full --set image_size=256 --set batch_sizes=32 --set variants=baseline,fp32,fp16
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nvtutorial.chapters.ch03_ddp_training.workload import Parts, Variant
from nvtutorial.models.unet import Size
from nvtutorial.params import require

if TYPE_CHECKING:
    from torch import Tensor

VARIANTS = {
    "fp16": "ddp_optimised.train_step_fp16(..., scaler=torch.amp.GradScaler(device.type))",
    "gradient_as_bucket_view=True": "ddp_optimised.wrap_ddp_tuned(model, device, gradient_as_bucket_view=True)",
    "bucket_cap_mb=N": "ddp_optimised.wrap_ddp_tuned(model, device, bucket_cap_mb=N)",
    "static_graph=True": "ddp_optimised.wrap_ddp_tuned(model, device, static_graph=True)",
    "no_sync accumulation": "ddp_optimised.train_step_accumulated(model, optimizer, micro_batches, ...)",
    "accumulation without no_sync": "ddp_optimised.train_step_accumulated_every_micro_batch(...)",
    "channels_last": "ddp_optimised.build_model_channels_last",
    "activation checkpointing": "ddp_optimised.build_model_checkpointed",
    "torch.compile": "ddp_optimised.build_model_compiled",
}
"""What each variant runs: the lesson's code with the function named here swapped in."""
NOTE = "N a number of MiB"
"""What the menu's ``bucket_cap_mb=N`` stands for."""
BUCKETS = re.compile(r"^bucket_cap_mb=([0-9.]+)$")
ACCUMULATING = ("no_sync accumulation", "accumulation without no_sync")
BUILDERS = {
    "channels_last": "build_model_channels_last",
    "activation checkpointing": "build_model_checkpointed",
    "torch.compile": "build_model_compiled",
}
"""Variants that swap ``ddp_train.build_model`` for a ``ddp_optimised`` function of the same arguments."""


def _builder(function: str) -> Callable[[Size, Any, int], Any]:
    """``ddp_optimised.<function>(size, device, seed)``, imported when called (the ranks import torch, not the
    kernel checking a name)."""

    def build(size: Size, device: Any, seed: int = 0) -> Any:
        from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised

        return getattr(ddp_optimised, function)(size, device, seed)

    return build


def _tuned(**options: Any) -> Callable[[Size, Any, int], Any]:
    """``ddp_train.build_model`` with ``ddp_optimised.wrap_ddp_tuned(..., **options)`` for ``wrap_ddp``."""

    def build(size: Size, device: Any, seed: int = 0) -> Any:
        import torch

        from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised
        from nvtutorial.models.unet import build_unet

        torch.manual_seed(seed)
        return ddp_optimised.wrap_ddp_tuned(build_unet(size).to(device), device, **options)

    return build


def _fp16_step(s: Parts) -> Callable[[], Tensor]:
    """``ddp_optimised.train_step_fp16`` with one GradScaler for the configuration (it adapts its scale)."""
    import torch

    from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised

    scaler = torch.amp.GradScaler(s.device.type)
    return lambda: ddp_optimised.train_step_fp16(s.model, s.optimizer, *next(s.batches), s.device, scaler)


def _accumulated_step(function: str) -> Callable[[Parts], Callable[[], Tensor]]:
    """``ddp_optimised.<function>(model, optimizer, micro_batches, device, amp)`` over ``s.micro`` micro-batches."""

    def make(s: Parts) -> Callable[[], Tensor]:
        from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised

        fn = getattr(ddp_optimised, function)
        return lambda: fn(s.model, s.optimizer, [next(s.batches) for _ in range(s.micro)], s.device, s.amp)

    return make


class _DropProfilerNotice(logging.Filter):
    """Dynamo's warning that it leaves out a ``record_function`` range while compiling: DDP's forward wraps itself in
    one (``DistributedDataParallel.forward``), which only a profiler's trace would show; this workload records no
    trace, so the line says nothing a learner can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Profiler record function")


def _start_compile_workers() -> None:
    """Start inductor's compile workers now, as ``torch.compile``'s first call would (its Triton kernels compile in
    them; a kernel that comes before they are up compiles in this process, serially). They are processes of their own
    (one imports torch, then forks the workers, which wait) and use no GPU while the configurations before
    torch.compile's are measured (the baseline's A/A pair, first and last, would show a disturbance); the
    compilation's first step no longer waits for them. Dynamo's notice about DDP's profiler range is dropped
    (:class:`_DropProfilerNotice`)."""
    from torch._inductor import async_compile

    logging.getLogger("torch._dynamo.variables.ctx_manager").addFilter(_DropProfilerNotice())

    warm = getattr(async_compile, "maybe_warm_pool", None)  # (torch's own call, a private module: absent, skipped)
    if warm is not None:
        warm()


def _forget_compiled() -> None:
    """``torch._dynamo.reset()``: the next configuration compiles nothing of this one's."""
    import torch

    torch._dynamo.reset()


def variant(name: str) -> Variant | None:
    """The variant ``name`` (``bucket_cap_mb=N`` with N a positive number of MiB); None for a name not here."""
    m = BUCKETS.match(name)
    if m:
        require(float(m.group(1)) > 0, f"variant {name!r}: bucket_cap_mb must be positive")
        return Variant(VARIANTS["bucket_cap_mb=N"], build_model=_tuned(bucket_cap_mb=float(m.group(1))))
    if name not in VARIANTS or name == "bucket_cap_mb=N":
        return None
    code = VARIANTS[name]
    if name in ("gradient_as_bucket_view=True", "static_graph=True"):
        return Variant(code, build_model=_tuned(**{name.split("=")[0]: True}))
    if name == "fp16":
        return Variant(code, make_step=_fp16_step)
    if name in ACCUMULATING:
        function = (
            "train_step_accumulated" if name == "no_sync accumulation" else ("train_step_accumulated_every_micro_batch")
        )
        return Variant(code, make_step=_accumulated_step(function), micro_batches=True)
    if name == "torch.compile":
        return Variant(
            code,
            build_model=_builder(BUILDERS[name]),
            count_note="not counted with torch.compile (the hooks would change what is compiled)",
            comm_share_note="not measured with torch.compile: a no_sync step would compile another graph",
            cleanup=_forget_compiled,
            prepare=_start_compile_workers,
        )
    return Variant(code, build_model=_builder(BUILDERS[name]))
