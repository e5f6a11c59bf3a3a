"""What notebook 07's ``collectives_bench`` run shows, as verdicts: the ring, claim C22, the sparse all-reduce.

Each function reads the run's typed metrics (``result.ranks_as(schema.Rank)``: one
:class:`~nvtutorial.chapters.ch07_collectives.schema.Rank` per rank, or rank 0's rows) and returns a
:class:`~nvtutorial.report.verdict.Verdict`. Notebook 07 passes the raw JSON instead (``bench.ranks``,
``bench.ranks[0]["source_cases"]``): each function types what it is given where it comes in (``schema.ranks_typed``,
``results.rows_typed``) and works on the dataclasses. Older runs (``reference/h200x2/runs/collectives_bench-*``) read
the same: ``schema.Rank.upgrade`` fills in what they did not record.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nvtutorial.chapters.ch07_collectives.schema import (
    ONE_SLICE,
    Rank,
    RingRow,
    SourceCase,
    SparseRow,
    ranks_typed,
)
from nvtutorial.report.verdict import Verdict, compare
from nvtutorial.results import as_typed, rows_typed

TARGET_SHARE = 0.8
"""The course's goal for its own ring: this share of ``all_reduce``'s bus bandwidth from 64 MiB up (GPUs)."""
LARGE = 64 * 2**20
Raw = Mapping[str, Any]
"""A rank's metrics, or one of its rows, as the run's JSON holds them (``result.ranks[0]``): what notebook 07 passes."""


def ring_rows(metrics: Rank | Raw) -> list[dict[str, Any]]:
    """One rank's ring rows as plain dicts, for notebook 07's table and its ``r["size_bytes"]`` reads: upgraded by
    the schema (every row with its ``variant`` and ``busbw_ratio``; older runs timed one variant), typed and written
    back (``dataclasses.asdict``). Everything else reads ``Rank.ring``, typed."""
    return [dataclasses.asdict(r) for r in as_typed(Rank, metrics).ring]


def measured(rows: Sequence[RingRow]) -> list[RingRow]:
    """The rows that were timed (a CUDA graph that could not be captured has an ``error`` and no times)."""
    return [r for r in rows if r.error is None]


def ring_check(ranks: Sequence[Rank | Raw], where: str) -> Verdict:
    """The hand-written ring gives ``all_reduce``'s result at every size, and each rank sends what the
    formula says: the bytes counted in its sends equal ``2 (W-1)/W ×`` the tensor (by chunk, on every rank)."""
    ranks = ranks_typed(ranks)
    rows = [r for m in ranks for r in m.ring if r.variant == ONE_SLICE]
    world = ranks[0].world_size
    equal = all(r.equal_to_all_reduce for r in rows)
    bytes_ok = all(r.ring_bytes_sent == r.ring_bytes_exact for r in rows)
    formula_ok = all(r.ring_bytes_sent == r.formula_bytes for r in rows if r.size_bytes % (4 * world) == 0)
    sizes = sorted({r.size_bytes for r in rows})
    status = "pass" if rows and equal and bytes_ok and formula_ok else "fail"
    text = (
        f"the ring equals dist.all_reduce at every size measured ({len(sizes)} sizes, {len(ranks)} ranks): {equal}; "
        f"each rank's sends add up to 2 (W-1)/W × the tensor = {2 * (world - 1) / world:g} × its size: "
        f"{bytes_ok and formula_ok}"
    )
    return Verdict(
        "ring all-reduce",
        status,
        text,
        {"equal": equal, "bytes_match_formula": bytes_ok and formula_ok, "sizes": sizes, "world_size": world},
        where,
    )


def share_from(largest: int) -> int:
    """The smallest tensor (bytes) the ring's share is read from: 64 MiB, or the largest size measured below it."""
    return min(largest, LARGE)


def ring_speed(ranks: Sequence[Rank | Raw], where: str, gpu: bool) -> Verdict:
    """The ring's share of ``all_reduce``'s bus bandwidth from :func:`share_from` up: per way of running it, its
    smallest share over those sizes and over the ranks (the slower rank's), and the best of those.

    ``numbers["plain_share"]`` is the plain ring's (one slice, no graph): the number notebook 07's prediction is
    graded against. On GPUs ``numbers["meets_target"]`` says whether the best reaches the course's goal
    (:data:`TARGET_SHARE`); on the CPU there is no goal (gloo's all-reduce is not NCCL's). A finding, not a check:
    status ``info``.
    """
    by_variant: dict[str, dict[int, float]] = {}
    for m in ranks_typed(ranks):
        for r in measured(m.ring):
            assert r.busbw_ratio is not None  # a measured row has its times
            cell = by_variant.setdefault(r.variant, {})
            cell[r.size_bytes] = min(cell.get(r.size_bytes, float("inf")), r.busbw_ratio)
    largest = max(s for v in by_variant.values() for s in v)
    floor = share_from(largest)
    share = {
        v: min(r for s, r in sizes.items() if s >= floor)
        for v, sizes in by_variant.items()
        if any(s >= floor for s in sizes)
    }
    best = max(share, key=lambda v: share[v])
    numbers: dict[str, object] = {
        "share_from": floor,
        "share_by_variant": share,
        "best_variant": best,
        "best_share": share[best],
        "plain_share": share.get(ONE_SLICE),
        "target": TARGET_SHARE,
    }
    sizes = f"{floor / 2**20:g} MiB and up" if floor < largest else f"{floor / 2**20:g} MiB"
    text = (
        f"at {sizes} (the slower rank's share, the smallest over those sizes) the ring reaches {share[best]:.0%} "
        f"of dist.all_reduce's bus bandwidth at best ({best}); "
        + "; ".join(f"{v}: {s:.0%}" for v, s in share.items() if v != best)
    )
    if not gpu:
        return Verdict(
            "ring vs all_reduce", "info", text.rstrip("; ") + " (gloo on the CPU: not NCCL's speed)", numbers, where
        )
    numbers["meets_target"] = share[best] >= TARGET_SHARE
    goal = "reaches" if numbers["meets_target"] else "is below"
    return Verdict(
        "ring vs all_reduce",
        "info",
        f"{text.rstrip('; ')}: it {goal} the course's goal of {TARGET_SHARE:.0%}",
        numbers,
        where,
    )


def source_verdict(case_rows: Sequence[SourceCase | Raw], where: str) -> Verdict:
    """Claim C22 ("the sparse_allreduce code works") against the correctness cases (``Rank.source_cases``): wrong
    when the source's function gave a wrong result or failed in any case where the correct one was exact."""
    case_rows = rows_typed(SourceCase, case_rows)
    src = [r for r in case_rows if r.implementation == "source"]
    ours = [r for r in case_rows if r.implementation == "course"]
    skipped = [r.case for r in src if (r.error or "").startswith("skipped")]
    exact = [r.case for r in src if r.exact]
    wrong = [r.case for r in src if r.ran and not r.exact]
    failed = [r.case for r in src if not r.ran and r.case not in skipped]
    ours_exact = sum(bool(r.exact) for r in ours)
    status = (
        "wrong" if (wrong or failed) and ours_exact == len(ours) else "holds" if not (wrong or failed) else "partly"
    )
    text = (
        f"the source's sparse_allreduce was exact in {len(exact)} of {len(src)} cases "
        f"({', '.join(exact) or 'none'}), returned wrong numbers in {len(wrong)} ({', '.join(wrong) or 'none'}) "
        f"and failed in {len(failed)}"
        + (f", {len(skipped)} skipped" if skipped else "")
        + f"; the correct sparse_allreduce was exact in {ours_exact} of {len(ours)}"
    )
    return Verdict(
        "C22",
        status,
        text,
        {
            "cases": len(src),
            "source_exact": len(exact),
            "source_wrong": len(wrong),
            "source_failed": len(failed),
            "skipped": len(skipped),
            "course_exact": ours_exact,
        },
        where,
    )


def sparse_verdict(rows: Sequence[SparseRow | Raw], where: str) -> Verdict:
    """Where the correct sparse all-reduce pays, in bytes and in time (``compare`` where repeats were kept), from
    rank 0's ``Rank.sparse``."""
    by_density = sorted(rows_typed(SparseRow, rows), key=lambda r: r.density)
    exact = all(r.exact for r in by_density)
    fewer_bytes = [r.density for r in by_density if r.bytes_ratio < 1]
    faster: list[float] = []
    judged = "medians"
    for r in by_density:
        if r.sparse_ms_all and r.dense_ms_all:
            judged = "compare"
            if compare(r.dense_ms_all, r.sparse_ms_all).status == "faster":
                faster.append(r.density)
        elif r.time_ratio < 1:
            faster.append(r.density)
    bytes_part = (
        f"it sends fewer bytes than a dense all-reduce up to density {max(fewer_bytes):.3g} "
        f"(break-even near 50 % for fp32 values with int32 indices)"
        if fewer_bytes
        else "it never sent fewer bytes than a dense all-reduce"
    )
    time_part = (
        f"it was faster beyond noise at densities {', '.join(f'{d:.3g}' for d in faster)}"
        if faster
        else "it was never faster than the dense all-reduce"
    )
    ratios = [r.time_ratio for r in by_density]
    text = (
        f"exact against all_reduce / W at every density: {exact}; {bytes_part}; {time_part} "
        f"(time sparse ÷ dense from {min(ratios):.2g} to {max(ratios):.2g})"
    )
    return Verdict(
        "sparse all-reduce",
        "pass" if exact else "fail",
        text,
        {
            "exact": exact,
            "fewer_bytes_up_to": max(fewer_bytes) if fewer_bytes else None,
            "faster_at": faster,
            "judged_by": judged,
            "time_ratio_median": statistics.median(ratios),
        },
        where,
    )


def ring_variants(ranks: Sequence[Rank | Raw], where: str) -> list[Verdict]:
    """At the largest size, each way of running the ring against the plain one (one slice, launched from
    Python): faster, slower or no change under ``compare`` (rank 0's repeats), with its share of ``all_reduce``."""
    rows = [r for r in measured(as_typed(Rank, ranks[0]).ring) if r.ring_ms_all]
    if not rows:
        return []
    size = max(r.size_bytes for r in rows)
    at = {r.variant: r for r in rows if r.size_bytes == size}
    base = at.get(ONE_SLICE)
    out = []
    for name, r in at.items():
        if base is None or name == ONE_SLICE:
            continue
        assert r.busbw_ratio is not None and base.busbw_ratio is not None  # measured rows have their times
        c = compare(base.ring_ms_all, r.ring_ms_all)
        text = (
            f"{c.describe('ms', f'{name} against one slice at {size / 2**20:g} MiB')}; it reaches "
            f"{r.busbw_ratio:.0%} of dist.all_reduce's bus bandwidth (one slice: {base.busbw_ratio:.0%})"
        )
        out.append(
            Verdict(
                f"ring: {name}",
                c.status,
                text,
                {"ratio": c.ratio, "noise": c.noise, "share": r.busbw_ratio, "size": size},
                where,
            )
        )
    return out
