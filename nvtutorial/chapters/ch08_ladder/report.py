"""Notebook 08's results as tables and verdicts: memory counted against the model, step-0 gradients and losses
against the one-process reference, the recorded collectives (costed as a ring) against the byte model, step times and
the link, the checkpoint, the largest model, and the grading of the notebook's two predictions. The arithmetic behind
them is :mod:`nvtutorial.chapters.ch08_ladder.report_model`, the largest model's table and verdict
:mod:`nvtutorial.chapters.ch08_ladder.report_fit`; their main names are importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from nvtutorial.chapters.ch08_ladder import schema
from nvtutorial.chapters.ch08_ladder.report_fit import SMALL_FOR_A_GPU, fit_table, fit_verdict
from nvtutorial.chapters.ch08_ladder.report_model import (
    FSDP,
    LAYER_LIMIT,
    RUNGS,
    TP_SPLIT,
    RankMemory,
    Setup,
    activations,
    chunk_rows,
    freed_grads,
    kept_gathered,
    largest,
    model_state,
    rank_memory,
    sent_per_step,
    tp_dim,
    with_layers,
)
from nvtutorial.chapters.ch08_ladder.schema import LABELS
from nvtutorial.report import predict
from nvtutorial.report.verdict import Comparison, Verdict, aa_gap, compare, comparison_verdict
from nvtutorial.results import RunResult

__all__ = [
    "FSDP",
    "LABELS",
    "LAYER_LIMIT",
    "RUNGS",
    "TP_SPLIT",
    "RankMemory",
    "Setup",
    "activations",
    "chunk_rows",
    "fit_table",
    "fit_verdict",
    "largest",
    "model_state",
    "rank_memory",
    "sent_per_step",
    "tp_dim",
    "with_layers",
]


T = TypeVar("T")


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
            rows.append(
                {
                    "rung": LABELS[rung],
                    "rank": rank,
                    "params": m.params / 1e6,
                    "grads": m.grads / 1e6,
                    "optimizer": m.optimizer / 1e6,
                    "model state": m.model_state / 1e6,
                    "activations": m.activations / 1e6,
                    "transient (est.)": m.transient / 1e6,
                    "device peak (est.)": m.device_peak / 1e6,
                    "state on": "host" if m.on_host else "device",
                }
            )
    return pd.DataFrame(rows).set_index(["rung", "rank"]).round(3)


# --------------------------------------------------------------------------------------------
# The run's results


def _where(result: RunResult) -> str:
    return result.label


def ranks(result: RunResult) -> list[schema.Rank]:
    """Every rank's metrics of a run of the ``ladder`` workload, typed (:class:`~.schema.Rank`)."""
    return result.ranks_as(schema.Rank)


def _setup(result: RunResult) -> tuple[list[schema.Rank], Setup, list[tuple[str, tuple[int, ...]]]]:
    """Every rank's metrics, the run's sizes and its parameters' shapes."""
    ms = ranks(result)
    s = Setup.from_result(ms[0])
    return ms, s, s.shapes()


def _rungs(ms: Sequence[schema.Rank]) -> list[str]:
    return [g.rung for g in ms[0].rungs]


def reference_losses(m: schema.Rank) -> tuple[float, ...]:
    """The one-process reference's losses a rank trained (an error where it trained none)."""
    if m.reference is None:
        raise ValueError(f"rank {m.rank} trained no one-process reference (reference=false): no loss to compare with")
    return m.reference


def rung_record(result: RunResult, rank: int, rung: str) -> schema.Rung:
    """What ``rank`` reported for ``rung``: losses, held bytes, collectives, step times..."""
    return ranks(result)[rank].rung(rung)


def counted_state(result: RunResult, rung: str, rank: int) -> int:
    """Bytes of parameters, gradients and optimizer state ``rank`` held under ``rung``, as the run counted them."""
    return rung_record(result, rank, rung).state


def loss_table(result: RunResult):  # -> pandas.DataFrame
    """The loss of the global batch at every step: the one-process reference and every rung (rank 0's view)."""
    import pandas as pd

    m = ranks(result)[0]
    table = {"one process": list(m.reference)} if m.reference is not None else {}
    table |= {LABELS[g.rung]: list(g.losses) for g in m.rungs}
    frame = pd.DataFrame(table)
    frame.index.name = "step"
    return frame


def loss_verdict(result: RunResult, tolerance: float) -> Verdict:
    """Pass when every rung's loss, at every step and on every rank, is within ``tolerance`` of the reference."""
    ms = ranks(result)
    diffs = {}
    for rung in _rungs(ms):
        diffs[rung] = max(abs(a - b) for m in ms for a, b in zip(m.rung(rung).losses, reference_losses(m)))
    worst = max(diffs, key=lambda r: diffs[r])
    steps = len(reference_losses(ms[0]))
    ok = all(v <= tolerance for v in diffs.values())
    text = (
        f"Every rung's loss followed the one-process reference: over {steps} steps the largest loss difference "
        f"was {diffs[worst]:.2g} ({LABELS[worst]}), within the tolerance of {tolerance:g}. With Adam the loss "
        "cannot show a wrong gradient scale; the step-0 gradients are compared for that."
        if ok
        else f"{', '.join(LABELS[r] for r, v in diffs.items() if v > tolerance)} left the reference by more than "
        f"{tolerance:g} (largest: {diffs[worst]:.2g}, {LABELS[worst]}): that rung computes something else."
    )
    return Verdict(
        "ladder.loss", "pass" if ok else "fail", text, {"max_abs_diff": diffs, "tolerance": tolerance}, _where(result)
    )


def gradient_verdict(result: RunResult, tolerance: float) -> Verdict:
    """Pass when, for every rung and rank, every parameter's whole gradient of step 0 (before any update) is within
    ``tolerance`` of the one-process reference's, relative to the largest reference value of its tensor. A summed
    instead of averaged gradient is off by 1.0 (norm ratio 2), one divided twice by 0.5: on two ranks or more; in a
    world of one a sum is a mean, and the check says what it does check there (the rung's wrapping, recomputation)."""
    ms = ranks(result)
    diffs: dict[str, float] = {}
    norms: dict[str, float | None] = {}
    missing: list[str] = []
    for rung in _rungs(ms):
        checks = _every_rank([m.rung(rung).gradients for m in ms])
        if checks is None:
            return _unmeasured(
                "ladder.gradients", "No gradients compared: the run trained no one-process reference.", result
            )
        diffs[rung] = max(c.max_rel_diff for c in checks)
        norms[rung] = max((c.norm_ratio for c in checks), key=lambda x: abs(math.log(x)) if x else math.inf)
        missing += [f"{LABELS[rung]}: {n}" for c in checks for n in c.missing]
    numbers = {"max_rel_diff": diffs, "norm_ratio": norms, "tolerance": tolerance, "missing": missing}
    worst = max(diffs, key=lambda r: diffs[r])
    bad = [r for r, d in diffs.items() if d > tolerance]
    if missing:
        return Verdict(
            "ladder.gradients",
            "fail",
            f"Some parameters had no gradient at step 0: {', '.join(missing[:4])}.",
            numbers,
            _where(result),
        )
    if bad:
        return Verdict(
            "ladder.gradients",
            "fail",
            "The step-0 gradients of "
            + ", ".join(
                f"{LABELS[r]} (off by {diffs[r]:.2g} of the tensor's largest value, "
                f"norm {_ratio(norms[r])}× the reference's)"
                for r in bad
            )
            + f" differ from one process's beyond the tolerance of {tolerance:g}: that rung computes "
            "another gradient (a norm ratio of 2 or 0.5 is a sum or a double average).",
            numbers,
            _where(result),
        )
    return Verdict(
        "ladder.gradients",
        "pass",
        f"At step 0, before any update, every parameter's whole gradient on "
        f"every rung and rank equals the one-process gradient to {diffs[worst]:.2g} of its tensor's largest "
        f"value (worst: {LABELS[worst]}; tolerance {tolerance:g}); the gradients' norms agree to "
        f"{max(abs(x - 1) for x in norms.values() if x is not None):.1g}. "
        + (
            "Every rung averages its gradients like one process on the whole batch."
            if len(ms) > 1
            else "A world of one: this checks each rung's wrapping and recomputation, not its averaging (with one "
            "rank a sum equals a mean)."
        ),
        numbers,
        _where(result),
    )


def _every_rank(found: Sequence[T | None]) -> list[T] | None:
    """What every rank recorded, or ``None`` where one rank recorded nothing (the run did not measure it)."""
    values = [v for v in found if v is not None]
    return values if len(values) == len(found) else None


def _unmeasured(name: str, text: str, result: RunResult) -> Verdict:
    """The ``info`` verdict of a check the run gave nothing to judge by."""
    return Verdict(name, "info", text, {}, _where(result))


def _ratio(x: float | None) -> str:
    """A norm ratio as the verdicts print it (None: the reference's gradients were all zero)."""
    return f"{x:.3g}" if x is not None else "n/a"


ZERO1_WRONG = {
    "DDP's 16 B per parameter (nothing sharded)": 16,
    "ZeRO-2's 10 B (gradients sharded too)": 10,
    "FSDP's 8 B (everything sharded)": 8,
}
"""The usual wrong answers to "what does rank 0 hold under ZeRO-1", as bytes per parameter, and what each assumes."""


def zero1_prediction(result: RunResult, prediction: float | None) -> Verdict:
    """Grade a prediction of rank 0's model state under ZeRO-1 (MB) against the run's count: right within 5 %
    (the answer is exact arithmetic), close within 25 %, so that none of :data:`ZERO1_WRONG` is right."""
    measured = counted_state(result, "zero1", 0) / 1e6
    return predict.grade_number(
        "ladder.predict.zero1",
        prediction,
        measured,
        unit="MB",
        where=_where(result),
        right_within=0.05,
        close_within=0.25,
        explanation="ZeRO-1 keeps the whole model and all of its gradients on every rank, as DDP does (8 bytes per "
        "parameter), and Adam's state only for the parameters a rank updates: about 4 + 4 + 8/2 = 12 bytes per "
        "parameter, three quarters of DDP. The shares are whole tensors, assigned largest first, so the two ranks "
        "differ a little (table below). The usual wrong answers: " + "; ".join(ZERO1_WRONG) + ".",
    )


LINK_CHOICES = {
    "a": "DDP (or ZeRO-1: DDP's all-reduce plus a broadcast)",
    "b": "ZeRO-3 on the GPU (FSDP2, with or without resharding and checkpointing)",
    "c": "tensor parallelism",
    "d": "ZeRO-3 with CPU offload",
}
"""The choices of the link prediction: which rung loses the most step time without the direct link."""
LINK_ANSWER = {
    "ddp": "a",
    "zero1": "a",
    "fsdp_zero2": "b",
    "fsdp_zero3": "b",
    "fsdp_checkpointing": "b",
    "tensor_parallel": "c",
    "fsdp_offload": "d",
}
"""The choice each rung belongs to (every rung of the ladder is one of the four)."""
LINK_EXPLANATION = (
    "NCCL_P2P_DISABLE=1 does more than take NVLink away: every NCCL byte then crosses each GPU's PCIe link and "
    "host memory (NCCL's SHM transport). The offload rung already streams its parameter shards host→device and "
    "its gradients device→host over that same PCIe link, so it shares it with NCCL: at the lesson sizes (gigabytes "
    "of copies per step) part of its slow-down can be contention rather than a need for NVLink. Among the others, "
    "DDP's all-reduce can hide under the backward pass; ZeRO-3 must gather each block before it runs; tensor "
    "parallelism waits for an all-reduce in every block, in both passes."
)


def link_prediction(
    direct: RunResult, staged: RunResult | None, direct_again: RunResult | None, prediction: str | None
) -> Verdict:
    """Grade which rung the learner expected to lose most without the direct link against
    :func:`needs_link_verdict`; ``info`` (ungraded) when there was no host-staged run, or when no rung slowed down
    beyond the noise (then there is no "most")."""
    if staged is None or direct_again is None:
        return Verdict(
            "ladder.predict.link",
            "info",
            "Ungraded: no link here (the host-staged run needs NCCL on GPUs). " + LINK_EXPLANATION,
            {"prediction": prediction},
            _where(direct),
        )
    comps = link_comparisons(direct, staged, direct_again)
    worst = _most_slowed(comps)
    where = f"{_where(direct)}; {LINK_WHERE}"
    if comps[worst].status != "slower":
        return Verdict(
            "ladder.predict.link",
            "info",
            f"Ungraded: no rung slowed down beyond the noise (the most: "
            f"{LABELS[worst]}, {comps[worst].ratio:.2f}×, {comps[worst].status}), "
            "so none lost the most. " + LINK_EXPLANATION,
            {"prediction": prediction, "worst": worst},
            where,
        )
    return predict.grade_choice(
        "ladder.predict.link",
        prediction,
        LINK_ANSWER[worst],
        LINK_CHOICES,
        where=where,
        explanation=f"({LABELS[worst]} slowed down most.) " + LINK_EXPLANATION,
    )


def memory_check_table(result: RunResult):  # -> pandas.DataFrame
    """Per rung and rank: the counted bytes of parameters, gradients and optimizer state next to the model's
    (MB); on a GPU also the memory allocated after a step, what the forward pass added, the peak of the
    timed steps and the model's estimate of that peak."""
    import pandas as pd

    ms, s, shapes = _setup(result)
    rows = []
    for rung in _rungs(ms):
        for rank, rm in enumerate(ms):
            g, m = rm.rung(rung), rank_memory(s, rung, rank, shapes)
            row: dict[str, str | int | float | None] = {
                "rung": LABELS[rung],
                "rank": rank,
                "counted state": g.state / 1e6,
                "model state": m.model_state / 1e6,
                "counted − model (bytes)": g.state - m.model_state,
            }
            if g.peak_allocated is not None:  # a GPU's allocator: the three are measured together
                row |= {
                    "allocated after a step": _mb(g.allocated_after_step),
                    "forward added": _mb(g.forward_added),
                    "peak": g.peak_allocated / 1e6,
                    "peak (model)": m.device_peak / 1e6,
                    "peak gap": g.peak_allocated / m.device_peak - 1,
                }
            rows.append(row)
    return pd.DataFrame(rows).set_index(["rung", "rank"])


def _mb(nbytes: float | None) -> float | None:
    return nbytes / 1e6 if nbytes is not None else None


def memory_verdict(result: RunResult) -> Verdict:
    """Pass when the counted parameters, gradients and optimizer state equal the model's, byte for byte,
    for every rung and rank."""
    ms, s, shapes = _setup(result)
    wrong = []
    for rung in _rungs(ms):
        for rank, rm in enumerate(ms):
            held, m = dataclasses.asdict(rm.rung(rung).held), model_state(rung, shapes, s.world, rank)
            wrong += [f"{LABELS[rung]} rank {rank} {k}: counted {held[k]}, model {m[k]}" for k in m if held[k] != m[k]]
    n = len(_rungs(ms)) * len(ms)
    if wrong:
        return Verdict(
            "ladder.memory",
            "fail",
            "The memory model is wrong: " + "; ".join(wrong[:4]),
            {"mismatches": len(wrong), "checked": n},
            _where(result),
        )
    return Verdict(
        "ladder.memory",
        "pass",
        f"For all {n} rung × rank pairs the bytes of parameters, gradients and "
        "optimizer state the rank holds, counted tensor by tensor, equal the memory model exactly.",
        {"mismatches": 0, "checked": n},
        _where(result),
    )


def peak_verdict(result: RunResult) -> Verdict:
    """How far the GPU's measured peak is from the model's estimate, per rung, and for the largest gap the estimate's
    parts next to the peak's (information: the transient part is an estimate, see
    :mod:`~nvtutorial.chapters.ch08_ladder.report_model`)."""
    ms, s, shapes = _setup(result)
    gaps: dict[str, float] = {}
    for rung in _rungs(ms):
        peaks = _every_rank([m.rung(rung).peak_allocated for m in ms])
        if peaks is None:
            return _unmeasured(
                "ladder.peak",
                "No peak to compare: on the CPU there is no device allocator to "
                "read; the model state above is the part counted exactly.",
                result,
            )
        model = max(rank_memory(s, rung, r, shapes).device_peak for r in range(len(ms)))
        gaps[rung] = max(peaks) / model - 1
    worst = max(gaps, key=lambda r: abs(gaps[r]))
    text = (
        f"Measured peaks were between {min(gaps.values()):+.0%} and {max(gaps.values()):+.0%} of the model's "
        f"estimate (largest gap: {LABELS[worst]}). " + peak_parts(result, worst)
    )
    if _small_for_a_gpu(s):
        text += (
            " At these small sizes the gap says little: the GPU's fixed allocations (cuBLAS workspaces and "
            "the like, which the model leaves out) outweigh a model this small; the lesson sizes compare "
            "the model with a peak it dominates."
        )
    return Verdict("ladder.peak", "info", text, {"gap": gaps, "small": _small_for_a_gpu(s)}, _where(result))


def peak_parts(result: RunResult, rung: str) -> str:
    """The estimate's parts next to the measured peak of ``rung`` (its highest rank), and where the gap lies: the
    forward pass (``forward_added`` against activations + parameters kept gathered), the gradients the estimate
    holds but the step frees before its forward pass, or the rest of the peak above what that pass started with
    and added."""
    ms, s, shapes = _setup(result)
    rank = max(range(len(ms)), key=lambda r: ms[r].rung(rung).peak_allocated or 0)
    g, m = ms[rank].rung(rung), rank_memory(s, rung, rank, shapes)
    state = 0 if m.on_host else m.model_state
    text = (
        f"Its peak, {_mb(g.peak_allocated) or 0:,.0f} MB, against the estimate's {m.device_peak / 1e6:,.0f}: model "
        f"state {state / 1e6:,.0f} + activations {m.activations / 1e6:,.0f} + transient {m.transient / 1e6:,.0f}."
    )
    if g.forward_added is None or g.peak_allocated is None:
        return text
    return text + _forward_and_rest(g.peak_allocated - state, g.forward_added, m, kept_gathered(rung, shapes))


def _forward_and_rest(above_state: int, forward: int, m: RankMemory, kept: int) -> str:
    """The peak above model state split into the forward pass and the rest, each against the estimate's part, and
    where the gap lies (the largest part of it)."""
    freed = freed_grads(m)
    rest = above_state + freed - forward
    gaps = {
        "the rest, the transient part": rest - (m.transient - kept),
        "the forward pass": forward - m.activations - kept,
        "the gradients the estimate holds": -freed,
    }
    where = max(gaps, key=lambda k: abs(gaps[k]))
    gathered = f" + {kept / 1e6:,.0f} MB of parameters kept gathered" if kept else ""
    less = ": the transient less the parameters kept gathered" if kept else ""
    return (
        f" The forward pass added {forward / 1e6:,.0f} MB (estimate {(m.activations + kept) / 1e6:,.0f}: "
        f"activations{gathered}){_rest_words(freed)} {rest / 1e6:,.0f} MB (estimate "
        f"{(m.transient - kept) / 1e6:,.0f}{less}): the gap lies in {where}."
    )


def _rest_words(freed: int) -> str:
    """What the rest of the peak is taken over: state and forward, or, where the step frees ``freed`` bytes of
    gradients before its forward pass, what that pass started with (state less them) and added."""
    if not freed:
        return ", the rest of the peak above state and forward was"
    return (
        f". The estimate holds all {freed / 1e6:,.0f} MB of gradients at the peak, which the step frees"
        " (zero_grad(set_to_none=True)) before its forward pass; with them out, the rest of the peak above what"
        " the forward pass started with and added was"
    )


def _small_for_a_gpu(s: Setup) -> bool:
    return 4 * sum(_numel(shape) for _, shape in s.shapes()) < SMALL_FOR_A_GPU  # fp32 parameters


def bytes_table(result: RunResult):  # -> pandas.DataFrame
    """Per rung and rank: the collectives recorded in one step costed as a ring (what this rank would send),
    the model's bytes, relative to DDP, and (GPU) NVML's NVLink TX bytes per step, the one measured column,
    with their ratio to the ring cost. MB."""
    import pandas as pd

    ms, s, shapes = _setup(result)
    ddp = sum(sent_per_step(s, "ddp", 0, shapes).values())
    rows = []
    for rung in _rungs(ms):
        for rank, m in enumerate(ms):
            g = m.rung(rung)
            formula = sum(sent_per_step(s, rung, rank, shapes).values())
            tx = g.nvlink_tx_bytes_per_step
            rows.append(
                {
                    "rung": LABELS[rung],
                    "rank": rank,
                    "collectives": ", ".join(f"{k} ×{int(v.calls)}" for k, v in g.collectives.items()),
                    "recorded (ring cost)": g.sent_per_step / 1e6,
                    "model": formula / 1e6,
                    "× DDP": formula / ddp,
                    "NVLink TX (NVML)": tx / 1e6 if tx is not None else None,
                    "NVML ÷ ring cost": tx / g.sent_per_step if tx is not None and g.sent_per_step else None,
                }
            )
    return pd.DataFrame(rows).set_index(["rung", "rank"])


def bytes_verdict(result: RunResult) -> Verdict:
    """Pass when the collectives recorded in one step, costed as a ring, equal the model's bytes for every rung and
    rank: a check of which collectives ran and on what sizes, not a measurement of the traffic."""
    ms, s, shapes = _setup(result)
    off = []
    for rung in _rungs(ms):
        for rank, m in enumerate(ms):
            counted, formula = m.rung(rung).sent_per_step, sum(sent_per_step(s, rung, rank, shapes).values())
            if not math.isclose(counted, formula, rel_tol=1e-9, abs_tol=0.5):
                off.append(f"{LABELS[rung]} rank {rank}: counted {counted:.0f}, formula {formula:.0f}")
    factors = {
        r: sum(sent_per_step(s, r, 0, shapes).values()) / sum(sent_per_step(s, "ddp", 0, shapes).values())
        for r in _rungs(ms)
    }
    root_share = root_params_share(shapes)
    if off:
        return Verdict(
            "ladder.bytes",
            "fail",
            "The recorded collectives differ from the model's list: "
            + "; ".join(off[:4])
            + (
                " (on a GPU, collectives issued from autograd's threads may also escape the recording)"
                if result.env is not None and result.env.is_gpu
                else ""
            ),
            {"factors": factors, "mismatches": len(off), "root_share": root_share},
            _where(result),
        )
    text = (
        "The collectives issued in one step (kind, count and tensor size, recorded as they were called) match the "
        "model on every rank. Costed as a ring (the model's byte count, not a traffic measurement), they amount "
        "to, relative to DDP: " + ", ".join(f"{LABELS[r]} {f:.2f}×" for r, f in factors.items()) + ". "
        f"The root (embeddings, final norm, head), which ZeRO-3 gathers only once, holds {root_share:.0%} of this "
        "model's parameters."
    )
    return Verdict(
        "ladder.bytes", "pass", text, {"factors": factors, "mismatches": 0, "root_share": root_share}, _where(result)
    )


def root_params_share(shapes: Sequence[tuple[str, Sequence[int]]]) -> float:
    """The share of the parameters outside the blocks (embeddings, final norm, head): FSDP2's root unit, which ZeRO-3
    gathers once per step where it gathers every block twice; costed as a ring, its bytes are ``1 + (1 − share) / 2``
    times DDP's, whatever the number of ranks."""
    total = sum(_numel(sh) for _, sh in shapes)
    return sum(_numel(sh) for n, sh in shapes if not n.startswith("blocks.")) / total


def step_times(result: RunResult, rung: str) -> list[float]:
    """Seconds per step of each timed repeat, the slower rank's: a synchronous step ends when both ranks have
    finished it, so the step time is the slower rank's (not a rank's communication time, see :func:`comm_table`)."""
    return _step_times(ranks(result), rung)


def _step_times(ms: Sequence[schema.Rank], rung: str) -> list[float]:
    return [max(values) for values in zip(*(m.rung(rung).step_s for m in ms))]


def time_table(result: RunResult):  # -> pandas.DataFrame
    """Per rung: the median step time over the timed repeats, their spread and how many there were."""
    import pandas as pd

    ms = ranks(result)
    rows = []
    for rung in _rungs(ms):
        times = _step_times(ms, rung)
        rows.append(
            {
                "rung": LABELS[rung],
                "step (ms)": 1e3 * statistics.median(times),
                "spread": (max(times) - min(times)) / statistics.median(times),
                "repeats": len(times),
            }
        )
    return pd.DataFrame(rows).set_index("rung")


def traced(result: RunResult) -> bool:
    """Whether the run traced its rungs with ``torch.profiler`` (``profile_steps``), so that :func:`comm_table` can
    read them."""
    ms = ranks(result)
    return all(m.rung(rung).trace for rung in _rungs(ms) for m in ms)


def _trace(result: RunResult, m: schema.Rank, rung: str) -> Path:
    trace = m.rung(rung).trace
    if not trace:
        raise ValueError(f"rank {m.rank} traced no {rung} (profile_steps=0): no communication to split")
    return Path(result.run_dir) / trace


def comm_table(result: RunResult):  # -> pandas.DataFrame
    """Per rung and rank, from the ranks' traces paired on the host's one clock (notebook 05's reading,
    :func:`nvtutorial.tracesplit.pair`): the communication time per step, the part of it spent waiting for the
    other rank to join each collective, the rest (on the wire: data moving, and the collective's own latency),
    the part of that no compute of this rank hid, and the share of collectives this rank joined last. Both ranks
    are shown: one rank's communication time is mostly waiting when it is early, and the rank that joins last
    measures something close to the link. A rung whose traces cannot be paired one collective to one (the ranks
    ran different numbers) shows its unpaired communication time and says why."""
    import pandas as pd

    from nvtutorial import tracesplit

    ms = ranks(result)
    rows = []
    for rung in _rungs(ms):
        paths = [_trace(result, m, rung) for m in ms]
        acts = [tracesplit.classify(p) for p in paths]
        try:
            paired = tracesplit.pair(acts)
        except ValueError as exc:
            for r, act in enumerate(acts):
                s = tracesplit.split(act)
                rows.append(
                    {
                        "rung": LABELS[rung],
                        "rank": r,
                        "communication (ms)": s.comm_ms,
                        "waiting (ms)": None,
                        "on the wire (ms)": None,
                        "on the wire, exposed (ms)": None,
                        "joined last": None,
                        "note": f"not paired: {exc}",
                    }
                )
            continue
        for r, w in enumerate(paired):
            rows.append(
                {
                    "rung": LABELS[rung],
                    "rank": r,
                    "communication (ms)": w.comm_ms,
                    "waiting (ms)": w.wait_ms,
                    "on the wire (ms)": w.transfer_ms,
                    "on the wire, exposed (ms)": w.exposed_transfer_ms,
                    "joined last": w.last_share,
                    "note": "",
                }
            )
    return pd.DataFrame(rows).set_index(["rung", "rank"])


LINK_WHERE = "host-staged: NCCL_P2P_DISABLE=1; direct link twice (A/A)"


def link_comparisons(direct: RunResult, staged: RunResult, direct_again: RunResult) -> dict[str, Comparison]:
    """Per rung: step times host-staged (``NCCL_P2P_DISABLE=1``) against over the direct link, by
    :func:`~nvtutorial.report.verdict.compare`. Three launches with the same parameters, in this order: the direct
    link, host-staged, the direct link again. The baseline is both direct launches' repeats; the noise is at least
    the A/A gap between the two direct launches, so variation from one launch to the next (which the repeats of one
    launch never sample) cannot pass for an effect of the link."""
    a, b, c = ranks(direct), ranks(staged), ranks(direct_again)
    out = {}
    for rung in _rungs(a):
        if rung in _rungs(b) and rung in _rungs(c):
            first, again = _step_times(a, rung), _step_times(c, rung)
            out[rung] = compare(first + again, _step_times(b, rung), aa_gap=aa_gap(first, again))
    return out


def link_verdicts(direct: RunResult, staged: RunResult, direct_again: RunResult) -> list[Verdict]:
    """One verdict per rung: how much slower its step became without the direct GPU-to-GPU path, beyond the noise
    of the repeats and the launch-to-launch A/A gap."""
    out = []
    where = f"{_where(direct)}; {LINK_WHERE}"
    for rung, c in link_comparisons(direct, staged, direct_again).items():
        text = (
            c.describe("s", f"{LABELS[rung]}, direct link → host-staged")
            + f"; the two direct launches differed by {c.aa_gap:.0%} (A/A)"
        )
        out.append(comparison_verdict(f"ladder.link.{rung}", c, text, where, rung=rung, aa_gap=c.aa_gap))
    return out


def _most_slowed(comps: Mapping[str, Comparison]) -> str:
    """The rung whose step time grew the most without the direct link."""
    return max(comps, key=lambda r: comps[r].ratio)


def needs_link_verdict(direct: RunResult, staged: RunResult, direct_again: RunResult) -> Verdict:
    """Which rung lost the most when the direct link was taken away (information for the summary)."""
    comps = link_comparisons(direct, staged, direct_again)
    worst = _most_slowed(comps)
    least = min(comps, key=lambda r: comps[r].ratio)
    text = (
        f"Without the direct link {LABELS[worst]} slowed down most ({comps[worst].ratio:.2f}× its step time, "
        f"{comps[worst].status}), {LABELS[least]} least ({comps[least].ratio:.2f}×, {comps[least].status})."
    )
    if worst == "fsdp_offload" and comps[worst].status == "slower":
        text += (
            " Host staging puts NCCL's bytes on the same PCIe link as the offload rung's host copies, so part "
            "of that slow-down can be contention rather than a need for NVLink; this run does not isolate it "
            "(an A/B of the offload rung with NCCL's shared memory against sockets, or with one CPU thread "
            "against many, would)."
        )
    return Verdict(
        "ladder.link",
        "info",
        text,
        {
            "worst": worst,
            "ratio": {r: c.ratio for r, c in comps.items()},
            "status": {r: c.status for r, c in comps.items()},
            "noise": {r: c.noise for r, c in comps.items()},
        },
        f"{_where(direct)}; {LINK_WHERE}",
    )


def checkpoint_verdict(result: RunResult, tolerance: float) -> Verdict:
    """Pass when both loads give the saved weights bit for bit (a copy) and the resumed steps' losses are within
    ``tolerance`` of the uninterrupted run's (on a GPU the attention backward may add in a different order)."""
    c = ranks(result)[0].checkpoint
    if c is None:
        raise ValueError("the run saved no checkpoint (checkpoint=false): nothing to judge")
    exact = c.resume_max_weight_diff == 0 and c.single_process_max_weight_diff == 0
    loss_diff = max(abs(a - b) for a, b in zip(c.continued, c.resumed))
    numbers = {
        "resume_max_weight_diff": c.resume_max_weight_diff,
        "single_process_max_weight_diff": c.single_process_max_weight_diff,
        "max_loss_diff": loss_diff,
        "tolerance": tolerance,
    }
    if loss_diff <= tolerance and exact:
        losses = (
            "repeat the uninterrupted losses bit for bit"
            if loss_diff == 0
            else f"follow the uninterrupted losses to {loss_diff:.2g}"
        )
        return Verdict(
            "ladder.checkpoint",
            "pass",
            "The sharded checkpoint round-tripped: the reloaded shards and "
            "the single-process model loaded from it equal the saved weights bit for bit, and the resumed "
            f"steps {losses} (tolerance {tolerance:g}).",
            numbers,
            _where(result),
        )
    return Verdict(
        "ladder.checkpoint",
        "fail",
        "The checkpoint did not round-trip: "
        f"largest weight difference {c.resume_max_weight_diff} after resuming, "
        f"{c.single_process_max_weight_diff} in one process (both must be 0); largest loss "
        f"difference {loss_diff:.3g} (tolerance {tolerance:g}).",
        numbers,
        _where(result),
    )
