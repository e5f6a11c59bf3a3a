"""Invariants of DDP training (notebooks 03 and 04), on the CPU with gloo.

In-process tests use a one-rank gloo group; a 2-rank DistributedSampler is simulated by
building each rank's sampler explicitly (no process group needed for that). One real
2-process launch checks what only two processes can show: identical weights on both ranks,
validation equal to a single process, an exact resume, and set_epoch's effect.
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

import nvtutorial
from nvtutorial import launch
from nvtutorial.lessons import checkpoint as ckpt
from nvtutorial.lessons import training
from nvtutorial.models import segdata, unet
from nvtutorial.report import training as report
from nvtutorial.runtime import Context

from .conftest import requires_two_gpus

TINY = {"model": "tiny", "image_size": 32, "batch_size": 4, "samples": 32, "val_samples": 13, "classes": 4}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    """A one-rank gloo process group in this process, and its Context."""
    created = False
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(_free_port())
        dist.init_process_group("gloo", rank=0, world_size=1)
        created = True
    assert dist.get_world_size() == 1, "another test left a process group of more than one rank"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster, and steady on a busy machine
    yield Context(rank=0, local_rank=0, world_size=1, backend="gloo", device=torch.device("cpu"),
                  run_dir=tmp_path_factory.mktemp("train"))
    torch.set_num_threads(threads)
    if created:
        dist.destroy_process_group()


# --- data and model ----------------------------------------------------------------------------
def test_dataset_is_deterministic_and_batch_render_matches_items():
    a, b = segdata.make_dataset(6, 32, seed=3), segdata.make_dataset(6, 32, seed=3)
    other = segdata.make_dataset(6, 32, seed=4)
    for i in range(6):
        assert torch.equal(a[i][0], b[i][0]) and torch.equal(a[i][1], b[i][1])
    assert not torch.equal(a[0][0], other[0][0])
    images, masks = a.render([4, 1, 5])
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.float32
    assert masks.shape == (3, 32, 32) and masks.dtype == torch.int64
    assert torch.equal(images[1], a[1][0]) and torch.equal(masks[2], a[5][1])
    assert int(masks.min()) >= 0 and int(masks.max()) < 4 and (masks > 0).any()
    dev = segdata.DeviceShapes(a, "cpu")
    im, m = dev[[5, 0]]
    assert torch.equal(im[0], a[5][0]) and torch.equal(m[1], a[0][1])


def test_unet_output_shape_sizes_and_bad_input():
    net = unet.build_unet("tiny", classes=5)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 5, 32, 32)
    counts = {size: unet.count_parameters(unet.build_unet(size)) for size in ("tiny", "small", "full")}
    assert counts["tiny"] < 500_000 < counts["small"] < 10_000_000 < counts["full"] < 100_000_000
    with pytest.raises(ValueError, match="divisible"):
        net(torch.randn(1, 3, 36, 36))
    with pytest.raises(ValueError, match="size"):
        unet.build_unet("huge")  # type: ignore[arg-type]


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    a = unet.build_unet("tiny")
    b = unet.build_unet("tiny")
    b.load_state_dict(a.state_dict())
    b.checkpointing = True
    x = torch.randn(2, 3, 32, 32)
    a(x).square().mean().backward()
    b(x).square().mean().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-5, atol=1e-6)


# --- training, validation, checkpoints (one rank, in process) -----------------------------------
def test_loss_goes_down_and_iou_goes_up(ctx):
    s = training.setup(ctx, **TINY, lr=1e-2, data="device")
    before = training.evaluate(s, ctx)
    for epoch in range(4):
        for images, masks in training.batches(s, epoch):
            training.train_step(s, images, masks)
    after = training.evaluate(s, ctx)
    assert after["loss"] < 0.8 * before["loss"], (before, after)
    assert after["iou"] > before["iou"]
    assert after["samples"] == TINY["val_samples"]


def test_validation_over_two_ranks_equals_single_process_with_padding(ctx):
    s = training.setup(ctx, **TINY, lr=1e-2)
    for images, masks in training.batches(s, 0):
        training.train_step(s, images, masks)
    val_set = s.val_loader.dataset
    n = len(val_set)
    world = 2
    total = torch.zeros(3 + 2 * s.classes, dtype=torch.float64)
    padded = 0
    for rank in range(world):  # what each of 2 ranks would compute, then the all_reduce (a sum)
        sampler = DistributedSampler(val_set, num_replicas=world, rank=rank, shuffle=False)
        padded += len(sampler)
        loader = DataLoader(val_set, batch_size=3, sampler=sampler)
        total += training.evaluation_counts(s, rank, world, n, model=s.module, loader=loader)
    assert padded == n + 1, "13 samples over 2 ranks: DistributedSampler pads one"
    two_ranks = training.metrics_from_counts(total, s.classes)
    single = training.evaluate_single_process(s)
    assert two_ranks["samples"] == single["samples"] == n
    assert math.isclose(two_ranks["loss"], single["loss"], rel_tol=1e-9)
    assert two_ranks["iou_per_class"] == pytest.approx(single["iou_per_class"], rel=1e-12, nan_ok=True)
    # the padding matters: counting the duplicate changes the loss
    naive = torch.zeros_like(total)
    for rank in range(world):
        sampler = DistributedSampler(val_set, num_replicas=world, rank=rank, shuffle=False)
        naive += training.evaluation_counts(s, 0, 1, 10**9, model=s.module,
                                            loader=DataLoader(val_set, batch_size=3, sampler=sampler))
    assert training.metrics_from_counts(naive, s.classes)["samples"] == n + 1
    assert training.metrics_from_counts(naive, s.classes)["loss"] != two_ranks["loss"]


def test_accumulated_step_equals_one_big_step(ctx):
    a = training.setup(ctx, **{**TINY, "batch_size": 8})
    b = training.setup(ctx, **{**TINY, "batch_size": 8})
    images, masks = next(iter(a.loader))
    training.train_step(a, images, masks)
    training.train_step_accumulated(b, [(images[:4], masks[:4]), (images[4:], masks[4:])])
    for pa, pb in zip(a.module.parameters(), b.module.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-6)


def test_resumed_run_matches_uninterrupted(ctx, tmp_path):
    def losses(s, epoch):
        return [training.train_step(s, im, m).item() for im, m in training.batches(s, epoch)]

    s = training.setup(ctx, **TINY)
    first = losses(s, 0)
    path = ckpt.save_checkpoint(tmp_path / "ck.pt", s, epoch=0, step=len(first))
    uninterrupted = losses(s, 1) + losses(s, 2)
    weights = [p.detach().clone() for p in s.module.parameters()]

    fresh = training.setup(ctx, **TINY, seed=0)
    with torch.no_grad():  # make sure the checkpoint, not the seed, decides the weights
        for p in fresh.module.parameters():
            p.add_(1.0)
    meta = ckpt.load_checkpoint(path, fresh)
    assert meta == {"epoch": 0, "step": len(first), "extra": {}}
    resumed = losses(fresh, 1) + losses(fresh, 2)
    assert resumed == uninterrupted
    for a, b in zip(weights, fresh.module.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.load_checkpoint(tmp_path / "missing.pt", fresh)


def test_train_workload_variants_in_process(ctx):
    from nvtutorial.workloads import train

    p = train.Params(**{k: v for k, v in TINY.items()}, variants=("base", "batch_size=2+accumulation=2",
                                                                  "data=device+gradient_as_bucket_view=true"),
                     warmup=1, steps=2)
    out = train.run(ctx, p)  # (on a CPU it sets one thread, as the fixture already has)
    rows = out["rows"]
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert rows[1]["global_batch"] == rows[0]["global_batch"] == 4
    for r in rows:
        assert len(r["loss_curve"]) == 3 and r["step_ms"] > 0 and r["peak_mem_gb"] is None
        assert "comm_share" in r and r["samples_per_s"] == pytest.approx(r["global_batch"] / r["step_ms"] * 1e3)
    # identical data and initial weights: the first loss is the same whatever the knob
    assert rows[0]["loss_curve"][0] == pytest.approx(rows[2]["loss_curve"][0], rel=1e-6)


def test_attention_workload_counts_sdpa_calls_and_restores_switches():
    from nvtutorial.workloads import attention_sdp

    before = torch.backends.cuda.flash_sdp_enabled()
    c = Context(rank=0, local_rank=0, world_size=1, backend="gloo", device=torch.device("cpu"), run_dir=Path("."))
    out = attention_sdp.run(c, attention_sdp.Params(batch=1, heads=2, seq=32, head_dim=16, warmup=0, repeats=1,
                                                    unet="tiny", unet_image_size=16, unet_batch=1))
    assert out["unet"]["sdpa_calls"] == 0 and out["unet"]["attention_block_sdpa_calls"] == 1
    assert any(b["runs"] for b in out["backends"] if b["backend"] == "MATH")
    assert torch.backends.cuda.flash_sdp_enabled() == before == out["after"]["flash_sdp_enabled"]
    settings = [r["setting"] for r in out["attention"]]
    assert settings[:2] == ["default switches", "enable_flash_sdp(False)"]


# --- bad parameters are rejected before anything starts ----------------------------------------
@pytest.mark.parametrize("params, match", [
    ({"variants": ("foo=1",)}, "unknown knob"),
    ({"variants": ("amp=fp8",)}, "fp8"),
    ({"variants": ("data=device+num_workers=2",)}, "data=device"),
    ({"image_size": 30, "epochs": 1}, "multiple of 16"),
    ({}, "nothing to do"),
    ({"epochs": 2, "resume_check": True}, "checkpoint before the last epoch"),
    ({"epochs": 1, "batch_size": 0}, "batch_size"),
])
def test_bad_train_params_rejected_before_launch(params, match, runs_dir):
    with pytest.raises(nvtutorial.LaunchError, match=match):
        launch.prepare("train", nproc=2, backend="gloo", params=params)
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_bad_attention_params_rejected_before_launch():
    with pytest.raises(nvtutorial.LaunchError, match="seq"):
        launch.prepare("attention_sdp", nproc=1, backend="gloo", params={"seq": 0})
    with pytest.raises(ValueError, match="amp"):
        training.check_setup_args(model="tiny", batch_size=1, image_size=32, samples=4, val_samples=4, classes=2,
                                  amp="fp64", num_workers=0)


# --- report arithmetic ---------------------------------------------------------------------------
def _row(variant, sps, mem=None, losses=(2.0, 1.0), status="ok", batch=8, comm=0.05):
    return {"variant": variant, "status": status, "samples_per_s": sps, "peak_mem_gb": mem, "per_gpu_batch": batch,
            "global_batch": batch * 2, "world_size": 2, "step_ms": 1000 * batch * 2 / sps, "loss_curve": list(losses),
            "comm_share": comm}


def test_scaling_summary_and_memory_verdict():
    one = {**_row("one", 100.0, mem=10.0, batch=8), "world_size": 1}
    fixed_global = _row("g", 180.0, mem=5.5, batch=4)
    fixed_per_gpu = _row("p", 196.0, mem=10.1, batch=8)
    s = report.scaling_summary(one, fixed_global, fixed_per_gpu)
    assert s["fixed_per_gpu"]["efficiency"] == pytest.approx(0.98)
    assert s["fixed_global"]["speedup"] == pytest.approx(1.8)
    assert s["fixed_global"]["memory_ratio"] == pytest.approx(0.55)
    assert "0.55 with a fixed global batch" in report.verdict_c15(s)
    assert "meets" in report.verdict_scaling(0.98) and "misses" in report.verdict_scaling(0.9)
    with pytest.raises(ValueError):
        report.efficiency(10.0, 0.0)
    assert report.scaling_summary(one, {"status": "failed"}, fixed_per_gpu)["fixed_global"] is None


def test_source_comparison_table():
    rows = {"1gpu": _row("a", 100.0, mem=20.0), "nvlink": _row("b", 190.0, mem=11.0, comm=0.02),
            "host": _row("c", 170.0, mem=11.0, comm=0.12), "socket": None}
    table = report.source_comparison(rows, epoch_images=6000)
    assert list(table["path"]) == list(report.PATHS.values())
    assert table.loc[0, "min/epoch (ours)"] == 1.0 and table.loc[1, "speed-up (ours)"] == 1.9
    assert table.loc[3, "min/epoch (ours)"] == "not run"
    assert table.loc[1, "min/epoch (source)"] == 29.0 and table.loc[2, "comm share (source)"] == "18.0 %"
    assert "1.12×" in report.verdict_c14(rows)


def test_rank_knobs_orders_by_gain_and_flags_broken_training():
    rows = [_row("base", 100.0, mem=10.0), _row("fast", 130.0, mem=10.0), _row("slow", 80.0, mem=6.0),
            _row("broken", 150.0, mem=10.0, losses=(2.0, float("nan"))), _row("x", 1.0, status="failed: boom")]
    ranking = report.rank_knobs(rows)
    assert list(ranking["knob"]) == ["broken", "fast", "slow", "x"]
    verdicts = dict(zip(ranking["knob"], ranking["verdict"]))
    assert verdicts["broken"] == "breaks training"
    assert verdicts["fast"].startswith("30 % faster")
    assert verdicts["slow"] == "20 % slower, 40 % less memory"
    assert verdicts["x"] == "failed: boom"


def test_optimisation_variants_are_valid_train_variants():
    from nvtutorial import params as params_mod
    from nvtutorial.workloads import train

    groups = report.optimisation_variants(32, 4, (1, 100), compile=True)
    names = report.all_variants(groups)
    assert names[0] == "base" and names[-1] == "compile=true" and len(set(names)) == len(names)
    assert "batch_size=8+accumulation=4" in groups["accumulation"]
    params_mod.build(train.Params, {"variants": names})  # every name parses
    with pytest.raises(ValueError):
        report.optimisation_variants(30, 4)


def test_lms_does_not_exist():
    out = report.lms_check()
    assert out["exists"] is False and out["error"].startswith("AttributeError")


# --- one real 2-process launch -----------------------------------------------------------------
def test_two_ranks_identical_weights_exact_validation_and_resume(runs_dir):
    res = nvtutorial.run("train", nproc=2, backend="gloo", output="none", timeout=240, params={
        **TINY, "lr": 0.01, "epochs": 3, "checkpoint_at": 0, "resume_check": True, "shuffle_epochs": 2,
        "variants": ("base",), "warmup": 1, "steps": 2})
    r0, r1 = (r["lesson"] for r in res.ranks)
    assert r0["weights_checksum"] == r1["weights_checksum"]
    assert r0["val_padding"] == 1 and r0["val"]["samples"] == TINY["val_samples"]
    assert math.isclose(r0["val"]["loss"], r0["val_single"]["loss"], rel_tol=1e-9)
    assert r0["val"]["loss"] == r1["val"]["loss"]
    assert r0["val_naive"]["samples"] == TINY["val_samples"] + 1
    assert r0["resume"]["identical"] and r0["resume"]["weights_checksum"] == r0["weights_checksum"]
    assert r0["history"][-1]["val_loss"] < r0["history"][0]["val_loss"]
    sh0, sh1 = res.ranks[0]["shuffle"], res.ranks[1]["shuffle"]
    assert sh0["identical_without"] and not sh0["identical_with"]
    assert not set(sh0["with_set_epoch"][0]) & set(sh1["with_set_epoch"][0]), "ranks must get disjoint samples"
    assert res.metrics["rows"][0]["status"] == "ok" and len(res.metrics["rows"][0]["peak_mem_gb_per_rank"]) == 2


@pytest.mark.gpu
@requires_two_gpus
def test_two_gpus_nccl_identical_weights_memory_and_exact_resume(runs_dir):
    res = nvtutorial.run("train", nproc=2, backend="nccl", output="none", timeout=300, params={
        **TINY, "lr": 0.01, "amp": "bf16", "epochs": 3, "checkpoint_at": 0, "resume_check": True,
        "variants": ("data=device", "data=device+amp=fp16"), "warmup": 2, "steps": 3})
    r0, r1 = (r["lesson"] for r in res.ranks)
    assert r0["weights_checksum"] == r1["weights_checksum"]
    assert math.isclose(r0["val"]["loss"], r0["val_single"]["loss"], rel_tol=1e-6)
    assert r0["resume"]["max_abs_loss_diff"] < 1e-3
    for row in res.metrics["rows"]:
        assert row["status"] == "ok" and all(m is not None and m > 0 for m in row["peak_mem_gb_per_rank"])


def test_verdict_c10_separates_optimizer_step_and_peak():
    from nvtutorial.report import training as report

    def row(variant, optimizer_gb, peak_gb):
        return {"variant": variant, "status": "ok", "samples_per_s": 100.0, "loss_curve": [1.0, 0.5],
                "optimizer_mem_gb": optimizer_gb, "peak_mem_gb": peak_gb}

    rows = [row("base", 1.124, 13.06), row("gradient_as_bucket_view=true", 1.0, 13.18)]
    text = report.verdict_c10(rows, params=31_000_000)
    assert "holds 0.124 GB less" in text and "31.0 M parameters is 0.124 GB" in text
    assert "no measurable change" in text  # 0.12 GB of 13 GB is under 1 %
    rows[1]["peak_mem_gb"] = 12.0
    assert "+1.060 GB saved" in report.verdict_c10(rows)
    cpu = [dict(r, optimizer_mem_gb=None, peak_mem_gb=None) for r in rows]
    assert "not measured on CPU" in report.verdict_c10(cpu, is_gpu=False)
