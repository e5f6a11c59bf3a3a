"""What notebook 07's ``compression`` runs show: a table of the hooks per link, and verdicts.

Every step-time A/B goes through :func:`~nvtutorial.report.verdict.compare`: the repeats are the
rounds' median steps of the hook and of ``none`` on the same link, and the A/A gap is the one
between the ``fp16`` and ``bf16`` hooks (they do the same work: a cast, half the bytes), so a
difference counts only when it is larger than both. The hooks themselves are
:mod:`nvtutorial.chapters.ch07_collectives.lessons.compression`.

Each function reads one run's typed metrics (``result.metrics_as(schema_compression.Rank)``, rank 0's) or several
runs' keyed by link (``{rank.link: rank}``). Notebook 07 passes the raw JSON instead (``fast.ranks[0]``,
``{link: fast.ranks[0]}``, ``density_summary.get("trained", {})``): the functions it calls type what they are given
where it comes in (``schema_compression.rank_typed``, ``runs_typed``, ``summary_typed``) and work on the
dataclasses.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nvtutorial.chapters.ch07_collectives.schema_compression import (
    DensitySummary,
    Hook,
    Rank,
    rank_typed,
    runs_typed,
    summary_typed,
)
from nvtutorial.report.verdict import Comparison, Verdict, aa_gap, compare, comparison_verdict
from nvtutorial.results import RunResult

TWINS = ("fp16", "bf16")
"""Two hooks that do the same work: their gap is an A/A comparison."""
IOU_TOLERANCE = 0.02
"""IoU differences smaller than this (absolute) are called "no visible cost" in a short run."""
CLAIMED_SAVING = 0.85
"""Claim C23: the sparse exchange "cuts communication by 85 %"."""
Raw = Mapping[str, Any]
"""One rank's metrics as the run's JSON holds them (``result.ranks[0]``): what notebook 07 passes."""


def by_hook(metrics: Rank) -> dict[str, Hook]:
    """The run's hooks by name, in the order they ran."""
    return {h.hook: h for h in metrics.hooks}


def twin_gap(metrics: Rank) -> float | None:
    """The relative gap between the fp16 and bf16 hooks' step times on one link (``None``: one is missing)."""
    hooks = by_hook(metrics)
    if not all(t in hooks for t in TWINS):
        return None
    return aa_gap(*(hooks[t].step_ms_round_medians for t in TWINS))


def comparisons(metrics: Rank) -> dict[str, Comparison]:
    """Each hook's step time against ``none`` on the same link (``compare`` over the rounds' medians)."""
    hooks = by_hook(metrics)
    base, gap = hooks.get("none"), twin_gap(metrics)
    if base is None:
        return {}
    return {
        name: compare(base.step_ms_round_medians, h.step_ms_round_medians, aa_gap=gap)
        for name, h in hooks.items()
        if name != "none"
    }


def hooks_frame(results: Mapping[str, Rank | Raw]):  # -> pandas.DataFrame
    """One row per (link, hook) from the ``compression`` workload's metrics, keyed by link name:
    step time (the median of the rounds' medians), its change against ``none`` with the noise and
    the verdict of ``compare``, the
    bytes each rank sends per step and the share saved, NVML's count where there is one, accuracy."""
    import pandas as pd

    rows = []
    for link, metrics in runs_typed(results).items():
        hooks = by_hook(metrics)
        base = hooks.get("none")
        judged = comparisons(metrics)
        for name, h in hooks.items():
            c = judged.get(name)
            tx = h.nvlink_tx_bytes_per_step
            rows.append(
                {
                    "link": link,
                    "hook": name,
                    "step_ms": statistics.median(h.step_ms_round_medians),  # what compare judges
                    "step_vs_none": c.ratio if c else 1.0,
                    "noise_pct": 100 * c.noise if c else float("nan"),
                    "step_time": c.status if c else "baseline",
                    "sent_MB_per_step": h.sent_bytes_per_step / 1e6,
                    "bytes_saved": 1 - h.sent_bytes_per_step / h.dense_bytes_per_step,
                    "nvlink_tx_MB_per_step": tx / 1e6 if tx is not None else None,
                    "nvml_over_counted": tx / h.sent_bytes_per_step
                    if tx is not None and h.sent_bytes_per_step
                    else None,
                    "nvml_note": h.nvlink_note,
                    "final_val_loss": h.final_val_loss,
                    "final_iou": h.final_iou,
                    "iou_vs_none": h.final_iou - base.final_iou if base else float("nan"),
                    "compressed_when_timed": h.compressed_when_timed,
                }
            )
    return pd.DataFrame(rows)


def inside_rounds_spread(c: Comparison) -> bool:
    """A "no change" that only the rounds' spread explains: larger than the A/A gap (and the 1 % floor),
    so more rounds could settle it either way."""
    return c.status == "no change" and c.aa_gap is not None and abs(c.change) > max(c.aa_gap, 0.01)


def prediction_answer(
    results: Mapping[str, Rank], link: str, choices: Mapping[str, tuple[str, ...]], other_choice: str
) -> str:
    """The letter among ``choices`` (letter → the hooks it names; ``()``: none) whose hooks are exactly those
    that made the step faster than no compression beyond the noise on ``link``; ``other_choice`` otherwise."""
    faster = tuple(sorted(name for name, c in comparisons(results[link]).items() if c.status == "faster"))
    return next((k for k, hooks in choices.items() if tuple(sorted(hooks)) == faster), other_choice)


REFERENCE_NVLINK = (
    Path(__file__).resolve().parents[3] / "reference/h200x2/runs/compression-20261130-023009-540e2f/result.json"
)
"""The committed 2× H200 ``compression`` run over NVLink: what grades notebook 07's prediction off two GPUs."""


def reference_nvlink() -> RunResult | None:
    """The committed run of :data:`REFERENCE_NVLINK` (None: this copy of the course has no ``reference/``)."""
    return RunResult.load(REFERENCE_NVLINK) if REFERENCE_NVLINK.is_file() else None


def grade_hooks(
    prediction: str | None,
    fast: RunResult,
    choices: Mapping[str, tuple[str, ...]],
    statements: Mapping[str, str],
    other_choice: str,
    reference: RunResult | None = None,
) -> Verdict:
    """Notebook 07's prediction (which hooks make the step faster over the fastest link, NVLink on two GPUs) is about
    GPUs: graded against ``fast``'s link where its ranks ran on GPUs, else against the committed 2× H200 run over
    NVLink (labelled so: this machine's CPU simulation is quoted, never graded by); not graded without either."""
    from nvtutorial.report.predict import grade_choice

    graded, label, note = fast, fast.label, ""
    mine = fast.metrics_as(Rank)
    here = prediction_answer({mine.link: mine}, mine.link, choices, other_choice)
    if not (fast.env is not None and fast.env.is_gpu):
        graded = reference_nvlink() if reference is None else reference
        if graded is None:
            return Verdict(
                "faster hooks",
                "info",
                "not graded here: the question is about GPUs, and this copy of the course has no committed 2× H200 "
                "run (reference/h200x2/runs ships with a checkout)",
                {"prediction": prediction},
                fast.label,
            )
        label = f"{graded.label}: the committed 2× H200 run, not this machine"
        note = (
            f" This machine's two ranks ran as a CPU simulation, where the verdicts above say ({here}) "
            f"{statements[here]}: it does not grade a prediction about GPUs."
        )
    theirs = mine if graded is fast else graded.metrics_as(Rank)
    link = theirs.link
    answer = prediction_answer({link: theirs}, link, choices, other_choice)
    why = (
        "Over a fast link the all-reduce is short and hidden under the backward pass, so encoding and decoding can "
        "only add time."
        if answer == next(k for k, hooks in choices.items() if not hooks)
        else "Where a hook pays, the exchange was not all hidden under the backward pass: fewer bytes on the link won "
        "back more than encoding and decoding cost."
    )
    by = "the verdicts above" if graded is fast else "that run's verdicts"
    return grade_choice(
        "faster hooks",
        prediction,
        answer,
        statements,
        where=label,
        explanation=f"On {link}, by {by}. {why}{note}",
    )


def hook_verdicts(results: Mapping[str, Rank | Raw], where: str) -> list[Verdict]:
    """One verdict per (link, hook): faster, slower or no change against ``none``, with the bytes saved."""
    out = []
    for link, metrics in runs_typed(results).items():
        hooks = by_hook(metrics)
        for name, c in comparisons(metrics).items():
            saved = 1 - hooks[name].sent_bytes_per_step / hooks[name].dense_bytes_per_step
            iou = hooks[name].final_iou - hooks["none"].final_iou
            what = f"{name} on {link}, step time against no compression"
            text = (
                f"{c.describe('ms', what)}; it sends {saved:.1%} fewer bytes; final validation IoU {iou:+.3f} "
                f"against no compression ({'within' if abs(iou) < IOU_TOLERANCE else 'beyond'} "
                f"{IOU_TOLERANCE} in one short run)"
            )
            unsettled = inside_rounds_spread(c)
            if unsettled:
                text += (
                    f". The {c.change:+.1%} is beyond the fp16/bf16 A/A gap ({c.aa_gap:.1%}) but inside the spread "
                    f"of the rounds (±{c.noise:.0%}, {c.repeats[0]} rounds): more rounds are needed to call it"
                )
            out.append(
                comparison_verdict(
                    f"{name} · {link}",
                    c,
                    text,
                    where,
                    bytes_saved=saved,
                    iou_vs_none=iou,
                    link=link,
                    hook=name,
                    needs_more_rounds=unsettled,
                )
            )
    return out


def twin_verdict(results: Mapping[str, Rank | Raw], where: str) -> Verdict:
    """The A/A test: fp16 against bf16 on each link. They do the same work, so their gap is noise."""
    gaps = {link: g for link, m in runs_typed(results).items() if (g := twin_gap(m)) is not None}
    if not gaps:
        return Verdict(
            "fp16 vs bf16 (A/A)",
            "info",
            "not measured: the run has not both fp16 and bf16 (the bf16 hook needs a CUDA build of torch)",
            {},
            where,
        )
    text = "; ".join(f"{link}: {g:.1%}" for link, g in gaps.items())
    return Verdict(
        "fp16 vs bf16 (A/A)",
        "info",
        f"the gap between two hooks that do the same work: {text}. "
        "It is one part of compare's noise: a hook's difference from no compression counts only beyond "
        "the larger of this gap, the spread of either side's rounds and 1 %",
        {"gaps": gaps},
        where,
    )


def loss_differences(metrics: Rank) -> dict[str, float]:
    """Per hook, the largest absolute difference of its training loss from ``none``'s, step by step."""
    hooks = {h.hook: h.train_loss for h in metrics.hooks}
    base = hooks.get("none")
    if base is None:
        return {}
    return {name: max(abs(a - b) for a, b in zip(loss, base)) for name, loss in hooks.items() if name != "none"}


def loss_statement(metrics: Rank | Raw) -> str:
    """In words: which hooks trained exactly like ``none`` (identical losses) and how far the others drifted."""
    diffs = loss_differences(rank_typed(metrics))
    same = [n for n, d in diffs.items() if d == 0]
    other = [f"{n} (at most {d:.2g})" for n, d in diffs.items() if d > 0]
    parts = []
    if same:
        parts.append(f"identical losses to no compression, step for step: {', '.join(same)}")
    if other:
        parts.append(f"largest loss difference from no compression: {', '.join(other)}")
    return "; ".join(parts) or "no hook to compare with no compression"


def density_verdict(
    summary: DensitySummary | Raw | None, where: str, claimed_saving: float = CLAIMED_SAVING
) -> Verdict:
    """Claim C23 (a sparse all-reduce "cuts communication by 85 %") against the measured density of the
    gradients (``Rank.density_summary.trained``; ``None`` or ``{}``: not measured): the bytes the source's format and
    an index+value format would send, against dense fp32."""
    summary = summary_typed(summary)
    if summary is None or not summary.params:
        return Verdict("C23", "unverifiable", "no gradient density was measured", {}, where)
    zero, source_ratio, ours = summary.frac_zero, summary.source_format_ratio, summary.index_value_ratio
    best_saving = 1 - ours
    status = "wrong" if best_saving < claimed_saving else "holds"
    needed = 1 - claimed_saving  # an int32 index + fp32 value per non-zero: 8 bytes against 4 dense
    text = (
        f"{zero:.1%} of the gradient entries are exactly zero ({summary.frac_near_zero:.1%} below 1e-3 of their "
        f"layer's largest); if the coordinates nonzero() returns (one int64 per dimension) travelled with each "
        f"value, as a correct version of the source's approach would need (its code sends the values alone), the "
        f"non-zeros would move {source_ratio:.2f}× the dense bytes, and with one int32 index per value "
        f"{ours:.2f}×. Saving {claimed_saving:.0%} that way needs at most {needed / 2:.1%} non-zeros"
    )
    return Verdict(
        "C23",
        status,
        text,
        {
            "frac_zero": zero,
            "source_format_ratio": source_ratio,
            "index_value_ratio": ours,
            "best_saving": best_saving,
            "claimed_saving": claimed_saving,
        },
        where,
    )


def link_statement(results: Mapping[str, Rank | Raw]) -> str:
    """What the link did to the step without compression, where more than one link was measured."""
    base = {link: hooks["none"] for link, m in runs_typed(results).items() if "none" in (hooks := by_hook(m))}
    if len(base) < 2:
        return "One link measured: nothing to compare the uncompressed step with."
    (a, ha), (b, hb) = list(base.items())[:2]
    c = compare(ha.step_ms_round_medians, hb.step_ms_round_medians)
    return f"Without compression, {c.describe('ms', f'{a} → {b}')}."
