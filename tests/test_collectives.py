"""Custom collectives and gradient compression (notebook 07): exact where they must be, bytes by formula.

One real 2-rank gloo group (``%%ranks``' pool, ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` so that the
source's mismatched ``all_gather`` raises instead of aborting) serves every distributed test:
the lessons' functions, the exercise's checker on its solution and its known wrong answers (the
path a notebook's checker cell takes), and both workloads' ``run`` on the ranks, whose metrics (written as the
launcher writes them, read back typed through the chapter's schemas) the report turns into the verdicts the notebook
shows. The rest are in-process unit tests.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import textwrap

import pytest
import torch

from nvtutorial import launch
from nvtutorial.chapters.ch07_collectives import exercises as exercise
from nvtutorial.chapters.ch07_collectives import report, schema, schema_compression
from nvtutorial.chapters.ch07_collectives import report_compression as compression_report
from nvtutorial.chapters.ch07_collectives import workload_density as density
from nvtutorial.chapters.ch07_collectives.workload import ring_bytes
from nvtutorial.report import claims
from nvtutorial.report.verdict import compare
from nvtutorial.results import typed
from nvtutorial.teach import check, ranks

WORLD = 2


@pytest.fixture(scope="module")
def pool():
    """2 gloo ranks with TORCH_DISTRIBUTED_DEBUG=DETAIL (the source's mismatched all_gather then raises)."""
    ranks.start(
        nproc=WORLD,
        backend="gloo",
        timeout=240,
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "OMP_NUM_THREADS": "1"},
        quiet=True,
    )
    yield ranks
    ranks.stop()


@pytest.fixture(scope="module")
def plain_pool(pool):
    """The same ranks without DETAIL: torch 2.13 crashes building DDP under DETAIL on gloo."""
    ranks.restart(env={"OMP_NUM_THREADS": "1"}, quiet=True)
    return ranks


def on_ranks(fn, *args) -> list:
    """Run the module-level function ``fn(*args)`` on every rank; every rank's return value."""
    source = textwrap.dedent(inspect.getsource(fn))
    result = ranks.run_code(f"{source}\n_out = {fn.__name__}(*{args!r})\n")
    assert result.ok, "\n".join(result.report())
    return ranks.pull("_out")


# --------------------------------------------------------------------------------------------
# Code that runs on the ranks (sent as source)


def ring_cases():
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce
    from nvtutorial.chapters.ch07_collectives.workload import plain_group
    from nvtutorial.workloads._commcount import counting

    group, out = plain_group("gloo"), []
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for numel in (1, 3, 1001, 4096):
        for slices in (1, 3):
            x = torch.randn(numel, generator=torch.Generator().manual_seed(numel + rank))
            mine, ref = x.clone(), x.clone()
            with counting(world_size) as count:
                returned = ring_all_reduce(mine, group=group, slices=slices)
            dist.all_reduce(ref, group=group)
            out.append(
                {
                    "numel": numel,
                    "slices": slices,
                    "equal": bool(torch.equal(mine, ref)),
                    "sent": count.sent,
                    "returned": returned,
                    "unwaited": count.unwaited,
                }
            )
    dist.destroy_process_group(group)
    return out


def workload_metrics(which, params):
    import dataclasses
    import tempfile
    from pathlib import Path

    import torch.distributed as dist

    from nvtutorial import runtime
    from nvtutorial.chapters.ch07_collectives import workload as collectives_bench
    from nvtutorial.chapters.ch07_collectives import workload_compression as compression

    module = {"collectives_bench": collectives_bench, "compression": compression}[which]
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ctx = runtime.Context(rank, rank, world_size, "gloo", torch.device("cpu"), Path(tempfile.mkdtemp()))
    return dataclasses.asdict(module.run(ctx, module.Params(**params)))  # as the launcher writes rank{R}.json


def powersgd_with_a_visible_gpu():
    """Issue 11: a CPU rank that sees a GPU (simulated: CUDA "available", synchronize refusing a CPU
    device as it does) fails in PowerSGD's hook, until the workload hides the GPU from the rank."""
    from types import SimpleNamespace

    from torch.nn.parallel import DistributedDataParallel as DDP

    from nvtutorial.chapters.ch07_collectives.lessons.compression import register
    from nvtutorial.chapters.ch07_collectives.workload_compression import hide_gpus_from_cpu_rank

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
        hidden = hide_gpus_from_cpu_rank(SimpleNamespace(is_gpu=False))
        train(second)
        return {"before": before, "hidden": hidden, "after": "ran"}
    finally:
        torch.cuda.is_available, torch.cuda.synchronize = real


# --------------------------------------------------------------------------------------------
# The lessons on the ranks


def test_ring_equals_all_reduce_and_sends_the_formula(pool):
    for rank, rows in enumerate(on_ranks(ring_cases)):
        for row in rows:
            assert row["equal"], row
            assert row["sent"] == row["returned"] == ring_bytes(row["numel"], 4, WORLD, rank), row
            assert row["unwaited"] == 0
    # 2 ranks: each sends exactly the tensor's size (2 (W-1)/W = 1)
    assert [r["sent"] for r in on_ranks(ring_cases)[0] if r["numel"] == 4096] == [4096 * 4] * 2


def lesson_check(module, *args):
    import importlib

    lesson = importlib.import_module(f"nvtutorial.chapters.ch07_collectives.lessons.{module}")
    device = torch.device("cpu")
    return lesson.train(*args, device) if module == "compression" else lesson.check(*args, device)


def test_the_lessons_own_checks_hold_on_the_ranks(pool):
    """What each lesson file's main() runs after init_process_group (its `check`), on 2 gloo ranks with DETAIL."""
    assert all(
        r["equal"] and r["sent_bytes"] == ring_bytes(1001, 4, WORLD, i)
        for i, r in enumerate(on_ranks(lesson_check, "collectives", 1001, 2))
    )
    for found in on_ranks(lesson_check, "sparse_allreduce"):
        assert found["the source's"].startswith("failed: RuntimeError: Detected mismatch"), found
        assert found["the correct"] == "equal to all_reduce / W: True"


def test_exercise_checker_passes_the_solution_and_names_each_wrong_answer(pool):
    def define(source: str) -> None:
        result = ranks.run_code(source)
        assert result.ok, result.report()

    define(check.candidate_source(exercise.SOLUTION))
    verdict = check.check_ranks("ring_allreduce")
    assert verdict.passed, verdict.reason
    for name, (source, words) in exercise.WRONG.items():
        define(source)
        verdict = check.check_ranks("ring_allreduce")
        assert not verdict.passed and words in verdict.reason, (name, verdict.reason)
    define("def ring_all_reduce(tensor):\n    pass\n")  # an unfinished starting point fails, never raises
    assert "unchanged" in check.check_ranks("ring_allreduce").reason
    define("del ring_all_reduce\n")
    assert "no function ring_all_reduce" in check.check_ranks("ring_allreduce").reason


# --------------------------------------------------------------------------------------------
# The workloads on the ranks, and the verdicts the notebook shows


def read_back(rank_type, metrics):
    """Every rank's metrics as the kernel reads them: through JSON, typed by the workload's schema."""
    return [typed(rank_type, json.loads(json.dumps(m))) for m in metrics]


@pytest.fixture(scope="module")
def bench(pool) -> list[schema.Rank]:
    return read_back(
        schema.Rank,
        on_ranks(
            workload_metrics,
            "collectives_bench",
            {
                "sizes": (4096, 65536),
                "slices": (1, 3),
                "warmup": 1,
                "repeats": 2,
                "sparse_numel": 4096,
                "densities": (0.01, 0.6),
                "case_numel": 512,
                "random_cases": 2,
            },
        ),
    )


def test_c22_on_the_cpu(bench):
    v = claims.claim("C22").decider()(bench[0].source_cases, "CPU")
    assert v.status == claims.claim("C22").status == "wrong"
    assert v.numbers["source_exact"] == 1  # only "same positions on every rank"
    assert v.numbers["source_wrong"] == 1  # same count, other positions: it runs and averages unrelated entries
    assert v.numbers["source_failed"] == 3 and v.numbers["course_exact"] == v.numbers["cases"] == 5
    wrong = next(r for r in bench[0].source_cases if r.implementation == "source" and r.ran and not r.exact)
    assert not wrong.ranks_agree  # the ranks even end with different tensors
    failed = [r for r in bench[0].source_cases if r.implementation == "source" and not r.ran]
    assert all(r.error is not None and "mismatch" in r.error for r in failed)


def test_ring_and_sparse_verdicts_on_the_cpu(bench):
    assert report.ring_check(bench, "CPU").status == "pass"
    speed = report.ring_speed(bench, "CPU", gpu=False)
    assert speed.status == "info" and set(speed.numbers["share_by_variant"]) == {"ring, 1 slice", "ring, 3 slices"}
    sparse = report.sparse_verdict(bench[0].sparse, "CPU")
    assert sparse.status == "pass" and sparse.numbers["judged_by"] == "compare"
    rows = {r.density: r for r in bench[0].sparse}
    # bytes of the correct sparse all-reduce: the count + max_count int32 indices and fp32 values, all-gathered
    for r in rows.values():
        assert r.dense_bytes_sent == 4096 * 4  # 2 (W-1)/W × the tensor
    assert rows[0.01].bytes_ratio < 0.1 < 1 < rows[0.6].bytes_ratio
    assert [row.indices_shape for row in bench[0].indexing] == [(3, 1), (3, 2), (3, 4)]
    assert (bench[0].indexing[1].error or "").startswith("IndexError")
    assert bench[0].indexing[2].values_numel == 3 * 4 * 27  # whole slices, not 3 numbers
    ring = bench[0].ring
    assert [(r.size_bytes, r.variant) for r in ring] == [
        (4096, "ring, 1 slice"),
        (4096, "ring, 3 slices"),
        (65536, "ring, 1 slice"),
        (65536, "ring, 3 slices"),
    ]
    assert all(r.ring_bytes_returned == r.ring_bytes_sent and len(r.ring_ms_all) == 2 for r in ring)
    assert bench[0].ring_all_equal and bench[0].debug_detail is True and bench[0].world_size == WORLD


@pytest.fixture(scope="module")
def hooks(plain_pool) -> list[schema_compression.Rank]:
    return read_back(
        schema_compression.Rank,
        on_ranks(
            workload_metrics,
            "compression",
            {
                "model": "tiny",
                "image_size": 16,
                "batch_size": 2,
                "samples": 8,
                "val_samples": 4,
                "warmup": 3,
                "steps": 2,
                "rounds": 2,
                "density_batches": 1,
                "topk_ratio": 0.01,
                "powersgd_rank": 1,
            },
        ),
    )


def test_compression_workload_counts_what_each_hook_sends(hooks):
    m = hooks[0]
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


def test_compression_verdicts_come_from_compare(hooks):
    runs = {hooks[0].link: hooks[0]}
    verdicts = compression_report.hook_verdicts(runs, "CPU")
    assert {v.numbers["hook"] for v in verdicts} == {h.hook for h in hooks[0].hooks} - {"none"}
    by = {h.hook: h for h in hooks[0].hooks}
    gap = compression_report.twin_gap(hooks[0])
    for v in verdicts:  # each is compare() of the rounds' medians, with the fp16/bf16 A/A gap in the noise
        c = compare(by["none"].step_ms_round_medians, by[v.numbers["hook"]].step_ms_round_medians, aa_gap=gap)
        assert (v.status, v.numbers["ratio"], v.numbers["noise"]) == (c.status, c.ratio, c.noise)
    frame = compression_report.hooks_frame(runs)
    assert set(frame["step_time"]) <= {"baseline", "faster", "slower", "no change"}
    diffs = compression_report.loss_differences(hooks[0])
    same = tuple(dataclasses.replace(by[h], train_loss=(1.0,)) for h in ("none", "fp16"))
    assert diffs["fp16"] < 1e-2 and "identical" in compression_report.loss_statement(
        dataclasses.replace(hooks[0], hooks=same)
    )


def test_powersgd_runs_on_cpu_ranks_that_see_a_gpu(hooks):
    for out in on_ranks(powersgd_with_a_visible_gpu):
        assert "ValueError: Expected a cuda device, but got: cpu" in out["before"], out  # the failure is real...
        assert out["hidden"] and out["after"] == "ran"  # ...and hiding the GPU from the rank avoids it


def test_the_compression_lesson_trains_identical_replicas(plain_pool):
    for hook in ("fp16", "powersgd", "topk"):
        for found in on_ranks(lesson_check, "compression", hook, 4):
            assert found["identical"] and found["last_loss"] < found["first_loss"] + 0.5, (hook, found)


# --------------------------------------------------------------------------------------------
# In-process unit tests


def test_ring_bytes_formula():
    assert ring_bytes(1000, 4, 2, 0) == ring_bytes(1000, 4, 2, 1) == 4000
    for world in (2, 3, 4):
        assert sum(ring_bytes(1001, 4, world, r) for r in range(world)) == 2 * (world - 1) * 1001 * 4
    assert ring_bytes(1200, 1, 4, 0) == 1800  # 2 (W-1)/W × size when W divides it


def test_source_function_is_the_published_code():
    from nvtutorial.chapters.ch07_collectives.lessons import sparse_allreduce

    text = inspect.getsource(sparse_allreduce.source_sparse_allreduce)
    for line in (
        "indices = tensor.nonzero()",
        "values = tensor[indices]",
        "gathered = [torch.zeros_like(values) for _ in range(world_size)]",
        "torch.distributed.all_gather(gathered, values)",
        "stacked = torch.stack(gathered)",
        "mean = stacked.mean(dim=0)",
        "tensor.zero_()",
        "tensor[indices] = mean",
    ):
        assert line in text


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


def test_density_verdict_decides_c23_both_ways():
    dense = density.density_summary([density.density_row("w", torch.randn(8, 8))])
    assert compression_report.density_verdict(dense, "").status == "wrong"
    sparse = density.density_summary([density.density_row("w", torch.cat([torch.ones(1), torch.zeros(999)]))])
    assert compression_report.density_verdict(sparse, "").status == "holds"


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
    from nvtutorial.chapters.ch07_collectives import workload_compression as workload
    from nvtutorial.chapters.ch07_collectives.lessons.compression import HOOKS

    assert workload.HOOK_NAMES == HOOKS
    assert workload.nvlink_tx_bytes(type("Ctx", (), {"is_gpu": False})())[0] is None
