"""The measured pitfalls of notebook 06: the input pipeline (claim C17) and out-of-memory errors (C19, C20).

Reads the ``pitfalls`` workload's result (parent side; never launches, never touches CUDA), typed: each rank's
:class:`~nvtutorial.chapters.ch06_pitfalls.schema.Rank` (or, for the committed run of 2026-11-30, its
:class:`~nvtutorial.chapters.ch06_pitfalls.schema.TrapsRank`). Every A/B goes through
:func:`~nvtutorial.report.verdict.compare`: a configuration is "enough workers" when its rate is within the noise of
the best one's, and ``pin_memory`` helps only when it is faster by more than the noise, on each rank.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from nvtutorial.chapters.ch06_pitfalls.schema import (
    EmptyCache,
    Fragmentation,
    Loader,
    LoaderAlone,
    LoaderAloneRow,
    LoaderRow,
    Oom,
    Rank,
    Training,
    TrapsRank,
    loader_rows_typed,
    rank_type,
)
from nvtutorial.report.verdict import UNDECIDED, Comparison, Verdict, compare, relative_spread
from nvtutorial.results import RunResult

Row = TypeVar("Row", LoaderRow, LoaderAloneRow)


def ranks(result: RunResult) -> list[Rank] | list[TrapsRank]:
    """Every rank's result of a ``pitfalls`` run, typed (the layout its parameters say: :func:`schema.rank_type`)."""
    return result.ranks_as(rank_type(result.params))


def loaders(result: RunResult) -> list[Loader]:
    """Every rank's input-pipeline measurement (``dataloader``) of a run of today's workload."""
    found = [m.dataloader for m in ranks(result)]
    out = [d for d in found if isinstance(d, Loader)]
    if not found or len(out) < len(found):
        raise ValueError(f"{getattr(result, 'run_dir', 'this run')}: no rank timed the training loop's input pipeline")
    return out


def _alone(result: RunResult) -> list[LoaderAlone]:
    """Every rank's loader-alone measurement of a run of the 2026-11-30 workload."""
    return [d for m in ranks(result) if isinstance(d := m.dataloader, LoaderAlone)]


def _unpinned(rows: Sequence[Row], pin: bool = False) -> list[Row]:
    return [r for r in rows if r.pin_memory == pin]


def timed_the_loader_alone(result: RunResult) -> bool:
    """Whether a run is of the old format (the committed 2× H200 run, 2026-11-30, commit 15fcf4b): each rate
    is the DataLoader's alone (each batch copied to the device, no training step), one per configuration,
    and ``step_consumes_samples_per_s`` the step's alone (:class:`~nvtutorial.chapters.ch06_pitfalls.schema.
    LoaderAlone`); today's runs time the training loop (``step_only_samples_per_s`` for the step alone)."""
    return bool(_alone(result))


def workers_that_feed(rows: Sequence[LoaderAloneRow], consumes: float) -> int | None:
    """In an old-format run, the fewest workers whose loader alone delivers at least what the step alone consumes
    (unpinned rows; None: no count tried does)."""
    fed = [r.num_workers for r in _unpinned(rows) if r.samples_per_s >= consumes]
    return min(fed) if fed else None


def has_repeats(result: RunResult) -> bool:
    """Whether a run's loader rows hold repeated windows (the old format held one rate per row)."""
    first = ranks(result)[0].dataloader
    if not isinstance(first, Loader):
        return False
    return bool(first.rows) and all(len(r.samples_per_s) >= 2 for r in first.rows)


def loader_frame(result: RunResult):  # -> pandas.DataFrame
    """Every rank's steady rate per configuration: median, spread of the windows, and the windows."""
    import pandas as pd

    rows = []
    for rank, d in enumerate(loaders(result)):
        for r in d.rows:
            rates = r.samples_per_s
            rows.append(
                {
                    "rank": rank,
                    "num_workers": r.num_workers,
                    "pin_memory": r.pin_memory,
                    "samples/s (median)": round(statistics.median(rates)),
                    "spread": f"{(max(rates) - min(rates)) / statistics.median(rates):.0%}",
                    "windows": " ".join(f"{x:.0f}" for x in rates),
                }
            )
        step = d.step_only_samples_per_s
        rows.append(
            {
                "rank": rank,
                "num_workers": "input on the GPU" if d.gpus else "input in memory",
                "pin_memory": None,
                "samples/s (median)": round(statistics.median(step)),
                "spread": f"{(max(step) - min(step)) / statistics.median(step):.0%}",
                "windows": " ".join(f"{x:.0f}" for x in step),
            }
        )
    return pd.DataFrame(rows)


def decided(c: Comparison) -> bool:
    """Whether a comparison's "no change" holds on the quieter side's spread too. ``False`` when the gap is inside the
    noise only because one side's windows spread widely (every window of the other side may lie beyond it): then
    the run cannot say that the two are alike, only that it could not tell them apart."""
    return c.status == "no change" and abs(c.change) <= max(min(c.spread), NOISE_FLOOR)


NOISE_FLOOR = 0.01
""":func:`~nvtutorial.report.verdict.compare`'s floor: a gap below it is no change, whatever the spreads."""


@dataclasses.dataclass(frozen=True)
class Enough:
    """One rank's worker counts against its best (:func:`workers_enough`)."""

    best: int
    """The worker count of the best median rate (unpinned)."""
    best_rate: float
    knee: int
    """The fewest workers within the noise of the best, on both sides' spreads (:func:`decided`)."""
    undecided: dict[int, Comparison]
    """The fewer counts within the noise only because one side's windows spread widely."""
    against_best: dict[int, Comparison]
    still_rising: bool
    """The best is the largest count tried, faster than the one before beyond the noise."""
    largest: int


def workers_enough(rows: Sequence[LoaderRow]) -> Enough:
    """For one rank's unpinned rows (its :attr:`Loader.rows`): the best configuration, each count against it, the knee
    and the undecided counts (:class:`Enough`)."""
    unpinned = sorted(_unpinned(rows), key=lambda r: r.num_workers)
    best = max(unpinned, key=lambda r: statistics.median(r.samples_per_s))
    against: dict[int, Comparison] = {
        r.num_workers: compare(best.samples_per_s, r.samples_per_s, lower_is_better=False) for r in unpinned
    }
    knee = next(w for w, c in against.items() if decided(c))
    largest = unpinned[-1].num_workers
    rising = (
        best.num_workers == largest
        and len(unpinned) > 1
        and compare(unpinned[-2].samples_per_s, unpinned[-1].samples_per_s, lower_is_better=False).status == "faster"
    )
    return Enough(
        best=best.num_workers,
        best_rate=statistics.median(best.samples_per_s),
        knee=knee,
        undecided={w: c for w, c in against.items() if w < knee and c.status == "no change"},
        against_best=against,
        still_rising=rising,
        largest=largest,
    )


def enough_workers(rows: Sequence[LoaderRow | Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`workers_enough` as a dict (``best``, ``best_rate``, ``knee``, ``undecided``, ``against_best``,
    ``still_rising``, ``largest``), of one rank's rows typed or as the run wrote them (the ``rows`` of a ``dataloader``
    section): notebook 06's figure cell reads each rank's knee from it."""
    return dict(vars(workers_enough(loader_rows_typed(rows))))


def _undecided_text(undecided: Mapping[int, Comparison]) -> str:
    """`` (0 workers: undecided, 216 against 330 samples/s, one side's windows spread 43 %)`` or ``""``."""
    return "".join(
        f" ({w} workers: undecided, {c.candidate:.0f} against {c.baseline:.0f} samples/s, {c.change:+.0%}: inside "
        f"the noise only because one side's windows spread {max(c.spread):.0%})"
        for w, c in undecided.items()
    )


def pin_comparison(rows: Sequence[LoaderRow], workers: int) -> Comparison | None:
    """``pin_memory=True`` against False at ``workers`` workers, on one rank (None: not measured)."""

    def rates(pin: bool) -> tuple[float, ...] | None:
        return next((r.samples_per_s for r in _unpinned(rows, pin) if r.num_workers == workers), None)

    base, cand = rates(False), rates(True)
    return compare(base, cand, lower_is_better=False) if base and cand else None


def _pin_workers(d: Loader) -> int:
    """The worker count C17's pin_memory A/B reads: the rule's, where it was tried, else the largest tried."""
    tried = {row.num_workers for row in d.rows}
    return d.rule_of_thumb_workers if d.rule_of_thumb_workers in tried else max(tried)


BATCH_BYTES_PER_PIXEL = 3 * 4 + 8
"""Bytes a batch copies to the device per pixel and sample: the image's 3 fp32 channels and the int64 mask."""


def links_run(result: RunResult) -> RunResult | None:
    """Notebook 01's ``gpu_links`` run on this run's GPU (same UUID, in the same runs folder), else the newest
    committed one-GPU run (``reference/h100x1/runs``, ``h200x1``'s), else None."""
    from nvtutorial.chapters.ch01_hardware import report_reference

    for folder in sorted(Path(result.run_dir).parent.glob("gpu_links-*"), reverse=True):
        found = RunResult.load(folder / "result.json") if (folder / "result.json").is_file() else None
        if found and _gpu(found) and _gpu(found) == _gpu(result):
            found.run_dir = folder
            return found
    return report_reference.one_gpu("gpu_links")


def _gpu(run: RunResult) -> str | None:
    """The UUID of rank 0's GPU (None: not recorded)."""
    ids = getattr(run.env, "device_ids", ())
    return ids[0] if ids else None


@dataclasses.dataclass(frozen=True)
class HostToDevice:
    """Notebook 01's host-to-device copy rates at one size, GB/s, by where the host memory is."""

    pinned: float
    pageable: float


def h2d_rates(links: RunResult, nbytes: int) -> HostToDevice | None:
    """Notebook 01's host-to-device GB/s from pinned and from pageable memory, at its copy size nearest ``nbytes``
    (None: the run did not time both)."""
    from nvtutorial.chapters.ch01_hardware.schema_gpu_links import Rank as Links

    rows = [r for r in links.metrics_as(Links).rows if r.link == "host to device"]
    size = min({r.size for r in rows}, key=lambda n: abs(n - nbytes), default=None)
    pinned, pageable = (
        next((r.gbps for r in rows if r.size == size and r.host == h), None) for h in ("pinned", "pageable")
    )
    return HostToDevice(pinned, pageable) if pinned is not None and pageable is not None else None


def pin_bound(result: RunResult, links: RunResult | None) -> str | None:
    """What ``pin_memory`` can save at most per step, on each rank: the whole copy of the batch from pageable memory
    at ``links``'s host-to-device rate (:func:`h2d_rates`), beside the step time and the pin A/B's noise. None on a
    CPU run (no pin A/B) or without both rates."""
    if links is None or timed_the_loader_alone(result):
        return None
    name = links.env.device_names[0] if links.env and links.env.device_names else "another GPU"
    same = _gpu(links) is not None and _gpu(links) == _gpu(result)
    where = "on this GPU" if same else f"on {name}, a saved run ({Path(links.run_dir).name}), not this GPU"
    out = []
    for rank, d in enumerate(loaders(result)):
        c, nbytes = pin_comparison(d.rows, _pin_workers(d)), d.batch * d.image_size**2 * BATCH_BYTES_PER_PIXEL
        rate = h2d_rates(links, nbytes)
        if c is None or rate is None:
            continue
        copy_ms, step_ms = nbytes / rate.pageable / 1e6, d.batch / c.baseline * 1e3
        seen = "within" if copy_ms / step_ms < c.noise else "beyond"
        out.append(
            f"rank {rank}: the batch, {nbytes / 1e6:.1f} MB, copies in {copy_ms:.2f} ms from pageable memory at "
            f"{rate.pageable:.1f} GB/s, {nbytes / rate.pinned / 1e6:.2f} ms pinned at {rate.pinned:.1f} GB/s "
            f"(notebook 01's rates {where}): pinning can save at most {copy_ms:.2f} ms of a {step_ms:.1f} ms step "
            f"({copy_ms / step_ms:.1%}), {seen} this A/B's noise (±{c.noise:.0%})"
            + (", which cannot resolve it" if seen == "within" else "")
        )
    return "; ".join(out) + "." if out else None


def pin_within_noise(result: RunResult) -> bool:
    """Whether ``pin_memory=True`` changed no rate beyond the noise, at any worker count, on any rank."""
    found = False
    for d in loaders(result):
        rows = d.rows
        for w in sorted({r.num_workers for r in rows if r.pin_memory}):
            c = pin_comparison(rows, w)
            if c is not None:
                found = True
                if c.status != "no change":
                    return False
    return found


def _per_rank(values: Mapping[int, float | None], fmt: str = "{}") -> str:
    """``X on every rank`` when the ranks agree, else ``rank 0: X, rank 1: Y``."""
    shown = {r: fmt.format(v) if v is not None else "none of the counts tried" for r, v in values.items()}
    if len(set(shown.values())) == 1:
        return f"{next(iter(shown.values()))} on every rank"
    return ", ".join(f"rank {r}: {v}" for r, v in shown.items())


def _verdict_c17_loader_alone(result: RunResult) -> Verdict:
    """C17 on an old-format run: it timed the DataLoader alone, so it cannot say what the loop's steady rate is."""
    alone = _alone(result)
    consumes = {r: d.step_consumes_samples_per_s for r, d in enumerate(alone)}
    feed = {r: workers_that_feed(d.rows, consumes[r]) for r, d in enumerate(alone)}
    fastest = max(row.samples_per_s for d in alone for row in d.rows)
    step_text = _per_rank({r: round(v) for r, v in consumes.items()}, "{} samples/s")
    if fastest > max(consumes.values()):
        rates = (
            f"its rates (up to {fastest:.0f} samples/s) exceed what the step alone consumes ({step_text}), which "
            "a loop that includes the step cannot do: they"
        )
    else:
        rates = f"its rates (up to {fastest:.0f} samples/s; the step alone consumes {step_text})"
    text = (
        "This run timed the DataLoader alone (each batch copied to the device, no training step), before the "
        f"course measured the loop: {rates} say how many workers feed the step ({_per_rank(feed)}), not the "
        "loop's steady rate that C17 is about; its pin_memory A/B had no compute to overlap. Not decided: a run "
        "of today's workload times the loop."
    )
    numbers = {
        "rule": alone[0].rule_of_thumb_workers,
        "feed": {str(r): v for r, v in feed.items()},
        "loader_alone_max": fastest,
        "step_consumes": {str(r): v for r, v in consumes.items()},
    }
    return Verdict("C17", "unverifiable", text, numbers, result.label)


def verdict_c17(result: RunResult) -> Verdict:
    """Claim C17 (``num_workers = 4 × GPUs`` and ``pin_memory=True``), on every rank.

    ``holds`` when the rule's worker count is within the noise of the best on every rank and pinned memory
    made every rank faster beyond the noise; ``partly`` when one of the two holds; ``wrong`` when neither;
    ``undecided`` when the rule's count is within the noise on some rank only because one side's windows spread
    widely (:func:`decided`) and on no rank beyond it; ``unverifiable`` on a CPU simulation, and on a run that timed
    the DataLoader alone instead of the training loop (the committed 2× H200 run): it then names the fewest workers
    that feed the step.
    """
    if timed_the_loader_alone(result):
        return _verdict_c17_loader_alone(result)
    where = result.label
    each = loaders(result)
    first = each[0]
    rule = first.rule_of_thumb_workers
    gpu = bool(first.gpus) or bool(getattr(getattr(result, "env", None), "is_gpu", False))
    per = {r: workers_enough(d.rows) for r, d in enumerate(each)}
    if not gpu:
        cores = f"{first.cpu_cores} cores" if first.cpu_cores else "cores"
        return Verdict(
            "C17",
            "unverifiable",
            f"A CPU simulation: the workers compete with the training for the same {cores}, so it says "
            "nothing about a GPU's input pipeline. Here the fewest workers within the noise of the best were "
            + ", ".join(f"{p.knee} on rank {r}{_undecided_text(p.undecided)}" for r, p in per.items())
            + ".",
            {"knee": [p.knee for p in per.values()], "rule": rule, "undecided": _undecided_numbers(per)},
            where,
        )
    tried = {row.num_workers for row in first.rows}
    readings = rule_readings(first)
    states = {n: {r: _rule_state(p, n) for r, p in per.items()} for n, _ in readings if n in tried}
    every = [s for st in states.values() for s in st.values()]
    rule_enough = bool(every) and all(s == "enough" for s in every)
    rule_undecided = bool(every) and "NOT enough" not in every and not rule_enough
    pins = {r: pin_comparison(d.rows, _pin_workers(d)) for r, d in enumerate(each)}
    pin_helps = all(c is not None and c.status == "faster" for c in pins.values())
    step = {r: statistics.median(d.step_only_samples_per_s) for r, d in enumerate(each)}
    status = "holds" if rule_enough and pin_helps else "partly" if rule_enough or pin_helps else "wrong"
    if rule_undecided:
        status = UNDECIDED
    windows = min(len(row.samples_per_s) for d in each for row in d.rows)
    text = _c17_text(per, step, pins, _readings_text(readings, states, tried) + f" ({windows} windows a side)", status)
    return Verdict(
        "C17",
        status,
        text,
        {
            "rule": rule,
            "rule_enough": rule_enough,
            "rule_state": {str(r): v for r, v in states.get(rule, {}).items()},
            "readings": {n: {str(r): v for r, v in states[n].items()} if n in states else None for n, _ in readings},
            "pin_helps": pin_helps,
            "knee": {str(r): p.knee for r, p in per.items()},
            "undecided": _undecided_numbers(per),
            "pin_change": {str(r): (c.change if c else None) for r, c in pins.items()},
            "pin_status": {str(r): (c.status if c else None) for r, c in pins.items()},
            "step_only": {str(r): v for r, v in step.items()},
            "windows": windows,
        },
        where,
    )


def _c17_text(
    per: Mapping[int, Enough],
    step: Mapping[int, float],
    pins: Mapping[int, Comparison | None],
    rule_text: str,
    status: str,
) -> str:
    """C17's sentence on GPUs: each rank's knee, the rule's count, pinned memory, the verdict."""
    parts = []
    for r, p in per.items():
        note = " (the rate was still rising at the largest count tried)" if p.still_rising else ""
        parts.append(
            f"rank {r}: {p.knee} workers are within the noise of the best ({p.best_rate:.0f} samples/s "
            f"at {p.best}){note}{_undecided_text(p.undecided)}; the step alone takes {step[r]:.0f} samples/s"
        )
    pin_text = "; ".join(
        f"rank {r}: {c.describe('samples/s', 'pin_memory=True')}" if c else f"rank {r}: not measured"
        for r, c in pins.items()
    )
    verdict = {
        "holds": "both parts hold on this machine.",
        "partly": "a starting point, not a law: measure the steady rate on the machine at hand.",
        "wrong": "neither part holds here.",
        UNDECIDED: "undecided: one side's windows spread too widely to tell the rule's count from the best; "
        "measure more windows.",
    }[status]
    return "; ".join(parts) + f". {rule_text}. {pin_text}. Verdict: {verdict}"


def rule_readings(d: Loader) -> list[tuple[int, str]]:
    """The source's ``num_workers = 4 × GPUs`` read two ways (review M1): for each rank's DataLoader, 4 × the job's
    GPUs (what the run records, :attr:`Loader.rule_of_thumb_workers`: the rule as written, as when one process fed
    every GPU with one loader, ``DataParallel``), and 4 per GPU process (one DataLoader per GPU under DDP: how it
    is usually read). One reading where the two agree (one process)."""
    literal = d.rule_of_thumb_workers
    per_process = literal // max(d.ranks, 1)
    if per_process == literal:
        return [(literal, "one process: both readings of the rule agree")]
    return [(literal, f"4 × the job's {d.ranks} GPUs, for each rank's DataLoader"), (per_process, "4 per GPU process")]


def _readings_text(readings: Sequence[tuple[int, str]], states: Mapping[int, Mapping[int, str]], tried) -> str:
    """``The rule's 8 workers (...): enough on every rank; its 4 workers (...): rank 0: NOT enough, ...``."""
    parts = []
    for k, (n, what) in enumerate(readings):
        st = states.get(n)
        said = (
            f"not tried (the counts tried: {', '.join(map(str, sorted(tried)))})"
            if st is None
            else ("enough on every rank" if len(st) > 1 else "enough for this process")  # review R6-10: a world of 1
            if all(v == "enough" for v in st.values())
            else ", ".join(f"rank {r}: {v}" for r, v in st.items())
        )
        head = "The rule's" if k == 0 else "read as"
        parts.append(f"{head} {n} workers ({what}): {said}")
    return "; ".join(parts)


def _rule_state(per: Enough, rule: int) -> str:
    """The rule's worker count on one rank: ``enough`` (within the noise of the best on both sides' spreads),
    ``undecided`` (within it only because one side's windows spread widely) or ``NOT enough``."""
    c = per.against_best[rule]
    return "enough" if decided(c) else "undecided" if c.status == "no change" else "NOT enough"


def _undecided_numbers(per: Mapping[int, Enough]) -> dict[str, list[int]]:
    return {str(r): sorted(p.undecided) for r, p in per.items()}


def shards_line(result: RunResult) -> str:
    """One file per sample against shard files (rank 0, warm page cache)."""
    first = ranks(result)[0].dataloader
    if isinstance(first, LoaderAlone) and first.shards is not None:
        return "the shards were read once in this run (the 2026-11-30 workload): no repeats to compare"
    sh = first.shards if isinstance(first, Loader) else None
    if sh is None:
        return "no shard measurement"
    single, shards = statistics.median(sh.one_file_per_sample_us), statistics.median(sh.shards_us)
    c = compare(sh.one_file_per_sample_us, sh.shards_us)
    outcome = (
        f"{single / shards:.0f}× less time per sample"
        if c.status == "faster"
        else f"{shards / single:.1f}× more time per sample"
        if c.status == "slower"
        else "no change"
    )
    return (
        f"reading {sh.samples} samples of {sh.bytes_per_sample / 1024:.0f} KiB from the page cache (the disk's "
        f"kind not checked): one file each {single:.0f} µs per sample, {sh.per_shard} samples per shard file "
        f"{shards:.1f} µs per sample: {outcome} (noise ±{c.noise:.0%}, {c.repeats[0]}+{c.repeats[1]} repeats)"
    )


# --------------------------------------------------------------------------- out of memory


def oom(result: RunResult, rank: int = 0) -> Oom:
    """A rank's out-of-memory demo (``oom``) of a ``pitfalls`` run."""
    found = ranks(result)[rank].oom
    if found is None:
        raise ValueError(f"{getattr(result, 'run_dir', 'this run')}: rank {rank} did not run the out-of-memory demo")
    return found


def _measured(result: RunResult, rank: int = 0) -> tuple[Oom, EmptyCache, Training]:
    """The demo of a run on GPUs (``oom_skipped`` is None), with its ``empty_cache()`` table and training step."""
    d = oom(result, rank)
    if d.empty_cache is None or d.training is None:
        raise ValueError(f"the out-of-memory demo was not measured: {d.skipped or 'a part is missing'}")
    return d, d.empty_cache, d.training


def oom_skipped(result: RunResult) -> str | None:
    """The skip message of a run without GPUs, else None."""
    return oom(result).skipped


def _not_here(skipped: str) -> str:
    """A verdict's text where the demo was skipped: its first sentence (``needs a GPU``); the notebook prints the
    whole message once."""
    return "not checked here: " + skipped.split(". ")[0].removeprefix("skipped: ")


def oom_frames(result: RunResult, rank: int = 0):  # -> dict[str, pandas.DataFrame]
    """The OOM demo's tables: fragmentation, empty_cache, the training step under a cap."""
    import pandas as pd

    d, table, training = _measured(result, rank)
    frag = pd.DataFrame(
        [{k: v for k, v in dataclasses.asdict(r).items() if k != "message"} for r in d.fragmentation]
    ).round(1)
    empty = pd.DataFrame([dataclasses.asdict(r) for r in table.rows]).round(1)
    train = pd.DataFrame(
        [
            {
                **{k: v for k, v in dataclasses.asdict(r).items() if k not in ("message", "step_ms_repeats")},
                **({"spread": relative_spread(r.step_ms_repeats)} if r.step_ms_repeats else {}),
            }
            for r in training.rows
        ]
    ).round(2)
    return {"fragmentation": frag, "empty_cache": empty, "training": train}


def allocator_line(result: RunResult, rank: int = 0) -> str:
    """Under which allocator settings the tables after the fragmentation case were measured (review S1)."""
    d = oom(result, rank)
    if d.allocator_after is None:
        return (
            "the allocator's settings after the fragmentation case were not recorded (a run from before 2026-12-07: "
            "its last case's max_split_size_mb:256 stayed in force for the tables after it)"
        )
    launch = f"the launch set {d.launch_alloc_conf}" if d.launch_alloc_conf else "the launch set none: the default"
    return (
        f"after the fragmentation case the allocator was set back to the launch's settings for the next tables: "
        f"{d.allocator_after} ({launch})"
    )


def oom_message(result: RunResult, rank: int = 0) -> str:
    """The message of the training step's OOM (what the learner will meet)."""
    d, _, training = _measured(result, rank)
    for r in (*training.rows, *d.fragmentation):
        if r.outcome == "OOM" and r.message:
            return r.message
    return "(no OOM happened: the cap did not bite)"


def verdict_c19(result: RunResult, rank: int = 0) -> Verdict:
    """Claim C19 (``empty_cache()`` helps against OOM) from the step-by-step memory table.

    ``holds`` never: ``empty_cache()`` releases only unoccupied cached blocks (its docstring: it "doesn't increase
    the amount of GPU memory available for PyTorch"); ``wrong`` when it freed nothing referenced and at most handed
    cached blocks back to the driver, which PyTorch would have reused anyway; ``unverifiable`` without a GPU, or
    when the table does not add up (allocated or reserved memory fell below the tensor while it was referenced, or
    the cache shrank but the driver got nothing back).
    """
    if skipped := oom_skipped(result):
        return Verdict("C19", "unverifiable", _not_here(skipped), {}, result.label)
    _, table, _ = _measured(result, rank)
    rows = {r.step: r for r in table.rows}
    created = next(r for s, r in rows.items() if s.startswith("x = "))
    alive = rows["empty_cache() while x is alive"]
    deleted, after = rows["del x"], rows["empty_cache() after del x"]
    kept = alive.allocated_mib >= created.allocated_mib and alive.reserved_mib >= created.allocated_mib
    returned = after.driver_free_mib - deleted.driver_free_mib
    released = deleted.reserved_mib - after.reserved_mib
    numbers = {
        "allocated_after_empty_cache_alive_mib": alive.allocated_mib,
        "returned_mib": returned,
        "released_mib": released,
        "referenced_fell": not kept,
    }
    text = (
        f"with the tensor alive, empty_cache() left {alive.allocated_mib:.0f} MiB allocated and "
        f"{alive.reserved_mib:.0f} MiB reserved (the tensor: {created.allocated_mib:.0f} MiB). After del, the "
        f"{deleted.reserved_mib:.0f} MiB PyTorch kept cached were reusable by PyTorch already; empty_cache() gave "
        f"{returned:.0f} MiB back to the driver. "
    )
    if not kept:
        return Verdict(
            "C19",
            "unverifiable",
            text + "Not decided: memory fell below the tensor while x was still referenced, which empty_cache() "
            "cannot do (it releases only unoccupied cached blocks): something else was freed between the rows, or "
            "the table is wrong; see the table.",
            numbers,
            result.label,
        )
    if (released > 0) != (returned > 0):
        return Verdict(
            "C19", "unverifiable", text + "Not what the lesson expects: see the table.", numbers, result.label
        )
    return Verdict(
        "C19",
        "wrong",
        text + "It frees nothing still referenced. What it hands back to the driver helps other processes, and "
        "allocations of this process that bypass PyTorch's allocator (NCCL's buffers, a library's workspace); never "
        "PyTorch's own tensors: before it raises an out-of-memory error the allocator frees its unused cached blocks "
        "itself and tries again. Verdict: wrong as an OOM fix.",
        numbers,
        result.label,
    )


def verdict_c20(result: RunResult, rank: int = 0) -> Verdict:
    """Claim C20 (tune ``max_split_size_mb`` against fragmentation) from the fragmentation case: ``holds`` when the
    default allocator runs out of memory and ``max_split_size_mb`` makes the same allocations fit; ``wrong`` when it
    does not; ``unverifiable`` when the default did not run out (nothing to fix) or a row is missing."""
    if skipped := oom_skipped(result):
        return Verdict("C20", "unverifiable", _not_here(skipped), {}, result.label)
    rows = oom(result, rank).fragmentation
    outcome = {r.config: r.outcome for r in rows}
    split = next((v for k, v in outcome.items() if "max_split_size_mb" in k), None)
    expandable = next((v for k, v in outcome.items() if k.startswith("expandable_segments:True")), None)
    cases = "the fragmentation case: " + "; ".join(f"{k}: {v}" for k, v in outcome.items()) + ". "
    how = (
        "max_split_size_mb is an option of the allocator's configuration (PYTORCH_ALLOC_CONF, or its older name "
        "PYTORCH_CUDA_ALLOC_CONF), read once, before the first CUDA allocation (the source says to tune it, which is "
        "this). "
    )
    also = {
        "fits": "expandable_segments:True, the modern alternative, fixed it too.",
        "OOM": "expandable_segments:True did not fix it either.",
    }.get(expandable or "", "expandable_segments:True was not tried.")
    numbers = {
        "outcomes": outcome,
        "default": outcome.get("default"),
        "max_split_size_mb": split,
        "expandable_segments": expandable,
    }
    if outcome.get("default") != "OOM" or split is None:
        why = (
            "the default allocator did not run out of memory here, so there was no fragmentation to fix"
            if outcome.get("default") == "fits"
            else "the default or the max_split_size_mb row is missing"
        )
        return Verdict("C20", "unverifiable", cases + f"Not decided: {why}.", numbers, result.label)
    if split == "fits":
        return Verdict(
            "C20",
            "holds",
            cases + how + "Verdict: holds: with max_split_size_mb the allocations that ran "
            "out of memory under the default fit. " + _why_split_fits(rows) + also,
            numbers,
            result.label,
        )
    return Verdict(
        "C20",
        "wrong",
        cases + how + "Verdict: max_split_size_mb did not fix this fragmentation. " + also,
        numbers,
        result.label,
    )


def _why_split_fits(rows: Sequence[Fragmentation]) -> str:
    """Why ``max_split_size_mb`` fixed the case (review M15), where its row shows it: blocks of that size or more are
    never split, so the small tensor took a segment of its own (reserved more than under the default) and left the
    cached block whole; a request may take such a block only within ``max_non_split_rounding_mb`` (20 MiB) of its
    size, so the large request could not, and the allocator's retry after the failed allocation freed that unused
    segment and fit it. ``""`` where the rows do not show it."""
    default = next((r for r in rows if r.config == "default"), None)
    split = next((r for r in rows if "max_split_size_mb" in r.config), None)
    if default is None or split is None or default.reserved_mib is None or split.reserved_mib is None:
        return ""
    if not split.reserved_mib > default.reserved_mib:
        return ""
    return (
        f"Why: with max_split_size_mb a cached block at least that large is never split, so the small tensor took a "
        f"segment of its own (reserved {split.reserved_mib:.0f} MiB, against {default.reserved_mib:.0f} under the "
        "default) and the cached block stayed whole; a larger request may take such a block only within "
        "max_non_split_rounding_mb (20 MiB) of its size, so the last one could not, and the allocator, its "
        "allocation refused under the cap, freed that unused segment and tried again. "
    )


def _training(result: RunResult, rank: int = 0) -> Training:
    return _measured(result, rank)[2]


def oom_fixes_verdict(result: RunResult, rank: int = 0) -> Verdict:
    """The training step under the cap: the whole batch fails, both fixes fit."""
    if skipped := oom_skipped(result):
        return Verdict("out of memory: the fixes", "info", _not_here(skipped), {}, result.label)
    rows = _training(result, rank).rows
    outcome = {r.variant: r.outcome for r in rows}
    capped = [r for r in rows if r.capped]
    ok = len(capped) == 3 and capped[0].outcome == "OOM" and all(r.outcome == "fits" for r in capped[1:])
    return Verdict(
        "out of memory: the fixes",
        "pass" if ok else "fail",
        "; ".join(f"{k}: {v}" for k, v in outcome.items()),
        {"outcomes": outcome},
        result.label,
    )


def checkpointing_cost(result: RunResult, rank: int = 0) -> Verdict:
    """What activation checkpointing costs in step time: the whole batch with and without it, both without the cap,
    each over repeated steps after an untimed first one, by the course's noise rule. ``info`` when the run did not
    time them so (a GPU-only measurement; runs before that timed one step right after installing checkpointing)."""
    key = "out of memory: checkpointing's cost"
    if skipped := oom_skipped(result):
        return Verdict(key, "info", _not_here(skipped), {}, result.label)
    training = _training(result, rank)
    rows = training.rows
    free = [r for r in rows if not r.capped and r.outcome == "fits" and len(r.step_ms_repeats or ()) >= 2]
    plain = next((r for r in free if "checkpointing" not in r.variant), None)
    ckpt = next((r for r in free if "checkpointing" in r.variant), None)
    if plain is None or ckpt is None:
        return Verdict(
            key,
            "info",
            "Not measured in this run: it timed one step per variant, the checkpointed one "
            "right after installing checkpointing and under the cap, which says little about its cost. "
            "A run of today's workload times repeated steps of both, without the cap.",
            {},
            result.label,
        )
    c = compare(plain.step_ms_repeats or (), ckpt.step_ms_repeats or ())
    text = c.describe("ms", f"the step without → with activation checkpointing (batch {training.batch}, no cap)")
    return Verdict(
        key,
        c.status,
        text + ". Checkpointing recomputes each checkpointed block's forward pass in backward: "
        "the price of the memory it saved.",
        {"ratio": c.ratio, "noise": c.noise, "baseline": c.baseline, "candidate": c.candidate},
        result.label,
    )
