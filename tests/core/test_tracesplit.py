"""nvtutorial.tracesplit: a profiler trace split into compute, communication, hidden and exposed time, and the
ranks' traces paired, on synthetic and on real CPU traces."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from nvtutorial import tracesplit
from tests.helpers.trace_files import CPU_TRACES, RANK0, RANK1, SYNTHETIC, rank_trace


def _raster(intervals, lo, hi, step=0.25):
    """Cells of width ``step`` on [lo, hi) whose centre lies in some interval (a difference array)."""
    n = round((hi - lo) / step)
    diff = np.zeros(n + 1, dtype=np.int64)
    for s, e in intervals:
        a = min(max(int(np.ceil((s - lo) / step - 0.5)), 0), n)  # first cell whose centre is >= s
        b = min(max(int(np.ceil((e - lo) / step - 0.5)), 0), n)  # first cell whose centre is >= e
        if b > a:
            diff[a] += 1
            diff[b] -= 1
    return np.cumsum(diff[:n]) > 0, step


def test_interval_operations_match_a_raster():
    rng = random.Random(7)
    for _ in range(50):
        a = [(x, x + rng.uniform(0.5, 20)) for x in (rng.uniform(0, 100) for _ in range(rng.randint(0, 12)))]
        b = [(x, x + rng.uniform(0.5, 20)) for x in (rng.uniform(0, 100) for _ in range(rng.randint(0, 12)))]
        a = [(round(s * 4) / 4, round(e * 4) / 4) for s, e in a]  # on the raster's grid: exact comparison
        b = [(round(s * 4) / 4, round(e * 4) / 4) for s, e in b]
        ma, step = _raster(a, 0, 130)
        mb, _ = _raster(b, 0, 130)
        assert tracesplit.total(a) == pytest.approx(ma.sum() * step)
        assert tracesplit.total(tracesplit.intersect(a, b)) == pytest.approx((ma & mb).sum() * step)
        assert tracesplit.total(tracesplit.subtract(a, b)) == pytest.approx((ma & ~mb).sum() * step)
        merged = tracesplit.merge(a)
        assert all(e1 < s2 for (_, e1), (s2, _) in itertools.pairwise(merged)), "merged intervals must not touch"


def test_merge_joins_touching_and_drops_empty():
    assert tracesplit.merge([(5, 6), (0, 2), (2, 3), (4, 4)]) == [(0.0, 3.0), (5.0, 6.0)]


def test_synthetic_trace_split_is_exact():
    # Step 1 (0-100 µs): compute [1,4] [5,30] [35,55] [60,75] [85,90] [96,99] = 71; NCCL [50,65] [76,82] = 21;
    #   hidden [50,55] + [60,65] = 10; exposed 11; busy 71 + 21 - 10 = 82; idle 18.
    # Step 2 (100-200 µs): compute 25 + 20 + 15 + 5 = 65; NCCL 15 + 6 + [195,200] 5 = 26 (the kernel
    #   that straddles the step's end counts up to it); hidden 10; exposed 16; busy 81; idle 19.
    # The kernel at 250-260 µs is after the last step: not counted. Averages per step, in ms:
    s = tracesplit.split(SYNTHETIC)
    assert s.source == "gpu" and s.steps == 2 and s.rank == 0
    assert s.step_ms == pytest.approx(0.100)
    assert s.compute_ms == pytest.approx(0.068)
    assert s.comm_ms == pytest.approx(0.0235)
    assert s.hidden_ms == pytest.approx(0.010)
    assert s.exposed_ms == pytest.approx(0.0135)
    assert s.idle_ms == pytest.approx(0.0185)
    assert s.compute_only_ms + s.hidden_ms + s.exposed_ms + s.idle_ms == pytest.approx(s.step_ms)
    assert s.comm_share == pytest.approx(0.235)
    assert s.hidden_fraction == pytest.approx(10 / 23.5)


def test_synthetic_trace_phases_follow_the_launch():
    # The kernel [96,99] runs during the optimizer's range but was launched in backward: it
    # counts for backward (found through its launch's correlation id).
    s = tracesplit.split(SYNTHETIC)
    assert s.phase_ms == pytest.approx({"forward": (28 + 25) / 2e3, "backward": (38 + 35) / 2e3, "optimizer": 5e-3})


def test_gpu_side_annotations_are_not_steps():
    act = tracesplit.classify(SYNTHETIC)
    assert act.steps == [(0.0, 100.0), (100.0, 200.0)]  # the gpu_user_annotation copy is ignored


def test_skip_first_step():
    s = tracesplit.split(SYNTHETIC, skip_first=1)
    assert s.steps == 1 and s.compute_ms == pytest.approx(0.065) and s.exposed_ms == pytest.approx(0.016)


def test_trace_without_steps_is_one_window():
    data = tracesplit.load(SYNTHETIC)
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "user_annotation"]
    s = tracesplit.split(data)
    assert s.steps == 1
    assert s.step_ms == pytest.approx((260 - 1) / 1e3)  # first GPU event to last


def test_empty_trace_is_an_error():
    with pytest.raises(ValueError, match="neither compute nor communication"):
        tracesplit.split({"traceEvents": []})


def _raster_split(path):
    """The same quantities, computed independently on a 0.01 µs grid."""
    data = tracesplit.load(path)
    ev = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in ev if e["name"] == "train_step" and e["cat"] == "user_annotation")
    lo = step["ts"]  # work relative to the step's start: absolute times (~1e12 µs) lose the grid's precision
    hi = step["dur"]
    comm = [(e["ts"] - lo, e["ts"] + e["dur"] - lo) for e in ev if e["name"].startswith("gloo:")]
    compute = [
        (e["ts"] - lo, e["ts"] + e["dur"] - lo)
        for e in ev
        if e["cat"] == "cpu_op" and not e["name"].startswith(("c10d::", "gloo:", "nccl:", "record_param_comms"))
    ]
    c, st = _raster(compute, 0.0, hi, 0.01)
    m, _ = _raster(comm, 0.0, hi, 0.01)
    ms = st / 1e3
    return {
        "step_ms": len(c) * ms,
        "compute_ms": c.sum() * ms,
        "comm_ms": m.sum() * ms,
        "hidden_ms": (c & m).sum() * ms,
        "idle_ms": (~(c | m)).sum() * ms,
    }


@pytest.mark.parametrize("path", CPU_TRACES, ids=["rank0", "rank1"])
def test_real_cpu_trace_split(path):
    s = tracesplit.split(path)
    assert s.source == "cpu" and s.steps == 1
    assert s.comm_ms > 0, "gloo's collective events were not found"
    assert s.compute_ms > 0
    assert set(s.phase_ms) == {"forward", "backward", "optimizer"}
    assert s.compute_only_ms + s.hidden_ms + s.exposed_ms + s.idle_ms == pytest.approx(s.step_ms)
    ref = _raster_split(path)
    for key, value in ref.items():
        assert getattr(s, key) == pytest.approx(value, abs=0.01), key


def test_pairing_splits_waiting_from_transfer():
    w0, w1 = tracesplit.pair([RANK0, RANK1])
    # rank 0: waits 40-60 (step 1), transfers 60-70 and 150-165; per step: wait 10, transfer 12.5 (µs).
    assert (w0.rank, w0.steps, w0.collectives) == (0, 2, 1)
    assert w0.wait_ms == pytest.approx(0.010) and w0.transfer_ms == pytest.approx(0.0125)
    # rank 1: waits 130-150 (step 2), transfers 60-70 and 150-165.
    assert w1.wait_ms == pytest.approx(0.010) and w1.transfer_ms == pytest.approx(0.0125)
    assert w0.last_share == 0.5 and w1.last_share == 0.5
    for w, trace in ((w0, RANK0), (w1, RANK1)):
        s = tracesplit.split(trace)
        assert w.comm_ms == pytest.approx(s.comm_ms)  # wait + transfer = the NCCL kernels' time
        assert w.wait_ms + w.transfer_ms == pytest.approx(w.comm_ms)
        assert w.exposed_wait_ms + w.exposed_transfer_ms == pytest.approx(s.exposed_ms)
    # Each rank's own kernel time (22.5 µs per step) counts waiting; the least of the ranks' totals
    # is no better here, since each rank waited once: only pairing finds the 12.5 µs on the wire.
    assert min(tracesplit.split(t).comm_ms for t in (RANK0, RANK1)) == pytest.approx(0.0225)


def test_pairing_reads_each_trace_on_its_own_base():
    shifted = rank_trace(
        1,
        compute=[(-1000 + s, -1000 + e) for s, e in [(0, 60), (100, 130)]],
        comm=[(-1000 + 60, -1000 + 70), (-1000 + 130, -1000 + 165)],
        steps=[(-1000, -900), (-900, -800)],
        base_ns=1_000_000_000 + 1_000_000,
    )  # 1000 µs later
    assert [w.transfer_ms for w in tracesplit.pair([RANK0, shifted])] == pytest.approx([0.0125, 0.0125])


def test_pairing_refuses_what_it_cannot_match():
    with pytest.raises(ValueError, match="different hosts"):
        tracesplit.pair([RANK0, rank_trace(1, [], [(60, 70), (130, 165)], [(0, 100), (100, 200)], host="other")])
    with pytest.raises(ValueError, match="cannot be paired"):
        tracesplit.pair([RANK0, rank_trace(1, [], [(60, 70)], [(0, 100), (100, 200)])])
    with pytest.raises(ValueError, match="same steps"):
        tracesplit.pair([RANK0, rank_trace(1, [], [(60, 70)], [(0, 100)])])
    with pytest.raises(ValueError, match="at least two ranks"):
        tracesplit.pair([RANK0])


def test_split_steps_are_the_repeats_of_the_average():
    steps = tracesplit.split_steps(SYNTHETIC)
    assert [s.steps for s in steps] == [1, 1]
    assert [s.exposed_ms for s in steps] == pytest.approx([0.011, 0.016])
    avg = tracesplit.split(SYNTHETIC)
    for key in ("step_ms", "compute_ms", "comm_ms", "hidden_ms", "exposed_ms", "idle_ms"):
        assert sum(getattr(s, key) for s in steps) / 2 == pytest.approx(getattr(avg, key)), key


def test_real_cpu_traces_pair():
    w0, w1 = tracesplit.pair(CPU_TRACES)
    assert w0.collectives == w1.collectives == 1
    assert w0.wait_ms == 0 and w1.wait_ms > 0  # rank 1 reached gloo's all-reduce first and waited for rank 0
    for w, path in zip((w0, w1), CPU_TRACES):
        assert w.comm_ms == pytest.approx(tracesplit.split(path).comm_ms)
