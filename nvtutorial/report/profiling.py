"""Reading the ``profile_step`` workload's results in notebook 05 (parent side; none of these touch
CUDA): the split per rank, the phases, the profiler's overhead, the DDP gap, memory, the batch
sweep (claim C16), and the NVLink traffic of the all-reduce probe.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def split_frame(res: Any, path: str | None = None):  # -> pandas.DataFrame
    """The split each rank computed from its own trace, one row per rank (milliseconds per step)."""
    import pandas as pd

    rows = []
    for rank, m in enumerate(res.ranks):
        sp = dict(m.get("split") or {})
        if not sp:
            continue
        sp.pop("phase_ms", None)
        sp["rank"] = rank
        if path:
            sp["path"] = path
        rows.append(sp)
    cols = ["path", "rank", "step_ms", "compute_ms", "compute_only_ms", "comm_ms", "hidden_ms", "exposed_ms", "idle_ms", "comm_share",
            "exposed_share", "hidden_fraction", "source"]
    frame = pd.DataFrame(rows)
    return frame[[c for c in cols if c in frame.columns]].round(4)


def describe_split(frame: Any) -> list[str]:
    """What the split says, one line per rank, from :func:`split_frame`'s rows."""
    out = []
    for row in frame.to_dict("records"):
        comm, hidden, exposed = row["comm_ms"], row["hidden_ms"], row["exposed_ms"]
        hidden_pct = f"{100 * hidden / comm:.0f} %" if comm > 0 else "none"
        out.append(f"rank {row['rank']}: step {row['step_ms']:.3f} ms = compute {row['compute_ms']:.3f} ms, communication "
                   f"{comm:.3f} ms ({100 * row['comm_share']:.1f} % of the step; {hidden_pct} of it hidden under compute), "
                   f"exposed communication {exposed:.3f} ms ({100 * row['exposed_share']:.1f} %), idle {row['idle_ms']:.3f} ms")
    if len(out) > 1:
        comms = [r["comm_ms"] for r in frame.to_dict("records")]
        if max(comms) > 1.5 * max(min(comms), 1e-9):
            slow = frame.to_dict("records")[comms.index(max(comms))]["rank"]
            out.append(f"rank {slow}'s collectives last longer: a collective's time includes waiting inside it for the "
                       "other rank to arrive, so the rank that is ahead shows more 'communication'")
    return out


def phase_frame(res: Any):  # -> pandas.DataFrame
    """Compute time per phase (forward, backward, optimizer) per rank, from the NVTX-marked ranges."""
    import pandas as pd

    return pd.DataFrame([{"rank": r, **{f"{k}_ms": round(v, 4) for k, v in ((m.get("split") or {}).get("phase_ms") or {}).items()}}
                         for r, m in enumerate(res.ranks)])


def overhead_frame(res: Any):  # -> pandas.DataFrame
    """Median step time with and without torch.profiler, per rank."""
    import pandas as pd

    return pd.DataFrame([{"rank": r, "step_ms": round(m["step_ms"], 3), "step_ms_profiled": round(m["step_ms_profiled"], 3),
                          "overhead_%": round(100 * m["profiler_overhead"], 1) if m.get("profiler_overhead") is not None else None}
                         for r, m in enumerate(res.ranks)])


def gap_row(res: Any) -> dict[str, float]:
    """1-GPU step, DDP step, their gap, and the exposed communication (means over ranks)."""
    ranks = res.ranks
    local = statistics.mean(m["local_step_ms"] for m in ranks) if all(m.get("local_step_ms") for m in ranks) else float("nan")
    ddp = statistics.mean(m["step_ms"] for m in ranks)
    exposed = statistics.mean(m["split"]["exposed_ms"] for m in ranks) if all(m.get("split") for m in ranks) else float("nan")
    gap = ddp - local
    return {"local_step_ms": local, "step_ms": ddp, "gap_ms": gap, "exposed_ms": exposed,
            "predicted_ms": local + exposed, "exposed_over_gap": exposed / gap if gap > 0 else float("nan"),
            "scaling_efficiency": local / ddp if ddp > 0 else float("nan")}


def gap_frame(results: Mapping[str, Any]):  # -> pandas.DataFrame
    """:func:`gap_row` for each path (``{"NVLink": res, "host-staged": res2}``)."""
    import pandas as pd

    return pd.DataFrame([{"path": k, **{c: round(v, 4) for c, v in gap_row(r).items()}} for k, r in results.items()])


def verdict_gap(frame: Any) -> list[str]:
    """One line per path: how much of the 2-GPU step's extra time the exposed communication explains."""
    out = []
    for row in frame.to_dict("records"):
        gap, exposed = row["gap_ms"], row["exposed_ms"]
        if math.isnan(gap) or math.isnan(exposed):
            out.append(f"{row['path']}: not measured")
            continue
        out.append(f"{row['path']}: DDP step {row['step_ms']:.3f} ms vs 1-GPU step {row['local_step_ms']:.3f} ms: "
                   f"gap {gap:.3f} ms; exposed communication {exposed:.3f} ms "
                   f"({'explains ' + format(100 * exposed / gap, '.0f') + ' % of the gap' if gap > 0 else 'while the gap is not positive'}; "
                   f"difference {gap - exposed:+.3f} ms). Scaling efficiency {100 * row['scaling_efficiency']:.1f} %.")
    return out


def memory_frame(res: Any):  # -> pandas.DataFrame
    """Memory per rank in MiB: torch.cuda.memory_stats essentials (GPU) or process RSS (CPU)."""
    import pandas as pd

    rows = []
    for r, m in enumerate(res.ranks):
        mem = m.get("memory", {})
        row: dict[str, Any] = {"rank": r, "kind": mem.get("kind")}
        for k, v in mem.items():
            if k.endswith(("_bytes.all.peak", "_bytes.all.current")):
                row[k.replace("_bytes.all.", "_").replace(".", "_") + "_mib"] = round(v / 2**20, 1)
            elif k.startswith("num_") or k.endswith("_mib"):
                row[k] = round(v, 1) if isinstance(v, float) else v
        rows.append(row)
    return pd.DataFrame(rows)


def sweep_rows(res: Any) -> list[dict[str, Any]]:
    """The batch sweep, the ranks' communication and exposed shares averaged per batch size."""
    per_batch: dict[int, list[dict[str, Any]]] = {}
    for m in res.ranks:
        for row in m.get("sweep", []):
            per_batch.setdefault(row["batch"], []).append(row)
    out = []
    for b in sorted(per_batch):
        rows = per_batch[b]
        out.append({"batch": b, "global_batch": rows[0]["global_batch"],
                    "step_ms": statistics.mean(r["step_ms_unprofiled"] for r in rows),
                    "samples_per_s": statistics.mean(r["samples_per_s"] for r in rows),
                    **{k: statistics.mean(r[k] for r in rows) for k in ("comm_ms", "exposed_ms", "comm_share", "exposed_share")
                       if all(k in r for r in rows)}})
    return out


def verdict_c16(rows_by_path: Mapping[str, Sequence[Mapping[str, Any]]], threshold: float = 0.15) -> list[str]:
    """Claim C16 ("above 15 % communication, compress or raise the batch"), from the sweep."""
    out = []
    for path, rows in rows_by_path.items():
        rows = sorted(rows, key=lambda r: r["batch"])
        if len(rows) < 2 or "comm_share" not in rows[0]:
            out.append(f"{path}: no sweep")
            continue
        a, b = rows[0], rows[-1]
        below = [r["batch"] for r in rows if r["comm_share"] <= threshold]
        falls = b["comm_share"] < a["comm_share"]
        out.append(f"{path}: communication share {100 * a['comm_share']:.0f} % at batch {a['batch']} -> "
                   f"{100 * b['comm_share']:.0f} % at batch {b['batch']} ({'falls' if falls else 'does not fall'} as the batch grows); "
                   f"exposed {100 * a['exposed_share']:.0f} % -> {100 * b['exposed_share']:.0f} %; "
                   + (f"below {100 * threshold:.0f} % from batch {below[0]}" if below else f"never below {100 * threshold:.0f} %")
                   + (". Raising the batch lowers the share, as the rule assumes; the exposed share is what costs time"
                      if falls else ". The share did not fall here: the rule's premise does not hold on this run"))
    return out


def probe_traffic(sampler: Any, res: Any) -> list[dict[str, Any]]:
    """NVLink bytes NVML counted during the all-reduce probe, against what the algorithm sends."""
    probe = res.metrics.get("probe") or {}
    if not probe or not getattr(sampler, "available", False):
        return []
    counted = sampler.nvlink_bytes(probe["start"], probe["end"])
    rows = []
    for gpu, c in counted.items():
        expected = probe["bytes_per_rank_algorithm"]
        rows.append({"gpu": gpu, "nvml_sent_gib": c["tx_bytes"] / 2**30, "nvml_received_gib": c["rx_bytes"] / 2**30,
                     "all_reduce_sends_gib": expected / 2**30, "sent_over_expected": c["tx_bytes"] / expected if expected else None,
                     "seconds": c["seconds"]})
    return rows
