"""attention_sdp: what torch.backends.cuda.enable_flash_sdp changes (claim C9): attention only.

Used in notebook 04. The source lists ``torch.backends.cuda.enable_flash_sdp(True)`` as an
NVLink optimisation. It is a switch that lets ``scaled_dot_product_attention`` (SDPA) pick the
FlashAttention kernel; it is on by default, it has nothing to do with NVLink, and a UNet, which
calls no SDPA, is untouched by it. This workload shows all three on this machine:

1. the switches' values as found (defaults) and which SDPA backends run here (each tried in
   turn with ``torch.nn.attention.sdpa_kernel``; on a CPU only some exist);
2. a small self-attention block, forward + backward timed with the default switches, with
   ``enable_flash_sdp(False)``, and with each backend forced, naming the kernel that ran;
3. the course UNet: how many SDPA calls one forward makes (none), and its forward + backward
   time with flash on and off.

Every rank measures its own device and returns a :class:`~nvtutorial.chapters.ch04_optimisations.schema.Rank`; run it
with one process:

    torchrun --standalone --nproc-per-node 1 -m nvtutorial.chapters.ch04_optimisations.workload_attention --set seq=2048
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial import runtime
from nvtutorial.chapters.ch04_optimisations import schema
from nvtutorial.chapters.ch04_optimisations.schema import (
    BACKENDS,
    Backend,
    DType,
    Rank,
    Setting,
    Shape,
    Switches,
    UNet,
)
from nvtutorial.chapters.ch04_optimisations.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.models.unet import SIZES
from nvtutorial.params import require

if TYPE_CHECKING:
    import torch


class Params(schema.Params):
    """:class:`~.schema.Params`, with the UNet's image size checked against its depth (the rank side's model)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        multiple = 2 ** SIZES[self.unet]["depth"]
        require(
            self.unet_image_size % multiple == 0 and self.unet_image_size >= 8,
            f"unet_image_size={self.unet_image_size} must be a multiple of {multiple} for the {self.unet} UNet",
        )


def _dtype(p: Params, is_gpu: bool) -> tuple[torch.dtype, DType]:
    import torch

    name: DType = p.dtype if p.dtype != "auto" else ("bf16" if is_gpu else "fp32")
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name], name


def attention_block(dim: int, heads: int):
    """A minimal self-attention block (an ``nn.Module``): qkv projection, SDPA, output projection."""
    import torch
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.out = nn.Linear(dim, dim, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, d = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return self.out(y.transpose(1, 2).reshape(b, n, d))

    return SelfAttention()


def sdpa_ops(fn: Callable[[], Any]) -> list[str]:
    """Names of the ATen attention operators ``fn`` runs: which SDPA kernel was picked.

    The math backend has no operator of its own (it is matmuls and a softmax): it shows as
    ``math (matmul + softmax)``.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []
    softmax = False

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal softmax
            name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
            if "attention" in name and name not in seen:
                seen.append(name)
            softmax = softmax or "softmax" in name
            return func(*args, **(kwargs or {}))

    with Spy():
        fn()
    if not seen and softmax:
        seen.append("math (matmul + softmax)")
    return seen


def count_sdpa_calls(fn: Callable[[], Any]) -> int:
    """How many times ``fn`` calls ``torch.nn.functional.scaled_dot_product_attention``."""
    import torch
    from torch.overrides import TorchFunctionMode

    calls = 0

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            nonlocal calls
            if func is torch.nn.functional.scaled_dot_product_attention:
                calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return calls


def _time(ctx: runtime.Context, fn: Callable[[], Any], warmup: int, repeats: int) -> list[float]:
    """Milliseconds of each of ``repeats`` calls of ``fn`` after ``warmup`` (CUDA events on GPU, perf_counter on
    CPU)."""
    for _ in range(warmup):
        fn()
    return [1e3 * ctx.time_calls(fn) for _ in range(repeats)]


def _timed(ctx: runtime.Context, fn: Callable[[], Any], p: Params) -> tuple[float, tuple[float, ...]]:
    """The median and every repeat (ms): the repeats let a comparison know its noise."""
    times = _time(ctx, fn, p.warmup, p.repeats)
    return statistics.median(times), tuple(times)


def flags() -> Switches:
    import torch

    b = torch.backends.cuda
    return Switches(
        flash_sdp_enabled=b.flash_sdp_enabled(),
        mem_efficient_sdp_enabled=b.mem_efficient_sdp_enabled(),
        math_sdp_enabled=b.math_sdp_enabled(),
        cudnn_sdp_enabled=b.cudnn_sdp_enabled() if hasattr(b, "cudnn_sdp_enabled") else None,
        flash_attention_built=b.is_flash_attention_available() if hasattr(b, "is_flash_attention_available") else None,
    )


@contextlib.contextmanager
def flash_switch(enabled: bool):
    """``torch.backends.cuda.enable_flash_sdp(enabled)`` for the duration, then restored."""
    import torch

    before = torch.backends.cuda.flash_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.enable_flash_sdp(before)


def _backends(attention_step: Callable[[], Any]) -> list[Backend]:
    """Each of :data:`BACKENDS`: whether it runs ``attention_step`` here, and the ops it runs (or why it cannot)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = []
    for name in BACKENDS:
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            backends.append(Backend(name, runs=False, why="not in this torch"))
            continue
        try:
            with sdpa_kernel([backend]):
                ops = sdpa_ops(attention_step)
            backends.append(Backend(name, runs=True, ops=tuple(ops), why=""))
        except RuntimeError as exc:
            first = next((ln for ln in str(exc).splitlines() if ln.strip()), "")
            backends.append(Backend(name, runs=False, why=first[:200]))
    return backends


def _unet(ctx: runtime.Context, p: Params, dtype: torch.dtype, attention_step: Callable[[], Any]) -> UNet:
    """The UNet's step timed with flash attention on, off and on again (its A/A gap), and the SDPA calls it and the
    attention block make."""
    import torch

    from nvtutorial.models.unet import build_unet

    net = build_unet(p.unet).to(ctx.device)
    images = torch.randn(p.unet_batch, 3, p.unet_image_size, p.unet_image_size, device=ctx.device)
    amp = (
        torch.autocast(device_type=ctx.device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    )

    def unet_step() -> None:
        with amp:
            y = net(images)
        y.float().mean().backward()

    sdpa_calls, block_calls = count_sdpa_calls(unet_step), count_sdpa_calls(attention_step)
    with flash_switch(True):
        on = _timed(ctx, unet_step, p)
    with flash_switch(False):
        off = _timed(ctx, unet_step, p)
    with flash_switch(True):  # the same setting again: the A/A gap of this measurement
        again = _timed(ctx, unet_step, p)
    return UNet(
        model=p.unet,
        sdpa_calls=sdpa_calls,
        attention_block_sdpa_calls=block_calls,
        ms_flash_on=on[0],
        ms_flash_on_all=on[1],
        ms_flash_off=off[0],
        ms_flash_off_all=off[1],
        ms_flash_on_again=again[0],
        ms_flash_on_again_all=again[1],
    )


def run(ctx: runtime.Context, p: Params) -> Rank:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype, dtype_name = _dtype(p, ctx.is_gpu)
    if not ctx.is_gpu:
        torch.set_num_threads(1)  # steady CPU timings (the CPU run is a simulation anyway)
    torch.manual_seed(0)
    dim = p.heads * p.head_dim
    block = attention_block(dim, p.heads).to(ctx.device, dtype)
    x = torch.randn(p.batch, p.seq, dim, device=ctx.device, dtype=dtype, requires_grad=True)

    def attention_step() -> None:
        block(x).float().square().mean().backward()

    defaults = flags()
    backends = _backends(attention_step)  # 1. which backends run here
    ctx.progress(1, 3, "attention")

    # 2. timings: default switches, flash switched off, each runnable backend forced
    def setting(name: str, ops: Sequence[str]) -> Setting:
        ms, ms_all = _timed(ctx, attention_step, p)
        return Setting(name, tuple(ops), ms, ms_all)

    rows = [setting("default switches", sdpa_ops(attention_step))]
    with flash_switch(False):
        rows.append(setting("enable_flash_sdp(False)", sdpa_ops(attention_step)))
    for b in backends:
        if b.runs:
            with sdpa_kernel([getattr(SDPBackend, b.backend)]):
                rows.append(setting(f"sdpa_kernel({b.backend})", b.ops))
    ctx.progress(2, 3, "attention")
    unet = _unet(ctx, p, dtype, attention_step)  # 3. the UNet: no SDPA at all, so the switch cannot matter
    after = flags()  # restored: the switches are as found
    ctx.progress(3, 3, "attention")
    return Rank(
        device=str(ctx.device),
        dtype=dtype_name,
        defaults=defaults,
        shape=Shape(p.batch, p.heads, p.seq, p.head_dim),
        backends=tuple(backends),
        attention=tuple(rows),
        unet=unet,
        after=after,
    )


if __name__ == "__main__":
    runtime.main(run, Params)
