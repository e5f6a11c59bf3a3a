"""Notebook 05's readers and verdicts at their rules: the split, waiting against the wire, the profiler's cost,
the gradient exchange's price, C12, C13 and C16 (``report/profiling.py``, ``report/traces.py``,
``report/monitoring.py``). Synthetic per-rank results (the workload's typed ``Rank``, written and read back as a run
does) on both sides of every threshold; the committed 2× H200 runs are read in ``tests/test_claims_profiling.py``,
real CPU runs in ``test_workload.py`` and ``tests/core/test_tracesplit.py``."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import re
import sqlite3
import time
import types
from typing import cast

import pandas as pd
import pytest

from nvtutorial import tracesplit
from nvtutorial.chapters.ch05_profiling import report as profiling
from nvtutorial.chapters.ch05_profiling import report_monitoring as monitoring
from nvtutorial.chapters.ch05_profiling import report_traces as traces
from nvtutorial.chapters.ch05_profiling import report_wire as wire
from nvtutorial.chapters.ch05_profiling import schema
from nvtutorial.machine.telemetry import Sampler
from nvtutorial.report import claims
from nvtutorial.report.verdict import compare
from nvtutorial.results import EnvInfo
from nvtutorial.tracesplit import Split
from tests.helpers import paths as test_paths
from tests.helpers import profile_step_results as made
from tests.helpers.paths import ROOT
from tests.helpers.profile_step_results import kinds, probe, split, sweep_row
from tests.helpers.trace_files import DMON_PLAIN, RANK0, RANK1, SYNTHETIC, fake_sampler, rank_trace
from tests.helpers.typed_runs import run_of


def res(*ranks, gpu=True, label="2× test GPU"):
    return run_of(*ranks, gpu=gpu, label=label, workload="profile_step")


def sampler_of(**attributes) -> Sampler:
    """A telemetry sampler with only what a reader takes from it."""
    return cast(Sampler, types.SimpleNamespace(**attributes))


def traffic(*sent_gib: float) -> list[profiling.Traffic]:
    """Probe rows (:func:`profiling.probe_traffic`) of GPUs that sent ``sent_gib`` each."""
    return [profiling.Traffic(gpu, gib, 0.0, 1.0, gib, 1.0) for gpu, gib in enumerate(sent_gib)]


# --------------------------------------------------------------------------- the split
def test_link_columns_and_the_split_frame():
    sp = split(link=(1.0, 1.0, 0.5))
    assert profiling.link_columns(sp) == {
        "wait_ms": 1.0,
        "transfer_ms": 1.0,
        "exposed_wait_ms": 0.5,
        "exposed_transfer_ms": 0.5,
        "last_share": 0.5,
    }
    assert profiling.link_columns(split()) == {} and profiling.link_columns(None) == {}
    unpaired = dataclasses.replace(split(), link=schema.Link(reason="one rank: no other rank to wait for"))
    assert profiling.link_columns(unpaired) == {}
    frame = profiling.split_frame(res(made.rank(sp), made.rank(split(exposed=0.5))), "NVLink")
    assert list(frame.columns[:3]) == ["path", "rank", "step_ms"] and list(frame["rank"]) == [0, 1]
    assert list(frame["exposed_ms"]) == [1.0, 0.5] and bool(frame["wait_ms"][0] == 1.0) and "phase_ms" not in frame
    assert "path" not in profiling.split_frame(res(made.rank(sp))).columns
    assert list(profiling.phase_frame(res(made.rank(sp), made.rank(None)))["forward_ms"][:1]) == [3.0]


@pytest.mark.parametrize(
    "change, problem",
    [
        ({}, None),
        ({"idle_ms": 1.0 + 1e-6}, None),
        ({"idle_ms": 1.0 + 2e-5}, "rank 0: the parts add to"),
        (
            {"link": schema.Link(wait_ms=1.0, transfer_ms=1.5, exposed_wait_ms=0.5, exposed_transfer_ms=0.5)},
            "wait + transfer = 2.5000 ms",
        ),
        (
            {"link": schema.Link(wait_ms=1.0, transfer_ms=1.0, exposed_wait_ms=0.9, exposed_transfer_ms=0.5)},
            "exposed wait + exposed transfer differ",
        ),
    ],
)
def test_the_split_must_add_up(change, problem):
    sp = dataclasses.replace(split(link=(1.0, 1.0, 0.5)), **change)
    v = profiling.check_split(res(made.rank(sp), made.rank(split())))
    assert v.status == ("pass" if problem is None else "fail") and v.numbers["ranks"] == 2
    if problem:
        assert problem in v.text
    else:
        assert v.numbers["largest_error_ms"] == pytest.approx(abs(sp.idle_ms - 1.0), abs=1e-12)


def test_a_rank_without_a_split_fails_the_check():
    v = profiling.check_split(res(made.rank(split()), made.rank(None)))
    assert v.status == "fail" and "rank 1 reported no split" in v.text and v.numbers["largest_error_ms"] == 0.0
    none = profiling.check_split(res(label="x"))
    assert none.status == "fail" and none.numbers == {"ranks": 0, "largest_error_ms": None}
    big = split(step=1000.0, compute=800.0, comm=100.0, exposed=50.0)
    big = dataclasses.replace(big, idle_ms=big.idle_ms + 5e-4)  # relative to the step: within 1e-6 × 1000 ms
    assert profiling.check_split(res(made.rank(big))).status == "pass"


def test_the_estimate_of_the_wire():
    paired = wire.link_estimate([split(link=(1.5, 0.5, 0.6)), split(comm=1.0, exposed=0.4, link=(0.3, 0.7, 0.1))])
    assert (paired.source, paired.link_ms, paired.wait_ms) == ("paired traces", 0.5, (1.5, 0.3))
    assert paired.exposed_link_ms == pytest.approx(0.3)
    least = wire.link_estimate([split(comm=2.0, exposed=1.2), None, split(comm=0.5, exposed=0.2)])
    assert least == wire.LinkEstimate("least of the ranks", link_ms=0.5, exposed_link_ms=0.2, wait_ms=(1.5, 0.0))
    mixed = wire.link_estimate([split(link=(1.5, 0.5, 0.6)), split(comm=0.5, exposed=0.2)])
    assert mixed.source == "least of the ranks"  # one rank without paired traces: the estimate for all


@pytest.mark.parametrize("splits", [[], [None], [None, None]])
def test_the_estimate_of_the_wire_with_no_rank_profiled_is_unknown_not_an_error(splits):
    """No split to read (no rank profiled): nothing is paired, and the least of no ranks is unknown (NaN), with no
    waiting to report; it does not raise."""
    est = wire.link_estimate(splits)
    assert est.source == "least of the ranks" and est.wait_ms == ()
    assert math.isnan(est.link_ms) and math.isnan(est.exposed_link_ms)


def test_the_split_verdict():
    v = profiling.verdict_split(
        res(made.rank(split(comm=2.0, exposed=1.2, step=10.0)), made.rank(split(comm=0.5, exposed=0.2, step=12.0)))
    )
    n = v.numbers
    assert v.status == "info" and n["comm_ms"] == [2.0, 0.5] and n["exposed_ms"] == [1.2, 0.2]
    assert n["waiting_share"] == [0.75, 0.0] and n["link_ms"] == 0.5 and n["exposed_link_ms"] == 0.2
    assert (
        n["step_ms"] == 11.0
        and n["exposed_link_share"] == pytest.approx(0.2 / 11)
        and n["source"] == "least of the ranks"
    )
    assert "75 % of rank 0's communication" in v.text
    over = profiling.verdict_split(
        res(made.rank(split(comm=1.0, exposed=0.5, link=(1.5, 0.2, 0.3))), made.rank(split(link=(0.0, 2.0, 0.0))))
    )
    assert over.numbers["waiting_share"] == [1.0, 0.0]  # a reading above the whole communication is clamped
    zero = profiling.verdict_split(
        res(made.rank(split(comm=0.0, exposed=0.0)), made.rank(split(comm=0.0, exposed=0.0)))
    )
    assert zero.numbers["waiting_share"] == [0.0, 0.0]
    assert profiling.verdict_split(res(made.rank(split()), made.rank(None))).status == "info"
    assert profiling.verdict_split(res(made.rank(split()), made.rank(None))).numbers == {}


# --------------------------------------------------------------------------- the profiler's own cost
def test_the_overhead_frame():
    f = profiling.overhead_frame(
        res(made.rank(plain=(10.0, 10.0), profiled=(12.5, 12.5)), made.rank(plain=(20.0, 20.0), profiled=(21.0, 21.0)))
    )
    assert list(f["overhead_ms"]) == [2.5, 1.0] and list(f["overhead_%"]) == [25.0, 5.0]
    assert list(f["rank"]) == [0, 1] and list(f["step_ms"]) == [10.0, 20.0]


def test_overhead_comparisons_need_two_repeats_each():
    cs = profiling._overhead_comparisons(
        res(made.rank(), made.rank(profiled=(11.0,)), made.rank(plain=(10.0,)), made.rank(step_ms_all=None))
    )
    assert cs[0] == compare([10.0, 10.1, 9.9], [11.0, 11.1, 10.9]) and cs[1:] == [None, None, None]


@pytest.mark.parametrize(
    "statuses, joint",
    [
        (["slower", "slower"], "slower"),
        (["faster"], "faster"),
        (["slower", "no change"], "no change"),
        ([], "no change"),
    ],
)
def test_joint(statuses, joint):
    assert wire.joint_status(statuses) == joint


def test_the_overhead_verdict():
    v = profiling.verdict_overhead(res(made.rank(), made.rank()))
    c = compare([10.0, 10.1, 9.9], [11.0, 11.1, 10.9])
    assert v.status == "slower" and v.numbers == {
        "overhead_ms": [1.0, 1.0],
        "step_ms": [10.0, 10.0],
        "ratio": [c.ratio, c.ratio],
        "noise": [c.noise, c.noise],
    }
    one = profiling.verdict_overhead(res(made.rank(profiled=(11.0,)), made.rank()))
    assert one.status == "info" and one.numbers == {"overhead_ms": [1.0, 1.0], "step_ms": [10.0, 10.0]}
    run = res(made.rank(), made.rank())
    assert v.key == one.key == "profiler overhead" and v.where == one.where == run.label != ""  # where it was measured


NOISY = (8.0, 8.5, 7.5)  # a spread of 1.0 ms on an 8 ms step: the noise bound is 1.0 ms exactly


@pytest.mark.parametrize(
    "plain, exposed, profiled, trust, failing, unsure",
    [
        ((10.0, 10.1, 9.9), (1.5, 1.5), (11.0, 11.1, 10.9), True, [], []),  # adds 1.0 ms, less than 1.5 ms exposed
        ((10.0, 10.1, 9.9), (1.0, 1.5), (11.0, 11.1, 10.9), False, [0], []),  # equal: not less than what it reports
        ((10.0, 10.1, 9.9), (0.9, 0.9), (11.0, 11.1, 10.9), False, [0, 1], []),
        (NOISY, (1.5, 1.5), (8.0, 8.1, 8.2), True, [], []),  # within the noise: up to 1.0 ms, below 1.5
        (NOISY, (1.0, 1.5), (8.0, 8.1, 8.2), None, [], [0]),  # exposed equal to the bound: undecided
        (NOISY, (0.5, 0.5), (8.0, 8.1, 8.2), None, [], [0, 1]),
    ],
)
def test_trust_at_its_rule(plain, exposed, profiled, trust, failing, unsure):
    ranks = [made.rank(split(comm=2.0, exposed=e), plain=plain, profiled=profiled) for e in exposed]
    v = profiling.verdict_trust(res(*ranks))
    n = v.numbers
    assert n["trustworthy"] is trust and n["ranks_failing"] == failing and n["ranks_undecided"] == unsure
    assert v.status == ("undecided" if trust is None else "info")
    assert n["exposed_ms"] == list(exposed)
    if plain == NOISY:  # within the noise: the bound is the noise times the plain step
        assert n["overhead_bound_ms"] == pytest.approx([1.0, 1.0]) and n["overhead_ms"] == pytest.approx([0.1, 0.1])


def test_trust_with_one_rank_failing_and_one_within_the_noise():
    ranks = [
        made.rank(split(comm=2.0, exposed=0.5)),
        made.rank(split(comm=2.0, exposed=0.5), plain=NOISY, profiled=(8.0, 8.1, 8.2)),
    ]
    v = profiling.verdict_trust(res(*ranks))
    n = v.numbers
    assert (v.status, n["trustworthy"], n["ranks_failing"], n["ranks_undecided"]) == ("info", False, [0], [1])
    noise = compare(list(NOISY), [8.0, 8.1, 8.2]).noise
    assert n["overhead_bound_ms"] == pytest.approx([1.0, noise * 8.0])
    assert f"within the noise (rank 1: +0.10 ms, noise ±{noise:.0%} (up to {noise * 8.0:.2f} ms))" in v.text
    assert "rank 0 " in v.text and "ranks 0" not in v.text
    both = profiling.verdict_trust(
        res(made.rank(split(comm=2.0, exposed=0.5)), made.rank(split(comm=2.0, exposed=0.5)))
    )
    assert both.numbers["ranks_failing"] == [0, 1] and "ranks 0, 1 " in both.text
    within = profiling.verdict_trust(
        res(*[made.rank(split(comm=2.0, exposed=1.5), plain=NOISY, profiled=(8.0, 8.1, 8.2))] * 2)
    )
    assert within.numbers["trustworthy"] is True and "(within the noise: at most" in within.text
    assert "within the noise" not in profiling.verdict_trust(res(made.rank(split(comm=2.0, exposed=1.5)))).text


def test_trust_without_repeats_reads_the_medians():
    ranks = [
        made.rank(split(comm=2.0, exposed=1.5), profiled=(11.0,)),
        made.rank(split(comm=2.0, exposed=0.5), profiled=(11.0,)),
    ]
    v = profiling.verdict_trust(res(*ranks))
    assert v.numbers["ranks_failing"] == [1] and v.numbers["overhead_bound_ms"] == [1.0, 1.0]


# --------------------------------------------------------------------------- the A/B without the profiler
AB = {"ddp": [10.0, 10.1, 10.0], "no_sync": [9.0, 9.05, 9.0], "local": [8.0, 8.1, 8.0]}


def test_ab_frame_and_comparisons():
    f = profiling.ab_frame(res(made.rank(repeats=AB)))
    assert list(f["step"]) == [profiling.AB_KINDS[k] for k in AB] and list(f["median_ms"]) == [10.0, 9.0, 8.0]
    assert list(f["round 3"]) == [10.0, 9.0, 8.0]
    one = schema.Kinds(ddp=(1.0,), no_sync=(1.0, 1.1))
    cs = wire.comparisons([kinds(AB), kinds({"ddp": AB["ddp"], "no_sync": AB["no_sync"]}), one, None], "no_sync")
    assert cs[0] == cs[1] == compare(AB["no_sync"], AB["ddp"]) and cs[2:] == [None, None]
    assert wire.comparisons([kinds({"ddp": AB["ddp"], "no_sync": AB["no_sync"]})], "local") == [None]  # no 1-GPU step


def test_the_price_of_the_exchange_and_of_the_second_gpu():
    flat = {**AB, "no_sync": [10.0, 10.05, 10.0]}
    v = profiling.verdict_exchange(res(made.rank(repeats=AB), made.rank(repeats=AB)))
    c = compare(AB["no_sync"], AB["ddp"])
    assert v.status == "slower" and v.numbers == {
        "extra_ms": [1.0, 1.0],
        "noise_ms": [c.noise * 9.0] * 2,
        "ratio": [c.ratio] * 2,
        "rank_status": ["slower", "slower"],
    }
    mixed = profiling.verdict_exchange(res(made.rank(repeats=AB), made.rank(repeats=flat)))
    assert mixed.status == "no change" and mixed.numbers["rank_status"] == ["slower", "no change"]
    assert profiling.verdict_exchange(res(made.rank(repeats=flat), made.rank(repeats=flat))).status == "no change"
    assert profiling.verdict_second_gpu(res(made.rank(repeats=AB), made.rank(repeats=AB))).numbers["extra_ms"] == [
        2.0,
        2.0,
    ]
    missing = profiling.verdict_exchange(res(made.rank(repeats=AB), made.rank()))
    assert missing.status == "info" and missing.numbers == {}


@pytest.mark.parametrize("exposed, link_exposed", [(3.0, 0.2), (1.0, 0.2), (3.0, 2.5), (2.0, 2.0)])
def test_the_second_gpu_from_medians_when_there_are_no_repeats(exposed, link_exposed):
    ranks = [
        made.rank(split(comm=4.0, exposed=exposed, link=(1.0, 3.0, exposed - link_exposed)), local_step_ms=8.0)
        for _ in range(2)
    ]
    run = res(*ranks)
    v = profiling.verdict_second_gpu(run)
    assert v.status == "info" and v.numbers["extra_ms"] == [2.0, 2.0] and v.numbers["mean_exposed_ms"] == exposed
    assert v.where == run.label != ""  # where it was measured
    assert v.numbers["exposed_link_ms"] == pytest.approx(link_exposed)
    assert ("more than the whole gap" in v.text) is (exposed / 2.0 > 1)
    assert ("inside the gap" in v.text) is (link_exposed <= 2.0)
    none = profiling.verdict_second_gpu(
        res(made.rank(split(), local_step_ms=10.0), made.rank(split(), local_step_ms=10.0))
    )
    assert none.numbers["extra_ms"] == [0.0, 0.0] and "inf×" in none.text  # no gap to explain
    assert profiling.verdict_second_gpu(res(made.rank(split()), made.rank(split()))).numbers == {}  # no 1-GPU step
    assert profiling.verdict_second_gpu(res(made.rank(None, local_step_ms=8.0))).numbers == {}  # no split


def test_the_wire_and_memory_frames():
    wire = schema.Wire(bytes=4 * 2**20, ms=(2.0, 1.0, 3.0), busbw_gbs=3.14159, how="test")
    f = profiling.wire_frame(
        res(made.rank(wire=wire), made.rank(wire=dataclasses.replace(wire, busbw_gbs=None)), made.rank())
    )
    assert list(f["rank"]) == [0, 1] and list(f["MiB"]) == [4.0, 4.0] and list(f["median_ms"]) == [2.0, 2.0]
    assert list(f["min_ms"]) == [1.0, 1.0] and bool(f["busbw_GB/s"][0] == 3.1) and bool(f["busbw_GB/s"].isna()[1])
    mem = {
        "kind": "cuda",
        "allocated_bytes.all.peak": 3 * 2**20,
        "reserved_bytes.all.current": 2**21,
        "num_alloc_retries": 2,
        "rss_mib": 12.345,
        "other": 7,
    }
    m = profiling.memory_frame(res(made.rank(memory=mem), made.rank()))
    assert bool(m["allocated_peak_mib"][0] == 3.0) and bool(m["reserved_current_mib"][0] == 2.0)
    assert bool(m["num_alloc_retries"][0] == 2) and bool(m["rss_mib"][0] == 12.3) and "other" not in m
    assert bool(m["kind"][0] == "cuda")


def test_probe_traffic():
    sampler = sampler_of(
        available=True,
        nvlink_bytes=lambda s, e: {
            0: {"tx_bytes": 2 * 2**30, "rx_bytes": 2**30, "seconds": 2.0},
            1: {"tx_bytes": 2**30, "rx_bytes": 0, "seconds": 2.0},
        },
    )
    run = res(made.rank(probe=probe()))
    rows = profiling.probe_traffic(sampler, run)
    assert [dataclasses.asdict(r) for r in rows] == [
        {
            "gpu": 0,
            "nvml_sent_gib": 2.0,
            "nvml_received_gib": 1.0,
            "all_reduce_sends_gib": 1.0,
            "sent_over_expected": 2.0,
            "seconds": 2.0,
        },
        {
            "gpu": 1,
            "nvml_sent_gib": 1.0,
            "nvml_received_gib": 0.0,
            "all_reduce_sends_gib": 1.0,
            "sent_over_expected": 1.0,
            "seconds": 2.0,
        },
    ]
    assert profiling.probe_traffic(sampler_of(available=False), run) == []
    assert profiling.probe_traffic(sampler, res(made.rank())) == []
    zero = profiling.probe_traffic(sampler, res(made.rank(probe=probe(sent=0))))
    assert zero[0].sent_over_expected is None


# --------------------------------------------------------------------------- the batch sweep, C16
def sweep(rows0, rows1, gpu=True):
    return res(made.rank(sweep=tuple(rows0)), made.rank(sweep=tuple(rows1)), gpu=gpu)


def test_the_sweep_table():
    t = profiling.sweep_table(
        sweep([sweep_row(8, 1.0, 0.1), sweep_row(1, 5.0, 4.0)], [sweep_row(1, 0.3, 0.25), sweep_row(8, 1.1, 0.05)])
    )
    rows = t.to_dict("records")
    assert [r["batch"] for r in rows] == [1, 8] and rows[0]["global_batch"] == 2 and rows[0]["step_ms"] == 10.0
    assert rows[0]["comm_share_rank0"] == 0.5 and rows[0]["comm_share_rank1"] == 0.03
    assert rows[0]["comm_share_mean"] == 0.265 and rows[0]["link_ms"] == 0.3
    assert rows[0]["link_share"] == pytest.approx(0.03) and rows[0]["exposed_link_ms"] == 0.25
    assert rows[1]["exposed_link_share"] == pytest.approx(0.05 / 80) and rows[0]["source"] == "least of the ranks"
    assert rows[0]["samples_per_s"] == 100.0 and "exchange_ms" not in t
    ab = {"ddp": [10.0, 10.1], "no_sync": [9.0, 9.1]}
    timed = profiling.sweep_table(sweep([sweep_row(1, 1.0, 0.5, repeats=ab)], [sweep_row(1, 1.0, 0.5, repeats=ab)]))
    first = timed.to_dict("records")[0]
    assert first["exchange_ms"] == [1.0, 1.0] and first["exchange_status"] == "slower"
    c = compare(ab["no_sync"], ab["ddp"])
    assert first["exchange_noise_ms"] == [c.noise * c.baseline] * 2
    bare = dataclasses.replace(sweep_row(2, 1.0, 0.5), comm_ms=None)  # a rank not profiled
    assert "link_ms" not in profiling.sweep_table(sweep([bare], [sweep_row(2, 1.0, 0.5)]))


def c16_run(exposed_small, exposed_large, link_large_ms=None, comm_small=1.0, gpu=True):
    """Two batches (1, 8) on two ranks; the time on the wire given at the large batch."""
    link = (link_large_ms, exposed_large) if link_large_ms is not None else None
    small = sweep_row(1, comm_small, exposed_small, link=(comm_small, exposed_small) if link else None)
    large = sweep_row(8, link_large_ms or 1.0, exposed_large, link=link)
    return sweep([small, large], [small, large], gpu=gpu)


@pytest.mark.parametrize(
    "small, large, status",
    [
        (1.0, 0.899, "partly"),  # hides more than 10 %
        (1.0, 0.9, "wrong"),  # exactly 10 % less: not more than the rule's 10 %
        (1.0, 1.2, "wrong"),
    ],
)
def test_c16_a_larger_batch_must_hide_more_than_ten_percent(small, large, status):
    v = profiling.verdict_c16({"NVLink": c16_run(small, large)})
    assert v.status == status and v.numbers["NVLink"]["exposed_link_ms"] == [small, large]
    assert profiling.HIDES_MORE == 0.10


@pytest.mark.parametrize(
    "wire_ms, status, near",
    [
        (12.1, "holds", True),
        (12.0, "partly", True),  # 15 % of the 80 ms step is 12 ms: above it only
        (13.6, "holds", True),
        (13.7, "holds", False),
        (10.4, "partly", True),
        (10.3, "partly", False),
    ],
)
def test_c16_the_time_on_the_wire_against_15_percent(wire_ms, status, near):
    run = c16_run(5.0, 0.5, link_large_ms=wire_ms, comm_small=0.5)
    v = profiling.verdict_c16({"slow link": run})
    n = v.numbers["slow link"]
    assert v.status == status and n["max_link_share"] == pytest.approx(wire_ms / 80) and n["at_threshold"] is near
    assert n["batches"] == [1, 8] and n["step_ms"] == [10.0, 80.0]
    assert profiling.verdict_c16({"slow link": run}, threshold=wire_ms / 80 - 0.001).status == "holds"


def test_c16_holds_only_where_one_path_both_passes_and_hides():
    hides_low = c16_run(1.0, 0.1)  # hides, wire 1.25 %
    flat_high = c16_run(1.0, 1.0, link_large_ms=20.0)  # wire 25 %, hides nothing
    assert profiling.verdict_c16({"a": hides_low, "b": flat_high}).status == "partly"
    assert profiling.verdict_c16({"a": flat_high}).status == "wrong"
    assert profiling.verdict_c16({"a": hides_low, "b": c16_run(5.0, 0.5, link_large_ms=20.0)}).status == "holds"


def test_c16_says_when_only_the_profilers_share_passed():
    skew = sweep([sweep_row(1, 5.0, 4.0), sweep_row(8, 1.0, 0.1)], [sweep_row(1, 0.3, 0.25), sweep_row(8, 1.1, 0.05)])
    v = profiling.verdict_c16({"NVLink": skew})
    assert v.status == "partly" and v.numbers["NVLink"]["max_profiler_share"] == pytest.approx(0.265)
    assert "only the profiler's share" in v.text
    calm = sweep([sweep_row(1, 1.0, 0.9), sweep_row(8, 1.0, 0.1)], [sweep_row(1, 1.0, 0.9), sweep_row(8, 1.0, 0.1)])
    assert "only the profiler's share" not in profiling.verdict_c16({"NVLink": calm}).text


def test_c16_needs_two_batches_and_gpus():
    one = sweep([sweep_row(1, 1.0, 0.5)], [sweep_row(1, 1.0, 0.5)])
    assert (
        profiling.verdict_c16({"x": one}).status == "unverifiable" and profiling.verdict_c16({"x": one}).numbers == {}
    )
    cpu = profiling.verdict_c16({"gloo": c16_run(1.0, 0.1, gpu=False)})
    assert cpu.status == "unverifiable" and cpu.numbers["gloo"]["batches"] == [1, 8]
    no_env = c16_run(1.0, 0.1)
    no_env.env = None  # a run without an environment block is taken as measured on GPUs
    assert profiling.verdict_c16({"x": no_env}).status == "partly"


def test_c16_from_the_committed_2x_h200_sweeps():
    runs = profiling.reference_runs()
    v = claims.claim("C16").decider()(runs)
    assert v.status == claims.claim("C16").status == "partly"
    assert v.numbers["host-staged"]["at_threshold"] and not v.numbers["NVLink"]["at_threshold"]
    assert v.numbers["host-staged"]["max_link_share"] == pytest.approx(0.141, abs=0.002)
    assert v.numbers["NVLink"]["max_link_share"] < 0.02 and v.numbers["NVLink"]["max_profiler_share"] > 0.15


def _on(run, link=None, gpu=True, world=2):
    """``run`` with an environment block: its ranks on GPUs joined by ``link`` (``NV18``, ``PCIe``), or the CPU."""
    run.env = types.SimpleNamespace(is_gpu=gpu, world_size=world, link=link)
    return run


def _profiled(exposed, step=10.0):
    """A profiled run whose exposed time on the wire is ``exposed`` ms of a ``step`` ms step (both ranks alike)."""
    return res(
        made.rank(split(step=step, comm=exposed, exposed=exposed)),
        made.rank(split(step=step, comm=exposed, exposed=exposed)),
    )


@pytest.mark.parametrize(
    "exposed, answer",
    [(0.199, "a"), (0.2, "b"), (0.999, "b"), (1.0, "c"), (2.499, "c"), (2.5, "d"), (9.0, "d")],
)
def test_the_prediction_is_graded_by_the_share_on_both_sides_of_each_bound(exposed, answer):
    """Review R1-2: the exposed time on the wire as a share of the step, graded where the run is what the question
    asks about (2 GPUs joined by NVLink): 2, 10 and 25 % each belong to the choice above them."""
    run = _on(_profiled(exposed), "NV18")
    assert profiling.share_answer(exposed / 10.0) == answer
    v = profiling.grade_prediction(answer, run, {})
    assert (v.status, v.numbers["answer"], v.where) == ("right", answer, "2× test GPU")
    assert profiling.grade_prediction("a" if answer != "a" else "b", run, {}).status == "off"


def test_a_gpu_prediction_is_never_graded_by_a_cpu_simulation_or_another_link():
    """Review R1-2: where this machine's run is not two GPUs over NVLink (the CPU simulation, GPUs joined by PCIe,
    host-staged, one rank alone), the committed 2× H200 run over NVLink grades the prediction, labelled so, and this
    machine's share is only quoted; without it, nothing is graded."""
    ref = _on(_profiled(0.1, step=40.0), "NV18")  # 0.25 %: (a)
    ref.given_label = "2× NVIDIA H200 · NV18"
    staged = _on(res(*[made.rank(split(comm=3.0, exposed=3.0), nccl_p2p_disable="1")] * 2), "NV18")
    cases = (
        (_on(_profiled(3.0), gpu=False), "a CPU simulation"),
        (_on(_profiled(3.0), "PCIe"), "GPUs joined by PCIe"),
        (staged, "host-staged, NCCL_P2P_DISABLE=1"),
    )
    for here, how in cases:
        v = profiling.grade_prediction("d", here, {"NVLink": ref})  # (d) is this machine's 30 %: not the answer
        assert (v.status, v.numbers["answer"]) == ("off", "a")
        assert v.where == "2× NVIDIA H200 · NV18: the committed 2× H200 run, not this machine"
        assert f"This machine's run ({how}: 30.0 % here) does not grade" in v.text
        assert "On the committed 2× H200 run over NVLink: 0.10 ms of exposed time" in v.text
        none = profiling.grade_prediction("d", here, {})
        assert none.status == "info" and "not graded here" in none.text and none.numbers == {"prediction": "d"}
    unprofiled = profiling.grade_prediction(
        "a", _on(_profiled(3.0), gpu=False), {"NVLink": _on(res(made.rank(None)), "NV18")}
    )
    assert unprofiled.status == "info" and "was not profiled" in unprofiled.text
    alone = _on(_profiled(1.0), "NV18", world=1)  # one rank on one GPU: no link between GPUs
    v = profiling.grade_prediction("a", alone, {"NVLink": ref})
    assert v.where.endswith("not this machine") and "(one rank on one GPU: 10.0 % here)" in v.text
    assert profiling.over_nvlink(_on(_profiled(1.0), "NV4")) and not profiling.over_nvlink(_on(_profiled(1.0), None))


def test_the_prediction_explanation():
    run = _on(res(made.rank(split(comm=2.0, exposed=1.2)), made.rank(split(comm=0.5, exposed=0.2))), "NV18")
    text = profiling.prediction_explanation(run)
    assert text == ("Here (2× test GPU): 0.20 ms of exposed time on the wire in a 10.0 ms profiled step, 2.0 %.")
    ref = res(
        made.rank(split(comm=2.0, exposed=1.2), gradient_mib=100.0, probe=probe(busbw=100.0)),
        made.rank(split(comm=0.5, exposed=0.2)),
    )
    with_ref = profiling.prediction_explanation(run, {"NVLink": ref})
    assert with_ref.startswith(text + " On the committed 2× H200 run over NVLink: 0.20 ms of exposed time")
    assert "105 MB of gradients take about 1.0 ms" in with_ref
    ref.ranks[0]["probe"] = None
    assert with_ref.split(" 105 MB")[0] == profiling.prediction_explanation(run, {"NVLink": ref})
    assert profiling.prediction_explanation(run, {"NVLink": run}) == text  # itself: not quoted twice
    assert profiling.prediction_explanation(res(made.rank(None))) == "This run was not profiled."


# --------------------------------------------------------------------------- C12 (traces) and C13 (monitoring)
@pytest.mark.parametrize("comm1, status", [(0.5, "partly"), (0.99, "partly"), (1.0, "holds"), (2.0, "holds")])
def test_c12_at_half_the_communication_waiting(comm1, status):
    v = traces.verdict_c12(res(made.rank(split(comm=2.0, exposed=1.0)), made.rank(split(comm=comm1, exposed=0.5))))
    waiting = 1 - comm1 / 2.0
    assert v.status == status and v.numbers["waiting_share"] == pytest.approx([waiting, 0.0])
    assert v.numbers["comm_ms"] == [2.0, comm1] and v.numbers["link_ms"] == comm1 and v.numbers["nsys"] is False


def test_c12_without_gpus_or_a_split_and_with_nsys():
    cpu = traces.verdict_c12(res(made.rank(split(source="cpu")), made.rank(split(source="cpu"))))
    assert cpu.status == "unverifiable" and cpu.numbers["source"] == "cpu"
    why = "2 ranks need 2 GPUs for NCCL; this machine has 1"  # review R1-10: the plan's reason, never "need GPUs"
    one_gpu = traces.verdict_c12(res(made.rank(split(source="cpu")), made.rank(split(source="cpu"))), None, why)
    assert one_gpu.text.startswith(f"not settled here: this run's ranks ran on the CPU ({why})")
    assert "need" not in cpu.text.replace(why, "") and "(a CPU simulation)" in cpu.text
    assert traces.verdict_c12(res(made.rank(split()), made.rank(None))).status == "unverifiable"
    assert traces.verdict_c12(res(label="x")).numbers == {}
    zero = traces.verdict_c12(res(made.rank(split(comm=0.0, exposed=0.0)), made.rank(split(comm=0.0, exposed=0.0))))
    assert zero.numbers["waiting_share"] == [0.0, 0.0] and zero.status == "holds"
    ran = traces.NsysResult(available=True, command=["nsys"], splits=[cast(Split, types.SimpleNamespace(comm_ms=1.5))])
    v = traces.verdict_c12(res(made.rank(split()), made.rank(split())), ran)
    assert v.numbers["nsys"] is True and v.numbers["nsys_comm_ms"] == [1.5]
    empty = traces.NsysResult(available=True, command=["nsys"])
    assert "no split" in traces.verdict_c12(res(made.rank(split()), made.rank(split())), empty).text


def test_rank_traces_sort_by_rank_number(tmp_path):
    for name in ("trace_rank10.json", "trace_rank2.json", "trace_rank0.json", "other.json"):
        (tmp_path / name).write_text("{}")
    assert [x.name for x in traces.rank_traces(tmp_path)] == [
        "trace_rank0.json",
        "trace_rank2.json",
        "trace_rank10.json",
    ]
    assert [x.name for x in traces.rank_traces(tmp_path, "*.json")][:2] == ["other.json", "trace_rank0.json"]


def test_the_kernel_summary():
    text = (
        'junk before\n Time (%),Total Time (ns),Instances,Name\n50,"1,500,000",3,ncclDevKernel_AllReduce\n'
        "50,2500000,10,sm90_gemm\n1,,1,empty\n1,x,1,bad\n1,5,1,\n"
    )
    rows = traces.parse_kernel_summary(text)
    assert rows == [
        traces.KernelRow(name="ncclDevKernel_AllReduce", total_ns=1.5e6, instances=3),
        traces.KernelRow(name="sm90_gemm", total_ns=2.5e6, instances=10),
    ]
    assert traces.kernel_summary_split(rows) == {"compute_ms": 2.5, "comm_ms": 1.5}
    assert traces.parse_kernel_summary("no header\n") == []
    assert traces._pid((7 << 24) | 5) == 7 and traces._pid(None) is None


def test_an_nsys_result_as_a_table():
    s = cast(Split, types.SimpleNamespace(rank=None, to_dict=lambda: {"comm_ms": 1.0, "phase_ms": {}}))
    frame = traces.NsysResult(available=True, command=[], splits=[s, s]).to_frame()
    assert list(frame.index) == [0, 1] and "phase_ms" not in frame
    assert traces.NsysResult(available=False, command=[]).to_frame().empty


DMON = (
    "#Time gpu sm mem enc dec\n#HH:MM:SS Idx % % % %\n10:00:01 0 5 1 0 0\n10:00:02 0 98 3 0 0\n"
    "10:00:03 0 100 4 0 0\n10:00:05 0 7 1 0 0\n"
)


def test_dmon_busy_during_a_window():
    import datetime

    day = datetime.datetime(2026, 12, 1, 0, 0, 0).timestamp()
    at = day + 10 * 3600
    assert monitoring.dmon_busy_during(DMON, at + 1.5, at + 3.0, day) == 100.0
    assert monitoring.dmon_busy_during(DMON, at + 2.0, at + 2.0, day) == 100.0  # lines stamped up to a second away
    assert monitoring.dmon_busy_during(DMON, at + 4.0, at + 4.0, day) == 100.0  # :03, a second before: in
    assert monitoring.dmon_busy_during(DMON, at + 4.01, at + 4.01, day) == 7.0  # :03 out, :05 in
    assert monitoring.dmon_busy_during(DMON, at + 0.5, at + 0.99, day) == 5.0  # :02, a second after 0.99: out
    assert monitoring.dmon_busy_during(DMON, at + 6.1, at + 9.0, day) is None
    assert monitoring.dmon_busy_during("# gpu sm\n 0 5\n", at, at + 1, day) is None  # no time column


def test_c13_at_its_rule():
    v = monitoring.verdict_c13(DMON, [2 * 2**30, 2**30], 2**30, sm_during_probe=99.0, where="GPU")
    assert v.status == "wrong" and v.numbers["sent_over_expected"] == 2.0 and v.where == "GPU"
    assert v.numbers["dmon_columns"] == ["sm", "mem", "enc", "dec"] and v.numbers["sm_during_probe"] == 99.0
    assert "99 %" in v.text
    assert "the link shows only in those counters" in v.text  # the counters it names: NVML's, which saw the probe
    plain = monitoring.verdict_c13(DMON)  # no probe (one GPU: no link): the counters are named, not referred to
    assert plain.status == "wrong" and "sent_over_expected" not in plain.numbers
    assert "those counters" not in plain.text and "NVML's NVLink counters" in plain.text
    nvl = monitoring.verdict_c13("# gpu sm nvlrx\n# Idx % MB/s\n 0 1 2\n")
    assert nvl.status == "holds"
    counters_only = monitoring.verdict_c13("", [2**30])
    assert counters_only.status == "wrong" and counters_only.numbers["dmon_columns"] == []
    assert monitoring.verdict_c13("", [], reason="no driver").status == "unverifiable"


def test_c13_from_a_sampler():
    sampler = sampler_of(dmon_text=DMON, reason="", dmon_reason="", started_at=None)
    run = res(made.rank(probe=probe(start=1.0, end=2.0)))
    v = monitoring.verdict_c13_from(sampler, run, traffic(1.0))
    assert v.status == "wrong" and v.numbers["sent_over_expected"] == 1.0 and v.numbers["sm_during_probe"] is None
    run.env = cast(EnvInfo, types.SimpleNamespace(is_gpu=False))
    cpu = monitoring.verdict_c13_from(sampler, run, traffic(1.0))
    assert cpu.status == "unverifiable" and cpu.numbers["dmon_columns"] == ["sm", "mem", "enc", "dec"]
    assert cpu.numbers["nvlink_sent_bytes"] == [] and claims.claim("C13").finding in cpu.text


def test_c13_from_a_sampler_reads_the_sm_during_the_probe():
    import datetime

    day = datetime.datetime(2026, 12, 1, 0, 0, 0).timestamp()
    at = day + 10 * 3600
    sampler = sampler_of(dmon_text=DMON, reason="", dmon_reason="", started_at=at)
    run = res(made.rank(probe=probe(start=at + 1.5, end=at + 3.0)))
    v = monitoring.verdict_c13_from(sampler, run, traffic(2.0, 1.0))
    assert v.numbers["sm_during_probe"] == 100.0 and v.numbers["nvlink_sent_bytes"] == [2 * 2**30, 2**30]
    assert v.numbers["sent_over_expected"] == 2.0 and v.numbers["expected_bytes"] == 2**30
    quiet = sampler_of(dmon_text="", reason="", dmon_reason="dmon: not found", started_at=at)
    none = monitoring.verdict_c13_from(quiet, run)
    assert none.status == "unverifiable" and none.numbers["sm_during_probe"] is None and "dmon: not found" in none.text
    run.env = cast(EnvInfo, types.SimpleNamespace(is_gpu=False))
    cpu = monitoring.verdict_c13_from(quiet, run)
    assert cpu.numbers["dmon_columns"] == [] and "dmon did not run (dmon: not found)" in cpu.text


# --------------------------------------------------------------------------- the committed layout, read typed
OLD_SPLIT = {
    "source": "gpu",
    "steps": 5,
    "step_ms": 10.0,
    "compute_ms": 8.0,
    "comm_ms": 2.0,
    "hidden_ms": 1.0,
    "exposed_ms": 1.0,
    "idle_ms": 1.0,
    "phase_ms": {"forward": 3.0},
    "rank": 0,
    "compute_only_ms": 7.0,
    "comm_share": 0.2,
    "exposed_share": 0.1,
    "hidden_fraction": 0.5,
}


def old_layout(probe=None, snapshot=None):
    """One rank as the workload wrote it on 2026-11-30 (the committed reference runs): no A/B rounds, no wire, no
    paired traces, ``{}`` for no probe, a snapshot with only the keys of its case."""
    return {
        "model": "full",
        "batch_size": 16,
        "image_size": 256,
        "amp": "bf16",
        "parameters": 100,
        "gradient_mib": 400 / 2**20,
        "step_ms": 10.0,
        "step_ms_profiled": 11.0,
        "profiler_overhead": 0.1,
        "local_step_ms": 9.0,
        "ddp_gap_ms": 1.0,
        "samples_per_s": 3200.0,
        "split": dict(OLD_SPLIT),
        "trace": "runs/x/trace_rank0.json",
        "sweep": [
            {
                **{k: v for k, v in OLD_SPLIT.items() if k != "phase_ms"},
                "batch": 2,
                "global_batch": 4,
                "step_ms_unprofiled": 9.5,
                "samples_per_s": 420.0,
            }
        ],
        "probe": probe if probe is not None else {},
        "memory": {"allocated_bytes.all.peak": 2**20, "kind": "torch.cuda.memory_stats"},
        "memory_snapshot": snapshot or {"written": False, "reason": "not asked for"},
        "phases": [{"name": "setup + warm-up", "start": 1.0, "end": 2.0}],
        "step_ends": [1.5, 1.6],
        "nccl_p2p_disable": "1",
    }


def test_the_layout_of_the_reference_runs_upgrades_to_the_typed_rank():
    from nvtutorial.results import typed

    up = schema.Rank.upgrade(old_layout())
    assert up["probe"] is None  # no probe: {} then, None now
    assert up["split"]["per_step"] == [] and up["split"]["link"] is None
    assert up["sweep"][0]["per_step"] == [] and up["sweep"][0]["link"] is None and up["sweep"][0]["repeats"] is None
    assert up["memory_snapshot"] == {
        "written": False,
        "path": None,
        "bytes": None,
        "how_to_view": None,
        "reason": "not asked for",
    }
    assert up["timing"] is None and up["step_ms_repeats"] is None and up["wire"] is None and up["profiled_ms"] == []
    m = typed(schema.Rank, old_layout())
    assert m.probe is None and m.step_ms_all is None and m.no_sync_step_ms is None and m.profiled_ms == ()
    assert m.split is not None and m.split.phase_ms == {"forward": 3.0} and m.split.per_step == ()
    row = m.sweep[0]
    assert row.split == dataclasses.replace(m.split, phase_ms={}) and row.repeats is None and row.batch == 2
    assert m.phases == (schema.Phase("setup + warm-up", 1.0, 2.0),) and m.step_ends == (1.5, 1.6)
    assert m.memory["allocated_bytes.all.peak"] == 2**20  # torch's names, as the run wrote them
    written = {"written": True, "path": "p.pickle", "bytes": 3, "how_to_view": "drag it"}
    kept = typed(schema.Rank, old_layout(probe=dataclasses.asdict(probe()), snapshot=written))
    assert kept.probe == probe() and kept.memory_snapshot == schema.Snapshot(**written)
    assert profiling.verdict_exchange(run_of(old_layout(), old_layout())).status == "info"  # no rounds to compare


def test_dmon_against_nvml_at_the_edges_of_its_window():
    """Review R6-6 and RR13-8: dmon's ``-o T`` stamps drop the fraction of a second, so the lines read are those
    stamped in [start − 1, end + 1] of NVML's busy span (both edges in, a second beyond either out); "saw" from
    half NVML's threshold (40 saw, 39 missed); nothing said when NVML was never busy, or without dmon's times."""
    import pandas as pd

    at = time.mktime((2026, 12, 7, 11, 6, 17, 0, 0, -1))
    nvml = pd.DataFrame({"t": [at + 1.0, at + 1.5, at + 2.0], "sm_util_pct": [90, 80, 79]})
    dmon = pd.DataFrame({"t": [at + s for s in range(-1, 4)], "sm": [0, 0, 0, 0, 0]})  # stamps :16 to :20
    head = "NVML: ≥ 80 % busy for 0.5 s (11:06:18.0 to 11:06:18.5); dmon's 1-s lines around that span"
    missed = monitoring.dmon_against_nvml(nvml, dmon)
    assert missed == (
        f"{head} (11:06:17 to 11:06:19) read 0–0 %: a burst this short can fall between dmon's once-a-second samples"
    )
    assert monitoring.dmon_against_nvml(nvml, dmon.assign(sm=[0, 97, 0, 0, 0])) == (
        f"{head} (11:06:17 to 11:06:19) read 0–97 %: it saw the burst, on a 1-s grid"
    )  # stamped a second before the span's start: the edge, in
    assert "it saw the burst" in (
        monitoring.dmon_against_nvml(nvml, dmon.assign(sm=[0, 0, 0, 97, 0])) or ""
    )  # end + 1: in
    assert monitoring.dmon_against_nvml(nvml, dmon.assign(sm=[97, 0, 0, 0, 0])) == missed  # start − 2: out
    assert monitoring.dmon_against_nvml(nvml, dmon.assign(sm=[0, 0, 0, 0, 97])) == missed  # end + 2: out
    assert "it saw the burst" in (monitoring.dmon_against_nvml(nvml, dmon.assign(sm=[0, 0, 40, 0, 0])) or "")
    assert "can fall between" in (monitoring.dmon_against_nvml(nvml, dmon.assign(sm=[0, 0, 39, 0, 0])) or "")
    assert monitoring.dmon_against_nvml(nvml.assign(sm_util_pct=79), dmon) is None  # never busy
    assert monitoring.dmon_against_nvml(nvml, dmon.drop(columns="t")) is None
    assert monitoring.dmon_against_nvml(nvml, None) is None
    assert monitoring.dmon_against_nvml(nvml, dmon.assign(t=dmon["t"] + 100)) == (
        "NVML: ≥ 80 % busy for 0.5 s (11:06:18.0 to 11:06:18.5); dmon printed no line around that span"
    )


def test_dmon_saw_the_one_h100_burst(h100_telemetry):
    """Review RR13-8: on one H100 dmon printed 97 % at 23:01:18 while NVML read ≥ 80 % from 23:01:18.3, and the
    notebook said dmon's lines read 0–0 % (it read only lines stamped from the span's start on)."""
    nvml, dmon, saved = h100_telemetry
    assert monitoring.dmon_against_nvml(nvml, dmon) == (
        "NVML: ≥ 80 % busy for 1.1 s (23:01:18.3 to 23:01:19.4); dmon's 1-s lines around that span (23:01:18 to "
        "23:01:20) read 0–97 %: it saw the burst, on a 1-s grid"
    )
    hot = nvml.loc[nvml["sm_util_pct"] >= 80, "t"]
    assert monitoring.dmon_busy_during(saved["dmon_text"], hot.min(), hot.max(), saved["started_at"]) == 97.0


NOTEBOOK = ROOT / "reference" / "h200x2" / "05_profiling.ipynb"


def _reference_telemetry():
    """What the committed notebook printed: dmon's lines, and NVML's NVLink bytes during the probe."""
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "nvidia-smi dmon -s u, during the same run" in "".join(cell["source"]):
            texts = [
                ("".join(o["text"]) if "text" in o else "".join(o.get("data", {}).get("text/plain", "")))
                for o in cell["outputs"]
            ]
            dmon = texts[0].split("during the same run:", 1)[1]
            table = next(t for t in texts if "nvml_sent_gib" in t)
            sent = [float(x) for x in re.findall(r"^\s*\d+\s+\d+\s+([\d.]+)", table, flags=re.M)]
            return dmon, sent
    raise AssertionError("the dmon cell is missing from the committed notebook")


def test_quoted_reference_verdicts_say_they_are_not_this_machine(ref):
    """Review RR12-6: the reference's time split (cell 431b54e9) and C16 (cell de3f1714), quoted where the ranks ran on
    the CPU, carry the suffix the prediction's grade carries; the verdict itself is left as it was."""
    split = profiling.verdict_split(ref["NVLink"])
    quoted = profiling.committed(split)
    assert split.where == ref["NVLink"].label and "not this machine" not in split.where  # this run's own: no suffix
    assert quoted.where == f"{ref['NVLink'].label}: the committed 2× H200 run, not this machine"
    assert (quoted.status, quoted.text, quoted.numbers) == (split.status, split.text, split.numbers)
    c16 = profiling.committed(profiling.verdict_c16(ref)).where
    assert c16.startswith("NVLink: ") and c16.endswith(": the committed 2× H200 runs, not this machine")


def test_the_split_adds_up_on_both_ranks(ref):
    for res in ref.values():
        v = profiling.check_split(res)
        assert v.status == "pass" and v.numbers["ranks"] == 2


def test_rank0s_exposed_communication_is_mostly_waiting(ref):
    v = profiling.verdict_split(ref["NVLink"])
    n = v.numbers
    assert v.status == "info" and n["source"] == "least of the ranks"
    assert n["comm_ms"] == pytest.approx([7.016, 0.564], abs=1e-3)  # the same collectives on both ranks
    assert n["exposed_ms"] == pytest.approx([3.243, 0.160], abs=1e-3)
    assert n["waiting_share"][0] > 0.9 and n["waiting_share"][1] == 0  # 92 % of rank 0's was waiting for rank 1
    assert n["link_ms"] == pytest.approx(0.564, abs=1e-3) and n["exposed_link_ms"] == pytest.approx(0.160, abs=1e-3)
    assert n["exposed_link_share"] < 0.005  # under half a percent of the 43 ms profiled step
    # The wire: 124 MB of gradients at the 298 GB/s the probe reached is about 0.4 ms, no more than rank 1's 0.56 ms.
    m = ref["NVLink"].ranks_as(schema.Rank)[0]
    assert m.probe is not None
    wire_ms = m.gradient_mib * 2**20 / (m.probe.busbw_gbs * 1e9) * 1e3
    assert 0.3 < wire_ms < n["link_ms"]


def test_host_staged_skew_runs_the_other_way(ref):
    n = profiling.verdict_split(ref["host-staged"]).numbers
    assert n["waiting_share"][0] == 0 and 0.25 < n["waiting_share"][1] < 0.4
    assert n["link_ms"] == pytest.approx(4.834, abs=1e-3)


def test_the_profiler_costs_more_than_the_exposed_communication_it_reports(ref):
    over = profiling.verdict_overhead(ref["NVLink"])
    assert over.status == "info"  # medians only: no repeats to apply the noise rule to
    assert over.numbers["overhead_ms"] == pytest.approx([3.697, 1.220], abs=1e-3)
    trust = profiling.verdict_trust(ref["NVLink"])
    assert not trust.numbers["trustworthy"] and trust.numbers["ranks_failing"] == [0, 1]
    staged = profiling.verdict_trust(ref["host-staged"])
    assert not staged.numbers["trustworthy"] and staged.numbers["ranks_failing"] == [0]


def test_the_exposed_communication_is_not_the_price_of_the_second_gpu(ref):
    v = profiling.verdict_second_gpu(ref["NVLink"])
    assert v.status == "info"
    gap = v.numbers["extra_ms"]
    assert gap == pytest.approx([0.844, 0.771], abs=1e-3)
    assert v.numbers["mean_exposed_ms"] / (sum(gap) / 2) > 2  # the old reading: "explains 211 % of the gap"
    assert v.numbers["exposed_link_ms"] < min(gap)  # the exposed time on the wire fits inside the gap
    assert profiling.verdict_exchange(ref["NVLink"]).status == "info"  # no no_sync rounds in these runs


def test_c16_the_profilers_share_crosses_15_percent_only_through_waiting(ref):
    v = profiling.verdict_c16(ref)
    assert v.status == claims.claim("C16").status == "partly"
    assert v.where.startswith("NVLink: 2× NVIDIA H200") and " | host-staged: 2× NVIDIA H200" in v.where
    nv, hs = v.numbers["NVLink"], v.numbers["host-staged"]
    assert nv["batches"] == hs["batches"] == [2, 8, 32]
    assert nv["max_profiler_share"] > 0.15 and nv["max_link_share"] < 0.02
    assert hs["max_profiler_share"] > 0.15 and 0.13 < hs["max_link_share"] < 0.15
    assert hs["at_threshold"] and not nv["at_threshold"]  # 14.1 %, one average without repeats: said to be at it
    for n in (nv, hs):
        assert n["exposed_link_ms"][-1] < 0.25 * n["exposed_link_ms"][0]  # a larger batch hides more of it
    # Batches 2 and 8 take the same time: the step is bound by launching kernels there, not by the GPU.
    assert nv["step_ms"][0] == pytest.approx(nv["step_ms"][1], rel=0.05) and nv["step_ms"][2] > 2.5 * nv["step_ms"][1]
    assert claims.claim("C16").decider() is profiling.verdict_c16


def test_c12_a_ranks_communication_includes_waiting(ref):
    v = traces.verdict_c12(ref["NVLink"])
    assert v.status == claims.claim("C12").status == "partly"
    assert v.numbers["waiting_share"][0] > 0.9 and v.numbers["source"] == "gpu"
    assert claims.claim("C12").decider() is traces.verdict_c12


def test_c13_dmon_shows_utilisation_not_the_link(ref):
    dmon, sent_gib = _reference_telemetry()
    assert sent_gib == pytest.approx([472.203, 472.191])
    probe = ref["NVLink"].ranks_as(schema.Rank)[0].probe
    assert probe is not None
    v = monitoring.verdict_c13(
        dmon, [g * 2**30 for g in sent_gib], probe.bytes_per_rank_algorithm, where=ref["NVLink"].label
    )
    assert v.status == claims.claim("C13").status == "wrong"
    assert v.numbers["dmon_columns"] == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert v.numbers["sent_over_expected"] == pytest.approx(0.95, abs=0.01)
    assert claims.claim("C13").decider() is monitoring.verdict_c13
    assert "the link shows only in those counters" in v.text and "sent nothing" not in v.text  # they saw the probe
    # the same dmon lines from a run with no probe (one GPU: no link): still wrong; the counters named, none read
    alone = monitoring.verdict_c13(dmon, where="1× NVIDIA H200")
    assert alone.status == "wrong" and alone.numbers["nvlink_sent_bytes"] == [] and "sent nothing" in alone.text


def test_the_prediction_answer_from_the_reference(ref):
    """Review R1-2, on the committed runs through the real readers: the NVLink run grades itself, (a) 0.4 %; its
    host-staged twin is not over NVLink, so the NVLink run grades it too, and the twin's 1.7 % is only quoted."""
    share = profiling.verdict_split(ref["NVLink"]).numbers["exposed_link_share"]
    assert share == pytest.approx(0.0037, abs=1e-4) and profiling.share_answer(share) == "a"
    itself = profiling.grade_prediction("a", ref["NVLink"], ref)
    assert itself.status == "right" and itself.where == ref["NVLink"].label
    staged = profiling.grade_prediction("b", ref["host-staged"], ref)
    assert (staged.status, staged.numbers["answer"]) == ("off", "a")
    assert staged.where == f"{ref['NVLink'].label}: the committed 2× H200 run, not this machine"
    text = staged.text
    assert "0.16 ms of exposed time on the wire in a 43.1 ms profiled step, 0.4 %" in text and "about 0.4 ms" in text
    assert "(host-staged, NCCL_P2P_DISABLE=1: 1.7 % here)" in text


FIXTURES = test_paths.FIXTURES / "traces"


CPU_TRACES = [FIXTURES / "cpu_gloo_rank0.json.gz", FIXTURES / "cpu_gloo_rank1.json.gz"]


def test_memory_frame_turns_every_dot_of_a_byte_counter_into_an_underscore():
    mem = {"kind": "cuda", "large.pool_bytes.all.peak": 2**21}
    m = profiling.memory_frame(res(made.rank(memory=mem)))
    assert bool(m["large_pool_peak_mib"][0] == 2.0) and "large.pool_peak_mib" not in m


def test_overhead_frame_keeps_the_step_time_to_the_microsecond():
    f = profiling.overhead_frame(res(made.rank(step_ms=10.12345, step_ms_profiled=11.0)))
    assert bool(f["step_ms"][0] == 10.123)


def test_c13_says_where_it_was_measured_whatever_its_status():
    assert monitoring.verdict_c13("", [], reason="no driver", where="here").where == "here"  # unverifiable
    nvl = monitoring.verdict_c13("# gpu sm nvlrx\n# Idx % MB/s\n 0 1 2\n", where="here")
    assert nvl.status == "holds" and nvl.where == "here"


def test_c13_from_a_run_without_a_probe_reads_no_sm():
    import datetime

    at = datetime.datetime(2026, 12, 1, 10, 0, 0).timestamp()
    sampler = sampler_of(dmon_text=DMON, reason="", dmon_reason="", started_at=at)
    v = monitoring.verdict_c13_from(sampler, res(made.rank()), traffic(1.0))
    assert v.status == "wrong" and v.numbers["sm_during_probe"] is None and v.numbers["expected_bytes"] is None


def test_split_table_reads_a_run_folder(tmp_path):
    for r, src in enumerate(CPU_TRACES):
        (tmp_path / f"trace_rank{r}.json").write_bytes(gzip.decompress(src.read_bytes()))
    table = traces.split_table(tmp_path)
    assert list(table.index) == [0, 1] and bool((table["comm_share"] > 0).all())


def test_timeline_rows_name_their_lane():
    tl = traces.timeline(CPU_TRACES)
    assert {"rank", "kind", "lane", "start_ms", "end_ms", "name"} <= set(tl.columns)
    assert bool(tl["lane"].notna().all())


def test_cpu_traces_know_their_ranks_and_share_a_clock():
    assert [tracesplit.classify(p).rank for p in CPU_TRACES] == [0, 1]
    tl = traces.timeline(CPU_TRACES)
    assert set(tl["rank"]) == {0, 1}
    assert {"step", "phase", "compute", "wait", "transfer"} <= set(tl["kind"])
    steps = tl[tl["kind"] == "step"].set_index("rank")
    assert bool(steps["start_ms"].min() == 0.0)  # the common origin: the earlier rank's step start
    for rank in (0, 1):
        sub = tl[tl["rank"] == rank]
        s0, s1 = steps.loc[rank, "start_ms"], steps.loc[rank, "end_ms"]
        assert (sub["start_ms"] >= s0 - 1e-9).all() and (sub["end_ms"] <= s1 + 1e-9).all()
    aligned = traces.timeline(CPU_TRACES, align="step")
    assert bool((aligned[aligned["kind"] == "step"]["start_ms"] == 0).all())


def test_split_table_reads_a_folder(tmp_path):
    for r, p in enumerate(CPU_TRACES):
        (tmp_path / f"trace_rank{r}.json.gz").write_bytes(p.read_bytes())
    assert [p.name for p in traces.rank_traces(tmp_path, "trace_rank*.json.gz")] == [
        "trace_rank0.json.gz",
        "trace_rank1.json.gz",
    ]
    table = traces.split_table(traces.rank_traces(tmp_path, "trace_rank*.json.gz"))
    assert list(table.index) == [0, 1]
    assert bool((table["comm_share"] > 0).all())


def _nsys_db(path):
    """An Nsight Systems-like SQLite export holding the synthetic trace's kernels (ns) and NVTX steps."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, "
        "globalPid INT, shortName INT, demangledName INT)"
    )
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT, globalPid INT)"
    )
    con.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, globalTid INT, text TEXT, textId INT)")
    names = {}
    pid = 4242
    gpid = pid << 24
    data = tracesplit.load(SYNTHETIC)
    for e in data["traceEvents"]:
        if e.get("cat") == "gpu_memcpy":  # copies live in a table of their own
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?)",
                (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000), 0, e["tid"], gpid),
            )
        elif e.get("cat") == "kernel":
            name = e["name"].split("(")[0]
            sid = names.setdefault(name, len(names) + 1)
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?)",
                (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000), 0, e["tid"], gpid, sid, sid),
            )
        elif e.get("cat") == "user_annotation":
            con.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,NULL)",
                (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000), gpid | 7, e["name"]),
            )
    # A second process's range on another GPU must not count as a step of GPU 0.
    con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,NULL)", (0, 300_000, (pid + 1) << 24, "train_step"))
    con.executemany("INSERT INTO StringIds VALUES (?,?)", [(i, n) for n, i in names.items()])
    con.commit()
    con.close()


def test_nsys_split_matches_the_profiler_split(tmp_path):
    db = tmp_path / "report.sqlite"
    _nsys_db(db)
    (s,) = traces.nsys_split(db)
    ref = tracesplit.split(SYNTHETIC)
    assert s.source == "nsys" and s.rank == 0 and s.steps == 2
    for key in ("step_ms", "compute_ms", "comm_ms", "hidden_ms", "exposed_ms", "idle_ms"):
        assert getattr(s, key) == pytest.approx(getattr(ref, key)), key


def test_nsys_split_of_an_older_export_without_steps(tmp_path):
    """NVTX_EVENTS without textId (older nsys), no copy tables, no train_step range: the GPU's whole span is one
    step."""
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, globalPid INT, shortName INT)"
    )
    con.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, globalTid INT, text TEXT)")
    con.executemany("INSERT INTO StringIds VALUES (?,?)", [(1, "sm90_gemm"), (2, "ncclDevKernel_AllReduce_Sum_f32")])
    gpid = 77 << 24
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?)",
        [(1000, 2000, 1, gpid, 1), (2000, 2500, 1, gpid, 2)],
    )
    con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?)", (0, 9000, 78 << 24, "train_step"))  # another process's
    con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?)", (0, 9000, gpid | 3, "forward"))
    con.commit()
    con.close()
    (s,) = traces.nsys_split(db)
    assert (s.source, s.rank, s.steps) == ("nsys", 1, 1)
    assert (s.step_ms, s.compute_ms, s.comm_ms, s.exposed_ms) == pytest.approx((0.0015, 0.001, 0.0005, 0.0005))


def test_parse_kernel_summary():
    text = (
        " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n"
        '"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"\n'
        '"60.0","6000","3","2000.0","2000.0","1000","3000","1000.0","sm90_xmma_gemm"\n'
        '"40.0","4000","2","2000.0","2000.0","2000","2000","0.0","ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"\n'
    )
    rows = traces.parse_kernel_summary(text)
    assert [r.name[:10] for r in rows] == ["sm90_xmma_", "ncclDevKer"]
    assert traces.kernel_summary_split(rows) == {"compute_ms": pytest.approx(0.006), "comm_ms": pytest.approx(0.004)}
    assert traces.parse_kernel_summary("no table here") == []


def test_probe_traffic_and_the_c13_verdict():
    t = fake_sampler()
    res = run_of(made.rank(probe=made.probe(start=9.9, end=12.1, sent=2 * 2**30)), label="here")
    rows = profiling.probe_traffic(t, res)
    assert [r.gpu for r in rows] == [0, 1] and rows[0].sent_over_expected == pytest.approx(1.0)
    v = monitoring.verdict_c13_from(t, res, rows)
    assert v.status == "wrong" and v.numbers["dmon_columns"] == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert v.numbers["sent_over_expected"] == pytest.approx(1.0) and v.where == "here"
    if v.numbers["sm_during_probe"] is not None:
        assert "not what the link carried" in v.text
    # A CPU run's probe was a gloo all-reduce: dmon watched an idle GPU, so its reading decides nothing.
    res.env = cast(EnvInfo, types.SimpleNamespace(is_gpu=False))
    cpu = monitoring.verdict_c13_from(t, res, rows)
    assert cpu.status == "unverifiable" and cpu.numbers["sm_during_probe"] is None and "idle GPU" in cpu.text
    t.dmon_text, t.dmon_reason = "", "nvidia-smi not found"
    nodriver = monitoring.verdict_c13_from(t, res, rows)
    assert (
        nodriver.status == "unverifiable"
        and "idle GPU" not in nodriver.text
        and "nvidia-smi not found" in nodriver.text
    )
    assert monitoring.verdict_c13(DMON_PLAIN + "", [2**30]).status == "wrong"
    assert monitoring.verdict_c13("# gpu sm nvlrx\n# Idx % MB/s\n 0 1 2\n", [2**30]).status == "holds"
    none = monitoring.verdict_c13("", [], reason="NVML is unavailable here")
    assert none.status == "unverifiable" and "NVML is unavailable here" in none.text


def test_timeline_shows_waiting_and_transfer():
    tl = traces.timeline([RANK0, RANK1], step=0)
    wait = tl[tl["kind"] == "wait"]
    assert isinstance(wait, pd.DataFrame)  # rows picked by a mask
    assert wait[["rank", "start_ms", "end_ms"]].values.tolist() == [[0, 0.040, 0.060]]
    moving = tl[tl["kind"] == "transfer"].set_index("rank")
    assert moving.loc[0, "start_ms"] == moving.loc[1, "start_ms"] == pytest.approx(0.060)
    assert "comm" not in set(tl["kind"])
    alone = traces.timeline([RANK0])
    assert "comm" in set(alone["kind"]) and "wait" not in set(alone["kind"])


def test_timeline_when_the_ranks_cannot_be_paired_or_have_no_steps():
    elsewhere = rank_trace(1, [(0, 60)], [(60, 70)], [(0, 100), (100, 200)], host="other")
    tl = traces.timeline([RANK0, elsewhere], step=0)  # two hosts: no common clock, no waiting and transfer
    assert "wait" not in set(tl["kind"]) and set(tl[tl["kind"] == "comm"]["rank"]) == {0, 1}
    bare = rank_trace(0, [(10, 60)], [(60, 70)], [])
    tl = traces.timeline([bare])  # no step ranges: the whole trace, from its first kernel to its last
    assert tl.loc[tl["kind"] == "step", ["start_ms", "end_ms"]].values.tolist() == [[0.0, pytest.approx(0.060)]]
    assert tl.loc[tl["kind"] == "comm", ["start_ms", "end_ms"]].values.tolist() == [
        [pytest.approx(0.050), pytest.approx(0.060)]
    ]
    tl = traces.timeline([rank_trace(0, [], [], [])])  # nothing ran: an empty window
    assert tl[["kind", "start_ms", "end_ms"]].values.tolist() == [["step", 0.0, 0.0]]


def _ab(ddp, no_sync, local):
    return {"ddp": ddp, "no_sync": no_sync, "local": local}


def _rank(exposed, comm, step=10.0, plain=(10.0, 10.1, 9.9, 10.0), profiled=(11.0, 11.1, 10.9), **changes):
    return made.rank(
        made.split(step=step, comm=comm, exposed=exposed, compute=8.0, phase_ms={"forward": 3.0}),
        plain=plain,
        profiled=profiled,
        repeats=_ab([10.0, 10.1, 10.0], [9.0, 9.05, 9.0], [9.0, 9.1, 9.0]),
        local_step_ms=9.0,
        **changes,
    )


def _res(*ranks):
    return run_of(*ranks, label="test machine")


def test_split_check_and_the_estimate_of_the_wire():
    res = _res(_rank(exposed=1.2, comm=2.0), _rank(exposed=0.2, comm=0.5))
    assert profiling.check_split(res).status == "pass"
    broken = _rank(exposed=1.2, comm=2.0)
    assert broken.split is not None
    broken = dataclasses.replace(broken, split=dataclasses.replace(broken.split, idle_ms=broken.split.idle_ms + 1.0))
    bad = profiling.check_split(_res(broken, _rank(exposed=0.2, comm=0.5)))
    assert bad.status == "fail" and "rank 0" in bad.text
    v = profiling.verdict_split(res)
    assert v.numbers["source"] == "least of the ranks" and v.numbers["link_ms"] == 0.5
    assert v.numbers["waiting_share"] == pytest.approx([0.75, 0.0]) and v.numbers["exposed_link_ms"] == 0.2


def test_trust_fails_when_the_profiler_costs_more_than_it_reports():
    res = _res(_rank(exposed=1.2, comm=2.0), _rank(exposed=0.2, comm=0.5))  # the profiler adds 1.0 ms to each
    v = profiling.verdict_trust(res)
    assert v.status == "info" and not v.numbers["trustworthy"] and v.numbers["ranks_failing"] == [1]
    assert v.numbers["overhead_ms"] == pytest.approx([1.0, 1.0])
    assert profiling.verdict_overhead(res).status == "slower"
    same = _res(
        _rank(exposed=0.3, comm=0.5, profiled=(10.0, 10.05, 9.95)), _rank(exposed=0.3, comm=0.5, profiled=(10.0, 10.1))
    )
    assert profiling.verdict_overhead(same).status == "no change"
    trust = profiling.verdict_trust(same)  # within the noise, and the noise bound (2 % of 10 ms) is below the exposed
    assert trust.status == "info" and trust.numbers["trustworthy"] is True
    assert trust.numbers["overhead_bound_ms"] == pytest.approx([0.2, 0.2], abs=0.01)
    # Overheads within a wide noise are not zero: they cannot be told from the exposed communication.
    noisy = _res(
        _rank(exposed=0.5, comm=1.0, plain=(10.0, 12.0, 10.5), profiled=(11.0, 10.0, 14.0)),
        _rank(exposed=0.5, comm=1.0, plain=(10.0, 12.0, 10.5), profiled=(11.0, 10.0, 14.0)),
    )
    assert profiling.verdict_overhead(noisy).status == "no change"
    v = profiling.verdict_trust(noisy)
    assert v.status == "undecided" and v.numbers["trustworthy"] is None and v.numbers["ranks_undecided"] == [0, 1]
    assert all(b > 0.5 for b in v.numbers["overhead_bound_ms"]) and "0.00 ms" not in v.text


def test_exchange_and_second_gpu_use_the_noise_rule():
    res = _res(_rank(exposed=1.2, comm=2.0), _rank(exposed=0.2, comm=0.5))
    v = profiling.verdict_exchange(res)
    assert v.status == "slower" and v.numbers["extra_ms"] == pytest.approx([1.0, 1.0])
    flat = _rank(exposed=0.2, comm=0.5)
    assert flat.step_ms_repeats is not None
    flat = dataclasses.replace(
        flat, step_ms_repeats=dataclasses.replace(flat.step_ms_repeats, no_sync=(10.0, 10.05, 10.0))
    )
    assert profiling.verdict_exchange(_res(flat, flat)).status == "no change"
    mixed = profiling.verdict_exchange(_res(_rank(exposed=1.2, comm=2.0), flat))
    assert mixed.status == "no change" and mixed.numbers["rank_status"] == ["slower", "no change"]  # not resolved
    old = _rank(exposed=1.2, comm=2.0, step_ms_repeats=None)
    assert profiling.verdict_exchange(_res(old, old)).status == "info"
    gap = profiling.verdict_second_gpu(_res(old, old))
    assert gap.status == "info" and gap.numbers["extra_ms"] == pytest.approx([1.0, 1.0])


def _sweep_row(batch, comm, exposed, link=None):
    return dataclasses.replace(made.sweep_row(batch, comm, exposed, link=link), samples_per_s=100.0)


def _sweep_res(rows0, rows1):
    return _res(made.rank(sweep=tuple(rows0)), made.rank(sweep=tuple(rows1)))


def test_c16_verdicts():
    # The profiler's share passes 15 % at batch 1 on rank 0 only because it waits; the wire stays at 3 %.
    skew = _sweep_res(
        [_sweep_row(1, 5.0, 4.0), _sweep_row(8, 1.0, 0.1)], [_sweep_row(1, 0.3, 0.25), _sweep_row(8, 1.1, 0.05)]
    )
    v = profiling.verdict_c16({"NVLink": skew})
    assert v.status == "partly" and v.numbers["NVLink"]["max_link_share"] == pytest.approx(0.03)
    assert v.numbers["NVLink"]["max_profiler_share"] == pytest.approx((0.5 + 0.03) / 2)
    assert v.numbers["NVLink"]["exposed_link_ms"] == [0.25, 0.05]
    slow = _sweep_res(
        [_sweep_row(1, 3.0, 2.5, (3.0, 2.5)), _sweep_row(8, 3.0, 0.3, (3.0, 0.3))],
        [_sweep_row(1, 3.2, 2.6, (3.1, 2.6)), _sweep_row(8, 3.0, 0.3, (3.0, 0.3))],
    )
    assert profiling.verdict_c16({"slow link": slow}).status == "holds"
    stuck = _sweep_res(
        [_sweep_row(1, 3.0, 2.5), _sweep_row(8, 3.0, 2.4)], [_sweep_row(1, 3.0, 2.5), _sweep_row(8, 3.0, 2.4)]
    )
    assert profiling.verdict_c16({"stuck": stuck}).status == "wrong"  # 4 % less is within HIDES_MORE
    assert profiling.verdict_c16({"none": _sweep_res([], [])}).status == "unverifiable"
    skew.env = cast(EnvInfo, types.SimpleNamespace(is_gpu=False))  # a CPU simulation cannot settle a rule about GPUs
    cpu = profiling.verdict_c16({"gloo": skew})
    assert cpu.status == "unverifiable" and cpu.numbers["gloo"]["max_link_share"] == pytest.approx(0.03)


def test_c12_verdict_from_the_split():
    skewed = _res(_rank(exposed=1.2, comm=2.0), _rank(exposed=0.2, comm=0.5))
    v = traces.verdict_c12(skewed)
    assert v.status == "partly" and v.numbers["waiting_share"] == pytest.approx([0.75, 0.0])
    even = _res(_rank(exposed=0.2, comm=0.5), _rank(exposed=0.2, comm=0.45))
    assert traces.verdict_c12(even).status == "holds"
    cpu = _rank(exposed=1.2, comm=2.0)
    assert cpu.split is not None
    cpu = dataclasses.replace(cpu, split=dataclasses.replace(cpu.split, source="cpu"))
    assert traces.verdict_c12(_res(cpu, _rank(exposed=0.2, comm=0.5))).status == "unverifiable"
    missing = traces.NsysResult(available=False, command=["nsys"], reason="nsys is not on PATH here")
    assert "nsys is not on PATH here" in traces.verdict_c12(even, missing).text
    ran = traces.NsysResult(available=True, command=["nsys"], splits=[tracesplit.split(SYNTHETIC)])
    assert traces.verdict_c12(even, ran).numbers["nsys_comm_ms"] == [pytest.approx(0.0235)]
