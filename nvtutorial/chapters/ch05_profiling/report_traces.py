"""Profiler traces and Nsight Systems reports read in the notebook: the split per rank, one step's
timeline, the nsys kernel summary and its split, and claim C12 (notebook 05).

The interval arithmetic (what compute, communication, hidden and exposed are) is
:mod:`nvtutorial.tracesplit`; :func:`nvtutorial.chapters.ch05_profiling.lab.run_nsys` makes the
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

from nvtutorial.chapters.ch05_profiling.report_wire import link_estimate, ranks
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult, label_of
from nvtutorial.tracesplit import (
    STEP_ANNOTATION,
    Split,
    classify,
    is_comm_kernel,
    merge,
    pair_intervals,
    split,
    split_intervals,
)


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
    every rank's step at 0. Without step ranges the whole trace is shown. Where the ranks'
    collectives pair up (:func:`nvtutorial.tracesplit.pair_intervals`), communication is shown as
    ``wait`` (before the last rank joined) and ``transfer`` (after); else as ``comm``.
    """
    import pandas as pd

    acts = [classify(t) for t in traces]
    paired = None
    if len(acts) >= 2 and all(a.steps for a in acts):
        try:
            paired = pair_intervals(acts)
        except ValueError:
            paired = None
    windows = []
    for act in acts:
        if act.steps:
            windows.append(act.steps[step])
        else:
            spans = merge(act.compute + act.comm)
            windows.append((spans[0][0], spans[-1][1]) if spans else (0.0, 0.0))
    origin = min(w[0] for w in windows) if windows else 0.0
    rows = []

    def add(rank: int, kind: str, lane: str, s: float, e: float, name: str, ws: float, we: float, zero: float) -> None:
        if e > s and s < we and e > ws:
            rows.append(
                {
                    "rank": rank,
                    "kind": kind,
                    "lane": lane,
                    "start_ms": (max(s, ws) - zero) / 1e3,
                    "end_ms": (min(e, we) - zero) / 1e3,
                    "name": name,
                }
            )

    for i, (act, (ws, we)) in enumerate(zip(acts, windows)):
        zero = ws if align == "step" else origin
        rank = act.rank if act.rank is not None else i
        rows.append(
            {
                "rank": rank,
                "kind": "step",
                "lane": "step",
                "start_ms": (ws - zero) / 1e3,
                "end_ms": (we - zero) / 1e3,
                "name": STEP_ANNOTATION,
            }
        )
        for p, spans in act.phases.items():
            for s, e in spans:
                add(rank, "phase", "phase", s, e, p, ws, we, zero)
        for r in act.rows:
            if r["kind"] != "comm" or paired is None:
                add(rank, r["kind"], r["lane"], r["start"], r["end"], r["name"], ws, we, zero)
        if paired is not None:
            off = paired.offsets[i]
            for kind, spans in (("wait", paired.wait[i]), ("transfer", paired.transfer[i])):
                for s, e in spans:
                    add(rank, kind, "communication", s - off, e - off, kind, ws, we, zero)
    return pd.DataFrame(rows, columns=["rank", "kind", "lane", "start_ms", "end_ms", "name"])


@dataclasses.dataclass(frozen=True)
class KernelRow:
    """One kernel of Nsight Systems' kernel summary (``cuda_gpu_kern_sum``), all GPUs together."""

    name: str
    total_ns: float
    instances: int


@dataclasses.dataclass
class NsysResult:
    """What running a workload under Nsight Systems gave."""

    available: bool
    command: list[str]
    reason: str = ""
    returncode: int | None = None
    report: str | None = None
    sqlite: str | None = None
    kernel_summary: list[KernelRow] = dataclasses.field(default_factory=list)
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


def parse_kernel_summary(text: str) -> list[KernelRow]:
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
            rows.append(
                KernelRow(
                    name,
                    float(total_ns.replace(",", "")),
                    int(float((row.get("Instances") or "0").replace(",", ""))),
                )
            )
        except ValueError:
            continue
    return rows


def kernel_summary_split(rows: Sequence[KernelRow]) -> dict[str, float]:
    """Total NCCL and non-NCCL kernel time (ms, all GPUs together) from a kernel summary."""
    comm = sum(r.total_ns for r in rows if is_comm_kernel(r.name))
    compute = sum(r.total_ns for r in rows if not is_comm_kernel(r.name))
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
            "JOIN StringIds s ON s.id = k.shortName"
        ).fetchall()
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):  # copies count as compute, as above
            if table in tables:
                kernels += [
                    (*row, table) for row in con.execute(f"SELECT start, end, deviceId, globalPid FROM {table}")
                ]
        nvtx_cols = {row[1] for row in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        if "textId" in nvtx_cols:
            query = (
                "SELECT n.start, n.end, n.globalTid, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL"
            )
        else:
            query = "SELECT start, end, globalTid, text FROM NVTX_EVENTS WHERE end IS NOT NULL"
        ranges = con.execute(query).fetchall()
    finally:
        con.close()
    # globalTid / globalPid are serialized ids: the process id is (id >> 24) & 0xFFFFFF.
    by_device: dict[int, _Device] = {}
    for start, end, device, gpid, name in kernels:
        d = by_device.setdefault(int(device), _Device())
        (d.comm if is_comm_kernel(str(name)) else d.compute).append((float(start), float(end)))
        d.pids.add(_pid(gpid))
    splits = []
    for device in sorted(by_device):
        d = by_device[device]
        steps = [(float(s), float(e)) for s, e, tid, text in ranges if text == STEP_ANNOTATION and _pid(tid) in d.pids]
        if not steps:
            spans = merge(d.compute + d.comm)
            steps = [(spans[0][0], spans[-1][1])] if spans else []
        if steps:
            splits.append(split_intervals(d.compute, d.comm, steps, "nsys", rank=device, unit_ms=1e-6))
    return splits


@dataclasses.dataclass
class _Device:
    """One GPU's work in an Nsight Systems report: its kernels' intervals (ns) and the processes that ran them."""

    compute: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    comm: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    pids: set[int | None] = dataclasses.field(default_factory=set)


def _pid(global_id: int | None) -> int | None:
    return (int(global_id) >> 24) & 0xFFFFFF if global_id is not None else None


def verdict_c12(res: RunResult, nsys: NsysResult | None = None, why: str | None = None) -> Verdict:
    """Claim C12: NVTX ranges and Nsight Systems show where the time of a step goes.

    ``holds`` where each rank's communication in the split is time on the wire; ``partly`` where
    more than half of some rank's "communication" was waiting for the other rank: a per-rank split,
    from either tool, cannot tell the link from the skew; both ranks' traces on one clock can. ``unverifiable`` where
    the ranks ran on the CPU: ``why`` says why (the plan's reason: two ranks need two GPUs, or no GPU here).
    """
    where = label_of(res)
    maybe = [m.split for m in ranks(res)]
    splits = [s for s in maybe if s is not None]
    if not splits or len(splits) < len(maybe):
        return Verdict("C12", "unverifiable", "no profiled split in this run", {}, where)
    est = link_estimate(splits)
    comm = [s.comm_ms for s in splits]
    waiting = [w / c if c > 0 else 0.0 for w, c in zip(est.wait_ms, comm)]
    worst = max(range(len(waiting)), key=lambda r: waiting[r])
    numbers: dict[str, object] = {
        "comm_ms": comm,
        "waiting_share": waiting,
        "link_ms": est.link_ms,
        "nsys": bool(nsys and nsys.available),
        "source": splits[0].source,
    }
    head = (
        "the trace gave a split per rank with named phases, without Nsight Systems (torch.profiler with "
        + ("CUDA activity" if splits[0].source == "gpu" else "CPU activity only: a simulation")
        + ")"
    )
    if nsys is not None and nsys.available and nsys.splits:
        numbers["nsys_comm_ms"] = [x.comm_ms for x in nsys.splits]
        head += (
            "; Nsight Systems on the same run: communication "
            + ", ".join(f"{x.comm_ms:.2f}" for x in nsys.splits)
            + " ms per GPU"
        )
    elif nsys is not None:
        head += f"; Nsight Systems: {nsys.reason or 'no split'}"
    if splits[0].source != "gpu":
        return Verdict(
            "C12",
            "unverifiable",
            f"not settled here: this run's ranks ran on the CPU ({why or 'a CPU simulation'}), and NVTX ranges and "
            f"Nsight Systems trace GPU work; {head}. In this "
            f"simulation too, {100 * waiting[worst]:.0f} % of rank {worst}'s communication "
            f"({comm[worst]:.2f} ms) was waiting for the other rank ({est.source})",
            numbers,
            where,
        )
    if waiting[worst] > 0.5:
        text = (
            f"partly: {head}. But what either tool calls communication is NCCL kernel time, waiting for the other "
            f"rank included: {100 * waiting[worst]:.0f} % of rank {worst}'s {comm[worst]:.2f} ms ({est.source}). "
            "Only both ranks' traces on one clock tell the link from the skew"
        )
        return Verdict("C12", "partly", text, numbers, where)
    return Verdict(
        "C12",
        "holds",
        f"holds: {head}; the ranks' communication agrees (at most {100 * waiting[worst]:.0f} % waiting on any rank)",
        numbers,
        where,
    )
