"""How sparse gradients are (claim C23): per layer, and what a sparse format would send for them.

Used by the ``compression`` workload of notebook 07, on each rank's own gradients before averaging. The rows and the
summary are :class:`~nvtutorial.chapters.ch07_collectives.schema_compression.DensityRow` and
:class:`~nvtutorial.chapters.ch07_collectives.schema_compression.DensitySummary`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from nvtutorial.chapters.ch07_collectives.schema_compression import DensityRow, DensitySummary


def density_row(
    name: str, grad: torch.Tensor, near_zero: float = 1e-3, energy: float = 0.99, topk_ratio: float = 0.01
) -> DensityRow:
    """How sparse one gradient is: the fraction of entries exactly zero, the fraction below
    ``near_zero × max|g|``, the smallest fraction of entries that holds ``energy`` of its squared
    norm, and the share of the squared norm the top ``topk_ratio`` of entries hold."""
    g = grad.detach().float().reshape(-1)
    n = g.numel()
    mag = g.abs()
    peak = float(mag.max()) if n else 0.0
    sq = torch.sort(mag.square(), descending=True).values
    total = float(sq.sum())
    if total > 0:
        cum = torch.cumsum(sq.double(), 0) / total
        needed = int(torch.searchsorted(cum, torch.tensor([energy], dtype=cum.dtype, device=cum.device)).item()) + 1
        k = max(1, int(math.ceil(topk_ratio * n)))
        topk_share = float(cum[min(k, n) - 1])
    else:
        needed, topk_share = 0, float("nan")
    return DensityRow(
        layer=name,
        numel=n,
        ndim=grad.dim(),
        frac_zero=float((g == 0).sum()) / n if n else float("nan"),
        frac_near_zero=float((mag <= near_zero * peak).sum()) / n if n else float("nan"),
        frac_for_energy=min(needed, n) / n if n else float("nan"),
        topk_energy_share=topk_share,
    )


def gradient_density(
    model: torch.nn.Module, near_zero: float = 1e-3, energy: float = 0.99, topk_ratio: float = 0.01
) -> list[DensityRow]:
    """:func:`density_row` for every parameter of ``model`` that has a gradient."""
    return [
        density_row(n, p.grad, near_zero, energy, topk_ratio) for n, p in model.named_parameters() if p.grad is not None
    ]


def density_summary(rows: Sequence[DensityRow]) -> DensitySummary | None:
    """Whole-model figures, weighted by layer size, and what a sparse format would send (``None``: no entries).

    ``source_format_ratio``: bytes of the source's format (``nonzero()`` gives one int64 per
    dimension per entry, plus the fp32 value) over the dense fp32 bytes; ``index_value_ratio``:
    the same with one int32 flat index per entry (the course's :func:`sparse_allreduce`).
    """
    total = sum(r.numel for r in rows)
    if not total:
        return None

    def weighted(values: list[float]) -> float:
        return sum(v * r.numel for v, r in zip(values, rows) if v == v) / total

    nonzero = sum((1 - r.frac_zero) * r.numel for r in rows)
    source_bytes = sum((1 - r.frac_zero) * r.numel * (8 * r.ndim + 4) for r in rows)
    return DensitySummary(
        params=total,
        layers=len(rows),
        frac_zero=weighted([r.frac_zero for r in rows]),
        frac_near_zero=weighted([r.frac_near_zero for r in rows]),
        frac_for_energy=weighted([r.frac_for_energy for r in rows]),
        max_layer_frac_zero=max(r.frac_zero for r in rows),
        source_format_ratio=source_bytes / (4 * total),
        index_value_ratio=nonzero * 8 / (4 * total),
    )
