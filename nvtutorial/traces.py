"""Where the time of a DDP step goes, computed from a profiler trace.

Used in notebook 05. :func:`split` reads a ``torch.profiler`` Chrome/Perfetto trace (the file
``prof.export_chrome_trace`` writes, which https://ui.perfetto.dev opens) and computes, per
training step:

* **compute**: time covered by the GPU's own work (every kernel, copy and memset that is not
  NCCL), as a union of intervals, so two streams running at once count once;
* **communication**: time covered by NCCL kernels (names starting ``ncclKernel``,
  ``ncclDevKernel``, or ``nccl`` at all); it includes the time a rank waits inside a collective
  for its peer;
* **hidden**: the part of communication that runs while compute runs (interval intersection),
  which costs nothing;
* **exposed**: communication with no compute under it, which the step pays for in full;
* **idle**: the rest of the step (launch gaps, host work, waiting for the input).

On a CPU run (gloo) there are no GPU kernels: the same split is computed from CPU-side events
instead, and labelled so. Compute is then every ``cpu_op`` (ATen operators, autograd), and
communication the ``gloo:*`` events that gloo's worker threads record while a collective runs.
That is a simulation of the bookkeeping, not a GPU measurement.

The same interval arithmetic reads an Nsight Systems report (:func:`nsys_split`), so the two
tools can be compared on one run (claim C12).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

Interval = tuple[float, float]

COMM_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel", "nccl")
"""NCCL's GPU kernels: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` (NCCL >= 2.19),
``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` (older), and any other kernel NCCL names
``nccl*`` (its symmetric-memory kernels, for one). No other library's kernels start so."""
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""Chrome-trace categories of work that runs on the GPU."""
CPU_COMM_PREFIXES = ("gloo:",)
"""gloo's worker threads record ``gloo:all_reduce``, ``gloo:broadcast``... while a collective runs."""
CPU_NOT_COMPUTE_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms", "ProfilerStep")
"""CPU events that are bookkeeping around a collective, not computation."""
STEP_ANNOTATION = "train_step"
"""The ``record_function`` (and NVTX range) name around one training step."""
PHASES = ("forward", "backward", "optimizer")
"""Ranges the profiling workload marks inside each step (NVTX and ``record_function``)."""


# --------------------------------------------------------------------------- intervals

def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering exactly the union of ``intervals``."""
    out: list[list[float]] = []
    for start, end in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def total(intervals: Iterable[Interval]) -> float:
    """Length of the union of ``intervals``."""
    return sum(e - s for s, e in merge(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The union of ``a`` intersected with the union of ``b``, as merged intervals."""
    ma, mb = merge(a), merge(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(ma) and j < len(mb):
        start, end = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        if end > start:
            out.append((start, end))
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The union of ``a`` minus the union of ``b``."""
    out: list[Interval] = []
    mb = merge(b)
    for start, end in merge(a):
        cursor = start
        for bs, be in mb:
            if be <= cursor or bs >= end:
                continue
            if bs > cursor:
                out.append((cursor, bs))
            cursor = max(cursor, be)
            if cursor >= end:
                break
        if cursor < end:
            out.append((cursor, end))
    return out


# --------------------------------------------------------------------------- reading traces

def load(trace: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A Chrome trace as a dict (``.json`` or ``.json.gz``); a dict passes through."""
    if isinstance(trace, Mapping):
        return dict(trace)
    path = Path(trace)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:  # type: ignore[operator]
        data = json.load(fh)
    if isinstance(data, list):  # the bare-array form of the Chrome trace format
        data = {"traceEvents": data}
    return data


def _complete_events(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e and "dur" in e]


def _span(e: Mapping[str, Any]) -> Interval:
    start = float(e["ts"])
    return start, start + float(e["dur"])


def is_comm_kernel(name: str) -> bool:
    """Whether a GPU kernel is NCCL's (communication) rather than compute."""
    return name.startswith(COMM_KERNEL_PREFIXES)


@dataclasses.dataclass
class Activity:
    """The classified events of one rank's trace (times in microseconds, the trace's clock)."""

    source: str  # "gpu" or "cpu"
    compute: list[Interval]
    comm: list[Interval]
    steps: list[Interval]
    phases: dict[str, list[Interval]]
    phase_compute: dict[str, list[Interval]]
    rows: list[dict[str, Any]]  # one per event: kind, lane, start, end, name
    rank: int | None = None

    @property
    def label(self) -> str:
        if self.source == "gpu":
            return "GPU kernels (NCCL kernels = communication)"
        return "CPU ops (gloo threads = communication): a CPU simulation, not a GPU measurement"


def _rank_of(trace: Mapping[str, Any]) -> int | None:
    info = trace.get("distributedInfo") or {}
    rank = info.get("rank")
    return int(rank) if isinstance(rank, int) else None


def _annotations(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """CPU-side ``record_function`` ranges called ``name`` (not their GPU-side projections)."""
    return [e for e in events if e.get("name") == name and e.get("cat") == "user_annotation"]


def classify(trace: str | os.PathLike[str] | Mapping[str, Any]) -> Activity:
    """Sort a trace's events into compute, communication, steps and phases.

    GPU traces (any ``kernel`` event present) use the GPU's events; CPU traces use CPU ops.
    """
    data = load(trace)
    events = _complete_events(data)
    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES]
    steps = sorted(_span(e) for e in _annotations(events, STEP_ANNOTATION))  # one per step (they may touch)
    phases = {p: merge(_span(e) for e in _annotations(events, p)) for p in PHASES}
    compute: list[Interval] = []
    comm: list[Interval] = []
    rows: list[dict[str, Any]] = []
    phase_compute: dict[str, list[Interval]] = {p: [] for p in PHASES}

    if any(e.get("cat") == "kernel" for e in gpu):
        source = "gpu"
        # A kernel belongs to the phase during which the CPU launched it (found through the
        # launch's correlation id); without one, to the phase its start falls in.
        launches = {}
        for e in events:
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    launches[corr] = float(e["ts"])
        for e in gpu:
            span = _span(e)
            name = str(e.get("name", ""))
            kind = "comm" if is_comm_kernel(name) else "compute"
            (comm if kind == "comm" else compute).append(span)
            rows.append({"kind": kind, "lane": f"stream {e.get('tid')}", "start": span[0], "end": span[1], "name": name})
            if kind == "compute":
                t = launches.get((e.get("args") or {}).get("correlation"), span[0])
                for p, windows in phases.items():
                    if any(s <= t <= f for s, f in windows):
                        phase_compute[p].append(span)
                        break
    else:
        source = "cpu"
        for e in events:
            name = str(e.get("name", ""))
            span = _span(e)
            if name.startswith(CPU_COMM_PREFIXES):
                comm.append(span)
                rows.append({"kind": "comm", "lane": f"thread {e.get('tid')}", "start": span[0], "end": span[1], "name": name})
            elif e.get("cat") == "cpu_op" and not name.startswith(CPU_NOT_COMPUTE_PREFIXES):
                compute.append(span)
                rows.append({"kind": "compute", "lane": f"thread {e.get('tid')}", "start": span[0], "end": span[1], "name": name})
        merged = merge(compute)
        for p, windows in phases.items():
            phase_compute[p] = intersect(merged, windows)
    return Activity(source=source, compute=compute, comm=comm, steps=steps, phases=phases,
                    phase_compute=phase_compute, rows=rows, rank=_rank_of(data))


# --------------------------------------------------------------------------- the split

@dataclasses.dataclass(frozen=True)
class Split:
    """The time of an average step, in milliseconds; ``compute_only + hidden + exposed + idle = step``."""

    source: str  # "gpu" | "cpu" | "nsys"
    steps: int
    step_ms: float
    compute_ms: float
    comm_ms: float
    hidden_ms: float
    exposed_ms: float
    idle_ms: float
    phase_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    rank: int | None = None

    @property
    def compute_only_ms(self) -> float:
        return self.compute_ms - self.hidden_ms

    @property
    def comm_share(self) -> float:
        """Communication time over step time (the source tutorial's "communication 9 %")."""
        return self.comm_ms / self.step_ms if self.step_ms > 0 else float("nan")

    @property
    def exposed_share(self) -> float:
        """Exposed communication over step time: what overlapping could still win."""
        return self.exposed_ms / self.step_ms if self.step_ms > 0 else float("nan")

    @property
    def hidden_fraction(self) -> float:
        """Share of the communication that ran under compute."""
        return self.hidden_ms / self.comm_ms if self.comm_ms > 0 else float("nan")

    @property
    def label(self) -> str:
        return {"gpu": "GPU kernels (torch.profiler)", "nsys": "GPU kernels (Nsight Systems)"}.get(
            self.source, "CPU ops, gloo: a simulation, not a GPU measurement")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(compute_only_ms=self.compute_only_ms, comm_share=self.comm_share,
                   exposed_share=self.exposed_share, hidden_fraction=self.hidden_fraction)
        return out


def split_intervals(compute: Sequence[Interval], comm: Sequence[Interval], windows: Sequence[Interval],
                    source: str, steps: int | None = None, phase_compute: Mapping[str, Sequence[Interval]] | None = None,
                    rank: int | None = None, unit_ms: float = 1e-3) -> Split:
    """The split of intervals restricted to ``windows`` (the steps), averaged over ``steps``.

    ``unit_ms`` converts the intervals' unit to milliseconds (1e-3 for microseconds).
    """
    windows = list(windows)
    win = merge(windows)
    if not win:
        raise ValueError("no step window: nothing to analyse (was the step range recorded?)")
    n = steps if steps is not None else len(windows)
    c = intersect(compute, win)
    m = intersect(comm, win)
    hidden = total(intersect(c, m))
    busy = total(list(c) + list(m))
    scale = unit_ms / max(n, 1)
    phases = {p: total(intersect(v, win)) * scale for p, v in (phase_compute or {}).items()}
    return Split(source=source, steps=n, step_ms=total(win) * scale, compute_ms=total(c) * scale,
                 comm_ms=total(m) * scale, hidden_ms=hidden * scale, exposed_ms=(total(m) - hidden) * scale,
                 idle_ms=(total(win) - busy) * scale, phase_ms=phases, rank=rank)


def split(trace: str | os.PathLike[str] | Mapping[str, Any] | Activity, skip_first: int = 0) -> Split:
    """The compute / communication / hidden / exposed split of the average step of a trace.

    Steps are the ``train_step`` ranges; a trace without them is treated as one step spanning
    all its activity. ``skip_first`` leaves out the first steps (warm-up inside the trace).
    """
    act = trace if isinstance(trace, Activity) else classify(trace)
    windows = act.steps[skip_first:] if act.steps else []
    if not windows:
        everything = merge(act.compute + act.comm)
        if not everything:
            raise ValueError("the trace holds neither compute nor communication events")
        windows = [(everything[0][0], everything[-1][1])]
    return split_intervals(act.compute, act.comm, windows, act.source, phase_compute=act.phase_compute, rank=act.rank)


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


# --------------------------------------------------------------------------- timeline

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


# --------------------------------------------------------------------------- Nsight Systems

NSYS_TRACE = "cuda,nvtx"


def nsys_available() -> str | None:
    """The path of ``nsys`` when it is on PATH, else ``None``."""
    return shutil.which("nsys")


def nsys_command(run_command: Sequence[str], output: str | os.PathLike[str]) -> list[str]:
    """The ``nsys profile`` command line that records ``run_command`` (a launch) into ``output``.

    CUDA and NVTX only (no CPU sampling): small reports, and the NVTX ``train_step`` ranges mark
    the steps. ``torch.profiler`` must be off in that run: both use CUPTI.
    """
    return ["nsys", "profile", f"--trace={NSYS_TRACE}", "--sample=none", "--cpuctxsw=none",
            "--force-overwrite=true", "--output", str(output), *run_command]


def nsys_stats_command(report: str | os.PathLike[str]) -> list[str]:
    """``nsys stats`` for the GPU kernel summary as CSV (also exports the report's SQLite file)."""
    return ["nsys", "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", "--force-export=true", str(report)]


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


def run_nsys(workload: str, *, params: Any = None, nproc: int = 2, env: Mapping[str, Any] | None = None,
             timeout: float = 300.0, out: str | os.PathLike[str] | None = None) -> NsysResult:
    """Run ``workload`` under ``nsys profile``, then ``nsys stats``; the split per GPU from the report.

    Where ``nsys`` is not on PATH nothing runs: the result says so and holds the command that
    would have run. The run itself goes through the course launcher's command line, so it is
    exactly the run the notebook measures with ``torch.profiler`` (minus the profiler).
    """
    from . import launch

    spec = launch.prepare(workload, nproc=nproc, params=params, env=env, out=out, timeout=timeout, output="none")
    report = spec.run_dir / "nsys_report"
    command = nsys_command(spec.command(), report)
    if nsys_available() is None:
        return NsysResult(available=False, command=command,
                          reason="nsys (Nsight Systems) is not on PATH here: the split below comes from torch.profiler")
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=launch.child_environment(spec), start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return NsysResult(available=True, command=command, reason=f"nsys did not finish within {timeout:g} s",
                          returncode=None, wall_s=time.perf_counter() - t0, output_tail=output.splitlines()[-20:])
    wall = time.perf_counter() - t0
    rep = next((p for p in (report.with_suffix(".nsys-rep"), report.with_suffix(".qdrep")) if p.exists()), None)
    result = NsysResult(available=True, command=command, returncode=proc.returncode, wall_s=wall,
                        report=str(rep) if rep else None, output_tail=output.splitlines()[-20:])
    if rep is None:
        result.reason = f"nsys exited with code {proc.returncode} and wrote no report"
        return result
    stats = subprocess.run(nsys_stats_command(rep), capture_output=True, text=True, timeout=timeout, check=False)
    result.kernel_summary = parse_kernel_summary(stats.stdout)
    sqlite_path = rep.with_suffix(".sqlite")
    if sqlite_path.exists():
        result.sqlite = str(sqlite_path)
        try:
            result.splits = nsys_split(sqlite_path)
        except sqlite3.Error as exc:
            result.reason = f"could not read the kernel table of {sqlite_path.name}: {exc}"
    elif not result.reason:
        result.reason = "nsys stats wrote no SQLite export: only the kernel summary is available"
    return result


def nsys_display_command(workload: str, params: Mapping[str, Any] | None = None, nproc: int = 2,
                         output: str = "profile_step_report") -> str:
    """The ``nsys profile`` command to type in a terminal for the same run (torchrun form).

    Only the parameters given are spelled out; pass ``profiler=False`` (nsys and torch.profiler
    both use CUPTI: one at a time)."""
    from . import params as params_mod
    from . import workloads

    given = dict(params or {})
    strings = params_mod.to_strings(params_mod.build(workloads.load(workload).Params, given))  # validates
    sets = " ".join(f"--set {k}={strings[k]}" for k in given if strings[k] != "")
    return (f"nsys profile --trace={NSYS_TRACE} --sample=none --cpuctxsw=none --output {output} \\\n"
            f"    torchrun --standalone --nproc-per-node {nproc} -m nvtutorial.workloads.{workload} {sets}")


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
