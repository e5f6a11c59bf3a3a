"""Notebook 07's verdicts at their rules: the ring's check and speed, C22, the sparse all-reduce, the compression
hooks, C23. Synthetic typed results on both sides of every threshold, and the schemas' reading of older layouts; the
committed 2× H200 runs are read in ``tests/test_claims_collectives.py``."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from nvtutorial.chapters.ch07_collectives import report, schema
from nvtutorial.chapters.ch07_collectives import report_compression as compression_report
from nvtutorial.chapters.ch07_collectives import report_compression as cr
from nvtutorial.chapters.ch07_collectives import schema_compression as sc
from nvtutorial.chapters.ch07_collectives import workload_density as density
from nvtutorial.report import claims
from nvtutorial.report.verdict import compare
from nvtutorial.results import RunResult, as_typed, rows_typed, typed
from tests.helpers.collectives_ranks import WORLD, workload_on_pool
from tests.helpers.collectives_runs import BENCH, COMPRESSION

MIB = 2**20


def ring_row(size, ring_ms=2.0, ar_ms=1.0, equal=True, sent=None, exact=None, formula=None, **extra):
    fields = {
        "size_bytes": size,
        "equal_to_all_reduce": equal,
        "ring_ms": ring_ms,
        "all_reduce_ms": ar_ms,
        "ring_bytes_sent": size if sent is None else sent,
        "ring_bytes_exact": size if exact is None else exact,
        "formula_bytes": size if formula is None else formula,
        "variant": schema.ONE_SLICE,
        "slices": 1,
        "busbw_ratio": ar_ms / ring_ms,
    }
    return schema.RingRow(**{**fields, **extra})


def failed_row(size, variant=schema.ONE_SLICE, error="x"):
    """A CUDA-graph row that could not be captured: no bytes, no times."""
    return schema.RingRow(
        size_bytes=size,
        equal_to_all_reduce=True,
        formula_bytes=size,
        variant=variant,
        slices=1,
        graph=True,
        error=error,
    )


# --------------------------------------------------------------------------- reading older layouts
OLD_RING_ROW = {  # the first runs' layout (reference/h200x2): one way of running the ring, no repeats kept
    "size_bytes": 4096,
    "equal_to_all_reduce": True,
    "ring_bytes_sent": 4096.0,
    "ring_bytes_exact": 4096,
    "formula_bytes": 4096.0,
    "ring_ms": 4.0,
    "all_reduce_ms": 1.0,
    "ring_busbw_gbs": 0.001,
    "all_reduce_busbw_gbs": 0.004,
    "ring_over_all_reduce": 4.0,
}
OLD_SPARSE_ROW = {
    "density": 0.01,
    "nonzero": 40,
    "exact": True,
    "sparse_bytes_sent": 320.0,
    "dense_bytes_sent": 16384.0,
    "bytes_ratio": 0.02,
    "sparse_ms": 1.0,
    "dense_ms": 2.0,
    "time_ratio": 0.5,
}


def test_the_bench_schema_reads_the_old_layout():
    new_row = dataclasses.asdict(ring_row(64, 2.0, 1.0, variant="ring, 3 slices", slices=3, busbw_ratio=0.9))
    error_row = {  # a graph row that failed, as the workload wrote it before its rows were typed
        "size_bytes": 8,
        "equal_to_all_reduce": True,
        "formula_bytes": 8.0,
        "variant": "ring, 1 slice, CUDA graph",
        "slices": 1,
        "graph": True,
        "error": "x",
    }
    old = {
        "debug_detail": True,
        "world_size": 2,
        "ring": [OLD_RING_ROW, error_row, new_row],
        "ring_all_equal": True,
        "source_cases": [],
        "indexing": [],
        "sparse": [OLD_SPARSE_ROW],
    }
    before = copy.deepcopy(old)
    rank = typed(schema.Rank, old)
    assert old == before  # the caller's dicts are not changed
    rows = rank.ring
    assert rows[0].variant == "ring, 1 slice" and rows[0].slices == 1 and rows[0].busbw_ratio == 0.25
    assert rows[0].ring_bytes_returned is None and rows[0].ring_ms_all == rows[0].all_reduce_ms_all == ()
    assert rows[0].graph is False and rows[0].error is None and rows[0].ring_bytes_sent == 4096
    assert rows[1].busbw_ratio is None and rows[1].ring_ms is None and rows[1].ring_bytes_sent is None
    assert rows[1].error == "x" and rows[1].variant == "ring, 1 slice, CUDA graph"
    assert rows[2].variant == "ring, 3 slices" and rows[2].busbw_ratio == 0.9  # kept, not recomputed
    assert rank.sparse[0].sparse_ms_all == rank.sparse[0].dense_ms_all == () and rank.sparse[0].time_ratio == 0.5
    assert typed(schema.Rank, dataclasses.asdict(rank)) == rank  # today's layout reads back as it is
    # one row of the old layout reads through its row class alone (a plot given the notebook's raw rows)
    assert typed(schema.RingRow, OLD_RING_ROW) == rows[0] and OLD_RING_ROW == before["ring"][0]


def test_the_notebooks_raw_json_is_typed_where_it_comes_in():
    """Notebook 07 passes raw JSON (``bench.ranks``, ``fast.ranks[0]``); typed values pass through as they are."""
    row = ring_row(64)
    assert rows_typed(schema.RingRow, [OLD_RING_ROW, row]) == (typed(schema.RingRow, OLD_RING_ROW), row)
    assert as_typed(schema.RingRow, row) is row
    assert rows_typed(schema.SparseRow, [OLD_SPARSE_ROW])[0].time_ratio == 0.5
    with pytest.raises(ValueError, match="unknown field nope"):
        rows_typed(schema.SparseRow, [{**OLD_SPARSE_ROW, "nope": 1}])
    assert sc.summary_typed({}) is None and sc.summary_typed(None) is None
    summary = sc.DensitySummary(10, 1, 0.5, 0.5, 0.5, 0.5, 2.0, 1.0)
    assert sc.summary_typed(dataclasses.asdict(summary)) == summary and sc.summary_typed(summary) is summary


def old_hook(**change):
    """One hook of a ``compression`` rank as the first runs wrote it (no calls, no equal-rounds flag), changed by
    ``change``."""
    return {
        "hook": "fp16",
        "compressed_when_timed": True,
        "step_ms_median": 10.0,
        "step_ms_all": [10.0, 10.0],
        "sent_bytes_per_step": 50.0,
        "payload_bytes_per_step": 50.0,
        "dense_bytes_per_step": 100.0,
        "train_loss": [1.0, 0.9],
        "evals": [{"step": 2, "loss": 0.8, "iou": 0.5}],
        "final_val_loss": 0.8,
        "final_iou": 0.5,
        "nvlink_tx_bytes_per_step": None,
        "nvlink_note": None,
        "params": 10,
        "step_ms_round_medians": [10.0, 10.0],
    } | change


def old_rank(*hooks, **change):
    """A ``compression`` rank's JSON as the first runs wrote it (no skipped hooks, no hidden-GPU flag) with ``hooks``,
    changed by ``change``."""
    return {
        "link": "NVLink (NV18)",
        "nccl_p2p_disable": None,
        "hooks": list(hooks),
        "density": [],
        "density_initial": [],
        "density_summary": {},
        "topk_ratio": 0.01,
        "powersgd_rank": 2,
        "steps": 2,
        "rounds": 2,
        "warmup": 4,
        "model": "full",
    } | change


def test_the_compression_schema_reads_the_old_layout():
    old = old_rank(old_hook(wall_ms_per_step=10.5, step_ms_spread=0.0))
    before = copy.deepcopy(old)
    rank = typed(sc.Rank, old)
    assert old == before
    assert rank.gpus_hidden_from_cpu_rank is None and rank.skipped_hooks == {}
    assert rank.density_summary == sc.DensitySummaries(None, None)
    (h,) = rank.hooks
    assert (h.collective_calls_per_step, h.warmup_calls, h.train_loss_rounds_equal, h.topk_residual_norm) == (
        None,
        None,
        None,
        None,
    )
    assert h.evals == (sc.Eval(2, 0.8, 0.5),) and h.step_ms_round_medians == (10.0, 10.0)
    assert not hasattr(h, "step_ms_spread") and not hasattr(h, "wall_ms_per_step")  # dropped: nothing reads them
    assert typed(sc.Rank, dataclasses.asdict(rank)) == rank


# --------------------------------------------------------------------------- the ring's rows and check
def _ranks(*rank_rows, world=2):
    return [
        schema.Rank(
            debug_detail=False,
            world_size=world,
            ring=tuple(rows),
            ring_all_equal=True,
            source_cases=(),
            indexing=(),
            sparse=(),
        )
        for rows in rank_rows
    ]


@pytest.mark.parametrize(
    "rows, status, equal, bytes_ok",
    [
        ([ring_row(4096), ring_row(400)], "pass", True, True),
        ([ring_row(4096), ring_row(400, equal=False)], "fail", False, True),
        ([ring_row(4096, sent=4100), ring_row(400)], "fail", True, False),  # sends differ from what was counted exactly
        ([ring_row(4096, formula=4000), ring_row(400)], "fail", True, False),  # formula off at a size W × 4 divides
        ([ring_row(4096), ring_row(402, formula=0)], "pass", True, True),  # 402 bytes: the formula is not exact there
        ([], "fail", True, True),  # nothing measured: no pass
    ],
)
def test_the_ring_check(rows, status, equal, bytes_ok):
    v = report.ring_check(_ranks(rows, rows), "here")
    assert v.status == status and v.numbers["equal"] is equal and v.numbers["bytes_match_formula"] is bytes_ok
    assert v.numbers["sizes"] == sorted({r.size_bytes for r in rows}) and v.numbers["world_size"] == 2


def test_the_ring_check_reads_every_rank_and_only_one_slice_rows():
    good, bad = [ring_row(4096)], [ring_row(4096, equal=False)]
    assert report.ring_check(_ranks(good, bad), "").status == "fail"  # rank 1 wrong
    sliced = [ring_row(4096), ring_row(4096, equal=False, variant="ring, 3 slices")]
    assert report.ring_check(_ranks(sliced, sliced), "").status == "pass"  # slices are judged elsewhere
    three = _ranks(*[[ring_row(4104, formula=4104)]] * 3, world=3)  # 4104 bytes: 3 × 4 divides it
    assert report.ring_check(three, "").numbers["world_size"] == 3 and report.ring_check(three, "").status == "pass"
    assert report.ring_check(_ranks(*[[ring_row(4104, formula=4000)]] * 3, world=3), "").status == "fail"


def test_ring_speed_at_64_mib_and_the_goal():
    rows0 = [
        ring_row(MIB, 1.0, 1.0),
        ring_row(64 * MIB, 2.0, 1.0),
        ring_row(128 * MIB, 1.0, 0.9),
        ring_row(64 * MIB, 1.0, 0.85, variant="ring, 3 slices"),
        ring_row(128 * MIB, 1.0, 0.95, variant="ring, 3 slices"),
        failed_row(256 * MIB, error="OOM"),
    ]
    rows1 = [ring_row(64 * MIB, 1.0, 0.6)]  # rank 1 slower at 64 MiB, one slice: the slowest rank counts
    v = report.ring_speed(_ranks(rows0, rows1), "GPU", gpu=True)
    assert v.status == "info" and v.numbers["share_from"] == 64 * MIB
    assert v.numbers["share_by_variant"] == {"ring, 1 slice": 0.5, "ring, 3 slices": 0.85}
    assert v.numbers["best_variant"] == "ring, 3 slices" and v.numbers["best_share"] == 0.85
    # what notebook 07 grades the share prediction against (N7): the plain ring's smallest share from 64 MiB up over
    # both ranks (rank 0's 0.5 at 64 MiB; rank 1's 0.6 and rank 0's 0.9 at 128 MiB are larger)
    assert v.numbers["plain_share"] == 0.5 and "the slower rank's share" in v.text
    assert v.numbers["meets_target"] is True and v.numbers["target"] == report.TARGET_SHARE == 0.8
    below = report.ring_speed(_ranks([ring_row(64 * MIB, 1.0, 0.79)]), "GPU", gpu=True)
    assert below.numbers["meets_target"] is False
    assert report.ring_speed(_ranks([ring_row(64 * MIB, 1.0, 0.8)]), "GPU", gpu=True).numbers["meets_target"] is True
    cpu = report.ring_speed(_ranks(rows0, rows1), "CPU", gpu=False)
    assert "meets_target" not in cpu.numbers and cpu.numbers["best_share"] == 0.85


def test_the_plain_rings_share_is_the_slower_ranks_smallest():
    rank0 = [ring_row(64 * MIB, 1.0, 0.9), ring_row(256 * MIB, 1.0, 0.95)]
    rank1 = [ring_row(64 * MIB, 1.0, 0.7), ring_row(256 * MIB, 1.0, 0.75)]
    v = report.ring_speed(_ranks(rank0, rank1), "GPU", gpu=True)
    assert v.numbers["plain_share"] == 0.7  # rank 1, 64 MiB: not rank 0's 0.95 at the largest size
    assert report.ring_speed(_ranks(rank1, rank0), "GPU", gpu=True).numbers["plain_share"] == 0.7  # either rank
    sliced = [ring_row(64 * MIB, 1.0, 0.9, variant="ring, 3 slices")]
    assert report.ring_speed(_ranks(sliced), "GPU", gpu=True).numbers["plain_share"] is None  # no plain ring timed


@pytest.mark.parametrize("largest, floor", [(64 * MIB, 64 * MIB), (64 * MIB - 1, 64 * MIB - 1), (256 * MIB, 64 * MIB)])
def test_the_share_is_read_from_64_mib_or_the_largest_size_below(largest, floor):
    assert report.share_from(largest) == floor


def test_ring_speed_below_64_mib_uses_the_largest_size():
    v = report.ring_speed(
        _ranks([ring_row(MIB, 1.0, 0.3), ring_row(4 * MIB, 1.0, 0.5), ring_row(4 * MIB, 1.0, 0.6)]), "CPU", gpu=False
    )
    assert v.numbers["share_from"] == 4 * MIB and v.numbers["best_share"] == 0.5  # the slower of the two rows
    only = report.ring_speed(
        _ranks([ring_row(4 * MIB, 1.0, 0.5), ring_row(MIB, 1.0, 0.9, variant="ring, 3 slices")]), "CPU", gpu=False
    )
    assert only.numbers["share_by_variant"] == {"ring, 1 slice": 0.5}  # 3 slices never reached the largest size


def test_ring_variants_against_one_slice_at_the_largest_size():
    base = ring_row(64 * MIB, 2.0, 1.0, ring_ms_all=[2.0, 2.02])
    faster = ring_row(64 * MIB, 1.5, 1.0, variant="ring, 3 slices", ring_ms_all=[1.5, 1.51])
    same = ring_row(64 * MIB, 2.0, 1.0, variant="ring, graph", ring_ms_all=[2.0, 2.01])
    small = ring_row(MIB, 9.0, 1.0, variant="ring, 5 slices", ring_ms_all=[9.0, 9.0])
    verdicts = {v.key: v for v in report.ring_variants(_ranks([base, faster, same, small]), "here")}
    assert set(verdicts) == {"ring: ring, 3 slices", "ring: ring, graph"}
    v = verdicts["ring: ring, 3 slices"]
    c = compare([2.0, 2.02], [1.5, 1.51])
    assert v.status == "faster" and v.numbers == {
        "ratio": c.ratio,
        "noise": c.noise,
        "share": 2.0 / 3,
        "size": 64 * MIB,
    }
    assert verdicts["ring: ring, graph"].status == "no change"
    assert report.ring_variants(_ranks([faster]), "") == []  # no one-slice row to compare with
    assert report.ring_variants(_ranks([ring_row(64 * MIB)]), "") == []  # no repeats
    assert report.ring_variants(_ranks([base, dataclasses.replace(faster, error="x")]), "") == []


# --------------------------------------------------------------------------- C22
def case(name, impl, ran=True, exact=True, error=None):
    return schema.SourceCase(
        case=name,
        implementation=impl,
        nonzero_per_rank=(3, 3),
        ran=ran,
        exact=exact,
        ranks_agree=ran,
        max_abs_error=0.0 if ran else None,
        error=error,
    )


@pytest.mark.parametrize(
    "source, course, status, counts",
    [
        (
            [case("a", "source"), case("b", "source", exact=False), case("c", "source", ran=False, exact=False)],
            [case("a", "course"), case("b", "course"), case("c", "course")],
            "wrong",
            (3, 1, 1, 1, 0, 3),
        ),
        (
            [case("a", "source"), case("b", "source")],
            [case("a", "course"), case("b", "course")],
            "holds",
            (2, 2, 0, 0, 0, 2),
        ),
        (
            [case("a", "source"), case("b", "source", exact=False)],
            [case("a", "course"), case("b", "course", exact=False)],
            "partly",
            (2, 1, 1, 0, 0, 1),
        ),  # the correct version failed a case too: the source is not the only problem
        (
            [case("a", "source"), case("s", "source", ran=False, exact=False, error="skipped: needs 3 ranks")],
            [case("a", "course")],
            "holds",
            (2, 1, 0, 0, 1, 1),
        ),  # a skipped case is not a failure
        (
            [case("a", "source", ran=False, exact=False, error="RuntimeError")],
            [case("a", "course")],
            "wrong",
            (1, 0, 0, 1, 0, 1),
        ),
    ],
)
def test_c22_at_its_rule(source, course, status, counts):
    v = report.source_verdict(source + course, "here")
    assert v.key == "C22" and v.status == status and v.where == "here"
    assert (
        tuple(
            v.numbers[k] for k in ("cases", "source_exact", "source_wrong", "source_failed", "skipped", "course_exact")
        )
        == counts
    )


# --------------------------------------------------------------------------- the sparse all-reduce
def sparse_row(density, ratio, time_ratio, exact=True, **extra):
    return schema.SparseRow(
        density=density,
        nonzero=10,
        exact=exact,
        sparse_bytes_sent=ratio * 100,
        dense_bytes_sent=100.0,
        bytes_ratio=ratio,
        sparse_ms=time_ratio,
        dense_ms=1.0,
        time_ratio=time_ratio,
        **extra,
    )


def test_the_sparse_verdict_by_medians_and_by_compare():
    rows = [sparse_row(0.3, 0.6, 0.9), sparse_row(0.01, 0.02, 0.5), sparse_row(0.6, 1.2, 1.4)]
    v = report.sparse_verdict(rows, "here")
    assert v.status == "pass" and v.numbers["judged_by"] == "medians"
    assert v.numbers["fewer_bytes_up_to"] == 0.3 and v.numbers["faster_at"] == [0.01, 0.3]
    assert v.numbers["time_ratio_median"] == 0.9 and v.numbers["exact"] is True
    rows[2] = dataclasses.replace(rows[2], exact=False)
    assert report.sparse_verdict(rows, "").status == "fail"
    timed = [
        sparse_row(0.01, 0.02, 0.5, sparse_ms_all=[1.0, 1.01], dense_ms_all=[2.0, 2.02]),
        sparse_row(0.3, 0.6, 0.99, sparse_ms_all=[1.0, 1.01], dense_ms_all=[1.005, 1.0]),  # within the noise
        sparse_row(0.6, 1.2, 0.5),
    ]  # no repeats kept: its median decides
    v = report.sparse_verdict(timed, "")
    assert v.numbers["judged_by"] == "compare" and v.numbers["faster_at"] == [0.01, 0.6]
    never = report.sparse_verdict([sparse_row(0.5, 1.0, 1.0), sparse_row(0.9, 1.8, 2.0)], "")
    assert never.numbers["fewer_bytes_up_to"] is None and never.numbers["faster_at"] == []
    assert never.numbers["time_ratio_median"] == 1.5


# --------------------------------------------------------------------------- the compression hooks
def hook(name, rounds, sent=100.0, dense=100.0, iou=0.5, loss=(1.0, 0.9), **extra):
    fields = {
        "hook": name,
        "compressed_when_timed": True,
        "step_ms_median": rounds[0],
        "step_ms_all": tuple(rounds),
        "sent_bytes_per_step": sent,
        "payload_bytes_per_step": sent,
        "dense_bytes_per_step": dense,
        "train_loss": tuple(loss),
        "evals": (),
        "final_val_loss": 0.8,
        "final_iou": iou,
        "nvlink_tx_bytes_per_step": None,
        "nvlink_note": None,
        "params": 10,
        "step_ms_round_medians": tuple(rounds),
    }
    return sc.Hook(**{**fields, **extra})


def metrics(*hooks_, link="NVLink"):
    return sc.Rank(
        link=link,
        nccl_p2p_disable=None,
        gpus_hidden_from_cpu_rank=False,
        hooks=hooks_,
        skipped_hooks={},
        density=(),
        density_initial=(),
        density_summary=sc.DensitySummaries(),
        topk_ratio=0.01,
        powersgd_rank=2,
        steps=2,
        rounds=2,
        warmup=3,
        model="tiny",
    )


NONE = hook("none", [10.0, 10.1, 10.05])


def test_the_twin_gap_and_each_hook_against_none():
    m = metrics(NONE, hook("fp16", [9.0, 9.1]), hook("bf16", [10.0, 10.1]), hook("topk", [12.0, 12.1], sent=2.0))
    assert cr.twin_gap(m) == pytest.approx((10.05 - 9.05) / 9.05)
    assert cr.twin_gap(metrics(NONE, hook("fp16", [9.0, 9.1]))) is None
    cs = cr.comparisons(m)
    assert set(cs) == {"fp16", "bf16", "topk"}
    assert cs["topk"] == compare(NONE.step_ms_round_medians, [12.0, 12.1], aa_gap=cr.twin_gap(m))
    assert cs["fp16"].status == "no change"  # 10 % faster, inside the 11 % A/A gap
    assert cs["topk"].status == "slower" and cs["topk"].aa_gap == cr.twin_gap(m)
    assert cr.comparisons(metrics(hook("fp16", [1.0, 1.0]))) == {}


@pytest.mark.parametrize(
    "c, unsettled",
    [
        (compare([10.0, 12.0], [11.5, 11.6], aa_gap=0.02), True),  # +5 %: beyond the A/A gap, inside the rounds' ±20 %
        (compare([10.0, 12.0], [11.2, 11.3], aa_gap=0.02), True),
        (compare([10.0, 12.0], [11.1, 11.2], aa_gap=0.02), False),  # +1.4 %: inside the 2 % A/A gap
        (compare([10.0, 12.0], [11.02, 11.03], aa_gap=0.02), False),  # +0.2 %: inside the A/A gap too
        (compare([10.0, 12.0], [11.5, 11.6]), False),  # no A/A gap measured
        (compare([10.0, 10.0], [12.0, 12.0], aa_gap=0.02), False),  # slower: settled
        (compare([10.0, 12.0], [11.15, 11.16], aa_gap=0.0), True),
        (compare([10.0, 12.0], [11.05, 11.06], aa_gap=0.0), False),  # +0.5 %: inside the 1 % floor
    ],
)
def test_inside_the_rounds_spread(c, unsettled):
    assert cr.inside_rounds_spread(c) is unsettled


def test_hook_verdicts_state_bytes_iou_and_what_is_unsettled():
    m = metrics(
        hook("none", [10.0, 12.0], iou=0.5),
        hook("fp16", [11.5, 11.6], sent=50.0, iou=0.49),
        hook("bf16", [11.3, 11.4], sent=50.0, iou=0.52),
        hook("topk", [20.0, 20.1], sent=2.0, iou=0.40),
    )
    verdicts = {v.numbers["hook"]: v for v in cr.hook_verdicts({"NVLink": m}, "here")}
    fp16 = verdicts["fp16"]
    assert fp16.key == "fp16 · NVLink" and fp16.status == "no change" and fp16.where == "here"
    assert fp16.numbers["bytes_saved"] == 0.5 and fp16.numbers["iou_vs_none"] == pytest.approx(-0.01)
    assert fp16.numbers["needs_more_rounds"] is True and fp16.numbers["link"] == "NVLink"
    topk = verdicts["topk"]
    assert (
        topk.status == "slower" and topk.numbers["bytes_saved"] == 0.98 and topk.numbers["needs_more_rounds"] is False
    )
    assert topk.numbers["iou_vs_none"] == pytest.approx(-0.1)
    assert "beyond 0.02" in topk.text and "within 0.02" in fp16.text


def test_the_prediction_is_the_set_of_hooks_faster_beyond_the_noise():
    choices = {"a": (), "b": ("fp16", "bf16"), "c": ("topk",)}
    fast = metrics(NONE, hook("fp16", [8.0, 8.05]), hook("bf16", [8.02, 8.06]), hook("topk", [12.0, 12.1]))
    assert cr.prediction_answer({"NV": fast}, "NV", choices, "z") == "b"
    none = metrics(NONE, hook("fp16", [10.0, 10.1]), hook("bf16", [10.02, 10.1]), hook("topk", [12.0, 12.1]))
    assert cr.prediction_answer({"NV": none}, "NV", choices, "z") == "a"
    only = metrics(NONE, hook("fp16", [8.0, 8.05]), hook("bf16", [8.1, 8.15]), hook("topk", [5.0, 5.05]))
    assert cr.prediction_answer({"NV": only}, "NV", choices, "z") == "z"  # all three: no such choice


HOOK_CHOICES = {"a": (), "b": ("fp16", "bf16"), "c": ("topk",)}
HOOK_STATEMENTS = {"a": "none is faster", "b": "fp16 and bf16 are faster", "c": "top-k is faster", "z": "another"}


def test_the_hooks_prediction_is_graded_by_gpus_only(monkeypatch):
    """Like review R1-2 in notebook 05: the question is about two GPUs, so a CPU simulation never grades it; the
    committed 2× H200 run over NVLink does, labelled so, with this machine's answer quoted; without it, nothing."""
    from tests.helpers.typed_runs import run_of

    faster = metrics(NONE, hook("fp16", [8.0, 8.05]), hook("bf16", [8.02, 8.06]), hook("topk", [12.0, 12.1]))
    plain = metrics(NONE, hook("fp16", [10.0, 10.1]), hook("bf16", [10.02, 10.1]), hook("topk", [12.0, 12.1]))
    gpu = run_of(faster, label="2× test GPU")
    v = cr.grade_hooks("b", gpu, HOOK_CHOICES, HOOK_STATEMENTS, "z", reference=run_of(plain, label="ref"))
    assert (v.status, v.numbers["answer"], v.where) == ("right", "b", "2× test GPU")  # its own run: the GPUs'
    assert "by the verdicts above. Where a hook pays" in v.text and "CPU simulation" not in v.text
    cpu = run_of(faster, label="CPU", gpu=False)  # (b) on the CPU: not what grades
    ref = run_of(plain, label="2× H200")
    v = cr.grade_hooks("b", cpu, HOOK_CHOICES, HOOK_STATEMENTS, "z", reference=ref)
    assert (v.status, v.numbers["answer"]) == ("off", "a")
    assert v.where == "2× H200: the committed 2× H200 run, not this machine"
    assert "by that run's verdicts. Over a fast link the all-reduce is short" in v.text
    assert "ran as a CPU simulation, where the verdicts above say (b) fp16 and bf16 are faster" in v.text
    monkeypatch.setattr(cr, "reference_nvlink", lambda: None)
    none = cr.grade_hooks("b", cpu, HOOK_CHOICES, HOOK_STATEMENTS, "z")
    assert none.status == "info" and "not graded here" in none.text and none.numbers == {"prediction": "b"}


def test_the_hooks_table():
    m = metrics(
        NONE,
        hook("fp16", [9.0, 9.1], sent=50.0, iou=0.45, nvlink_tx_bytes_per_step=100.0, nvlink_note="LL"),
        hook("topk", [12.0, 12.2], sent=0.0, compressed_when_timed=False),
    )
    frame = cr.hooks_frame({"NV": m}).set_index("hook")
    assert list(frame.index) == ["none", "fp16", "topk"]
    assert frame.loc["none", "step_time"] == "baseline" and frame.loc["none", "step_vs_none"] == 1.0
    assert math.isnan(frame.loc["none", "noise_pct"])
    c = cr.comparisons(m)["fp16"]
    assert frame.loc["fp16", "step_vs_none"] == c.ratio and frame.loc["fp16", "noise_pct"] == 100 * c.noise
    assert frame.loc["fp16", "step_ms"] == 9.05 and frame.loc["fp16", "sent_MB_per_step"] == 50e-6
    assert frame.loc["fp16", "bytes_saved"] == 0.5 and frame.loc["fp16", "nvml_over_counted"] == 2.0
    assert frame.loc["fp16", "nvlink_tx_MB_per_step"] == 100e-6 and frame.loc["fp16", "nvml_note"] == "LL"
    assert frame.loc["fp16", "iou_vs_none"] == pytest.approx(-0.05) and math.isnan(
        frame.loc["topk", "nvml_over_counted"]
    )
    assert frame.loc["none", "compressed_when_timed"] and not frame.loc["topk", "compressed_when_timed"]
    alone = cr.hooks_frame({"NV": metrics(hook("fp16", [9.0, 9.1]))})
    assert math.isnan(alone["iou_vs_none"].at[0])


def test_the_twin_verdict():
    m = metrics(NONE, hook("fp16", [9.0, 9.1]), hook("bf16", [9.9, 10.0]))
    v = cr.twin_verdict({"NV": m, "host": metrics(NONE, hook("fp16", [9.0, 9.1]))}, "here")
    assert v.status == "info" and v.numbers == {"gaps": {"NV": cr.twin_gap(m)}}
    assert cr.twin_verdict({"host": metrics(NONE)}, "").numbers == {}


def test_losses_against_none():
    m = metrics(
        hook("none", [1, 1], loss=(1.0, 0.8, 0.6)),
        hook("fp16", [1, 1], loss=(1.0, 0.8, 0.6)),
        hook("topk", [1, 1], loss=(1.0, 0.9, 0.5)),
    )
    assert cr.loss_differences(m) == {"fp16": 0.0, "topk": pytest.approx(0.1)}
    text = cr.loss_statement(m)
    assert (
        text == "identical losses to no compression, step for step: fp16; "
        "largest loss difference from no compression: topk (at most 0.1)"
    )
    assert cr.loss_differences(metrics(hook("fp16", [1, 1]))) == {}
    assert cr.loss_statement(metrics(hook("fp16", [1, 1]))) == "no hook to compare with no compression"
    assert cr.loss_statement(metrics(hook("none", [1, 1]), hook("bf16", [1, 1], loss=(2.0, 0.9)))).startswith("largest")


def test_the_link_statement():
    assert cr.link_statement({"NV": metrics(NONE)}).startswith("One link measured")
    assert cr.link_statement({"NV": metrics(hook("fp16", [1, 1])), "host": metrics(NONE)}).startswith("One link")
    two = cr.link_statement({"NV": metrics(NONE), "host": metrics(hook("none", [20.0, 20.1])), "x": metrics(NONE)})
    assert two.startswith("Without compression, NV → host: 10.05 ms → 20.05 ms: 100% slower")
    assert cr.link_statement({"NV": metrics(NONE), "host": metrics(hook("none", [20.0, 20.1]))}) == two


# --------------------------------------------------------------------------- C23
@pytest.mark.parametrize("ours, status", [(1.355, "wrong"), (0.16, "wrong"), (0.15, "holds"), (0.1, "holds")])
def test_c23_at_its_rule(ours, status):
    summary = summary_of(ours)
    v = cr.density_verdict(summary, "here")
    assert v.key == "C23" and v.status == status and v.where == "here"
    assert v.numbers == {
        "frac_zero": 0.3,
        "source_format_ratio": 6.1,
        "index_value_ratio": ours,
        "best_saving": pytest.approx(1 - ours),
        "claimed_saving": 0.85,
    }
    assert cr.density_verdict(summary, "", claimed_saving=1 - ours + 0.01).status == "wrong"
    assert cr.density_verdict(summary, "", claimed_saving=1 - ours - 0.01).status == "holds"


def summary_of(ours):
    return sc.DensitySummary(
        params=10,
        layers=2,
        frac_zero=0.3,
        frac_near_zero=0.4,
        frac_for_energy=0.5,
        max_layer_frac_zero=0.6,
        source_format_ratio=6.1,
        index_value_ratio=ours,
    )


def test_c23_without_a_measurement():
    assert cr.density_verdict(None, "x").status == "unverifiable"
    assert cr.density_verdict(dataclasses.replace(summary_of(0.1), params=0), "x").status == "unverifiable"
    assert cr.CLAIMED_SAVING == 0.85 and cr.IOU_TOLERANCE == 0.02 and cr.TWINS == ("fp16", "bf16")


# --------------------------------------------------------------------------- notebook 07's plan (review N8)
@pytest.mark.parametrize(
    "gpus, profile, sizes, backend, says",
    [
        (0, "auto", "ci", "gloo", "a gloo simulation on the CPU, not a GPU measurement (no GPU visible"),
        (1, "auto", "ci", "gloo", "a gloo simulation on the CPU, not a GPU measurement (2 ranks need 2 GPUs for NCCL"),
        (2, "auto", "full", "nccl", None),  # the lesson: nothing to say
        (2, "ci", "ci", "nccl", "Small sizes on GPUs"),  # N8: small sizes on GPUs are NCCL on GPUs, not gloo
    ],
)
def test_notebook_07s_plan_on_every_machine(monkeypatch, capsys, gpus, profile, sizes, backend, says):
    from nvtutorial import course
    from nvtutorial.teach import ranks
    from tests.helpers import notebook_cells

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    monkeypatch.setattr(ranks, "configure", lambda **kw: kw)
    ns = notebook_cells.run("07_custom_collectives", ["d069c3be", "d931c6b9"], profile=profile)
    said = capsys.readouterr().out
    assert ns["shown"] == [ns["PLAN"]]  # the plan is the first thing the notebook shows
    for part in (ns["BENCH"], ns["HOOKS"], ns["STAGED"]):
        assert (part.profile, part.backend, part.simulated) == (sizes, backend, gpus < 2)
    assert ns["P_BENCH"] == ns["SIZES"][sizes]["bench"] and ns["P_TRAIN"] == ns["SIZES"][sizes]["train"]
    assert ns["PLAN"]["your ring (%%ranks)"].simulated is False  # two ranks: gloo runs the ring as taught
    assert (says in said) if says else not said
    assert "needs a GPU" not in said + str(ns["PLAN"])


# --------------------------------------------------------------------------- notebook 07's cells pass raw JSON
# The notebook's cells stay as the 2× H200 copy ran them (the site shows that copy only while every cell is the same):
# they pass the run's raw JSON (``bench.ranks``, ``fast.ranks[0]``). Each function they call types it where it comes
# in, so it decides exactly as from the typed value.
def same_verdict(raw, typed_value):
    assert raw.status == typed_value.status and raw.numbers == typed_value.numbers
    assert raw == typed_value  # text and where too


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
    typed_runs = sc.runs_typed(raw)  # typed once, where the JSON is loaded
    for link in raw:
        assert compression_report.prediction_answer(typed_runs, link, choices, "f") == "a"
        assert compression_report.loss_differences(typed_runs[link]) == compression_report.loss_differences(hooks[link])
        assert compression_report.loss_statement(raw[link]) == compression_report.loss_statement(hooks[link])
    frame = compression_report.hooks_frame(raw)
    assert frame.equals(compression_report.hooks_frame(hooks)) and len(frame) == 10


@pytest.fixture(scope="module")
def cpu_bench(pool) -> list[schema.Rank]:
    return workload_on_pool(
        schema.Rank,
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
    )


def test_c22_on_the_cpu(cpu_bench):
    v = claims.claim("C22").decider()(cpu_bench[0].source_cases, "CPU")
    assert v.status == claims.claim("C22").status == "wrong"
    assert v.numbers["source_exact"] == 1  # only "same positions on every rank"
    assert v.numbers["source_wrong"] == 1  # same count, other positions: it runs and averages unrelated entries
    assert v.numbers["source_failed"] == 3 and v.numbers["course_exact"] == v.numbers["cases"] == 5
    wrong = next(r for r in cpu_bench[0].source_cases if r.implementation == "source" and r.ran and not r.exact)
    assert not wrong.ranks_agree  # the ranks even end with different tensors
    failed = [r for r in cpu_bench[0].source_cases if r.implementation == "source" and not r.ran]
    assert all(r.error is not None and "mismatch" in r.error for r in failed)


def test_ring_and_sparse_verdicts_on_the_cpu(cpu_bench):
    assert report.ring_check(cpu_bench, "CPU").status == "pass"
    speed = report.ring_speed(cpu_bench, "CPU", gpu=False)
    assert speed.status == "info" and set(speed.numbers["share_by_variant"]) == {"ring, 1 slice", "ring, 3 slices"}
    sparse = report.sparse_verdict(cpu_bench[0].sparse, "CPU")
    assert sparse.status == "pass" and sparse.numbers["judged_by"] == "compare"
    rows = {r.density: r for r in cpu_bench[0].sparse}
    # bytes of the correct sparse all-reduce: the count + max_count int32 indices and fp32 values, all-gathered
    for r in rows.values():
        assert r.dense_bytes_sent == 4096 * 4  # 2 (W-1)/W × the tensor
    assert rows[0.01].bytes_ratio < 0.1 < 1 < rows[0.6].bytes_ratio
    assert [row.indices_shape for row in cpu_bench[0].indexing] == [(3, 1), (3, 2), (3, 4)]
    assert (cpu_bench[0].indexing[1].error or "").startswith("IndexError")
    assert cpu_bench[0].indexing[2].values_numel == 3 * 4 * 27  # whole slices, not 3 numbers
    ring = cpu_bench[0].ring
    assert [(r.size_bytes, r.variant) for r in ring] == [
        (4096, "ring, 1 slice"),
        (4096, "ring, 3 slices"),
        (65536, "ring, 1 slice"),
        (65536, "ring, 3 slices"),
    ]
    assert all(r.ring_bytes_returned == r.ring_bytes_sent and len(r.ring_ms_all) == 2 for r in ring)
    assert cpu_bench[0].ring_all_equal and cpu_bench[0].debug_detail is True and cpu_bench[0].world_size == WORLD


def test_compression_verdicts_come_from_compare(cpu_hooks):
    runs = {cpu_hooks[0].link: cpu_hooks[0]}
    verdicts = compression_report.hook_verdicts(runs, "CPU")
    assert {v.numbers["hook"] for v in verdicts} == {h.hook for h in cpu_hooks[0].hooks} - {"none"}
    by = {h.hook: h for h in cpu_hooks[0].hooks}
    gap = compression_report.twin_gap(cpu_hooks[0])
    for v in verdicts:  # each is compare() of the rounds' medians, with the fp16/bf16 A/A gap in the noise
        c = compare(by["none"].step_ms_round_medians, by[v.numbers["hook"]].step_ms_round_medians, aa_gap=gap)
        assert (v.status, v.numbers["ratio"], v.numbers["noise"]) == (c.status, c.ratio, c.noise)
    frame = compression_report.hooks_frame(runs)
    assert set(frame["step_time"]) <= {"baseline", "faster", "slower", "no change"}
    diffs = compression_report.loss_differences(cpu_hooks[0])
    same = tuple(dataclasses.replace(by[h], train_loss=(1.0,)) for h in ("none", "fp16"))
    assert diffs["fp16"] < 1e-2 and "identical" in compression_report.loss_statement(
        dataclasses.replace(cpu_hooks[0], hooks=same)
    )


def test_density_verdict_decides_c23_both_ways():
    dense = density.density_summary([density.density_row("w", torch.randn(8, 8))])
    assert compression_report.density_verdict(dense, "").status == "wrong"
    sparse = density.density_summary([density.density_row("w", torch.cat([torch.ones(1), torch.zeros(999)]))])
    assert compression_report.density_verdict(sparse, "").status == "holds"


def test_the_hooks_table_shows_the_final_validation_loss():
    from nvtutorial.chapters.ch07_collectives.schema_compression import Rank
    from nvtutorial.results import typed

    h = old_hook(
        hook="none",
        step_ms_all=[10.0, 10.1],
        sent_bytes_per_step=100.0,
        payload_bytes_per_step=100.0,
        train_loss=[1.0],
        evals=[],
        step_ms_round_medians=[10.0, 10.1],
    )
    run = old_rank(h, link="NV", warmup=3, model="tiny")
    frame = compression_report.hooks_frame({"NV": typed(Rank, run)})
    assert frame["final_val_loss"].tolist() == [pytest.approx(0.8)]
