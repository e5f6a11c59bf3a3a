"""Chapter 7's workloads: the bench and the compression hooks on live gloo ranks, the ring's byte
formula, the density rows, their parameters."""

from __future__ import annotations

import pytest
import torch

from nvtutorial import launch
from nvtutorial.chapters.ch07_collectives import workload_density as density
from nvtutorial.chapters.ch07_collectives.workload import ring_bytes
from tests.helpers.collectives_ranks import on_pool


def powersgd_with_a_visible_gpu():
    """Issue 11: a CPU rank that sees a GPU (simulated: CUDA "available", synchronize refusing a CPU
    device as it does) fails in PowerSGD's hook, until the workload hides the GPU from the rank."""
    from types import SimpleNamespace
    from typing import cast

    from torch.nn.parallel import DistributedDataParallel as DDP

    from nvtutorial.chapters.ch07_collectives.lessons.compression import register
    from nvtutorial.chapters.ch07_collectives.workload_compression import hide_gpus_from_cpu_rank
    from nvtutorial.runtime import Context

    def synchronize(device=None):
        raise ValueError("Expected a cuda device, but got: cpu")

    def model():  # built while torch still sees no GPU: DDP itself would touch CUDA
        torch.manual_seed(0)
        ddp = DDP(torch.nn.Linear(8, 4))
        register(ddp, "powersgd", start_iter=2)
        return ddp

    def train(ddp):
        for _ in range(3):
            ddp(torch.randn(4, 8)).sum().backward()

    real = torch.cuda.is_available, torch.cuda.synchronize
    first, second = model(), model()
    try:
        torch.cuda.is_available, torch.cuda.synchronize = (lambda: True), synchronize
        try:
            train(first)
            before = "ran"
        except Exception as exc:
            before = str(exc)
        hidden = hide_gpus_from_cpu_rank(cast(Context, SimpleNamespace(is_gpu=False)))
        train(second)
        return {"before": before, "hidden": hidden, "after": "ran"}
    finally:
        torch.cuda.is_available, torch.cuda.synchronize = real


def test_compression_workload_counts_what_each_hook_sends(cpu_hooks):
    m = cpu_hooks[0]
    by = {h.hook: h for h in m.hooks}
    dense = by["none"].dense_bytes_per_step
    assert by["none"].sent_bytes_per_step == dense  # DDP's all-reduce of every fp32 gradient
    assert by["fp16"].sent_bytes_per_step == dense / 2
    assert 0 < by["powersgd"].sent_bytes_per_step < dense / 10
    assert 0 < by["topk"].sent_bytes_per_step < dense / 10
    assert all(h.compressed_when_timed for h in m.hooks)
    expected = {"none", "fp16", "bf16", "powersgd", "topk"} - set(m.skipped_hooks)
    assert set(by) == expected and (torch.version.cuda or "bf16" in m.skipped_hooks)
    assert all(len(h.step_ms_round_medians) == 2 and len(h.step_ms_all) == 2 * 2 for h in m.hooks)
    assert all(h.train_loss_rounds_equal is not None and len(h.train_loss) == 3 + 2 for h in m.hooks)
    assert (by["topk"].topk_residual_norm or 0) > 0 and by["none"].topk_residual_norm is None
    trained = m.density_summary.trained
    assert trained is not None and trained.params == by["none"].params
    assert density.density_summary(m.density) == trained  # the rows after training, and their summary
    assert density.density_summary(m.density_initial) == m.density_summary.initial != trained


def test_powersgd_runs_on_cpu_ranks_that_see_a_gpu(cpu_hooks):
    for out in on_pool(powersgd_with_a_visible_gpu):
        assert "ValueError: Expected a cuda device, but got: cpu" in out["before"], out  # the failure is real...
        assert out["hidden"] and out["after"] == "ran"  # ...and hiding the GPU from the rank avoids it


def test_ring_bytes_formula():
    assert ring_bytes(1000, 4, 2, 0) == ring_bytes(1000, 4, 2, 1) == 4000
    for world in (2, 3, 4):
        assert sum(ring_bytes(1001, 4, world, r) for r in range(world)) == 2 * (world - 1) * 1001 * 4
    assert ring_bytes(1200, 1, 4, 0) == 1800  # 2 (W-1)/W × size when W divides it


def test_density_row_and_summary():
    g = torch.zeros(100)
    g[:10] = 1.0  # 90 % zero, the 10 non-zeros share the energy evenly
    row = density.density_row("w", g.view(10, 10), energy=0.99, topk_ratio=0.05)
    assert row.frac_zero == pytest.approx(0.9) and row.frac_for_energy == pytest.approx(0.10)
    assert row.topk_energy_share == pytest.approx(0.5) and (row.layer, row.numel, row.ndim) == ("w", 100, 2)
    summary = density.density_summary([row, density.density_row("d", torch.ones(50))])
    assert summary is not None and summary.params == 150 and summary.frac_zero == pytest.approx(90 / 150)
    assert summary.layers == 2 and summary.max_layer_frac_zero == pytest.approx(0.9)
    # source format: 2 int64 coordinates + fp32 value per 2-D entry, 1 int64 + value per 1-D one
    assert summary.source_format_ratio == pytest.approx((10 * 20 + 50 * 12) / (4 * 150))
    assert summary.index_value_ratio == pytest.approx((10 + 50) * 8 / (4 * 150))
    assert density.density_summary([]) is None  # no entries: nothing to summarise


def test_bad_parameters_fail_before_launch():
    with pytest.raises(launch.LaunchError, match="warmup"):
        launch.prepare("compression", params={"warmup": 2, "start_iter": 2})
    with pytest.raises(launch.LaunchError, match="rounds"):
        launch.prepare("compression", params={"rounds": 1})
    with pytest.raises(launch.LaunchError, match="hooks"):
        launch.prepare("compression", params={"hooks": "none,gzip"})
    with pytest.raises(launch.LaunchError, match="sizes"):
        launch.prepare("collectives_bench", params={"sizes": "6"})


def test_workload_hook_names_match_the_lesson():
    from typing import cast

    from nvtutorial.chapters.ch07_collectives import workload_compression as workload
    from nvtutorial.chapters.ch07_collectives.lessons.compression import HOOKS
    from nvtutorial.runtime import Context

    assert workload.HOOK_NAMES == HOOKS
    assert workload.nvlink_tx_bytes(cast(Context, type("Ctx", (), {"is_gpu": False})()))[0] is None
