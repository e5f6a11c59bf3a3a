"""Notebook 08's largest model: the most blocks each rung fits in a budget (:func:`fit_table`), and whether the
largest one the run trained fitted (:func:`fit_verdict`). Both are importable from
:mod:`~nvtutorial.chapters.ch08_ladder.report` too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from nvtutorial.chapters.ch08_ladder import schema
from nvtutorial.chapters.ch08_ladder.report_model import RUNGS, Setup, largest, model_state, rank_memory, with_layers
from nvtutorial.chapters.ch08_ladder.schema import LABELS
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult

SMALL_FOR_A_GPU = 1e9
"""Bytes of model state per rank under which a GPU's fixed allocations dominate its peak memory."""


def fit_table(s: Setup, device_budget: float, host_budget: float, rungs: Sequence[str] = RUNGS):
    """Per rung: the most blocks that fit (at most :data:`LAYER_LIMIT`), the parameters that makes
    (millions), the predicted device peak and the model state per rank (MB), and where that state lives."""
    import pandas as pd

    one = dataclasses.replace(s, layers=1).shapes()
    rows = []
    for rung in rungs:
        layers = largest(s, rung, device_budget, host_budget)
        t = dataclasses.replace(s, layers=layers)
        shapes = with_layers(one, layers)
        peak = max(rank_memory(t, rung, r, shapes).device_peak for r in range(s.world)) if layers else None
        rows.append(
            {
                "rung": rung,
                "label": LABELS[rung],
                "layers": layers,
                "parameters (M)": sum(math.prod(sh) for _, sh in shapes) / 1e6 if layers else 0.0,
                "device peak (MB, model)": peak / 1e6 if peak else None,
                "model state per rank (MB)": max(
                    sum(model_state(rung, shapes, s.world, r).values()) for r in range(s.world)
                )
                / 1e6
                if layers
                else None,
                "state in": "host" if rung == "fsdp_offload" else "device",
            }
        )
    return pd.DataFrame(rows).set_index("rung")


def fit_verdict(result: RunResult, device_budget: float) -> Verdict:
    """Did the largest model of the fit table (the run's ``fit`` record, or its ``fit_error``) run, and did its
    memory stay within the budget?"""
    ms = result.ranks_as(schema.Rank)
    if any(m.fit is None and m.fit_error is None for m in ms):
        return Verdict(
            "ladder.fit",
            "info",
            "No largest model was run (fit_layers=0: not even one block fits the "
            f"budget of {device_budget / 1e6:.0f} MB per rank, or none was asked for).",
            {"budget": device_budget},
            result.label,
        )
    first = ms[0].fit or ms[0].fit_error
    assert first is not None  # one or the other, checked above
    rung, layers = first.rung, first.layers
    s = dataclasses.replace(Setup.from_result(ms[0]), layers=layers)
    shapes = s.shapes()
    model = max(rank_memory(s, rung, r, shapes).device_peak for r in range(s.world))
    failed = [m.fit_error.error for m in ms if m.fit_error is not None]
    if failed:
        return Verdict(
            "ladder.fit",
            "fail",
            f"{LABELS[rung]} with {layers} blocks did not fit: {failed[0]}. The "
            f"model predicted a peak of {model / 1e9:.1f} GB per rank within the budget of "
            f"{device_budget / 1e9:.1f} GB: it left out more than the margin.",
            {"rung": rung, "layers": layers, "model_peak": model, "budget": device_budget},
            result.label,
        )
    records = [m.fit for m in ms if m.fit is not None]  # every rank's, none failed
    counted = [g.state for g in records]
    run = _FitRun(
        rung=rung,
        layers=layers,
        parameters=sum(math.prod(sh) for _, sh in shapes),
        model_peak=model,
        state_exact=counted == [rank_memory(s, rung, r, shapes).model_state for r in range(s.world)],
    )
    numbers: dict[str, object] = {
        "rung": rung,
        "layers": layers,
        "next_tried": False,
        "parameters": run.parameters,
        "budget": device_budget,
        "model_peak": model,
        "state_exact": run.state_exact,
    }
    peaks = [g.peak_allocated for g in records]
    if all(p is not None for p in peaks):
        peak = max(p for p in peaks if p is not None)
        numbers |= {"peak": peak, "gap": peak / model - 1}
    status, text = _ran(peaks, run, device_budget)
    return Verdict("ladder.fit", status, text, numbers, result.label)


@dataclasses.dataclass(frozen=True)
class _FitRun:
    """The largest model the run trained, as :func:`fit_verdict` judges it: which, how big, the model's peak for it,
    and whether every rank's counted model state equals the model's."""

    rung: str
    layers: int
    parameters: int
    model_peak: int
    state_exact: bool


def _ran(peaks: Sequence[int | None], run: _FitRun, device_budget: float) -> tuple[str, str]:
    """:func:`fit_verdict`'s status and words for a largest model that ran on every rank, with these ``peaks`` (None:
    no device allocator to read, a CPU run)."""
    rung, layers, model, exact = run.rung, run.layers, run.model_peak, run.state_exact
    if any(p is None for p in peaks):
        return "pass" if exact else "fail", (
            f"{LABELS[rung]} with {layers} blocks ({run.parameters / 1e6:.2f} M parameters; {layers + 1} "
            "not tried) ran; "
            f"its counted model state {'equals' if exact else 'differs from'} the model. On the CPU there is "
            f"no device memory to run out of: that it fits the budget of {device_budget / 1e6:.0f} MB "
            f"per rank is the model's arithmetic ({model / 1e6:.1f} MB predicted)."
        )
    peak = max(p for p in peaks if p is not None)
    if device_budget < SMALL_FOR_A_GPU:
        return "info" if exact else "fail", (
            f"{LABELS[rung]} with {layers} blocks ({run.parameters / 1e6:.2f} M parameters) ran with a "
            f"peak of {peak / 1e6:.0f} MB per rank against the small profile's budget of "
            f"{device_budget / 1e6:.0f} MB, which is sized for the CPU: on a GPU the fixed allocations "
            "(cuBLAS workspaces and the like) outweigh it, so the fit is checked only at the lesson sizes. "
            f"Counted model state {'equals' if exact else 'differs from'} the model."
        )
    return "pass" if peak <= device_budget and exact else "fail", (
        f"{LABELS[rung]} with {layers} blocks ({run.parameters / 1e9:.2f} B parameters; {layers + 1} not "
        "tried: that it is the largest is the model's prediction within its margins) ran with a "
        f"peak of {peak / 1e9:.1f} GB per rank ({peak / model - 1:+.0%} against the model's "
        f"{model / 1e9:.1f} GB), {'within' if peak <= device_budget else 'over'} the budget of "
        f"{device_budget / 1e9:.1f} GB; counted model state {'equals' if exact else 'differs from'} the model."
    )
