"""A synthetic, deterministic and learnable segmentation set: coloured shapes and their masks.

Used in notebooks 03 and 04. Each image holds one to four shapes on a noisy background; the
class of a shape decides its form (disc, square, diamond) and its base colour, so a UNet learns
it in a few hundred steps and loss and IoU really improve. Class 0 is the background.

Sample ``i`` of a set with seed ``s`` is a pure function of ``(i, s, image_size, classes)``:
the shape parameters come from a ``torch.Generator`` seeded with ``(s, i)`` and the pixel noise
from one fixed texture shifted per sample, so :func:`render` draws exactly the same samples in a ``DataLoader``
worker on the CPU and in one batched call on a GPU (``render(..., device="cuda")``), which is
how the scaling runs take the input pipeline out of the measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MAX_SHAPES = 4

# Base colours per class (RGB in [0, 1]); classes beyond the table cycle through it, darker.
_COLOURS = torch.tensor(
    [
        [0.15, 0.15, 0.15],  # background (its colour is randomised around this)
        [0.90, 0.25, 0.20],
        [0.20, 0.75, 0.30],
        [0.25, 0.35, 0.95],
        [0.95, 0.85, 0.20],
        [0.80, 0.30, 0.85],
        [0.20, 0.85, 0.85],
    ]
)


def _colour(cls: int) -> torch.Tensor:
    if cls == 0:
        return _COLOURS[0]
    k = 1 + (cls - 1) % (len(_COLOURS) - 1)
    return _COLOURS[k] * (0.7 ** ((cls - 1) // (len(_COLOURS) - 1)))


def shape_parameters(index: int, seed: int, classes: int) -> torch.Tensor:
    """``[MAX_SHAPES, 8]`` rows ``(valid, class, cx, cy, radius, r, g, b)`` for sample ``index``."""
    g = torch.Generator().manual_seed((seed % 1_000_003) * 1_000_003 + index)
    n = int(torch.randint(1, MAX_SHAPES + 1, (1,), generator=g))
    u = torch.rand(MAX_SHAPES, 7, generator=g)
    rows = torch.zeros(MAX_SHAPES, 8)
    for k in range(MAX_SHAPES):
        cls = 1 + int(u[k, 0] * (classes - 1)) if classes > 1 else 0
        cls = min(cls, classes - 1)
        colour = (_colour(cls) + 0.2 * (u[k, 4:7] - 0.5)).clamp(0, 1)
        rows[k] = torch.cat(
            [
                torch.tensor(
                    [
                        float(k < n),
                        float(cls),
                        0.15 + 0.7 * float(u[k, 1]),
                        0.15 + 0.7 * float(u[k, 2]),
                        0.08 + 0.14 * float(u[k, 3]),
                    ]
                ),
                colour,
            ]
        )
    return rows


_NOISE_CACHE: dict[tuple[int, int], torch.Tensor] = {}


def _noise_texture(seed: int, image_size: int) -> torch.Tensor:
    """A fixed uniform noise texture in [-0.5, 0.5) for this seed and size, tiled 2×2: ``[3, 2H, 2W]``."""
    key = (seed, image_size)
    if key not in _NOISE_CACHE:
        g = torch.Generator().manual_seed(seed * 31 + 17)
        tex = torch.rand(3, image_size, image_size, generator=g) - 0.5
        _NOISE_CACHE[key] = tex.repeat(1, 2, 2)  # tiled 2×2: a shifted copy is a slice
    return _NOISE_CACHE[key]


def _sample_noise(offsets: torch.Tensor, seed: int, image_size: int, device: torch.device) -> torch.Tensor:
    """Per-sample noise: the texture shifted (cyclically) by each sample's ``(dy, dx)``; exact on any device."""
    tex = _noise_texture(seed, image_size).to(device)
    n = image_size
    shifts = offsets.tolist()
    if not shifts:
        return tex.new_zeros(0, 3, n, n)
    if len(shifts) == 1:
        dy, dx = shifts[0]
        return tex[:, dy : dy + n, dx : dx + n].unsqueeze(0)
    return torch.stack([tex[:, dy : dy + n, dx : dx + n] for dy, dx in shifts])


def render(
    indices: Sequence[int] | torch.Tensor,
    image_size: int,
    classes: int = 4,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples ``indices`` as a batch: images ``[B, 3, H, W]`` float32, masks ``[B, H, W]`` int64."""
    device = torch.device(device)
    idx = [int(i) for i in (indices.tolist() if isinstance(indices, torch.Tensor) else indices)]
    b = len(idx)
    params = torch.stack([shape_parameters(i, seed, classes) for i in idx]) if b else torch.zeros(0, MAX_SHAPES, 8)
    extra = (
        torch.stack([torch.rand(5, generator=torch.Generator().manual_seed(seed * 7919 + i)) for i in idx])
        if b
        else torch.zeros(0, 5)
    )
    background = _colour(0) + 0.15 * extra[:, :3]  # [B, 3]
    offsets = (extra[:, 3:5] * image_size).long().clamp_(max=image_size - 1)
    # Slot 0 is the background; slot k+1 is shape k. A later shape covers an earlier one.
    palette = torch.cat([background.unsqueeze(1), params[:, :, 5:8]], dim=1).to(device)  # [B, 1+S, 3]
    class_of_slot = torch.cat([torch.zeros(b, 1), params[:, :, 1]], dim=1).long().to(device)  # [B, 1+S]
    params = params.to(device)
    coords = (torch.arange(image_size, device=device, dtype=torch.float32) + 0.5) / image_size
    yy, xx = coords.view(1, -1, 1), coords.view(1, 1, -1)
    slot = torch.zeros(b, image_size, image_size, dtype=torch.int64, device=device)
    for k in range(MAX_SHAPES):
        valid, kind = params[:, k, 0].view(b, 1, 1) > 0, ((params[:, k, 1].long() - 1) % 3).view(b, 1, 1)
        cx, cy, r = (params[:, k, j].view(b, 1, 1) for j in (2, 3, 4))
        adx, ady = (xx - cx).abs(), (yy - cy).abs()
        # disc (kind 0), square (kind 1), diamond (kind 2), as one distance test
        dist = torch.where(
            kind == 0,
            (adx * adx + ady * ady).sqrt(),
            torch.where(kind == 1, torch.maximum(adx, ady) / 0.85, (adx + ady) / 1.2),
        )
        slot.masked_fill_((dist < r) & valid, k + 1)
    flat = slot.view(b, -1)
    mask = torch.gather(class_of_slot, 1, flat).view(b, image_size, image_size)
    colour = torch.gather(palette, 1, flat.unsqueeze(-1).expand(-1, -1, 3))  # [B, H*W, 3]
    image = colour.transpose(1, 2).reshape(b, 3, image_size, image_size)
    shade = (0.1 * (xx - 0.5)).unsqueeze(1) * (slot == 0).unsqueeze(1)  # a gentle gradient on the background
    image = image + shade + 0.25 * _sample_noise(offsets, seed, image_size, device)
    return image.clamp_(0, 1), mask


class ShapesDataset(torch.utils.data.Dataset):
    """Item ``i``: ``(image float32 [3, H, W], mask int64 [H, W])``; same seed, same data."""

    def __init__(self, samples: int, image_size: int, classes: int = 4, seed: int = 0) -> None:
        if samples < 1:
            raise ValueError(f"samples={samples} must be at least 1")
        if image_size < 8:
            raise ValueError(f"image_size={image_size} must be at least 8")
        if classes < 2:
            raise ValueError(f"classes={classes} must be at least 2 (background and one shape)")
        self.samples, self.image_size, self.classes, self.seed = samples, image_size, classes, seed

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.samples:
            raise IndexError(f"index {index} out of range for {self.samples} samples")
        images, masks = render([index], self.image_size, self.classes, self.seed)
        return images[0], masks[0]

    def render(
        self, indices: Sequence[int] | torch.Tensor, device: str | torch.device = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of this set's samples, drawn directly on ``device``."""
        return render(indices, self.image_size, self.classes, self.seed, device)


def make_dataset(samples: int, image_size: int, classes: int = 4, seed: int = 0) -> ShapesDataset:
    """The course's synthetic segmentation set (see the module docstring)."""
    return ShapesDataset(samples, image_size, classes, seed)


class DeviceShapes(torch.utils.data.Dataset):
    """A :class:`ShapesDataset` rendered once onto a device; ``ds[list_of_indices]`` is a batch.

    Used with ``DataLoader(DeviceShapes(...), sampler=BatchSampler(DistributedSampler(...)),
    batch_size=None)``: the DistributedSampler still decides which samples each rank sees, but
    a batch is one gather on the device instead of an input pipeline. The gather is cheap, not free:
    it reads and writes the batch once (about 42 MB for 32 images of 256×256 and their masks), plus an index
    copy and two kernel launches: 72 µs per batch of 32 between CUDA events recorded around the call (median of
    50; 69 µs for 16, so the fixed costs, not the bytes, dominate) on one H100 80GB HBM3 with torch 2.11.0+cu130
    (``scripts/one_gpu_03_04.py gather``, 2026-12-07: ``reference/h100x1/gather-2026-12-07.json``), about 0.1 % of
    a training step of about 75 ms there (04's bf16 step: ``reference/h100x1/README.md``). At the CPU simulation's
    sizes (8 images of 8×8) it took 15 µs against a step of 40–70 ms (the course's 2-core test
    machine, host clock, median of 50).
    """

    def __init__(self, base: ShapesDataset, device: str | torch.device, chunk: int = 64) -> None:
        self.base = base
        images, masks = [], []
        for start in range(0, len(base), chunk):
            im, m = base.render(range(start, min(start + chunk, len(base))), device)
            images.append(im)
            masks.append(m)
        self.images, self.masks = torch.cat(images), torch.cat(masks)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, indices: int | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(indices, int):
            return self.images[indices], self.masks[indices]
        idx = torch.as_tensor(list(indices), dtype=torch.int64)
        if self.images.is_cuda:  # a pinned, non-blocking copy: no host–device synchronisation per batch
            idx = idx.pin_memory().to(self.images.device, non_blocking=True)
        return self.images.index_select(0, idx), self.masks.index_select(0, idx)
