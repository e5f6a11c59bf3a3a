"""Notebook 01's part "one GPU's links" (``workload_gpu_links.py``, ``report_gpu.py``, ``lab.gpu_links``): where the
plan runs it, what NVML predicts, the copies' arithmetic, and each verdict at its rule (both sides of every threshold,
every branch), on synthetic runs and on the reference H200's committed run where there is one."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

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
from tests.test_bandwidth import one_rank, run_of  # noqa: F401 - one_rank is a fixture

GIB = 1 << 30
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "01_hardware.ipynb"
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


def measured(found=None, here=True):
    found = rows() if found is None else found
    result = run_of(schema.Rank("gpu", "NVIDIA H200", found, "events"), names=("NVIDIA H200",), link=None)
    return gpu.GpuLinks(found, result.label, "" if here else "not run here: no GPU", result, here=here)


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
    assert (forced.profile, forced.gpus) == ("ci", 1) and max(sizes["ci"]["gpu_links"]["sizes"]) == 4 << 20


def test_without_a_gpu_nothing_is_launched_and_the_reference_stands_in(monkeypatch, tmp_path):
    part = course.plan("01_hardware", "auto", {PART: "one GPU"}, CPU)[PART]
    monkeypatch.setattr(bwlab.launch, "run", lambda *a, **k: pytest.fail("launched without a GPU"))
    monkeypatch.setattr(report_reference, "ONE_GPU_FOLDER", tmp_path)
    none = bwlab.gpu_links({"sizes": [GIB]}, part)
    assert none.rows == () and not none.here and "no GPU visible" in none.note and "no saved run" in none.note
    assert bwlab.gpu_limits(part) == gpu.REFERENCE_LIMITS
    for name in ("gpu_links-20261207-010000-aaaaaa", "gpu_links-20261208-010000-bbbbbb"):  # the newest is read
        saved = measured(rows(h2d=50.0 if name.endswith("a") else 55.0)).result
        saved.save(tmp_path / name / "result.json")  # as a launch writes it
    shown = bwlab.gpu_links({"sizes": [GIB]}, part)
    assert not shown.here and shown.row("host to device", "pinned").gbps == 55.0 and "not run here" in shown.note
    assert "not run here" in gpu.verdict(shown, gpu.REFERENCE_LIMITS).text
    assert "The reference H200 measured (saved run)" in gpu.grade(50.0, shown, gpu.REFERENCE_LIMITS).text


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
    assert n["memory"] == {"gbps": 4200.0, "share": pytest.approx(4200 / 4916.736), "reading": "as expected"}
    assert n["memory_over_pcie"] == pytest.approx(4200 / 54.0)
    assert n["host to device, pageable ÷ pinned"] == {"ratio": pytest.approx(20 / 54, rel=1e-3), "status": "slower"}
    assert n["device to host, pageable ÷ pinned"]["status"] == "slower"
    assert "78×" in v.text and "pin_memory=True" in v.text and "below" not in v.text
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


def test_nothing_measured_says_why_and_gives_the_limits():
    run = gpu.GpuLinks((), "nothing measured", "not run here: no GPU visible to a CUDA build of torch")
    v = gpu.verdict(run, gpu.REFERENCE_LIMITS)
    assert v.status == "info" and v.numbers == {} and v.where == gpu.REFERENCE_LIMITS.source
    assert v.text.startswith(run.note) and "63.0 GB/s" in v.text and "4,800 GB/s" in v.text
    g = gpu.grade(40.0, run, gpu.REFERENCE_LIMITS)
    assert g.status == "info" and g.numbers == {"prediction": 40.0} and "must stay under 63.0 GB/s" in g.text
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


# --- the reference H200's committed run ---------------------------------------------------------------------


def test_the_committed_one_gpu_run():
    """The reference H200's run (``scripts/gpu_links_check.py``, committed under ``reference/h200x1/runs/``) read
    through the notebook's readers: every link at every size, and no copy beyond what its link can carry."""
    saved = report_reference.one_gpu("gpu_links")
    if saved is None:
        pytest.skip("no committed one-H200 run of gpu_links yet (scripts/gpu_links_check.py makes one)")
    rank = saved.metrics_as(schema.Rank)
    assert rank.mode == "gpu" and saved.env is not None and saved.env.is_gpu
    run = gpu.GpuLinks(rank.rows, saved.label, "the reference", saved)
    for size in {r.size for r in run.rows}:
        assert all(run.row(link, host, size) for link, host in [(r.link, r.host) for r in rows()])
    v = gpu.verdict(run, gpu.REFERENCE_LIMITS)
    for key in ("host to device, pinned", "device to host, pinned", "memory"):
        assert v.numbers[key]["reading"] != "above the limit", (key, v.numbers[key])
    assert v.numbers["memory_over_pcie"] > 10  # HBM against PCIe: tens of times
