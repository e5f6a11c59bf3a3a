"""The pitfalls workload: every trap ends with the expected error, quickly, and leaves nothing behind.

Four real 2-process launches (a trap each); the rest are in-process checks of the pure helpers
the notebook reads its results with.
"""

from __future__ import annotations

import pickle
import types
from pathlib import Path

import pytest

import nvtutorial
from nvtutorial import units
from nvtutorial.experiments import pitfalls as pitlab
from nvtutorial.machine import hardware
from nvtutorial.report import pitfalls as pitreport
from nvtutorial.workloads import pitfalls

from .conftest import assert_nothing_left

TINY = {"model": "tiny", "image_size": 16, "batch_size": 2, "samples": 8, "val_samples": 6}


def _gpu_run() -> bool:
    import torch

    return bool(torch.version.cuda) and hardware.gpu_count() >= 2


# --------------------------------------------------------------------------- the traps, launched

def test_rank0_validation_times_out_with_a_short_pg_timeout(runs_dir):
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run("pitfalls", output="none", pg_timeout=5, timeout=60,
                       params={**TINY, "trap": ("rank0_validation",), "validation_s": 20})
    exc = info.value
    assert not isinstance(exc, nvtutorial.RunTimedOut), "the process-group timeout, not the deadline, must end it"
    assert exc.result.wall_s < 60
    if _gpu_run():  # the NCCL watchdog takes rank 1 down (or raises, depending on the version)
        assert exc.exc_type in (None, "DistBackendError", "RuntimeError")
    else:  # gloo raises in rank 1's backward: DDP's all-reduce timed out waiting for rank 0
        assert exc.rank == 1 and exc.exc_type == "RuntimeError"
        assert "Timed out" in str(exc) and "backward" in exc.traceback
    assert_nothing_left(exc.result.run_dir)


def test_rank0_validation_without_timeout_hits_the_deadline_and_shows_where(runs_dir):
    with pytest.raises(nvtutorial.RunTimedOut) as info:
        nvtutorial.run("pitfalls", output="none", timeout=30 if _gpu_run() else 20,
                       params={**TINY, "trap": ("rank0_validation",), "validation_s": 600})
    res = info.value.result
    assert_nothing_left(res.run_dir)
    where = pitreport.where_ranks({r: p.read_text() for r, p in res.log_files.items()})
    assert set(where) == {0, 1}, "every rank's stack must have been dumped into its log"
    assert "lone_validation" in " ".join(where[0]["stack"])
    assert "one_epoch" in " ".join(where[1]["stack"])


@pytest.mark.parametrize("trap,difference", [("mismatched_shapes", "shapes"), ("mismatched_order", "Op type")])
def test_mismatched_collectives_raise_the_detail_report(runs_dir, trap, difference):
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run("pitfalls", output="none", pg_timeout=10, timeout=60, params={**TINY, "trap": (trap,)})
    exc = info.value
    assert exc.exc_type == "RuntimeError"
    assert "Detected mismatch between collectives" in str(exc)
    assert difference in pitfalls.mismatch_difference(str(exc))
    assert exc.result.wall_s < 60
    assert_nothing_left(exc.result.run_dir)


def test_bad_parameters_fail_before_launch():
    with pytest.raises(nvtutorial.LaunchError, match="oom_batch"):
        nvtutorial.launch.prepare("pitfalls", params={"oom_batch": 3})
    with pytest.raises(nvtutorial.LaunchError, match="trap"):
        nvtutorial.launch.prepare("pitfalls", params={"trap": ("no_such_trap",)})


# --------------------------------------------------------------------------- pure helpers

def test_epoch_orders_repeat_without_set_epoch():
    without = pitfalls.epoch_orders(32, 2, 0, 3, set_epoch=False)
    with_ = pitfalls.epoch_orders(32, 2, 0, 3, set_epoch=True)
    assert without[0] == without[1] == without[2]
    assert with_[0] == without[0] and with_[1] != with_[0] and with_[2] != with_[1]
    other_rank = pitfalls.epoch_orders(32, 2, 1, 1, set_epoch=True)[0]
    assert not set(other_rank) & set(with_[0]), "the ranks' shares must not overlap"


def test_knee():
    rows = [{"num_workers": 0, "samples_per_s": 100}, {"num_workers": 1, "samples_per_s": 170},
            {"num_workers": 2, "samples_per_s": 195}, {"num_workers": 4, "samples_per_s": 200}]
    assert units.knee(rows)["num_workers"] == 2
    assert units.knee(rows, fraction=0.5)["num_workers"] == 0
    assert units.knee([]) is None


def test_mismatch_difference():
    msg = ("Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(...)."
           "Collectives differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST")
    assert pitfalls.mismatch_difference(msg) == "Op type: ALLREDUCEvs BROADCAST"
    assert pitfalls.mismatch_difference("something else") == ""


DUMP = """rank 1: epoch 1
Thread 0x00007f72596 (most recent call first):
  File "/x/nvtutorial/runtime.py", line 204 in watch
  File "/usr/lib/python3.12/threading.py", line 982 in run

Current thread 0x00007f725ac (most recent call first):
  File "/x/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "/x/nvtutorial/lessons/training.py", line 193 in _backward
  File "/x/nvtutorial/lessons/training.py", line 216 in train_step
  File "/x/nvtutorial/workloads/pitfalls.py", line 135 in one_epoch
  File "/x/nvtutorial/workloads/pitfalls.py", line 103 in run
  File "/x/nvtutorial/runtime.py", line 160 in main
  File "<frozen runpy>", line 88 in _run_code
"""


def test_where_ranks_reads_faulthandler_dumps():
    where = pitreport.where_ranks({1: DUMP, 0: "no stacks here"})
    assert set(where) == {1}
    assert where[1]["innermost"] == "graph.py:979 in _engine_run_backward"
    assert where[1]["in_course_code"] == "training.py:193 _backward <- training.py:216 train_step <- pitfalls.py:135 one_epoch"
    assert where[1]["stack"][-1] == "<frozen runpy>:88 _run_code"


def test_flight_recorder_dump_is_summarised(tmp_path):
    entries = [{"collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]]},
               {"collective_seq_id": 8, "profiling_name": "nccl:all_reduce", "state": "started", "input_sizes": [[4]]}]
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps({"version": "2.4", "entries": entries}))
    (tmp_path / "rank1.pid").write_text("1")
    fr = pitreport.flight_recorder(tmp_path)
    assert fr[1]["last_completed_seq"] == 7
    assert fr[1]["pending"][0]["seq"] == 8 and fr[1]["pending"][0]["state"] == "started"
    result = types.SimpleNamespace(run_dir=tmp_path, log_files={0: tmp_path / "rank0.log", 1: tmp_path / "rank1.log"})
    lines = pitreport.describe_flight_recorder(result)
    assert "last completed collective #7" in lines[0] and "#8 nccl:all_reduce (started)" in lines[0]


def test_params_from_picks_only_workload_parameters():
    assert pitlab.params_from({"pg_timeout": 3, "model": "tiny", "workers": [0, 1]}, trap=["seeds"]) == {
        "model": "tiny", "workers": [0, 1], "trap": ["seeds"]}


def test_describe_failure_of_nothing():
    assert "without an error" in pitreport.describe_failure(None)[0]
    assert pitreport.signature_lines(None) == {}


# --------------------------------------------------------------------------- the notebook's readers, on a recorded run

SAFE_RUN = Path(__file__).parent / "fixtures" / "pitfalls" / "safe_run_cpu.json"


@pytest.fixture
def safe():
    """A real CPU run of every non-hanging trap (fixed=true, catch=true), as the notebook launches it."""
    return nvtutorial.RunResult.load(SAFE_RUN)


def test_readers_of_a_recorded_run(safe):
    frame = pitreport.validation_frame(safe)
    assert frame["agree"].all() and list(frame["rank"]) == [0, 1]
    assert "matches a single process" in pitreport.verdict_c18(None, safe, 3)
    lines = pitreport.mismatch_lines(safe)
    assert any("mismatched_shapes, rank 1: RuntimeError" in line for line in lines)
    assert any("mismatched_order, fixed:" in line for line in lines)
    assert pitreport.first_mismatch_report(safe).startswith("Detected mismatch between collectives")
    epochs = pitreport.epoch_frame(safe)
    assert len(epochs) == 6 and "repeats the same order: True" in pitreport.verdict_set_epoch(safe)
    weights, crops = pitreport.seeds_frames(safe)
    assert weights["after DDP(model)"].nunique() == 1 and weights["weights checksum before DDP"].nunique() == 2
    assert "8 of 8 crops were identical" in pitreport.verdict_c21(safe)
    assert set(pitreport.loader_frame(safe)["num_workers"]) == {0, 1}
    assert "C17: on" in pitreport.verdict_c17(safe) and "per sample" in pitreport.shards_line(safe)
    assert pitreport.oom_frames(safe).startswith("skipped: needs a GPU")
    assert pitreport.verdict_c19_c20(safe)[0].startswith("C19, C20: not checked here")


GPU_OOM = {
    "launch_alloc_conf": None,
    "fragmentation": [
        {"config": "default", "cap_mib": 1024, "reserved_mib": 600.0, "allocated_mib": 200.0, "outcome": "OOM",
         "message": "CUDA out of memory. Tried to allocate 500.00 MiB.", "free_under_cap_mib": 824},
        {"config": "expandable_segments:True", "cap_mib": 1024, "reserved_mib": 600.0, "allocated_mib": 200.0,
         "outcome": "fits", "free_under_cap_mib": 824}],
    "empty_cache": {"rows": [
        {"step": "start", "allocated_mib": 0.0, "reserved_mib": 0.0, "driver_free_mib": 140000.0},
        {"step": "x = 600 MiB tensor", "allocated_mib": 600.0, "reserved_mib": 600.0, "driver_free_mib": 139400.0},
        {"step": "empty_cache() while x is alive", "allocated_mib": 600.0, "reserved_mib": 600.0, "driver_free_mib": 139400.0},
        {"step": "del x", "allocated_mib": 0.0, "reserved_mib": 600.0, "driver_free_mib": 139400.0},
        {"step": "empty_cache() after del x", "allocated_mib": 0.0, "reserved_mib": 0.0, "driver_free_mib": 140000.0}]},
    "training": {"cap_mib": 20000.0, "model": "full", "batch": 16, "image_size": 256, "rows": [
        {"variant": "batch 16, no cap", "outcome": "fits", "step_ms": 120.0, "peak_allocated_mib": 25000.0,
         "peak_reserved_mib": 26000.0},
        {"variant": "batch 16 under the cap (the OOM)", "outcome": "OOM", "message": "CUDA out of memory. Tried...",
         "peak_allocated_mib": 19000.0, "peak_reserved_mib": 19900.0}]},
}


def test_oom_readers_on_gpu_shaped_results(safe):
    for m in safe.ranks:
        m["oom"] = GPU_OOM
    frames = pitreport.oom_frames(safe)
    assert set(frames) == {"fragmentation", "empty_cache", "training"}
    assert "message" not in frames["fragmentation"].columns
    assert pitreport.oom_message(safe).startswith("CUDA out of memory. Tried...")
    c19, c20, training = pitreport.verdict_c19_c20(safe)
    assert "left 600 MiB allocated" in c19 and "returned 600 MiB to the driver" in c19
    assert "default: OOM; expandable_segments:True: fits" in c20
    assert "under the cap (the OOM): OOM" in training
