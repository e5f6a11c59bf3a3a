"""Profiler traces and Nsight Systems reports read in the notebook: the split per rank, one step's
timeline, the nsys kernel summary and its split, and claim C12 (notebook 05).

The interval arithmetic (what compute, communication, hidden and exposed are) is
:mod:`nvtutorial.tracesplit`; :func:`nvtutorial.experiments.profiling.run_nsys` makes the
Nsight Systems reports read here.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..tracesplit import STEP_ANNOTATION, Split, classify, is_comm_kernel, merge, split, split_intervals


def rank_traces(run_dir: str | os.PathLike[str], pattern: str = "trace_rank*.json") -> list[Path]:
    """A run's per-rank trace files, in rank order."""
    found = list(Path(run_dir).glob(pattern))

    def rank_of(p: Path) -> int:
        m = re.search(r"rank(\d+)", p.name)
        return int(m.group(1)) if m else 0

    return sorted(found, key=rank_of)


def split_table(traces: Sequence[str | os.PathLike[str]] | str | os.PathLike[str]):  # -> pandas.DataFrame
    """One row per rank: the split of each trace (``traces``: files, or a run folder)."""
    import pandas as pd

    paths = rank_traces(traces) if isinstance(traces, (str, os.PathLike)) and Path(traces).is_dir() else list(traces)  # type: ignore[arg-type]
    rows = []
    for i, path in enumerate(paths):
        s = split(path)
        row = s.to_dict()
        row["rank"] = s.rank if s.rank is not None else i
        row.pop("phase_ms")
        rows.append(row)
    return pd.DataFrame(rows).set_index("rank")


def timeline(traces: Sequence[str | os.PathLike[str] | Mapping[str, Any]], step: int = -1, align: str = "clock"):
    """Rows ``rank, kind, lane, start_ms, end_ms, name`` of one step of every rank's trace.

    ``step``: which ``train_step`` (index; -1 = the last). ``align="clock"`` keeps the ranks'
    clocks (processes of one host share it, so who waits for whom shows); ``"step"`` starts
    every rank's step at 0. Without step ranges the whole trace is shown.
    """
    import pandas as pd

    acts = [classify(t) for t in traces]
    windows = []
    for act in acts:
        if act.steps:
            windows.append(act.steps[step])
        else:
            spans = merge(act.compute + act.comm)
            windows.append((spans[0][0], spans[-1][1]) if spans else (0.0, 0.0))
    origin = min(w[0] for w in windows) if windows else 0.0
    rows = []
    for i, (act, (ws, we)) in enumerate(zip(acts, windows)):
        zero = ws if align == "step" else origin
        rank = act.rank if act.rank is not None else i
        rows.append({"rank": rank, "kind": "step", "lane": "step", "start_ms": (ws - zero) / 1e3,
                     "end_ms": (we - zero) / 1e3, "name": STEP_ANNOTATION})
        for p, spans in act.phases.items():
            for s, e in spans:
                if s < we and e > ws:
                    rows.append({"rank": rank, "kind": "phase", "lane": "phase", "start_ms": (max(s, ws) - zero) / 1e3,
                                 "end_ms": (min(e, we) - zero) / 1e3, "name": p})
        for r in act.rows:
            if r["start"] < we and r["end"] > ws:
                rows.append({"rank": rank, "kind": r["kind"], "lane": r["lane"], "start_ms": (max(r["start"], ws) - zero) / 1e3,
                             "end_ms": (min(r["end"], we) - zero) / 1e3, "name": r["name"]})
    return pd.DataFrame(rows, columns=["rank", "kind", "lane", "start_ms", "end_ms", "name"])


@dataclasses.dataclass
class NsysResult:
    """What running a workload under Nsight Systems gave."""

    available: bool
    command: list[str]
    reason: str = ""
    returncode: int | None = None
    report: str | None = None
    sqlite: str | None = None
    kernel_summary: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    splits: list[Split] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0
    output_tail: list[str] = dataclasses.field(default_factory=list)

    def to_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        rows = []
        for i, s in enumerate(self.splits):
            row = s.to_dict()
            row.pop("phase_ms")
            row["rank"] = s.rank if s.rank is not None else i
            rows.append(row)
        return pd.DataFrame(rows).set_index("rank") if rows else pd.DataFrame()


def parse_kernel_summary(text: str) -> list[dict[str, Any]]:
    """Rows of ``nsys stats --report cuda_gpu_kern_sum --format csv`` (header found by its ``Name`` column)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Total Time" in line and "Name" in line), None)
    if start is None:
        return []
    rows = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name = row.get("Name")
        total_ns = row.get("Total Time (ns)")
        if not name or total_ns in (None, ""):
            continue
        try:
            rows.append({"name": name, "total_ns": float(total_ns.replace(",", "")),
                         "instances": int(float((row.get("Instances") or "0").replace(",", "")))})
        except ValueError:
            continue
    return rows


def kernel_summary_split(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Total NCCL and non-NCCL kernel time (ms, all GPUs together) from a kernel summary."""
    comm = sum(r["total_ns"] for r in rows if is_comm_kernel(str(r["name"])))
    compute = sum(r["total_ns"] for r in rows if not is_comm_kernel(str(r["name"])))
    return {"compute_ms": compute / 1e6, "comm_ms": comm / 1e6}


def nsys_split(sqlite_path: str | os.PathLike[str]) -> list[Split]:
    """The split per GPU from an Nsight Systems SQLite export, steps from NVTX ``train_step`` ranges.

    Kernels come from ``CUPTI_ACTIVITY_KIND_KERNEL`` (names via ``StringIds``), copies and
    memsets from their tables (compute, as in :func:`classify`), steps from the NVTX ranges of
    the process that ran on that GPU; times are nanoseconds.
    """
    con = sqlite3.connect(str(sqlite_path))
    try:
        kernels = con.execute(
            "SELECT k.start, k.end, k.deviceId, k.globalPid, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName").fetchall()
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):  # copies count as compute, as above
            if table in tables:
                kernels += [(*row, table) for row in con.execute(f"SELECT start, end, deviceId, globalPid FROM {table}")]
        nvtx_cols = {row[1] for row in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        if "textId" in nvtx_cols:
            query = ("SELECT n.start, n.end, n.globalTid, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                     "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL")
        else:
            query = "SELECT start, end, globalTid, text FROM NVTX_EVENTS WHERE end IS NOT NULL"
        ranges = con.execute(query).fetchall()
    finally:
        con.close()
    # globalTid / globalPid are serialized ids: the process id is (id >> 24) & 0xFFFFFF.
    by_device: dict[int, dict[str, Any]] = {}
    for start, end, device, gpid, name in kernels:
        d = by_device.setdefault(int(device), {"compute": [], "comm": [], "pids": set()})
        d["comm" if is_comm_kernel(str(name)) else "compute"].append((float(start), float(end)))
        d["pids"].add(_pid(gpid))
    splits = []
    for device in sorted(by_device):
        d = by_device[device]
        steps = [(float(s), float(e)) for s, e, tid, text in ranges
                 if text == STEP_ANNOTATION and _pid(tid) in d["pids"]]
        if not steps:
            spans = merge(d["compute"] + d["comm"])
            steps = [(spans[0][0], spans[-1][1])] if spans else []
        if steps:
            splits.append(split_intervals(d["compute"], d["comm"], steps, "nsys", rank=device, unit_ms=1e-6))
    return splits


def _pid(global_id: Any) -> int | None:
    return (int(global_id) >> 24) & 0xFFFFFF if global_id is not None else None


def verdict_c12(profiler_split: Mapping[str, float] | Split | None, nsys: NsysResult | None) -> str:
    """Claim C12: NVTX + Nsight Systems show the split; torch.profiler gives the same without nsys."""
    if profiler_split is None:
        return "C12: no torch.profiler split was computed"
    comm = _get_value(profiler_split, "comm_ms")
    share = _get_value(profiler_split, "comm_share")
    head = (f"C12: torch.profiler alone gave the split (communication {comm:.3f} ms per step, "
            f"{100 * share:.0f} % of the step), no Nsight Systems needed")
    if nsys is None or not nsys.available:
        return head + "; nsys is not installed here, so the comparison with it was not run"
    if not nsys.splits:
        return head + f"; nsys ran but gave no split ({nsys.reason or 'see its output'})"
    n_comm = statistics_mean([s.comm_ms for s in nsys.splits])
    n_share = statistics_mean([s.comm_share for s in nsys.splits])
    return (head + f"; Nsight Systems on the same run: communication {n_comm:.3f} ms, {100 * n_share:.0f} % of the step "
            f"(difference {100 * (n_share - share):+.1f} points): the claim holds, and either tool will do")


def _get_value(obj: Any, key: str) -> float:
    value = obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key)
    return float(value)


def statistics_mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
