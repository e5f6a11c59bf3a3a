"""What notebook 07's collectives runs show: verdicts computed from the ``collectives_bench`` metrics.

The collectives themselves are :mod:`nvtutorial.lessons.collectives`.
"""

from __future__ import annotations

from typing import Any


def ring_verdict(rows: list[dict[str, Any]]) -> str:
    """What the hand-written ring shows: equal results, bytes by formula, speed against NCCL."""
    if not rows:
        return "no sizes measured"
    equal = all(r["equal_to_all_reduce"] for r in rows)
    bytes_ok = all(r["ring_bytes_sent"] == r["ring_bytes_exact"] for r in rows)
    big = max(rows, key=lambda r: r["size_bytes"])
    small = min(rows, key=lambda r: r["size_bytes"])
    return (f"ring by hand equal to dist.all_reduce at every size: {equal}; bytes sent match "
            f"2(W-1)/W × size: {bytes_ok}. At {big['size_bytes'] / 2**20:.3g} MiB it reaches "
            f"{big['ring_busbw_gbs']:.3g} GB/s bus bandwidth against {big['all_reduce_busbw_gbs']:.3g} GB/s "
            f"({big['ring_over_all_reduce']:.2g}× the time); at {small['size_bytes'] / 1024:.3g} KiB it takes "
            f"{small['ring_over_all_reduce']:.2g}× the time of dist.all_reduce.")


def source_verdict(case_rows: list[dict[str, Any]]) -> str:
    """Claim C22 ("the sparse_allreduce code works") against the correctness cases."""
    src = [r for r in case_rows if r["implementation"] == "source"]
    ours = [r for r in case_rows if r["implementation"] == "course"]
    exact = [r["case"] for r in src if r["exact"]]
    wrong = [r["case"] for r in src if r["ran"] and not r["exact"]]
    raised = [r["case"] for r in src if not r["ran"] and not (r["error"] or "").startswith("skipped")]
    skipped = [r["case"] for r in src if (r["error"] or "").startswith("skipped")]
    parts = [f"C22 {'refuted' if wrong or raised else 'not refuted'}: the source's sparse_allreduce was exact in "
             f"{len(exact)} of {len(src)} cases ({', '.join(exact) or 'none'}), returned wrong numbers in "
             f"{len(wrong)} and failed in {len(raised)}"]
    if skipped:
        parts.append(f"{len(skipped)} skipped (unequal counts without TORCH_DISTRIBUTED_DEBUG=DETAIL)")
    parts.append(f"the course's sparse_allreduce was exact in {sum(r['exact'] for r in ours)} of {len(ours)}")
    return "; ".join(parts) + "."


def sparse_verdict(rows: list[dict[str, Any]]) -> str:
    """Where the correct sparse all-reduce pays: in bytes, and in time."""
    if not rows:
        return "no densities measured"
    rows = sorted(rows, key=lambda r: r["density"])
    fewer_bytes = [r["density"] for r in rows if r["bytes_ratio"] < 1]
    faster = [r["density"] for r in rows if r["time_ratio"] < 1]
    exact = all(r["exact"] for r in rows)
    bytes_part = (f"it sends fewer bytes than a dense all-reduce up to density {max(fewer_bytes):.3g} "
                  f"(break-even near 50 % for fp32 values with int32 indices)" if fewer_bytes
                  else "it never sent fewer bytes than a dense all-reduce")
    time_part = (f"it was faster only at densities {', '.join(f'{d:.3g}' for d in faster)}" if faster
                 else "it was slower than the dense all-reduce at every density measured")
    return f"exact against all_reduce at every density: {exact}; {bytes_part}; {time_part}."
