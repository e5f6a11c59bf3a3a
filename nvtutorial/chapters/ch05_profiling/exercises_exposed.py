"""Exercise (notebook 05): the exposed communication of a step, from a trace's intervals.

The learner writes ``exposed_ms(compute, comm, step)``: ``compute`` and ``comm`` are lists of
``(start, end)`` in milliseconds (kernels; they may overlap one another, as kernels on two
streams do), ``step`` is the ``(start, end)`` of the step. The answer is the time inside the
step during which communication runs and no compute does. The checker compares it with
:func:`nvtutorial.tracesplit.split_intervals` on cases that each catch one classic mistake.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from nvtutorial import tracesplit

NAME = "profile_exposed"
"""The exercise's name (``teach.check.check("profile_exposed", ...)``)."""

NOTEBOOK = "05_profiling"
TASK = (
    "write exposed_ms(compute, comm, step): the milliseconds inside the step during which communication "
    "runs and no compute does"
)
KIND = "function"

Interval = tuple[float, float]


def exposed_ms(compute: Sequence[Interval], comm: Sequence[Interval], step: Interval) -> float:
    """The solution: union each kind, clip to the step, take communication minus compute."""

    def union(intervals):
        out = []
        for s, e in sorted((max(s, step[0]), min(e, step[1])) for s, e in intervals):
            if e <= s:
                continue
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    busy = union(compute)
    exposed = 0.0
    for s, e in union(comm):
        covered = sum(max(0.0, min(e, ce) - max(s, cs)) for cs, ce in busy)
        exposed += (e - s) - covered
    return exposed


SOLUTION = exposed_ms

CASES: list[tuple[str, list[Interval], list[Interval], Interval, str]] = [
    (
        "hidden",
        [(0, 10)],
        [(5, 15)],
        (0, 20),
        "communication that runs under compute is hidden: the step does not wait for it (though on a GPU its kernels "
        "share SMs and memory bandwidth with that compute), so it is not exposed",
    ),
    (
        "two compute streams",
        [(0, 10), (2, 8)],
        [(4, 12)],
        (0, 20),
        "two compute kernels at once (two streams) cover the time once: take the union of compute first",
    ),
    (
        "two collectives at once",
        [],
        [(0, 6), (3, 9)],
        (0, 20),
        "two collectives at once cover the time once: take the union of communication first",
    ),
    (
        "outside the step",
        [(0, 4)],
        [(2, 6), (15, 25)],
        (0, 20),
        "only the part inside the step window counts (a kernel can start before or end after it)",
    ),
    ("no communication", [(0, 10)], [], (0, 20), "without communication nothing is exposed"),
    (
        "a real-looking step",
        [(0.0, 3.1), (3.2, 9.0), (8.5, 9.4), (9.5, 14.0), (14.2, 18.0), (18.3, 19.0)],
        [(11.0, 13.5), (15.0, 16.2), (17.5, 19.4), (19.5, 19.9)],
        (0.0, 20.0),
        "a backward pass with three all-reduces and two overlapping compute kernels",
    ),
]


def reference(compute: Sequence[Interval], comm: Sequence[Interval], step: Interval) -> float:
    """The package's answer: :func:`nvtutorial.tracesplit.split_intervals` with millisecond intervals."""
    return tracesplit.split_intervals(compute, comm, [step], "cpu", unit_ms=1.0).exposed_ms


def check_local(candidate: Callable[..., float]) -> tuple[bool, str]:
    """Run ``candidate`` on every case; the first wrong answer names the case and what it tests."""
    for name, compute, comm, step, why in CASES:
        want = reference(compute, comm, step)
        try:
            got = candidate(list(compute), list(comm), step)
        except Exception as exc:  # the learner's code: report, never raise
            return False, f"case '{name}': your function raised {type(exc).__name__}: {exc}"
        if not isinstance(got, (int, float)) or not math.isfinite(got) or abs(got - want) > 1e-6:
            return False, f"case '{name}': expected {want:g} ms, got {got!r}: {why}"
    return True, f"right on all {len(CASES)} cases, the same as nvtutorial.tracesplit"


def sum_of_comm(compute, comm, step):
    return sum(e - s for s, e in comm)


def overlaps_not_merged(compute, comm, step):
    total = 0.0
    for s, e in comm:
        s, e = max(s, step[0]), min(e, step[1])
        total += max(0.0, e - s) - sum(max(0.0, min(e, ce) - max(s, cs)) for cs, ce in compute)
    return total


def comm_not_merged(compute, comm, step):
    cs = sorted(compute)
    total = 0.0
    for s, e in comm:
        s, e = max(s, step[0]), min(e, step[1])
        hidden = tracesplit.total(tracesplit.intersect([(s, e)], cs)) if e > s else 0.0
        total += max(0.0, e - s) - hidden
    return total


def ignores_the_step(compute, comm, step):
    return tracesplit.total(tracesplit.subtract(comm, compute))


WRONG = {
    "sum of the communication kernels": (sum_of_comm, "hidden"),
    "compute overlaps not merged": (overlaps_not_merged, "union of compute"),
    "collectives not merged": (comm_not_merged, "union of communication"),
    "the step window ignored": (ignores_the_step, "inside the step window"),
}
