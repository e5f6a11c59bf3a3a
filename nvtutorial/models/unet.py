"""The course's model: a UNet for semantic segmentation (the source tutorial's example).

Used in notebooks 03 and 04 (and by the profiling and compression workloads). Three sizes:

* ``tiny``  (base 8 channels, 3 levels, about 0.1 M parameters): CPU tests;
* ``small`` (base 16 channels, 4 levels, about 1.9 M parameters): CPU notebooks;
* ``full``  (base 64 channels, 4 levels, about 31 M parameters): the classic UNet of
  Ronneberger et al. (2015), sized for an H200.

Normalisation is GroupNorm rather than BatchNorm: the model then has no buffers, so DDP has
nothing to broadcast before each forward, every rank holds exactly the same model, and
evaluation in eval mode does not depend on which rank's running statistics are used.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

Size = Literal["tiny", "small", "full"]

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"base": 8, "depth": 3},
    "small": {"base": 16, "depth": 4},
    "full": {"base": 64, "depth": 4},
}


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, channels), channels)


class DoubleConv(nn.Sequential):
    """(3×3 convolution, GroupNorm, ReLU) twice."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            _norm(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            _norm(cout),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """Encoder–decoder with skip connections: NCHW images in, ``(N, classes, H, W)`` logits out.

    ``H`` and ``W`` must be divisible by ``2 ** depth``.
    """

    def __init__(self, in_channels: int = 3, classes: int = 4, base: int = 64, depth: int = 4) -> None:
        super().__init__()
        if classes < 2:
            raise ValueError(f"classes={classes}: a segmentation model needs at least 2 classes")
        self.depth = depth
        self.classes = classes
        widths = [base * 2**i for i in range(depth + 1)]
        self.encoders = nn.ModuleList()
        cin = in_channels
        for w in widths[:-1]:
            self.encoders.append(DoubleConv(cin, w))
            cin = w
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = DoubleConv(widths[-2], widths[-1])
        self.upsamplers = nn.ModuleList()
        self.decoders = nn.ModuleList()
        for w in reversed(widths[:-1]):
            self.upsamplers.append(nn.ConvTranspose2d(w * 2, w, kernel_size=2, stride=2))
            self.decoders.append(DoubleConv(w * 2, w))
        self.head = nn.Conv2d(widths[0], classes, kernel_size=1)
        self.checkpointing = False
        """Activation checkpointing: keep only each block's input during the forward and
        recompute the block in the backward (less memory, about one more forward of time)."""

    def _block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointing and self.training and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(block, x, use_reentrant=False)
        return block(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        multiple = 2**self.depth
        if x.shape[-1] % multiple or x.shape[-2] % multiple:
            raise ValueError(
                f"image size {tuple(x.shape[-2:])} must be divisible by {multiple} for a UNet of depth {self.depth}"
            )
        skips = []
        for enc in self.encoders:
            x = self._block(enc, x)
            skips.append(x)
            x = self.pool(x)
        x = self._block(self.bottleneck, x)
        for up, dec, skip in zip(self.upsamplers, self.decoders, reversed(skips)):
            x = self._block(dec, torch.cat([up(x), skip], dim=1))
        return self.head(x)


def build_unet(size: Size = "small", classes: int = 4) -> UNet:
    """A UNet of a named size (``tiny``, ``small`` or ``full``); see the module docstring."""
    if size not in SIZES:
        raise ValueError(f"size={size!r}: use one of {', '.join(SIZES)}")
    return UNet(in_channels=3, classes=classes, **SIZES[size])


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def min_image_size(size: Size) -> int:
    """Smallest image side a UNet of this size accepts (``2 ** depth``)."""
    return 2 ** SIZES[size]["depth"]
