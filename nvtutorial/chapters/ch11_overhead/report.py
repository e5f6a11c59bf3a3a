"""Notebook 11's tables and verdicts, all reachable here (``ch.report.X``): the per-op costs and the batch-doubling
test (``report_floor.py``), the model's predictions of the step three ways and how far each was, the training they
must share (``report_step.py``); here, the all-reduce's fixed cost split, the crossovers, and the committed one-GPU
run the notebook shows where this machine has no GPU. Kernel side: never launches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch11_overhead import model
from nvtutorial.chapters.ch11_overhead.report_floor import DOUBLING_KEY as DOUBLING_KEY
from nvtutorial.chapters.ch11_overhead.report_floor import doubling_points as doubling_points
from nvtutorial.chapters.ch11_overhead.report_floor import doubling_table as doubling_table
from nvtutorial.chapters.ch11_overhead.report_floor import doubling_verdict as doubling_verdict
from nvtutorial.chapters.ch11_overhead.report_floor import grade_doubling as grade_doubling
from nvtutorial.chapters.ch11_overhead.report_floor import op_table as op_table
from nvtutorial.chapters.ch11_overhead.report_floor import op_verdict as op_verdict
from nvtutorial.chapters.ch11_overhead.report_floor import us as us
from nvtutorial.chapters.ch11_overhead.report_step import COMPILED_TOLERANCE as COMPILED_TOLERANCE
from nvtutorial.chapters.ch11_overhead.report_step import CPU_ESTIMATE as CPU_ESTIMATE
from nvtutorial.chapters.ch11_overhead.report_step import GRAPH_TOLERANCE as GRAPH_TOLERANCE
from nvtutorial.chapters.ch11_overhead.report_step import LABELS as LABELS
from nvtutorial.chapters.ch11_overhead.report_step import TARGET as TARGET
from nvtutorial.chapters.ch11_overhead.report_step import Prediction as Prediction
from nvtutorial.chapters.ch11_overhead.report_step import StepRow as StepRow
from nvtutorial.chapters.ch11_overhead.report_step import consistency_verdict as consistency_verdict
from nvtutorial.chapters.ch11_overhead.report_step import correctness_verdict as correctness_verdict
from nvtutorial.chapters.ch11_overhead.report_step import floor_note as floor_note
from nvtutorial.chapters.ch11_overhead.report_step import gpu_side_note as gpu_side_note
from nvtutorial.chapters.ch11_overhead.report_step import grade_speedups as grade_speedups
from nvtutorial.chapters.ch11_overhead.report_step import graph_cpu_s as graph_cpu_s
from nvtutorial.chapters.ch11_overhead.report_step import graph_gpu_check as graph_gpu_check
from nvtutorial.chapters.ch11_overhead.report_step import graph_gpu_s as graph_gpu_s
from nvtutorial.chapters.ch11_overhead.report_step import model_verdict as model_verdict
from nvtutorial.chapters.ch11_overhead.report_step import older_model as older_model
from nvtutorial.chapters.ch11_overhead.report_step import prediction_table as prediction_table
from nvtutorial.chapters.ch11_overhead.report_step import predictions as predictions
from nvtutorial.chapters.ch11_overhead.report_step import recorded as recorded
from nvtutorial.chapters.ch11_overhead.report_step import step_rows as step_rows
from nvtutorial.chapters.ch11_overhead.report_step import step_table as step_table
from nvtutorial.chapters.ch11_overhead.report_step import unmeasured_note as unmeasured_note
from nvtutorial.chapters.ch11_overhead.report_step import unpredicted_why as unpredicted_why
from nvtutorial.chapters.ch11_overhead.schema import (
    AllReducePoint,
    AllReduceRank,
    CalibrateRank,
    Params,
    Sides,
    StepRank,
    rank_type,
)
from nvtutorial.params import build
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult
from nvtutorial.units import format_size

if TYPE_CHECKING:
    from nvtutorial.chapters.ch10_cost_model.model import Link

REFERENCE = Path(__file__).resolve().parents[3] / "reference"
"""Where a checkout keeps the committed GPU runs (``reference/<machine>/runs-11/``)."""
Typed = CalibrateRank | StepRank | AllReduceRank
"""What rank 0 of an ``overhead`` run returned, by its part."""


def typed(run: RunResult) -> Typed:
    """Rank 0 of an ``overhead`` run, typed by its part (``schema.rank_type``)."""
    return run.metrics_as(rank_type(run.params))


def params(run: RunResult) -> Params:
    """The run's parameters, typed: the sizes its numbers belong to."""
    return build(Params, run.params)


def step_flops(s: Sides, p: Params) -> float:
    """FLOPs of the step whose sides ``s`` are (its width and batch, the rest of the transformer from ``p``)."""
    return model.step_flops(s.batch * p.seq_len, p.seq_len, s.width, p.mlp_ratio * s.width, p.layers, p.vocab)


# ------------------------------------------------------------------------------------------- the all-reduce


def allreduce_table(points: Sequence[AllReducePoint]):  # -> pandas.DataFrame
    import pandas as pd

    rows = [
        {
            "size": format_size(p.nbytes),
            "back to back (µs)": us(p.eager),
            "each waited for (µs)": us(p.waited),
            "replayed from a CUDA graph (µs)": us(p.graph),
            "the host's share": None if p.graph is None else 1 - p.graph / p.eager,
        }
        for p in points
    ]
    return pd.DataFrame(rows).set_index("size")


def allreduce_verdict(points: Sequence[AllReducePoint], world: int, where: str) -> Verdict:
    """The smallest all-reduce's fixed cost, split: the part a CUDA graph removes is the host's (Python, c10d, the
    launch); what is left is NCCL's own on the GPU: with one rank no wire, with two the link's latency too."""
    p = min(points, key=lambda q: q.nbytes)
    numbers: dict[str, float | None] = {"eager_us": us(p.eager), "waited_us": us(p.waited), "world": world}
    head = (
        f"An all-reduce of {format_size(p.nbytes)}: the host issues one every {us(p.eager):.1f} µs back to back (a "
        f"throughput cost) and {us(p.waited):.1f} µs waited for one by one (its latency)"
    )
    if p.graph is None:
        who = (
            "in a world of one gloo process (no peer: what a call costs Python and gloo's own path)"
            if world == 1
            else f"on {world} gloo processes over the loopback"
        )
        text = (
            f"An all-reduce of {format_size(p.nbytes)} costs {us(p.eager):.1f} µs per call back to back {who}, "
            f"{us(p.waited):.1f} µs waited for one by one: a CPU simulation, where a gloo call on CPU tensors returns "
            "only once it is done, so the two measure the same thing (their difference is a shared CPU's noise). A "
            "CUDA graph cannot hold a gloo collective: the committed 2× H200 numbers below split the α of a pair of "
            "GPUs."
        )
        return Verdict("overhead.allreduce", "info", text, numbers, where, "An all-reduce's fixed cost")
    share = 1 - p.graph / p.eager
    numbers.update(graph_us=us(p.graph), host_share=share, host_over_gpu=p.eager / p.graph)
    if world == 1:
        text = (
            f"{head} in a world of one; replayed from a CUDA graph, the GPU's own work per call, NCCL's one kernel for "
            f"a world of one (an average scales by 1/n), is {us(p.graph):.2f} µs, {p.eager / p.graph:.2g}× less: "
            "back to back that work hides under the host's, and a call is host-bound (Python, c10d's bookkeeping, "
            "NCCL's enqueue, the launch). One rank has no peer and no wire: notebook 10's α, fitted on two GPUs, adds "
            "the link and NCCL's latency between GPUs, which only two GPUs can show."
        )
    else:
        text = (
            f"{head} on {world} GPUs; replayed from a CUDA graph a call costs {us(p.graph):.2f} µs, NCCL's own work "
            f"with the link's latency, {p.eager / p.graph:.2g}× less than the host's pace: back to back that work "
            "hides under the host's, and a PyTorch call is host-bound."
        )
    return Verdict("overhead.allreduce", "info", text, numbers, where, "An all-reduce's fixed cost")


def reference_split():  # -> pandas.DataFrame
    """The committed 2× H200's all-reduce: the α a PyTorch call pays (notebook 10's fit of the sweep) against
    nccl-tests' whole all-reduce at its smallest size (its own, lighter host path)."""
    import pandas as pd

    from nvtutorial.chapters.ch01_hardware import report as bandwidth
    from nvtutorial.chapters.ch10_cost_model import report as costs

    fit = costs.reference_fit()
    smallest = min(bandwidth.reference_nccl_tests()["default"].rows, key=lambda r: r["size"])
    return pd.DataFrame(
        [
            {"what": "α of a PyTorch all-reduce (fit of the 1 KiB to 1 GiB sweep)", "µs": fit.link.alpha * 1e6},
            {
                "what": f"nccl-tests, a whole {format_size(smallest['size'])} all-reduce (in place)",
                "µs": smallest["ip_time_us"],
            },
        ]
    ).set_index("what")


# ------------------------------------------------------------------------------------------- the crossovers


def parameter_shapes(p: Params, width: int) -> list[tuple[str, tuple[int, ...]]]:
    """The lesson transformer's parameters at ``width``, in ``named_parameters()`` order, by arithmetic: the kernel
    need not import torch for them (seconds on a GPU machine). A test holds it to ``models.transformer``'s."""
    d, h = width, p.mlp_ratio * width
    block = [("norm1.weight", (d,)), ("norm1.bias", (d,))]
    block += [(f"attn.{w}.weight", (d, d)) for w in ("wq", "wk", "wv", "wo")]
    block += [("norm2.weight", (d,)), ("norm2.bias", (d,)), ("mlp.w1.weight", (h, d)), ("mlp.w2.weight", (d, h))]
    blocks = [(f"blocks.{i}.{name}", shape) for i in range(p.layers) for name, shape in block]
    ends = [("norm.weight", (d,)), ("norm.bias", (d,)), ("head.weight", (p.vocab, d))]
    return [("tok.weight", (p.vocab, d)), ("pos.weight", (p.seq_len, d)), *blocks, *ends]


def ddp_model(p: Params, width: int) -> tuple[int, int]:
    """``(parameters, DDP's buckets)`` of the lesson's transformer at ``width`` (notebook 10's bucket rule)."""
    from nvtutorial.chapters.ch08_ladder.report_model import Setup
    from nvtutorial.chapters.ch10_cost_model import model as costs
    from nvtutorial.chapters.ch10_cost_model import problems

    shapes = parameter_shapes(p, width)
    grads = problems.ddp_gradients(Setup(**p.config(width), global_batch=1, world=2), shapes)
    return sum(math.prod(shape) for _, shape in shapes), len(costs.ddp_buckets(grads))


@dataclasses.dataclass(frozen=True)
class Crossovers:
    """The crossovers between regimes (:func:`crossovers`), tokens or bytes; None where the run cannot place one."""

    doubling_tokens: float | None
    collective_bytes: float
    closed_form_tokens: float | None = None
    ddp_tokens: float | None = None
    closed_form_roof_tokens: float | None = None
    ddp_roof_tokens: float | None = None


def crossovers(calib: CalibrateRank, p: Params, link: Link, roof: float | None = None) -> Crossovers:
    """The crossovers between regimes, from this calibration (its sizes ``p``) and ``link`` (α, β):

    - ``doubling_tokens``: tokens per step where the doubling sweep's work meets its floor (None: it never left it);
    - ``closed_form_tokens`` (GPU): the same from the two sides of the small step, both at its width: the tokens at
      which its GPU side, growing with the tokens at the rate it reached, catches up with its CPU side;
    - ``ddp_tokens`` (GPU): tokens per GPU above which DDP's backward pass outlasts its all-reduces, α included, for
      the small step's model (fp32 gradients, two GPUs, its buckets; notebook 10's ``ddp_critical_tokens`` at the rate
      that step reached);
    - ``closed_form_roof_tokens``, ``ddp_roof_tokens`` (GPU, with ``roof``): the same two at the fp32 roof ``roof``
      (FLOP/s), the fastest rate possible, so upper estimates; the small step's rate, mostly per-kernel time rather
      than per-token work, gives the lower (review R7-7);
    - ``collective_bytes``: bytes above which an all-reduce costs its bytes rather than its α."""
    from nvtutorial.chapters.ch10_cost_model import model as costs

    points = doubling_points(calib)
    floor = model.overhead_floor(points)
    doubling = model.crossover_batch(points, floor) * p.seq_len if model.left_the_floor(points, floor) else None
    found = Crossovers(doubling, collective_bytes=costs.crossover_bytes(link))
    small = small_step(calib)
    if small is None or not small.gpu_s:
        return found
    tokens, flops = small.batch * p.seq_len, step_flops(small, p)
    n, buckets = ddp_model(p, small.width)
    found = dataclasses.replace(
        found,
        closed_form_tokens=model.overhead_crossover_tokens(small.host_s, flops / tokens, flops / small.gpu_s),
        ddp_tokens=costs.ddp_critical_tokens(costs.Roof(flops / small.gpu_s, 1.0), link, n_params=n, buckets=buckets),
    )
    if not roof:
        return found
    return dataclasses.replace(
        found,
        closed_form_roof_tokens=model.overhead_crossover_tokens(small.host_s, flops / tokens, roof),
        ddp_roof_tokens=costs.ddp_critical_tokens(costs.Roof(roof, 1.0), link, n_params=n, buckets=buckets),
    )


def small_step(calib: CalibrateRank) -> Sides | None:
    """The eager step's sides at the smallest width whose GPU side was measured (None on the CPU)."""
    measured = [s for s in calib.sides if s.gpu_s]
    return min(measured, key=lambda s: s.width) if measured else None


def regime_map(
    calib: CalibrateRank, p: Params, link: Link, link_where: str, where: str, roof: tuple[float, str] | None = None
):  # -> pandas.DataFrame
    """:func:`crossovers` as a table: each one, where it lies, what holds below it, where it was measured (the two
    that need a GPU's sides only where the calibration has them; with ``roof``, the fp32 roof and where it was
    measured, each of those two as a bracket from the small step's rate to the roof's)."""
    import pandas as pd

    found = crossovers(calib, p, link, roof[0] if roof else None)
    largest = max(b for b, _ in doubling_points(calib)) * p.seq_len
    rows = [
        (
            f"the doubling sweep (width {calib.doubling_width}) leaves its floor",
            _tokens(found.doubling_tokens, "per step") or f"above {largest:,} tokens per step (not reached)",
            "overhead-bound: more tokens per step cost almost nothing",
            where,
        )
    ]
    small = small_step(calib)
    if small is not None and found.closed_form_tokens is not None:
        n, buckets = ddp_model(p, small.width)
        rows.append(
            (
                f"the same in closed form at width {small.width}: CPU side × tokens ÷ GPU side, from the GPU's rate at "
                f"{small.batch * p.seq_len} tokens (its GPU side is mostly per-kernel time, which does not grow with "
                "the tokens until the kernels fill the GPU: a lower bound)"
                + " to the fp32 roof's (an upper bound)"
                * bool(roof),
                _bracket(found.closed_form_tokens, found.closed_form_roof_tokens, "per step"),
                "overhead-bound",
                where + (f"; roof: {roof[1]}" if roof else ""),
            )
        )
        rows.append(
            (
                f"DDP can hide all but its last bucket (width {small.width}: {n / 1e6:.3g} M parameters, {buckets} "
                "buckets, fp32 gradients, 2 GPUs, α included; from the rate at the small step's batch, a lower bound"
                + ", to the fp32 roof's, an upper bound)" * bool(roof)
                + ")" * (not roof),
                _bracket(found.ddp_tokens, found.ddp_roof_tokens, "per GPU"),
                "the gradients' all-reduces outlast the backward pass",
                f"rate: {where}; link: {link_where}" + (f"; roof: {roof[1]}" if roof else ""),
            )
        )
    rows.append(
        (
            "an all-reduce (2 GPUs) costs its bytes",
            format_size(found.collective_bytes or 0),
            "a call costs mostly α, whatever its size",
            link_where,
        )
    )
    return pd.DataFrame(rows, columns=["crossover", "above", "below it", "measured on"]).set_index("crossover")


def _tokens(value: float | None, per: str) -> str:
    return "" if value is None else f"{value:,.0f} tokens {per}"


def _bracket(low: float | None, high: float | None, per: str) -> str:
    return _tokens(low, per) if high is None or low is None else f"{low:,.0f} to {high:,.0f} tokens {per}"


def reference_fp32() -> tuple[float, str]:
    """The committed one-H200's fp32 multiply roof (notebook 10's calibration at the lesson's sizes) and where."""
    from nvtutorial.chapters.ch10_cost_model import report as costs

    run = costs.reference_device("calibrate")
    said = f"{run.label}: notebook 10's fp32 roof, the committed run in reference/h200x1"
    return costs.calibrated(run).roofs["float32"].flops, said


def reference_link() -> tuple[Link, str]:
    """The committed 2× H200's all-reduce α and β (notebook 10's fit) and where they were measured."""
    from nvtutorial.chapters.ch10_cost_model import report as costs

    return costs.reference_fit().link, costs.reference_where()


# ------------------------------------------------------------------------------------------- the committed run


@dataclasses.dataclass(frozen=True)
class Committed:
    """A machine's newest committed one-GPU runs of notebook 11: its ``calibrate`` and ``step`` runs, and its folder
    name under ``reference/`` (``kind``)."""

    calibrate: RunResult
    step: RunResult
    kind: str


def committed(root: Path = REFERENCE) -> Committed | None:
    """The newest committed one-GPU runs of notebook 11 (``reference/<machine>/runs-11/*/result.json``): the machine
    whose newest ``step`` run is the newest, its newest ``step`` and ``calibrate`` runs and the machine's folder name
    (``kind``); None when no machine has both."""
    runs: dict[tuple[str, str], RunResult] = {}
    for path in sorted(root.glob("*/runs-11/*/result.json"), key=lambda p: p.parent.name):
        run = RunResult.load(path)
        run.run_dir = path.parent
        if Path(run.workload).name == "overhead" and run.ok:
            runs[(path.parents[2].name, run.params.get("part", "calibrate"))] = run
    complete = [
        Committed(runs[(kind, "calibrate")], step, kind)
        for (kind, part), step in runs.items()
        if part == "step" and (kind, "calibrate") in runs
    ]
    return max(complete, key=lambda found: found.step.run_dir.name, default=None)


def committed_where(run: RunResult, kind: str) -> str:
    return f"{run.label}: the committed run in reference/{kind}, not this machine"
