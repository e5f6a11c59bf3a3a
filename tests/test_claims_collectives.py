"""Notebook 07's GPU-only conclusions, recomputed from the committed 2× H200 result JSON.

Each test reads ``reference/h200x2/runs/...`` as the notebook reads a run (``RunResult.load``, then typed through
the workload's schema: ``ranks_as``), feeds it to the report function the notebook uses and asserts the status and
the numbers it rests on, so a code change that flips a reference conclusion fails here. (The verdicts that hold on
the CPU too are asserted on a real gloo run in ``tests/test_collectives.py``.)
"""

from __future__ import annotations

import dataclasses

import pytest

from nvtutorial.chapters.ch07_collectives import report, schema, schema_compression
from nvtutorial.chapters.ch07_collectives import report_compression as compression_report
from nvtutorial.report import claims
from nvtutorial.results import RunResult
from tests.helpers.paths import ROOT

RUNS = ROOT / "reference" / "h200x2" / "runs"
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
    # notebook 07 grades the share prediction against this number (N7): the slower rank's, the smallest from 64 MiB up
    plain = [
        r.busbw_ratio for m in bench for r in m.ring if r.variant == schema.ONE_SLICE and r.size_bytes >= 64 * 2**20
    ]
    assert speed.numbers["plain_share"] == min(plain) == speed.numbers["best_share"]  # the reference timed one way
    assert len(plain) == len(bench) == 2  # the reference went up to 64 MiB: one row per rank
    rank0 = next(r.busbw_ratio for r in bench[0].ring if r.size_bytes == 64 * 2**20)
    assert speed.numbers["plain_share"] == pytest.approx(0.508, abs=0.001)  # rank 1's
    assert rank0 == pytest.approx(0.519, abs=0.001)  # what the grader read before (rank 0's row)


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


def test_the_hooks_prediction_off_two_gpus_is_graded_by_the_committed_nvlink_run():
    """Read through the real reader: the committed NVLink run is what grades notebook 07's prediction on a machine
    whose ranks ran on the CPU: (a), labelled as that run."""
    ref = compression_report.reference_nvlink()
    assert ref is not None and ref.env.is_gpu and ref.ranks[0]["link"] == "NVLink (NV18)"
    choices = {"a": (), "b": ("fp16", "bf16"), "c": ("powersgd",), "d": ("topk",), "e": ("powersgd", "topk")}
    statements = {k: k for k in (*choices, "f")}
    v = compression_report.grade_hooks("a", ref, choices, statements, "f")
    assert (v.status, v.numbers["answer"], v.where) == ("right", "a", ref.label)
    from tests.helpers.typed_runs import run_of

    cpu = run_of(ref.ranks[0], label="CPU, gloo", gpu=False)  # a CPU run: graded by the committed file, not by itself
    v = compression_report.grade_hooks("b", cpu, choices, statements, "f")
    assert (v.status, v.numbers["answer"]) == (
        "off",
        "a",
    ) and v.where == f"{ref.label}: the committed 2× H200 run, not this machine"


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


# --------------------------------------------------------------------------- notebook 07's cells pass raw JSON
# The notebook's cells stay as the 2× H200 copy ran them (the site shows that copy only while every cell is the same):
# they pass the run's raw JSON (``bench.ranks``, ``fast.ranks[0]``). Each function they call types it where it comes
# in, so it decides exactly as from the typed value.
def same_verdict(raw, typed_value):
    assert raw.status == typed_value.status and raw.numbers == typed_value.numbers
    assert raw == typed_value  # text and where too


def plotted(fig_ax) -> list:
    import matplotlib.pyplot as plt

    fig, ax = fig_ax
    lines = [(line.get_label(), line.get_xydata().tolist()) for line in ax.get_lines()]
    bars = [(p.get_x(), p.get_height()) for p in ax.patches]
    title, ticks = ax.get_title(), [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)
    return [lines, bars, title, ticks]


def test_the_bench_functions_decide_the_same_from_the_raw_json(bench):
    run = RunResult.load(BENCH)
    raw = run.ranks
    assert isinstance(raw[0], dict)  # what the notebook's cells pass
    same_verdict(report.ring_check(raw, "2× H200"), report.ring_check(bench, "2× H200"))
    for gpu in (True, False):
        same_verdict(report.ring_speed(raw, "2× H200", gpu=gpu), report.ring_speed(bench, "2× H200", gpu=gpu))
    assert report.ring_variants(raw, "2× H200") == report.ring_variants(bench, "2× H200")
    c22 = report.source_verdict(raw[0]["source_cases"], "2× H200")
    same_verdict(c22, report.source_verdict(bench[0].source_cases, "2× H200"))
    assert c22.status == "wrong" and c22.numbers["source_failed"] == 5
    sparse = report.sparse_verdict(raw[0]["sparse"], "2× H200")
    same_verdict(sparse, report.sparse_verdict(bench[0].sparse, "2× H200"))
    assert sparse.status == "pass" and sparse.numbers["fewer_bytes_up_to"] == 0.3


def test_ring_rows_gives_the_notebook_upgraded_dicts(bench):
    raw = RunResult.load(BENCH).ranks[0]
    rows = report.ring_rows(raw)
    assert rows == report.ring_rows(bench[0]) == [dataclasses.asdict(r) for r in bench[0].ring]
    largest = max(r["size_bytes"] for r in rows)  # the notebook's reads, by key
    first = next(r for r in rows if r["size_bytes"] == largest and r["variant"] == schema.ONE_SLICE)
    assert largest == 64 * 2**20 and first["ring_bytes_sent"] == largest  # 2 ranks: the tensor itself
    # the old layout had no busbw_ratio: upgraded from its medians, the inverse of its ring_over_all_reduce
    old = next(r for r in raw["ring"] if r["size_bytes"] == largest)
    assert "busbw_ratio" not in old and first["busbw_ratio"] == pytest.approx(1 / old["ring_over_all_reduce"])


def test_the_bench_plots_draw_the_same_from_the_raw_json(bench):
    pytest.importorskip("matplotlib")
    from nvtutorial.chapters.ch07_collectives import plots

    raw = RunResult.load(BENCH).ranks[0]
    assert plotted(plots.ring_share(report.ring_rows(raw), "2× H200", target=0.8)) == plotted(
        plots.ring_share(bench[0].ring, "2× H200", target=0.8)
    )
    assert plotted(plots.sparse_vs_dense(raw["sparse"], "2× H200")) == plotted(
        plots.sparse_vs_dense(bench[0].sparse, "2× H200")
    )


def test_the_compression_functions_decide_the_same_from_the_raw_json(hooks):
    raw_ranks = [RunResult.load(p).ranks[0] for p in COMPRESSION]
    raw = {m["link"]: m for m in raw_ranks}  # the notebook's ``runs``
    assert all(isinstance(m, dict) for m in raw.values()) and list(raw) == list(hooks)
    nvlink = raw["NVLink (NV18)"]
    c23 = compression_report.density_verdict(nvlink["density_summary"].get("trained", {}), "2× H200")
    same_verdict(c23, compression_report.density_verdict(hooks["NVLink (NV18)"].density_summary.trained, "2× H200"))
    assert c23.status == "wrong" and c23.numbers["index_value_ratio"] == pytest.approx(1.355, abs=0.01)
    same_verdict(compression_report.density_verdict({}, ""), compression_report.density_verdict(None, ""))
    assert compression_report.density_verdict({}, "").status == "unverifiable"
    verdicts = compression_report.hook_verdicts(raw, "2× H200")
    assert verdicts == compression_report.hook_verdicts(hooks, "2× H200") and len(verdicts) == 8
    same_verdict(compression_report.twin_verdict(raw, ""), compression_report.twin_verdict(hooks, ""))
    assert compression_report.link_statement(raw) == compression_report.link_statement(hooks)
    assert "host-staged" in compression_report.link_statement(raw)
    choices = {"a": (), "b": ("fp16", "bf16"), "c": ("powersgd",), "d": ("topk",), "e": ("powersgd", "topk")}
    for link in raw:
        assert compression_report.prediction_answer(raw, link, choices, "f") == "a"
        assert compression_report.loss_differences(raw[link]) == compression_report.loss_differences(hooks[link])
        assert compression_report.loss_statement(raw[link]) == compression_report.loss_statement(hooks[link])
    frame = compression_report.hooks_frame(raw)
    assert frame.equals(compression_report.hooks_frame(hooks)) and len(frame) == 10


def test_the_compression_plots_draw_the_same_from_the_raw_json(hooks):
    pytest.importorskip("matplotlib")
    from nvtutorial.chapters.ch07_collectives import plots

    raw = RunResult.load(COMPRESSION[0]).ranks[0]
    typed_rank = hooks[raw["link"]]
    assert plotted(plots.gradient_density(raw["density"], "2× H200")) == plotted(
        plots.gradient_density(typed_rank.density, "2× H200")
    )
    assert plotted(plots.loss_differences(raw, "2× H200")) == plotted(plots.loss_differences(typed_rank, "2× H200"))
