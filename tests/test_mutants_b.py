"""Rules the mutation run found unguarded in chapters 05-07 (survivors list b): the waiting checker's tolerance, the
profiling frames' rounding and column names, C13's place and its probe guard, C19's threshold, the OOM fixes'
place, the pitfall exercises' counts and devices, the ring checker's report of an exception, the top-k hook's group,
the sparse all-reduce's index precision and devices, the compression table's columns."""

from __future__ import annotations

import gzip
import types

import pytest
import torch

from nvtutorial.chapters.ch05_profiling import exercises_waiting
from nvtutorial.chapters.ch05_profiling import report as p
from nvtutorial.chapters.ch05_profiling import report_monitoring as monitoring
from nvtutorial.chapters.ch05_profiling import report_traces as traces
from nvtutorial.chapters.ch06_pitfalls import exercises as pitfalls
from nvtutorial.chapters.ch06_pitfalls import report_measured as rm
from nvtutorial.chapters.ch07_collectives import report_compression as cr
from tests.helpers import paths as test_paths
from tests.helpers import pitfalls_results as pitfalls_made
from tests.helpers import profile_step_results as made
from tests.helpers.ranks import on_ranks
from tests.helpers.typed_runs import run_of

FIXTURES = test_paths.FIXTURES / "traces"
CPU_TRACES = [FIXTURES / "cpu_gloo_rank0.json.gz", FIXTURES / "cpu_gloo_rank1.json.gz"]
DMON = (
    "#Time gpu sm mem enc dec\n#HH:MM:SS Idx % % % %\n10:00:01 0 5 1 0 0\n10:00:02 0 98 3 0 0\n"
    "10:00:03 0 100 4 0 0\n10:00:05 0 7 1 0 0\n"
)


def res(*ranks, gpu=True, label="2× test GPU"):
    return run_of(*ranks, gpu=gpu, label=label, workload="profile_step")


# --------------------------------------------------------------------------- chapter 05
def test_the_waiting_checker_refuses_an_answer_half_a_millisecond_off():
    def off(rank0, rank1):
        return [w + 0.5 for w in exercises_waiting.reference(rank0, rank1)]

    assert exercises_waiting.check_local(exercises_waiting.reference)[0] is True
    assert exercises_waiting.check_local(off)[0] is False


def test_memory_frame_turns_every_dot_of_a_byte_counter_into_an_underscore():
    mem = {"kind": "cuda", "large.pool_bytes.all.peak": 2**21}
    m = p.memory_frame(res(made.rank(memory=mem)))
    assert m["large_pool_peak_mib"][0] == 2.0 and "large.pool_peak_mib" not in m


def test_overhead_frame_keeps_the_step_time_to_the_microsecond():
    f = p.overhead_frame(res(made.rank(step_ms=10.12345, step_ms_profiled=11.0)))
    assert f["step_ms"][0] == 10.123


def test_c13_says_where_it_was_measured_whatever_its_status():
    assert monitoring.verdict_c13("", [], reason="no driver", where="here").where == "here"  # unverifiable
    nvl = monitoring.verdict_c13("# gpu sm nvlrx\n# Idx % MB/s\n 0 1 2\n", where="here")
    assert nvl.status == "holds" and nvl.where == "here"


def test_c13_from_a_run_without_a_probe_reads_no_sm():
    import datetime

    at = datetime.datetime(2026, 12, 1, 10, 0, 0).timestamp()
    sampler = types.SimpleNamespace(dmon_text=DMON, reason="", dmon_reason="", started_at=at)
    v = monitoring.verdict_c13_from(sampler, res(made.rank()), [{"nvml_sent_gib": 1.0}])
    assert v.status == "wrong" and v.numbers["sm_during_probe"] is None and v.numbers["expected_bytes"] is None


def test_split_table_reads_a_run_folder(tmp_path):
    for r, src in enumerate(CPU_TRACES):
        (tmp_path / f"trace_rank{r}.json").write_bytes(gzip.decompress(src.read_bytes()))
    table = traces.split_table(tmp_path)
    assert list(table.index) == [0, 1] and (table["comm_share"] > 0).all()


def test_timeline_rows_name_their_lane():
    tl = traces.timeline(CPU_TRACES)
    assert {"rank", "kind", "lane", "start_ms", "end_ms", "name"} <= set(tl.columns)
    assert tl["lane"].notna().all()


# --------------------------------------------------------------------------- chapter 06
def _seg_set():
    """Four 1×2×2 images whose class-1 logit is the image; masks right on 3 of 4 pixels of each."""
    images = [torch.tensor([[[1.0, -1.0], [1.0, -1.0]]]) for _ in range(4)]
    masks = [torch.tensor([[1, 0], [1, 1]]) for _ in range(4)]
    return list(zip(images, masks))


def _logits(x):
    return torch.cat([-x, x], dim=1)


def _mean_of_ranks():
    import torch.distributed as dist

    model = types.SimpleNamespace(module=_logits)
    return pitfalls.mean_of_ranks(model, _seg_set(), dist.get_rank(), dist.get_world_size(), torch.device("cpu"))


def test_mean_of_ranks_counts_the_correct_pixels():
    assert on_ranks(_mean_of_ranks, 2) == [0.75, 0.75]


class _Masks:
    """Masks that match only once moved to the rank's device (as on a GPU, where a CPU mask cannot be compared)."""

    def __init__(self, t, device):
        self.t, self.device = t, device

    def to(self, device):
        return self.t if device == self.device else torch.full_like(self.t, -1)

    def numel(self):
        return self.t.numel()


def test_validate_accuracy_moves_the_masks_to_the_ranks_device(monkeypatch):
    import torch.distributed as dist
    import torch.utils.data

    device = torch.device("cpu")
    images = torch.stack([i for i, _ in _seg_set()])
    masks = torch.stack([m for _, m in _seg_set()])
    monkeypatch.setattr(torch.utils.data, "DataLoader", lambda share, batch_size: [(images, _Masks(masks, device))])
    monkeypatch.setattr(dist, "all_reduce", lambda t, *a, **k: None)
    model = types.SimpleNamespace(module=_logits)
    assert pitfalls.validate_accuracy(model, _seg_set(), 0, 1, device) == 0.75


def test_the_oom_fixes_verdict_says_where_it_was_measured():
    run = pitfalls_made.oom_run(training=pitfalls_made.training_rows(), label="GPU")
    v = rm.oom_fixes_verdict(run)
    assert v.status == "pass" and v.where == "GPU"


def test_c19_counts_half_a_mib_given_back_as_given_back():
    table = pitfalls_made.states(deleted_free=1000.0, after_free=1000.5)
    run = pitfalls_made.oom_run(empty_cache=table, label="GPU")
    v = rm.verdict_c19(run)
    assert v.numbers["returned_mib"] == 0.5 and v.numbers["released_mib"] == 600.0
    assert v.status == "wrong"  # both moved: what the lesson expects, not a table that fails to add up


# --------------------------------------------------------------------------- chapter 07
def _raises(tensor):
    raise ValueError("chunk 7 is out of range\nsecond line")


def _check_raising():
    from nvtutorial.chapters.ch07_collectives.exercises import check_on_rank

    return check_on_rank(_raises)


def test_the_ring_checker_reports_the_first_line_of_the_learners_exception():
    for ok, message in on_ranks(_check_raising, 2):
        assert ok is False and "ValueError: chunk 7 is out of range" in message and "second line" not in message


def _topk_plain_step_in_a_group_of_one():
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.compression import TopKState, topk_hook

    rank = dist.get_rank()
    groups = [dist.new_group([0]), dist.new_group([1])]
    state = TopKState(groups[rank], start_iter=2)
    buf = torch.full((4,), float(rank + 1))
    bucket = types.SimpleNamespace(buffer=lambda: buf, is_last=lambda: True, index=lambda: 0)
    return topk_hook(state, bucket).wait().tolist()


def test_the_topk_hooks_plain_steps_all_reduce_over_its_own_group():
    # each rank alone in its group: the plain all-reduce leaves its gradient as it is (the world's would average)
    assert on_ranks(_topk_plain_step_in_a_group_of_one, 2) == [[1.0] * 4, [2.0] * 4]


BIG = 2**24 + 2  # float32 holds every integer up to 2**24 only


def _sparse_far_index():
    from nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce import sparse_allreduce

    x = torch.zeros(BIG)
    x[BIG - 1] = 3.0
    sent = sparse_allreduce(x)
    return x.nonzero().view(-1).tolist(), x[BIG - 1].item(), sent


def test_sparse_all_reduce_keeps_indices_beyond_float32s_integers_exact():
    assert on_ranks(_sparse_far_index, 1) == [([BIG - 1], 3.0, 8 + 4 + 4)]


def _sparse_with_another_default_device():
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce import sparse_allreduce

    rank = dist.get_rank()
    x = torch.zeros(8)
    x[rank] = float(rank + 1)
    torch.set_default_device("meta")  # as on a GPU: the tensor is not where new tensors go by default
    try:
        sparse_allreduce(x)
    finally:
        torch.set_default_device("cpu")
    return x.tolist()


def test_sparse_all_reduce_keeps_its_buffers_on_the_tensors_device():
    assert on_ranks(_sparse_with_another_default_device, 2) == [[0.5, 1.0] + [0.0] * 6] * 2


def test_the_hooks_table_shows_the_final_validation_loss():
    from nvtutorial.chapters.ch07_collectives.schema_compression import Rank
    from nvtutorial.results import typed

    h = {
        "hook": "none",
        "compressed_when_timed": True,
        "step_ms_median": 10.0,
        "step_ms_all": [10.0, 10.1],
        "sent_bytes_per_step": 100.0,
        "payload_bytes_per_step": 100.0,
        "dense_bytes_per_step": 100.0,
        "train_loss": [1.0],
        "evals": [],
        "final_val_loss": 0.8,
        "final_iou": 0.5,
        "nvlink_tx_bytes_per_step": None,
        "nvlink_note": None,
        "params": 10,
        "step_ms_round_medians": [10.0, 10.1],
    }
    run = {
        "link": "NV",
        "nccl_p2p_disable": None,
        "hooks": [h],
        "density": [],
        "density_initial": [],
        "density_summary": {},
        "topk_ratio": 0.01,
        "powersgd_rank": 2,
        "steps": 2,
        "rounds": 2,
        "warmup": 3,
        "model": "tiny",
    }
    frame = cr.hooks_frame({"NV": typed(Rank, run)})
    assert frame["final_val_loss"].tolist() == [pytest.approx(0.8)]
