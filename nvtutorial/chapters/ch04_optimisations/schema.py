"""What the ``attention_sdp`` workload returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload_attention.py``, on the ranks) returns one :class:`Rank` per rank: the SDPA switches as found
and after, which backends run here, the attention block timed per setting, and the course UNet's SDPA calls and its
forward + backward (no optimizer) with flash on and off. The kernel side reads it back typed
(``result.metrics_as(Rank)``, ``report.py``). Every time is one call per repeat, after ``warmup`` untimed calls, timed
with CUDA events on the current stream on a GPU and the host clock on the CPU (``ctx.time_calls``).

The committed run on one H200 of the 2× H200 machine (``reference/h200x2/runs/attention_sdp-*``, ``nproc=1``) timed
10 repeats per setting but kept only their median (the repeats themselves were not saved), and did not time flash-on
again at the end: :meth:`Rank.upgrade` fills in what it lacks.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from nvtutorial.params import require

NAME = "attention_sdp"
"""The workload's name (``nvtutorial.run("attention_sdp", ...)``, ``nvtutorial list``), declared here
once: ``workload_attention.py`` imports it."""
BackendName = Literal["MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"]
BACKENDS: tuple[BackendName, ...] = ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
"""The SDPA backends tried, in order (``torch.nn.attention.SDPBackend`` names)."""
DType = Literal["fp32", "fp16", "bf16"]


@dataclasses.dataclass(frozen=True)
class Params:
    """What an ``attention_sdp`` run is asked for (``--set KEY=VALUE``). Checked here where the check needs nothing
    but the values; the workload's ``Params`` (a subclass) adds the UNet's image size, which its depth decides."""

    batch: int = 8
    heads: int = 16
    seq: int = 2048
    head_dim: int = 64
    dtype: Literal["auto", "fp32", "fp16", "bf16"] = "auto"  # auto: bf16 on GPU, fp32 on CPU
    warmup: int = 3
    repeats: int = 10
    unet: Literal["tiny", "small", "full"] = "small"
    unet_image_size: int = 64
    unet_batch: int = 4

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "seq", "head_dim", "repeats", "unet_batch"):
            require(getattr(self, name) >= 1, f"{name}={getattr(self, name)} must be at least 1")
        require(self.warmup >= 0, f"warmup={self.warmup} must be 0 or more")
        require(self.repeats >= 2, f"repeats={self.repeats}: at least 2, or a comparison cannot know its noise")


@dataclasses.dataclass(frozen=True)
class Switches:
    """``torch.backends.cuda``'s SDPA switches (None: not in this torch)."""

    flash_sdp_enabled: bool
    mem_efficient_sdp_enabled: bool
    math_sdp_enabled: bool
    cudnn_sdp_enabled: bool | None
    flash_attention_built: bool | None
    """``is_flash_attention_available()``: this torch was built with FlashAttention."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """The attention block's input: ``batch × seq`` tokens of ``heads × head_dim`` features."""

    batch: int
    heads: int
    seq: int
    head_dim: int


@dataclasses.dataclass(frozen=True)
class Backend:
    """One SDPA backend forced alone (``sdpa_kernel([backend])``) on the attention block."""

    backend: BackendName
    runs: bool
    ops: tuple[str, ...] = ()
    """The ATen attention operators it ran (``math (matmul + softmax)`` for the math backend); empty if it did not."""
    why: str = ""
    """Why it did not run (the error's first line); empty if it ran."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """The attention block, forward + backward, under one setting of the switches."""

    setting: str
    """``default switches``, ``enable_flash_sdp(False)`` or ``sdpa_kernel(<backend>)``."""
    ops: tuple[str, ...]
    """The ATen attention operators it ran: the kernel SDPA picked."""
    ms: float
    """Median time of one forward + backward over the repeats (ms; CUDA events on a GPU, the host clock on the
    CPU)."""
    ms_all: tuple[float, ...] = ()
    """Every repeat (ms); empty where the run kept only the median (the committed run)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class UNet:
    """The course UNet: its SDPA calls, and its forward + backward (under autocast unless fp32; no optimizer, the
    gradients accumulating) with flash on, off and on again. Times are medians over the repeats, ms: CUDA events on
    a GPU, the host clock on the CPU."""

    model: Literal["tiny", "small", "full"]
    sdpa_calls: int
    """``scaled_dot_product_attention`` calls in one forward + backward of the UNet."""
    attention_block_sdpa_calls: int
    """The same count for the attention block (1): the counter counts."""
    ms_flash_on: float
    """Median forward + backward with flash on (ms; no optimizer step)."""
    ms_flash_on_all: tuple[float, ...] = ()
    ms_flash_off: float
    """Median forward + backward with flash off (ms; no optimizer step)."""
    ms_flash_off_all: tuple[float, ...] = ()
    ms_flash_on_again: float | None = None
    """Flash on again, after: the A/A pair of the first measurement (ms); None where not measured."""
    ms_flash_on_again_all: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rank:
    """One rank's result: its own device measured."""

    device: str
    dtype: DType
    """The attention block's dtype (and the UNet's autocast dtype unless fp32)."""
    defaults: Switches
    """The switches as found, before anything was changed."""
    shape: Shape
    backends: tuple[Backend, ...]
    attention: tuple[Setting, ...]
    """Default switches, flash switched off, then each backend that runs, forced."""
    unet: UNet
    after: Switches
    """The switches as read at the end (equal to ``defaults`` when the switches were restored)."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """An older layout as today's: the committed run (one H200) timed 10 repeats per setting but kept only their
        median, and did not time flash-on again at the end, so each setting's and the UNet's repeats are empty and
        the second flash-on time is None; a backend that did not run lists no operators."""
        data["backends"] = [{"ops": [], **b} for b in data.get("backends", ())]
        data["attention"] = [{"ms_all": [], **s} for s in data.get("attention", ())]
        if isinstance(data.get("unet"), dict):
            unet = data["unet"]
            data["unet"] = {
                "ms_flash_on_all": [],
                "ms_flash_off_all": [],
                "ms_flash_on_again": None,
                "ms_flash_on_again_all": [],
                **unet,
            }
        return data

    def setting(self, name: str) -> Setting | None:
        """The attention block's timing under setting ``name``."""
        return next((s for s in self.attention if s.setting == name), None)
