"""Notebook 08's results as tables and verdicts: memory counted against the model, loss against the
one-process reference, bytes counted against the formula, step times and the link, the checkpoint, the
largest model. The arithmetic behind them is :mod:`nvtutorial.report.ladder_model`; its main names are
importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .ladder_model import (
    FSDP,
    LABELS,
    LAYER_LIMIT,
    RUNGS,
    TP_SPLIT,
    RankMemory,
    Setup,
    activations,
    chunk_rows,
    largest,
    model_state,
    rank_memory,
    sent_per_step,
    tp_dim,
    with_layers,
)
from .verdict import Verdict, compare, comparison_verdict

__all__ = ["FSDP", "LABELS", "LAYER_LIMIT", "RUNGS", "TP_SPLIT", "RankMemory", "Setup", "activations", "chunk_rows",
           "largest", "model_state", "rank_memory", "sent_per_step", "tp_dim", "with_layers"]


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def memory_table(s: Setup, rungs: Sequence[str] = RUNGS):  # -> pandas.DataFrame
    """The model for every rung and rank, in MB (10^6 bytes)."""
    import pandas as pd

    shapes = s.shapes()
    rows = []
    for rung in rungs:
        for rank in range(s.world):
            m = rank_memory(s, rung, rank, shapes)
            rows.append({"rung": LABELS[rung], "rank": rank, "params": m.params / 1e6, "grads": m.grads / 1e6,
                         "optimizer": m.optimizer / 1e6, "model state": m.model_state / 1e6,
                         "activations": m.activations / 1e6, "transient (est.)": m.transient / 1e6,
                         "device peak (est.)": m.device_peak / 1e6, "state on": "host" if m.on_host else "device"})
    return pd.DataFrame(rows).set_index(["rung", "rank"]).round(3)


# --------------------------------------------------------------------------------------------
# The run's results


def _where(result: Any) -> str:
    return getattr(result, "label", str(result))


def _rungs(result: Any) -> list[str]:
    return [g["rung"] for g in result.ranks[0]["rungs"]]


def rung_record(result: Any, rank: int, rung: str) -> dict[str, Any]:
    """What ``rank`` reported for ``rung``: losses, held bytes, collectives, step times..."""
    for g in result.ranks[rank]["rungs"]:
        if g["rung"] == rung:
            return g
    raise KeyError(f"the run has no rung {rung!r}; it ran {', '.join(_rungs(result))}")


def counted_state(result: Any, rung: str, rank: int) -> int:
    """Bytes of parameters, gradients and optimizer state ``rank`` held under ``rung``, as the run counted them."""
    held = rung_record(result, rank, rung)["held"]
    return held["params"] + held["grads"] + held["optimizer"]


def loss_table(result: Any):  # -> pandas.DataFrame
    """The loss of the global batch at every step: the one-process reference and every rung (rank 0's view)."""
    import pandas as pd

    m = result.ranks[0]
    table = {"one process": m["reference"]} if "reference" in m else {}
    table |= {LABELS[g["rung"]]: g["losses"] for g in m["rungs"]}
    frame = pd.DataFrame(table)
    frame.index.name = "step"
    return frame


def loss_verdict(result: Any, tolerance: float) -> Verdict:
    """Pass when every rung's loss, at every step and on every rank, is within ``tolerance`` of the reference."""
    diffs = {}
    for rung in _rungs(result):
        diffs[rung] = max(abs(a - b) for r in range(len(result.ranks))
                          for a, b in zip(rung_record(result, r, rung)["losses"], result.ranks[r]["reference"]))
    worst = max(diffs, key=diffs.get)
    steps = len(result.ranks[0]["reference"])
    ok = all(v <= tolerance for v in diffs.values())
    text = (f"Every rung trained like the one-process reference: over {steps} steps the largest loss difference "
            f"was {diffs[worst]:.2g} ({LABELS[worst]}), within the tolerance of {tolerance:g}." if ok else
            f"{', '.join(LABELS[r] for r, v in diffs.items() if v > tolerance)} left the reference by more than "
            f"{tolerance:g} (largest: {diffs[worst]:.2g}, {LABELS[worst]}): that rung computes something else.")
    return Verdict("ladder.loss", "pass" if ok else "fail", text, {"max_abs_diff": diffs, "tolerance": tolerance},
                   _where(result))


def memory_check_table(result: Any):  # -> pandas.DataFrame
    """Per rung and rank: the counted bytes of parameters, gradients and optimizer state next to the model's
    (MB); on a GPU also the memory allocated after a step, what the forward pass added, the peak of the
    timed steps and the model's estimate of that peak."""
    import pandas as pd

    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    rows = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            g, m = rung_record(result, rank, rung), rank_memory(s, rung, rank, shapes)
            held = g["held"]
            row = {"rung": LABELS[rung], "rank": rank,
                   "counted state": (held["params"] + held["grads"] + held["optimizer"]) / 1e6,
                   "model state": m.model_state / 1e6,
                   "counted − model (bytes)": held["params"] + held["grads"] + held["optimizer"] - m.model_state}
            if "peak_allocated" in g:
                row |= {"allocated after a step": g["allocated_after_step"] / 1e6,
                        "forward added": g["forward_added"] / 1e6, "peak": g["peak_allocated"] / 1e6,
                        "peak (model)": m.device_peak / 1e6, "peak gap": g["peak_allocated"] / m.device_peak - 1}
            rows.append(row)
    return pd.DataFrame(rows).set_index(["rung", "rank"])


def memory_verdict(result: Any) -> Verdict:
    """Pass when the counted parameters, gradients and optimizer state equal the model's, byte for byte,
    for every rung and rank."""
    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    wrong = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            held, m = rung_record(result, rank, rung)["held"], model_state(rung, shapes, s.world, rank)
            wrong += [f"{LABELS[rung]} rank {rank} {k}: counted {held[k]}, model {m[k]}" for k in m if held[k] != m[k]]
    n = len(_rungs(result)) * len(result.ranks)
    if wrong:
        return Verdict("ladder.memory", "fail", "The memory model is wrong: " + "; ".join(wrong[:4]),
                       {"mismatches": len(wrong), "checked": n}, _where(result))
    return Verdict("ladder.memory", "pass", f"For all {n} rung × rank pairs the bytes of parameters, gradients and "
                   "optimizer state the rank holds, counted tensor by tensor, equal the memory model exactly.",
                   {"mismatches": 0, "checked": n}, _where(result))


def peak_verdict(result: Any) -> Verdict:
    """How far the GPU's measured peak is from the model's estimate, per rung (information: the estimate
    leaves out the allocator's rounding and library workspaces)."""
    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    gaps = {}
    for rung in _rungs(result):
        peaks = [rung_record(result, r, rung).get("peak_allocated") for r in range(len(result.ranks))]
        if None in peaks:
            return Verdict("ladder.peak", "info", "No peak to compare: on the CPU there is no device allocator to "
                           "read; the model state above is the part counted exactly.", {}, _where(result))
        model = max(rank_memory(s, rung, r, shapes).device_peak for r in range(len(result.ranks)))
        gaps[rung] = max(peaks) / model - 1
    worst = max(gaps, key=lambda r: abs(gaps[r]))
    text = (f"Measured peaks were between {min(gaps.values()):+.0%} and {max(gaps.values()):+.0%} of the model's "
            f"estimate (largest gap: {LABELS[worst]}).")
    return Verdict("ladder.peak", "info", text, {"gap": gaps}, _where(result))


def bytes_table(result: Any):  # -> pandas.DataFrame
    """Per rung and rank: bytes sent per step counted from the collectives, from the formula, relative to DDP,
    and (GPU) NVML's NVLink TX bytes per step with their ratio to the counted bytes. MB."""
    import pandas as pd

    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    ddp = sum(sent_per_step(s, "ddp", 0, shapes).values())
    rows = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            g = rung_record(result, rank, rung)
            formula = sum(sent_per_step(s, rung, rank, shapes).values())
            tx = g.get("nvlink_tx_bytes_per_step")
            rows.append({"rung": LABELS[rung], "rank": rank,
                         "collectives": ", ".join(f"{k} ×{int(v['calls'])}" for k, v in g["collectives"].items()),
                         "counted": g["sent_per_step"] / 1e6, "formula": formula / 1e6, "× DDP": formula / ddp,
                         "NVLink TX (NVML)": tx / 1e6 if tx is not None else None,
                         "NVML ÷ counted": tx / g["sent_per_step"] if tx is not None and g["sent_per_step"] else None})
    return pd.DataFrame(rows).set_index(["rung", "rank"])


def bytes_verdict(result: Any) -> Verdict:
    """Pass when the bytes counted from the collectives of a step equal the formula for every rung and rank."""
    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    off = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            counted, formula = rung_record(result, rank, rung)["sent_per_step"], sum(sent_per_step(s, rung, rank, shapes).values())
            if not math.isclose(counted, formula, rel_tol=1e-9, abs_tol=0.5):
                off.append(f"{LABELS[rung]} rank {rank}: counted {counted:.0f}, formula {formula:.0f}")
    factors = {r: sum(sent_per_step(s, r, 0, shapes).values()) / sum(sent_per_step(s, "ddp", 0, shapes).values())
               for r in _rungs(result)}
    if off:
        return Verdict("ladder.bytes", "fail", "The formula misses collectives: " + "; ".join(off[:4]),
                       {"factors": factors}, _where(result))
    text = ("The collectives of one step sent exactly the bytes the formula gives, on every rank; relative to DDP: "
            + ", ".join(f"{LABELS[r]} {f:.2f}×" for r, f in factors.items()) + ".")
    return Verdict("ladder.bytes", "pass", text, {"factors": factors}, _where(result))


def step_times(result: Any, rung: str) -> list[float]:
    """Seconds per step of each timed repeat, the slower rank's (a synchronous step waits for it)."""
    per_rank = [rung_record(result, r, rung)["step_s"] for r in range(len(result.ranks))]
    return [max(values) for values in zip(*per_rank)]


def time_table(result: Any, traces_of: Any = None):  # -> pandas.DataFrame
    """Per rung: the median step time and its spread; with ``traces_of`` (a function from a trace file to a
    ``traces.Split``), the communication time, and the part of it no compute hid, per step."""
    import pandas as pd

    rows = []
    for rung in _rungs(result):
        times = step_times(result, rung)
        row = {"rung": LABELS[rung], "step (ms)": 1e3 * statistics.median(times),
               "spread": (max(times) - min(times)) / statistics.median(times)}
        if traces_of is not None and rung_record(result, 0, rung).get("trace"):
            splits = [traces_of(Path(result.run_dir) / rung_record(result, r, rung)["trace"]) for r in range(len(result.ranks))]
            row |= {"traced step (ms)": max(x.step_ms for x in splits), "communication (ms)": max(x.comm_ms for x in splits),
                    "exposed (ms)": max(x.exposed_ms for x in splits),
                    "exposed share": max(x.exposed_share for x in splits)}
        rows.append(row)
    return pd.DataFrame(rows).set_index("rung")


def link_comparisons(direct: Any, staged: Any) -> dict[str, Any]:
    """Per rung: step times over the direct link against host-staged (``NCCL_P2P_DISABLE=1``), by
    :func:`~nvtutorial.report.verdict.compare`."""
    return {rung: compare(step_times(direct, rung), step_times(staged, rung)) for rung in _rungs(direct)
            if rung in _rungs(staged)}


def link_verdicts(direct: Any, staged: Any) -> list[Verdict]:
    """One verdict per rung: how much slower its step became without the direct GPU-to-GPU path."""
    out = []
    where = f"{_where(direct)}; host-staged: NCCL_P2P_DISABLE=1"
    for rung, c in link_comparisons(direct, staged).items():
        text = c.describe("s", f"{LABELS[rung]}, direct link → host-staged")
        out.append(comparison_verdict(f"ladder.link.{rung}", c, text, where, rung=rung))
    return out


def needs_link_verdict(direct: Any, staged: Any) -> Verdict:
    """Which rung lost the most when the direct link was taken away (information for the summary)."""
    comps = link_comparisons(direct, staged)
    worst = max(comps, key=lambda r: comps[r].ratio)
    least = min(comps, key=lambda r: comps[r].ratio)
    text = (f"Without the direct link {LABELS[worst]} slowed down most ({comps[worst].ratio:.2f}× its step time, "
            f"{comps[worst].status}), {LABELS[least]} least ({comps[least].ratio:.2f}×, {comps[least].status}).")
    return Verdict("ladder.link", "info", text, {"ratio": {r: c.ratio for r, c in comps.items()},
                                                 "status": {r: c.status for r, c in comps.items()}},
                   f"{_where(direct)}; host-staged: NCCL_P2P_DISABLE=1")


def checkpoint_verdict(result: Any) -> Verdict:
    """Pass when the resumed run repeats the uninterrupted one and both loads give the saved weights exactly."""
    c = result.ranks[0]["checkpoint"]
    same = c["continued"] == c["resumed"]
    exact = c["resume_max_weight_diff"] == 0 and c["single_process_max_weight_diff"] == 0
    numbers = {k: c[k] for k in ("resume_max_weight_diff", "single_process_max_weight_diff")}
    numbers["max_loss_diff"] = max(abs(a - b) for a, b in zip(c["continued"], c["resumed"]))
    if same and exact:
        return Verdict("ladder.checkpoint", "pass", "The sharded checkpoint resumed exactly: the reloaded shards equal "
                       "the saved weights bit for bit, the resumed steps repeat the uninterrupted losses exactly, and "
                       "the single-process model loaded from it holds the same weights.", numbers, _where(result))
    return Verdict("ladder.checkpoint", "fail", "The checkpoint did not round-trip: "
                   f"largest weight difference {numbers['resume_max_weight_diff']} after resuming, "
                   f"{numbers['single_process_max_weight_diff']} in one process; largest loss difference "
                   f"{numbers['max_loss_diff']}.", numbers, _where(result))


# --------------------------------------------------------------------------------------------
# How big can it get


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
        rows.append({"rung": rung, "label": LABELS[rung], "layers": layers,
                     "parameters (M)": sum(_numel(sh) for _, sh in shapes) / 1e6 if layers else 0.0,
                     "device peak (MB, model)": peak / 1e6 if peak else None,
                     "model state per rank (MB)": max(sum(model_state(rung, shapes, s.world, r).values())
                                                      for r in range(s.world)) / 1e6 if layers else None,
                     "state in": "host" if rung == "fsdp_offload" else "device"})
    return pd.DataFrame(rows).set_index("rung")


def fit_verdict(result: Any, device_budget: float) -> Verdict:
    """Did the largest model of the fit table (the run's ``fit`` record) run, and did its memory stay within
    the budget?"""
    if any("fit" not in m for m in result.ranks):
        return Verdict("ladder.fit", "info", "No largest model was run (fit_layers=0: not even one block fits the "
                       f"budget of {device_budget / 1e6:.0f} MB per rank, or none was asked for).",
                       {"budget": device_budget}, _where(result))
    records = [m["fit"] for m in result.ranks]
    rung, layers = records[0]["rung"], records[0]["layers"]
    s = dataclasses.replace(Setup.from_result(result.ranks[0]), layers=layers)
    shapes = s.shapes()
    model = max(rank_memory(s, rung, r, shapes).device_peak for r in range(s.world))
    failed = [g["error"] for g in records if "error" in g]
    if failed:
        return Verdict("ladder.fit", "fail", f"{LABELS[rung]} with {layers} blocks did not fit: {failed[0]}. The "
                       f"model predicted a peak of {model / 1e9:.1f} GB per rank within the budget of "
                       f"{device_budget / 1e9:.1f} GB: it left out more than the margin.",
                       {"rung": rung, "layers": layers, "model_peak": model, "budget": device_budget}, _where(result))
    counted = [sum(g["held"][k] for k in ("params", "grads", "optimizer")) for g in records]
    exact = counted == [rank_memory(s, rung, r, shapes).model_state for r in range(s.world)]
    numbers = {"rung": rung, "layers": layers, "parameters": sum(_numel(sh) for _, sh in shapes),
               "budget": device_budget, "model_peak": model, "state_exact": exact}
    peaks = [g.get("peak_allocated") for g in records]
    if None in peaks:
        return Verdict("ladder.fit", "pass" if exact else "fail",
                       f"{LABELS[rung]} with {layers} blocks ({numbers['parameters'] / 1e6:.2f} M parameters) ran; "
                       f"its counted model state {'equals' if exact else 'differs from'} the model. On the CPU there is "
                       f"no device memory to run out of: that it fits the budget of {device_budget / 1e6:.0f} MB "
                       f"per rank is the model's arithmetic ({model / 1e6:.1f} MB predicted).", numbers, _where(result))
    peak = max(peaks)
    numbers |= {"peak": peak, "gap": peak / model - 1}
    ok = peak <= device_budget and exact
    return Verdict("ladder.fit", "pass" if ok else "fail",
                   f"{LABELS[rung]} with {layers} blocks ({numbers['parameters'] / 1e9:.2f} B parameters) ran with a "
                   f"peak of {peak / 1e9:.1f} GB per rank ({numbers['gap']:+.0%} against the model's "
                   f"{model / 1e9:.1f} GB), {'within' if peak <= device_budget else 'over'} the budget of "
                   f"{device_budget / 1e9:.1f} GB; counted model state {'equals' if exact else 'differs from'} the model.",
                   numbers, _where(result))
