"""How sparse gradients are (claim C23): per layer, and what a sparse format would send for them.

Used by the ``compression`` workload of notebook 07, on each rank's own gradients before averaging.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def density_row(
    name: str, grad: Any, near_zero: float = 1e-3, energy: float = 0.99, topk_ratio: float = 0.01
) -> dict[str, Any]:
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
    return {
        "layer": name,
        "numel": n,
        "ndim": grad.dim(),
        "frac_zero": float((g == 0).sum()) / n if n else float("nan"),
        "frac_near_zero": float((mag <= near_zero * peak).sum()) / n if n else float("nan"),
        "frac_for_energy": min(needed, n) / n if n else float("nan"),
        "topk_energy_share": topk_share,
    }


def gradient_density(
    model: Any, near_zero: float = 1e-3, energy: float = 0.99, topk_ratio: float = 0.01
) -> list[dict[str, Any]]:
    """:func:`density_row` for every parameter of ``model`` that has a gradient."""
    return [
        density_row(n, p.grad, near_zero, energy, topk_ratio) for n, p in model.named_parameters() if p.grad is not None
    ]


def density_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whole-model figures, weighted by layer size, and what a sparse format would send.

    ``source_format_ratio``: bytes of the source's format (``nonzero()`` gives one int64 per
    dimension per entry, plus the fp32 value) over the dense fp32 bytes; ``index_value_ratio``:
    the same with one int32 flat index per entry (the course's :func:`sparse_allreduce`).
    """
    total = sum(r["numel"] for r in rows)
    if not total:
        return {"params": 0}

    def weighted(key: str) -> float:
        return sum(r[key] * r["numel"] for r in rows if r[key] == r[key]) / total

    nonzero = sum((1 - r["frac_zero"]) * r["numel"] for r in rows)
    source_bytes = sum((1 - r["frac_zero"]) * r["numel"] * (8 * r["ndim"] + 4) for r in rows)
    return {
        "params": total,
        "layers": len(rows),
        "frac_zero": weighted("frac_zero"),
        "frac_near_zero": weighted("frac_near_zero"),
        "frac_for_energy": weighted("frac_for_energy"),
        "max_layer_frac_zero": max(r["frac_zero"] for r in rows),
        "source_format_ratio": source_bytes / (4 * total),
        "index_value_ratio": nonzero * 8 / (4 * total),
    }
