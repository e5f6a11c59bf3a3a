"""Notebook 10's capstone: its task, the strategies' memory and step time by the model, the speed of light, the
course's own choice and whether a run fitted its budget; with the transformer's arithmetic the answer keys share
(its parameters, a block's bytes, its forward FLOPs, DDP's gradients in backward order). Re-exported by
``problems.py``, where the notebook reads them; it imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from nvtutorial.chapters.ch08_ladder import report_model as ladder_model
from nvtutorial.chapters.ch10_cost_model import model, report, schema
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult, label_of

# --------------------------------------------------------------------------------------------------- the transformer


def _params(s: ladder_model.Setup) -> int:
    return sum(math.prod(shape) for _, shape in s.shapes())


def _block_bytes(s: ladder_model.Setup) -> int:
    return 4 * sum(math.prod(shape) for name, shape in s.shapes() if name.startswith("blocks.0."))


def ddp_gradients(
    s: ladder_model.Setup, shapes: Sequence[tuple[str, tuple[int, ...]]] | None = None
) -> list[tuple[float, float]]:
    """``(ready, bytes)`` per fp32 gradient in the order the backward pass produces them (the reverse of the
    parameters'), ``ready`` the share of the backward pass done by then, counted in FLOPs: the head's and the final
    norm's once the pass has gone through the head; within a block, each tensor's once the pass has gone through
    its share of the block (a multiply's FLOPs are proportional to its weight's size); the embeddings' (lookups:
    no FLOPs) at the very end. ``model.ddp_buckets`` packs them. ``shapes``: the parameters' (``s.shapes()`` when
    None, which builds the model on torch's meta device)."""
    shapes = list(shapes if shapes is not None else s.shapes())
    block = model.forward_flops(1, s.seq_len, s.dim, s.mlp_ratio * s.dim, 1, 0)
    head = model.forward_flops(1, s.seq_len, s.dim, s.mlp_ratio * s.dim, 0, s.vocab)
    total = head + s.layers * block
    block_numel = sum(math.prod(shape) for name, shape in shapes if name.startswith("blocks.0."))
    out: list[tuple[float, float]] = []
    current, within = -1, 0  # the block the pass is in, and the elements of its tensors produced so far
    for name, shape in reversed(shapes):
        if name.startswith("blocks."):
            i = int(name.split(".")[1])
            within = within + math.prod(shape) if i == current else math.prod(shape)
            current = i
            ready = head + (s.layers - 1 - i) * block + block * within / block_numel
        elif name.split(".")[0] in ("head", "norm"):
            ready = head
        else:
            ready = total
        out.append((ready / total, 4.0 * math.prod(shape)))
    return out


def _forward(s: ladder_model.Setup, tokens: int, vocab: int | None = None, layers: int | None = None) -> float:
    return model.forward_flops(
        tokens,
        s.seq_len,
        s.dim,
        s.mlp_ratio * s.dim,
        s.layers if layers is None else layers,
        s.vocab if vocab is None else vocab,
    )


# --------------------------------------------------------------------------------------------------- the capstone


@dataclasses.dataclass(frozen=True)
class Task:
    """The capstone: train this transformer on ``world`` ranks, each within ``budget_bytes`` of device memory."""

    config: Mapping[str, int]
    global_batch: int
    budget_bytes: float
    microbatches: int
    world: int = 2

    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int], budget_bytes: float, microbatches: int, world: int = 2) -> Task:
        """From a parameters cell's model sizes (the transformer's and ``global_batch``)."""
        config = {k: v for k, v in sizes.items() if k != "global_batch"}
        return cls(config, sizes["global_batch"], budget_bytes, microbatches, world)

    def setup(self) -> ladder_model.Setup:
        return ladder_model.Setup(**self.config, global_batch=self.global_batch, world=self.world)


def _known(strategy: str) -> None:
    if strategy not in schema.STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; the strategies are {', '.join(schema.STRATEGIES)}")


class StrategyError(ValueError):
    """A capstone pick that is no strategy: shown in a notebook as its one line, without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"StrategyError: {self}"]


def capstone_strategies(mine: object, best: str) -> list[str]:
    """What the capstone trains: your pick (None: none) and the course's ``best``, once each. A pick that is not a
    strategy is refused here, before anything launches, with the nearest name and every valid one."""
    if mine is not None and mine not in schema.STRATEGIES:
        import difflib

        near = difflib.get_close_matches(str(mine), schema.STRATEGIES, n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise StrategyError(
            f"my_strategy={mine!r} is not a strategy.{hint} Pick one of {', '.join(schema.STRATEGIES)}, or None."
        )
    return list(dict.fromkeys(s for s in (mine, best) if isinstance(s, str) and s))


def _stage_shapes(s: ladder_model.Setup, stage: int, stages: int) -> list[tuple[str, tuple[int, ...]]]:
    first, last = report.stage_blocks(s.layers, stage, stages)
    keep = []
    for name, shape in s.shapes():
        if name.startswith("blocks."):
            if first <= int(name.split(".")[1]) < last:
                keep.append((name, shape))
        elif (
            name.split(".")[0] in ("tok", "pos")
            and stage == 0
            or name.split(".")[0] in ("norm", "head")
            and stage == stages - 1
        ):
            keep.append((name, shape))
    return keep


def peak(task: Task, strategy: str, rank: int) -> float:
    """The memory model's device peak of ``rank`` under ``strategy`` (notebook 08's for its rungs; for a pipeline
    stage its model state, the activations of the micro-batches it holds at once, and the logits' gradients)."""
    _known(strategy)
    s = task.setup()
    if strategy in schema.LADDER_STRATEGIES:
        return ladder_model.rank_memory(s, strategy, rank).device_peak
    schedule = strategy.removeprefix("pipeline_")
    shapes = _stage_shapes(s, rank, task.world)
    n = sum(math.prod(sh) for _, sh in shapes)
    state = 16 * n + 4 * len(shapes)
    mem = report.pipeline_stage_memory(s, rank, task.world, task.microbatches)
    held = model.in_flight(rank, task.world, task.microbatches, schedule)
    return state + held * mem.activations + mem.transient


def fits(task: Task, strategy: str) -> bool:
    return all(peak(task, strategy, r) <= task.budget_bytes for r in range(task.world))


@dataclasses.dataclass(frozen=True)
class StepTime:
    """The model's step time of a strategy, in seconds, by part (:func:`strategy_time`)."""

    compute: float
    """At the fp32 roof."""
    exposed: float
    """The communication nothing hides."""
    optimizer: float
    """Adam's step on what the rank holds."""

    @property
    def total(self) -> float:
        return self.compute + self.exposed + self.optimizer


def strategy_time(task: Task, strategy: str, cal: report.Calibrated) -> StepTime:
    """The model's step time of ``strategy`` in seconds: compute at the fp32 roof, the exposed communication, Adam."""
    _known(strategy)
    s, n, roof = task.setup(), task.world, cal.roofs["float32"]
    tokens = s.global_batch * s.seq_len
    forward, blocks_fwd = _forward(s, tokens), _forward(s, tokens, vocab=0)
    compute = 3 * forward / n / roof.flops
    params = _params(s)
    ar, ag, rs = cal.link("all_reduce"), cal.link("all_gather"), cal.link("reduce_scatter")
    exposed, optimizer = 0.0, model.adam_time(math.ceil(params / n), roof)
    if strategy in ("ddp", "zero1"):
        buckets = model.ddp_buckets(ddp_gradients(s))
        _, exposed = model.ddp_backward(2 * forward / n / roof.flops, buckets, ar, n)
        if strategy == "ddp":
            optimizer = model.adam_time(params, roof)
        else:  # each owner broadcasts its updated share after the step (the all-reduce's α and β stand in)
            exposed += model.collective_time(4 * params, ar, "broadcast", n)
    elif strategy.startswith("fsdp"):
        block = _block_bytes(s)
        root = 4 * params - s.layers * block
        c_fwd = blocks_fwd / s.layers / n / roof.flops
        per = model.fsdp_block(block, ag, rs, n)
        gathers_back = 0.0 if strategy == "fsdp_zero2" else per.all_gather
        # a block's backward computes twice its forward, three times when it recomputes the forward (checkpointing)
        c_back = (3 if strategy == "fsdp_checkpointing" else 2) * c_fwd
        exposed = (
            model.collective_time(root, ag, "all_gather", n)
            + per.all_gather
            + per.reduce_scatter
            + model.collective_time(root, rs, "reduce_scatter", n)
            + s.layers * max(0.0, per.all_gather - c_fwd)
            + s.layers * max(0.0, gathers_back + per.reduce_scatter - c_back)
        )
        if strategy == "fsdp_checkpointing":
            compute += blocks_fwd / n / roof.flops  # every block's forward again in backward
    elif strategy == "tensor_parallel":
        compute = 3 * (blocks_fwd / n + (forward - blocks_fwd)) / roof.flops  # the head stays whole on both ranks
        exposed = s.layers * model.tp_block(tokens, s.dim, ar, 4, n)
        held = sum(ladder_model.local_numel(sh, ladder_model.tp_dim(nm), n, 0) for nm, sh in s.shapes())
        optimizer = model.adam_time(held, roof)
    else:  # a pipeline
        stage_s = []
        for stage in range(n):
            first, last = report.stage_blocks(s.layers, stage, n)
            f = _forward(s, tokens, vocab=s.vocab if stage == n - 1 else 0, layers=last - first)
            stage_s.append(3 * f / task.microbatches / roof.flops)
        boundary = model.collective_time(4 * tokens * s.dim / task.microbatches, ar, "sendrecv", n)
        compute = model.pipeline_time(stage_s, task.microbatches)
        exposed = 2 * (n - 1) * boundary  # filling and draining wait for a micro-batch's activations or gradients
        optimizer = max(
            model.adam_time(sum(math.prod(sh) for _, sh in _stage_shapes(s, st, n)), roof) for st in range(n)
        )
    return StepTime(compute, exposed, optimizer)


def bytes_by_kind(task: Task, strategy: str) -> dict[str, float]:
    """Bytes a rank sends per step under ``strategy``, per kind of collective: notebook 08's ring costing, or a
    pipeline stage's activations (forward) and their gradients (backward) across its boundaries (``sendrecv``)."""
    _known(strategy)
    s = task.setup()
    if strategy in schema.LADDER_STRATEGIES:
        per_rank = [ladder_model.sent_per_step(s, strategy, r) for r in range(task.world)]
        return max(per_rank, key=lambda kinds: sum(kinds.values()))
    boundaries = 1 if task.world == 2 else 2
    return {"sendrecv": float(boundaries * 4 * s.global_batch * s.seq_len * s.dim)}


def bytes_sent(task: Task, strategy: str) -> float:
    """Bytes a rank sends per step under ``strategy`` (:func:`bytes_by_kind`, all kinds)."""
    return sum(bytes_by_kind(task, strategy).values())


def ideal_time(task: Task, strategy: str, cal: report.Calibrated) -> float:
    """The speed of light of ``strategy`` on this machine (``model.ideal_step_time``): the step's necessary FLOPs
    (three forward passes, no recomputation) shared by the ranks at the fp32 roof, each kind of byte at its own
    collective's β (a broadcast's and a send's at the all-reduce's: never swept), perfectly overlapped, then
    Adam's share at the memory roof."""
    s = task.setup()
    flops = 3 * _forward(s, s.global_batch * s.seq_len) / task.world
    comm = sum(n / cal.links.get(k, cal.link("all_reduce")).beta for k, n in bytes_by_kind(task, strategy).items())
    return model.ideal_step_time(flops, comm, math.ceil(_params(s) / task.world), cal.roofs["float32"])


def strategy_table(task: Task, cal: report.Calibrated, strategies: Sequence[str] = schema.STRATEGIES):
    """Per strategy: the memory model's peak on each rank against the budget, the model's step, the speed of light."""
    import pandas as pd

    rows = []
    for strategy in strategies:
        t = strategy_time(task, strategy, cal)
        rows.append(
            {
                "strategy": strategy,
                "peak (MB, largest rank)": max(peak(task, strategy, r) for r in range(task.world)) / 1e6,
                "fits the budget": fits(task, strategy),
                "model step (ms)": t.total * 1e3,
                "compute": t.compute * 1e3,
                "exposed comm.": t.exposed * 1e3,
                "Adam": t.optimizer * 1e3,
                "speed of light (ms)": ideal_time(task, strategy, cal) * 1e3,
            }
        )
    return pd.DataFrame(rows).set_index("strategy")


def best_strategy(task: Task, cal: report.Calibrated, strategies: Sequence[str] = schema.STRATEGIES) -> str:
    """The course's choice: of the strategies that fit the budget, the one the model expects to be fastest."""
    fitting = [s for s in strategies if fits(task, s)]
    if not fitting:
        raise ValueError(f"no strategy fits a budget of {task.budget_bytes / 1e6:g} MB: raise it or shrink the model")
    return min(fitting, key=lambda s: strategy_time(task, s, cal).total)


def choice_verdict(
    task: Task, cal: report.Calibrated, strategies: Sequence[str] = schema.STRATEGIES, target: float = report.TARGET
) -> Verdict:
    """How far the model's choice is ahead of the next strategy that fits: ``info`` either way. Within the model's
    target error (``report.TARGET``) the two are a tie, and the run, not the model, decides between them."""
    best = best_strategy(task, cal, strategies)
    times = {s: strategy_time(task, s, cal).total for s in strategies if fits(task, s)}
    key, where = "costmodel.capstone.choice", f"device: {cal.device_where}; pair: {cal.link_where}"
    if len(times) == 1:
        return Verdict(
            key,
            "info",
            f"Only {best} fits the budget of {task.budget_bytes / 1e6:.4g} MB: the model's choice is forced "
            f"({times[best] * 1e3:.4g} ms per step by the model).",
            {"best": best, "margin": None},
            where,
        )
    second = min((s for s in times if s != best), key=times.__getitem__)
    margin = times[second] / times[best] - 1
    numbers = {"best": best, "second": second, "margin": margin, "target": target}
    head = (
        f"Of the strategies that fit, the model expects {best} at {times[best] * 1e3:.4g} ms per step and "
        f"{second} at {times[second] * 1e3:.4g} ms: {margin:.1%} apart"
    )
    if margin <= target:
        text = f"{head}, within the model's target error of {target:.0%}: a tie, which the run decides, not the model."
    else:
        text = f"{head}, more than the model's target error of {target:.0%}: the model's choice is clear."
    return Verdict(key, "info", text, numbers, where)


def fit_verdict(result: RunResult, task: Task, strategy: str) -> Verdict:
    """Pass when ``strategy`` fits the budget: on a GPU the run's measured peak (the budget was enforced: running
    out of memory fails); on the CPU, which has no device memory to measure, the memory model's peak (said so)."""
    runs = report.capstone_runs(result)[strategy]
    key = f"costmodel.capstone.fits.{strategy}"
    budget = task.budget_bytes
    if any(not r.ok for r in runs):
        return Verdict(
            key,
            "fail",
            f"{strategy} ran out of memory within the budget of {budget / 1e6:.4g} MB.",
            {"budget": budget},
            label_of(result),
        )
    measured = [r.peak_allocated for r in runs if r.peak_allocated is not None]
    if len(measured) == len(runs):  # every rank measured its peak (a GPU)
        worst = max(measured)
        ok = worst <= budget
        return Verdict(
            key,
            "pass" if ok else "fail",
            f"{strategy}'s largest measured peak is {worst / 1e6:.4g} MB, "
            f"{'within' if ok else 'over'} the budget of {budget / 1e6:.4g} MB.",
            {"peak": worst, "budget": budget},
            label_of(result),
        )
    predicted = max(peak(task, strategy, r) for r in range(task.world))
    ok = predicted <= budget
    return Verdict(
        key,
        "pass" if ok else "fail",
        f"By the memory model (a CPU has no device memory to measure), "
        f"{strategy} peaks at {predicted / 1e6:.4g} MB, {'within' if ok else 'over'} the budget of "
        f"{budget / 1e6:.4g} MB.",
        {"peak_model": predicted, "budget": budget},
        label_of(result),
    )


@dataclasses.dataclass(frozen=True)
class CapstoneRecord:
    """What the capstone writes (``lab.save_capstone``, as JSON in this field order): the machine, where the
    calibration was measured (``device``, ``link``), the task, the strategy, the ideal and measured step, the score."""

    machine: str
    calibration: Mapping[str, str]
    task: Mapping[str, float]
    strategy: str
    score: float | None
    ideal_s: float | None
    measured_s: float | None


def capstone_record(
    result: RunResult, task: Task, strategy: str, cal: report.Calibrated, score: Verdict
) -> CapstoneRecord:
    """What the capstone writes: the machine, the task, the strategy, the ideal and measured step, the score."""
    return CapstoneRecord(
        machine=label_of(result),
        calibration={"device": cal.device_where, "link": cal.link_where},
        task={
            **task.config,
            "global_batch": task.global_batch,
            "budget_bytes": task.budget_bytes,
            "microbatches": task.microbatches,
            "world": task.world,
        },
        strategy=strategy,
        score=score.numbers.get("score"),
        ideal_s=score.numbers.get("ideal_s"),
        measured_s=score.numbers.get("measured_s"),
    )
