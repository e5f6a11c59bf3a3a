"""Chapter 1's lab: what it launches on each machine, the two-process runs, the one GPU's links part."""

from __future__ import annotations

import pytest

import nvtutorial
from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report as bandwidth
from nvtutorial.chapters.ch01_hardware import report_lab as labreport
from nvtutorial.chapters.ch01_hardware import schema_allreduce, schema_sendrecv
from nvtutorial.machine import hardware, nccl_debug
from tests.helpers.launch import requires_two_gpus


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
