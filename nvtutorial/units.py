"""Sizes and bandwidth arithmetic, used on both sides: by the workloads on the ranks and by the reports.

The definitions are nccl-tests' (``doc/PERFORMANCE.md`` there):

* **algbw** = S / t: the bytes of the user's buffer divided by the time of one operation;
* **busbw** = algbw × a factor that makes collectives comparable with the link's speed. For an
  all-reduce on n ranks a ring sends 2(n−1)/n · S bytes per rank, so busbw = algbw · 2(n−1)/n.
  For n = 2 busbw = algbw, and it is directly comparable with a link's per-direction bandwidth.

GB/s here means 10⁹ bytes per second, as in nccl-tests. Pure Python: no torch, no pandas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw factor: 2(n−1)/n for all_reduce, (n−1)/n for all_gather/reduce_scatter, 1 for sendrecv."""
    if n < 1:
        raise ValueError(f"n={n}: the number of ranks must be at least 1")
    try:
        return _FACTORS[collective](n)
    except KeyError:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(_FACTORS)}") from None


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: S / t."""
    if seconds <= 0:
        raise ValueError(f"seconds={seconds} must be positive")
    return size_bytes / seconds / 1e9


def busbw(size_bytes: float, seconds: float, n: int, collective: str = "all_reduce") -> float:
    """Bus bandwidth in GB/s: algbw × :func:`bus_factor`."""
    return algbw(size_bytes, seconds) * bus_factor(collective, n)


def ring_bytes_per_rank(size_bytes: float, n: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of S bytes: 2(n−1)/n · S."""
    return size_bytes * bus_factor("all_reduce", n)


_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "KB": 1 << 10,
    "KIB": 1 << 10,
    "M": 1 << 20,
    "MB": 1 << 20,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GB": 1 << 30,
    "GIB": 1 << 30,
    "T": 1 << 40,
    "TB": 1 << 40,
    "TIB": 1 << 40,
}


def parse_size(text: str | int) -> int:
    """``"256M"``, ``"1G"``, ``"4KiB"`` or ``1024`` → bytes (binary units, as nccl-tests' ``-b``/``-e``)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"cannot read size {text!r}: write e.g. 1024, 4K, 256M or 1G")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(n: float) -> str:
    """``1073741824`` → ``"1 GiB"``, ``1536`` → ``"1.5 KiB"``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{int(n)} B"


def size_sweep(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """min, min·f, min·f², … ≤ max (max is always included), as nccl-tests' ``-b -e -f``."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes ({min_bytes}) <= max_bytes ({max_bytes})")
    if factor < 2:
        raise ValueError(f"factor={factor} must be at least 2")
    out, s = [], min_bytes
    while s < max_bytes:
        out.append(s)
        s *= factor
    out.append(max_bytes)
    return out


# --- Throughput curves ----------------------------------------------------------------------------


def knee(
    rows: Sequence[Mapping[str, Any]], x: str = "num_workers", y: str = "samples_per_s", fraction: float = 0.9
) -> Mapping[str, Any] | None:
    """The row with the smallest ``x`` whose ``y`` reaches ``fraction`` of the best ``y``."""
    rows = [r for r in rows if r.get(y) is not None]
    if not rows:
        return None
    best = max(r[y] for r in rows)
    return min((r for r in rows if r[y] >= fraction * best), key=lambda r: r[x])
