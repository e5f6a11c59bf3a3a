"""What the ``profile_step`` runs of notebook 05 say, as tables and verdicts (parent side; no CUDA).

Every function reads a :class:`~nvtutorial.results.RunResult` (a fresh run, or a committed one
loaded with ``RunResult.load``), its ranks typed (``result.ranks_as(schema.Rank)``), and reports
**every rank**: the split of a step, how much of
each rank's communication was waiting for the other rank (skew) and how much was data on the
wire, what the profiler itself costs, and what the gradient exchange costs measured without it
(DDP step against the same step under ``no_sync``, through :func:`~nvtutorial.report.verdict.compare`).

Runs made before the workload recorded repeats and paired traces (the committed reference of
2026-11-30) carry per-rank averages only: the functions then say which estimate they used
("the least communication of any rank") and skip what needs repeats, saying so.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch05_profiling.report_wire import (
    Exposure,
    SweepPoint,
    SweepWire,
    comparisons,
    exposure,
    joint_status,
    link_estimate,
    paired_times,
    ranks,
    sweep_points,
)
from nvtutorial.chapters.ch05_profiling.schema import Kinds, Probe, Split
from nvtutorial.report.verdict import Comparison, Verdict, compare
from nvtutorial.results import RunResult, label_of

if TYPE_CHECKING:
    import pandas as pd

    from nvtutorial.machine.telemetry import Sampler

SPLIT_KEYS = ("compute_only_ms", "hidden_ms", "exposed_ms", "idle_ms")
"""The four parts that add up to the step: compute alone, hidden and exposed communication, idle."""


def _fmt(values: Sequence[float], unit: str = "ms", digits: int = 2) -> str:
    return ", ".join(f"rank {r} {v:.{digits}f} {unit}" for r, v in enumerate(values))


def probe(res: RunResult) -> Probe | None:
    """Rank 0's all-reduce probe (None: the run had none, or no rank reported)."""
    typed = ranks(res)
    return typed[0].probe if typed else None


# --------------------------------------------------------------------------- the split, per rank


LINK_KEYS = ("wait_ms", "transfer_ms", "exposed_wait_ms", "exposed_transfer_ms", "last_share")
"""The columns of waiting against transfer a paired split adds to :func:`split_frame`."""


def link_columns(split: Split | None) -> dict[str, float]:
    """The waiting/transfer part of a rank's split, or ``{}`` where it was not computed."""
    link = split.link if split is not None else None
    if link is None:
        return {}
    return {k: v for k in LINK_KEYS if (v := getattr(link, k)) is not None}


def split_frame(res: RunResult, path: str | None = None):  # -> pandas.DataFrame
    """The split each rank computed from its own trace, one row per rank (ms per step); with the
    waiting/transfer columns where the run paired its ranks' traces."""
    import pandas as pd

    rows = []
    for rank, m in enumerate(ranks(res)):
        row: dict[str, object] = {"rank": rank}
        if path:
            row["path"] = path
        if m.split is not None:  # its scalars; the rank is the run's (a trace without one has None)
            split = dataclasses.asdict(m.split)
            row.update({k: v for k, v in split.items() if k != "rank" and not isinstance(v, (dict, list))})
        row.update(link_columns(m.split))
        rows.append(row)
    cols = [
        "path",
        "rank",
        "step_ms",
        "compute_ms",
        "compute_only_ms",
        "comm_ms",
        "hidden_ms",
        "exposed_ms",
        "idle_ms",
        "wait_ms",
        "transfer_ms",
        "exposed_wait_ms",
        "exposed_transfer_ms",
        "comm_share",
        "exposed_share",
        "source",
    ]
    frame = pd.DataFrame(rows)
    return frame[[c for c in cols if c in frame.columns]].round(4)


def check_split(res: RunResult, tolerance: float = 1e-6) -> Verdict:
    """The split adds up on every rank: ``compute only + hidden + exposed + idle = step``, and where
    waiting was separated, ``wait + transfer = communication`` and ``exposed wait + exposed transfer = exposed``."""
    problems, sums = [], []
    typed = ranks(res)
    for rank, m in enumerate(typed):
        sp = m.split
        if sp is None:
            problems.append(f"rank {rank} reported no split")
            continue
        parts = sum(getattr(sp, k) for k in SPLIT_KEYS)
        sums.append(parts - sp.step_ms)
        if abs(parts - sp.step_ms) > tolerance * max(1.0, sp.step_ms):
            problems.append(f"rank {rank}: the parts add to {parts:.4f} ms, the step is {sp.step_ms:.4f} ms")
        paired = paired_times(sp.link)
        if paired is not None:
            wait, transfer, exposed_wait, exposed_transfer = paired
            if abs(wait + transfer - sp.comm_ms) > tolerance * max(1.0, sp.comm_ms):
                problems.append(
                    f"rank {rank}: wait + transfer = {wait + transfer:.4f} ms, communication {sp.comm_ms:.4f} ms"
                )
            if abs(exposed_wait + exposed_transfer - sp.exposed_ms) > tolerance * max(1.0, sp.exposed_ms):
                problems.append(f"rank {rank}: exposed wait + exposed transfer differ from exposed communication")
    ok = not problems and len(sums) == len(typed) >= 1
    text = (
        f"on all {len(typed)} ranks, compute only + hidden + exposed communication + idle = the step"
        if ok
        else "; ".join(problems) or "no rank reported a split"
    )
    return Verdict(
        "split adds up",
        "pass" if ok else "fail",
        text,
        {"ranks": len(typed), "largest_error_ms": max((abs(s) for s in sums), default=None)},
        label_of(res),
    )


def verdict_split(res: RunResult) -> Verdict:
    """What each rank's communication was: waiting for the other rank (skew), or data on the wire."""
    e = exposure(res)
    if e is None:
        return Verdict("time split", "info", "no split: the run was not profiled", {}, label_of(res))
    est, comm, step = e.link, e.comm_ms, e.step_ms
    worst = max(range(len(comm)), key=lambda r: comm[r])
    how = (
        "paired on one clock: a rank waits inside a collective until the last rank joins it"
        if est.source == "paired traces"
        else "estimated as the least communication of any rank: the last rank to join a collective waits for nobody"
    )
    text = (
        f"communication per step: {_fmt(comm)}; exposed (no compute under it): {_fmt(e.exposed_ms)}. "
        f"The ranks ran the same collectives, so the difference is waiting: {100 * e.waiting_share[worst]:.0f} % of "
        f"rank {worst}'s communication was waiting for the other rank ({how}). On the wire: {est.link_ms:.2f} ms per "
        f"step, of which {est.exposed_link_ms:.2f} ms exposed ({100 * est.exposed_link_ms / step:.1f} % of "
        f"the {step:.1f} ms profiled step)."
    )
    return Verdict(
        "time split",
        "info",
        text,
        {
            "comm_ms": list(comm),
            "exposed_ms": list(e.exposed_ms),
            "waiting_share": list(e.waiting_share),
            "link_ms": est.link_ms,
            "exposed_link_ms": est.exposed_link_ms,
            "exposed_link_share": e.exposed_link_share,
            "step_ms": step,
            "source": est.source,
        },
        label_of(res),
    )


def phase_frame(res: RunResult):  # -> pandas.DataFrame
    """Compute time inside each marked phase (forward, backward, optimizer) per rank, ms per step."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"rank": r, **{f"{k}_ms": round(v, 4) for k, v in (m.split.phase_ms if m.split else {}).items()}}
            for r, m in enumerate(ranks(res))
        ]
    )


# --------------------------------------------------------------------------- the profiler's own cost


def overhead_frame(res: RunResult):  # -> pandas.DataFrame
    """Median step time without and with torch.profiler, per rank, and the difference in ms."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "rank": r,
                "step_ms": round(m.step_ms, 3),
                "step_ms_profiled": round(m.step_ms_profiled, 3),
                "overhead_ms": round(m.step_ms_profiled - m.step_ms, 3),
                "overhead_%": round(100 * (m.step_ms_profiled / m.step_ms - 1), 1),
            }
            for r, m in enumerate(ranks(res))
        ]
    )


def _overhead_comparisons(res: RunResult) -> list[Comparison | None]:
    out = []
    for m in ranks(res):
        plain = m.step_ms_all.ddp if m.step_ms_all else ()
        profiled = m.profiled_ms
        out.append(compare(plain, profiled) if len(plain) >= 2 and len(profiled) >= 2 else None)
    return out


def verdict_overhead(res: RunResult) -> Verdict:
    """What torch.profiler adds to a step on each rank (profiled against plain steps, ``compare``)."""
    typed = ranks(res)
    added = [m.step_ms_profiled - m.step_ms for m in typed]
    comps = _overhead_comparisons(res)
    cs = [c for c in comps if c is not None]
    numbers: dict[str, object] = {"overhead_ms": added, "step_ms": [m.step_ms for m in typed]}
    if len(cs) == len(comps):
        numbers.update(ratio=[c.ratio for c in cs], noise=[c.noise for c in cs])
        status = joint_status([c.status for c in cs])
        text = "; ".join(f"rank {r}: " + c.describe("ms", "step without → with the profiler") for r, c in enumerate(cs))
    else:
        status = "info"
        text = (
            f"the profiler added {_fmt(added)} to the median step (medians only in this run: no repeats to "
            "set the noise)"
        )
    return Verdict("profiler overhead", status, text, numbers, label_of(res))


def verdict_trust(res: RunResult) -> Verdict:
    """Whether the split's exposed communication is larger than the time the profiler itself adds
    (``numbers["trustworthy"]``: True, False, or None when the noise cannot tell).

    Where the profiler slows a rank's step by more than the exposed communication it reports
    there, that figure cannot be read as the cost of communication: the profiler's own work on
    the host shifts when each rank reaches the collectives. Where ``compare`` finds the overhead
    within the noise, the overhead is not measured (not zero): the rank's exposed communication
    must then exceed the largest overhead the noise allows (noise × the plain step), or the
    status is ``undecided``. Otherwise ``info``: a reading of the run, not a check that failed.
    """
    comps = _overhead_comparisons(res)
    added, bound, exposed, fails, unsure = [], [], [], [], []
    for rank, (m, c) in enumerate(zip(ranks(res), comps)):
        over = m.step_ms_profiled - m.step_ms
        exp = m.split.exposed_ms if m.split is not None else float("nan")
        added.append(over)
        exposed.append(exp)
        if c is not None and c.status == "no change":  # unmeasured: anything up to the noise bound
            limit = max(over, c.noise * c.baseline)
            bound.append(limit)
            if not exp > limit:
                unsure.append(rank)
        else:
            bound.append(over)
            if not over < exp:
                fails.append(rank)
    numbers = {
        "overhead_ms": added,
        "overhead_bound_ms": bound,
        "exposed_ms": exposed,
        "ranks_failing": fails,
        "ranks_undecided": unsure,
        "trustworthy": False if fails else None if unsure else True,
    }
    noise = [f"rank {r}: {added[r]:+.2f} ms, noise ±{_noise(comps[r]):.0%} (up to {bound[r]:.2f} ms)" for r in unsure]
    if fails:
        text = (
            f"not a measure of the cost: the profiler adds {_fmt(added)} to the step, more than the exposed "
            f"communication it reports on rank{'s' if len(fails) > 1 else ''} {', '.join(map(str, fails))} "
            f"({_fmt(exposed)}). Read the trace for its structure (which kernels run, what overlaps, who waits for "
            "whom), and the cost of communication from the A/B without the profiler"
        )
        if noise:
            text += f"; on the other ranks its overhead is within the noise ({'; '.join(noise)})"
        status = "info"
    elif unsure:
        text = (
            f"undecided: the profiler's overhead ({'; '.join(noise)}) cannot be told apart from zero or from the "
            f"exposed communication it reports ({_fmt(exposed)}). Read the trace for its structure, and the cost of "
            "communication from the A/B without the profiler"
        )
        status = "undecided"
    else:
        within = "" if bound == added else f" (within the noise: at most {_fmt(bound)})"
        text = (
            f"the profiler adds {_fmt(added)}{within}, less than the exposed communication it reports on every rank "
            f"({_fmt(exposed)})"
        )
        status = "info"
    return Verdict("split trustworthy", status, text, numbers, label_of(res))


def _noise(c: Comparison | None) -> float:
    return c.noise if c is not None else float("nan")


# --------------------------------------------------------------------------- A/B without the profiler

AB_KINDS = {
    "ddp": "DDP step",
    "no_sync": "same step under no_sync (no gradient exchange)",
    "local": "bare module, no DDP (the 1-GPU step)",
}


def ab_frame(res: RunResult):  # -> pandas.DataFrame
    """The interleaved repeats per rank: median ms of each round for each kind of step."""
    import pandas as pd

    rows = []
    for rank, m in enumerate(ranks(res)):
        for kind, reps in (m.step_ms_repeats.measured() if m.step_ms_repeats else {}).items():
            rows.append(
                {
                    "rank": rank,
                    "step": AB_KINDS.get(kind, kind),
                    **{f"round {i + 1}": round(v, 3) for i, v in enumerate(reps)},
                    "median_ms": round(statistics.median(reps), 3),
                }
            )
    return pd.DataFrame(rows)


def price(repeats: Sequence[Kinds | None], baseline: str, key: str, where: str, what: str) -> Verdict:
    """The DDP step against ``baseline`` (``no_sync`` or ``local``) on every rank (each rank's ``step_ms_repeats``),
    by the noise rule."""
    comps = comparisons(repeats, baseline)
    if not all(comps):
        return Verdict(key, "info", f"{what}: not measured in this run (it has no interleaved repeats)", {}, where)
    cs = [c for c in comps if c is not None]
    extra = [c.candidate - c.baseline for c in cs]
    noise = [c.noise * c.baseline for c in cs]
    statuses = [c.status for c in cs]
    status = joint_status(statuses)
    text = f"{what}: " + "; ".join(f"rank {r}: {c.describe('ms')}" for r, c in enumerate(cs))
    if len(set(statuses)) > 1:
        text += ". The ranks disagree: not resolved, read as no change"
    elif status == "no change":
        text += ". Within the noise: no cost this measurement can resolve"
    return Verdict(
        key,
        status,
        text,
        {"extra_ms": extra, "noise_ms": noise, "ratio": [c.ratio for c in cs], "rank_status": statuses},
        where,
    )


def verdict_exchange(res: RunResult) -> Verdict:
    """What the gradient exchange costs a step: DDP against the same step under ``no_sync`` (notebook 03's A/B)."""
    return price(
        [m.step_ms_repeats for m in ranks(res)],
        "no_sync",
        "gradient exchange",
        label_of(res),
        "DDP step against the same step under no_sync",
    )


def verdict_second_gpu(res: RunResult) -> Verdict:
    """The 2-GPU DDP step against the bare module on the same GPU, and what of the gap the trace explains."""
    where = label_of(res)
    typed = ranks(res)
    v = price(
        [m.step_ms_repeats for m in typed],
        "local",
        "second GPU",
        where,
        "DDP step against the bare module (1-GPU step)",
    )
    if v.numbers:
        return v
    local = [m.local_step_ms for m in typed]
    splits = [m.split for m in typed]
    if not all(local) or not all(splits):
        return v
    gap = [m.step_ms - (m.local_step_ms or 0.0) for m in typed]
    est = link_estimate(splits)
    mean_exposed = statistics.mean(s.exposed_ms for s in splits if s is not None)
    ratio = mean_exposed / statistics.mean(gap) if statistics.mean(gap) > 0 else float("inf")
    text = (
        f"DDP step minus 1-GPU step: {_fmt(gap)} (medians, no repeats in this run). The profiler's exposed "
        f"communication averaged over the ranks is {mean_exposed:.2f} ms, {ratio:.1f}× that gap"
        + (
            ": more than the whole gap, because it counts one rank waiting for the other; it is not the price of "
            "the second GPU"
            if ratio > 1
            else ", and it still counts one rank waiting for the other"
        )
        + f". Exposed on the wire: {est.exposed_link_ms:.2f} ms"
        + (
            ", inside the gap: the rest is what the exchange takes from compute (NCCL's kernels sharing SMs and "
            "memory bandwidth with the backward pass, DDP's bucket copies) and noise"
            if est.exposed_link_ms <= min(gap)
            else ""
        )
    )
    return Verdict(
        "second GPU",
        "info",
        text,
        {"extra_ms": gap, "mean_exposed_ms": mean_exposed, "exposed_link_ms": est.exposed_link_ms},
        where,
    )


def wire_frame(res: RunResult):  # -> pandas.DataFrame
    """The gradients' bytes all-reduced right after a barrier: ms per repeat and bus bandwidth, per rank."""
    import pandas as pd

    rows = []
    for rank, m in enumerate(ranks(res)):
        wire = m.wire
        if wire is not None:
            rows.append(
                {
                    "rank": rank,
                    "MiB": round(wire.bytes / 2**20, 1),
                    "median_ms": round(statistics.median(wire.ms), 3),
                    "min_ms": round(min(wire.ms), 3),
                    "busbw_GB/s": round(wire.busbw_gbs, 1) if wire.busbw_gbs else None,
                }
            )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- memory


def memory_frame(res: RunResult):  # -> pandas.DataFrame
    """Memory per rank in MiB: torch.cuda.memory_stats essentials (GPU) or process RSS (CPU)."""
    import pandas as pd

    rows = []
    for r, m in enumerate(ranks(res)):
        mem = m.memory
        row: dict[str, object] = {"rank": r, "kind": mem.get("kind")}
        for k, v in mem.items():
            if isinstance(v, str):
                continue
            if k.endswith(("_bytes.all.peak", "_bytes.all.current")):
                row[k.replace("_bytes.all.", "_").replace(".", "_") + "_mib"] = round(v / 2**20, 1)
            elif k.startswith("num_") or k.endswith("_mib"):
                row[k] = round(v, 1) if isinstance(v, float) else v
        rows.append(row)
    return pd.DataFrame(rows)


@dataclasses.dataclass(frozen=True)
class Traffic:
    """One GPU's NVLink bytes, as NVML counted them during the all-reduce probe (:func:`probe_traffic`)."""

    gpu: int
    nvml_sent_gib: float
    nvml_received_gib: float
    all_reduce_sends_gib: float
    """What the ring algorithm sends per rank in all the probe's all-reduces."""
    sent_over_expected: float | None
    """None: the probe sent nothing."""
    seconds: float


def probe_traffic(sampler: Sampler, res: RunResult) -> list[Traffic]:
    """NVLink bytes NVML counted during the all-reduce probe, against what the algorithm sends (a list of rows:
    ``pd.DataFrame(rows)`` is the table)."""
    sent = probe(res)
    if sent is None or not sampler.available:
        return []
    counted = sampler.nvlink_bytes(sent.start, sent.end)
    expected = sent.bytes_per_rank_algorithm
    return [
        Traffic(
            gpu,
            c["tx_bytes"] / 2**30,
            c["rx_bytes"] / 2**30,
            expected / 2**30,
            c["tx_bytes"] / expected if expected else None,
            c["seconds"],
        )
        for gpu, c in counted.items()
    ]


# --------------------------------------------------------------------------- the batch sweep (claim C16)

HIDES_MORE = 0.10
"""The least relative drop of exposed time on the wire, largest batch against smallest, that C16 counts."""
AT_THRESHOLD = 0.02
"""A share of the step within this of C16's threshold is "at the threshold": one profiled average with no
repeats cannot say on which side of it the next run falls."""


def sweep_table(res: RunResult) -> pd.DataFrame:
    """One row per per-GPU batch size: step time, the profiler's communication share on each rank,
    the time on the wire (:func:`link_estimate`) and its share of the profiled step, and, where the
    run has repeats, what the gradient exchange costs (DDP against ``no_sync``)."""
    import pandas as pd

    return pd.DataFrame([p.row() for p in sweep_points(res)])


def _exchange_text(points: Sequence[SweepPoint]) -> str:
    """What the exchange costs at each batch without the profiler (DDP − ``no_sync``); empty where a batch has no
    repeats."""
    if not all(p.exchange is not None for p in points):
        return ""
    return "; the exchange without the profiler (DDP − no_sync): " + ", ".join(
        f"batch {p.batch} {statistics.mean(p.exchange_ms):+.2f} ms ({p.exchange_status})" for p in points
    )


def verdict_c16(runs: Mapping[str, RunResult], threshold: float = 0.15) -> Verdict:
    """Claim C16 ("above 15 % communication, compress gradients or raise the batch"), from the sweeps
    of one or more paths (``{"NVLink": res, "host-staged": res2}``).

    "A larger batch hides more" means: the exposed time on the wire at the largest batch is at
    least :data:`HIDES_MORE` below the smallest batch's (a trace's average has no repeats to set
    a noise by; where the run has them, the exchange's cost per batch is given by ``compare``).

    ``holds`` where the time on the wire passes the threshold and a larger batch hides more of
    it; ``partly`` where a larger batch hides more of it but only the profiler's share (waiting
    included) passes the threshold, or nothing does; ``wrong`` where a larger batch hides nothing.
    """
    usable: dict[str, list[tuple[SweepPoint, SweepWire]]] = {}
    for path, res in runs.items():
        points = sweep_points(res)
        wired = [(p, p.wire) for p in points if p.wire is not None]
        if len(points) >= 2 and len(wired) == len(points):  # every batch profiled
            usable[path] = wired
    where = " | ".join(f"{p}: {label_of(r)}" for p, r in runs.items())
    if not usable:
        return Verdict("C16", "unverifiable", "no profiled batch sweep with two sizes or more in these runs", {}, where)
    gpu = all(r.env is None or r.env.is_gpu for r in runs.values())
    numbers: dict[str, object] = {}
    parts, hides, above, crossed, close = [], [], [], [], []
    for path, t in usable.items():
        (small, small_wire), (large, large_wire) = t[0], t[-1]
        naive = max(w.comm_share_mean for _, w in t)
        link = max(w.link_share for _, w in t)
        hides.append(large_wire.link.exposed_link_ms < (1 - HIDES_MORE) * small_wire.link.exposed_link_ms)
        above.append(link > threshold)
        near = abs(link - threshold) <= AT_THRESHOLD
        crossed.append(naive > threshold)
        if near:
            close.append(path)
        numbers[path] = {
            "batches": [p.batch for p, _ in t],
            "step_ms": [p.step_ms for p, _ in t],
            "profiler_share": [w.comm_share_mean for _, w in t],
            "link_share": [w.link_share for _, w in t],
            "exposed_link_ms": [w.link.exposed_link_ms for _, w in t],
            "max_profiler_share": naive,
            "max_link_share": link,
            "at_threshold": near,
            "exchange_status": [p.exchange_status for p, _ in t],
        }
        price = _exchange_text([p for p, _ in t])
        parts.append(
            f"{path}: the profiler's communication share (mean of the ranks) peaks at {100 * naive:.0f} %, the time "
            f"on the wire at {100 * link:.1f} % of the step"
            + (" (one profiled average, no repeats: at the threshold)" if near else "")
            + f"; exposed on the wire {small_wire.link.exposed_link_ms:.2f} ms "
            f"at batch {small.batch} → {large_wire.link.exposed_link_ms:.2f} ms at batch {large.batch}{price}"
        )
    if not gpu:
        status, head = (
            "unverifiable",
            ("not settled here: the rule is about GPUs' communication, and this is a CPU simulation; what it shows"),
        )
    elif not any(hides):
        status, head = "wrong", "a larger batch hid none of the communication"
    elif any(a and h for a, h in zip(above, hides)):
        status, head = "holds", f"the time on the wire passed {100 * threshold:.0f} % and a larger batch hid more of it"
    else:
        status = "partly"
        head = (
            "a larger batch hides more of the communication, as the rule assumes, but the time on the wire never "
            f"reached {100 * threshold:.0f} % of the step"
            + (
                f" (on {', '.join(close)} it came within {100 * AT_THRESHOLD:.0f} points of it in one run without "
                "repeats: a second run could cross it)"
                if close
                else ""
            )
            + (": only the profiler's share, inflated by one rank waiting for the other, did" if any(crossed) else "")
        )
    return Verdict("C16", status, f"{head}. " + "; ".join(parts), numbers, where)


# --------------------------------------------------------------------------- the committed reference runs


def reference_runs(folder: str | None = None) -> dict[str, RunResult]:
    """The committed ``profile_step`` runs of the reference machine (``reference/h200x2/runs``), keyed
    ``"NVLink"`` and ``"host-staged"`` (``NCCL_P2P_DISABLE=1``); ``{}`` where that folder is absent."""
    from pathlib import Path

    base = Path(folder) if folder else Path(__file__).resolve().parents[3] / "reference" / "h200x2" / "runs"
    out: dict[str, RunResult] = {}
    for path in sorted(base.glob("profile_step-*/result.json")):
        res = RunResult.load(path)
        key = "host-staged" if ranks(res)[0].nccl_p2p_disable == "1" else "NVLink"
        out.setdefault(key, res)
    return out


def committed(v: Verdict) -> Verdict:
    """``v`` read from the committed 2× H200 runs (:func:`reference_runs`), its label saying so, as every quoted
    reference verdict's does."""
    runs = "runs" if " | " in v.where else "run"
    return dataclasses.replace(v, where=f"{v.where}: the committed 2× H200 {runs}, not this machine")


CHOICES = {"a": "less than 2 %", "b": "2 to 10 %", "c": "10 to 25 %", "d": "more than 25 %"}
"""Notebook 05's prediction: the exposed time on the wire as a share of the step, on 2 GPUs joined by NVLink."""


def share_answer(share: float) -> str:
    """The letter of :data:`CHOICES` that a share of the step falls in (each bound belongs to the choice above it)."""
    return "a" if share < 0.02 else "b" if share < 0.10 else "c" if share < 0.25 else "d"


def over_nvlink(res: RunResult) -> bool:
    """Whether the run's ranks ran on two GPUs or more and exchanged over NVLink (not host-staged): what the
    prediction asks about."""
    env = res.env
    if not (env and env.is_gpu and env.world_size >= 2 and (env.link or "").startswith("NV")):
        return False
    return all(m.nccl_p2p_disable != "1" for m in ranks(res))


def _how(res: RunResult) -> str:
    """How a run that is not over NVLink (:func:`over_nvlink`) ran, for the sentence that quotes it."""
    env = res.env
    if env is None or not env.is_gpu:
        return "a CPU simulation"
    if env.world_size < 2:
        return "one rank on one GPU"
    if not (env.link or "").startswith("NV"):
        return f"GPUs joined by {env.link or 'no NVLink'}"
    return "host-staged, NCCL_P2P_DISABLE=1"


def _share_text(e: Exposure) -> str:
    return (
        f"{e.link.exposed_link_ms:.2f} ms of exposed time on the wire in a {e.step_ms:.1f} ms profiled step, "
        f"{100 * e.exposed_link_share:.1f} %"
    )


def prediction_explanation(res: RunResult, reference: Mapping[str, RunResult] | None = None) -> str:
    """The answer to the notebook's prediction, from the run that grades it (:func:`grade_prediction`): this run where
    it ran over NVLink (the committed 2× H200 run quoted beside it), else the committed run, this one quoted as what it
    is (a CPU simulation, or GPUs joined by another link), which grades nothing."""
    here = exposure(res)
    if here is None:
        return "This run was not profiled."
    ref = (reference or {}).get("NVLink")
    own = f"Here ({label_of(res)}): {_share_text(here)}."
    there = exposure(ref) if ref is not None and ref is not res else None
    if ref is None or there is None:
        return own
    m = ranks(ref)[0]
    busbw = m.probe.busbw_gbs if m.probe is not None else None
    wire = (
        f" {m.gradient_mib * 2**20 / 1e6:.0f} MB of gradients take about "
        f"{m.gradient_mib * 2**20 / (busbw * 1e9) * 1e3:.1f} ms at the {busbw:.0f} GB/s its all-reduce probe "
        "reached, and most of it runs under the backward pass."
        if busbw
        else ""
    )
    quoted = f"On the committed 2× H200 run over NVLink: {_share_text(there)}.{wire}"
    if over_nvlink(res):
        return f"{own} {quoted}"
    return (
        f"{quoted} This machine's run ({_how(res)}: {100 * here.exposed_link_share:.1f} % here) does not grade a "
        "prediction about two GPUs joined by NVLink."
    )


def grade_prediction(
    prediction: str | None,
    res: RunResult,
    reference: Mapping[str, RunResult] | None = None,
    choices: Mapping[str, str] = CHOICES,
) -> Verdict:
    """The prediction is about 2 GPUs joined by NVLink: graded against ``res`` where its ranks ran so, else against the
    committed 2× H200 run over NVLink (labelled so: this machine's run is quoted, never graded by); not graded where
    neither exists."""
    from nvtutorial.report.predict import grade_choice

    reference = reference_runs() if reference is None else reference
    graded = res if over_nvlink(res) else reference.get("NVLink")
    reading = exposure(graded) if graded is not None else None
    if graded is None or reading is None:
        why = (
            "this copy of the course has no committed 2× H200 run (reference/h200x2/runs ships with a checkout)"
            if graded is None
            else "the run that would grade it was not profiled"
        )
        return Verdict(
            "exposed communication",
            "info",
            f"not graded here: the question is about two GPUs joined by NVLink, and {why}",
            {"prediction": prediction},
            label_of(res),
        )
    graded_here = grade_choice(
        "exposed communication",
        prediction,
        share_answer(reading.exposed_link_share),
        choices,
        where=label_of(graded),
        explanation=prediction_explanation(res, reference),
    )
    return graded_here if graded is res else committed(graded_here)
