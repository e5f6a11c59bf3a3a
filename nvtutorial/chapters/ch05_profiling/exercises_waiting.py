"""Exercise (notebook 05): waiting or moving data? The same collectives seen by two ranks.

The learner writes ``transfer_ms(rank0, rank1)``: each argument lists the ``(start, end)`` in
milliseconds of the same collectives on one rank, in the order the ranks ran them, on one clock.
A collective moves no data until both ranks have joined it; the answer is, for each rank, the
time it spent inside its collectives after the other rank had joined: ``[rank 0, rank 1]``. The
checker compares it with :func:`nvtutorial.tracesplit.pair`, the function that splits the
notebook's traces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from nvtutorial import tracesplit

NAME = "profile_waiting"
"""The exercise's name (``teach.check.check("profile_waiting", ...)``)."""

NOTEBOOK = "05_profiling"
TASK = (
    "write transfer_ms(rank0, rank1): for each rank, the time inside its collectives after the other rank "
    "had joined them"
)
KIND = "function"

Interval = tuple[float, float]


def transfer_ms(rank0: Sequence[Interval], rank1: Sequence[Interval]) -> list[float]:
    """The solution: collective by collective, data moves from the later of the two starts."""
    out = [0.0, 0.0]
    for (s0, e0), (s1, e1) in zip(rank0, rank1):
        both = max(s0, s1)
        out[0] += max(0.0, e0 - both)
        out[1] += max(0.0, e1 - both)
    return out


SOLUTION = transfer_ms

CASES: list[tuple[str, list[Interval], list[Interval], str]] = [
    (
        "rank 0 early",
        [(0, 10)],
        [(8, 10)],
        "rank 0 joined at 0 and rank 1 at 8: rank 0 waited 8 ms for rank 1, and no data moved meanwhile",
    ),
    (
        "taking turns",
        [(0, 5), (20, 22)],
        [(4, 5.2), (12, 22.1)],
        "each rank is late once: pair the collectives one by one (the least total of the ranks still counts waiting)",
    ),
    ("together", [(0, 2), (3, 4)], [(0, 2.1), (3, 4.2)], "both ranks joined at once: nobody waited"),
    (
        "rank 1 early, three collectives",
        [(5, 6), (9, 10), (14, 15.5)],
        [(1, 6.1), (2 + 6, 10), (11, 15.4)],
        "rank 1 arrived first at two of three collectives",
    ),
]


def reference(rank0: Sequence[Interval], rank1: Sequence[Interval]) -> list[float]:
    """The package's answer: :func:`nvtutorial.tracesplit.pair` on two one-step traces (ms in, ms out)."""
    end = max(e for s, e in [*rank0, *rank1]) + 1
    start = min(s for s, e in [*rank0, *rank1]) - 1
    acts = [
        tracesplit.Activity(
            source="gpu", compute=[], comm=list(c), steps=[(start, end)], phases={}, phase_compute={}, rows=[], rank=r
        )
        for r, c in enumerate((rank0, rank1))
    ]
    return [w.transfer_ms * 1e3 for w in tracesplit.pair(acts)]  # pair reads microseconds


def check_local(candidate: Callable[..., Sequence[float]]) -> tuple[bool, str]:
    """Run ``candidate`` on every case; the first wrong answer names the case and what it tests."""
    for name, rank0, rank1, why in CASES:
        want = reference(rank0, rank1)
        try:
            got = list(candidate(list(rank0), list(rank1)))
        except Exception as exc:  # the learner's code: report, never raise
            return False, f"case '{name}': your function raised {type(exc).__name__}: {exc}"
        if len(got) != 2 or not all(isinstance(g, (int, float)) and math.isfinite(g) for g in got):
            return False, f"case '{name}': return two numbers, [rank 0, rank 1], not {got!r}"
        if any(abs(g - w) > 1e-6 for g, w in zip(got, want)):
            return False, (
                f"case '{name}': expected [{want[0]:g}, {want[1]:g}] ms, got [{got[0]:g}, {got[1]:g}]: {why}"
            )
    return True, f"right on all {len(CASES)} cases, the same as nvtutorial.tracesplit.pair"


def own_durations(rank0, rank1):
    return [sum(e - s for s, e in rank0), sum(e - s for s, e in rank1)]


def slower_rank(rank0, rank1):
    worst = max(own_durations(rank0, rank1))
    return [worst, worst]


def least_total(rank0, rank1):
    least = min(own_durations(rank0, rank1))
    return [least, least]


WRONG = {
    "each rank's own kernel time": (own_durations, "waited"),
    "the rank with the most communication": (slower_rank, "waited"),
    "the least total of the ranks": (least_total, "pair the collectives one by one"),
}
