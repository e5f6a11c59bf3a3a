"""Chapter 1's workloads: the all-reduce, send/recv and copy benches in process, their parameters, the wire
bytes, and the links' workload (gpu_links)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import nvtutorial
from nvtutorial import nvml as nvml_mod
from nvtutorial import runtime
from nvtutorial.chapters.ch01_hardware import schema_allreduce, schema_p2p
from nvtutorial.chapters.ch01_hardware import schema_gpu_links as schema
from nvtutorial.chapters.ch01_hardware import workload_allreduce as allreduce_bench
from nvtutorial.chapters.ch01_hardware import workload_gpu_links as workload
from nvtutorial.chapters.ch01_hardware import workload_p2p as p2p_copy
from nvtutorial.chapters.ch01_hardware import workload_sendrecv as sendrecv_bench
from nvtutorial.results import typed
from tests.helpers.gpu_links_runs import PART


def test_allreduce_bench_in_process(one_rank):
    p = allreduce_bench.Params(
        min_bytes=1000, max_bytes=40000, factor=4, dtype="float16", warmup=2, iters=3, repeats=2, wire_bytes=4096
    )
    out = allreduce_bench.run(one_rank, p)
    assert isinstance(out, schema_allreduce.Rank)
    sizes = [r.size for r in out.rows]
    assert sizes == [1000, 4000, 16000, 40000] and all(s % 2 == 0 for s in sizes)
    assert all(r.correct and r.algbw > 0 and r.busbw == 0.0 for r in out.rows)  # n = 1: 2(n−1)/n = 0
    assert all(r.busbw_min <= r.busbw <= r.busbw_max and len(r.busbw_repeats) == 2 for r in out.rows)
    assert all(r.dtype == "float16" and r.count == r.size // 2 for r in out.rows)
    assert (out.largest_size, out.busbw_at_largest, out.timer) == (40000, 0.0, "perf_counter")
    assert out.wire is not None and out.wire.available is False and "CPU" in (out.wire.reason or "")
    assert typed(schema_allreduce.Rank, json.loads(json.dumps(dataclasses.asdict(out)))) == out  # JSON and back


def test_sendrecv_needs_pairs(one_rank):
    with pytest.raises(ValueError, match="even number of processes"):
        sendrecv_bench.run(one_rank, sendrecv_bench.Params(max_bytes=4096))


def test_p2p_copy_on_cpu_is_a_labelled_simulation(one_rank):
    out = p2p_copy.run(one_rank, p2p_copy.Params(min_bytes=1 << 16, max_bytes=1 << 18, repeats=2))
    assert out.mode == "simulation" and len(out.rows) == 2 and "stands in" in out.note
    assert all("simulation" in r.path and r.gbps > 0 and len(r.gbps_repeats) == 2 for r in out.rows)
    assert all(r.mode == "one way" and r.busy_share is None for r in out.rows)
    assert typed(schema_p2p.Rank, json.loads(json.dumps(dataclasses.asdict(out)))) == out
    other = dataclasses.replace(one_rank, rank=1, world_size=2)
    assert p2p_copy.run(other, p2p_copy.Params()) == schema_p2p.Rank("waits", note="waits while rank 0 copies")


@pytest.mark.parametrize(
    "workload, params, message",
    [
        ("allreduce_bench", {"min_bytes": 0}, "min_bytes"),
        ("allreduce_bench", {"dtype": "float8"}, "float8"),
        ("allreduce_bench", {"factor": 1}, "factor"),
        ("sendrecv_bench", {"directions": "sideways"}, "sideways"),
        ("p2p_copy", {"src": 1, "dst": 1}, "must differ"),
    ],
)
def test_bad_parameters_fail_before_launch(workload, params, message):
    with pytest.raises(nvtutorial.LaunchError, match=message):
        nvtutorial.launch.prepare(workload, params=params)


class _GpuLikeContext(runtime.Context):
    """A one-rank CPU group that takes the GPU branch of wire_bytes (NVML faked)."""

    @property
    def is_gpu(self) -> bool:
        return True

    def sync(self) -> None:
        pass

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()


def test_wire_bytes_counts_what_the_links_carried(one_rank, monkeypatch):
    import contextlib

    import torch
    import torch.distributed as dist

    from tests.helpers.fake_nvml import fake_nvml

    nvml = fake_nvml(links=18, counters={(0, f, k): 0 for f in (138, 139) for k in range(18)})
    monkeypatch.setattr(nvml_mod, "nvml", contextlib.contextmanager(lambda: (yield nvml)))
    monkeypatch.setattr(allreduce_bench, "_nvml_handle", lambda pynvml, ctx: 0)
    size = 1 << 20
    real = dist.all_reduce

    def all_reduce_on_the_wire(tensor, *args, **kwargs):  # every link carries 1/18 of S each way
        for k in range(18):
            nvml.counters[(0, 138, k)] += size // 1024 // 18
            nvml.counters[(0, 139, k)] += size // 1024 // 18
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", all_reduce_on_the_wire)
    ctx = _GpuLikeContext(
        rank=0, local_rank=0, world_size=2, backend="gloo", device=torch.device("cpu"), run_dir=one_rank.run_dir
    )
    wire = allreduce_bench.wire_bytes(ctx, torch.zeros(size // 4), size, iters=3)
    assert wire is not None and wire.available and wire.links_read == 18 and wire.links_carrying == 18
    assert wire.expected_bytes_per_op == size  # 2(n−1)/n · S with n = 2
    assert wire.tx_ratio == pytest.approx(18 * (size // 1024 // 18) * 1024 / size) and wire.reason is None
    assert wire.tx_bytes_per_link_per_op is not None and len(wire.tx_bytes_per_link_per_op) == 18
    no_links = fake_nvml(links=0)
    monkeypatch.setattr(nvml_mod, "nvml", contextlib.contextmanager(lambda: (yield no_links)))
    wire = allreduce_bench.wire_bytes(ctx, torch.zeros(size // 4), size, iters=1)
    assert wire is not None and wire.available is False and "no active NVLink" in (wire.reason or "")
    assert wire.links_read is None and wire.tx_ratio is None


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
