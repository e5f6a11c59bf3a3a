"""Notebook 08's arithmetic and verdicts at their rules, in this process
(``nvtutorial/chapters/ch08_ladder/report_model.py``, ``nvtutorial/chapters/ch08_ladder/report.py``).

The memory model's arithmetic is recomputed here by hand on small shapes (the chunks, ZeRO-1's owners, Adam's bytes,
activations, the transient estimate, the search for the largest model); the verdicts are fed results built from the
model and then perturbed on both sides of each tolerance. What tensor parallelism sends, the link experiment and the
time table are being rewritten (review of 2026-12-01, T1-T4) and are left to tests/test_ladder.py, which also checks
the model against a real run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from nvtutorial.chapters.ch08_ladder import report as L
from nvtutorial.chapters.ch08_ladder import report_model as M
from nvtutorial.chapters.ch08_ladder import schema
from nvtutorial.results import RunResult, typed

S = M.Setup(vocab=16, seq_len=4, dim=8, heads=2, layers=2, mlp_ratio=2, global_batch=4, world=2)
SHAPES = S.shapes()
NON_TP = [r for r in M.RUNGS if r != "tensor_parallel"]


# --------------------------------------------------------------------------- the arithmetic
@pytest.mark.parametrize(
    "rows, world, expected",
    [(10, 2, [5, 5]), (7, 2, [4, 3]), (7, 3, [3, 3, 1]), (1, 2, [1, 0]), (5, 4, [2, 2, 1, 0]), (4, 4, [1, 1, 1, 1])],
)
def test_chunk_rows_is_torch_chunk(rows, world, expected):
    import torch

    assert [M.chunk_rows(rows, world, r) for r in range(world)] == expected
    assert expected == [c.shape[0] for c in torch.empty(rows).chunk(world)] + [0] * (
        world - len(torch.empty(rows).chunk(world))
    )
    assert M.local_numel((rows, 3), 0, world, 0) == expected[0] * 3
    assert M.local_numel((3, rows), 1, world, world - 1) == 3 * expected[-1]
    assert M.local_numel((rows, 3), None, world, 0) == rows * 3 and M.local_numel((), 0, world, 0) == 1


def test_zero1_owners_largest_first_to_the_least_loaded():
    shapes = [("a", (3,)), ("b", (10,)), ("c", (4,)), ("d", (4,)), ("e", (1,))]
    # 10 → rank 0; 4 (c) → rank 1; 4 (d) → rank 1 (4 < 10); 3 → rank 1 (8 < 10); 1 → rank 0 (10 < 11)
    assert M.zero1_owners(shapes, 2) == [1, 0, 1, 1, 0]
    assert M.zero1_owners(shapes, 3) == [1, 0, 1, 2, 2]  # 10 → 0, 4 → 1, 4 → 2, 3 → 1 (4 ≤ 4: the first), 1 → 2
    assert M.zero1_owners(shapes, 1) == [0] * 5


def test_model_state_by_hand():
    shapes = [("w", (6, 4)), ("b", (6,)), ("x", (3, 2))]
    n = 24 + 6 + 6
    assert M.model_state("ddp", shapes, 2, 1) == {"params": 4 * n, "grads": 4 * n, "optimizer": 8 * n + 4 * 3}
    owners = M.zero1_owners(shapes, 2)  # w → 0, b and x → 1
    assert owners == [0, 1, 1]
    assert M.model_state("zero1", shapes, 2, 0) == {"params": 4 * n, "grads": 4 * n, "optimizer": 8 * 24 + 4}
    assert M.model_state("zero1", shapes, 2, 1)["optimizer"] == 8 * 12 + 2 * 4
    local = 12 + 3 + 4  # rows 3, 3 and 2 (of 3) on rank 0
    for rung in M.FSDP:
        assert M.model_state(rung, shapes, 2, 0) == {
            "params": 4 * local,
            "grads": 4 * local,
            "optimizer": 8 * local + 12,
        }
    assert M.model_state("fsdp_zero3", shapes, 2, 1)["params"] == 4 * (12 + 3 + 2)
    with pytest.raises(ValueError, match="unknown rung 'zero4'"):
        M.model_state("zero4", shapes, 2, 0)


def test_activations_and_transient_by_hand():
    t = S.global_batch // S.world * S.seq_len  # 8 tokens per rank
    d, h = S.dim, S.mlp_ratio * S.dim
    block = 4 * t * (4 * d + 4 * d + 2 * h + 4 + S.heads)
    assert M.block_activations(S, "ddp") == block
    top = 4 * t * (2 * d + 2 + S.vocab) + 8 * t + 4
    ids = 8 * (S.global_batch * (S.seq_len + 1) + S.seq_len)
    assert M.activations(S, "ddp") == S.layers * block + top + ids
    assert M.activations(S, "fsdp_checkpointing") == S.layers * 4 * t * d + top + ids
    assert M.activations(S, "fsdp_offload") == M.activations(S, "fsdp_checkpointing")
    assert S.tokens("ddp") == t and S.tokens("tensor_parallel") == S.global_batch * S.seq_len
    root, blk = M._group_bytes(SHAPES)
    total = sum(4 * math.prod(sh) for _, sh in SHAPES)
    assert root + S.layers * blk == total
    logits = 2 * 4 * t * S.vocab
    assert M.transient(S, "ddp", SHAPES) == M.transient(S, "zero1", SHAPES) == logits
    assert M.transient(S, "fsdp_zero2", SHAPES) == logits + total + 2 * blk
    assert M.transient(S, "fsdp_zero3", SHAPES) == logits + root + 2 * blk + 2 * blk
    assert M.transient(S, "fsdp_checkpointing", SHAPES) == logits + root + 4 * blk + block
    assert M.transient(S, "fsdp_offload", SHAPES) == M.transient(S, "fsdp_checkpointing", SHAPES)


def test_rank_memory_and_the_peak():
    for rung in NON_TP:
        m = M.rank_memory(S, rung, 1)
        state = M.model_state(rung, SHAPES, 2, 1)
        assert (m.params, m.grads, m.optimizer) == (state["params"], state["grads"], state["optimizer"])
        assert m.model_state == sum(state.values()) and m.on_host is (rung == "fsdp_offload")
        assert m.device_peak == (0 if m.on_host else m.model_state) + m.activations + m.transient
        assert m == M.rank_memory(S, rung, 1, SHAPES)


def test_padding_and_the_bytes_of_ddp_zero1_and_fsdp():
    assert M._padded((7, 3), 2) == 8 * 3 and M._padded((8, 3), 2) == 24 and M._padded((), 2) == 1
    total = sum(4 * math.prod(sh) for _, sh in SHAPES)
    assert M.sent_per_step(S, "ddp", 0) == {"all_reduce": total}  # 2 (W-1)/W = 1 on 2 ranks
    owners = M.zero1_owners(SHAPES, 2)
    for rank in (0, 1):
        forwarded = sum(4 * math.prod(sh) for (_, sh), o in zip(SHAPES, owners) if rank != (o - 1) % 2)
        assert M.sent_per_step(S, "zero1", rank) == {"all_reduce": total, "broadcast": forwarded}
    padded = sum(4 * M._padded(sh, 2) for _, sh in SHAPES)
    blocks = sum(4 * M._padded(sh, 2) for n, sh in SHAPES if n.startswith("blocks."))
    assert M.sent_per_step(S, "fsdp_zero2", 0) == {"all_gather": padded / 2, "reduce_scatter": padded / 2}
    for rung in ("fsdp_zero3", "fsdp_checkpointing", "fsdp_offload"):
        assert M.sent_per_step(S, rung, 1) == {"all_gather": (padded + blocks) / 2, "reduce_scatter": padded / 2}
    with pytest.raises(ValueError, match="unknown rung"):
        M.sent_per_step(S, "nope", 0)


def test_with_layers_rebuilds_the_models_shapes():
    one = dataclasses.replace(S, layers=1).shapes()
    assert M.with_layers(one, 2) == SHAPES
    assert M.with_layers(one, 3) == dataclasses.replace(S, layers=3).shapes()
    assert [n for n, _ in M.with_layers(one, 0)] == [n for n, _ in one if not n.startswith("blocks.")]


@pytest.mark.parametrize("rung", NON_TP)
def test_largest_is_the_last_that_fits(rung):
    one = dataclasses.replace(S, layers=1).shapes()

    def peak(layers):
        t = dataclasses.replace(S, layers=layers)
        shapes = M.with_layers(one, layers)
        return max(M.rank_memory(t, rung, r, shapes).device_peak for r in range(2)), max(
            M.rank_memory(t, rung, r, shapes).model_state for r in range(2)
        )

    budget = peak(5)[0]
    found = M.largest(S, rung, budget, host_budget=1e12)
    assert found == 5 and peak(6)[0] > budget
    assert M.largest(S, rung, budget - 1, 1e12) == 4
    assert M.largest(S, rung, peak(1)[0] - 1, 1e12) == 0
    assert M.largest(S, rung, 1e15, 1e15, limit=40) == 40  # the search stops at its limit
    if rung == "fsdp_offload":  # its model state must also fit the host
        assert M.largest(S, rung, 1e15, peak(3)[1], limit=40) == 3


# --------------------------------------------------------------------------- the run's verdicts
def held(rung, rank, shapes=SHAPES, extra=0):
    """The model's bytes of ``rung`` on ``rank`` as the run counts them (``extra`` more parameter bytes)."""
    state = M.model_state(rung, shapes, 2, rank)
    return schema.Held(
        params=state["params"] + extra, grads=state["grads"], optimizer=state["optimizer"], param_tensors=len(shapes)
    )


def rung_record(rung, rank, **extra):
    return dataclasses.replace(
        schema.Rung(
            rung=rung,
            layers=S.layers,
            held=held(rung, rank),
            losses=(1.0, 0.9, 0.8),
            gradients=schema.Gradients(max_rel_diff=1e-7, worst="head.weight", norm_ratio=1.0, missing=()),
            step_s=(0.1, 0.12),
            step_s_median=0.11,
            sent_per_step=sum(M.sent_per_step(S, rung, rank, SHAPES).values()),
            collectives={"all_reduce": schema.Collective(calls=1, bytes=0, sent=0.0)},
            nvlink_tx_bytes_per_step=None,
            nvlink_note="not available: no GPU (CPU run)",
        ),
        **extra,
    )


CONFIG = schema.ModelConfig(
    **{f.name: getattr(S, f.name) for f in dataclasses.fields(S) if f.name not in ("global_batch", "world")}
)


def ranks_of(rungs=NON_TP, **per_rung):
    """Two ranks' typed results of a ladder of ``rungs``, each rung's record changed by ``per_rung[rung]``."""
    return [
        schema.Rank(
            config=CONFIG,
            global_batch=S.global_batch,
            world_size=2,
            rank=rank,
            device="cpu",
            reference=(1.0, 0.9, 0.8),
            rungs=tuple(rung_record(r, rank, **per_rung.get(r, {})) for r in rungs),
        )
        for rank in range(2)
    ]


def run_of(ranks, env=None):
    """A run whose ranks returned ``ranks``, as the launcher collects it (each rank's result as JSON)."""
    return RunResult(
        workload="ladder",
        params={},
        returncode=0,
        wall_s=1.0,
        first_output_s=None,
        env=env,
        ranks=[json.loads(json.dumps(dataclasses.asdict(r))) for r in ranks],
        run_dir=Path("."),
        log_files={},
        log_tail=[],
    )


def result(rungs=NON_TP, **per_rung):
    return run_of(ranks_of(rungs, **per_rung))


def test_records_and_counted_state():
    r = result()
    assert L._rungs(L.ranks(r)) == NON_TP and L.rung_record(r, 1, "zero1").rung == "zero1"
    assert L.counted_state(r, "zero1", 1) == sum(M.model_state("zero1", SHAPES, 2, 1).values())
    with pytest.raises(KeyError, match="the run has no rung 'tensor_parallel'; it ran ddp, zero1"):
        L.rung_record(r, 0, "tensor_parallel")
    table = L.loss_table(r)
    assert list(table.columns) == ["one process"] + [L.LABELS[x] for x in NON_TP] and table.index.name == "step"
    no_reference = run_of([dataclasses.replace(m, reference=None) for m in ranks_of()])
    assert list(L.loss_table(no_reference).columns) == [L.LABELS[x] for x in NON_TP]
    with pytest.raises(ValueError, match="rank 0 trained no one-process reference"):
        L.loss_verdict(no_reference, 1e-3)


@pytest.mark.parametrize("off, status", [(0.0, "pass"), (0.99e-3, "pass"), (1.01e-3, "fail")])
def test_the_loss_verdict_at_its_tolerance(off, status):
    r = result(fsdp_zero3={"losses": (1.0, 0.9 + off, 0.8)})
    v = L.loss_verdict(r, 1e-3)
    assert v.status == status and v.numbers["max_abs_diff"]["fsdp_zero3"] == pytest.approx(off)
    assert v.numbers["tolerance"] == 1e-3 and v.numbers["max_abs_diff"]["ddp"] == 0.0


def grads(max_rel_diff, norm_ratio, missing=()):
    return {"gradients": schema.Gradients(max_rel_diff, "head.weight", norm_ratio, tuple(missing))}


def test_the_gradient_verdict():
    ok = L.gradient_verdict(result(), 1e-5)
    assert ok.status == "pass" and ok.numbers["max_rel_diff"]["ddp"] == 1e-7 and ok.numbers["missing"] == []
    bad = L.gradient_verdict(result(zero1=grads(1.0, 2.0)), 1e-5)
    assert bad.status == "fail" and bad.numbers["norm_ratio"]["zero1"] == 2.0
    assert "norm 2× the reference's" in bad.text
    edge = L.gradient_verdict(result(zero1=grads(1e-5, 1.0)), 1e-5)
    assert edge.status == "pass"
    missing = L.gradient_verdict(result(ddp=grads(0.0, 1.0, ["w"])), 1)
    assert missing.status == "fail" and missing.numbers["missing"] == ["DDP: w", "DDP: w"]
    none = L.gradient_verdict(result(ddp={"gradients": None}), 1e-5)
    assert none.status == "info" and none.numbers == {}
    both = ranks_of(zero1=grads(0.0, 0.5))
    both[1] = dataclasses.replace(
        both[1],
        rungs=tuple(dataclasses.replace(g, **grads(0.0, 1.5)) if g.rung == "zero1" else g for g in both[1].rungs),
    )
    assert L.gradient_verdict(run_of(both), 1e-5).numbers["norm_ratio"]["zero1"] == 0.5  # the one furthest from 1 (log)
    zero_norm = L.gradient_verdict(result(zero1=grads(1.0, None)), 1e-5)  # the reference's gradients were all 0
    assert zero_norm.status == "fail" and "norm n/a× the reference's" in zero_norm.text
    assert "Every rung averages its gradients like one process" in ok.text and "world of one" not in ok.text
    one = L.gradient_verdict(run_of(ranks_of()[:1]), 1e-5)  # review M6: one rank cannot tell a sum from a mean
    assert one.status == "pass" and "averages" not in one.text
    assert "A world of one: this checks each rung's wrapping and recomputation, not its averaging" in one.text


def test_the_memory_verdict_is_byte_exact():
    assert L.memory_verdict(result()).numbers == {"mismatches": 0, "checked": 12}
    more = dataclasses.replace(held("fsdp_zero3", 0), optimizer=held("fsdp_zero3", 0).optimizer + 1)
    v = L.memory_verdict(result(fsdp_zero3={"held": more}))
    assert v.status == "fail" and v.numbers == {"mismatches": 2, "checked": 12}  # both ranks got rank 0's bytes
    assert "FSDP2 (ZeRO-3) rank 0 optimizer: counted" in v.text
    table = L.memory_check_table(result())
    assert bool((table["counted − model (bytes)"] == 0).all()) and "peak" not in table


def test_the_peak_verdict():
    assert L.peak_verdict(result()).status == "info" and L.peak_verdict(result()).numbers == {}
    peaks = {}
    for rung in ("ddp", "zero1"):
        model = max(M.rank_memory(S, rung, r).device_peak for r in range(2))
        peaks[rung] = {"peak_allocated": model * 1.1, "allocated_after_step": 1, "forward_added": 1}
    v = L.peak_verdict(result(rungs=("ddp", "zero1"), **peaks))
    assert v.numbers["gap"] == {"ddp": pytest.approx(0.1), "zero1": pytest.approx(0.1)} and v.numbers["small"] is True
    assert "the gap says little" in v.text
    assert L._small_for_a_gpu(S) and not L._small_for_a_gpu(M.Setup(32000, 2048, 4096, 32, 24, 4, 8))
    assert "peak gap" in L.memory_check_table(result(rungs=("ddp", "zero1"), **peaks))


def test_the_bytes_verdict_compares_the_recorded_with_the_model():
    v = L.bytes_verdict(result(rungs=("ddp", "zero1", "fsdp_zero3")))
    assert v.status == "pass" and v.numbers["factors"]["ddp"] == 1.0 and v.numbers["mismatches"] == 0
    ddp = sum(M.sent_per_step(S, "ddp", 0, SHAPES).values())
    assert v.numbers["factors"]["fsdp_zero3"] == pytest.approx(sum(M.sent_per_step(S, "fsdp_zero3", 0).values()) / ddp)
    off = rung_record("zero1", 0).sent_per_step
    assert L.bytes_verdict(result(rungs=("zero1",), zero1={"sent_per_step": off + 0.4})).status == "pass"
    bad = L.bytes_verdict(result(rungs=("zero1",), zero1={"sent_per_step": off + 1.0}))
    assert bad.status == "fail" and bad.numbers["mismatches"] == 2
    table = L.bytes_table(result(rungs=("ddp",), ddp={"nvlink_tx_bytes_per_step": 2 * ddp}))
    assert table["NVML ÷ ring cost"].iloc[0] == 2.0 and table["collectives"].iloc[0] == "all_reduce ×1"


def test_the_zero1_prediction():
    measured = L.counted_state(result(), "zero1", 0) / 1e6
    assert L.zero1_prediction(result(), measured * 1.049).status == "right"
    assert L.zero1_prediction(result(), measured * 1.051).status == "close"
    assert L.zero1_prediction(result(), measured * 1.249).status == "close"
    assert L.zero1_prediction(result(), measured * 1.251).status == "off"
    assert L.zero1_prediction(result(), measured * 0.79).status == "off"
    assert L.zero1_prediction(result(), None).numbers["measured"] == measured


def checkpoint_result(resume=0.0, single=0.0, resumed=(0.5, 0.4)):
    ranks = ranks_of(rungs=("ddp",))
    checkpoint = schema.Checkpoint(
        continued=(0.5, 0.4),
        resumed=tuple(resumed),
        resume_max_weight_diff=resume,
        single_process_max_weight_diff=single,
        config=CONFIG,
    )
    return run_of([dataclasses.replace(ranks[0], checkpoint=checkpoint), ranks[1]])


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "pass"),
        ({"resumed": (0.5, 0.4 + 1e-6)}, "pass"),
        ({"resumed": (0.5, 0.4 + 2e-6)}, "fail"),
        ({"resume": 1e-9}, "fail"),
        ({"single": 1e-9}, "fail"),
    ],
)
def test_the_checkpoint_verdict(kwargs, status):
    v = L.checkpoint_verdict(checkpoint_result(**kwargs), 1e-6 + 1e-12)
    assert v.status == status
    assert v.numbers["max_loss_diff"] == pytest.approx(abs(kwargs.get("resumed", (0.5, 0.4))[1] - 0.4))


def test_the_checkpoint_verdict_needs_a_checkpoint():
    with pytest.raises(ValueError, match="the run saved no checkpoint"):
        L.checkpoint_verdict(result(), 1e-6)


def fit_result(peak=None, held_extra=0, error=None, layers=3, rung="fsdp_zero3"):
    shapes = dataclasses.replace(S, layers=layers).shapes()
    ranks = []
    for rank, m in enumerate(ranks_of(rungs=("ddp",))):
        if error:
            ranks.append(dataclasses.replace(m, fit_error=schema.FitError(rung, layers, error)))
            continue
        fit = rung_record(rung, rank, layers=layers, held=held(rung, rank, shapes, held_extra), peak_allocated=peak)
        ranks.append(dataclasses.replace(m, fit=fit))
    t = dataclasses.replace(S, layers=layers)
    return run_of(ranks), max(M.rank_memory(t, rung, k, shapes).device_peak for k in range(2))


def test_the_fit_verdict():
    r, model = fit_result()
    cpu = L.fit_verdict(r, 6e6)
    assert cpu.status == "pass" and cpu.numbers["state_exact"] and cpu.numbers["model_peak"] == model
    assert L.fit_verdict(fit_result(held_extra=4)[0], 6e6).status == "fail"
    oom = L.fit_verdict(fit_result(error="CUDA out of memory")[0], 6e6)
    assert oom.status == "fail" and "3 blocks did not fit: CUDA out of memory" in oom.text
    small, _ = fit_result(peak=5_000_000)
    assert L.fit_verdict(small, 6e6).status == "info"  # a budget sized for the CPU decides nothing on a GPU
    assert L.fit_verdict(fit_result(peak=5_000_000, held_extra=4)[0], 6e6).status == "fail"
    big = 2_000_000_000
    within = L.fit_verdict(fit_result(peak=big)[0], big)
    assert within.status == "pass" and "GB), within the budget of 2.0 GB; counted model state equals" in within.text
    over = L.fit_verdict(fit_result(peak=big + 1)[0], big)
    assert over.status == "fail" and over.numbers["gap"] == pytest.approx((big + 1) / model - 1)
    assert "GB), over the budget of 2.0 GB" in over.text
    # the first rank's error is the one named (S8: a mutant naming the second survived while both ranks said the same)
    split, _ = fit_result(error="CUDA out of memory")
    split.ranks[1]["fit_error"]["error"] = "another error"
    assert "did not fit: CUDA out of memory. The" in L.fit_verdict(split, 6e6).text
    none = result(rungs=("ddp",))
    assert L.fit_verdict(none, 6e6).status == "info" and L.fit_verdict(none, 6e6).numbers == {"budget": 6e6}


def test_the_schema_upgrades_the_committed_layout():
    """The committed runs left out what a rung did not measure and wrote a largest model that did not fit as a
    ``fit`` of three keys: read typed, the one is None, the other a ``fit_error``."""
    typed_ranks = ranks_of(rungs=("ddp",))
    new = dataclasses.asdict(typed_ranks[0])
    old = json.loads(json.dumps(new))
    for key in ("gradients", "allocated_after_step", "forward_added", "peak_allocated", "trace"):
        del old["rungs"][0][key]
    for key in ("reference", "checkpoint", "fit", "fit_error"):
        old.pop(key)
    old["fit"] = {"rung": "fsdp_zero3", "layers": 6, "error": "OutOfMemoryError: CUDA out of memory."}
    got = typed(schema.Rank, old)
    unmeasured = dataclasses.replace(typed_ranks[0].rungs[0], gradients=None)  # no reference: no gradients compared
    assert got.rungs == (unmeasured,) and got.reference is None and got.fit is None
    assert got.fit_error == schema.FitError("fsdp_zero3", 6, "OutOfMemoryError: CUDA out of memory.")
    assert isinstance(got.rungs[0].collectives["all_reduce"], schema.Collective)
    assert old["fit"] == {"rung": "fsdp_zero3", "layers": 6, "error": "OutOfMemoryError: CUDA out of memory."}
    assert "trace" not in old["rungs"][0]  # the reader's upgrade left the caller's dict alone
    ran = dict(old, fit=dict(old["rungs"][0], layers=6))  # a largest model that ran, in the committed layout
    assert typed(schema.Rank, ran).fit == dataclasses.replace(unmeasured, layers=6)
    assert typed(schema.Rank, new) == typed_ranks[0]  # today's layout: as it was written


def test_the_fit_and_memory_tables():
    fit = L.fit_table(S, M.rank_memory(S, "ddp", 0).device_peak, 1e12, rungs=("ddp", "fsdp_offload"))
    assert fit.loc["ddp", "layers"] == M.largest(S, "ddp", M.rank_memory(S, "ddp", 0).device_peak, 1e12)
    assert fit.loc["fsdp_offload", "state in"] == "host" and fit.loc["ddp", "state in"] == "device"
    none = L.fit_table(S, 1.0, 1.0, rungs=("ddp",))
    assert none.loc["ddp", "layers"] == 0 and none.loc["ddp", "parameters (M)"] == 0.0
    table = L.memory_table(S, rungs=("ddp",))
    assert table.loc[("DDP", 0), "params"] == round(M.rank_memory(S, "ddp", 0).params / 1e6, 3)
    assert table.loc[("DDP", 1), "state on"] == "device"


# --------------------------------------------------------------------------- notebook 08's plan (issue 28)
class _Ran(Exception):
    """Raised by the stubbed launcher once it has recorded what the notebook asked for."""


def _notebook_08(monkeypatch, gpus: int, **values):
    from nvtutorial import course
    from nvtutorial.teach import ranks
    from tests.helpers import notebook_cells

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    monkeypatch.setattr(ranks, "configure", lambda **kw: kw)
    return notebook_cells.run("08_strategy_ladder", ["cebda38d", "0b82d66d"], **values)


@pytest.mark.parametrize(
    "gpus, nnodes, profile, ladder, launch, parts",
    [
        (0, 1, "auto", ("ci", "gloo", True), {"nproc": 2, "backend": "gloo"}, set()),
        (1, 1, "auto", ("ci", "gloo", True), {"nproc": 2, "backend": "gloo"}, {"the one GPU you have (section 3)"}),
        (1, 1, "full", ("ci", "gloo", True), {"nproc": 2, "backend": "gloo"}, {"the one GPU you have (section 3)"}),
        (1, 2, "auto", ("full", "nccl", False), {"nproc": 1, "nnodes": 2, "backend": "nccl"}, set()),
        (2, 1, "auto", ("full", "nccl", False), {"nproc": 2, "backend": "nccl"}, {"the link (section 6)"}),
        (2, 1, "ci", ("ci", "nccl", False), {"nproc": 2, "backend": "nccl"}, {"the link (section 6)"}),
    ],
)
def test_notebook_08s_plan_on_every_machine(monkeypatch, capsys, gpus, nnodes, profile, ladder, launch, parts):
    ns = _notebook_08(monkeypatch, gpus, profile=profile, nnodes=nnodes)
    plan, said = ns["PLAN"], capsys.readouterr().out
    assert ns["shown"] == [plan]
    assert (ns["LADDER"].profile, ns["LADDER"].backend, ns["LADDER"].simulated) == ladder
    assert ns["LAUNCH"] == launch and ns["P"] == ns["SIZES"][ladder[0]]
    base = {"the ladder (sections 3-5, 7, 8)", "live ranks (%%ranks), exercises"}
    assert {p.name for p in plan.parts} == base | parts
    assert ("a gloo simulation on the CPU" in said) is ladder[2]
    assert ("Small sizes on GPUs" in said) is (ladder[0] == "ci" and not ladder[2])
    assert "needs a GPU" not in said + str(plan) or gpus == 0
    if gpus == 1 and nnodes == 1:  # a GPU machine hears why the ladder runs on the CPU
        assert "2 ranks need 2 GPUs for NCCL; this machine has 1" in ns["LADDER"].why


@pytest.mark.parametrize("profile, sizes", [("auto", "full"), ("full", "full"), ("ci", "ci")])
def test_the_one_gpu_you_have_runs_one_rank_on_it(monkeypatch, profile, sizes):
    """Issue 28: on one GPU the part runs one NCCL rank on it at the plan's sizes (the lesson's unless ci is asked
    for), two timed repeats of one step and no warm-up: enough for a peak, the ladder's repeats are for timings; the
    loss for two steps (one update)."""
    import nvtutorial
    from tests.helpers import notebook_cells

    ns = _notebook_08(monkeypatch, 1, profile=profile)
    asked = []

    def run(workload, **kw):
        asked.append((workload, kw))
        raise _Ran

    monkeypatch.setattr(nvtutorial, "run", run)
    with pytest.raises(_Ran):
        exec(notebook_cells.cells("08_strategy_ladder")["ladder-one-gpu-run"].source, ns)  # noqa: S102
    (workload, kw), one = asked[0], ns["SIZES"][sizes]
    assert workload == "ladder" and kw["nproc"] == 1 and kw["backend"] == "nccl"
    assert kw["params"] == {
        **one["model"],
        **one["run"],
        "rungs": "ddp,fsdp_checkpointing",
        "steps": 2,
        "profile_steps": 0,
        "warmup": 0,
        "repeats": 2,
        "timed": 1,
    }
    assert ns["PLAN"]["the one GPU you have (section 3)"].gpus == 1


def test_the_kernels_model_shapes_leave_its_runs_warm():
    """Notebook 08's kernel builds the model on the meta device (``Setup.shapes``), which imports inductor, which
    writes its cache folder into ``os.environ``: the runs after it still fork warm (they started cold, torchrun
    twice a launch and the ``%%ranks`` pool too, 12.9 -> 40 s for the CPU ladder here); a compiler variable a
    learner sets still starts a run cold."""
    import os
    import subprocess
    import sys

    code = (
        "import os\n"
        "from nvtutorial.chapters.ch08_ladder import report\n"
        "from nvtutorial.launch import warm\n"
        "base = dict(os.environ)\n"
        "report.Setup(vocab=256, seq_len=32, dim=64, heads=4, layers=2, mlp_ratio=4, global_batch=8).shapes()\n"
        "after = dict(os.environ)\n"
        "print('TORCHINDUCTOR_CACHE_DIR' in after, warm.import_time_difference(after, base))\n"
        "print(warm.import_time_difference({**after, 'TORCHINDUCTOR_FX_GRAPH_CACHE': '0'}, base))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    written, learners = out.stdout.splitlines()
    assert written == "True None"
    assert learners.startswith("TORCHINDUCTOR_FX_GRAPH_CACHE=0 is read when Python or torch starts")


def test_the_one_gpu_part_is_skipped_with_its_reason_elsewhere(monkeypatch, capsys):
    from tests.helpers import notebook_cells

    for gpus in (0, 2):
        ns = _notebook_08(monkeypatch, gpus)
        capsys.readouterr()
        exec(notebook_cells.cells("08_strategy_ladder")["ladder-one-gpu-run"].source, ns)  # noqa: S102
        assert ns["one_gpu"] is None
        assert f"exactly one GPU is visible and nnodes = 1 ({gpus} here" in capsys.readouterr().out
