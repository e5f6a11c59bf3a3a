"""The measured pitfalls of notebook 06: the input pipeline (claim C17) and out-of-memory errors (C19, C20).

Reads the ``pitfalls`` workload's result (parent side; never launches, never touches CUDA).
Every A/B goes through :func:`~nvtutorial.report.verdict.compare`: a configuration is "enough
workers" when its rate is within the noise of the best one's, and ``pin_memory`` helps only
when it is faster by more than the noise, on each rank.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nvtutorial.report.verdict import Comparison, Verdict, compare, relative_spread


def _loader(result: Any, rank: int) -> Mapping[str, Any]:
    return result.ranks[rank]["dataloader"]


def _unpinned(rows: Sequence[Mapping[str, Any]], pin: bool = False) -> list[Mapping[str, Any]]:
    return [r for r in rows if bool(r["pin_memory"]) == pin]


def timed_the_loader_alone(result: Any) -> bool:
    """Whether a run is of the old format (the committed 2× H200 run, 2026-11-30, commit 15fcf4b): each rate
    is the DataLoader's alone (each batch copied to the device, no training step), one per configuration,
    and ``step_consumes_samples_per_s`` the step's alone; today's runs time the training loop
    (``step_only_samples_per_s`` for the step alone)."""
    return any(
        "step_only_samples_per_s" not in _loader(result, r) and "step_consumes_samples_per_s" in _loader(result, r)
        for r in range(len(result.ranks))
    )


def workers_that_feed(rows: Sequence[Mapping[str, Any]], consumes: float) -> int | None:
    """In an old-format run, the fewest workers whose loader alone delivers at least what the step alone consumes
    (unpinned rows; None: no count tried does)."""
    fed = [r["num_workers"] for r in _unpinned(rows) if float(r["samples_per_s"]) >= consumes]
    return min(fed) if fed else None


def has_repeats(result: Any) -> bool:
    """Whether a run's loader rows hold repeated windows (the old format held one rate per row)."""
    rows = _loader(result, 0).get("rows", [])
    return bool(rows) and all(isinstance(r.get("samples_per_s"), list) and len(r["samples_per_s"]) >= 2 for r in rows)


def loader_frame(result: Any):  # -> pandas.DataFrame
    """Every rank's steady rate per configuration: median, spread of the windows, and the windows."""
    import pandas as pd

    rows = []
    for rank in range(len(result.ranks)):
        d = _loader(result, rank)
        for r in d["rows"]:
            rates = r["samples_per_s"]
            rows.append(
                {
                    "rank": rank,
                    "num_workers": r["num_workers"],
                    "pin_memory": r["pin_memory"],
                    "samples/s (median)": round(statistics.median(rates)),
                    "spread": f"{(max(rates) - min(rates)) / statistics.median(rates):.0%}",
                    "windows": " ".join(f"{x:.0f}" for x in rates),
                }
            )
        step = d["step_only_samples_per_s"]
        rows.append(
            {
                "rank": rank,
                "num_workers": "input on the GPU" if d.get("gpus") else "input in memory",
                "pin_memory": None,
                "samples/s (median)": round(statistics.median(step)),
                "spread": f"{(max(step) - min(step)) / statistics.median(step):.0%}",
                "windows": " ".join(f"{x:.0f}" for x in step),
            }
        )
    return pd.DataFrame(rows)


def enough_workers(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """For one rank's unpinned rows: the best configuration, each count against it, and the knee
    (the fewest workers within the noise of the best)."""
    rows = sorted(_unpinned(rows), key=lambda r: r["num_workers"])
    best = max(rows, key=lambda r: statistics.median(r["samples_per_s"]))
    against: dict[int, Comparison] = {
        r["num_workers"]: compare(best["samples_per_s"], r["samples_per_s"], lower_is_better=False) for r in rows
    }
    knee = next(w for w, c in against.items() if c.status == "no change")
    largest = rows[-1]["num_workers"]
    rising = (
        best["num_workers"] == largest
        and len(rows) > 1
        and compare(rows[-2]["samples_per_s"], rows[-1]["samples_per_s"], lower_is_better=False).status == "faster"
    )
    return {
        "best": best["num_workers"],
        "best_rate": statistics.median(best["samples_per_s"]),
        "knee": knee,
        "against_best": against,
        "still_rising": rising,
        "largest": largest,
    }


def pin_comparison(rows: Sequence[Mapping[str, Any]], workers: int) -> Comparison | None:
    """``pin_memory=True`` against False at ``workers`` workers, on one rank (None: not measured)."""

    def rates(pin: bool) -> list[float] | None:
        return next((r["samples_per_s"] for r in _unpinned(rows, pin) if r["num_workers"] == workers), None)

    base, cand = rates(False), rates(True)
    return compare(base, cand, lower_is_better=False) if base and cand else None


def pin_within_noise(result: Any) -> bool:
    """Whether ``pin_memory=True`` changed no rate beyond the noise, at any worker count, on any rank."""
    found = False
    for rank in range(len(result.ranks)):
        rows = _loader(result, rank)["rows"]
        for w in sorted({r["num_workers"] for r in rows if r["pin_memory"]}):
            c = pin_comparison(rows, w)
            if c is not None:
                found = True
                if c.status != "no change":
                    return False
    return found


def _per_rank(values: Mapping[int, Any], fmt: str = "{}") -> str:
    """``X on every rank`` when the ranks agree, else ``rank 0: X, rank 1: Y``."""
    shown = {r: fmt.format(v) if v is not None else "none of the counts tried" for r, v in values.items()}
    if len(set(shown.values())) == 1:
        return f"{next(iter(shown.values()))} on every rank"
    return ", ".join(f"rank {r}: {v}" for r, v in shown.items())


def _verdict_c17_loader_alone(result: Any) -> Verdict:
    """C17 on an old-format run: it timed the DataLoader alone, so it cannot say what the loop's steady rate is."""
    ranks = range(len(result.ranks))
    consumes = {r: float(_loader(result, r)["step_consumes_samples_per_s"]) for r in ranks}
    feed = {r: workers_that_feed(_loader(result, r)["rows"], consumes[r]) for r in ranks}
    fastest = max(float(row["samples_per_s"]) for r in ranks for row in _loader(result, r)["rows"])
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
        "rule": _loader(result, 0)["rule_of_thumb_workers"],
        "feed": {str(r): v for r, v in feed.items()},
        "loader_alone_max": fastest,
        "step_consumes": {str(r): v for r, v in consumes.items()},
    }
    return Verdict("C17", "unverifiable", text, numbers, result.label)


def verdict_c17(result: Any) -> Verdict:
    """Claim C17 (``num_workers = 4 × GPUs`` and ``pin_memory=True``), on every rank.

    ``holds`` when the rule's worker count is within the noise of the best on every rank and pinned memory
    made every rank faster beyond the noise; ``partly`` when one of the two holds; ``wrong`` when neither;
    ``unverifiable`` on a CPU simulation, and on a run that timed the DataLoader alone instead of the
    training loop (the committed 2× H200 run): it then names the fewest workers that feed the step.
    """
    if timed_the_loader_alone(result):
        return _verdict_c17_loader_alone(result)
    where = result.label
    ranks = range(len(result.ranks))
    first = _loader(result, 0)
    rule = first["rule_of_thumb_workers"]
    gpu = bool(first.get("gpus")) or bool(getattr(getattr(result, "env", None), "is_gpu", False))
    if not gpu:
        per = [enough_workers(_loader(result, r)["rows"]) for r in ranks]
        return Verdict(
            "C17",
            "unverifiable",
            "A CPU simulation: the workers compete with the training for the same few cores, so it says "
            "nothing about a GPU's input pipeline. Here the fewest workers within the noise of the best were "
            + ", ".join(f"{p['knee']} on rank {r}" for r, p in zip(ranks, per))
            + ".",
            {"knee": [p["knee"] for p in per], "rule": rule},
            where,
        )
    per = {r: enough_workers(_loader(result, r)["rows"]) for r in ranks}
    tried = {row["num_workers"] for row in first["rows"]}
    rule_enough = rule in tried and all(p["against_best"][rule].status == "no change" for p in per.values())
    pins = {r: pin_comparison(_loader(result, r)["rows"], rule if rule in tried else max(tried)) for r in ranks}
    pin_helps = all(c is not None and c.status == "faster" for c in pins.values())
    step = {r: statistics.median(_loader(result, r)["step_only_samples_per_s"]) for r in ranks}
    parts = []
    for r, p in per.items():
        note = " (the rate was still rising at the largest count tried)" if p["still_rising"] else ""
        parts.append(
            f"rank {r}: {p['knee']} workers are within the noise of the best ({p['best_rate']:.0f} samples/s "
            f"at {p['best']}){note}; the step alone takes {step[r]:.0f} samples/s"
        )
    pin_text = "; ".join(
        f"rank {r}: {c.describe('samples/s', 'pin_memory=True')}" if c else f"rank {r}: not measured"
        for r, c in pins.items()
    )
    status = "holds" if rule_enough and pin_helps else "partly" if rule_enough or pin_helps else "wrong"
    text = (
        "; ".join(parts)
        + f". The rule's {rule} workers are "
        + ("enough" if rule_enough else "NOT enough")
        + f" on every rank. {pin_text}. Verdict: "
        + {
            "holds": "both parts hold on this machine.",
            "partly": "a starting point, not a law: measure the steady rate on the machine at hand.",
            "wrong": "neither part holds here.",
        }[status]
    )
    return Verdict(
        "C17",
        status,
        text,
        {
            "rule": rule,
            "rule_enough": rule_enough,
            "pin_helps": pin_helps,
            "knee": {str(r): p["knee"] for r, p in per.items()},
            "pin_change": {str(r): (c.change if c else None) for r, c in pins.items()},
            "pin_status": {str(r): (c.status if c else None) for r, c in pins.items()},
            "step_only": {str(r): v for r, v in step.items()},
        },
        where,
    )


def shards_line(result: Any) -> str:
    """One file per sample against shard files (rank 0, warm page cache)."""
    sh = _loader(result, 0).get("shards")
    if not sh:
        return "no shard measurement"
    single, shards = statistics.median(sh["one_file_per_sample_us"]), statistics.median(sh["shards_us"])
    c = compare(sh["one_file_per_sample_us"], sh["shards_us"])
    result = (
        f"{single / shards:.0f}× less time per sample"
        if c.status == "faster"
        else f"{shards / single:.1f}× more time per sample"
        if c.status == "slower"
        else "no change"
    )
    return (
        f"reading {sh['samples']} samples of {sh['bytes_per_sample'] / 1024:.0f} KiB from the page cache (the disk's "
        f"kind not checked): one file each {single:.0f} µs per sample, {sh['per_shard']} samples per shard file "
        f"{shards:.1f} µs per sample: {result} (noise ±{c.noise:.0%}, {c.repeats[0]}+{c.repeats[1]} repeats)"
    )


# --------------------------------------------------------------------------- out of memory


def _oom(result: Any, rank: int = 0) -> Mapping[str, Any]:
    return result.ranks[rank]["oom"]


def oom_skipped(result: Any) -> str | None:
    """The skip message of a run without GPUs, else None."""
    return _oom(result).get("skipped")


def oom_frames(result: Any, rank: int = 0):  # -> dict[str, pandas.DataFrame]
    """The OOM demo's tables: fragmentation, empty_cache, the training step under a cap."""
    import pandas as pd

    d = _oom(result, rank)
    frag = pd.DataFrame([{k: v for k, v in r.items() if k != "message"} for r in d["fragmentation"]]).round(1)
    empty = pd.DataFrame(d["empty_cache"]["rows"]).round(1)
    train = pd.DataFrame(
        [
            {
                **{k: v for k, v in r.items() if k not in ("message", "step_ms_repeats")},
                **({"spread": relative_spread(r["step_ms_repeats"])} if r.get("step_ms_repeats") else {}),
            }
            for r in d["training"]["rows"]
        ]
    ).round(2)
    return {"fragmentation": frag, "empty_cache": empty, "training": train}


def oom_message(result: Any, rank: int = 0) -> str:
    """The message of the training step's OOM (what the learner will meet)."""
    d = _oom(result, rank)
    for r in d["training"]["rows"] + d["fragmentation"]:
        if r.get("outcome") == "OOM" and r.get("message"):
            return r["message"]
    return "(no OOM happened: the cap did not bite)"


def verdict_c19(result: Any, rank: int = 0) -> Verdict:
    """Claim C19 (``empty_cache()`` helps against OOM) from the step-by-step memory table.

    ``holds`` never: ``empty_cache()`` releases only unoccupied cached blocks (its docstring: it "doesn't increase
    the amount of GPU memory available for PyTorch"); ``wrong`` when it freed nothing referenced and at most handed
    cached blocks back to the driver, which PyTorch would have reused anyway; ``unverifiable`` without a GPU, or
    when the table does not add up (allocated or reserved memory fell below the tensor while it was referenced, or
    the cache shrank but the driver got nothing back).
    """
    if skipped := oom_skipped(result):
        return Verdict("C19", "unverifiable", "not checked here: " + skipped, {}, result.label)
    rows = {r["step"]: r for r in _oom(result, rank)["empty_cache"]["rows"]}
    created = next(r for s, r in rows.items() if s.startswith("x = "))
    alive = rows["empty_cache() while x is alive"]
    deleted, after = rows["del x"], rows["empty_cache() after del x"]
    kept = alive["allocated_mib"] >= created["allocated_mib"] and alive["reserved_mib"] >= created["allocated_mib"]
    returned = after["driver_free_mib"] - deleted["driver_free_mib"]
    released = deleted["reserved_mib"] - after["reserved_mib"]
    numbers = {
        "allocated_after_empty_cache_alive_mib": alive["allocated_mib"],
        "returned_mib": returned,
        "released_mib": released,
        "referenced_fell": not kept,
    }
    text = (
        f"with the tensor alive, empty_cache() left {alive['allocated_mib']:.0f} MiB allocated and "
        f"{alive['reserved_mib']:.0f} MiB reserved (the tensor: {created['allocated_mib']:.0f} MiB). After del, the "
        f"{deleted['reserved_mib']:.0f} MiB PyTorch kept cached were reusable by PyTorch already; empty_cache() gave "
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
        text + "It frees nothing still referenced; what it hands back helps other processes, "
        "not this one. Verdict: wrong as an OOM fix.",
        numbers,
        result.label,
    )


def verdict_c20(result: Any, rank: int = 0) -> Verdict:
    """Claim C20 (tune ``max_split_size_mb`` against fragmentation) from the fragmentation case: ``holds`` when the
    default allocator runs out of memory and ``max_split_size_mb`` makes the same allocations fit; ``wrong`` when it
    does not; ``unverifiable`` when the default did not run out (nothing to fix) or a row is missing."""
    if skipped := oom_skipped(result):
        return Verdict("C20", "unverifiable", "not checked here: " + skipped, {}, result.label)
    outcome = {r["config"]: r.get("outcome") for r in _oom(result, rank)["fragmentation"]}
    split = next((v for k, v in outcome.items() if "max_split_size_mb" in k), None)
    expandable = next((v for k, v in outcome.items() if k.startswith("expandable_segments:True")), None)
    cases = "the fragmentation case: " + "; ".join(f"{k}: {v}" for k, v in outcome.items()) + ". "
    how = (
        "max_split_size_mb is an option of PYTORCH_CUDA_ALLOC_CONF, read once, before the first CUDA allocation "
        "(the source says to tune it, which is this). "
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
            "out of memory under the default fit. " + also,
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


def _capped(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows measured under the cap (older runs, without the ``capped`` flag: every row after the first)."""
    if all("capped" in r for r in rows):
        return [r for r in rows if r["capped"]]
    return list(rows[1:])


def oom_fixes_verdict(result: Any, rank: int = 0) -> Verdict:
    """The training step under the cap: the whole batch fails, both fixes fit."""
    if skipped := oom_skipped(result):
        return Verdict("out of memory: the fixes", "info", "not checked here: " + skipped, {}, result.label)
    rows = _oom(result, rank)["training"]["rows"]
    outcome = {r["variant"]: r.get("outcome") for r in rows}
    capped = _capped(rows)
    ok = len(capped) == 3 and capped[0].get("outcome") == "OOM" and all(r.get("outcome") == "fits" for r in capped[1:])
    return Verdict(
        "out of memory: the fixes",
        "pass" if ok else "fail",
        "; ".join(f"{k}: {v}" for k, v in outcome.items()),
        {"outcomes": outcome},
        result.label,
    )


def checkpointing_cost(result: Any, rank: int = 0) -> Verdict:
    """What activation checkpointing costs in step time: the whole batch with and without it, both without the cap,
    each over repeated steps after an untimed first one, by the course's noise rule. ``info`` when the run did not
    time them so (a GPU-only measurement; runs before that timed one step right after installing checkpointing)."""
    key = "out of memory: checkpointing's cost"
    if skipped := oom_skipped(result):
        return Verdict(key, "info", "not checked here: " + skipped, {}, result.label)
    rows = _oom(result, rank)["training"]["rows"]
    free = [
        r
        for r in rows
        if r.get("capped") is False and r.get("outcome") == "fits" and len(r.get("step_ms_repeats") or []) >= 2
    ]
    plain = next((r for r in free if "checkpointing" not in r["variant"]), None)
    ckpt = next((r for r in free if "checkpointing" in r["variant"]), None)
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
    c = compare(plain["step_ms_repeats"], ckpt["step_ms_repeats"])
    text = c.describe(
        "ms",
        f"the step without → with activation checkpointing (batch {_oom(result, rank)['training']['batch']}, no cap)",
    )
    return Verdict(
        key,
        c.status,
        text + ". Checkpointing recomputes each checkpointed block's forward pass in backward: "
        "the price of the memory it saved.",
        {"ratio": c.ratio, "noise": c.noise, "baseline": c.baseline, "candidate": c.candidate},
        result.label,
    )
