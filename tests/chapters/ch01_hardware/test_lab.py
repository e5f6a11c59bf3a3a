"""Chapter 1's lab: what it launches on each machine, the two-process runs, the one GPU's links part."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest

import nvtutorial
from nvtutorial import course
from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report as bandwidth
from nvtutorial.chapters.ch01_hardware import report_gpu as gpu
from nvtutorial.chapters.ch01_hardware import report_lab as labreport
from nvtutorial.chapters.ch01_hardware import report_reference, schema_allreduce, schema_sendrecv
from nvtutorial.machine import hardware, nccl_debug
from tests.helpers.gpu_links_runs import GIB, H200, MIB, PART, PEAK, link_rows, measured
from tests.helpers.launch import requires_two_gpus
from tests.helpers.paths import ROOT


def test_device_copy_without_gpus_launches_nothing(runs_dir):
    import torch

    if torch.version.cuda and hardware.gpu_count() >= 2:
        pytest.skip("this machine has 2 GPUs: device_copy launches there")
    copy = bwlab.device_copy({"max_bytes": 1 << 20})
    assert copy.result is None and copy.rows == () and "needs 2 GPUs" in copy.note
    frame = copy.frame()  # the table says why, in a row of its own
    assert frame.to_dict("records") == [{"path": "cuda:0 → cuda:1", "note": copy.note}]
    assert (
        copy.verdict().numbers["reference_gbps"] == 394.0 and copy.duplex().status == "info" and not runs_dir.exists()
    )


def test_two_process_allreduce_and_sendrecv(runs_dir):
    """Real launches: both ranks agree on the table; for n = 2 busbw = algbw; send/recv both ways adds up."""
    res = nvtutorial.run(
        "allreduce_bench",
        params={
            "min_bytes": 1024,
            "max_bytes": 65536,
            "factor": 8,
            "warmup": 2,
            "iters": 3,
            "repeats": 2,
            "wire_bytes": 4096,
        },
        env=bwlab.run_env(bwlab.DEBUG_ENV),
        output="none",
        timeout=120,
    )
    rank0, rank1 = res.ranks_as(schema_allreduce.Rank)
    rows0 = rank0.rows
    assert rows0 == rank1.rows  # every rank reports the slowest rank's time
    assert [r.size for r in rows0] == [1024, 8192, 65536]
    assert all(r.correct and r.busbw == pytest.approx(r.algbw) for r in rows0)
    assert rank1.wire is None  # only rank 0 reports the wire
    report = nccl_debug.read_logs(res.log_files, backend=res.env.backend)
    if res.env.is_gpu:
        assert report.transport is not None, "NCCL_DEBUG=INFO was set, the logs must name a transport"
    else:
        assert report.summary == "gloo: no NCCL" and rank0.wire is not None and rank0.wire.available is False
    res = nvtutorial.run(
        "sendrecv_bench",
        params={"min_bytes": 1024, "max_bytes": 16384, "factor": 16, "warmup": 2, "iters": 3, "repeats": 2},
        output="none",
        timeout=120,
    )
    rows = res.metrics_as(schema_sendrecv.Rank).rows
    assert [(r.direction, r.size) for r in rows] == [
        ("one way", 1024),
        ("one way", 16384),
        ("both ways", 1024),
        ("both ways", 16384),
    ]
    assert all(r.total_gbps == pytest.approx(r.algbw * (2 if r.direction == "both ways" else 1)) for r in rows)
    duplex = bandwidth.duplex_verdict(res)
    assert duplex.status == "info" and duplex.numbers["nccl_status"] in ("faster", "slower", "no change")
    assert all(len(r.busbw_repeats) == 2 for r in rows)


@requires_two_gpus
def test_on_two_gpus_the_logs_name_the_transport_and_the_counters_match_the_ring(runs_dir):
    """GPU only: NCCL_P2P_DISABLE=1 moves NCCL from P2P to SHM; over NVLink, GPU 0 sends about S per all-reduce."""
    params = {
        "min_bytes": 1 << 20,
        "max_bytes": 64 << 20,
        "factor": 8,
        "repeats": 2,
        "wire_bytes": 256 << 20,
        "wire_iters": 4,
    }
    lab = bwlab.run_lab({"default": params, "P2P off": params}, paths=bwlab.LAB_PATHS[:2])
    assert [run.transport.transport for run in lab] == ["P2P", "SHM"]
    assert labreport.lab_ratio(lab, "default", "P2P off")[0] > 1.0
    wire = bandwidth.sweep_of(lab[0].result).wire
    assert wire is not None
    if lab[0].result.env.link and lab[0].result.env.link.startswith("NV") and wire.available:
        assert wire.tx_ratio is not None and 0.9 <= wire.tx_ratio <= 1.3, wire


NOTEBOOK = ROOT / "notebooks" / "01_hardware.ipynb"


ONE = course.Machine(("NVIDIA H200",), 16, "2.28.9")


TWO = course.Machine(("NVIDIA H200", "NVIDIA H200"), 32, "2.28.9")


CPU = course.Machine((), 2)


def sizes_of_the_notebook() -> dict:
    """The notebook's parameters cell, read as papermill would (literals only)."""
    nb = json.loads(NOTEBOOK.read_text())
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    tree = ast.parse("".join(cell["source"]))
    return next(ast.literal_eval(n.value) for n in tree.body if n.targets[0].id == "SIZES")  # type: ignore[attr-defined]


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
        saved = measured(link_rows(h2d=50.0 if name.endswith("a") else 55.0)).result  # the newest, by name, is read
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


@pytest.mark.parametrize(
    "params, message",
    [({"sizes": ()}, "at least one size"), ({"sizes": (0,)}, "at least one size"), ({"repeats": 0}, "repeats")],
)
def test_bad_parameters_fail_before_launch(params, message):
    import nvtutorial

    with pytest.raises(nvtutorial.LaunchError, match=message):
        nvtutorial.launch.prepare("gpu_links", params=params)


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
    assert run.l2_bytes == 50 * MIB and not run.here
    # RR12-6: every label read from the saved run says so, as the other saved-run verdicts do
    saved_label = "1× NVIDIA H100 80GB HBM3 · torch 2.11.0 · CUDA 13.0: a saved run "
    assert run.label == saved_label + f"(reference/h100x1/runs/{H100_RUN.name}), not this machine"
    assert gpu.verdict(run, lim).where == run.label == gpu.grade(55.0, run, lim).where == run.frame(lim).attrs["where"]
    assert "NCCL" in saved.label  # R5-14: the run recorded NCCL's version; its copies made no NCCL call
    assert run.sizes() == [16 * MIB, 256 * MIB, GIB] and len(run.rows) == 15
    n = gpu.verdict(run, lim).numbers
    in_l2 = "16 MiB (in L2, 3,702 GB/s) measured its 50 MiB L2 cache, not the memory: their bytes read and written fit"
    assert in_l2 + " in it." in gpu.verdict(run, lim).text  # RR13-13: 32 MiB fit in 50 MiB
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


def test_the_reference_data_is_where_the_tests_expect_it(runs_dir):
    assert hardware.reference_output("nvidia-smi-topo-m.txt").is_file() and report_reference.available()
    # Without GPUs, notebook 02's A/B and notebook 01's send/recv are the reference machine's saved runs
    ab = bwlab.source_ab({})
    assert [run.result.label for run in ab] == [ab[0].result.label] * 3 and "H200" in ab[0].result.label
    assert bwlab.point_to_point({}).run_dir == report_reference.FOLDER / report_reference.RUNS["sendrecv"]
    assert not runs_dir.exists()  # nothing was launched
