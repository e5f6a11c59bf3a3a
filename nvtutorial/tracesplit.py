"""Where the time of a DDP step goes, computed from a profiler trace: interval arithmetic used on
both sides (the ``profile_step`` workload splits its own trace on each rank; the notebook splits
Nsight Systems reports and draws timelines with :mod:`nvtutorial.chapters.ch05_profiling.report_traces`).

Used in notebook 05. :func:`split` reads a ``torch.profiler`` Chrome/Perfetto trace (the file
``prof.export_chrome_trace`` writes, which https://ui.perfetto.dev opens) and computes, per
training step:

* **compute**: time covered by the GPU's own work (every kernel, copy and memset that is not
  NCCL), as a union of intervals, so two streams running at once count once;
* **communication**: time covered by NCCL kernels (names starting ``ncclKernel``,
  ``ncclDevKernel``, or ``nccl`` at all); it includes the time a rank waits inside a collective
  for its peer;
* **hidden**: the part of communication that runs while compute runs (interval intersection):
  the step does not wait for it, but on a GPU it is not free, since NCCL's kernels take SMs and
  memory bandwidth from the compute they overlap, which may then take longer;
* **exposed**: communication with no compute under it, which the step pays for in full;
* **idle**: the rest of the step (launch gaps, host work, waiting for the input).

On a CPU run (gloo) there are no GPU kernels: the same split is computed from CPU-side events
instead, and labelled so. Compute is then every ``cpu_op`` (ATen operators, autograd), and
communication the ``gloo:*`` events that gloo's worker threads record while a collective runs.
That is a simulation of the bookkeeping, not a GPU measurement.

The same interval arithmetic reads an Nsight Systems report
(:func:`nvtutorial.chapters.ch05_profiling.report_traces.nsys_split`), so the two tools can be compared on one run
(claim C12). Pure Python: no torch, no pandas.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
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
    base_us: float = 0.0  # the trace's ``baseTimeNanoseconds`` in µs: its times are relative to it
    host: str | None = None

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
            rows.append(
                {"kind": kind, "lane": f"stream {e.get('tid')}", "start": span[0], "end": span[1], "name": name}
            )
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
                rows.append(
                    {"kind": "comm", "lane": f"thread {e.get('tid')}", "start": span[0], "end": span[1], "name": name}
                )
            elif e.get("cat") == "cpu_op" and not name.startswith(CPU_NOT_COMPUTE_PREFIXES):
                compute.append(span)
                rows.append(
                    {
                        "kind": "compute",
                        "lane": f"thread {e.get('tid')}",
                        "start": span[0],
                        "end": span[1],
                        "name": name,
                    }
                )
        merged = merge(compute)
        for p, windows in phases.items():
            phase_compute[p] = intersect(merged, windows)
    return Activity(
        source=source,
        compute=compute,
        comm=comm,
        steps=steps,
        phases=phases,
        phase_compute=phase_compute,
        rows=rows,
        rank=_rank_of(data),
        base_us=float(data.get("baseTimeNanoseconds") or 0) / 1e3,
        host=data.get("host_name"),
    )


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
            self.source, "CPU ops, gloo: a simulation, not a GPU measurement"
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(
            compute_only_ms=self.compute_only_ms,
            comm_share=self.comm_share,
            exposed_share=self.exposed_share,
            hidden_fraction=self.hidden_fraction,
        )
        return out


def split_intervals(
    compute: Sequence[Interval],
    comm: Sequence[Interval],
    windows: Sequence[Interval],
    source: str,
    steps: int | None = None,
    phase_compute: Mapping[str, Sequence[Interval]] | None = None,
    rank: int | None = None,
    unit_ms: float = 1e-3,
) -> Split:
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
    return Split(
        source=source,
        steps=n,
        step_ms=total(win) * scale,
        compute_ms=total(c) * scale,
        comm_ms=total(m) * scale,
        hidden_ms=hidden * scale,
        exposed_ms=(total(m) - hidden) * scale,
        idle_ms=(total(win) - busy) * scale,
        phase_ms=phases,
        rank=rank,
    )


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


def split_steps(trace: str | os.PathLike[str] | Mapping[str, Any] | Activity, skip_first: int = 0) -> list[Split]:
    """The split of each ``train_step`` of a trace on its own: the repeats behind :func:`split`'s average."""
    act = trace if isinstance(trace, Activity) else classify(trace)
    return [split_intervals(act.compute, act.comm, [w], act.source, rank=act.rank) for w in act.steps[skip_first:]]


# --------------------------------------------------------------------------- waiting or moving data


@dataclasses.dataclass(frozen=True)
class Waiting:
    """One rank's communication in an average step, split by when the other ranks arrived (ms per step).

    A collective cannot move data before every rank has joined it: the time a rank spends inside
    a collective before the last rank arrives is **waiting** (the other rank is behind: skew), the
    time after it is **transfer** (data on the link, and the collective's own latency).
    ``comm = wait + transfer`` and ``exposed = exposed_wait + exposed_transfer``: the parts with no
    compute of this rank under them.
    """

    rank: int | None
    steps: int
    collectives: int  # per step
    comm_ms: float
    wait_ms: float
    transfer_ms: float
    exposed_ms: float
    exposed_wait_ms: float
    exposed_transfer_ms: float
    last_share: float  # share of the collectives this rank was the last to join

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _shifted(intervals: Iterable[Interval], by: float) -> list[Interval]:
    return [(s + by, e + by) for s, e in intervals]


@dataclasses.dataclass
class Paired:
    """Every rank's collectives split at the last rank's arrival (times on rank 0's clock base)."""

    acts: list[Activity]
    windows: list[list[Interval]]  # each rank's steps, shifted
    offsets: list[float]
    wait: list[list[Interval]]  # per rank: inside a collective, before the last rank joined
    transfer: list[list[Interval]]  # per rank: after it
    last: list[int]  # per rank: collectives it was the last to join
    collectives: int  # in all steps together


def pair_intervals(
    traces: Sequence[str | os.PathLike[str] | Mapping[str, Any] | Activity], skip_first: int = 0
) -> Paired:
    """Match the ranks' collectives one to one and split each at the last rank's arrival.

    The k-th collective of step i on one rank is the k-th of step i on every rank (DDP issues
    the same all-reduces in the same order everywhere). Its data can move only once the last
    rank has joined: ``arrival = max(start over ranks)``; before that a rank waits. Needs the
    traces of one host (processes of one machine share its clock) with the same number of steps
    and of collectives in each step; raises ``ValueError`` naming what differs otherwise.
    """
    acts = [t if isinstance(t, Activity) else classify(t) for t in traces]
    if len(acts) < 2:
        raise ValueError("pairing needs the traces of at least two ranks")
    hosts = {a.host for a in acts if a.host}
    if len(hosts) > 1:
        raise ValueError(
            f"the traces come from different hosts ({', '.join(sorted(hosts))}): their clocks "
            "cannot be compared; pair ranks of one machine"
        )
    offsets = [a.base_us - acts[0].base_us for a in acts]  # times on rank 0's base
    windows = [_shifted(a.steps[skip_first:], off) for a, off in zip(acts, offsets)]
    counts = [len(w) for w in windows]
    if not all(counts) or len(set(counts)) > 1:
        raise ValueError(f"the traces hold {counts} train_step ranges: every rank needs the same steps")
    kernels: list[list[list[Interval]]] = []  # [rank][step] -> collectives in order of start
    for act, wins, off in zip(acts, windows, offsets):
        comm = sorted(_shifted(act.comm, off))
        kernels.append([[c for c in comm if ws <= c[0] < we] for ws, we in wins])
    for i in range(counts[0]):
        n = [len(k[i]) for k in kernels]
        if len(set(n)) > 1:
            raise ValueError(f"step {i}: the ranks ran {n} collectives: they cannot be paired one to one")
    wait: list[list[Interval]] = [[] for _ in acts]
    transfer: list[list[Interval]] = [[] for _ in acts]
    last = [0] * len(acts)
    collectives = 0
    for i in range(counts[0]):
        for k in range(len(kernels[0][i])):
            arrival = max(kernels[r][i][k][0] for r in range(len(acts)))
            collectives += 1
            for r in range(len(acts)):
                s, e = kernels[r][i][k]
                wait[r].append((s, min(arrival, e)))
                transfer[r].append((max(s, arrival), e))
                last[r] += s == arrival
    return Paired(
        acts=acts, windows=windows, offsets=offsets, wait=wait, transfer=transfer, last=last, collectives=collectives
    )


def pair(traces: Sequence[str | os.PathLike[str] | Mapping[str, Any] | Activity], skip_first: int = 0) -> list[Waiting]:
    """Waiting and transfer for every rank, from all ranks' traces of the same steps, read on one
    clock (see :func:`pair_intervals`)."""
    paired = pair_intervals(traces, skip_first)
    steps = len(paired.windows[0])
    out = []
    for r, (act, wins, off) in enumerate(zip(paired.acts, paired.windows, paired.offsets)):
        win = merge(wins)
        compute = intersect(_shifted(act.compute, off), win)
        moving = intersect(paired.transfer[r], win)
        waiting = subtract(intersect(paired.wait[r], win), moving)
        scale = 1e-3 / steps
        ew, et = total(subtract(waiting, compute)), total(subtract(moving, compute))
        out.append(
            Waiting(
                rank=act.rank if act.rank is not None else r,
                steps=steps,
                collectives=paired.collectives // steps,
                comm_ms=(total(waiting) + total(moving)) * scale,
                wait_ms=total(waiting) * scale,
                transfer_ms=total(moving) * scale,
                exposed_ms=(ew + et) * scale,
                exposed_wait_ms=ew * scale,
                exposed_transfer_ms=et * scale,
                last_share=paired.last[r] / paired.collectives if paired.collectives else float("nan"),
            )
        )
    return out
