"""Notebooks 01 and 02's verdicts at their rules (``report/bandwidth.py``, ``lab.py``, ``links.py``,
``environment.py``): the parsers on edge cases, each threshold from both sides, each branch. The reference runs and
saved outputs are read here too (``tests/helpers/reference_ab.py``), with fuller fake runs
(``tests/helpers/bandwidth_runs.py``)."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import cast

import pytest

from nvtutorial import units
from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report as bandwidth
from nvtutorial.chapters.ch01_hardware import report as bw
from nvtutorial.chapters.ch01_hardware import report_gpu as gpu
from nvtutorial.chapters.ch01_hardware import report_lab as labreport
from nvtutorial.chapters.ch01_hardware import report_links as links
from nvtutorial.chapters.ch01_hardware import report_reference, schema_allreduce
from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs
from nvtutorial.chapters.ch01_hardware import schema_gpu_links as schema
from nvtutorial.chapters.ch02_environment import report as env
from nvtutorial.machine import doctor, topology
from nvtutorial.machine import links as machine_links
from nvtutorial.machine.links import SOURCE_NVLINK_CARDS, Expectation, card
from nvtutorial.machine.nccl_debug import TransportReport
from nvtutorial.report import claims
from nvtutorial.report.verdict import compare
from nvtutorial.results import RunResult
from tests.helpers.bandwidth_runs import FIX, fake_result
from tests.helpers.gpu_links_runs import H200, MIB, PEAK, link_rows, measured
from tests.helpers.hardware_runs import copy_row, run_of, sendrecv, sendrecv_row, sweep, sweep_row
from tests.helpers.paths import ROOT
from tests.helpers.reference_ab import reference_lab, reference_run
from tests.helpers.training_runs import ended_run

GIB = 1 << 30


# --------------------------------------------------------------------------- nccl-tests output
NCCL_TESTS = """\
# nccl-tests version 2.17.6 nccl-headers=22809 nccl-library=22809
#  Rank  0 Group  0 Pid   1234 on         vm device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid   1235 on         vm device  1 [0000:2a:00] NVIDIA H200
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           256     float     sum      -1    20.00    0.05    0.05      0    19.00    0.05    0.05      0
  1073741824     268435456     float     sum      -1  3000.00  357.91  357.91    N/A  3010.00  356.72  356.72    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 179.0
== P2P off
  1073741824     268435456     float     sum  3000.00   30.00   30.00      0  3000.00   31.00   31.00      0
        1024           256     float     sum      -1    garbage
"""


def test_parse_nccl_tests_blocks_rows_and_versions():
    runs = bw.parse_nccl_tests(NCCL_TESTS)
    assert [r.label for r in runs] == ["nccl-tests", "P2P off"]
    first, second = runs
    assert first.version == "2.17.6" and first.avg_busbw == 179.0 and first.devices == ["NVIDIA H200", "NVIDIA H200"]
    assert first.rows[0] == {
        "size": 1024,
        "count": 256,
        "type": "float",
        "redop": "sum",
        "root": -1,
        "time_us": 20.0,
        "algbw": 0.05,
        "busbw": 0.05,
        "wrong": "0",
        "ip_time_us": 19.0,
        "ip_algbw": 0.05,
        "ip_busbw": 0.05,
        "ip_wrong": "0",
    }
    assert first.busbw_at(GIB) == 357.91 and first.busbw_at(GIB, in_place=True) == 356.72 and first.busbw_at(7) is None
    assert second.rows == [dict(second.rows[0])] and second.rows[0]["root"] is None  # an older version: no root column
    assert second.rows[0]["busbw"] == 30.0 and second.rows[0]["ip_busbw"] == 31.0
    assert bw._number("N/A") is None and bw._number("1.5") == 1.5
    assert bw.parse_nccl_tests("# only comments\n") == []


def test_rows_after_the_average_belong_to_a_new_block():
    text = (
        "        1024  256 float sum -1 20.0 0.05 0.05 0 19.0 0.05 0.05 0\n# Avg bus bandwidth : 1.5\n"
        "        2048  512 float sum -1 20.0 0.10 0.10 0 19.0 0.10 0.10 0\n"
    )
    first, second = bw.parse_nccl_tests(text)
    assert first.avg_busbw == 1.5 and [r["size"] for r in first.rows] == [1024]
    assert second.label == "nccl-tests" and [r["size"] for r in second.rows] == [2048]


def test_parse_torch_busbw():
    text = (
        "== torch allreduce default\ntorch-allreduce 1048576 B 100.0 us algbw 10.0 busbw 10.0 GB/s\nnoise\n"
        "== other\ntorch-allreduce 2048 B 5.5 us algbw 0.4 busbw 0.4 GB/s\n"
    )
    out = bw.parse_torch_busbw(
        "torch-allreduce 1 B 1.0 us algbw 1.0 busbw 1.0 GB/s\n" + text
    )  # before a label: dropped
    assert out == {
        "torch allreduce default": [{"size": 1048576, "time_us": 100.0, "algbw": 10.0, "busbw": 10.0}],
        "other": [{"size": 2048, "time_us": 5.5, "algbw": 0.4, "busbw": 0.4}],
    }


def test_the_saved_references():
    ref = bw.reference_nccl_tests()
    assert list(ref) == ["default", "P2P off", "P2P+SHM off"] and ref["default"].busbw_at(GIB) > 300
    frame = bw.reference_frame()
    assert frame.columns.name == "nccl-tests busbw GB/s on the reference 2× H200" and list(frame.columns) == list(ref)
    assert bw.reference_sweep_busbw() == (GIB, 326.76)
    size, value = bw.reference_sweep_busbw(GIB // 4)
    assert size == GIB // 4 and 0 < value < 326.76
    assert bw.reference_torch_busbw(GIB)[0] == GIB and set(bw.reference_torch()) >= {"torch allreduce default"}


# --------------------------------------------------------------------------- our rows
def result(rows, gpu=True, names=("NVIDIA H200", "NVIDIA H200"), link="NV18", wire=None):
    """An ``allreduce_bench`` run with these rows (rank 0's, typed)."""
    return run_of(sweep(rows, wire), gpu=gpu, names=names, link=link)


def test_rows_sizes_and_repeats():
    rows = [sweep_row(1024, 1.0, time_us=2.0), sweep_row(4096, 3.0, time_us=2.5)]
    assert bw.sweep_rows(rows) == tuple(rows) and bw.sweep_rows(result(rows)) == tuple(rows)
    assert bw.sweep_of(result(rows)) == sweep(rows) and bw.rows_of(result(rows)) == [
        dataclasses.asdict(r) for r in rows
    ]
    assert bw.at_size(rows) == (4096, 3.0) and bw.at_size(rows, 1024) == (1024, 1.0)
    assert bw.at_size(rows, 1024, key="time_us") == (1024, 2.0)
    with pytest.raises(KeyError, match="size 2 KiB was not measured; sizes: 1 KiB, 4 KiB"):
        bw.at_size(rows, 2048)
    with pytest.raises(ValueError, match="measured nothing"):
        bw.at_size([])
    assert sweep_row(1, 2.0, samples=[1, 3]).samples() == (1.0, 3.0)
    assert dataclasses.replace(sweep_row(1, 2.0, samples=[1.5, 2.5]), busbw_repeats=()).samples() == (1.5, 2.0, 2.5)
    old = copy_row("cuda:0 → cuda:1", "one way", 1, 4.0)
    assert dataclasses.replace(old, gbps_repeats=()).samples() == (4.0, 4.0, 4.0)
    assert bw.is_gpu(result(rows)) and not bw.is_gpu(result(rows, gpu=False)) and not bw.is_gpu(rows)
    frame = bw.sweep_frame(result(rows))
    assert list(frame["size_label"]) == ["1 KiB", "4 KiB"] and frame.attrs["where"] == result(rows).label
    assert list(frame.columns) == ["size_label", *(f.name for f in dataclasses.fields(schema_allreduce.Row))]
    assert bw.sweep_frame(result([])).empty


def test_the_reference_machine():
    assert bw.same_machine_as_reference(result([]))
    assert not bw.same_machine_as_reference(result([], link="NV12"))
    assert not bw.same_machine_as_reference(result([], names=("NVIDIA H100", "NVIDIA H100")))
    assert not bw.same_machine_as_reference(result([], gpu=False))
    assert not bw.same_machine_as_reference(types.SimpleNamespace(env=None))


def test_the_reference_check_at_99_percent():
    ref = bw.reference_nccl_tests()["default"]
    ip1, ip4 = ref.busbw_at(GIB, True), ref.busbw_at(4 * GIB, True)
    assert ip1 is not None and ip4 is not None  # the reference measured both sizes
    just = result([sweep_row(GIB, 0.99 * ip1), sweep_row(4 * GIB, 0.99 * ip4)])
    assert bw.reference_check(just)[1].status == "pass"
    below = result([sweep_row(GIB, 0.989 * ip1), sweep_row(4 * GIB, ip4)])
    table, v = bw.reference_check(below)
    assert v.status == "fail" and v.numbers["ratio at 1 GiB"] == pytest.approx(0.989, abs=1e-4)
    assert v.numbers["target"] == 0.99 and "4 GiB" not in v.text.split(":")[1]
    assert bw.reference_check(below, target=0.98)[1].status == "pass"
    assert bw.reference_check(below, sizes=(4 * GIB,))[1].status == "pass"
    spread = v.numbers["nccl-tests own spread at 1 GiB"]
    inside = result([sweep_row(GIB, (1 - spread / 2) * ip1)])
    _, v = bw.reference_check(inside, target=1.0)
    assert v.status == "fail" and "within the benchmark's own spread" in v.text and "4 GiB: not measured" in v.text


def test_small_message_cost_at_its_factor():
    rows = [sweep_row(1024 * 2**i, time_us=t) for i, t in enumerate((10.0, 12.0, 15.0, 15.1, 40.0))]
    run = result(rows)
    v = bw.small_message_cost(run)
    assert v.status == "info" and v.numbers["flat_up_to"] == 4096 and v.numbers["flat_time_us_max"] == 15.0
    assert v.numbers["flat_from"] == 1024 and "From 1 KiB to 4 KiB (4× the size)" in v.text  # nothing slow: the first
    assert v.key == "small messages" and v.where == run.label != ""
    assert v.numbers["smallest"] == 1024 and v.numbers["largest"] == 16384 and v.numbers["time_us_largest"] == 40.0
    assert bw.small_message_cost(result(rows), flat_factor=1.51).numbers["flat_up_to"] == 8192
    none = bw.small_message_cost(result([sweep_row(1024, time_us=10.0), sweep_row(2048, time_us=15.01)]))
    assert none.numbers["flat_up_to"] is None and none.numbers["flat_from"] is None and "no flat region" in none.text
    assert bw.FLAT_FACTOR == 1.5


REVIEW_H200_ROWS = ((1024, 680.7), (8192, 280.805), (65536, 217.377), (524288, 419.264), (1 << 20, 649.854))
"""The 2026-12-06 review's one-H200 copy (gloo ranks on the CPU): 217 → 419 → 650 µs from 64 KiB to 1 MiB, after a
slow first size (N3: anchored on that first size, this curve was called 'a fixed cost per call' up to 1 MiB)."""


def test_small_message_plateau_is_anchored_on_the_fastest_call_so_far():
    run = result([sweep_row(s, time_us=t) for s, t in REVIEW_H200_ROWS], gpu=False)
    v = bw.small_message_cost(run)
    assert v.numbers["flat_up_to"] == 65536 and v.numbers["floor_size"] == 65536  # 419 > 1.5 × 217: the plateau ends
    assert v.numbers["slow_sizes"] == [1024]  # 680.7 > 1.5 × 217.4: slower than larger messages, named as such
    assert (v.numbers["flat_time_us_min"], v.numbers["flat_time_us_max"]) == (217.377, 280.805)
    assert "1 KiB took 680.7 µs" in v.text and "not a cost of the size" in v.text
    # R1-13: the plateau's range starts at its first steady size, not at the slow size it then excludes
    assert v.numbers["flat_from"] == 8192 and "From 8 KiB to 64 KiB (8× the size)" in v.text
    # both sides of the factor at 512 KiB: 419.264 / 217.377 = 1.9288
    assert bw.small_message_cost(run, flat_factor=1.928).numbers["flat_up_to"] == 65536
    wider = bw.small_message_cost(run, flat_factor=1.929)
    assert wider.numbers["flat_up_to"] == 524288  # then 1 MiB: 649.854 > 1.929 × 217.377 = 419.3
    # both sides of the factor for the slow first size: 680.7 / 217.377 = 3.1314 (1 MiB joins the plateau first)
    assert bw.small_message_cost(run, flat_factor=3.131).numbers["slow_sizes"] == [1024]
    loose = bw.small_message_cost(run, flat_factor=3.132)
    assert loose.numbers["slow_sizes"] == [] and loose.numbers["flat_up_to"] == 1 << 20
    assert "not a cost" not in loose.text


def test_small_messages_without_a_plateau_say_why():
    slow_then_rising = [sweep_row(1024, time_us=500.0), sweep_row(2048, time_us=200.0), sweep_row(4096, time_us=301.0)]
    v = bw.small_message_cost(slow_then_rising)
    assert v.numbers["flat_up_to"] is None and v.numbers["slow_sizes"] == [1024] and "no flat region" in v.text
    assert "the next size, 4 KiB, took 301.0 µs" in v.text  # 301 > 1.5 × 200
    just = [sweep_row(1024, time_us=500.0), sweep_row(2048, time_us=200.0), sweep_row(4096, time_us=300.0)]
    assert bw.small_message_cost(just).numbers["flat_up_to"] == 4096  # 300 = 1.5 × 200: still flat
    ends = bw.small_message_cost([sweep_row(1024, time_us=500.0), sweep_row(2048, time_us=200.0)])
    assert ends.numbers["flat_up_to"] is None and "no size after the fastest was measured" in ends.text


def sr(one, both, size=1 << 28, gpu=True, spread=0.005):
    rows = [sendrecv_row(size, "one way", one, spread=spread), sendrecv_row(size, "both ways", both, spread=spread)]
    return run_of(sendrecv(rows), gpu=gpu)


def test_send_recv_both_ways_against_one():
    v = bw.sendrecv_duplex(sr(100.0, 85.0))
    assert v.status == "slower" and v.numbers["size"] == 1 << 28
    assert v.numbers["ratio"] == pytest.approx(0.85)
    assert bw.sendrecv_duplex(sr(100.0, 100.5)).status == "no change"
    assert "CPU simulation" in bw.sendrecv_duplex(sr(1.0, 0.5, gpu=False)).text
    assert bw.sendrecv_duplex(run_of(sendrecv([sendrecv_row(1, "one way", 1.0)]))).status == "info"
    frame = bw.sendrecv_frame(sr(100.0, 85.0))
    assert list(frame.columns) == ["both ways: GB/s per direction", "one way: GB/s per direction"]
    assert list(frame.index) == ["256 MiB"] and bw.sendrecv_frame(run_of(sendrecv([]))).empty


def copy_rows(one, both, busy=(0.9, 1.0)):
    rows = [
        copy_row("cuda:0 → cuda:1", "one way", GIB, one),
        copy_row("cuda:0 → cuda:1", "both at once", GIB, both, busy_share=busy[0]),
        copy_row("cuda:1 → cuda:0", "one way", GIB, one),
        copy_row("cuda:1 → cuda:0", "both at once", GIB, both * 0.9, busy_share=busy[1]),
    ]
    return bw.CopyRun(rows=rows, label="GPU", note="")


def test_the_copy_engines():
    run = copy_rows(394.0, 390.0)
    simulated = [copy_row("host memcpy (simulation, not a GPU link)", "one way", GIB, 20.0)]
    assert run.measured and not bw.CopyRun(rows=simulated, label="", note="").measured
    assert not bw.CopyRun(rows=(), label="", note="skipped").measured
    expectation = cast(Expectation, types.SimpleNamespace(physical_gbps=450.0))
    v = run.verdict(expectation)
    assert v.numbers == {"size": GIB, "gbps": 394.0, "share_of_physical": 394.0 / 450.0}
    assert "88% of the 450 GB/s physical limit" in v.text and run.verdict().numbers == {"size": GIB, "gbps": 394.0}
    d = run.duplex()
    assert d.numbers["path"] == "cuda:1 → cuda:0" and d.status == "slower"  # the worse of the two directions
    assert d.numbers["busy_share_min"] == 0.9
    none = bw.CopyRun(rows=[], label="GPU", note="no GPU")
    assert none.verdict().numbers == {"reference_gbps": 394.0} and none.duplex().status == "info"
    assert list(run.frame()["size_label"]) == ["1 GiB"] * 4 and "gbps_repeats" not in run.frame()
    assert list(run.frame().columns)[:3] == ["path", "size_label", "mode"]
    busy = run.frame()["busy_share"]  # one-way rows have none: empty cells, as when the workload left it out
    assert busy.isna().tolist() == [True, False, True, False] and bool(busy[1] == 0.9)
    assert "busy_share" not in bw.CopyRun(rows=simulated, label="", note="").frame()
    assert none.frame().to_dict("records") == [
        {"path": "cuda:0 → cuda:1", "note": "no GPU"}  # R5-12: no None cells
    ]


def test_the_duplex_verdict_branches():
    flat = copy_rows(394.0, 394.0)
    assert isinstance(flat.rows, list)  # copy_rows built a list
    flat.rows[3] = copy_row("cuda:1 → cuda:0", "both at once", GIB, 394.0, busy_share=1.0)
    v = bw.duplex_verdict(sr(100.0, 85.0), flat)
    assert v.numbers == {
        "nccl_ratio": pytest.approx(0.85),
        "nccl_status": "slower",
        "copy_ratio": 1.0,
        "copy_status": "no change",
    }
    assert "NCCL's send/recv does not" in v.text
    both_keep = bw.duplex_verdict(sr(100.0, 100.0), flat)
    assert "Both directions at once keep the one-way rate" in both_keep.text
    engines_lose = bw.duplex_verdict(sr(100.0, 85.0), copy_rows(394.0, 300.0))
    assert "lose rate with the copy engines too" in engines_lose.text
    assert "Without the copy-engine measurement" in bw.duplex_verdict(sr(100.0, 85.0)).text
    assert "Without the copy-engine" in bw.duplex_verdict(sr(100.0, 85.0), bw.CopyRun([], "", "none")).text
    assert "CPU simulation" in bw.duplex_verdict(sr(1.0, 0.5, gpu=False), flat).text


@pytest.mark.parametrize("ratio, status", [(1.0499, "pass"), (0.9501, "pass"), (1.0501, "fail"), (0.9499, "fail")])
def test_the_ring_bytes_within_5_percent(ratio, status):
    wire = schema_allreduce.Wire(
        available=True,
        size=GIB,
        iters=10,
        links_read=18,
        links_carrying=18,
        tx_bytes_per_op=ratio * GIB,
        rx_bytes_per_op=GIB,
        expected_bytes_per_op=float(GIB),
        tx_ratio=ratio,
        rx_ratio=1.0,
    )
    table, v = bw.wire_report(result([], wire=wire))
    assert v.status == status and v.numbers == {
        "tx_ratio": ratio,
        "rx_ratio": 1.0,
        "links_carrying": 18,
        "reference_ratio": 1.0000316,
    }
    assert table.iloc[0]["sent ÷ formula"] == round(ratio, 3)
    assert bw.wire_report(result([]))[1].numbers == {"reference_ratio": 1.0000316}
    assert "wire_bytes=0" in bw.wire_report(result([]))[1].text


# --------------------------------------------------------------------------- the lab and C7
def lab_run(name, busbw, gpu=True, envs=None, read=(), summary="P2P/CUMEM", version="2.28.9"):
    rows = [sweep_row(s, v, samples=(v * 0.999, v, v * 1.001), repeats=3) for s, v in busbw.items()]
    path = cast(labreport.LabPath, types.SimpleNamespace(name=name, env=envs or {}))
    transport = cast(
        TransportReport, types.SimpleNamespace(summary=summary, env_set=dict.fromkeys(read, "1"), version=version)
    )
    return labreport.LabRun(path=path, result=result(rows, gpu=gpu), transport=transport)


def test_the_lab_verdict_names_the_slowest_path():
    lab = [lab_run("default", {GIB: 330.0}), lab_run("P2P off", {GIB: 30.0}), lab_run("P2P+SHM off", {GIB: 3.0})]
    v = labreport.lab_verdict(lab)
    assert v.status == "slower" and v.numbers["slowest_path"] == "P2P+SHM off" and v.numbers["size"] == GIB
    assert set(v.numbers) == {"slowest_path", "ratio", "noise", "size"}  # the keys the notebook and claims read
    assert (
        v.numbers["ratio"] == compare(lab[0].rows[0].samples(), lab[2].rows[0].samples(), lower_is_better=False).ratio
    )
    cpu = [lab_run("default", {1024: 1.0}, gpu=False), lab_run("P2P off", {1024: 1.01}, gpu=False)]
    assert labreport.lab_verdict(cpu).text.startswith("CPU simulation (gloo ignores")
    assert "only one path was run" in labreport.lab_verdict(lab[:1]).text
    assert "CPU simulation: the other paths" in labreport.lab_verdict(cpu[:1]).text
    with pytest.raises(ValueError, match="no size in common"):
        labreport.common_largest_size([lab_run("a", {1: 1.0}), lab_run("b", {2: 1.0})])
    size, c = labreport.compare_paths(lab, "default", "P2P off", size=GIB)
    assert size == GIB and c.status == "slower"


def test_c5_measured_and_its_prediction():
    lab = [lab_run("default", {GIB: 330.0, 4 * GIB: 340.0}), lab_run("P2P off", {GIB: 30.0, 4 * GIB: 34.0})]
    v = labreport.claim_nvlink_vs_pcie(lab)
    assert v.numbers == {"ratio": pytest.approx(10.0), "size": 4 * GIB} and v.where == lab[0].result.label
    g = labreport.grade_lab_ratio(10.0, lab)
    assert g.status == "right" and g.text.startswith("You predicted 10 ×: spot on. Measured: 10 ×")
    ref = labreport.claim_nvlink_vs_pcie(lab[:1])
    assert ref.where == "reference 2× H200 (saved nccl-tests)" and ref.numbers["size"] == 4 * GIB
    assert "The reference measured (saved nccl-tests)" in labreport.grade_lab_ratio(5.0, lab[:1]).text
    cpu = [lab_run("default", {GIB: 1.0}, gpu=False), lab_run("P2P off", {GIB: 1.0}, gpu=False)]
    assert labreport.claim_nvlink_vs_pcie(cpu).numbers["ratio"] == ref.numbers["ratio"]


def c7_lab(source, read=("NCCL_IB_DISABLE",), gpu=True, control=True, same_transport=True):
    sizes = {1 << 20: 30.0, 16 << 20: 200.0, GIB: 330.0}
    envs = {"NCCL_NET_GDR_LEVEL": "3", "NCCL_IB_DISABLE": "1"}
    lab = [
        lab_run("default", sizes, gpu=gpu),
        lab_run(
            "source's settings",
            {s: v * source.get(s, 1.0) for s, v in sizes.items()},
            gpu=gpu,
            envs=envs,
            read=read,
            summary="P2P/CUMEM" if same_transport else "SHM",
        ),
    ]
    if control:
        lab.append(lab_run("P2P off", {s: v / 10 for s, v in sizes.items()}, gpu=gpu))
    return lab


def test_c7_at_its_rule():
    v = labreport.claim_c7(c7_lab({}))
    assert v.status == "wrong" and v.numbers["sizes"] == 2 and v.numbers["no_change"] == 2  # 1 MiB left out on GPUs
    assert v.numbers["control_ratio"] == pytest.approx(0.1) and "never read NCCL_NET_GDR_LEVEL" in v.text
    assert v.numbers["largest_change"] == 0.0 and "transport P2P/CUMEM in both runs" in v.text
    faster = labreport.claim_c7(c7_lab({GIB: 1.05}))
    assert faster.status == "partly" and faster.numbers["faster"] == 1
    assert "faster beyond the noise at 1 GiB:" in faster.text  # the sizes it names are the faster ones
    slower = labreport.claim_c7(c7_lab({GIB: 0.9}, same_transport=False))
    assert slower.status == "wrong" and slower.numbers["slower"] == 1 and "transports P2P/CUMEM and SHM" in slower.text
    assert "slower at 1 GiB (" in slower.text
    read_both = labreport.claim_c7(c7_lab({}, read=("NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL")))
    assert "never read" not in read_both.text
    assert "control_ratio" not in labreport.claim_c7(c7_lab({}, control=False)).numbers
    assert labreport.claim_c7(c7_lab({}), min_size=GIB).numbers["sizes"] == 1
    cpu = labreport.claim_c7(c7_lab({}, gpu=False))
    assert cpu.status == "unverifiable" and cpu.numbers["sizes"] == 3  # every size on the CPU


def test_c7_rows_and_its_prediction():
    rows = labreport.c7_rows(c7_lab({GIB: 0.9}))
    assert [r["size"] for r in rows] == ["16 MiB", "1 GiB"] and rows[1]["verdict"] == "slower"
    assert rows[1]["repeats"] == "3+3" and rows[1]["ratio"] == pytest.approx(0.9, abs=1e-4)
    assert labreport.c7_answer(c7_lab({})) == "c" and labreport.c7_answer(c7_lab({GIB: 1.05})) == "a"
    assert labreport.c7_answer(c7_lab({GIB: 0.9})) == "b"
    assert labreport.grade_c7("b", c7_lab({GIB: 0.9})).status == "right"
    cpu = labreport.grade_c7("c", c7_lab({}, gpu=False))
    assert cpu.status == "right" and cpu.where.startswith("reference 2× H200") and labreport.REFERENCE_C7_ANSWER == "c"


def test_the_lab_table():
    lab = [lab_run("default", {GIB: 330.0}), lab_run("P2P off", {GIB: 30.0}, envs={"NCCL_P2P_DISABLE": "1"})]
    rows = labreport.lab_rows(lab)
    assert rows[0]["NCCL variables"] == "—" and rows[1]["NCCL variables"] == "NCCL_P2P_DISABLE=1"
    assert rows[0]["default ÷ this, at the largest common size"] == rows[0]["largest common size"] == "—"  # R5-12
    assert rows[1]["default ÷ this, at the largest common size"] == 11.0 and rows[1]["largest common size"] == "1 GiB"


# --------------------------------------------------------------------------- C2, C3, C5
def test_c2_from_the_card_table(monkeypatch):
    v = links.claim_c2()
    assert v.status == "partly" and v.numbers["without_nvlink"] == ["GeForce RTX 4090"]
    assert set(v.numbers["with_nvlink"]) == set(SOURCE_NVLINK_CARDS) - {"GeForce RTX 4090"}
    # the review's C2 nit: bridges link A100 PCIe cards, not V100 PCIe cards, as the card table the text states says
    assert not card("Tesla V100 PCIe").has_nvlink and card("A100 PCIe").has_nvlink
    assert "V100 has NVLink only in its SXM form" in v.text and "V100s or A100s" not in v.text
    monkeypatch.setattr(links, "SOURCE_NVLINK_CARDS", ("A100 SXM4", "Tesla V100 SXM2"))
    assert links.claim_c2().status == "holds"
    monkeypatch.setattr(links, "SOURCE_NVLINK_CARDS", ("GeForce RTX 4090",))
    assert links.claim_c2().status == "wrong"


def test_c5_from_the_vendor_figures(monkeypatch):
    v = links.claim_c5()
    rtx = card("GeForce RTX 3090")
    assert v.status == "wrong" and v.numbers["nvlink_over_pcie"] == pytest.approx(rtx.ratio)
    assert v.numbers["consumer_over_pro"] == pytest.approx(rtx.nvlink_gbps / card("A100 SXM4").nvlink_gbps)
    for ratio, status in ((3.0, "holds"), (5.0, "holds"), (2.99, "wrong"), (5.01, "wrong")):
        fake = types.SimpleNamespace(nvlink_gbps=rtx.nvlink_gbps, pcie_gbps=rtx.nvlink_gbps / ratio, ratio=ratio)
        monkeypatch.setattr(links, "card", lambda name, f=fake: f if name == "GeForce RTX 3090" else card(name))
        assert links.claim_c5().status == status


def test_c3_from_topologies():
    from nvtutorial.machine import topology

    v = links.claim_c3()
    assert v.status == "holds" and v.numbers == {"code": "NV18", "nvlinks": 18}
    pcie = topology.parse("        GPU0    GPU1\nGPU0     X      PHB\nGPU1    PHB      X\n", source="a PCIe box")
    none = links.claim_c3(pcie)
    assert none.status == "unverifiable" and none.numbers == {"code": None} and none.where == "a PCIe box"


# --------------------------------------------------------------------------- C4, C6, the minimums, troubleshooting
FACTS = doctor.reference_facts()


@pytest.mark.parametrize(
    "torch_cuda, driver_cuda, here",
    [("13.0", "13.0", "ok"), ("13.0", "13.2", "ok"), ("13.1", "13.0", "warn"), ("13.0", "12.8", "fail")],
)
def test_c4_is_the_drivers_relation_to_torchs_cuda(torch_cuda, driver_cuda, here):
    f = dataclasses.replace(FACTS, torch_cuda=torch_cuda, driver_cuda=driver_cuda)
    v = env.claim_c4(f)
    assert v.status == "wrong" and v.numbers == {"here": here, "driver_515": "fail", "torch_cuda": torch_cuda}
    laptop = dataclasses.replace(FACTS, torch_cuda=None, driver=None, driver_cuda=None, gpus=())
    assert env.claim_c4(laptop).numbers["torch_cuda"] == FACTS.torch_cuda  # the reference's torch is judged


def test_c4_partly_if_515_could_run_this_torch():
    old = dataclasses.replace(FACTS, torch_cuda="11.7", driver_cuda="11.7")
    v = env.claim_c4(old)
    assert v.status == "partly" and v.numbers["driver_515"] == "ok"


def compared(base, cand):
    return compare([base, base * 1.001], [cand, cand * 1.001])


@pytest.mark.parametrize(
    "comparison, status",
    [
        (None, "unverifiable"),
        (compared(10.0, 10.0 / 1.12), "holds"),
        (compared(10.0, 10.0 / 1.07), "holds"),  # the band's edges: +12 % ± 5 points
        (compared(10.0, 10.0 / 1.17), "holds"),
        (compared(10.0, 10.0 / 1.0699), "partly"),
        (compared(10.0, 10.0 / 1.1701), "partly"),
        (compared(10.0, 10.0 / 1.06), "partly"),
        (compared(10.0, 10.0 / 1.24), "partly"),
        (compared(10.0, 10.0 / 1.30), "partly"),
        (compared(10.0, 10.0), "wrong"),
        (compared(10.0, 11.0), "wrong"),
    ],
)
def test_c6_is_decided_only_by_an_ab_of_the_wheels(comparison, status):
    v = env.claim_c6(FACTS, comparison)
    assert v.key == "C6" and v.status == status
    if comparison is not None:
        assert v.numbers["speedup"] == pytest.approx(1 / comparison.ratio - 1)
        assert v.numbers["status"] == comparison.status and v.numbers["noise"] == comparison.noise
    assert v.numbers["nccl"] == FACTS.nccl and env.CLAIMED_C6 == 0.12


@pytest.mark.parametrize(
    "torch_v, nccl, cuda, status",
    [
        ("2.13.0", "2.28.9", "13.0", "pass"),
        ("1.13.0", "2.10.3", "11.7", "pass"),
        ("1.12.1", "2.28.9", "13.0", "fail"),
        ("2.13.0", "2.9.9", "13.0", "fail"),
        ("2.13.0", None, None, "pass"),
        ("2.13.0", None, "13.0", "fail"),
        (None, None, None, "fail"),
    ],
)
def test_the_sources_version_floors(torch_v, nccl, cuda, status):
    f = dataclasses.replace(FACTS, torch=torch_v, nccl=nccl, torch_cuda=cuda)
    v = env.claim_minimums(f)
    assert v.status == status and v.numbers == {"torch": torch_v, "nccl": nccl}


@pytest.mark.parametrize("p2p_ratio, status", [(10.9, "partly"), (1.51, "partly"), (1.5, "info"), (1.0, "info")])
def test_troubleshooting_no_speed_up(p2p_ratio, status):
    rows = env.troubleshooting(FACTS, runtime_nccl="2.28.9", is_gpu=True, p2p_ratio=p2p_ratio, topo_code="NV18")
    assert [v.key for v in rows] == [
        "troubleshooting: NCCL error",
        "troubleshooting: out of memory",
        "troubleshooting: no speed-up",
    ]
    assert rows[2].status == status and rows[2].numbers == {
        "p2p_ratio": p2p_ratio,
        "topo": "NV18",
        "reference_ratio": None,
    }


def test_troubleshooting_nccl_versions_and_the_cpu():
    same = env.troubleshooting(FACTS, "2.28.9+cuda13.0", True, 10.0, "NV18")[0]
    assert same.status == "partly" and same.numbers == {"runtime_nccl": "2.28.9+cuda13.0", "torch_nccl": FACTS.nccl}
    other = env.troubleshooting(FACTS, "2.21.5", True, 10.0, "NV18", torch_nccl="2.28.9")[0]
    assert other.status == "holds" and "DIFFERENT version" in other.text
    cpu = env.troubleshooting(FACTS, None, False, None, None, reference_ratio=10.9)
    assert [v.status for v in cpu] == ["partly", "partly", "partly"] and "10.9×" in cpu[2].text
    assert "On the reference" not in env.troubleshooting(FACTS, None, False, None, None)[2].text
    assert cpu[1].where == "primary source"


def test_every_named_run_is_in_a_checkout_and_loads_with_its_logs():
    assert reference_runs.available()
    for name, folder in reference_runs.RUNS.items():
        run = reference_runs.load(name)
        assert run.run_dir == reference_runs.FOLDER / folder and run.env.is_gpu
        assert run.log_files == {r: reference_runs.FOLDER / folder / f"rank{r}.log" for r in range(run.env.world_size)}


def test_a_missing_run_says_where_it_ships(monkeypatch, tmp_path):
    monkeypatch.setattr(reference_runs, "FOLDER", tmp_path)
    assert not reference_runs.available()
    with pytest.raises(FileNotFoundError, match="no reference run 'sweep' in .*: it ships with a checkout"):
        reference_runs.load("sweep")
    with pytest.raises(KeyError):
        reference_runs.load("nope")


# --------------------------------------------------------------------------- chapter 01: reports
def _fake_result(tmp_path: Path, name: str, busbw_at: dict[int, float], gpu: bool = True) -> RunResult:
    """An ``allreduce_bench`` run on 2× H200 (NV18), its label naming it (``name``: its runs tell apart)."""
    rows = [sweep_row(s, b, spread=0.01) for s, b in busbw_at.items()]
    result = run_of(sweep(rows), gpu=gpu, name=name, folder=tmp_path / name)
    assert name in result.label
    return result


def _lab_run(result, name: str, env: dict[str, str] | None = None, summary: str = "P2P/CUMEM") -> labreport.LabRun:
    return labreport.LabRun(
        path=cast(labreport.LabPath, types.SimpleNamespace(name=name, env=env or {})),
        result=result,
        transport=cast(TransportReport, types.SimpleNamespace(summary=summary, env_set=set(), version=None)),
    )


def test_reference_check_says_where_when_no_checked_size_was_reached(tmp_path):
    result = _fake_result(tmp_path, "small", {1 << 20: 60.0})
    _, verdict = bandwidth.reference_check(result)
    assert verdict.status == "info" and verdict.where == result.label
    assert verdict.numbers["ratio at 1 GiB"] is None and verdict.numbers["ratio at 4 GiB"] is None


def test_c7_without_a_common_size_says_where(tmp_path):
    a = _fake_result(tmp_path, "d", {1 << 20: 60.0})  # below the 16 MiB the GPU comparison starts at
    b = _fake_result(tmp_path, "s", {1 << 20: 61.0})
    verdict = labreport.claim_c7([_lab_run(a, "default"), _lab_run(b, "source's settings", {"NCCL_IB_DISABLE": "1"})])
    assert verdict.status == "unverifiable" and verdict.numbers["sizes"] == 0
    assert verdict.where == a.label


def test_lab_rows_keep_busbw_to_three_decimals(tmp_path):
    first = _fake_result(tmp_path, "d", {64 << 20: 250.1234, 1 << 30: 331.4567})
    second = _fake_result(tmp_path, "p", {64 << 20: 27.4444, 256 << 20: 27.5678})
    rows = labreport.lab_rows([_lab_run(first, "default"), _lab_run(second, "P2P off", {"NCCL_P2P_DISABLE": "1"})])
    assert [r["busbw there (GB/s)"] for r in rows] == [331.457, 27.568]
    assert rows[1]["default ÷ this, at the largest common size"] == round(250.1234 / 27.4444, 2)


def test_vendor_claims_say_they_come_from_vendor_data():
    assert links.claim_c2().where == links.VENDOR
    assert links.claim_c5().where == links.VENDOR


def test_reference_load_without_env_counts_the_ranks(tmp_path, monkeypatch):
    folder = tmp_path / "run-x"
    folder.mkdir()
    ended_run("allreduce_bench", None, [{}, {}, {}], folder, returncode=1).save()
    monkeypatch.setattr(report_reference, "FOLDER", tmp_path)
    monkeypatch.setattr(report_reference, "RUNS", {"x": "run-x"})
    result = report_reference.load("x")
    assert result.env is None and result.run_dir == folder
    assert result.log_files == {r: folder / f"rank{r}.log" for r in range(3)}


@pytest.mark.parametrize("name", sorted(bandwidth.REFERENCE_FILES.values()))
def test_our_formulas_reproduce_nccl_tests(name):
    """algbw = S/t and busbw = algbw·2(n−1)/n, checked on every row nccl-tests printed (n = 2)."""
    (run,) = bandwidth.parse_nccl_tests((FIX / name).read_text())
    assert run.rows
    for row in run.rows:
        for prefix in ("", "ip_"):
            seconds = row[f"{prefix}time_us"] / 1e6
            assert units.algbw(row["size"], seconds) == pytest.approx(row[f"{prefix}algbw"], rel=6e-3, abs=0.006)
            assert units.busbw(row["size"], seconds, 2) == pytest.approx(row[f"{prefix}busbw"], rel=6e-3, abs=0.006)
        assert row["count"] * 4 == row["size"] and row["type"] == "float" and row["root"] == -1


def test_nccl_tests_parser_blocks():
    ref = bandwidth.reference_nccl_tests()
    assert [len(r.rows) for r in ref.values()] == [7, 7, 6]
    assert ref["default"].busbw_at(4 << 30) == 347.71 and ref["default"].busbw_at(1 << 30) == 330.19
    assert ref["P2P off"].version == "2.19.6" and ref["P2P off"].devices == ["NVIDIA H200", "NVIDIA H200"]
    assert ref["P2P+SHM off"].avg_busbw == pytest.approx(2.86771)
    both = bandwidth.parse_nccl_tests(
        (FIX / "nccl-tests-all_reduce-nvlink.txt").read_text() + (FIX / "nccl-tests-all_reduce-socket.txt").read_text()
    )
    assert [len(r.rows) for r in both] == [7, 6]
    # an older nccl-tests without the root column
    (old,) = bandwidth.parse_nccl_tests(
        "   1048576    262144   float    sum    17.09   61.36   61.36  0e+00    18.76   55.90   55.90  0e+00\n"
    )
    assert old.rows[0]["root"] is None and old.rows[0]["busbw"] == 61.36


def test_torch_reference_parser():
    ref = bandwidth.reference_torch()
    assert set(ref) == {"torch allreduce default", "torch allreduce P2P_DISABLE=1", "torch allreduce P2P+SHM disabled"}
    assert bandwidth.reference_torch_busbw() == (1 << 30, 331.0)
    for rows in ref.values():
        for r in rows:
            assert r["algbw"] == pytest.approx(r["size"] / r["time_us"] / 1e3, rel=0.01, abs=0.06)


def test_grading_a_prediction(tmp_path):
    exp = machine_links.expect("NV18", "NVIDIA H200")
    gpu = fake_result(tmp_path, "g", {1 << 20: 60.0, 1 << 30: 331.0, 4 << 30: 345.0}, "")
    right = links.grade_run(330.0, gpu, exp)
    assert right.status == "right" and right.numbers["measured"] == 331.0 and right.where == gpu.label
    above = links.grade_run(600.0, gpu, exp)
    assert above.status == "close" and "physical limit of NV18" in above.text  # 600 GB/s cannot pass 450
    assert links.grade_run(10.0, gpu, exp).status == "off"
    assert links.grade_run(None, gpu, exp).status == "no answer"
    cpu = fake_result(tmp_path, "c", {1 << 20: 1.0}, "", gpu=False)
    graded = links.grade_run(300.0, cpu, exp)  # a CPU run grades against the course's saved reference sweep
    assert graded.numbers["measured"] == bandwidth.REFERENCE_SWEEP.busbw and "reference" in graded.where
    assert "The reference measured: 326.8 GB/s" in graded.text and "Measured:" not in graded.text
    assert "394 GB/s (88%)" in graded.text  # the copy engines' share: link-level overhead below NCCL
    # R1-14: one term for NVIDIA's per-link rate (before headers and flow control), none of "raw"
    assert "NVIDIA's 25 GB/s per link is the rate before them" in graded.text and "raw" not in graded.text


def test_lab_rows_ratio_and_verdicts(tmp_path):
    lines = (FIX / "nccl-debug-transport-lines.txt").read_text().splitlines()
    results = {
        "default": fake_result(
            tmp_path, "d", {64 << 20: 267.0, 256 << 20: 299.0, 1 << 30: 331.0}, "\n".join(lines[:4] + lines[8:])
        ),
        "P2P off": fake_result(tmp_path, "p", {64 << 20: 27.4, 256 << 20: 27.5}, "\n".join(lines[4:6])),
        "P2P+SHM off": fake_result(tmp_path, "s", {64 << 20: 3.5}, "\n".join(lines[6:8])),
    }
    lab = bwlab.run_lab({}, reuse=results)
    rows = labreport.lab_rows(lab)
    assert [r["transport (from NCCL_DEBUG)"] for r in rows] == ["P2P/direct pointer", "SHM/direct/direct", "NET/Socket"]
    assert rows[1]["default ÷ this, at the largest common size"] == pytest.approx(299 / 27.5, abs=0.01)
    assert rows[1]["largest common size"] == "256 MiB" and rows[2]["largest common size"] == "64 MiB"
    graded = labreport.grade_lab_ratio(10.0, lab)
    assert graded.status == "right" and graded.numbers["measured"] == pytest.approx(299 / 27.5, rel=0.02)
    assert labreport.lab_ratio(lab, "default", "P2P+SHM off") == (pytest.approx(267 / 3.5), 64 << 20)
    verdict = labreport.lab_verdict(lab)
    assert verdict.status == "slower" and verdict.numbers["slowest_path"] == "P2P+SHM off"
    assert verdict.numbers["ratio"] == pytest.approx(3.5 / 267)
    claim = labreport.claim_nvlink_vs_pcie(lab)
    assert claim.key == "C5 (measured)" and claim.numbers["ratio"] == pytest.approx(299 / 27.5)
    only = labreport.lab_verdict(lab[:1])
    assert only.status == "info"
    with pytest.raises(ValueError, match="no path to run"):
        bwlab.run_lab({})


def test_c7_verdict(tmp_path):
    log = (
        "x NCCL INFO NCCL_IB_DISABLE set by environment to 1.\nx NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    )
    same = {
        "default": fake_result(tmp_path, "a", {64 << 20: 267.0, 1 << 30: 331.0}, log),
        "source's settings": fake_result(tmp_path, "b", {64 << 20: 268.0, 1 << 30: 330.0}, log),
        "P2P off": fake_result(tmp_path, "c", {64 << 20: 27.0, 1 << 30: 27.5}, ""),
    }
    ab = bwlab.run_lab({}, reuse=same, paths=bwlab.SOURCE_AB_PATHS)
    rows = labreport.c7_rows(ab)
    assert [r["verdict"] for r in rows] == ["no change", "no change"]
    claim = labreport.claim_c7(ab)
    assert claim.status == "wrong" and claim.numbers["no_change"] == 2 and claim.numbers["control_ratio"] < 0.1
    assert "never read NCCL_NET_GDR_LEVEL" in claim.text  # NCCL reads it only for a network connection
    faster = dict(same, **{"source's settings": fake_result(tmp_path, "e", {64 << 20: 300.0, 1 << 30: 331.0}, log)})
    assert labreport.claim_c7(bwlab.run_lab({}, reuse=faster, paths=bwlab.SOURCE_AB_PATHS)).status == "partly"
    slower = dict(same, **{"source's settings": fake_result(tmp_path, "f", {64 << 20: 200.0, 1 << 30: 250.0}, log)})
    verdict = labreport.claim_c7(bwlab.run_lab({}, reuse=slower, paths=bwlab.SOURCE_AB_PATHS))
    assert verdict.status == "wrong" and verdict.numbers["slower"] == 2
    cpu = {
        k: fake_result(tmp_path, f"cpu{i}", {1024: 0.1}, "", gpu=False)
        for i, k in enumerate(["default", "source's settings"])
    }
    assert labreport.claim_c7(bwlab.run_lab({}, reuse=cpu, paths=bwlab.SOURCE_AB_PATHS)).status == "unverifiable"


def test_wire_report(tmp_path):
    wire = schema_allreduce.Wire(
        available=True,
        size=1 << 30,
        iters=10,
        links_read=18,
        links_carrying=18,
        tx_bytes_per_op=1.003 * (1 << 30),
        rx_bytes_per_op=1.002 * (1 << 30),
        expected_bytes_per_op=float(1 << 30),
        tx_ratio=1.003,
        rx_ratio=1.002,
    )
    table, verdict = bandwidth.wire_report(fake_result(tmp_path, "w", {1: 1.0}, "", wire=wire))
    assert verdict.status == "pass" and verdict.numbers["tx_ratio"] == 1.003 and table.iloc[0]["NVLinks carrying"] == 18
    table, verdict = bandwidth.wire_report(
        fake_result(tmp_path, "x", {1: 1.0}, "", wire=dataclasses.replace(wire, tx_ratio=1.4))
    )
    assert verdict.status == "fail"
    missing = schema_allreduce.Wire(1 << 30, 10, float(1 << 30), available=False, reason="CPU run")
    table, verdict = bandwidth.wire_report(fake_result(tmp_path, "n", {1: 1.0}, "", gpu=False, wire=missing))
    assert (
        table is None
        and verdict.status == "info"
        and verdict.numbers["reference_ratio"] == pytest.approx(1.0000316, abs=1e-6)
    )
    assert "18 NVLinks, all counted" in verdict.text


def test_reference_check_rule(tmp_path):
    """Issue 15: at least 99 % of nccl-tests' in-place busbw (dist.all_reduce is in place) at 1 and 4 GiB, only on
    the reference kind of machine."""
    good = fake_result(tmp_path, "good", {256 << 20: 299.0, 1 << 30: 330.0, 4 << 30: 346.0}, "")
    table, verdict = bandwidth.reference_check(good)
    assert verdict.status == "pass" and verdict.numbers["ratio at 4 GiB"] == pytest.approx(346.0 / 342.82, abs=1e-4)
    assert verdict.numbers["ratio at 1 GiB"] == pytest.approx(330.0 / 331.83, abs=1e-4)
    assert list(table["size"]) == ["256 MiB", "1 GiB", "4 GiB"]
    low = fake_result(tmp_path, "low", {1 << 30: 326.8}, "")
    _, verdict = bandwidth.reference_check(low)
    assert verdict.status == "fail" and verdict.numbers["ratio at 4 GiB"] is None
    assert verdict.key == "busbw vs nccl-tests"  # the key the notebook and the tests look a verdict up by
    # 98.5 % of 331.83: a miss larger than nccl-tests' own in-place/out-of-place difference there (0.5 %)
    assert verdict.numbers["nccl-tests own spread at 1 GiB"] == pytest.approx(331.83 / 330.19 - 1, abs=1e-4)
    assert "larger than that" in verdict.text
    _, near = bandwidth.reference_check(fake_result(tmp_path, "near", {1 << 30: 329.5}, ""))  # 99.3 %: passes
    assert near.status == "pass"
    assert bandwidth.reference_check(fake_result(tmp_path, "small", {1 << 20: 60.0}, ""))[1].status == "info"
    other = fake_result(tmp_path, "other", {1 << 30: 100.0}, "", names=("NVIDIA A100-SXM4-80GB",) * 2)
    assert bandwidth.reference_check(other)[1].status == "info"
    assert bandwidth.reference_check(fake_result(tmp_path, "cpu", {1 << 30: 1.0}, "", gpu=False))[1].status == "info"


def test_duplex_verdicts(tmp_path):
    """Issue 11 finding 3: the copy engines say whether the link shares its two directions; NCCL adds its own."""

    def pair(one, both):
        rows = [sendrecv_row(1 << 28, "one way", one), sendrecv_row(1 << 28, "both ways", both)]
        return run_of(sendrecv(rows))

    def copy(one, both):
        paths = ("cuda:0 → cuda:1", "cuda:1 → cuda:0")
        rows = [copy_row(p, "one way", 1 << 30, one, samples=(one * 0.998, one, one * 1.002)) for p in paths]
        rows += [
            copy_row(p, "both at once", 1 << 30, both, samples=(both * 0.998, both, both * 1.002), busy_share=0.99)
            for p in paths
        ]
        return bandwidth.CopyRun(rows=rows, label="2× NVIDIA H200 (fake)", note="")

    nccl = pair(355.9, 301.1)
    assert bandwidth.sendrecv_duplex(nccl).status == "slower"
    full = bandwidth.duplex_verdict(nccl, copy(392.0, 390.0))
    assert full.numbers["copy_status"] == "no change" and full.numbers["nccl_status"] == "slower"
    assert "not a path the two directions share" in full.text
    shared = bandwidth.duplex_verdict(nccl, copy(392.0, 250.0))
    assert shared.numbers["copy_status"] == "slower" and "separate lanes" in shared.text
    assert bandwidth.duplex_verdict(nccl).numbers["copy_status"] is None
    assert copy(392.0, 390.0).verdict(machine_links.expect("NV18", "NVIDIA H200")).numbers[
        "share_of_physical"
    ] == pytest.approx(392 / 450)


def test_small_message_plateau_is_read_from_the_rows():
    """The flat region is derived from the sweep, not asserted. The 1×H200 CPU-simulation sweep of the review
    stayed at 217–219 µs up to 64 KiB and took 567 µs at 512 KiB: no 'flat to a MiB' there."""
    rows = [
        sweep_row(s, time_us=t)
        for s, t in ((1024, 217.0), (8192, 218.0), (65536, 219.0), (524288, 567.0), (1 << 20, 558.0))
    ]
    verdict = bandwidth.small_message_cost(rows)
    assert verdict.numbers["flat_up_to"] == 65536 and verdict.numbers["flat_time_us_max"] == 219.0
    assert "From 1 KiB to 64 KiB" in verdict.text
    steep = bandwidth.small_message_cost([sweep_row(1024, time_us=10.0), sweep_row(4096, time_us=40.0)])
    assert steep.numbers["flat_up_to"] is None and "no flat region" in steep.text


LIM = gpu.limits(H200, PEAK)  # PCIe Gen5 x16, 63.0154 GB/s; memory 4916.736 GB/s


@pytest.mark.parametrize(
    "share, word",
    [(0.6999, "below"), (0.70, "as expected"), (1.02, "as expected"), (1.0201, "above the limit")],
)
def test_a_share_of_the_limit_at_both_thresholds(share, word):
    assert gpu.reading(share) == word
    assert (gpu.EXPECTED_SHARE, gpu.ABOVE_LIMIT) == (0.70, 1.02)


def test_the_verdict_reads_each_link_against_its_limit():
    v = gpu.verdict(measured(), LIM)
    assert v.status == "info" and v.key == "one GPU's links" and v.where == measured().label
    n = v.numbers
    assert n["size"] == GIB and n["host to device, pinned"]["share"] == pytest.approx(54.0 / 63.0154, abs=1e-4)
    assert n["host to device, pinned"]["reading"] == n["device to host, pinned"]["reading"] == "as expected"
    assert n["memory"] == {
        "gbps": 4200.0,
        "share": pytest.approx(4200 / 4916.736),
        "reading": "as expected",
        "size": GIB,
    }
    assert n["memory_over_pcie"] == pytest.approx(4200 / 54.0)
    assert n["host to device, pageable ÷ pinned"] == {"ratio": pytest.approx(20 / 54, rel=1e-3), "status": "slower"}
    assert n["device to host, pageable ÷ pinned"]["status"] == "slower"
    assert "78×" in v.text and "pin_memory=True" in v.text and "below" not in v.text
    assert "pin_memory=True). A copy inside the GPU of 1 GiB moved 4,200 GB/s" in v.text  # no L2 sentence between
    pcie_only = gpu.verdict(measured(link_rows()[:4]), LIM)  # no memory row: no memory sentence
    assert pcie_only.text.endswith("pin_memory=True).") and "memory" not in pcie_only.numbers
    assert "host to device 54.0 GB/s (86%), device to host 52.0 GB/s (83%) of the 63.0 GB/s" in v.text
    same = gpu.verdict(measured(link_rows(h2d_pageable=54.0, d2h_pageable=52.0)), LIM)  # pageable keeps up: no change
    assert same.numbers["host to device, pageable ÷ pinned"]["status"] == "no change"


def test_a_slow_or_impossible_link_says_what_to_check():
    slow = gpu.verdict(measured(link_rows(h2d=0.69 * 63.0154, memory=0.69 * 4916.736)), LIM)
    assert slow.numbers["host to device, pinned"]["reading"] == "below" == slow.numbers["memory"]["reading"]
    assert gpu.WHY[("pcie", "below")] in slow.text and gpu.WHY[("memory", "below")] in slow.text
    fast = gpu.verdict(measured(link_rows(h2d=1.03 * 63.0154, memory=1.03 * 4916.736)), LIM)
    assert fast.numbers["host to device, pinned"]["reading"] == "above the limit" == fast.numbers["memory"]["reading"]
    assert gpu.WHY[("pcie", "above the limit")] in fast.text and gpu.WHY[("memory", "above the limit")] in fast.text
    blind = gpu.verdict(measured(), gpu.Limits("NVIDIA H200", "NVML said nothing"))
    assert blind.numbers["memory"]["share"] is None and blind.numbers["host to device, pinned"]["reading"] is None
    assert "NVML gave no memory peak" in blind.text


L2 = 50 * MIB  # an H100's, as PyTorch reports it


def pinned(direction, size, median, best, worst=None, share=True):
    """A pinned PCIe row whose median and best block are ``median`` and ``best`` (shares of the link when ``share``)."""
    scale = LIM.pcie_gbps if share else 1.0
    worst = median if worst is None else worst
    samples = (worst * scale, median * scale, best * scale)
    return schema.Row(direction, "pinned", size, size, size / (median * scale) / 1e3, median * scale, samples, 2)


@pytest.mark.parametrize(
    "steady, reading",
    [
        # the H100 run's shape (R1-4): 88 % at 256 MiB in every block, a 68 % median at 1 GiB whose best block is 88 %
        ([(256 * MIB, 0.876, 0.876), (GIB, 0.685, 0.877, 0.661)], "varies"),
        ([(256 * MIB, 0.6999, 0.6999), (GIB, 0.60, 0.6999)], "below"),  # no block reached 70 %: the link itself
        ([(256 * MIB, 0.65, 0.70), (GIB, 0.60, 0.6999)], "varies"),  # one block at 70 %: not a narrow link
        ([(256 * MIB, 0.70, 0.71), (GIB, 0.70, 0.71)], "as expected"),
        ([(256 * MIB, 1.02, 1.03), (GIB, 0.9, 0.9)], "as expected"),
        ([(256 * MIB, 1.0201, 1.03), (GIB, 0.9, 0.9)], "above the limit"),
    ],
)
def test_a_pinned_link_is_read_at_every_steady_size_by_median_and_best_block(steady, reading):
    small = pinned("device to host", 16 * MIB, 0.30, 0.31)  # below PCIE_STEADY: never read while larger sizes exist
    found = (small, *(pinned("device to host", *row) for row in steady))
    got = gpu.pcie_reading(measured(found), "device to host", LIM.pcie_gbps)
    assert got.reading == reading and got.gbps == pytest.approx(steady[-1][1] * LIM.pcie_gbps)
    assert got.best_share == pytest.approx(max(row[2] for row in steady))
    assert ("varied" in got.numbers()) == (got.varied is not None) == (reading == "varies")


def test_a_varying_link_says_where_it_carried_its_rate():
    h100 = (pinned("device to host", 256 * MIB, 0.876, 0.876), pinned("device to host", GIB, 0.685, 0.877, 0.661))
    got = gpu.pcie_reading(measured(h100), "device to host", LIM.pcie_gbps).numbers()
    assert got["varied"] == {"size": GIB, "min": pytest.approx(0.661 * 63.0154), "max": pytest.approx(0.877 * 63.0154)}
    assert got["carried"] == {"size": 256 * MIB, "gbps": pytest.approx(0.876 * 63.0154)}
    at70 = (pinned("device to host", 256 * MIB, 0.70, 0.70), pinned("device to host", GIB, 0.6, 0.9))
    assert LIM.pcie_gbps is not None  # H200's PCIe Gen5 x16
    edge = gpu.pcie_reading(
        measured(at70), "device to host", LIM.pcie_gbps
    ).numbers()  # a median of exactly 70 % carried it
    assert edge["reading"] == "varies" and edge["carried"] == {"size": 256 * MIB, "gbps": 0.70 * LIM.pcie_gbps}
    lone = gpu.pcie_reading(
        measured(h100[1:]), "device to host", LIM.pcie_gbps
    ).numbers()  # one steady size: its best block
    assert lone["reading"] == "varies" and lone["carried"] is None
    v = gpu.verdict(measured((*link_rows(), *h100[:1])), LIM)  # with the other links at 1 GiB, and 256 MiB
    assert v.numbers["device to host, pinned"]["reading"] == "as expected"  # 83 % at 1 GiB, 88 % at 256 MiB
    text = gpu.verdict(measured((*link_rows(d2h=0.685 * 63.0154), *h100[:1])), LIM).text
    assert "device to host varies: 42.7–43.6 GB/s between blocks at 1 GiB (55.2 GB/s, 88%, at 256 MiB)" in text
    assert gpu.WHY[("pcie", "varies")] in text and gpu.WHY[("pcie", "below")] not in text
    only_small = (pinned("device to host", 4 * MIB, 0.2, 0.2), pinned("device to host", 16 * MIB, 0.8, 0.8))
    assert gpu.pcie_reading(measured(only_small), "device to host", LIM.pcie_gbps).reading == "as expected"
    assert gpu.pcie_reading(measured(only_small[:1]), "device to host", LIM.pcie_gbps).reading == "below"
    assert gpu.pcie_reading(measured(only_small), "device to host", None).numbers() == {
        "gbps": pytest.approx(0.8 * 63.0154),
        "share": None,
        "reading": None,
    }


@pytest.mark.parametrize(
    "median, best, words",
    [
        (0.86, 0.87, "PCIe spends the rest on each packet's header"),
        (0.60, 0.87, "its blocks varied, and the verdict below says why that is not the link"),
        (0.60, 0.65, "below the 70% a pinned copy usually reaches"),
        (1.03, 1.03, "above it: NVML's generation or width is not the link's"),
    ],
)
def test_the_grade_explains_the_pinned_rate_by_the_links_reading(median, best, words):
    run = measured((*link_rows()[1:], pinned("host to device", GIB, median, best)))
    g = gpu.grade(None, run, LIM)
    assert words in g.text and g.numbers["measured"] == pytest.approx(median * 63.0154)
    assert ("header" in g.text) == (median == 0.86)  # headers and flow control explain 86 %, not 60 %


@pytest.mark.parametrize(
    "size, where",
    [(25 * MIB, "in L2"), (25 * MIB + 1, "partly in L2"), (100 * MIB, "partly in L2"), (100 * MIB + 1, None)],
)
def test_a_device_copy_is_in_l2_while_its_bytes_fit(size, where):
    assert gpu.cache(size, L2) == where and gpu.BEYOND_L2 == 4
    assert gpu.cache(size, None) is None and gpu.cache(size, 0) is None  # unknown: read as memory


def test_the_memory_is_read_beyond_the_l2_and_the_cached_rows_say_so():
    found = (*link_rows(memory=3701.9, size=16 * MIB), *link_rows(memory=3013.6))
    run = measured(found, l2=L2)
    frame = run.frame(LIM)
    assert list(frame[frame["link"] == "memory"]["share of the limit"]) == ["in L2 (50 MiB): not the memory's", "61%"]
    v = gpu.verdict(run, LIM)
    assert v.numbers["memory"]["size"] == GIB and v.numbers["memory"]["reading"] == "below"  # 3013.6 of 4916.7
    assert v.numbers["l2_bytes"] == L2 and "the copies of 16 MiB (in L2, 3,702 GB/s) measured its 50 MiB L2" in v.text
    unknown = gpu.verdict(measured(found), LIM)  # no L2 recorded: every row is memory, the largest read
    assert unknown.numbers["memory"]["size"] == GIB and "L2" not in unknown.text
    cached = gpu.verdict(measured(link_rows(memory=3701.9, size=16 * MIB), l2=L2), LIM)
    assert cached.numbers["memory"] is None and "No size here is beyond it" in cached.text
    assert "memory_over_pcie" not in cached.numbers and "above the limit" not in cached.text
    above = gpu.verdict(measured(link_rows(memory=3701.9, size=16 * MIB)), gpu.SAVED_LIMITS["NVIDIA H100 80GB HBM3"])
    assert above.numbers["memory"]["reading"] == "above the limit"  # what an unknown L2 would have said (R1-3)


@pytest.mark.parametrize(
    "sizes, why",
    [
        ((16 * MIB,), "fit in it."),  # 32 MiB read and written, in a 50 MiB L2
        ((25 * MIB + 1,), "stay within 4× of it."),
        ((16 * MIB, 64 * MIB), "fit in it (in L2) or stay within 4× of it (partly in L2)."),
    ],
)
def test_the_l2_reason_follows_where_each_copy_ran(sizes, why):
    """RR13-13: copies in L2 fit in it; only those partly in L2 stay within BEYOND_L2 × of it."""
    rows = [r for size in (*sizes, GIB) for r in link_rows(memory=3701.9, size=size)]
    v = gpu.verdict(measured(tuple(rows), l2=L2), LIM)
    assert f"measured its 50 MiB L2 cache, not the memory: their bytes read and written {why}" in v.text


def test_the_l2_comes_from_the_run_or_for_an_older_saved_run_from_its_gpu():
    assert gpu.l2_of(schema.Rank("gpu", "NVIDIA H200", l2_bytes=60 * MIB)) == 60 * MIB
    assert gpu.l2_of(schema.Rank("gpu", "NVIDIA H100 80GB HBM3")) == 50 * MIB == gpu.L2_BYTES["NVIDIA H100 80GB HBM3"]
    assert gpu.l2_of(schema.Rank("gpu", "NVIDIA H200")) is None


def test_nothing_measured_says_why_and_gives_the_limits():
    run = gpu.GpuLinks((), "nothing measured", "not run here: no GPU visible to a CUDA build of torch")
    v = gpu.verdict(run, gpu.REFERENCE_LIMITS)
    assert v.status == "info" and v.numbers == {} and v.where == gpu.REFERENCE_LIMITS.source
    assert v.text.startswith(run.note) and "63.0 GB/s" in v.text and "4,800 GB/s" in v.text
    g = gpu.grade(40.0, run, gpu.REFERENCE_LIMITS)
    assert g.status == "info" and g.numbers == {"prediction": 40.0} and "must stay under 63.0 GB/s" in g.text
    assert (g.key, g.where) == ("pinned host to device", gpu.REFERENCE_LIMITS.source)
    assert g.title == "Host to device over PCIe from pinned memory, at the largest size"
    blind = gpu.Limits("NVIDIA H200", "NVML said nothing")
    assert "must stay under no limit NVML could give" in gpu.grade(40.0, run, blind).text
    assert "NVML gave no PCIe link to compare it with." in gpu.grade(40.0, measured(), blind).text
    assert run.frame(gpu.REFERENCE_LIMITS).to_dict("records") == [
        {"link": "memory and PCIe", "GB/s": None, "note": run.note}
    ]


@pytest.mark.parametrize(
    "prediction, status", [(None, "no answer"), (54.0 * 1.25, "right"), (54.0 * 1.26, "close"), (54.0 * 2.01, "off")]
)
def test_the_prediction_is_graded_against_the_pinned_copy(prediction, status):
    g = gpu.grade(prediction, measured(), LIM)
    assert g.status == status and g.numbers["measured"] == 54.0 and g.where == measured().label
    assert g.title == "Host to device over PCIe from pinned memory, at the largest size"
    assert "86% of the 63.0 GB/s of PCIe Gen5 x16" in g.text
    assert "Measured: 54 GB/s. At 1 GiB." in g.text  # this machine's run, named as such, in GB/s
    assert ("No run can pass the limit of PCIe Gen5 x16" in g.text) == (prediction is not None and prediction > 63.0154)


def test_the_table_gives_each_share():
    frame = measured().frame(LIM)
    assert list(frame["link"]) == ["host to device", "device to host", "host to device", "device to host", "memory"]
    assert list(frame["share of the limit"]) == ["86%", "83%", "32%", "24%", "85%"]
    assert list(frame["host memory"]) == ["pinned", "pinned", "pageable", "pageable", "—"]
    assert frame.attrs["where"] == measured().label and list(frame["limit GB/s"])[-1] == 4916.7


def test_the_newest_committed_one_gpu_run_reads_typed():
    """Whatever one-GPU run the checkout holds (reference/h*x1/runs), read through the notebook's readers: every link
    at every size, and no copy beyond the L2 above what its link carries."""
    saved = report_reference.one_gpu("gpu_links")
    if saved is None:
        pytest.skip("no committed one-GPU run of gpu_links (scripts/gpu_links_check.py makes one)")
    rank = saved.metrics_as(schema.Rank)
    assert rank.mode == "gpu" and saved.env is not None and saved.env.is_gpu
    run = gpu.GpuLinks(rank.rows, saved.label, "saved", saved, False, gpu.l2_of(rank))
    for size in run.sizes():
        assert all(run.row(link, host, size) for link, host in [(r.link, r.host) for r in link_rows()])
    v = gpu.verdict(run, gpu.saved_limits(rank.device))
    for key in ("host to device, pinned", "device to host, pinned", "memory"):
        assert v.numbers[key]["reading"] != "above the limit", (key, v.numbers[key])
    assert v.numbers["memory_over_pcie"] > 10  # memory against PCIe: tens of times


@pytest.fixture(scope="module")
def link_lab():
    return reference_lab({"default": "sweep", "P2P off": "lab P2P off", "P2P+SHM off": "lab P2P+SHM off"})


def test_registered_deciders_give_the_registered_status(ab):
    evidence = {
        "C2": (),
        "C3": (),
        "C4": (doctor.reference_facts(),),
        "C5": (),
        "C6": (doctor.reference_facts(),),
        "C7": (ab,),
    }
    for cid, args in evidence.items():
        claim = claims.claim(cid)
        verdict = claim.decider()(*args)
        assert verdict.key == cid and verdict.status == claim.status, (cid, verdict)


def test_c2_and_c5_from_vendor_data():
    c2 = links.claim_c2()
    assert c2.status == "partly" and c2.numbers["without_nvlink"] == ["GeForce RTX 4090"]
    c5 = links.claim_c5()
    assert c5.status == "wrong" and c5.numbers["nvlink_over_pcie"] == pytest.approx(1.79, abs=0.01)
    assert c5.numbers["consumer_over_pro"] == pytest.approx(56.25 / 300)


def test_c3_from_topo_outputs():
    c3 = links.claim_c3()  # the reference machine's saved nvidia-smi topo -m
    assert c3.status == "holds" and c3.numbers == {"code": "NV18", "nvlinks": 18}
    pcie = links.claim_c3(topology.read(ROOT / "tests" / "fixtures" / "topo" / "pcie-4gpu-nics.txt"))
    assert pcie.status == "unverifiable"


def test_c7_from_the_reference_runs(ab):
    rows = labreport.c7_rows(ab)
    assert [r["size"] for r in rows] == ["16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert {r["verdict"] for r in rows} == {"no change"}
    c7 = labreport.claim_c7(ab)
    assert c7.status == "wrong" and c7.numbers["no_change"] == 4 and c7.numbers["largest_change"] < 0.01
    assert c7.numbers["control_ratio"] == pytest.approx(27.466 / 298.407, abs=1e-3)  # P2P off: the control moves
    assert "never read NCCL_NET_GDR_LEVEL" in c7.text  # NCCL's own log: only NCCL_IB_DISABLE was read
    # N1/T14 (review 2026-12-06): NCCL may route one machine's GPUs through a NIC (ncclTopoCheckNet), and a network
    # plugin can outlive NCCL_IB_DISABLE=1: neither the verdict nor the graded answer says otherwise
    graded = labreport.grade_c7("c", ab)
    for text in (c7.text, graded.text):
        assert "on any machine" not in text and "one machine's GPUs" not in text and "one machine:" not in text
    assert "network plugin" in c7.text and "NCCL_NET_DISABLE_INTRA=1" in graded.text and graded.status == "right"


def test_link_lab_and_c5_measured_from_the_reference_runs(link_lab):
    assert [run.transport.summary for run in link_lab] == ["P2P/CUMEM", "SHM/direct/direct", "NET/Socket"]
    verdict = labreport.lab_verdict(link_lab)
    assert verdict.status == "slower" and verdict.numbers["slowest_path"] == "P2P+SHM off"
    c5 = labreport.claim_nvlink_vs_pcie(link_lab)  # at 256 MiB, the largest size both paths measured
    assert c5.numbers["size"] == 256 << 20 and c5.numbers["ratio"] == pytest.approx(297.991 / 27.604, rel=1e-3)


def test_sweep_verdicts_from_the_reference_run():
    sweep = reference_run("sweep")
    _, check = bandwidth.reference_check(sweep)
    # The committed sweep stops at 1 GiB and reached 326.76 GB/s there: 98.47 % of nccl-tests' in-place busbw
    # (331.83; dist.all_reduce is in place). Under issue 15's rule (99 % at 1 and 4 GiB) it fails, by more than
    # nccl-tests' own in-place/out-of-place difference (0.50 %). A rerun with the full profile (to 4 GiB) decides.
    assert check.status == "fail" and check.numbers["ratio at 1 GiB"] == pytest.approx(326.7605 / 331.83, abs=1e-4)
    assert check.numbers["ratio at 4 GiB"] is None and "larger than that" in check.text
    _, wire = bandwidth.wire_report(sweep)
    assert wire.status == "pass" and wire.numbers["tx_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert wire.numbers["links_carrying"] == 18
    # the constants the CPU notebooks quote are this run's numbers
    saved = bandwidth.sweep_of(sweep).wire
    assert saved is not None and saved.tx_ratio is not None and saved.tx_bytes_per_link_per_op is not None
    assert bandwidth.REFERENCE_WIRE.tx_ratio == pytest.approx(saved.tx_ratio, abs=1e-6)
    assert bandwidth.REFERENCE_WIRE.links_read == saved.links_read == 18
    per_link = [v / 1e6 for v in saved.tx_bytes_per_link_per_op.values()]
    assert (min(per_link), max(per_link)) == pytest.approx(
        (bandwidth.REFERENCE_WIRE.per_link_mb_min, bandwidth.REFERENCE_WIRE.per_link_mb_max), abs=0.01
    )
    assert bandwidth.REFERENCE_SWEEP.busbw == pytest.approx(
        bandwidth.at_size(bandwidth.sweep_rows(sweep), 1 << 30)[1], abs=0.01
    )
    small = bandwidth.small_message_cost(sweep)
    assert small.numbers["time_us_smallest"] == pytest.approx(38.3, abs=0.1)  # not "a few microseconds"
    assert small.numbers["flat_up_to"] == 4 << 20  # 37.6–40.4 µs from 1 KiB to 4 MiB; 76 µs at 16 MiB
    assert small.numbers["floor_size"] == 4096 and small.numbers["slow_sizes"] == []  # NCCL's floor: 37.55 µs
    # both sides of the factor at 16 MiB: 76.368 / 37.552 = 2.0337 times the fastest call before it
    assert bandwidth.small_message_cost(sweep, flat_factor=2.033).numbers["flat_up_to"] == 4 << 20
    assert bandwidth.small_message_cost(sweep, flat_factor=2.034).numbers["flat_up_to"] == 16 << 20


def test_duplex_from_the_reference_run():
    """Issue 11 finding 3: NCCL send/recv loses 15 % per direction with both at once; without the copy-engine
    run the verdict does not blame the link."""
    sendrecv = reference_run("sendrecv")
    nccl = bandwidth.sendrecv_duplex(sendrecv)
    assert nccl.status == "slower" and nccl.numbers["ratio"] == pytest.approx(301.12 / 355.883, abs=1e-3)
    verdict = bandwidth.duplex_verdict(sendrecv)
    assert verdict.numbers["copy_status"] is None and "share" not in verdict.text


def test_prediction_is_graded_against_the_saved_number_on_a_cpu(tmp_path):
    cpu = run_of(sweep([sweep_row(1 << 20, 1.0)]), gpu=False)
    graded = links.grade_run(330.0, cpu, machine_links.expect("NV18", "NVIDIA H200"))
    assert graded.status == "right" and graded.numbers["measured"] == bandwidth.reference_sweep_busbw(1 << 30)[1]


def test_c7_prediction_is_graded_against_the_runs_or_the_reference(ab):
    assert labreport.c7_answer(ab) == labreport.REFERENCE_C7_ANSWER == "c"  # what the committed reference runs answer
    assert labreport.grade_c7("c", ab).status == "right" and labreport.grade_c7("a", ab).status == "off"
    assert labreport.grade_c7(None, ab).status == "no answer"


SAVED_AB = (
    "2× NVIDIA H200 · NV18 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0: the reference 2× H200's saved run "
    "(reference/h200x2/runs/allreduce_bench-20261130-014936-7adb80), not this machine"
)


def test_verdicts_from_the_saved_runs_say_so(ab, tmp_path):
    """R5-5: C7, its graded prediction, the troubleshooting rows and the duplex verdict read from the reference's
    saved runs say so in their ``where``, and the grade says whose runs answered; a run made here keeps its label."""
    laptop = dataclasses.replace(doctor.reference_facts(), torch="2.13.0+cpu", torch_cuda=None, nccl=None)
    graded = labreport.grade_c7("c", ab)
    assert labreport.claim_c7(ab).where == graded.where == SAVED_AB
    assert {v.where for v in env.troubleshooting_from_runs(laptop, ab)} == {SAVED_AB, "primary source"}
    assert "The reference's saved runs say (c)" in graded.text and "The run says" not in graded.text
    duplex = bandwidth.duplex_verdict(reference_run("sendrecv"))
    assert duplex.where.endswith("(reference/h200x2/runs/sendrecv_bench-20261130-014839-652f0b), not this machine")
    here = [dataclasses.replace(run, result=dataclasses.replace(run.result, run_dir=tmp_path)) for run in ab]
    assert (
        labreport.grade_c7("c", here).where == here[0].result.label
        and "The run says (c)" in labreport.grade_c7("c", here).text
    )
    assert labreport.claim_c7(here).where == here[0].result.label
    assert "The reference's saved runs say (c)" in labreport.grade_c7("c", [run_cpu(ab[0])] + list(ab[1:])).text


def run_cpu(run):
    """``run`` as if it ran on the CPU here (an installed package's A/B)."""
    env = dataclasses.replace(run.result.env, backend="gloo")
    return dataclasses.replace(run, result=dataclasses.replace(run.result, env=env, run_dir=Path("here")))
