"""Notebook 01's part "one GPU's links" (``workload_gpu_links.py``, ``report_gpu.py``, ``lab.gpu_links``): where the
plan runs it, what NVML predicts, the copies' arithmetic, and each verdict at its rule (both sides of every threshold,
every branch), on synthetic runs and on the reference H200's committed run where there is one."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest

from nvtutorial import course
from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report_gpu as gpu
from nvtutorial.chapters.ch01_hardware import report_reference
from nvtutorial.chapters.ch01_hardware import schema_gpu_links as schema
from nvtutorial.chapters.ch01_hardware import workload_gpu_links as workload
from nvtutorial.machine import hardware
from nvtutorial.nvml import GPUDetail
from nvtutorial.results import typed
from tests.helpers.hardware_runs import run_of
from tests.helpers.paths import ROOT

GIB = 1 << 30
NOTEBOOK = ROOT / "notebooks" / "01_hardware.ipynb"
PART = "one GPU's links"
ONE = course.Machine(("NVIDIA H200",), 16, "2.28.9")
TWO = course.Machine(("NVIDIA H200", "NVIDIA H200"), 32, "2.28.9")
CPU = course.Machine((), 2)
H200 = GPUDetail(0, "NVIDIA H200", "GPU-x", "00000000:00:06.0", 143771, 1, 16, 5, 16)
PEAK = hardware.MemoryPeak(6144, 3201)


def row(link, host, gbps, size=GIB, spread=0.01):
    moved = 2 * size if link == "memory" else size
    return schema.Row(
        link, host, size, moved, moved / gbps / 1e3, gbps, (gbps * (1 - spread), gbps, gbps * (1 + spread)), 3
    )


def rows(h2d=54.0, d2h=52.0, h2d_pageable=20.0, d2h_pageable=15.0, memory=4200.0, size=GIB):
    return (
        row("host to device", "pinned", h2d, size),
        row("device to host", "pinned", d2h, size),
        row("host to device", "pageable", h2d_pageable, size),
        row("device to host", "pageable", d2h_pageable, size),
        row("memory", "device", memory, size),
    )


def measured(found=None, here=True, l2=None):
    found = rows() if found is None else found
    result = run_of(schema.Rank("gpu", "NVIDIA H200", found, "events", l2_bytes=l2), names=("NVIDIA H200",), link=None)
    return gpu.GpuLinks(found, result.label, "" if here else "not run here: no GPU", result, here, l2)


def sizes_of_the_notebook() -> dict:
    """The notebook's parameters cell, read as papermill would (literals only)."""
    nb = json.loads(NOTEBOOK.read_text())
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    tree = ast.parse("".join(cell["source"]))
    return next(ast.literal_eval(n.value) for n in tree.body if n.targets[0].id == "SIZES")  # type: ignore[attr-defined]


# --- where it runs, at which sizes --------------------------------------------------------------------------


def test_one_gpu_runs_it_on_the_gpu_at_the_lesson_sizes(monkeypatch):
    """On one GPU (and on two) the part is one rank on GPU 0 with NCCL, at the lesson's sizes (16 MiB to 1 GiB);
    on a CPU nothing is launched and the part says why."""
    sizes = sizes_of_the_notebook()
    for machine in (ONE, TWO):
        part = course.plan("01_hardware", "auto", {PART: "one GPU"}, machine)[PART]
        assert (part.profile, part.gpus, part.backend, part.simulated) == ("full", 1, "nccl", False)
        assert sizes[part.profile]["gpu_links"]["sizes"] == [16 << 20, 256 << 20, GIB]
    launched = {}

    def fake_run(target, **kw):
        launched.update(kw, target=target)
        return measured().result

    monkeypatch.setattr(bwlab.launch, "run", fake_run)
    part = course.plan("01_hardware", "auto", {PART: "one GPU"}, ONE)[PART]
    run = bwlab.gpu_links(sizes["full"]["gpu_links"], part)
    assert launched["target"] == "gpu_links" and (launched["nproc"], launched["backend"]) == (1, "nccl")
    assert launched["params"]["sizes"] == [16 << 20, 256 << 20, GIB] and run.here and len(run.rows) == 5
    forced = course.plan("01_hardware", "ci", {PART: "one GPU"}, ONE)[PART]  # ci: small sizes, still the GPU
    assert (forced.profile, forced.gpus) == ("ci", 1)
    # R1-3: even the small sizes reach past the L2 (4x an H200's 60 MB) and include the PCIe verdict's steady size
    assert max(sizes["ci"]["gpu_links"]["sizes"]) == gpu.PCIE_STEADY == 256 << 20
    assert gpu.cache(max(sizes["ci"]["gpu_links"]["sizes"]), 60_000_000) is None


def test_without_a_gpu_nothing_is_launched_and_a_saved_run_stands_in(monkeypatch, tmp_path):
    part = course.plan("01_hardware", "auto", {PART: "one GPU"}, CPU)[PART]
    monkeypatch.setattr(bwlab.launch, "run", lambda *a, **k: pytest.fail("launched without a GPU"))
    h100, h200 = tmp_path / "h100x1" / "runs", tmp_path / "h200x1" / "runs"
    monkeypatch.setattr(report_reference, "ONE_GPU_FOLDERS", (h100, h200))
    none = bwlab.gpu_links({"sizes": [GIB]}, part)
    assert none.rows == () and not none.here and "no GPU visible" in none.note and "no saved run" in none.note
    assert bwlab.gpu_limits(part) == gpu.REFERENCE_LIMITS and "no saved run" in bwlab.gpu_links_instead()
    for folder, name in ((h200, "gpu_links-20261207-010000-aaaaaa"), (h100, "gpu_links-20261208-010000-bbbbbb")):
        saved = measured(rows(h2d=50.0 if name.endswith("a") else 55.0)).result  # the newest, by name, is read
        saved.save(folder / name / "result.json")  # as a launch writes it
    shown = bwlab.gpu_links({"sizes": [GIB]}, part)
    assert not shown.here and shown.row("host to device", "pinned").gbps == 55.0 and "not run here" in shown.note
    assert bwlab.gpu_links_instead() == "a saved run on one NVIDIA H200 (reference/h100x1) and that GPU's limits"
    assert bwlab.gpu_limits(part) == gpu.REFERENCE_LIMITS  # the limits of the saved run's GPU, an H200 here
    assert gpu.verdict(shown, gpu.REFERENCE_LIMITS).text.startswith("Not run here: no GPU")
    assert "A saved run of NVIDIA H200 measured: 55 GB/s" in gpu.grade(50.0, shown, gpu.REFERENCE_LIMITS).text
    assert gpu.saved_limits("NVIDIA H100 80GB HBM3").memory_gbps == pytest.approx(3352.32)
    odd = gpu.saved_limits("NVIDIA A100-SXM4-80GB")  # a GPU the course has no limits of: none invented
    assert (odd.gpu, odd.pcie_gbps, odd.memory_gbps) == ("NVIDIA A100-SXM4-80GB", None, None)
    assert "no record of its limits" in odd.source and "NVML gave no PCIe link" in odd.describe()


def test_the_limits_come_from_nvml(monkeypatch):
    monkeypatch.setattr(bwlab.hardware, "inventory", lambda: type("Inv", (), {"gpus": (H200,)})())
    monkeypatch.setattr(bwlab.hardware, "memory_peak", lambda index=0: PEAK)
    part = course.plan("01_hardware", "auto", {PART: "one GPU"}, ONE)[PART]
    lim = bwlab.gpu_limits(part)
    assert (lim.pcie, lim.pcie_gbps) == ("PCIe Gen5 x16", pytest.approx(63.015, abs=1e-3))
    assert lim.gpu == "NVIDIA H200" and "this machine's GPU 0" in lim.source
    assert lim.memory_gbps == pytest.approx(6144 / 8 * 3201e6 * 2 / 1e9) == PEAK.gbps
    assert hardware.MemoryPeak(5120, 2619).gbps == pytest.approx(3352.32)  # H100 SXM's datasheet 3.35 TB/s
    idle = dataclasses.replace(H200, pcie_gen=1, pcie_width=16, pcie_gen_max=None, pcie_width_max=None)
    assert gpu.limits(idle, None).pcie == "PCIe Gen1 x16"  # no highest reading: the current one
    assert gpu.limits(dataclasses.replace(H200, pcie_gen_max=1, pcie_gen=1), None).pcie_gbps == pytest.approx(4.0)
    unknown = gpu.limits(dataclasses.replace(H200, pcie_gen=None, pcie_gen_max=None), None)
    assert (unknown.pcie, unknown.pcie_gbps, unknown.memory_gbps) == (None, None, None)
    assert "NVML gave no PCIe link" in unknown.describe() and "NVML gave no memory peak" in unknown.describe()
    assert gpu.limits(None, PEAK) == gpu.REFERENCE_LIMITS and gpu.REFERENCE_LIMITS.memory_gbps == 4800.0
    narrow = gpu.limits(dataclasses.replace(H200, pcie_width_max=4), None)  # a slot wired x4, no memory peak
    assert (narrow.pcie, narrow.pcie_gbps) == ("PCIe Gen5 x4", pytest.approx(63.015 / 4, abs=1e-3))
    assert "×" not in narrow.describe() and narrow.parts()[2] == ""  # nothing to set the memory against
    odd = gpu.limits(dataclasses.replace(H200, pcie_width_max=3), PEAK)  # a width PCIe does not have
    assert (odd.pcie, odd.pcie_gbps, odd.memory_gbps) == (None, None, PEAK.gbps) and odd.parts()[2] == ""
    assert "76×" in gpu.REFERENCE_LIMITS.describe()  # 4800 / 63.0


# --- the copies ---------------------------------------------------------------------------------------------


def test_the_copies_count_their_bytes_and_check_their_data(one_rank):  # noqa: F811 - the fixture
    import torch

    buffers = {
        "gpu a": torch.randint(0, 255, (8192,), dtype=torch.uint8),
        "gpu b": torch.empty(8192, dtype=torch.uint8),
        "pinned": torch.empty(8192, dtype=torch.uint8),
        "pageable": torch.ones(8192, dtype=torch.uint8),
    }
    progress = []
    p = workload.Params(sizes=(8192, 4096, 4096), repeats=2)
    out = workload.measure(p, torch.device("cpu"), buffers, lambda *a, **k: progress.append(a))
    assert [(r.link, r.host, r.size) for r in out[:5]] == [
        ("host to device", "pinned", 4096),
        ("device to host", "pinned", 4096),
        ("host to device", "pageable", 4096),
        ("device to host", "pageable", 4096),
        ("memory", "device", 4096),
    ]
    assert [r.size for r in out] == [4096] * 5 + [8192] * 5 and progress == [(1, 2, PART), (2, 2, PART)]
    for r in out:
        assert r.bytes_moved == (2 if r.link == "memory" else 1) * r.size  # a device copy reads S and writes S
        assert r.gbps == pytest.approx(r.bytes_moved / (r.time_us / 1e6) / 1e9) and len(r.gbps_repeats) == 2
        assert min(r.gbps_repeats) <= r.gbps <= max(r.gbps_repeats) and 1 <= r.iters <= p.iters
    assert buffers["gpu b"].equal(buffers["gpu a"])  # the last copy, memory, copied it all
    skipped = workload.run(one_rank, workload.Params(sizes=(4096,)))
    assert (skipped.mode, skipped.rows) == ("skipped", ()) and "no GPU" in skipped.note
    assert typed(schema.Rank, json.loads(json.dumps(dataclasses.asdict(skipped)))) == skipped


@pytest.mark.parametrize(
    "params, message",
    [({"sizes": ()}, "at least one size"), ({"sizes": (0,)}, "at least one size"), ({"repeats": 0}, "repeats")],
)
def test_bad_parameters_fail_before_launch(params, message):
    import nvtutorial

    with pytest.raises(nvtutorial.LaunchError, match=message):
        nvtutorial.launch.prepare("gpu_links", params=params)


# --- the verdict and the grade at their rules ---------------------------------------------------------------

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
    pcie_only = gpu.verdict(measured(rows()[:4]), LIM)  # no memory row: no memory sentence
    assert pcie_only.text.endswith("pin_memory=True).") and "memory" not in pcie_only.numbers
    assert "host to device 54.0 GB/s (86%), device to host 52.0 GB/s (83%) of the 63.0 GB/s" in v.text
    same = gpu.verdict(measured(rows(h2d_pageable=54.0, d2h_pageable=52.0)), LIM)  # pageable keeps up: no change
    assert same.numbers["host to device, pageable ÷ pinned"]["status"] == "no change"


def test_a_slow_or_impossible_link_says_what_to_check():
    slow = gpu.verdict(measured(rows(h2d=0.69 * 63.0154, memory=0.69 * 4916.736)), LIM)
    assert slow.numbers["host to device, pinned"]["reading"] == "below" == slow.numbers["memory"]["reading"]
    assert gpu.WHY[("pcie", "below")] in slow.text and gpu.WHY[("memory", "below")] in slow.text
    fast = gpu.verdict(measured(rows(h2d=1.03 * 63.0154, memory=1.03 * 4916.736)), LIM)
    assert fast.numbers["host to device, pinned"]["reading"] == "above the limit" == fast.numbers["memory"]["reading"]
    assert gpu.WHY[("pcie", "above the limit")] in fast.text and gpu.WHY[("memory", "above the limit")] in fast.text
    blind = gpu.verdict(measured(), gpu.Limits("NVIDIA H200", "NVML said nothing"))
    assert blind.numbers["memory"]["share"] is None and blind.numbers["host to device, pinned"]["reading"] is None
    assert "NVML gave no memory peak" in blind.text


MIB = 1 << 20
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
    assert got["reading"] == reading and got["gbps"] == pytest.approx(steady[-1][1] * LIM.pcie_gbps)
    assert got["best_share"] == pytest.approx(max(row[2] for row in steady))
    assert ("varied" in got) == (reading == "varies")


def test_a_varying_link_says_where_it_carried_its_rate():
    h100 = (pinned("device to host", 256 * MIB, 0.876, 0.876), pinned("device to host", GIB, 0.685, 0.877, 0.661))
    got = gpu.pcie_reading(measured(h100), "device to host", LIM.pcie_gbps)
    assert got["varied"] == {"size": GIB, "min": pytest.approx(0.661 * 63.0154), "max": pytest.approx(0.877 * 63.0154)}
    assert got["carried"] == {"size": 256 * MIB, "gbps": pytest.approx(0.876 * 63.0154)}
    at70 = (pinned("device to host", 256 * MIB, 0.70, 0.70), pinned("device to host", GIB, 0.6, 0.9))
    edge = gpu.pcie_reading(measured(at70), "device to host", LIM.pcie_gbps)  # a median of exactly 70 % carried it
    assert edge["reading"] == "varies" and edge["carried"] == {"size": 256 * MIB, "gbps": 0.70 * LIM.pcie_gbps}
    lone = gpu.pcie_reading(measured(h100[1:]), "device to host", LIM.pcie_gbps)  # one steady size: its best block
    assert lone["reading"] == "varies" and lone["carried"] is None
    v = gpu.verdict(measured((*rows(), *h100[:1])), LIM)  # with the other links at 1 GiB, and 256 MiB
    assert v.numbers["device to host, pinned"]["reading"] == "as expected"  # 83 % at 1 GiB, 88 % at 256 MiB
    text = gpu.verdict(measured((*rows(d2h=0.685 * 63.0154), *h100[:1])), LIM).text
    assert "device to host varies: 42.7–43.6 GB/s between blocks at 1 GiB (55.2 GB/s, 88%, at 256 MiB)" in text
    assert gpu.WHY[("pcie", "varies")] in text and gpu.WHY[("pcie", "below")] not in text
    only_small = (pinned("device to host", 4 * MIB, 0.2, 0.2), pinned("device to host", 16 * MIB, 0.8, 0.8))
    assert gpu.pcie_reading(measured(only_small), "device to host", LIM.pcie_gbps)["reading"] == "as expected"
    assert gpu.pcie_reading(measured(only_small[:1]), "device to host", LIM.pcie_gbps)["reading"] == "below"
    assert gpu.pcie_reading(measured(only_small), "device to host", None) == {
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
    run = measured((*rows()[1:], pinned("host to device", GIB, median, best)))
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
    found = (*rows(memory=3701.9, size=16 * MIB), *rows(memory=3013.6))
    run = measured(found, l2=L2)
    frame = run.frame(LIM)
    assert list(frame[frame["link"] == "memory"]["share of the limit"]) == ["in L2 (50 MiB): not the memory's", "61%"]
    v = gpu.verdict(run, LIM)
    assert v.numbers["memory"]["size"] == GIB and v.numbers["memory"]["reading"] == "below"  # 3013.6 of 4916.7
    assert v.numbers["l2_bytes"] == L2 and "the copies of 16 MiB (in L2, 3,702 GB/s) measured its 50 MiB L2" in v.text
    unknown = gpu.verdict(measured(found), LIM)  # no L2 recorded: every row is memory, the largest read
    assert unknown.numbers["memory"]["size"] == GIB and "L2" not in unknown.text
    cached = gpu.verdict(measured(rows(memory=3701.9, size=16 * MIB), l2=L2), LIM)
    assert cached.numbers["memory"] is None and "No size here is beyond it" in cached.text
    assert "memory_over_pcie" not in cached.numbers and "above the limit" not in cached.text
    above = gpu.verdict(measured(rows(memory=3701.9, size=16 * MIB)), gpu.SAVED_LIMITS["NVIDIA H100 80GB HBM3"])
    assert above.numbers["memory"]["reading"] == "above the limit"  # what an unknown L2 would have said (R1-3)


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


# --- the committed one-GPU run (reference/h100x1) ------------------------------------------------------------

H100_RUN = ROOT / "reference/h100x1/runs/gpu_links-20261207-025628-9b7836"


def test_the_committed_h100_run_through_the_notebooks_readers(monkeypatch):
    """The H100 run (review R1-3, R1-4, R1-12) read as notebook 01 reads it on a machine without a GPU: its 16 MiB
    device copy (3.70 TB/s, above HBM3's 3.35) is the L2's, device to host at 1 GiB varies (41.7-55.2 GB/s between
    blocks, 55.2 at 256 MiB) instead of blaming the link, the memory is 90 % of its peak at 1 GiB."""
    from nvtutorial.results import RunResult

    saved = RunResult.load(H100_RUN / "result.json")
    saved.run_dir = H100_RUN
    monkeypatch.setattr(report_reference, "one_gpu", lambda workload: saved)
    part = course.plan("01_hardware", "auto", {PART: ("one GPU", bwlab.gpu_links_instead())}, CPU)[PART]
    assert not part.runs and part.where == (
        "not run here; shown instead: a saved run on one NVIDIA H100 80GB HBM3 (reference/h100x1) and that GPU's limits"
    )
    lim, run = bwlab.gpu_limits(part), bwlab.gpu_links({}, part)
    assert lim == gpu.SAVED_LIMITS["NVIDIA H100 80GB HBM3"] and lim.pcie == "PCIe Gen5 x16"
    assert (
        run.l2_bytes == 50 * MIB and not run.here and run.label == "1× NVIDIA H100 80GB HBM3 · torch 2.11.0 · CUDA 13.0"
    )
    assert "NCCL" in saved.label  # R5-14: the run recorded NCCL's version; its copies made no NCCL call
    assert run.sizes() == [16 * MIB, 256 * MIB, GIB] and len(run.rows) == 15
    n = gpu.verdict(run, lim).numbers
    assert n["host to device, pinned"]["reading"] == "as expected"
    assert n["host to device, pinned"]["share"] == pytest.approx(55.3457 / 63.0154, abs=1e-4)
    d2h = n["device to host, pinned"]
    assert d2h["reading"] == "varies" and d2h["share"] == pytest.approx(43.156 / 63.0154, abs=1e-4)  # 68 %
    assert (d2h["varied"]["size"], round(d2h["varied"]["min"], 1), round(d2h["varied"]["max"], 1)) == (GIB, 41.7, 55.2)
    assert (d2h["carried"]["size"], round(d2h["carried"]["gbps"], 1)) == (256 * MIB, 55.2)
    assert n["memory"]["size"] == GIB and n["memory"]["share"] == pytest.approx(3013.555 / 3352.32, abs=1e-4)
    assert n["memory"]["reading"] == "as expected" and round(n["memory_over_pcie"]) == 54
    frame = run.frame(lim)
    memory = list(frame[frame["link"] == "memory"]["share of the limit"])
    assert memory == ["in L2 (50 MiB): not the memory's", "89%", "90%"]  # 3701.9 GB/s at 16 MiB: not shown as 110 %
    g = gpu.grade(55.0, run, lim)
    assert g.status == "right" and "A saved run of NVIDIA H100 80GB HBM3 measured: 55.35 GB/s" in g.text


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
        assert all(run.row(link, host, size) for link, host in [(r.link, r.host) for r in rows()])
    v = gpu.verdict(run, gpu.saved_limits(rank.device))
    for key in ("host to device, pinned", "device to host, pinned", "memory"):
        assert v.numbers[key]["reading"] != "above the limit", (key, v.numbers[key])
    assert v.numbers["memory_over_pcie"] > 10  # memory against PCIe: tens of times
