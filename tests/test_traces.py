"""The time split of a DDP step (nvtutorial.tracesplit, nvtutorial.report.traces), telemetry parsing,
and the profiling workload.

Fixtures (tests/fixtures/traces/):
* ``synthetic_gpu.json``: a hand-built torch.profiler-style trace of two steps whose overlaps
  are known, so the expected numbers below are exact (worked out in the comments);
* ``cpu_gloo_rank{0,1}.json.gz``: one ``train_step`` of a real 2-process gloo run of
  ``profile_step`` (tiny UNet), trimmed to the outermost CPU operators; checked against an
  independent computation of the same quantities on a 0.01 µs grid.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import types
from pathlib import Path

import numpy as np
import pytest

import nvtutorial
from nvtutorial import tracesplit
from nvtutorial.experiments import profiling
from nvtutorial.machine import telemetry
from nvtutorial.report import monitoring, traces
from nvtutorial.report import profiling as profreport

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
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
    compute = [(e["ts"] - lo, e["ts"] + e["dur"] - lo) for e in ev
               if e["cat"] == "cpu_op" and not e["name"].startswith(("c10d::", "gloo:", "nccl:", "record_param_comms"))]
    c, st = _raster(compute, 0.0, hi, 0.01)
    m, _ = _raster(comm, 0.0, hi, 0.01)
    ms = st / 1e3
    return {"step_ms": len(c) * ms, "compute_ms": c.sum() * ms, "comm_ms": m.sum() * ms,
            "hidden_ms": (c & m).sum() * ms, "idle_ms": (~(c | m)).sum() * ms}


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
    assert {"step", "phase", "compute", "comm"} <= set(tl["kind"])
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
    assert [p.name for p in traces.rank_traces(tmp_path, "trace_rank*.json.gz")] == ["trace_rank0.json.gz", "trace_rank1.json.gz"]
    table = traces.split_table(traces.rank_traces(tmp_path, "trace_rank*.json.gz"))
    assert list(table.index) == [0, 1]
    assert (table["comm_share"] > 0).all()


# --------------------------------------------------------------------------- Nsight Systems

def _nsys_db(path):
    """An Nsight Systems-like SQLite export holding the synthetic trace's kernels (ns) and NVTX steps."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, "
                "globalPid INT, shortName INT, demangledName INT)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT, globalPid INT)")
    con.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, globalTid INT, text TEXT, textId INT)")
    names = {}
    pid = 4242
    gpid = pid << 24
    data = tracesplit.load(SYNTHETIC)
    for e in data["traceEvents"]:
        if e.get("cat") == "gpu_memcpy":  # copies live in a table of their own
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?)",
                        (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000), 0, e["tid"], gpid))
        elif e.get("cat") == "kernel":
            name = e["name"].split("(")[0]
            sid = names.setdefault(name, len(names) + 1)
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?)",
                        (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000), 0, e["tid"], gpid, sid, sid))
        elif e.get("cat") == "user_annotation":
            con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,NULL)",
                        (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000), gpid | 7, e["name"]))
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


def test_parse_kernel_summary():
    text = (" ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n"
            '"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"\n'
            '"60.0","6000","3","2000.0","2000.0","1000","3000","1000.0","sm90_xmma_gemm"\n'
            '"40.0","4000","2","2000.0","2000.0","2000","2000","0.0","ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"\n')
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


# --------------------------------------------------------------------------- profile_step's readers

def _fake_result(ranks):
    return types.SimpleNamespace(ranks=ranks, metrics=ranks[0])


def _rank(step_ms, local_ms, exposed_ms, comm_share=0.2):
    split = {"source": "gpu", "steps": 2, "step_ms": step_ms, "compute_ms": step_ms * 0.7, "comm_ms": step_ms * comm_share,
             "hidden_ms": step_ms * comm_share - exposed_ms, "exposed_ms": exposed_ms, "idle_ms": 0.1,
             "compute_only_ms": 0.0, "comm_share": comm_share, "exposed_share": exposed_ms / step_ms,
             "hidden_fraction": 0.5, "phase_ms": {"forward": 1.0}}
    return {"step_ms": step_ms, "step_ms_profiled": step_ms * 1.02, "profiler_overhead": 0.02, "local_step_ms": local_ms,
            "split": split, "sweep": [
                {"batch": 2, "global_batch": 4, "step_ms_unprofiled": 3.0, "samples_per_s": 1333.0, "comm_ms": 1.0,
                 "exposed_ms": 0.5, "comm_share": 0.3, "exposed_share": 0.2},
                {"batch": 8, "global_batch": 16, "step_ms_unprofiled": 9.0, "samples_per_s": 1777.0, "comm_ms": 1.0,
                 "exposed_ms": 0.2, "comm_share": 0.1, "exposed_share": 0.03}]}


def test_gap_and_verdicts():
    res = _fake_result([_rank(10.0, 9.0, 0.8), _rank(10.2, 9.0, 1.0)])
    row = profreport.gap_row(res)
    assert row["gap_ms"] == pytest.approx(1.1) and row["exposed_ms"] == pytest.approx(0.9)
    assert row["predicted_ms"] == pytest.approx(9.9) and row["scaling_efficiency"] == pytest.approx(9.0 / 10.1)
    lines = profreport.verdict_gap(profreport.gap_frame({"NVLink": res}))
    assert "explains 82 % of the gap" in lines[0]
    rows = profreport.sweep_rows(res)
    assert [r["batch"] for r in rows] == [2, 8] and rows[0]["comm_share"] == pytest.approx(0.3)
    (c16,) = profreport.verdict_c16({"NVLink": rows})
    assert "30 % at batch 2 -> 10 % at batch 8 (falls" in c16 and "below 15 % from batch 8" in c16
    assert profreport.split_frame(res, "NVLink")["path"].tolist() == ["NVLink", "NVLink"]
    assert "-> exposed" not in profreport.describe_split(profreport.split_frame(res))[0]


def test_params_from_picks_only_workload_parameters():
    sizes = {"model": "tiny", "interval": 0.1, "sweep": [2, 4], "timeout": 60}
    assert profiling.params_from(sizes, steps=2) == {"model": "tiny", "sweep": [2, 4], "steps": 2}


def test_bad_parameters_fail_before_launch():
    with pytest.raises(nvtutorial.LaunchError, match="sweep"):
        nvtutorial.launch.prepare("profile_step", params={"sweep": (0,)})


# --------------------------------------------------------------------------- one real run

def test_profile_step_run_writes_traces_and_a_consistent_split(runs_dir):
    res = nvtutorial.run("profile_step", nproc=2, output="none", timeout=180, params={
        "model": "tiny", "batch_size": 2, "image_size": 16, "warmup": 1, "timed_steps": 2, "steps": 2,
        "sweep": (2,), "sweep_steps": 1, "probe_mb": 1, "probe_s": 0.05})
    assert [p.name for p in traces.rank_traces(res.run_dir)] == ["trace_rank0.json", "trace_rank1.json"]
    for rank, m in enumerate(res.ranks):
        s = m["split"]
        assert s["source"] == ("gpu" if res.env.is_gpu else "cpu") and s["steps"] == 2
        assert s["comm_ms"] > 0, f"rank {rank}: no communication found in its trace"
        assert s["compute_only_ms"] + s["hidden_ms"] + s["exposed_ms"] + s["idle_ms"] == pytest.approx(s["step_ms"])
        assert set(s["phase_ms"]) == {"forward", "backward", "optimizer"}
        assert m["local_step_ms"] > 0 and m["step_ms"] > 0
        assert [r["batch"] for r in m["sweep"]] == [2]
        assert m["probe"]["count"] >= 1
        assert [p["name"] for p in m["phases"]][:3] == ["setup + warm-up", "timed steps", "profiled steps"]
    # The split the workload computed is the one the parent computes from the saved trace.
    again = tracesplit.split(res.run_dir / "trace_rank0.json")
    assert again.comm_ms == pytest.approx(res.ranks[0]["split"]["comm_ms"])


def test_probe_traffic_and_the_c13_verdict():
    t = telemetry.Sampler(interval=0.1)
    t.available = True
    t._handles = [object(), object()]
    t.started_at = 0.0
    for gpu in (0, 1):  # 2 GiB sent per GPU during the probe (counters in KiB)
        t._raw += [telemetry._Raw(10.0, gpu, 90, 10, 1, 300, 0, 0), telemetry._Raw(12.0, gpu, 90, 10, 1, 300, 2 * 2**20, 2 * 2**20)]
    t.dmon_text = DMON
    res = _fake_result([{"probe": {"start": 9.9, "end": 12.1, "bytes_per_rank_algorithm": 2 * 2**30}}])
    rows = profreport.probe_traffic(t, res)
    assert [r["gpu"] for r in rows] == [0, 1] and rows[0]["sent_over_expected"] == pytest.approx(1.0)
    verdict = monitoring.verdict_c13(t, rows)
    assert "sm, mem, enc, dec, jpg, ofa" in verdict and "no NVLink traffic among them" in verdict
    assert "2.00 GiB sent per GPU" in verdict and "partly true" in verdict
    t.available = False
    t.reason = "NVML is unavailable here"
    assert monitoring.verdict_c13(t, []) == "C13: not checked here: NVML is unavailable here"


def test_verdict_c12():
    split = tracesplit.split(SYNTHETIC)
    missing = traces.NsysResult(available=False, command=["nsys"], reason="not on PATH")
    assert "nsys is not installed here" in traces.verdict_c12(split, missing)
    ran = traces.NsysResult(available=True, command=["nsys"], splits=[split, split])
    text = traces.verdict_c12(split.to_dict(), ran)
    assert "Nsight Systems on the same run: communication 0.024 ms, 24 % of the step (difference +0.0 points)" in text
    assert traces.verdict_c12(None, None).startswith("C12: no torch.profiler split")
