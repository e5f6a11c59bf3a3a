"""Rules pinned by mutation testing (chapters 08-10, diagnosis, report): each test kills a mutant the other fast tests
let through."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from nvtutorial import diagnosis
from nvtutorial.chapters.ch08_ladder import report as L
from nvtutorial.chapters.ch08_ladder import report_model as M
from nvtutorial.chapters.ch08_ladder import schema as ladder_schema
from nvtutorial.chapters.ch10_cost_model import exercises as costmodel_exercises
from nvtutorial.chapters.ch10_cost_model import report as costreport
from nvtutorial.chapters.ch10_cost_model import schema as costschema
from nvtutorial.report import predict
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult
from tests.helpers.ranks import on_ranks

S = M.Setup(vocab=16, seq_len=4, dim=8, heads=2, layers=2, mlp_ratio=2, global_batch=4, world=2)


# --------------------------------------------------------------------------- notebook 08's FSDP exercise
def _fsdp_wrong_share():
    """Rank side: a candidate whose only parameter is a DTensor split along dimension 1, not 0."""
    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor

    from nvtutorial.chapters.ch08_ladder import exercises_fsdp

    def candidate(model, mesh):
        holder = torch.nn.Module()
        holder.w = torch.nn.Parameter(distribute_tensor(torch.zeros(4, 6), mesh, [Shard(1)]))
        return holder

    ctx = types.SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
    return exercises_fsdp.check_on_rank(candidate, ctx)


def test_the_fsdp_checker_refuses_a_share_of_the_wrong_dimension():
    for passed, reason in on_ranks(_fsdp_wrong_share, 2, timeout=120):
        assert not passed and "(4, 3)" in reason and "(2, 6)" in reason


def _fsdp_meshes():
    """Rank side: each of the exercise's sharding functions on a one-rank sub-mesh of a two-rank world: the blocks
    must be sharded on the mesh given, not on a default mesh of the whole world."""
    from torch.distributed.device_mesh import init_device_mesh

    from nvtutorial.chapters.ch08_ladder import exercises_fsdp
    from nvtutorial.models import transformer

    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("world", "alone"))["alone"]
    out = {}
    for fn in (exercises_fsdp.shard, exercises_fsdp.shard_blocks_only, exercises_fsdp.shard_without_resharding):
        model = transformer.build(transformer.Config(), device=torch.device("cpu"))
        model = fn(model, mesh) or model
        out[fn.__name__] = [
            (p.device_mesh.size(), tuple(p.to_local().shape) == tuple(p.shape)) for p in model.blocks.parameters()
        ]
    return out


def test_the_fsdp_solutions_shard_on_the_mesh_they_are_given():
    for found in on_ranks(_fsdp_meshes, 2, timeout=120):
        for name, params in found.items():
            assert params and all(p == (1, True) for p in params), (name, params)


# --------------------------------------------------------------------------- notebook 08's TP exercise
def _tp_optimizers():
    """Rank side: the TP checker on the solution, recording each Adam it builds (DTensors among its parameters?
    foreach?)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from nvtutorial.chapters.ch08_ladder import exercises_tp

    seen = []
    adam = torch.optim.Adam

    class Spy(adam):
        def __init__(self, params, *args, **kwargs):
            params = list(params)
            super().__init__(params, *args, **kwargs)
            seen.append((any(isinstance(p, DTensor) for p in params), self.defaults["foreach"]))

    torch.optim.Adam = Spy
    try:
        ctx = types.SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
        judged = exercises_tp.check_on_rank(exercises_tp.SOLUTION, ctx)
    finally:
        torch.optim.Adam = adam
    return judged, seen


def test_the_tp_checker_keeps_dtensors_and_plain_tensors_off_the_foreach_path():
    """DTensors and plain tensors in one group: torch's default (foreach on a GPU) would mix them in one foreach
    kernel; the checker asks for the per-tensor loop."""
    for (passed, reason), seen in on_ranks(_tp_optimizers, 2, timeout=180):
        assert passed, reason
        mixed = [foreach for has_dtensor, foreach in seen if has_dtensor]
        assert mixed and all(foreach is False for foreach in mixed), seen


# --------------------------------------------------------------------------- notebook 08's report
def _rank_trace(rank, compute, comm, steps):
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "train_step", "pid": 1, "tid": 1, "ts": s, "dur": e - s}
        for s, e in steps
    ]
    ev += [
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": s, "dur": e - s} for s, e in compute
    ]
    ev += [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
            "pid": 0,
            "tid": 13,
            "ts": s,
            "dur": e - s,
        }
        for s, e in comm
    ]
    return {"traceEvents": ev, "distributedInfo": {"rank": rank}, "baseTimeNanoseconds": 10**9, "host_name": "node"}


def _ladder_rank(rank, **rung):
    """One rank's typed result of a ladder of DDP alone, its record changed by ``rung``."""
    return ladder_schema.Rank(
        config=ladder_schema.ModelConfig(vocab=16, seq_len=4, dim=8, heads=2, layers=2, mlp_ratio=2),
        global_batch=4,
        world_size=2,
        rank=rank,
        device="cpu",
        rungs=(
            ladder_schema.Rung(
                rung="ddp",
                layers=2,
                losses=(),
                held=ladder_schema.Held(params=0, grads=0, optimizer=0, param_tensors=0),
                collectives={},
                sent_per_step=0.0,
                step_s=(),
                step_s_median=0.0,
                nvlink_tx_bytes_per_step=None,
                nvlink_note="",
                **rung,
            ),
        ),
    )


def _ladder_run(ranks, run_dir):
    """A run of the ladder whose ranks returned ``ranks`` (written as JSON, read back typed)."""
    return RunResult(
        workload="ladder",
        params={},
        returncode=0,
        wall_s=1.0,
        first_output_s=None,
        env=None,
        ranks=[dataclasses.asdict(m) for m in ranks],
        run_dir=Path(run_dir),
        log_files={},
        log_tail=[],
    )


def test_comm_table_pairs_the_ranks_traces(tmp_path):
    # rank 0 joins the all-reduce at 40, rank 1 at 60, both finish at 70 (one step of 100 µs)
    traces = [
        _rank_trace(0, compute=[(0, 40)], comm=[(40, 70)], steps=[(0, 100)]),
        _rank_trace(1, compute=[(0, 60)], comm=[(60, 70)], steps=[(0, 100)]),
    ]
    ranks = []
    for r, trace in enumerate(traces):
        (tmp_path / f"ddp{r}.json").write_text(json.dumps(trace))
        ranks.append(_ladder_rank(r, trace=f"ddp{r}.json"))
    comm = L.comm_table(_ladder_run(ranks, tmp_path))
    assert list(comm.index) == [(L.LABELS["ddp"], 0), (L.LABELS["ddp"], 1)] and (comm["note"] == "").all()
    assert list(comm["communication (ms)"]) == pytest.approx([0.030, 0.010])
    assert list(comm["waiting (ms)"]) == pytest.approx([0.020, 0.0])
    assert list(comm["on the wire (ms)"]) == pytest.approx([0.010, 0.010])
    assert list(comm["joined last"]) == pytest.approx([0.0, 1.0])


def test_the_fit_table_has_no_model_state_when_no_block_fits():
    none = L.fit_table(S, 1.0, 1.0, rungs=("ddp",))
    assert none.loc["ddp", "layers"] == 0 and pd.isna(none.loc["ddp", "model state per rank (MB)"])
    assert pd.isna(none.loc["ddp", "device peak (MB, model)"])


# --------------------------------------------------------------------------- notebook 10
def test_the_pipeline_split_checker_fails_code_that_raises():
    def boom(*args):
        raise RuntimeError("my bug")

    passed, reason = costmodel_exercises.check_local(boom)
    assert not passed and "RuntimeError" in reason


def test_the_roof_table_indexes_every_measurement_by_what_was_measured():
    c = costschema.CalibrationRank(
        rank=0,
        world=1,
        device="CPU",
        matmul=(costschema.MatmulPoint(256, "float32", 1.0, 10e9),),
        copy=(costschema.CopyPoint(1 << 24, 1.0, 5e9), costschema.CopyPoint(1 << 20, 1.0, 4e9)),
        collectives=(),
    )
    table = costreport.roof_table([c])
    measured = list(table.index.get_level_values("measured"))
    assert len(measured) == 3 and all(isinstance(m, str) for m in measured)
    assert sum(m.startswith("copy ") for m in measured) == 2 and measured[0].startswith("matmul 256")
    assert list(table.columns) == ["device", "time (ms)", "rate", "unit", "fit (ms)", "regime"]
    copies = table[table["unit"] == "GB/s"]
    assert list(copies["rate"]) == pytest.approx([5.0, 4.0])


def _verdict(status):
    return Verdict("x", status, "because", {}, "here")


def test_no_score_keeps_the_scores_key():
    result = types.SimpleNamespace(label="2 x CPU")
    v = costreport.score_verdict(result, "ddp", 0.1, _verdict("fail"), _verdict("pass"))
    assert v.key == "costmodel.capstone.score.ddp" and v.numbers == {"score": None} and v.where == "2 x CPU"
    v = costreport.score_verdict(result, "ddp", 0.1, _verdict("fail"), _verdict("fail"))
    assert v.key == "costmodel.capstone.score.ddp" and v.numbers == {"score": None}


def test_faster_than_light_states_the_ideal_in_ms(monkeypatch):
    monkeypatch.setattr(costreport, "measured_step", lambda result, strategy: 0.0005)
    result = types.SimpleNamespace(label="2 x CPU")
    v = costreport.score_verdict(result, "ddp", 0.001, _verdict("pass"), _verdict("pass"))
    assert v.numbers == {"score": pytest.approx(2.0), "ideal_s": 0.001, "measured_s": 0.0005}
    assert "(1 ms)" in v.text and "0.5 ms" in v.text


# --------------------------------------------------------------------------- diagnosis, verdicts, predictions
def test_collect_records_the_nodes_when_the_ranks_do_not(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = types.SimpleNamespace(
        run_dir=run_dir,
        world_size=2,
        nnodes=2,
        nproc=1,
        backend="gloo",
        workload="selftest",
        params=None,
        args=(),
        env={},
        timeout=30.0,
        startup_timeout=20.0,
    )
    env = {
        "host": "h",
        "backend": "gloo",
        "world_size": 2,
        "device": "cpu",
        "torch": "2",
        "python": "3",
        "cuda": None,
        "nccl": None,
    }
    for r in range(2):
        (run_dir / f"rank{r}.json").write_text(json.dumps({"metrics": {}, "env": env}))
        (run_dir / f"rank{r}.log").write_text("")
    r = diagnosis.collect(spec, 0, 1.0, None)
    assert r.env is not None and r.env.nnodes == 2
    (run_dir / "rank0.json").write_text(json.dumps({"metrics": {}, "env": {**env, "nnodes": 3}}))
    assert diagnosis.collect(spec, 0, 1.0, None).env.nnodes == 3  # what the rank reported wins


def test_an_unanswered_prediction_keeps_its_question():
    v = predict.grade_number(
        "my.key", None, 5.0, unit="GB/s", where="here", explanation="why.", question="How fast is the copy?"
    )
    assert v.status == "no answer" and v.title == "How fast is the copy?" and v.numbers["measured"] == 5.0


def test_a_verdict_read_without_where_is_measured_nowhere():
    v = Verdict.from_dict({"key": "k", "status": "pass", "text": "yes"})
    assert v.where == "" and v.title == "" and v.numbers == {}
    assert Verdict.from_dict(v.to_dict()) == v
