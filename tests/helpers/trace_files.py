"""Profiler traces for the tests of tracesplit, of chapter 5's readers, its lab and its workload: the committed
files (tests/fixtures/traces), traces made up by hand, nvidia-smi dmon output, a fake sampler."""

from __future__ import annotations

from nvtutorial.machine import telemetry
from tests.helpers import paths as test_paths

FIXTURES = test_paths.FIXTURES / "traces"


SYNTHETIC = FIXTURES / "synthetic_gpu.json"


CPU_TRACES = [FIXTURES / "cpu_gloo_rank0.json.gz", FIXTURES / "cpu_gloo_rank1.json.gz"]


DMON_PLAIN = """# gpu     sm    mem    enc    dec    jpg    ofa
# Idx      %      %      %      %      %      %
    0     97     41      0      0      0      0
    1     95     40      0      0      0      0
"""


def fake_sampler():
    t = telemetry.Sampler(interval=0.1)
    t.available = True
    t.gpu_names = ["GPU A", "GPU B"]
    t._handles = [object(), object()]
    t.started_at = 0.0
    for gpu in (0, 1):  # 2 GiB sent per GPU between 10 s and 12 s (counters in KiB)
        t._raw += [
            telemetry._Raw(10.0, gpu, 90, 10, 1, 300, 0, 0),
            telemetry._Raw(12.0, gpu, 90, 10, 1, 300, 2 * 2**20, 2 * 2**20),
        ]
    t.dmon_text = DMON_PLAIN
    return t


def rank_trace(rank, compute, comm, steps, base_ns=1_000_000_000, host="node"):
    """A torch.profiler-like GPU trace (µs) of one rank: kernels, NCCL kernels and train_step ranges."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "train_step", "pid": 1, "tid": 1, "ts": s, "dur": e - s}
        for s, e in steps
    ]
    ev += [
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": s, "dur": e - s} for s, e in compute
    ]
    ev += [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
            "pid": 0,
            "tid": 13,
            "ts": s,
            "dur": e - s,
        }
        for s, e in comm
    ]
    return {"traceEvents": ev, "distributedInfo": {"rank": rank}, "baseTimeNanoseconds": base_ns, "host_name": host}


# Two ranks, two steps of 100 µs. Step 1: rank 0 joins the all-reduce at 40, rank 1 at 60 (rank 1's
# backward runs longer); both finish at 70. Step 2: rank 1 joins first (at 130), rank 0 at 150; both end at 165.
RANK0 = rank_trace(0, compute=[(0, 40), (100, 150)], comm=[(40, 70), (150, 165)], steps=[(0, 100), (100, 200)])


RANK1 = rank_trace(1, compute=[(0, 60), (100, 130)], comm=[(60, 70), (130, 165)], steps=[(0, 100), (100, 200)])


def notebook_sizes(name: str) -> dict:
    """``SIZES`` of a notebook's parameters cell, as the notebook has it."""
    from tests.helpers import notebook_cells

    return notebook_cells.parameters(name.removesuffix(".ipynb"))["SIZES"]
