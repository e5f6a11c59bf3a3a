"""Notebook 07's GPU-only conclusions, recomputed from the committed 2× H200 result JSON.

Each test reads ``reference/h200x2/runs/...`` as the notebook reads a run (``RunResult.load``, then typed through
the workload's schema: ``ranks_as``), feeds it to the report function the notebook uses and asserts the status and
the numbers it rests on, so a code change that flips a reference conclusion fails here. (The verdicts that hold on
the CPU too are asserted on a real gloo run in ``tests/test_collectives.py``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nvtutorial.chapters.ch07_collectives import report, schema, schema_compression
from nvtutorial.chapters.ch07_collectives import report_compression as compression_report
from nvtutorial.report import claims
from nvtutorial.results import RunResult

RUNS = Path(__file__).resolve().parent.parent / "reference" / "h200x2" / "runs"
BENCH = RUNS / "collectives_bench-20261130-022952-f3a4e5" / "result.json"
COMPRESSION = [
    RUNS / "compression-20261130-023009-540e2f" / "result.json",
    RUNS / "compression-20261130-023036-220ce9" / "result.json",
]


@pytest.fixture(scope="module")
def bench() -> list[schema.Rank]:
    return RunResult.load(BENCH).ranks_as(schema.Rank)


@pytest.fixture(scope="module")
def hooks() -> dict[str, schema_compression.Rank]:
    runs = [RunResult.load(p).metrics_as(schema_compression.Rank) for p in COMPRESSION]
    return {m.link: m for m in runs}


def test_the_reference_runs_are_gpu_runs():
    for path in [BENCH, *COMPRESSION]:
        env = RunResult.load(path).env
        assert env is not None and env.backend == "nccl" and env.device_names == ("NVIDIA H200",) * 2


def test_c22_from_the_gpu_run(bench):
    v = claims.claim("C22").decider()(bench[0].source_cases, "2× H200")
    assert v.status == claims.claim("C22").status == "wrong"
    assert v.numbers["source_exact"] == 1 and v.numbers["source_wrong"] == 1 and v.numbers["source_failed"] == 5
    assert v.numbers["course_exact"] == v.numbers["cases"] == 7


def test_c23_from_the_gpu_run(hooks):
    summary = hooks["NVLink (NV18)"].density_summary.trained
    v = claims.claim("C23").decider()(summary, "2× H200")
    assert v.status == claims.claim("C23").status == "wrong"
    assert v.numbers["index_value_ratio"] == pytest.approx(1.355, abs=0.01)  # more bytes than dense, not 85 % fewer
    assert v.numbers["source_format_ratio"] == pytest.approx(6.09, abs=0.05)
    assert v.numbers["frac_zero"] == pytest.approx(0.323, abs=0.005)
    assert v.numbers["best_saving"] < 0 < v.numbers["claimed_saving"]


def test_ring_on_the_gpus_is_exact_and_half_as_fast_as_nccl(bench):
    check = report.ring_check(bench, "2× H200")
    assert check.status == "pass" and check.numbers["bytes_match_formula"]
    speed = report.ring_speed(bench, "2× H200", gpu=True)
    # The reference ring (one slice, Python between the messages) reached 51 % at 64 MiB: below the goal.
    assert speed.status == "info" and speed.numbers["meets_target"] is False
    assert speed.numbers["best_share"] == pytest.approx(0.51, abs=0.01)
    assert speed.numbers["share_from"] == 64 * 2**20


def test_sparse_allreduce_on_the_gpus_never_faster(bench):
    v = report.sparse_verdict(bench[0].sparse, "2× H200")
    assert v.status == "pass"  # exact at every density
    assert v.numbers["fewer_bytes_up_to"] == 0.3 and v.numbers["faster_at"] == []


def test_hook_step_times_on_the_gpus(hooks):
    statuses = {(v.numbers["link"], v.numbers["hook"]): v.status for v in compression_report.hook_verdicts(hooks, "")}
    # No hook made the step faster on either link; PowerSGD and top-k made it slower on both;
    # fp16 and bf16 are within the noise (the rounds differ by up to 17 % on NVLink).
    assert "faster" not in statuses.values()
    for link in ("NVLink (NV18)", "host-staged"):
        assert statuses[(link, "powersgd")] == statuses[(link, "topk")] == "slower"
        assert statuses[(link, "fp16")] == statuses[(link, "bf16")] == "no change"
    twin = compression_report.twin_verdict(hooks, "")
    assert twin.numbers["gaps"]["NVLink (NV18)"] == pytest.approx(0.007, abs=0.002)
    # fp16 and bf16 over NVLink: 15-16 % slower, beyond their 0.7 % A/A gap but inside the rounds' ±17 %.
    nv = {
        v.numbers["hook"]: v
        for v in compression_report.hook_verdicts(hooks, "")
        if v.numbers["link"] == "NVLink (NV18)"
    }
    for twin_hook in ("fp16", "bf16"):
        v = nv[twin_hook]
        assert 0.15 < v.numbers["ratio"] - 1 < v.numbers["noise"] < 0.17 and v.numbers["needs_more_rounds"]
    assert not nv["powersgd"].numbers["needs_more_rounds"]


def test_the_hooks_prediction_from_the_gpu_run(hooks):
    choices = {"a": (), "b": ("fp16", "bf16"), "c": ("powersgd",), "d": ("topk",), "e": ("powersgd", "topk")}
    assert compression_report.prediction_answer(hooks, "NVLink (NV18)", choices, "f") == "a"  # no hook was faster
    assert compression_report.prediction_answer(hooks, "host-staged", choices, "f") == "a"


def test_hook_bytes_and_accuracy_on_the_gpus(hooks):
    frame = compression_report.hooks_frame(hooks)
    nvlink = frame[frame.link == "NVLink (NV18)"].set_index("hook")
    assert nvlink.loc["fp16", "bytes_saved"] == pytest.approx(0.5)
    assert nvlink.loc["topk", "bytes_saved"] == pytest.approx(0.98)
    # NVML saw the counted bytes for the large all-reduces, twice them for the small messages (LL protocol)
    assert nvlink.loc["none", "nvml_over_counted"] == pytest.approx(1.0, abs=0.02)
    assert nvlink.loc["topk", "nvml_over_counted"] == pytest.approx(2.0, abs=0.05)
    assert nvlink.loc["topk", "iou_vs_none"] < -compression_report.IOU_TOLERANCE  # top-k at 1 % cost IoU
    diffs = compression_report.loss_differences(hooks["NVLink (NV18)"])
    assert 0 < diffs["fp16"] < 1e-4 and diffs["topk"] > 1e-2  # close but not identical curves


def test_claims_of_notebook_07_name_their_deciders():
    for claim_id in ("C22", "C23"):
        c = claims.claim(claim_id)
        assert c.notebook == "07_custom_collectives" and callable(c.decider())
