"""Custom collectives and gradient compression (notebook 07): exact where they must be, bytes by formula.

One real 2-rank gloo group, started once for the module with ``torch.multiprocessing.spawn``,
runs every distributed check and writes its findings; the tests read them. The rest are
in-process unit tests of the pure functions.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import pytest
import torch

from nvtutorial import launch
from nvtutorial.lessons import collectives as col
from nvtutorial.lessons import compression as comp
from nvtutorial.report import collectives as colreport
from nvtutorial.report import compression as compreport

WORLD = 2


# --------------------------------------------------------------------------------------------
# The 2-rank run


def _worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nvtutorial.workloads.collectives_bench import plain_group

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # DETAIL on the default group: the source's all_gather of unequal sizes then raises instead of
    # aborting the process. Everything else uses a plain group, as the workload does.
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    plain = plain_group("gloo")
    found: dict = {}

    # C22: randomized inputs, a different density (so a different count and pattern) on each rank.
    cases = []
    for c in range(5):
        g = torch.Generator().manual_seed(1000 * c + rank)
        density = 0.05 + 0.6 * float(torch.rand(1, generator=g))
        x = col.random_sparse((512,), density, 77 * c + rank)
        src = col.compare_with_allreduce(x, "source", group=plain)
        ours = col.compare_with_allreduce(x, "course", group=plain)
        cases.append({"nonzero": int((x != 0).sum()), "source_exact": src["exact"], "source_error": src["error"],
                      "course_exact": ours["exact"]})
    # Same count, different positions: the source runs and returns a wrong, rank-dependent result.
    x = col.sparse_with_count(256, 20, pattern_seed=5 + rank, value_seed=50 + rank)
    src = col.compare_with_allreduce(x, "source", group=plain)
    checks = [None] * WORLD
    dist.all_gather_object(checks, src["checksum"], group=plain)
    found["same_count"] = {"ran": src["ran"], "exact": src["exact"], "ranks_agree": checks[0] == checks[1]}
    # Course version on several shapes and densities, 2-D and 4-D included.
    shapes_ok = []
    for i, (shape, density) in enumerate([((7, 13), 0.3), ((4, 3, 3, 3), 0.5 + 0.4 * rank), ((1000,), 0.001),
                                          ((64,), 0.0), ((33,), 1.0)]):
        x = col.random_sparse(shape, density if rank == 0 else density / 2, 900 + 10 * i + rank)
        shapes_ok.append(col.compare_with_allreduce(x, "course", group=plain)["exact"])
    found["cases"], found["shapes_ok"] = cases, shapes_ok

    # Bytes of the correct sparse all-reduce against the formula.
    x = col.random_sparse((4096,), 0.02 + 0.03 * rank, 4 + rank)
    counts = [None] * WORLD
    dist.all_gather_object(counts, int((x != 0).sum()), group=plain)
    counter = col.ByteCounter(WORLD)
    col.sparse_allreduce(x, group=plain, counter=counter)
    found["sparse_bytes"] = {"sent": counter.sent, "max_count": max(counts)}

    # Ring all-reduce against dist.all_reduce, uneven sizes included.
    ring = []
    for numel in (1, 3, 1001, 4096):
        x = torch.randn(numel, generator=torch.Generator().manual_seed(numel + rank))
        mine, ref = x.clone(), x.clone()
        counter = col.ByteCounter(WORLD)
        col.ring_all_reduce(mine, group=plain, counter=counter)
        dist.all_reduce(ref, group=plain)
        ring.append({"numel": numel, "equal": bool(torch.equal(mine, ref)), "sent": counter.sent})
    found["ring"] = ring

    # The top-k hook's error feedback on a one-bucket DDP model.
    torch.manual_seed(0)
    net = nn.Linear(64, 8, bias=False)
    replica = nn.Linear(64, 8, bias=False)
    replica.load_state_dict(net.state_dict())
    model = DDP(net, process_group=plain)
    reg = comp.register(model, "topk", process_group=plain, topk_ratio=0.05, start_iter=2)
    k = reg.state.k(512)
    checks_per_step = []
    for t in range(5):
        inp = torch.randn(16, 64, generator=torch.Generator().manual_seed(100 * t + rank))
        model.zero_grad(set_to_none=True)
        replica.zero_grad(set_to_none=True)
        before = reg.state.residuals.get(0, torch.zeros(512)).clone()
        model(inp).square().sum().backward()
        replica(inp).square().sum().backward()
        local = replica.weight.grad.reshape(-1).clone()  # this rank's own gradient, computed apart
        if t < 2:  # the plain all-reduce phase keeps no residual
            checks_per_step.append({"plain": True, "residuals": len(reg.state.residuals)})
            continue
        acc = local + before  # error feedback: this step's gradient plus what was not sent before
        after = reg.state.residuals[0].clone()
        sent_mask = (after == 0) & (acc != 0)
        sent = torch.where(sent_mask, acc, torch.zeros_like(acc))
        everyone = [torch.zeros(512) for _ in range(WORLD)]
        dist.all_gather(everyone, sent, group=plain)
        checks_per_step.append({
            "plain": False,
            "sent": int(sent_mask.sum()),
            "rest_kept": bool(torch.equal(after[~sent_mask], acc[~sent_mask])),
            "largest_sent": bool(acc[sent_mask].abs().min() >= acc[~sent_mask].abs().max()),
            "residual_norm": float(after.norm()),
            "before_norm": float(before.norm()),
            "grad_is_average": bool(torch.allclose(model.module.weight.grad.reshape(-1), sum(everyone) / WORLD,
                                                   rtol=1e-6, atol=1e-7)),
        })
    found["topk"] = {"k": k, "steps": checks_per_step, "counted_bytes": reg.counter.payload, "iters": reg.state.iter}

    # Byte counting of PyTorch's own hooks on the same layer shape.
    counted = {}
    for name in ("fp16", "powersgd"):
        torch.manual_seed(0)
        m = DDP(nn.Linear(64, 8, bias=False), process_group=plain)
        r = comp.register(m, name, process_group=plain, powersgd_rank=1, start_iter=2)
        per_step = []
        for t in range(4):
            before = r.counter.payload
            m(torch.randn(4, 64)).sum().backward()
            per_step.append(r.counter.payload - before)
        counted[name] = per_step
    found["counted"] = counted

    dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group(plain)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("collectives")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(out)), nprocs=WORLD, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_source_version_fails_exactness_on_different_sparsity(ranks):
    for found in ranks:
        assert any(c["nonzero"] != o["nonzero"] for c, o in zip(ranks[0]["cases"], ranks[1]["cases"]))
        assert not any(c["source_exact"] for c in found["cases"]), found["cases"]
        # Unequal counts make its all_gather a mismatched collective: DETAIL names it.
        assert any("mismatch" in (c["source_error"] or "") for c in found["cases"])


def test_source_version_is_wrong_even_with_equal_counts(ranks):
    for found in ranks:
        assert found["same_count"]["ran"] and not found["same_count"]["exact"]
        assert not found["same_count"]["ranks_agree"], "the ranks should end with different tensors"


def test_course_sparse_allreduce_is_exact(ranks):
    for found in ranks:
        assert all(c["course_exact"] for c in found["cases"])
        assert all(found["shapes_ok"]), found["shapes_ok"]


def test_sparse_allreduce_bytes_match_formula(ranks):
    for found in ranks:
        b = found["sparse_bytes"]
        # count (8 bytes) + padded int32 indices + fp32 values; a 2-rank all-gather sends each once
        assert b["sent"] == col.ring_allgather_bytes(8, WORLD) + col.ring_allgather_bytes(b["max_count"] * 8, WORLD)


def test_ring_all_reduce_equals_all_reduce_and_bytes(ranks):
    for r, found in enumerate(ranks):
        for row in found["ring"]:
            assert row["equal"], row
            assert row["sent"] == col.ring_bytes_exact(row["numel"], 4, WORLD, r)
    assert ranks[0]["ring"][-1]["sent"] == col.ring_allreduce_bytes(4096 * 4, WORLD)


def test_topk_error_feedback_carries_the_residual(ranks):
    for found in ranks:
        t = found["topk"]
        assert t["iters"] == 5
        plain, compressed = t["steps"][:2], t["steps"][2:]
        assert all(s["plain"] and s["residuals"] == 0 for s in plain)
        for s in compressed:
            assert s["sent"] == t["k"], "exactly k entries leave each rank"
            assert s["largest_sent"], "the k entries sent are the largest of gradient + residual"
            assert s["rest_kept"], "what is not sent (gradient + old residual) stays in the residual"
            assert s["residual_norm"] > 0
            assert s["grad_is_average"], "the DDP gradient is the average of what the ranks sent"
        assert compressed[0]["before_norm"] == 0 and all(s["before_norm"] > 0 for s in compressed[1:])
        # 2 plain steps of 512 fp32 all-reduced, then 3 steps of k (int32 index + fp32 value)
        assert t["counted_bytes"] == 2 * 512 * 4 + 3 * comp.topk_payload_bytes(t["k"], 4) == 4096 + 24 * t["k"]


def test_builtin_hooks_bytes_are_counted(ranks):
    counted = ranks[0]["counted"]
    assert counted["fp16"] == [512 * 2] * 4
    # PowerSGD: 2 plain steps, then P (8 × 1) and Q (64 × 1) for the 8 × 64 weight
    assert counted["powersgd"] == [512 * 4, 512 * 4, (8 + 64) * 4, (8 + 64) * 4]


# --------------------------------------------------------------------------------------------
# In-process unit tests


def test_ring_byte_formulas():
    assert col.ring_allreduce_bytes(1000, 2) == 1000
    assert col.ring_allreduce_bytes(1200, 4) == 1800
    assert col.ring_allgather_bytes(100, 4) == 300
    assert col.ring_allreduce_bytes(1000, 1) == 0
    for world in (2, 3, 4):
        total = sum(col.ring_bytes_exact(1001, 4, world, r) for r in range(world))
        assert total == pytest.approx(2 * (world - 1) * 1001 * 4, rel=0)


def test_source_indexing_shapes_show_the_bug():
    one_d = col.source_indexing_shapes((8,))
    assert one_d["indices_shape"] == (3, 1) and one_d["values_numel"] == 3
    two_d = col.source_indexing_shapes((4, 6))
    assert two_d["error"] and two_d["error"].startswith("IndexError")
    conv = col.source_indexing_shapes((16, 3, 3, 3))
    assert conv["indices_shape"] == (3, 4)
    assert conv["values_numel"] == 3 * 4 * 27  # whole slices, not 3 numbers


def test_source_function_is_the_published_code():
    import inspect

    text = inspect.getsource(col.source_sparse_allreduce)
    for line in ("indices = tensor.nonzero()", "values = tensor[indices]",
                 "gathered = [torch.zeros_like(values) for _ in range(world_size)]",
                 "torch.distributed.all_gather(gathered, values)", "stacked = torch.stack(gathered)",
                 "mean = stacked.mean(dim=0)", "tensor.zero_()", "tensor[indices] = mean"):
        assert line in text


def test_topk_select_splits_sent_and_residual():
    acc = torch.tensor([0.1, -3.0, 0.5, 2.0, -0.2])
    original = acc.clone()
    idx, values, residual = comp.topk_select(acc, 2)
    assert sorted(idx.tolist()) == [1, 3]
    sent = torch.zeros(5)
    sent[idx.long()] = values
    assert torch.equal(sent + residual, original)
    assert residual[1] == 0 and residual[3] == 0


def test_topk_state_and_register_validate():
    with pytest.raises(ValueError, match="ratio"):
        comp.TopKState(ratio=0)
    assert comp.TopKState(ratio=0.01).k(1000) == 10
    assert comp.TopKState(ratio=0.01).k(10) == 1
    with pytest.raises(ValueError, match="unknown compression"):
        comp.register(object(), "gzip")


def test_density_row_and_summary():
    g = torch.zeros(100)
    g[:10] = 1.0  # 90 % zero, the 10 non-zeros share the energy evenly
    row = comp.density_row("w", g.view(10, 10), energy=0.99, topk_ratio=0.05)
    assert row["frac_zero"] == pytest.approx(0.9)
    assert row["frac_near_zero"] == pytest.approx(0.9)
    assert row["frac_for_energy"] == pytest.approx(0.10)
    assert row["topk_energy_share"] == pytest.approx(0.5)
    dense = comp.density_row("d", torch.ones(50))
    summary = comp.density_summary([row, dense])
    assert summary["params"] == 150
    assert summary["frac_zero"] == pytest.approx(90 / 150)
    # source format: 2 int64 coordinates + fp32 value per 2-D entry, 1 int64 + value per 1-D one
    assert summary["source_format_ratio"] == pytest.approx((10 * 20 + 50 * 12) / (4 * 150))
    assert summary["index_value_ratio"] == pytest.approx((10 + 50) * 8 / (4 * 150))


def test_bad_parameters_fail_before_launch():
    with pytest.raises(launch.LaunchError, match="warmup"):
        launch.prepare("compression", params={"warmup": 2, "start_iter": 2})
    with pytest.raises(launch.LaunchError, match="hooks"):
        launch.prepare("compression", params={"hooks": "none,gzip"})
    with pytest.raises(launch.LaunchError, match="sizes"):
        launch.prepare("collectives_bench", params={"sizes": "6"})


def test_density_summary_empty():
    assert comp.density_summary([]) == {"params": 0}
    assert math.isnan(comp.density_row("e", torch.zeros(4))["topk_energy_share"])


def _hook(name, ms, sent, iou, dense=1000.0):
    return {"hook": name, "step_ms_median": ms, "sent_bytes_per_step": sent, "dense_bytes_per_step": dense,
            "final_val_loss": 1.0, "final_iou": iou, "nvlink_tx_bytes_per_step": None}


def test_verdicts_are_computed_from_the_measurements():
    runs = {
        "fast": {"hooks": [_hook("none", 10.0, 1000, 0.50), _hook("fp16", 12.0, 500, 0.50),
                           _hook("topk", 10.1, 20, 0.40)]},
        "slow": {"hooks": [_hook("none", 20.0, 1000, 0.50), _hook("fp16", 15.0, 500, 0.51),
                           _hook("topk", 25.0, 20, 0.41)]},
    }
    frame = compreport.hooks_frame(runs)
    assert frame.loc[(frame.link == "fast") & (frame.hook == "fp16"), "step_vs_none"].item() == pytest.approx(1.2)
    assert frame.loc[frame.hook == "topk", "bytes_saved"].tolist() == pytest.approx([0.98, 0.98])
    table = compreport.verdict_table(frame)
    assert table.loc["fp16", "pays on"] == "slow"
    assert table.loc["fp16", "step time, fast"].endswith("(slower)")
    assert table.loc["topk", "step time, fast"].startswith("no change")
    assert table.loc["topk", "pays on"] == "none of the links measured"
    assert "within" not in table.loc["topk", "IoU vs none"]  # a 0.1 IoU loss is reported as a cost
    slower = compreport.slower_statements(frame)
    assert len(slower) == 2
    assert slower[0].startswith("On fast, fp16 made each training step 20% slower")
    assert slower[1].startswith("On slow, topk made each training step 25% slower")


def test_noise_widens_no_change():
    runs = {"fast": {"hooks": [dict(_hook("none", 10.0, 1000, 0.5), step_ms_spread=0.02),
                               dict(_hook("bf16", 11.0, 500, 0.5), step_ms_spread=0.15)]}}
    frame = compreport.hooks_frame(runs)
    assert frame.loc[frame.hook == "bf16", "step_noise"].item() == pytest.approx(0.15)
    assert compreport.verdict_table(frame).loc["bf16", "step time, fast"].startswith("no change")
    assert compreport.slower_statements(frame) == []  # +10 % is inside the rounds' 15 % spread
    runs["fast"]["hooks"][1]["step_ms_spread"] = 0.01
    assert compreport.slower_statements(compreport.hooks_frame(runs))[0].startswith("On fast, bf16 made each training step 10% slower")
    # fp16 and bf16 do the same work: a 20 % gap between them is noise, so neither changed the step
    runs["fast"]["hooks"].append(dict(_hook("fp16", 9.0, 500, 0.5), step_ms_spread=0.01))
    frame = compreport.hooks_frame(runs)
    assert frame["step_noise"].tolist() == pytest.approx([0.2, 0.2, 0.2])
    table = compreport.verdict_table(frame)
    assert table.loc["fp16", "pays on"] == "none of the links measured"
    assert table.loc["fp16", "step time, fast"].startswith("no change")


def test_link_statement():
    one = compreport.hooks_frame({"NVLink": {"hooks": [_hook("none", 10.0, 1000, 0.5)]}})
    assert compreport.link_statement(one).startswith("One link measured")
    two = compreport.hooks_frame({"NVLink": {"hooks": [_hook("none", 10.0, 1000, 0.5)]},
                            "host-staged": {"hooks": [_hook("none", 10.1, 1000, 0.5)]}})
    assert "did not show" in compreport.link_statement(two)
    staged_faster = compreport.hooks_frame({"NVLink": {"hooks": [_hook("none", 14.0, 1000, 0.5)]},
                                      "host-staged": {"hooks": [_hook("none", 12.0, 1000, 0.5)]}})
    assert "fastest on host-staged" in compreport.link_statement(staged_faster)


def test_pool_rounds_pools_steps_and_keeps_the_first_curves():
    from nvtutorial.workloads.compression import pool_rounds

    a = dict(_hook("fp16", 10.0, 500, 0.5), step_ms_all=[9.0, 10.0, 11.0], wall_ms_per_step=10.0,
             nvlink_tx_bytes_per_step=100.0, train_loss=[1.0, 0.5])
    b = dict(_hook("fp16", 14.0, 500, 0.6), step_ms_all=[13.0, 14.0, 15.0], wall_ms_per_step=14.0,
             nvlink_tx_bytes_per_step=None, train_loss=[9.0])
    pooled = pool_rounds([a, b])
    assert pooled["step_ms_all"] == [9.0, 10.0, 11.0, 13.0, 14.0, 15.0]
    assert pooled["step_ms_median"] == pytest.approx(12.0)
    assert pooled["step_ms_round_medians"] == [10.0, 14.0]
    assert pooled["step_ms_spread"] == pytest.approx(4.0 / 12.0)
    assert pooled["wall_ms_per_step"] == pytest.approx(12.0)
    assert pooled["nvlink_tx_bytes_per_step"] == pytest.approx(100.0)  # rounds without a reading are left out
    assert pooled["train_loss"] == [1.0, 0.5] and pooled["final_iou"] == 0.5


def test_claim_verdicts():
    rows = [{"case": "a", "implementation": "source", "ran": True, "exact": False, "error": None},
            {"case": "b", "implementation": "source", "ran": False, "exact": False, "error": "RuntimeError: x"},
            {"case": "a", "implementation": "course", "ran": True, "exact": True, "error": None},
            {"case": "b", "implementation": "course", "ran": True, "exact": True, "error": None}]
    text = colreport.source_verdict(rows)
    assert text.startswith("C22 refuted") and "exact in 2 of 2" in text
    dense = comp.density_summary([comp.density_row("w", torch.randn(8, 8))])
    assert compreport.density_verdict(dense).startswith("C23 refuted")
    sparse = comp.density_summary([comp.density_row("w", torch.cat([torch.ones(1), torch.zeros(999)]))])
    assert compreport.density_verdict(sparse).startswith("C23 supported")


def test_nvml_statements_report_counter_or_why_not():
    runs = {"NVLink (NV18)": {"hooks": [dict(_hook("none", 10.0, 1000, 0.5), nvlink_tx_bytes_per_step=1100.0)]},
            "gloo (CPU)": {"hooks": [dict(_hook("none", 10.0, 1000, 0.5), nvlink_note="not available: no GPU")]}}
    lines = compreport.nvml_statements(compreport.hooks_frame(runs))
    assert "NVML ÷ counted = 1.10" in lines[0]
    assert lines[1].endswith("not available: no GPU")


def test_workload_hook_names_match_the_package():
    from nvtutorial.workloads import compression as workload

    assert workload.HOOK_NAMES == comp.HOOKS
    assert workload.nvlink_tx_bytes(type("Ctx", (), {"is_gpu": False})())[0] is None
