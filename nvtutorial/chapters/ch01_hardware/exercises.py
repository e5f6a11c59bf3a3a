"""Exercise of notebook 01: turn a collective's time into nccl-tests' bus bandwidth, for all-reduce and all-gather.

The learner writes ``bus_bandwidth(collective, size_bytes, seconds, world_size)``; :func:`check_local`
compares it with the definition of nccl-tests' ``doc/PERFORMANCE.md`` on several world sizes and says
what is wrong when it is not (the usual slips are listed in :data:`WRONG`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

NAME = "busbw"
"""The exercise's name (``teach.check.check("busbw", ...)``)."""

NOTEBOOK = "01_hardware"
TASK = (
    "Write bus_bandwidth(collective, size_bytes, seconds, world_size) returning nccl-tests' busbw in GB/s "
    "for 'all_reduce' and 'all_gather' (size_bytes: the whole buffer, for all_gather the gathered output)."
)
KIND = "function"


def bus_bandwidth(collective: str, size_bytes: float, seconds: float, world_size: int) -> float:
    """busbw = algbw × the collective's factor: a ring all-reduce sends 2(n−1)/n · S from every rank (a
    reduce-scatter, then an all-gather), an all-gather (n−1)/n · S (every rank receives the n−1 parts it lacks)."""
    algbw = size_bytes / seconds / 1e9
    factor = {"all_reduce": 2 * (world_size - 1) / world_size, "all_gather": (world_size - 1) / world_size}
    return algbw * factor[collective]


SOLUTION = bus_bandwidth


def _algbw_only(collective, size_bytes, seconds, world_size):
    return size_bytes / seconds / 1e9


def _all_reduce_factor_everywhere(collective, size_bytes, seconds, world_size):
    return size_bytes / seconds / 1e9 * 2 * (world_size - 1) / world_size


def _bits(collective, size_bytes, seconds, world_size):
    factor = 2 * (world_size - 1) / world_size if collective == "all_reduce" else (world_size - 1) / world_size
    return 8 * size_bytes / seconds / 1e9 * factor


def _gibibytes(collective, size_bytes, seconds, world_size):
    factor = 2 * (world_size - 1) / world_size if collective == "all_reduce" else (world_size - 1) / world_size
    return size_bytes / seconds / 2**30 * factor


WRONG = {
    "algbw only": (_algbw_only, "the factor"),
    "the all-reduce factor for all_gather too": (_all_reduce_factor_everywhere, "all_gather"),
    "bits instead of bytes": (_bits, "bytes"),
    "GiB/s instead of GB/s": (_gibibytes, "10⁹"),
}
"""Known wrong answers and a word their reason must contain (tests run every one)."""

CASES = [(c, 1 << 30, 3.2e-3, n) for c in ("all_reduce", "all_gather") for n in (2, 4, 8)] + [
    ("all_reduce", 4096, 2e-5, 1)
]
"""(collective, bytes, seconds, ranks): 1 GiB in 3.2 ms on 2, 4 and 8 ranks, and one rank alone (busbw 0)."""


def check_local(candidate: Callable[..., float]) -> tuple[bool, str]:
    """Pass when ``candidate`` matches nccl-tests' busbw in every case, else the first mismatch and its likely cause."""
    for collective, size, seconds, n in CASES:
        want = bus_bandwidth(collective, size, seconds, n)
        try:
            got = candidate(collective, size, seconds, n)
        except Exception as exc:  # noqa: BLE001 - the learner's code: say what it raised
            return False, f"{collective} on {n} ranks: your function raised {type(exc).__name__}: {exc}"
        if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
            return False, f"{collective} on {n} ranks: return a number of GB/s, not {got!r}"
        if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
            continue
        algbw = size / seconds / 1e9
        case = f"{collective} of {size} B in {seconds * 1e3:g} ms on {n} ranks: expected {want:.6g} GB/s, got {got:.6g}"
        if collective == "all_gather" and math.isclose(got, algbw * 2 * (n - 1) / n, rel_tol=1e-6):
            why = (
                "all_gather sends (n−1)/n · S from each rank (each receives the n−1 parts it lacks), not the "
                "all-reduce's 2(n−1)/n"
            )
        elif n > 1 and math.isclose(got, algbw, rel_tol=1e-6):
            why = (
                "that is algbw = S / t; busbw multiplies it by the factor of the collective: 2(n−1)/n for "
                "all_reduce, (n−1)/n for all_gather"
            )
        elif math.isclose(got, 8 * want, rel_tol=1e-6):
            why = "8× too large: count bytes, not bits"
        elif math.isclose(got, want * 1e9 / 2**30, rel_tol=1e-6):
            why = "GB/s here means 10⁹ bytes per second (as in nccl-tests), not 2³⁰"
        else:
            why = "busbw = S / t / 10⁹ × factor, with the collective's factor"
        return False, f"{case}: {why}"
    return True, "matches nccl-tests' busbw for all_reduce and all_gather on 1, 2, 4 and 8 ranks"
