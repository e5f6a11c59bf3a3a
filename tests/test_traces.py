"""The time split of a DDP step (nvtutorial.tracesplit, nvtutorial.chapters.ch05_profiling.report_traces), telemetry
parsing, and the profiling workload.

Fixtures (tests/fixtures/traces/):
* ``synthetic_gpu.json``: a hand-built torch.profiler-style trace of two steps whose overlaps
  are known, so the expected numbers below are exact (worked out in the comments);
* ``cpu_gloo_rank{0,1}.json.gz``: one ``train_step`` of a real 2-process gloo run of
  ``profile_step`` (tiny UNet), trimmed to the outermost CPU operators; checked against an
  independent computation of the same quantities on a 0.01 µs grid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import random
import sqlite3
import time
import types
from pathlib import Path

import numpy as np
import pytest

import nvtutorial
from nvtutorial import course, tracesplit
from nvtutorial.chapters.ch05_profiling import lab as profiling
from nvtutorial.chapters.ch05_profiling import report as profreport
from nvtutorial.chapters.ch05_profiling import report_monitoring as monitoring
from nvtutorial.chapters.ch05_profiling import report_traces as traces
from nvtutorial.chapters.ch05_profiling import schema
from nvtutorial.machine import telemetry
from nvtutorial.teach import check
from tests.helpers import paths as test_paths
from tests.helpers import profile_step_results as made
from tests.helpers.typed_runs import run_of

FIXTURES = test_paths.FIXTURES / "traces"
SYNTHETIC = FIXTURES / "synthetic_gpu.json"
CPU_TRACES = [FIXTURES / "cpu_gloo_rank0.json.gz", FIXTURES / "cpu_gloo_rank1.json.gz"]


# --------------------------------------------------------------------------- interval arithmetic


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


# --------------------------------------------------------------------------- the synthetic GPU trace


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


# --------------------------------------------------------------------------- the real CPU (gloo) traces


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


def test_cpu_traces_know_their_ranks_and_share_a_clock():
    assert [tracesplit.classify(p).rank for p in CPU_TRACES] == [0, 1]
    tl = traces.timeline(CPU_TRACES)
    assert set(tl["rank"]) == {0, 1}
    assert {"step", "phase", "compute", "wait", "transfer"} <= set(tl["kind"])
    steps = tl[tl["kind"] == "step"].set_index("rank")
    assert steps["start_ms"].min() == 0.0  # the common origin: the earlier rank's step start
    for rank in (0, 1):
        sub = tl[tl["rank"] == rank]
        s0, s1 = steps.loc[rank, "start_ms"], steps.loc[rank, "end_ms"]
        assert (sub["start_ms"] >= s0 - 1e-9).all() and (sub["end_ms"] <= s1 + 1e-9).all()
    aligned = traces.timeline(CPU_TRACES, align="step")
    assert (aligned[aligned["kind"] == "step"]["start_ms"] == 0).all()


def test_split_table_reads_a_folder(tmp_path):
    for r, p in enumerate(CPU_TRACES):
        (tmp_path / f"trace_rank{r}.json.gz").write_bytes(p.read_bytes())
    assert [p.name for p in traces.rank_traces(tmp_path, "trace_rank*.json.gz")] == [
        "trace_rank0.json.gz",
        "trace_rank1.json.gz",
    ]
    table = traces.split_table(traces.rank_traces(tmp_path, "trace_rank*.json.gz"))
    assert list(table.index) == [0, 1]
    assert (table["comm_share"] > 0).all()


# --------------------------------------------------------------------------- Nsight Systems


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
    assert [r["name"][:10] for r in rows] == ["sm90_xmma_", "ncclDevKer"]
    assert traces.kernel_summary_split(rows) == {"compute_ms": pytest.approx(0.006), "comm_ms": pytest.approx(0.004)}
    assert traces.parse_kernel_summary("no table here") == []


def test_nsys_missing_says_so_and_shows_the_command(monkeypatch):
    monkeypatch.setattr(profiling.shutil, "which", lambda name: None)
    res = profiling.run_nsys("profile_step", params={"model": "tiny", "profiler": False})
    assert not res.available and "not on PATH" in res.reason
    assert res.command[:2] == ["nsys", "profile"] and "torch.distributed.run" in " ".join(res.command)
    cmd = profiling.nsys_display_command("profile_step", {"model": "tiny", "profiler": False})
    assert cmd.startswith("nsys profile --trace=cuda,nvtx") and "--set model=tiny --set profiler=False" in cmd


def test_nsys_display_command_rejects_bad_parameters():
    with pytest.raises(Exception, match="batch_size"):
        profiling.nsys_display_command("profile_step", {"batch_size": 0})


# --------------------------------------------------------------------------- telemetry

DMON = """# gpu     sm    mem    enc    dec    jpg    ofa
# Idx      %      %      %      %      %      %
    0     97     41      0      0      0      0
    1     95     40      0      0      0      0
"""


def test_parse_dmon_and_its_columns():
    frame = telemetry.parse_dmon(DMON)
    assert list(frame.columns) == ["gpu", "sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert frame["sm"].tolist() == [97, 95]
    assert telemetry.dmon_columns(DMON) == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert not telemetry.shows_nvlink(telemetry.dmon_columns(DMON))
    assert telemetry.shows_nvlink(["sm", "nvlrx"])
    assert telemetry.parse_dmon("").empty


def test_sampler_without_nvml_yields_an_empty_frame_with_a_reason(monkeypatch):
    import pynvml

    def fail():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with telemetry.sample(interval=0.05) as t:
        pass
    assert not t.available and "NVML is unavailable" in t.reason
    frame = t.frame()
    assert frame.empty and list(frame.columns) == telemetry.COLUMNS and frame.attrs["reason"] == t.reason
    assert t.summary() == t.reason


def test_nvlink_rates_from_cumulative_counters():
    t = telemetry.Sampler(interval=0.1)
    t.started_at = 100.0
    t._handles = [object()]
    # GPU 0 sends 1 GiB in 0.5 s (counters in KiB), then nothing; a counter reset gives no rate.
    for time_s, tx, rx in ((100.0, 0, 0), (100.5, 2**20, 2**19), (101.0, 2**20, 2**19), (101.5, 10, 10)):
        t._raw.append(telemetry._Raw(time_s, 0, 50.0, 10.0, 1000.0, 300.0, tx, rx))
    f = t.frame()
    assert np.isnan(f["nvlink_tx_gbs"].iloc[0])
    assert f["nvlink_tx_gbs"].iloc[1] == pytest.approx(2**30 / 0.5 / 1e9)
    assert f["nvlink_rx_gbs"].iloc[1] == pytest.approx(2**29 / 0.5 / 1e9)
    assert f["nvlink_tx_gbs"].iloc[2] == 0
    assert np.isnan(f["nvlink_tx_gbs"].iloc[3])
    assert t.nvlink_bytes(99.0, 101.0)[0]["tx_bytes"] == 2**30
    assert f["t_s"].tolist() == [0.0, 0.5, 1.0, 1.5]


def test_sampler_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        telemetry.Sampler(interval=0)


DMON_T = """#Time        gpu     sm    mem    enc    dec    jpg    ofa
#HH:MM:SS    Idx      %      %      %      %      %      %
 10:00:01      0      0      0      0      0      0      0
 10:00:01      1      0      0      0      0      0      0
 10:00:02      0     99     58      0      0      0      0
 10:00:02      1     98     55      0      0      0      0
"""


def test_parse_dmon_with_its_time_column():
    day = time.mktime((2026, 11, 30, 12, 0, 0, 0, 0, -1))
    frame = telemetry.parse_dmon(DMON_T, day=day)
    assert list(frame.columns)[:3] == ["time", "gpu", "sm"] and frame["sm"].tolist() == [0, 0, 99, 98]
    assert frame["t"].iloc[2] - frame["t"].iloc[0] == 1.0
    assert frame["t"].iloc[0] == time.mktime((2026, 11, 30, 10, 0, 1, 0, 0, -1))
    assert telemetry.dmon_columns(DMON_T) == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    probe_start = time.mktime((2026, 11, 30, 10, 0, 1, 0, 0, -1)) + 0.2
    assert monitoring.dmon_busy_during(DMON_T, probe_start, probe_start + 0.9, day) == 99
    assert monitoring.dmon_busy_during(DMON, probe_start, probe_start + 0.9, day) is None  # no time column


def test_sampler_describes_what_it_measures_and_saves(tmp_path):
    t = _fake_sampler()
    lines = t.describe()
    assert "every 0.1 s" in lines[0] and any(
        line.startswith("sm_util_pct: ") and "1/6 s to 1 s" in line for line in lines
    )
    assert any(line.startswith("nvlink_tx_gbs: ") and "cumulative counters" in line for line in lines)
    saved = json.loads(t.save(tmp_path / "telemetry.json").read_text())
    assert saved["interval_s"] == 0.1 and len(saved["samples"]) == 4 and saved["dmon_text"] == DMON
    assert saved["samples"][0]["nvlink_tx_gbs"] is None  # the first sample has no rate: JSON null, not NaN
    off = telemetry.Sampler(interval=0.5)
    off.reason = "NVML is unavailable here"
    assert off.describe() == ["no telemetry: NVML is unavailable here"]


def _fake_sampler():
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
    t.dmon_text = DMON
    return t


def test_probe_traffic_and_the_c13_verdict():
    t = _fake_sampler()
    res = run_of(made.rank(probe=made.probe(start=9.9, end=12.1, sent=2 * 2**30)), label="here")
    rows = profreport.probe_traffic(t, res)
    assert [r["gpu"] for r in rows] == [0, 1] and rows[0]["sent_over_expected"] == pytest.approx(1.0)
    v = monitoring.verdict_c13_from(t, res, rows)
    assert v.status == "wrong" and v.numbers["dmon_columns"] == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert v.numbers["sent_over_expected"] == pytest.approx(1.0) and v.where == "here"
    if v.numbers["sm_during_probe"] is not None:
        assert "not what the link carried" in v.text
    # A CPU run's probe was a gloo all-reduce: dmon watched an idle GPU, so its reading decides nothing.
    res.env = types.SimpleNamespace(is_gpu=False)
    cpu = monitoring.verdict_c13_from(t, res, rows)
    assert cpu.status == "unverifiable" and cpu.numbers["sm_during_probe"] is None and "idle GPU" in cpu.text
    t.dmon_text, t.dmon_reason = "", "nvidia-smi not found"
    nodriver = monitoring.verdict_c13_from(t, res, rows)
    assert (
        nodriver.status == "unverifiable"
        and "idle GPU" not in nodriver.text
        and "nvidia-smi not found" in nodriver.text
    )
    assert monitoring.verdict_c13(DMON + "", [2**30]).status == "wrong"
    assert monitoring.verdict_c13("# gpu sm nvlrx\n# Idx % MB/s\n 0 1 2\n", [2**30]).status == "holds"
    none = monitoring.verdict_c13("", [], reason="NVML is unavailable here")
    assert none.status == "unverifiable" and "NVML is unavailable here" in none.text


# --------------------------------------------------------------------------- waiting or moving data


def _rank_trace(rank, compute, comm, steps, base_ns=1_000_000_000, host="node"):
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
RANK0 = _rank_trace(0, compute=[(0, 40), (100, 150)], comm=[(40, 70), (150, 165)], steps=[(0, 100), (100, 200)])
RANK1 = _rank_trace(1, compute=[(0, 60), (100, 130)], comm=[(60, 70), (130, 165)], steps=[(0, 100), (100, 200)])


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
    shifted = _rank_trace(
        1,
        compute=[(-1000 + s, -1000 + e) for s, e in [(0, 60), (100, 130)]],
        comm=[(-1000 + 60, -1000 + 70), (-1000 + 130, -1000 + 165)],
        steps=[(-1000, -900), (-900, -800)],
        base_ns=1_000_000_000 + 1_000_000,
    )  # 1000 µs later
    assert [w.transfer_ms for w in tracesplit.pair([RANK0, shifted])] == pytest.approx([0.0125, 0.0125])


def test_pairing_refuses_what_it_cannot_match():
    with pytest.raises(ValueError, match="different hosts"):
        tracesplit.pair([RANK0, _rank_trace(1, [], [(60, 70), (130, 165)], [(0, 100), (100, 200)], host="other")])
    with pytest.raises(ValueError, match="cannot be paired"):
        tracesplit.pair([RANK0, _rank_trace(1, [], [(60, 70)], [(0, 100), (100, 200)])])
    with pytest.raises(ValueError, match="same steps"):
        tracesplit.pair([RANK0, _rank_trace(1, [], [(60, 70)], [(0, 100)])])
    with pytest.raises(ValueError, match="at least two ranks"):
        tracesplit.pair([RANK0])


def test_split_steps_are_the_repeats_of_the_average():
    steps = tracesplit.split_steps(SYNTHETIC)
    assert [s.steps for s in steps] == [1, 1]
    assert [s.exposed_ms for s in steps] == pytest.approx([0.011, 0.016])
    avg = tracesplit.split(SYNTHETIC)
    for key in ("step_ms", "compute_ms", "comm_ms", "hidden_ms", "exposed_ms", "idle_ms"):
        assert sum(getattr(s, key) for s in steps) / 2 == pytest.approx(getattr(avg, key)), key


def test_timeline_shows_waiting_and_transfer():
    tl = traces.timeline([RANK0, RANK1], step=0)
    wait = tl[tl["kind"] == "wait"]
    assert wait[["rank", "start_ms", "end_ms"]].values.tolist() == [[0, 0.040, 0.060]]
    moving = tl[tl["kind"] == "transfer"].set_index("rank")
    assert moving.loc[0, "start_ms"] == moving.loc[1, "start_ms"] == pytest.approx(0.060)
    assert "comm" not in set(tl["kind"])
    alone = traces.timeline([RANK0])
    assert "comm" in set(alone["kind"]) and "wait" not in set(alone["kind"])


def test_timeline_when_the_ranks_cannot_be_paired_or_have_no_steps():
    elsewhere = _rank_trace(1, [(0, 60)], [(60, 70)], [(0, 100), (100, 200)], host="other")
    tl = traces.timeline([RANK0, elsewhere], step=0)  # two hosts: no common clock, no waiting and transfer
    assert "wait" not in set(tl["kind"]) and set(tl[tl["kind"] == "comm"]["rank"]) == {0, 1}
    bare = _rank_trace(0, [(10, 60)], [(60, 70)], [])
    tl = traces.timeline([bare])  # no step ranges: the whole trace, from its first kernel to its last
    assert tl[tl["kind"] == "step"][["start_ms", "end_ms"]].values.tolist() == [[0.0, pytest.approx(0.060)]]
    assert tl[tl["kind"] == "comm"][["start_ms", "end_ms"]].values.tolist() == [
        [pytest.approx(0.050), pytest.approx(0.060)]
    ]
    tl = traces.timeline([_rank_trace(0, [], [], [])])  # nothing ran: an empty window
    assert tl[["kind", "start_ms", "end_ms"]].values.tolist() == [["step", 0.0, 0.0]]


def test_real_cpu_traces_pair():
    w0, w1 = tracesplit.pair(CPU_TRACES)
    assert w0.collectives == w1.collectives == 1
    assert w0.wait_ms == 0 and w1.wait_ms > 0  # rank 1 reached gloo's all-reduce first and waited for rank 0
    for w, path in zip((w0, w1), CPU_TRACES):
        assert w.comm_ms == pytest.approx(tracesplit.split(path).comm_ms)


# --------------------------------------------------------------------------- the exercises


@pytest.mark.parametrize("name", ["profile_exposed", "profile_waiting"])
def test_exercise_solution_passes_and_each_wrong_answer_fails_for_its_reason(name):
    ex = check.load(name)
    result = check.check(name)
    assert result.passed and result.verdict.status == "pass", result.reason
    assert ex.WRONG, "an exercise lists its known wrong answers"
    for label, (candidate, words) in ex.WRONG.items():
        passed, reason = ex.check_local(candidate)
        assert not passed and words in reason, f"{label}: {reason}"


def test_exercise_checkers_never_raise():
    def broken(*args):
        raise ZeroDivisionError("oops")

    for name in ("profile_exposed", "profile_waiting"):
        passed, reason = check.load(name).check_local(broken)
        assert not passed and "ZeroDivisionError" in reason
    passed, reason = check.load("profile_waiting").check_local(lambda a, b: 3.0)
    assert not passed and "raised TypeError" in reason


# --------------------------------------------------------------------------- the readers, on hand-made results


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
    assert profreport.check_split(res).status == "pass"
    broken = _rank(exposed=1.2, comm=2.0)
    assert broken.split is not None
    broken = dataclasses.replace(broken, split=dataclasses.replace(broken.split, idle_ms=broken.split.idle_ms + 1.0))
    bad = profreport.check_split(_res(broken, _rank(exposed=0.2, comm=0.5)))
    assert bad.status == "fail" and "rank 0" in bad.text
    v = profreport.verdict_split(res)
    assert v.numbers["source"] == "least of the ranks" and v.numbers["link_ms"] == 0.5
    assert v.numbers["waiting_share"] == pytest.approx([0.75, 0.0]) and v.numbers["exposed_link_ms"] == 0.2


def test_trust_fails_when_the_profiler_costs_more_than_it_reports():
    res = _res(_rank(exposed=1.2, comm=2.0), _rank(exposed=0.2, comm=0.5))  # the profiler adds 1.0 ms to each
    v = profreport.verdict_trust(res)
    assert v.status == "info" and not v.numbers["trustworthy"] and v.numbers["ranks_failing"] == [1]
    assert v.numbers["overhead_ms"] == pytest.approx([1.0, 1.0])
    assert profreport.verdict_overhead(res).status == "slower"
    same = _res(
        _rank(exposed=0.3, comm=0.5, profiled=(10.0, 10.05, 9.95)), _rank(exposed=0.3, comm=0.5, profiled=(10.0, 10.1))
    )
    assert profreport.verdict_overhead(same).status == "no change"
    trust = profreport.verdict_trust(same)  # within the noise, and the noise bound (2 % of 10 ms) is below the exposed
    assert trust.status == "info" and trust.numbers["trustworthy"] is True
    assert trust.numbers["overhead_bound_ms"] == pytest.approx([0.2, 0.2], abs=0.01)
    # Overheads within a wide noise are not zero: they cannot be told from the exposed communication.
    noisy = _res(
        _rank(exposed=0.5, comm=1.0, plain=(10.0, 12.0, 10.5), profiled=(11.0, 10.0, 14.0)),
        _rank(exposed=0.5, comm=1.0, plain=(10.0, 12.0, 10.5), profiled=(11.0, 10.0, 14.0)),
    )
    assert profreport.verdict_overhead(noisy).status == "no change"
    v = profreport.verdict_trust(noisy)
    assert v.status == "undecided" and v.numbers["trustworthy"] is None and v.numbers["ranks_undecided"] == [0, 1]
    assert all(b > 0.5 for b in v.numbers["overhead_bound_ms"]) and "0.00 ms" not in v.text


def test_exchange_and_second_gpu_use_the_noise_rule():
    res = _res(_rank(exposed=1.2, comm=2.0), _rank(exposed=0.2, comm=0.5))
    v = profreport.verdict_exchange(res)
    assert v.status == "slower" and v.numbers["extra_ms"] == pytest.approx([1.0, 1.0])
    flat = _rank(exposed=0.2, comm=0.5)
    assert flat.step_ms_repeats is not None
    flat = dataclasses.replace(
        flat, step_ms_repeats=dataclasses.replace(flat.step_ms_repeats, no_sync=(10.0, 10.05, 10.0))
    )
    assert profreport.verdict_exchange(_res(flat, flat)).status == "no change"
    mixed = profreport.verdict_exchange(_res(_rank(exposed=1.2, comm=2.0), flat))
    assert mixed.status == "no change" and mixed.numbers["rank_status"] == ["slower", "no change"]  # not resolved
    old = _rank(exposed=1.2, comm=2.0, step_ms_repeats=None)
    assert profreport.verdict_exchange(_res(old, old)).status == "info"
    gap = profreport.verdict_second_gpu(_res(old, old))
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
    v = profreport.verdict_c16({"NVLink": skew})
    assert v.status == "partly" and v.numbers["NVLink"]["max_link_share"] == pytest.approx(0.03)
    assert v.numbers["NVLink"]["max_profiler_share"] == pytest.approx((0.5 + 0.03) / 2)
    assert v.numbers["NVLink"]["exposed_link_ms"] == [0.25, 0.05]
    slow = _sweep_res(
        [_sweep_row(1, 3.0, 2.5, (3.0, 2.5)), _sweep_row(8, 3.0, 0.3, (3.0, 0.3))],
        [_sweep_row(1, 3.2, 2.6, (3.1, 2.6)), _sweep_row(8, 3.0, 0.3, (3.0, 0.3))],
    )
    assert profreport.verdict_c16({"slow link": slow}).status == "holds"
    stuck = _sweep_res(
        [_sweep_row(1, 3.0, 2.5), _sweep_row(8, 3.0, 2.4)], [_sweep_row(1, 3.0, 2.5), _sweep_row(8, 3.0, 2.4)]
    )
    assert profreport.verdict_c16({"stuck": stuck}).status == "wrong"  # 4 % less is within HIDES_MORE
    assert profreport.verdict_c16({"none": _sweep_res([], [])}).status == "unverifiable"
    skew.env = types.SimpleNamespace(is_gpu=False)  # a CPU simulation cannot settle a rule about GPUs
    cpu = profreport.verdict_c16({"gloo": skew})
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


# ------------------------------------------------------------------------- the workload, and the lesson, on real ranks


def test_params_from_picks_only_workload_parameters():
    sizes = {"model": "tiny", "interval": 0.1, "sweep": [2, 4], "timeout": 60}
    assert profiling.params_from(sizes, steps=2) == {"model": "tiny", "sweep": [2, 4], "steps": 2}


@pytest.mark.parametrize(
    ("params", "words"), [({"sweep": (0,)}, "sweep"), ({"rounds": 1}, "2 repeats"), ({"amp": "fp16"}, "amp")]
)
def test_bad_parameters_fail_before_launch(params, words):
    with pytest.raises(nvtutorial.LaunchError, match=words):
        nvtutorial.launch.prepare("profile_step", params=params)


def test_profile_step_run_reports_every_rank_consistently(runs_dir):
    res = nvtutorial.run(
        "profile_step",
        nproc=2,
        output="none",
        timeout=180,
        params={
            "model": "tiny",
            "batch_size": 2,
            "image_size": 16,
            "warmup": 1,
            "rounds": 2,
            "round_steps": 1,
            "steps": 2,
            "wire_repeats": 2,
            "sweep": (2,),
            "sweep_rounds": 2,
            "sweep_steps": 1,
            "probe_mb": 1,
            "probe_s": 0.05,
        },
    )
    assert [p.name for p in traces.rank_traces(res.run_dir)] == ["trace_rank0.json", "trace_rank1.json"]
    assert not list(res.run_dir.glob("sweep_*.json")), "the sweep's traces are removed"
    ranks = res.ranks_as(schema.Rank)  # what each rank wrote, read back through the workload's schema
    assert [list(m) for m in res.ranks] == [[f.name for f in dataclasses.fields(schema.Rank)]] * 2  # its layout
    links = []
    for rank, m in enumerate(ranks):
        s = m.split
        assert s is not None and s.link is not None and s.link.wait_ms is not None, s
        assert s.source == ("gpu" if res.env.is_gpu else "cpu") and s.steps == 2 and s.rank == rank
        assert s.comm_ms > 0, f"rank {rank}: no communication found in its trace"
        assert len(s.per_step) == 2
        assert set(s.phase_ms) == {"forward", "backward", "optimizer"}
        assert m.step_ms_repeats is not None and set(m.step_ms_repeats.measured()) == {"ddp", "no_sync", "local"}
        assert all(len(v) == 2 for v in m.step_ms_repeats.measured().values()) and len(m.profiled_ms) == 2
        assert m.wire is not None and len(m.wire.ms) == 2 and m.wire.bytes == 4 * m.parameters
        assert [r.batch for r in m.sweep] == [2]
        assert m.sweep[0].link is not None and m.sweep[0].link.wait_ms is not None
        assert m.probe is not None and m.probe.count >= 1
        assert [p.name for p in m.phases][:3] == [
            "setup + warm-up",
            "A/B rounds: DDP, no_sync, 1-GPU",
            "profiled steps",
        ]
        links.append(s.link)
    # Both ranks saw the same collectives; the split the workload computed is the one the parent computes.
    assert links[0].collectives == links[1].collectives and (links[0].collectives or 0) >= 1
    again = tracesplit.pair(traces.rank_traces(res.run_dir))
    assert [w.wait_ms for w in again] == pytest.approx([link.wait_ms for link in links])
    # The CPU-valid verdicts, on their values.
    assert profreport.check_split(res).status == "pass"
    split = profreport.verdict_split(res)
    assert split.numbers["source"] == "paired traces" and len(split.numbers["comm_ms"]) == 2
    # Timings on shared cores decide nothing here: each verdict must follow its rule from this run's repeats.
    overhead = profreport.verdict_overhead(res)
    comps = profreport._overhead_comparisons(res)
    assert len(comps) == 2 and all(comps) and overhead.status == profreport._joint([c.status for c in comps])
    assert overhead.numbers["ratio"] == [c.ratio for c in comps]
    assert overhead.numbers["overhead_ms"] == [m["step_ms_profiled"] - m["step_ms"] for m in res.ranks]
    trust = profreport.verdict_trust(res)
    t = trust.numbers
    assert t["trustworthy"] is (False if t["ranks_failing"] else None if t["ranks_undecided"] else True)
    assert trust.status == ("undecided" if t["trustworthy"] is None else "info")
    for v, baseline in ((profreport.verdict_exchange(res), "no_sync"), (profreport.verdict_second_gpu(res), "local")):
        cs = profreport.comparisons([m.step_ms_repeats for m in ranks], baseline)
        assert v.numbers["rank_status"] == [c.status for c in cs] and v.status == profreport._joint(
            v.numbers["rank_status"]
        )
        assert v.numbers["extra_ms"] == [c.candidate - c.baseline for c in cs]
    c12 = traces.verdict_c12(res)
    if not res.env.is_gpu:
        assert c12.status == "unverifiable"
    assert len(c12.numbers["waiting_share"]) == 2


def _notebook_sizes(name: str) -> dict:
    """``SIZES`` of a notebook's parameters cell, as the notebook has it."""
    from tests.helpers import notebook_cells

    return notebook_cells.parameters(name.removesuffix(".ipynb"))["SIZES"]


@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_notebook_05_watches_the_gpu_its_plan_runs_on(monkeypatch, gpus):
    """Review N5, through notebook 05's own cells: the two-rank step is watched where it runs on GPUs; on one GPU the
    two ranks run on the CPU (nothing sampled) and the GPU runs one rank at the lesson's sizes, watched; without a
    GPU nothing is sampled and nothing more runs."""
    from tests.helpers import notebook_cells

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    ns = notebook_cells.run("05_profiling", ["8818ec6b", "3193dd47"])
    step, watch = ns["STEP"], ns["WATCH"]
    assert (step.gpus, step.backend, watch.gpus) == ((2, "nccl", 2) if gpus == 2 else (0, "gloo", min(gpus, 1)))
    assert watch.where.startswith(f"{watch.gpus}× NVIDIA H200") or not gpus  # R1-17: on 2 GPUs it watches both
    assert (
        ns["P_GPU"] == ns["SIZES"]["full" if gpus else "ci"] and ns["P"] == ns["SIZES"]["full" if gpus == 2 else "ci"]
    )
    sampled, launched = [], []

    @contextlib.contextmanager
    def sample(interval, dmon):
        sampled.append(interval)
        yield types.SimpleNamespace(save=lambda path: None)

    def run(workload, **kw):
        launched.append((workload, kw))
        return types.SimpleNamespace(run_dir=Path("run"), label="1× NVIDIA H200")

    monkeypatch.setattr(telemetry, "sample", sample)
    monkeypatch.setattr(nvtutorial, "run", run)
    headline = object()
    ns = notebook_cells.run("05_profiling", ["8818ec6b", "3193dd47", "4c1d9e27"], run=headline)
    if gpus == 1:
        ((workload, kw),) = launched
        assert workload == "profile_step" and (kw["nproc"], kw["backend"]) == (1, "nccl") and sampled == [0.1]
        assert kw["params"] == profiling.params_from(ns["SIZES"]["full"], **profiling.ONE_GPU)
        assert ns["watched"] is not headline
    else:
        assert not launched and not sampled and ns["watched"] is headline


def test_rounds_run_the_step_not_counted_to_its_end():
    """Each round runs one step of each kind that is not counted, through the same timer as the counted ones: on a
    GPU an unsynchronised step's kernels ran into the first timed step (70 ms instead of 42 on one H100)."""
    from nvtutorial.chapters.ch05_profiling import workload

    calls: list[str] = []

    def timed(fn):
        fn()
        calls.append("synced")
        return len(calls) / 1e3  # seconds: each call to the timer 2 ms more than the one before

    steps = {"ddp": lambda: calls.append("ddp"), "no_sync": lambda: calls.append("no_sync")}
    ends: list[float] = []
    out = workload.rounds(steps, 2, 2, timed, ends)
    kinds = [c for c in calls if c != "synced"]
    assert calls == [x for k in kinds for x in (k, "synced")]  # every step ends on the device before the next
    assert kinds == ["ddp"] * 3 + ["no_sync"] * 3 + ["no_sync"] * 3 + ["ddp"] * 3  # the order rotates by round
    assert out["ddp"]["all"] == [4.0, 6.0, 22.0, 24.0] and out["no_sync"]["all"] == [10.0, 12.0, 16.0, 18.0]
    assert out["ddp"]["repeats"] == [5.0, 23.0] and len(ends) == 8  # a round's median; an end per counted step


def test_the_one_gpu_run_is_the_lessons_step_at_its_sizes():
    """Notebook 05 on one GPU: one rank of the lesson's step at the lesson's sizes (the course UNet, 16 images of
    256x256 in bf16), without what one rank cannot have: a trace to pair, the batch sweep, the all-reduce probe."""
    from nvtutorial import params as params_mod
    from nvtutorial.chapters.ch05_profiling import workload

    p = params_mod.build(
        workload.Params, profiling.params_from(_notebook_sizes("05_profiling.ipynb")["full"], **profiling.ONE_GPU)
    )
    assert (p.model, p.batch_size, p.image_size, p.amp) == ("full", 16, 256, "bf16")
    assert (p.profiler, p.sweep, p.probe_mb, p.local_baseline, p.memory_snapshot) == (False, (), 0, False, True)


@pytest.mark.parametrize(
    "machine", [course.Machine((), 2), course.Machine(("GPU A",), 16), course.Machine(("GPU A",) * 2, 32)]
)
def test_telemetry_watches_only_a_part_that_runs_on_gpus(monkeypatch, machine):
    """Review N5: an idle GPU is never sampled (nor drawn) under a run on the CPU; the sampler says why instead."""
    plan = course.plan("05_profiling", "auto", {"step": "two GPUs", "watch": "one GPU"}, machine)
    sampled = []

    @contextlib.contextmanager
    def sample(interval, dmon):
        sampled.append((interval, dmon))
        yield "sampler"

    monkeypatch.setattr(telemetry, "sample", sample)
    for part in plan.parts:
        with profiling.watch(part, interval=0.2) as tel:
            pass
        if part.gpus:
            assert tel == "sampler" and sampled.pop() == (0.2, True)
        else:
            assert not tel.available and tel.reason == tel.dmon_reason and part.why in tel.reason
            assert tel.describe() == [f"no telemetry: not sampled: this run is {part.where}, on no GPU ({part.why})"]
    assert not sampled


def test_one_rank_of_profile_step_has_no_wire_and_keeps_what_the_telemetry_needs(runs_dir):
    """The world of one that notebook 05 watches on one GPU (here gloo on the CPU): no all-reduce of the gradients
    to time, so no wire and no phase named after it; the steps, their phases and ends, the memory stay."""
    sizes = {**_notebook_sizes("05_profiling.ipynb")["ci"], "steps": 1}  # ONE_GPU: 2 rounds of 3 steps a kind
    res = nvtutorial.run(
        "profile_step", nproc=1, output="none", timeout=180, params=profiling.params_from(sizes, **profiling.ONE_GPU)
    )
    (m,) = res.ranks_as(schema.Rank)
    assert m.wire is None and m.split is None and m.trace is None and m.sweep == () and m.probe is None
    assert [p.name for p in m.phases] == ["setup + warm-up", "A/B rounds: DDP, no_sync", "NVTX-marked steps"]
    assert len(m.step_ends) == 2 * 2 * 3 and m.step_ms_repeats is not None and m.step_ms_repeats.local is None
    assert len(m.step_ms_repeats.ddp) == len(m.step_ms_repeats.no_sync) == 2  # one median per round
    assert m.memory_snapshot.written is res.env.is_gpu
    assert profreport.wire_frame(res).empty


def test_the_lesson_script_runs_on_real_ranks_and_its_traces_pair(runs_dir):
    out = runs_dir / "lesson"
    res = nvtutorial.run(
        str(LESSON),
        nproc=2,
        output="none",
        timeout=180,
        out=out,
        args=["--model", "tiny", "--batch", "2", "--image", "16", "--steps", "2", "--out", str(out)],
    )
    paths = traces.rank_traces(out)
    assert [p.name for p in paths] == ["trace_rank0.json", "trace_rank1.json"]
    assert [Path(m["trace"]).name for m in res.ranks] == ["trace_rank0.json", "trace_rank1.json"]
    assert all(len(m["step_ms"]) == 2 for m in res.ranks)
    acts = [tracesplit.classify(p) for p in paths]
    assert [len(a.steps) for a in acts] == [2, 2]  # the schedule kept the 2 active steps, each in its range
    assert all(all(a.phases[p] for p in tracesplit.PHASES) for a in acts)  # forward, backward, optimizer marked
    waits = tracesplit.pair(acts)
    assert waits[0].collectives == waits[1].collectives >= 1


LESSON = Path(nvtutorial.__file__).resolve().parent / "chapters" / "ch05_profiling" / "lessons" / "profile_ddp.py"
