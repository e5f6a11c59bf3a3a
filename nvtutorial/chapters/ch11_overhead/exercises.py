"""Exercise (notebook 11): the overhead crossover from a batch-doubling sweep, in closed form.

A step that is overhead-bound costs its floor whatever its batch; once the work per step outgrows the floor, its
time follows the work. With the model ``t(B) ≈ max(floor, B · k)`` the two meet at ``B* = floor / k``. The learner
writes ``crossover_batch(points)``: from ``[(batch, seconds per step), ...]`` (in any order), the floor is the
smallest batch's time and ``k`` the largest batch's seconds per sequence. :func:`check_local` tries it on several
sweeps and says what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from nvtutorial.chapters.ch11_overhead import model

NAME = "overhead_crossover"
"""The exercise's name (``teach.check.check("overhead_crossover", ...)``)."""
NOTEBOOK = "11_overhead"
TASK = (
    "Write crossover_batch(points): from [(batch, seconds per step), ...] of a doubling sweep, the batch at which "
    "the step's work (k seconds per sequence, from the largest batch) catches up with its floor (the smallest "
    "batch's time): floor / k."
)
KIND = "function"


def crossover_batch(points):
    """The reference (the chapter's model)."""
    return model.crossover_batch(points)


SOLUTION = crossover_batch


def _floor_from_largest(points):
    ordered = sorted(points)
    return ordered[-1][1] / (ordered[-1][1] / ordered[-1][0])


def _k_from_smallest(points):
    ordered = sorted(points)
    return ordered[0][1] / (ordered[0][1] / ordered[0][0])


def _unsorted(points):
    return points[0][1] / (points[-1][1] / points[-1][0])


def _inverted(points):
    ordered = sorted(points)
    return (ordered[-1][1] / ordered[-1][0]) / ordered[0][1]


WRONG = {
    "the floor from the largest batch": (_floor_from_largest, "not the largest's"),
    "the work from the smallest batch": (_k_from_smallest, "where the work sets the time"),
    "the points taken in the order given": (_unsorted, "sort them by batch"),
    "k over the floor": (_inverted, "the inverse"),
}
"""Known wrong answers and a word their reason must contain (tests run every one)."""


def _sweep(floor: float, per_seq: float, batches: tuple[int, ...]) -> list[tuple[int, float]]:
    return [(b, max(floor, b * per_seq)) for b in batches]


CASES = [
    _sweep(3.2e-3, 0.030e-3, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)),
    _sweep(2.0e-3, 0.5e-3, (1, 2, 4, 8, 16, 32)),
    list(reversed(_sweep(1.0e-3, 0.1e-3, (2, 4, 8, 16, 32, 64)))),
    [(16, 0.0213), (1, 0.0031), (64, 0.0801), (4, 0.0033)],
]
"""Sweeps: the small GPU step (floor 3.2 ms, crossover 107 sequences), a CPU-like one, one given largest batch
first, a measured-looking one out of order."""


def check_local(candidate: Callable[[list[tuple[int, float]]], float]) -> tuple[bool, str]:
    """Pass when ``candidate`` matches the reference on every sweep, else the first one it misses and why."""
    for points in CASES:
        want = crossover_batch(points)
        try:
            got = candidate(list(points))
        except Exception as exc:  # noqa: BLE001 - the learner's code: say what it raised
            return False, f"crossover_batch({points}) raised {type(exc).__name__}: {exc}"
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            return False, f"crossover_batch returned {got!r}: return a number of sequences per step"
        if math.isclose(got, want, rel_tol=1e-9):
            continue
        return False, f"for {points} you returned {got:.4g}, the crossover is {want:.4g}: {_why(got, points)}"
    return True, "floor / k on every sweep: below that batch the step costs its floor, above it its work"


def _why(got: float, points: list[tuple[int, float]]) -> str:
    ordered = sorted(points)
    if math.isclose(got, _unsorted(points), rel_tol=1e-9):
        return "the points come in any order: sort them by batch first"
    if math.isclose(got, ordered[-1][0], rel_tol=1e-9):
        return "the floor is the smallest batch's time (the flat part), not the largest's"
    if math.isclose(got, ordered[0][0], rel_tol=1e-9):
        return "k, the seconds per sequence of the work, comes from the largest batch, where the work sets the time"
    if math.isclose(got, _inverted(points), rel_tol=1e-9):
        return "that is k / floor, the inverse: the crossover is floor / k sequences"
    return "the floor is the smallest batch's time, k the largest batch's seconds per sequence, the answer floor / k"
