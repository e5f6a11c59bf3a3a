"""Notebook 10's worked problems: the questions, the answer keys the calibrated model gives, the graders that say
how far an answer is and which slip it looks like, the model's error against the run; and the capstone: its task,
the strategies' memory and step time by the model, the speed of light, the course's own choice.

Kernel side: arithmetic on calibrated numbers (``report.Calibrated``) and on the run's typed results. An answer is
in the problem's unit: milliseconds for times, percent for the bubble, a ratio for bytes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial.chapters.ch08_ladder import report_model as ladder_model
from nvtutorial.chapters.ch10_cost_model import model, report, schema
from nvtutorial.chapters.ch10_cost_model.problems_capstone import CapstoneRecord as CapstoneRecord
from nvtutorial.chapters.ch10_cost_model.problems_capstone import StepTime as StepTime
from nvtutorial.chapters.ch10_cost_model.problems_capstone import StrategyError as StrategyError
from nvtutorial.chapters.ch10_cost_model.problems_capstone import Task as Task
from nvtutorial.chapters.ch10_cost_model.problems_capstone import _block_bytes, _forward, _params
from nvtutorial.chapters.ch10_cost_model.problems_capstone import best_strategy as best_strategy
from nvtutorial.chapters.ch10_cost_model.problems_capstone import bytes_by_kind as bytes_by_kind
from nvtutorial.chapters.ch10_cost_model.problems_capstone import bytes_sent as bytes_sent
from nvtutorial.chapters.ch10_cost_model.problems_capstone import capstone_record as capstone_record
from nvtutorial.chapters.ch10_cost_model.problems_capstone import capstone_strategies as capstone_strategies
from nvtutorial.chapters.ch10_cost_model.problems_capstone import choice_verdict as choice_verdict
from nvtutorial.chapters.ch10_cost_model.problems_capstone import ddp_gradients as ddp_gradients
from nvtutorial.chapters.ch10_cost_model.problems_capstone import fit_verdict as fit_verdict
from nvtutorial.chapters.ch10_cost_model.problems_capstone import fits as fits
from nvtutorial.chapters.ch10_cost_model.problems_capstone import ideal_time as ideal_time
from nvtutorial.chapters.ch10_cost_model.problems_capstone import peak as peak
from nvtutorial.chapters.ch10_cost_model.problems_capstone import strategy_table as strategy_table
from nvtutorial.chapters.ch10_cost_model.problems_capstone import strategy_time as strategy_time
from nvtutorial.report import predict
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult, label_of

if TYPE_CHECKING:
    import pandas as pd

PROBLEMS = schema.DEVICE_PROBLEMS + schema.LINK_PROBLEMS + ("pipeline_bubble",)
UNITS = {key: "ms" for key in PROBLEMS} | {"zero3_bytes": "×", "pipeline_bubble": "%"}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
RIGHT_WITHIN = 0.15
"""A learner's answer is right within 15 % of the key: the key is arithmetic on the same calibrated numbers."""
CLOSE_WITHIN = 1.0
"""...and close within a factor of 2."""
COUNTED = ("zero3_bytes",)
"""Problems whose run counts (bytes recorded call by call) rather than times: the count is compared with the same
ring arithmetic, so its error is 0 by construction; it has its own verdict (:func:`bytes_verdict`) and stays out of
the timing errors' median (:func:`model_errors`) and their chart."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """The model's answer to one problem, in the problem's unit, with its working; a device problem's ``regime``:
    the limit the model says it hits (``model.Regime``: compute, memory or overhead). An eager program with a floor
    is a band (``model.eager_bounds``): ``sides`` are its CPU side (the floor) and its GPU side (the work at the
    roofs), ``value`` the slower of the two (the lower bound), :attr:`upper` their sum."""

    key: str
    value: float
    unit: str
    working: str
    regime: str | None = None
    sides: tuple[float, float] | None = None

    @property
    def upper(self) -> float | None:
        return sum(self.sides) if self.sides else None

    def error(self, run: float) -> float:
        """The model's error against ``run``: its answer (a band's lower end, the key) ÷ ``run`` − 1."""
        return self.value / run - 1

    def band_error(self, run: float) -> float:
        """The error against the band: 0 within it, else against the nearer end (above the sum: sum ÷ run − 1, a run
        slower than even nothing overlapping); a point's is :meth:`error`."""
        upper = self.upper
        if upper is None or run < self.value:
            return self.error(run)
        return min(0.0, upper / run - 1)


def _config(p: schema.Params) -> ladder_model.Setup:
    return ladder_model.Setup(**p.config(), global_batch=p.global_batch, world=2)


# --------------------------------------------------------------------------------------------------- the questions


def question(key: str, p: schema.Params, ranks: int = 2) -> str:
    """The problem as the learner reads it, with this profile's sizes."""
    s = _config(p)
    tokens = p.global_batch * p.seq_len
    words = {
        "mlp_matmul": f"The shape of the MLP's first linear layer of the transformer over the whole batch: "
        f"[{tokens} × {p.dim}] @ [{p.dim} × {p.mlp_ratio * p.dim}], in the device's fast dtype (bf16 on a GPU, "
        "fp32 on a CPU; the transformer itself trains in fp32). How many ms on one device?",
        "decode_matmul": f"A decode-like step: only {p.decode_tokens} tokens through a [{p.decode_dim} × "
        f"{4 * p.decode_dim}] weight, same dtype. How many ms?",
        "adam_step": f"Fused Adam's update of all {_params(s) / 1e6:.3g} M fp32 parameters of the transformer. "
        "How many ms?",
        "train_step": f"One training step (forward, backward, Adam) of the transformer on one device in fp32: "
        f"{p.global_batch} sequences of {p.seq_len} tokens, {p.layers} blocks of width {p.dim}, vocabulary "
        f"{p.vocab}. How many ms?",
        "allreduce": f"One all-reduce of {p.allreduce_bytes / 2**20:g} MiB on the pair ({ranks} ranks). How many ms?",
        "allreduce_small": f"One all-reduce of {p.small_bytes / 2**10:g} KiB on the pair. How many ms?",
        "fsdp_allgather": f"FSDP2's all-gather of one block's fp32 parameters "
        f"({_block_bytes(s) / 1e6:.3g} MB gathered) on the pair. How many ms?",
        "zero3_bytes": "Per step and rank, how many times DDP's bytes does ZeRO-3 (notebook 08's FSDP2 rung) send, "
        "costed as rings? (a ratio)",
        "pipeline_bubble": f"The idle share of each stage in a {ranks}-stage pipeline with {p.microbatches} "
        "micro-batches per step (GPipe or 1F1B), in %.",
    }
    return words[key]


# --------------------------------------------------------------------------------------------------- the answer keys


def answer(key: str, p: schema.Params, cal: report.Calibrated) -> Answer:
    """The model's answer to ``key`` with the calibrated numbers ``cal`` and the sizes ``p``."""
    s = _config(p)
    fp32 = cal.roofs["float32"]
    if key in ("mlp_matmul", "decode_matmul"):
        return _matmul_answer(key, p, cal)
    if key == "adam_step":
        n = _params(s)
        floor, work = cal.floors.get(key, 0.0), model.adam_time(n, fp32)
        return Answer(
            key,
            model.adam_time(n, fp32, floor) * 1e3,
            "ms",
            f"{model.ADAM_BYTES} B × {n / 1e6:.4g} M parameters = {model.ADAM_BYTES * n / 1e9:.4g} GB at "
            f"{fp32.bandwidth / 1e9:.4g} GB/s = {work * 1e3:.4g} ms" + _program(floor, work, "memory"),
            "overhead" if floor > work else "memory",
            (floor * 1e3, work * 1e3) if floor else None,
        )
    if key == "train_step":
        n, forward = _params(s), _forward(s, p.global_batch * p.seq_len)
        floor, work = cal.floors.get(key, 0.0), model.train_step_time(forward, n, fp32)
        return Answer(
            key,
            model.train_step_time(forward, n, fp32, floor) * 1e3,
            "ms",
            f"3 × {forward / 1e9:.4g} GFLOP forward = {3 * forward / 1e9:.4g} GFLOP at {fp32.flops / 1e12:.3g} "
            f"TFLOP/s (fp32) = {3 * forward / fp32.flops * 1e3:.4g} ms, + Adam "
            f"{model.adam_time(n, fp32) * 1e3:.3g} ms" + _program(floor, work, "compute"),
            "overhead" if floor > work else "compute",
            (floor * 1e3, work * 1e3) if floor else None,
        )
    if key in FACTOR_SLIPS:
        kind = "all_gather" if key == "fsdp_allgather" else "all_reduce"
        size = _link_size(key, p)
        link = cal.link(kind)
        f = model.bus_factor(kind, cal.ranks)
        note = " (the all-reduce's α and β: not measured on that pair)" if kind in cal.derived else ""
        return Answer(
            key,
            model.collective_time(size, link, kind, cal.ranks) * 1e3,
            "ms",
            f"α {link.alpha * 1e6:.3g} µs + {size / 1e6:.4g} MB × {f:g} / β {link.beta / 1e9:.4g} GB/s "
            f"= {link.alpha * 1e6:.3g} + {size * f / link.beta * 1e6:.4g} µs{note}",
        )
    if key == "zero3_bytes":
        ddp = sum(ladder_model.sent_per_step(s, "ddp", 0).values())
        zero3 = sum(ladder_model.sent_per_step(s, "fsdp_zero3", 0).values())
        return Answer(
            key,
            zero3 / ddp,
            "×",
            f"DDP all-reduces every gradient: 2(W−1)/W · P = {ddp / 1e6:.4g} MB; ZeRO-3 all-gathers every "
            f"parameter, the blocks' again in backward, and reduce-scatters every gradient: (W−1)/W · (2P + "
            f"P_blocks) = {zero3 / 1e6:.4g} MB. The ratio is 1 + P_blocks/(2P): the ZeRO paper's 1.5× when every "
            "parameter is gathered again (P_blocks = P); FSDP2 keeps the root (embeddings, head) gathered after "
            "the forward pass, so less here",
        )
    if key == "pipeline_bubble":
        return Answer(
            key,
            100 * model.bubble(cal.ranks, p.microbatches),
            "%",
            f"(p − 1) / (m + p − 1) = {cal.ranks - 1} / {p.microbatches + cal.ranks - 1}",
        )
    raise ValueError(f"unknown problem {key!r}; the problems are {', '.join(PROBLEMS)}")


def _matmul_answer(key: str, p: schema.Params, cal: report.Calibrated) -> Answer:
    """The answer to a matrix-multiply problem: the roofline of its FLOPs and bytes in the device's fast dtype."""
    roof = cal.roofs[cal.compute_dtype]
    flops, nbytes = _matmul_work(key, p, DTYPE_BYTES[cal.compute_dtype])
    seconds = model.roofline_time(flops, nbytes, roof)
    limit = model.regime(flops, nbytes, roof)
    bound = "compute-bound" if flops / nbytes > roof.ridge else "memory-bound"
    cached = " (fits in L2: the run may read it from the cache, above the memory roof)"
    return Answer(
        key,
        seconds * 1e3,
        "ms",
        f"{flops / 1e9:.4g} GFLOP and {nbytes / 1e6:.4g} MB{cached if nbytes < (cal.l2_bytes or 0) else ''}: "
        f"{flops / nbytes:.3g} FLOP/B against the ridge "
        f"of {roof.ridge:.3g} FLOP/B ({cal.compute_dtype}), so {bound} on the roofs; with the floor of one call: "
        f"max(floor {roof.call_s * 1e3:.4g}, compute {flops / roof.flops * 1e3:.4g}, bytes "
        f"{nbytes / roof.bandwidth * 1e3:.4g}) ms: {limit}-bound",
        limit,
    )


def _program(floor: float, work: float, limit: str) -> str:
    """An eager program's working: its floor against its work (``model.eager_bounds``)."""
    if not floor:
        return f": {limit}-bound (no floor measured for it)"
    lower, upper = model.eager_bounds(floor, work)
    return (
        f"; its floor (the same ops, almost no work) {floor * 1e3:.4g} ms: max = {lower * 1e3:.4g} ms, "
        f"{'overhead' if floor > work else limit}-bound (at most the sum, {upper * 1e3:.4g} ms)"
        + (
            "; the answer is the floor the calibration measured on the same calls: the run checks that floor, "
            "not the roofs"
            if floor > 2 * work
            else ""
        )
    )


def answers(keys: Sequence[str], p: schema.Params, cal: report.Calibrated) -> dict[str, Answer]:
    return {k: answer(k, p, cal) for k in keys}


# --------------------------------------------------------------------------------------------------- grading


SLIPS: Mapping[str, Sequence[tuple[float, str]]] = {
    "mlp_matmul": [
        (0.5, "one FLOP per multiply-accumulate: a multiply and an add are 2"),
        (2.0, "two FLOPs counted twice (2·m·n·k already counts the multiply and the add)"),
    ],
    "decode_matmul": [],  # filled by the grader: the compute time of a memory-bound multiply
    "adam_step": [
        (16 / 28, "only the reads (16 B per parameter); Adam also writes the parameter and both moments"),
        (12 / 28, "only the writes; Adam also reads the parameter, its gradient and both moments"),
        (4 / 28, "4 bytes per parameter: Adam moves 7 fp32 values per parameter"),
    ],
    "train_step": [
        (1 / 3, "the forward pass only: the backward pass does twice its FLOPs"),
        (2 / 3, "forward and backward as one forward each: the backward pass does twice the forward's FLOPs"),
    ],
    "allreduce": [],  # filled by the grader: the bus factor 2 (α and β from the calibration)
    "allreduce_small": [],
    "fsdp_allgather": [],
    "zero3_bytes": [],  # filled by the grader: DDP's bytes, a ratio of 1
    "pipeline_bubble": [],
}
"""Per problem: the ratio answer ÷ key a common slip produces, and the slip (the slips that depend on the
calibration are computed by :func:`slip`)."""
FACTOR_SLIPS = {
    "allreduce": "the factor 2(n−1)/n is 1 for two ranks, not 2",
    "allreduce_small": "the factor 2(n−1)/n is 1 for two ranks, not 2",
    "fsdp_allgather": "the all-reduce's factor: an all-gather sends (n−1)/n of the gathered tensor, half of it here",
}
"""The wrong bus factor per link problem: 2 for an all-reduce, the all-reduce's 2(n−1)/n for an all-gather."""


def _link_size(key: str, p: schema.Params) -> int:
    """The bytes of a link problem's collective: the whole tensor (the all-gather's output)."""
    if key == "allreduce":
        return p.allreduce_bytes
    if key == "allreduce_small":
        return p.small_bytes
    return _block_bytes(_config(p))


UNIT_SLIPS = (
    (1e3, "1000× too large: the answer is in milliseconds (did you write µs?)"),
    (1e-3, "1000× too small: the answer is in milliseconds (did you write seconds?)"),
    (8.0, "8× too large: bytes, not bits"),
)


def slip(
    key: str, prediction: float, ans: Answer, p: schema.Params | None = None, cal: report.Calibrated | None = None
) -> str | None:
    """The common slip an answer looks like (within 5 % of the ratio it produces), or None."""
    ratio = prediction / ans.value
    candidates = list(SLIPS.get(key, ())) + list(UNIT_SLIPS if ans.unit == "ms" else ())
    if key == "decode_matmul" and p is not None and cal is not None:
        roof = cal.roofs[cal.compute_dtype]
        compute = 2 * p.decode_tokens * p.decode_dim * 4 * p.decode_dim / roof.flops * 1e3
        candidates.append(
            (
                compute / ans.value,
                "its compute time: with so few tokens the weight's bytes dominate, "
                "a memory-bound multiply runs at the memory roof",
            )
        )
    if key in FACTOR_SLIPS and p is not None and cal is not None:  # α stays: the slip scales only the bytes
        kind = "all_gather" if key == "fsdp_allgather" else "all_reduce"
        link = cal.link(kind)
        wrong = 2.0 if kind == "all_reduce" else model.bus_factor("all_reduce", cal.ranks)
        slipped_ms = (link.alpha + _link_size(key, p) * wrong / link.beta) * 1e3
        candidates.append((slipped_ms / ans.value, FACTOR_SLIPS[key]))
    if key in FACTOR_SLIPS and cal is not None:
        kind = "all_gather" if key == "fsdp_allgather" else "all_reduce"
        alpha_ms = cal.link(kind).alpha * 1e3
        if ans.value > alpha_ms:
            candidates.append(((ans.value - alpha_ms) / ans.value, "the bytes without the latency α of the call"))
    if key == "zero3_bytes":
        candidates.append(
            (
                1 / ans.value,
                "as many bytes as DDP: ZeRO-3 gathers the blocks' parameters again in the "
                "backward pass, on top of one all-gather and one reduce-scatter (together DDP's all-reduce)",
            )
        )
    if key == "pipeline_bubble" and p is not None and cal is not None:
        pp, m = cal.ranks, p.microbatches
        candidates += [
            (
                100 * (pp - 1) / m / ans.value,
                "(p − 1) / m: that is the bubble over the useful time, Megatron-LM's convention; as a share of the "
                "whole step, which the question asks for, it is (p − 1) / (m + p − 1)",
            ),
            (100 * pp / (m + pp) / ans.value, "p / (m + p): p − 1 slots fill and drain the pipeline, not p"),
        ]
    for target, why in candidates:
        if target > 0 and abs(ratio / target - 1) <= 0.05 and abs(ratio - 1) > RIGHT_WITHIN:
            return why
    return None


def grade(
    key: str,
    prediction: float | None,
    ans: Answer,
    where: str,
    p: schema.Params | None = None,
    cal: report.Calibrated | None = None,
) -> Verdict:
    """Grade an answer against the model's key with the course's one grader (``report.predict.grade_number``):
    ``right`` within 15 %, ``close`` within a factor of 2, else ``off``; the text gives the working and the slip the
    answer looks like (``numbers["slip"]``)."""
    verdict = predict.grade_number(
        f"costmodel.problem.{key}",
        prediction,
        ans.value,
        unit=ans.unit,
        where=where,
        explanation=f"({ans.working}.)",
        right_within=RIGHT_WITHIN,
        close_within=CLOSE_WITHIN,
        measured_name="The model says",
        question=f"problem {key}" if p is None else question(key, p),
    )
    found = slip(key, prediction, ans, p, cal) if prediction is not None and verdict.status != "no answer" else None
    text = _times_off(verdict.text, verdict.numbers.get("ratio")) + (f" It looks like {found}." if found else "")
    return dataclasses.replace(verdict, text=text, numbers={**verdict.numbers, "slip": found})


def _times_off(text: str, ratio: float | None) -> str:
    """The grader's "100104% too high" as "1,001× too high": beyond a factor of 2 a ratio reads, a percent not."""
    if ratio is None or 0.5 < ratio < 2:
        return text
    side = "high" if ratio > 1 else "low"
    times = max(ratio, 1 / ratio)
    return text.replace(
        f"{abs(ratio - 1):.0%} too {side}",
        f"{times:,.0f}× too {side}" if times >= 10 else f"{times:.2g}× too {side}",
        1,
    )


# --------------------------------------------------------------------------------------------------- against the run


def measured_value(key: str, measured: schema.Measured) -> float:
    """A run's measurement in the problem's unit."""
    if UNITS[key] == "ms":
        return measured.value * 1e3
    return measured.value


def problem_table(
    answers_: Mapping[str, Answer],
    measured: Mapping[str, float],
    predictions: Mapping[str, float | None],
    where: Mapping[str, str] | None = None,
    spread: Mapping[str, tuple[float, float]] | None = None,
    details: Mapping[str, Mapping[str, object]] | None = None,
):  # -> pandas.DataFrame
    """Per problem: your answer, the model's (an eager program's band: at least ``model``, at most ``model, at
    most``), the run's (the median repeat; with ``spread``, :func:`measured_spread`, also its fastest repeat and the
    repeats' spread), the model's error against the run (:meth:`Answer.error`: the answer ÷ run − 1) and, for a
    band, against the band (:meth:`Answer.band_error`: 0 inside it), whether the run timed or counted it, the regime
    the model says it is in, where it was measured (``where``: problem → the run's machine, :func:`measured_where`)
    and, with ``details`` (:func:`measured_details`), the calls per repeat and the SM clock."""
    import pandas as pd

    rows = []
    for key, ans in answers_.items():
        run, mine = measured.get(key), predictions.get(key)
        rows.append(
            {
                "problem": key,
                "unit": ans.unit,
                "yours": mine,
                "model": ans.value,
                "model, at most": ans.upper,
                "run": run,
                **(
                    {"run, fastest": spread[key][0], "run's spread": spread[key][1]} if spread and key in spread else {}
                ),
                "model error": ans.error(run) if run else None,
                "model error vs band": ans.band_error(run) if run and ans.upper is not None else None,
                "yours vs run": mine / run - 1 if run and mine else None,
                "run's kind": "counted" if key in COUNTED else "timed",
                "regime": ans.regime,
                "measured on": (where or {}).get(key),
                **(dict(details[key]) if details and key in details else {}),
            }
        )
    return pd.DataFrame(rows).set_index("problem")


def formatted(table: pd.DataFrame):  # -> pandas.DataFrame
    """A problem table to read: relative errors in % (as the grades give them), other numbers to 4 significant
    digits, nothing where there is no value. The table itself keeps its numbers (the verdicts and charts read it)."""
    import pandas as pd

    def cell(column: str, v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return str(v)
        if "spread" in column:
            return f"{100 * v:.1f} %"
        return f"{100 * v:+.1f} %" if "error" in column or "vs run" in column else f"{v:.4g}"

    return pd.DataFrame({c: [cell(str(c), v) for v in table[c]] for c in table.columns}, index=table.index)


REGIME_WORDS = {"overhead": "overhead-bound", "compute": "compute-bound", "memory": "memory-bound"}


def _matmul_work(key: str, p: schema.Params, dtype_bytes: int) -> tuple[float, float]:
    """A device multiply's FLOPs and bytes (``mlp_matmul`` or ``decode_matmul``) at the sizes ``p``."""
    t, d_in = (p.global_batch * p.seq_len, p.dim) if key == "mlp_matmul" else (p.decode_tokens, p.decode_dim)
    d_out = p.mlp_ratio * p.dim if key == "mlp_matmul" else 4 * p.decode_dim
    return 2 * t * d_in * d_out, dtype_bytes * (t * d_in + d_in * d_out + t * d_out)


ROOF_END = "; at the roofs: an upper bound (notebook 11 brackets it)"
"""Review RR7-9: the two token crossovers take the compute at its fp32 roof, the fastest rate possible, so each is
the upper end; notebook 11 measures the step and brackets the crossover from below as well."""


def regime_map(cal: report.Calibrated, p: schema.Params, ranks: int = 2):  # -> pandas.DataFrame
    """Where one regime hands over to the next on this machine (``model``'s regime map), and where this run's
    problems sit: a collective's size against α · β; a multiply's FLOPs against P · α and its bytes against BW · α
    (a call costs its floor only while both are below: ``model.regime`` decides); the tokens per GPU of data
    parallelism against ``ddp_critical_tokens`` with α and this model's buckets; a training step's tokens against
    those at which its compute, Adam aside, takes its floor less Adam's time."""
    import pandas as pd

    roof, fp32, link = cal.roofs[cal.compute_dtype], cal.roofs["float32"], cal.link("all_reduce")
    s = _config(p)
    tokens = p.global_batch * p.seq_len
    n, buckets = _params(s), len(model.ddp_buckets(ddp_gradients(s)))
    compute_per_token = 3 * _forward(s, tokens) / tokens / fp32.flops
    floor = cal.floors.get("train_step", 0.0)

    def row(name: str, cross: float, unit: str, here: dict[str, float], below: str, above: str) -> list[dict]:
        return [
            {
                "crossover": name,
                "at": cross,
                "unit": unit,
                "problem": k,
                "this run": v,
                "regime": below if v < cross else above,
            }
            for k, v in here.items()
        ]

    rows = row(
        "a collective's bytes: α · β",
        model.crossover_bytes(link, "all_reduce", cal.ranks) / 1e6,
        "MB",
        {"allreduce": p.allreduce_bytes / 1e6, "allreduce_small": p.small_bytes / 1e6},
        "α-bound",
        "β-bound",
    )
    none = "" if roof.call_s else ", no floor reached"  # no α: no crossover to print (not one at 0)
    for key in ("mlp_matmul", "decode_matmul"):
        flops, nbytes = _matmul_work(key, p, DTYPE_BYTES[cal.compute_dtype])
        regime = REGIME_WORDS[model.regime(flops, nbytes, roof)]
        rows += [
            {
                "crossover": f"a call's FLOPs: P · α ({cal.compute_dtype}{none})",
                "at": roof.floor_flops / 1e9 if roof.call_s else math.nan,
                "unit": "GFLOP",
                "problem": key,
                "this run": flops / 1e9,
                "regime": regime,
            },
            {
                "crossover": f"a call's bytes: BW · α{' (no floor reached)' if none else ''}",
                "at": roof.floor_bytes / 1e6 if roof.call_s else math.nan,
                "unit": "MB",
                "problem": key,
                "this run": nbytes / 1e6,
                "regime": regime,
            },
        ]
    rows += row(
        f"DDP's tokens per GPU: (n−1)/n · 2 · P/β + k · α · P/(4N), k = {buckets} buckets (fp32){ROOF_END}",
        model.ddp_critical_tokens(fp32, link, cal.ranks, n_params=n, buckets=buckets),
        "tokens",
        {"this model's step under DDP": tokens / ranks},
        "all-reduces exposed",
        "all but the last bucket can hide",
    )
    if floor:
        rows += row(
            f"a training step's tokens: (floor − Adam) ÷ compute per token{ROOF_END}",
            max(0.0, floor - model.adam_time(n, fp32)) / compute_per_token,
            "tokens",
            {"train_step": float(tokens)},
            "overhead-bound",
            "compute-bound",
        )
    return pd.DataFrame(rows).set_index(["crossover", "problem"])


def bytes_verdict(ans: Answer, measured: float, where: str) -> Verdict:
    """Pass when the bytes one step of ZeRO-3 and of DDP issued (recorded call by call, costed as rings) have the
    ratio notebook 08's arithmetic gives, to 1e-6: counting, not timing, so nothing but an exact match is right."""
    error = measured / ans.value - 1
    numbers = {"model": ans.value, "recorded": measured, "error": error}
    if abs(error) <= 1e-6:
        return Verdict(
            "costmodel.problem.zero3_bytes.recorded",
            "pass",
            f"The calls recorded in one step send "
            f"{measured:.6g}× DDP's bytes under ZeRO-3, as the arithmetic says ({ans.value:.6g}×).",
            numbers,
            where,
        )
    return Verdict(
        "costmodel.problem.zero3_bytes.recorded",
        "fail",
        f"The recorded calls send {measured:.6g}× DDP's "
        f"bytes, the arithmetic {ans.value:.6g}×: a collective is missing, extra, or of another size.",
        numbers,
        where,
    )


def model_errors(
    answers_: Mapping[str, Answer], measured: Mapping[str, float], keys: Sequence[str], band: bool = False
) -> dict[str, float]:
    """The model's error (:meth:`Answer.error`: the answer ÷ run − 1; with ``band``, :meth:`Answer.band_error`: 0
    inside a band, else against its nearer end) for the timed problems in ``keys`` that the run measured (a counted
    one, :data:`COUNTED`, is judged by :func:`bytes_verdict`: its error is 0 by construction and would pull a timing
    median toward 0)."""
    keep = [k for k in keys if k in measured and k in answers_ and k not in COUNTED]
    return {k: (answers_[k].band_error if band else answers_[k].error)(measured[k]) for k in keep}


def band_positions(
    answers_: Mapping[str, Answer], measured: Mapping[str, float], keys: Sequence[str]
) -> dict[str, str]:
    """Where the run of each eager program with a band (:attr:`Answer.sides`) in ``keys`` lies: ``below`` its lower
    bound, inside it (:meth:`Answer.band_error` 0), or ``above`` the sum of its sides. Inside is ``inside (floor)``
    where the floor is the larger side (regime ``overhead``: the lower end is a floor measured on the same calls) and
    ``inside (work)`` where the work at the roofs is (a check of the roofs). Problems without a band are left out."""
    out = {}
    for k in keys:
        a, run = answers_.get(k), measured.get(k)
        if a is None or run is None or a.upper is None:
            continue
        inside = "inside (floor)" if a.regime == "overhead" else "inside (work)"
        out[k] = "below" if run < a.value else ("above" if run > a.upper else inside)
    return out


# --------------------------------------------------------------------------------------------------- the runs' answers


def _measured(results: Sequence[RunResult | None]) -> Iterator[tuple[RunResult, schema.Measured]]:
    """Every problem each ``problems`` run measured (rank 0's record), run by run (None: no run, skipped), with its
    run: a later run's answer to a problem replaces an earlier one's."""
    for result in results:
        if result is not None:
            yield from ((result, m) for m in report.ranks(result, "problems")[0].measured)


def measurements(*results: RunResult | None) -> dict[str, float]:
    """Every problem a ``problems`` run measured (rank 0's record), in the problems' units; later runs win."""
    return {m.key: measured_value(m.key, m) for _, m in _measured(results)}


def measured_spread(*results: RunResult | None) -> dict[str, tuple[float, float]]:
    """Per timed problem (rank 0's record; later runs win): its fastest repeat in the problem's unit, and the
    repeats' spread, (slowest − fastest) ÷ median."""
    out: dict[str, tuple[float, float]] = {}
    for _, m in _measured(results):
        if m.repeats:
            lo, hi = min(m.repeats), max(m.repeats)
            out[m.key] = (measured_value(m.key, dataclasses.replace(m, value=lo)), (hi - lo) / m.value)
    return out


def measured_where(*results: RunResult | None) -> dict[str, str]:
    """Per problem, where the run that :func:`measurements` takes it from was measured (its label)."""
    return {m.key: label_of(result) for result, m in _measured(results)}


def measured_details(*results: RunResult | None) -> dict[str, dict[str, object]]:
    """Per timed problem (rank 0's record; later runs win): the calls per repeat and, where the run read it, the SM
    clock after the repeats (``"1755–1980"`` MHz), as the problem table shows them."""
    out: dict[str, dict[str, object]] = {}
    for _, m in _measured(results):
        if "iters" in m.details:
            clock = m.details.get("sm_clock_mhz")
            out[m.key] = {"calls per repeat": m.details["iters"]}
            if clock:
                out[m.key]["SM clock (MHz)"] = f"{clock[0]}–{clock[1]}"
    return out


def sides_table(answers_: Mapping[str, Answer], result: RunResult):  # -> pandas.DataFrame | None
    """On a GPU, each eager program's two sides as the model priced them before the run (the CPU's: its floor, the
    same calls with almost no work; the GPU's: its work at the roofs) and as the run measured them apart right before
    timing it (``host_s``, ``gpu_s``), beside the band and the run: where a program missed, which side the model
    got wrong. The CPU side measured is one call issued onto an idle GPU: it can cost the CPU more than the same call
    in a stream of calls, and so exceed the run itself. None where the run measured no sides (the CPU, or a run
    before they were measured)."""
    import pandas as pd

    rows = []
    for m in report.ranks(result, "problems")[0].measured:
        ans = answers_.get(m.key)
        if "host_s" not in m.details or ans is None or ans.sides is None:
            continue
        gpu = m.details.get("gpu_s")
        rows.append(
            {
                "problem": m.key,
                "CPU side, model (ms)": ans.sides[0],
                "CPU side, run (ms)": m.details["host_s"] * 1e3,
                "GPU side, model (ms)": ans.sides[1],
                "GPU side, run (ms)": gpu * 1e3 if gpu is not None else None,
                "band, model (ms)": f"{ans.value:.4g}–{ans.upper:.4g}",
                "run (ms)": m.value * 1e3,
                "note": None if gpu is not None else f"GPU side not measured here: {m.details.get('gpu_why')}",
            }
        )
    return pd.DataFrame(rows).set_index("problem") if rows else None


CLOCK_RAISED = 0.9
"""A run's SM clock was raised when its lowest reading was at least this share of the highest the calibration read."""


def above_causes(answers_: Mapping[str, Answer], result: RunResult, cal: report.Calibrated) -> dict[str, str]:
    """Per eager program whose two sides the run measured apart (:func:`sides_table`), the words that explain a run
    above its band (``report.error_verdict``'s ``causes``): each side measured against the model's, the slower one
    named; and a clock not yet raised, or held down by the power cap (review RR7-8: the highest reading is not the
    sustained clock of a long multiply), only where the run's lowest SM clock was below :data:`CLOCK_RAISED` × the
    highest the calibration read."""
    out = {}
    for m in report.ranks(result, "problems")[0].measured:
        ans = answers_.get(m.key)
        if ans is not None and ans.sides is not None and "host_s" in m.details:
            out[m.key] = _sides_moved(ans.sides, m.details, cal.sm_clock_mhz)
    return out


HOST_MOVED = 1.25
"""The calibration's floor of a program and the same floor measured again in the problems' launch differ by more than
this factor: the host's speed moved between the two launches (review RR9-2: 2× on one H100 machine, 2026-12-07)."""


def _floor_moved(floor_ms: float, details: Mapping[str, Any]) -> str:
    """What the floor measured again in this launch says of the host (``floor_here_s``); "" where none was."""
    if "floor_here_s" not in details:
        return ""
    here = details["floor_here_s"] * 1e3
    ratio = here / floor_ms
    text = f" (the calibration's; in this launch the same floor took {here:.4g} ms, {ratio:.2f}× it"
    if ratio > HOST_MOVED:
        return text + ": this launch's CPU issued the same calls more slowly)"
    if ratio < 1 / HOST_MOVED:
        return text + ": this launch's CPU issued the same calls faster)"
    return text + ")"


def _sides_moved(sides: tuple[float, float], details: Mapping[str, Any], top: tuple[int, int] | None) -> str:
    host, gpu = details["host_s"] * 1e3, details.get("gpu_s")
    text = f"measured apart, the CPU side took {host:.3g} ms against a floor of {sides[0]:.4g} ms"
    text += _floor_moved(sides[0], details)
    if gpu is not None:
        slower = "CPU" if host >= gpu * 1e3 else "GPU"
        text += f", the GPU side {gpu * 1e3:.3g} ms against {sides[1]:.4g} ms of work at the roofs: the {slower}'s is"
        text += " the slower side"
    clock = details.get("sm_clock_mhz")
    if clock and top and clock[0] < CLOCK_RAISED * top[1]:
        text += (
            f"; the SM clock read as low as {clock[0]} MHz, below the calibration's highest ({top[1]} MHz): not yet "
            "raised, or held down by the power cap"
        )
    return text


def bubble_measured(pipeline_result: RunResult) -> dict[str, float]:
    """The pipeline run's measured idle share per schedule, in % (``report.bubble_table``): each schedule's own,
    since the messages between the stages delay them differently."""
    table = report.bubble_table(pipeline_result)
    return {str(k): 100 * float(v) for k, v in zip(table.index, table["measured"].tolist())}


REFERENCE_SOURCES = {
    "allreduce": "notebook 02's sweep (course benchmark)",
    "allreduce_small": "torch all-reduce (nvtutorial/data/h200x2)",
}
"""Which committed 2× H200 measurement answers each link problem (at the lesson sizes)."""


def reference_link_table(
    p: schema.Params, cal_ref: report.Calibrated, checks: pd.DataFrame | None = None
):  # -> pandas.DataFrame
    """The link problems at the lesson sizes ``p``, answered with the committed 2× H200 pair's fit (``cal_ref``) and
    checked against that pair's committed runs; what the pair never ran waits for a two-GPU run."""
    import pandas as pd

    checks = checks if checks is not None else report.reference_checks()
    rows = []
    for key in schema.LINK_PROBLEMS:
        ans = answer(key, p, cal_ref)
        run, source = None, "not run on the 2× H200 yet: waits for a two-GPU machine"
        if key in REFERENCE_SOURCES:
            size = p.allreduce_bytes if key == "allreduce" else p.small_bytes
            match = checks.loc[(checks["source"] == REFERENCE_SOURCES[key]) & (checks["bytes"] == size)]
            if len(match):
                run, source = float(match["measured (µs)"].iloc[0]) / 1e3, REFERENCE_SOURCES[key]
        rows.append(
            {
                "problem": key,
                "unit": ans.unit,
                "model": ans.value,
                "committed run": run,
                "source": source,
                "model error": ans.value / run - 1 if run else None,
            }
        )
    return pd.DataFrame(rows).set_index("problem")
