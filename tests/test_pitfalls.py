"""The traps of notebook 06 on real ranks (gloo on the CPU here, NCCL where there are 2 GPUs).

The lesson scripts run as they are: the validation trap (every rank's stacks taken a set time
after the ranks reached it, then the hang ended by a short process-group timeout), its fix, the
collectives and randomness lessons, the measurement workload, and the exercise's checker on its
solution and every known wrong answer. The verdicts that hold on the
CPU are asserted on their status and numbers; the GPU-only ones are recomputed from the
reference run in ``tests/test_claims_pitfalls.py``.
"""

from __future__ import annotations

import json
import pickle
import types
from pathlib import Path

import pytest

import nvtutorial
from nvtutorial import course
from nvtutorial.chapters.ch06_pitfalls import exercises as ex
from nvtutorial.chapters.ch06_pitfalls import lab as traps
from nvtutorial.chapters.ch06_pitfalls import report as rp
from nvtutorial.chapters.ch06_pitfalls import report_measured as rm
from nvtutorial.chapters.ch06_pitfalls import schema, workload
from nvtutorial.report import claims
from tests.helpers import pitfalls_results as made
from tests.helpers.launch import assert_nothing_left, requires_two_gpus

TINY = ["--model", "tiny", "--image-size", "16", "--batch-size", "4", "--samples", "16"]


def _backend() -> str:
    from nvtutorial import launch

    return launch.resolve_backend("auto", 2)


# --------------------------------------------------------------------------- the validation trap


@pytest.fixture(scope="module")
def trap(tmp_path_factory):
    """The trap: rank 0 validates 100,000 samples alone; the stacks 2 s after both ranks reached
    it; the process group's 4 s timeout ends the run."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NVTUTORIAL_RUNS_DIR", str(tmp_path_factory.mktemp("runs")))
        return traps.run_trap(
            traps.VALIDATION,
            args=[*TINY, "--val-samples", "100000", "--pg-timeout", "4"],
            stacks_after_s=2,
            env={
                "TORCH_FR_BUFFER_SIZE": "2000",
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000",
            },
            timeout=240,
            output="none",
        )


def test_the_stacks_are_taken_after_the_trap_not_after_the_launch(trap):
    assert trap.stacks_taken and trap.reached_after_s is not None
    record = json.loads((trap.result.run_dir / "trap.json").read_text())
    assert record["stacks_after_s"] == 2 and record["taken_after_s"] >= record["reached_after_s"] + 2
    assert "printed its stacks" in trap.how


def test_the_stacks_show_where_each_rank_waits(trap):
    stacks = rp.rank_stacks(trap)
    assert set(stacks) == {0, 1} and all(stacks.values()), "every rank's main-thread stack must be in its log"
    assert any(f["func"] == "validate_rank0_only" for f in stacks[0]), "rank 0 validates alone"
    assert not any(f["func"] == "validate_rank0_only" for f in stacks[1])
    assert any(f["func"] == "train_one_epoch" for f in stacks[1]), "rank 1 is training its next epoch"
    verdict = rp.hang_verdict(stacks, trap.backend, trap.where)
    assert verdict.status == "pass", verdict.text
    expected = "item" if trap.backend == "nccl" else "backward"
    assert verdict.numbers["rank0"] == "validating" and verdict.numbers["rank1"] == expected
    if trap.backend == "gloo":  # gloo: the host waits inside backward, where DDP waits for the CPU all-reduce
        assert any(f["func"] == "_engine_run_backward" for f in stacks[1])
        assert rp.hang_answer(verdict) == "a"
        assert "simulation" in trap.where


def test_the_process_group_timeout_ends_the_hang_with_an_error_and_leaves_nothing(trap):
    assert not trap.ok
    verdict = rp.timeout_verdict(trap, trap.backend, 4, trap.where)
    assert verdict.status == "pass", verdict.text
    error = trap.result.error
    assert error["rank"] == 1
    if trap.backend == "gloo":  # rank 1's backward raises: its all-reduce timed out waiting for rank 0
        assert error["type"] == "RuntimeError" and "Timed out" in error["message"]
        assert "backward" in error.get("traceback", "")
        assert rp.describe_flight_recorder(trap, "gloo")[0].startswith("no flight-recorder dump")
    assert rp.processes_left(trap) == []
    assert_nothing_left(trap.result.run_dir, within=5.0)


def test_the_fix_agrees_with_one_process_and_decides_c18(trap, runs_dir):
    result = nvtutorial.run(str(traps.VALIDATION), args=[*TINY, "--fixed"], timeout=240, output="none")
    values = [m["val_loss"] for m in result.ranks]
    single = result.ranks[0]["single_process_val_loss"]
    fixed = rp.fixed_validation_verdict(values, single, result.label)
    assert fixed.status == "pass", fixed.text
    hang_verdict = rp.hang_verdict(rp.rank_stacks(trap), trap.backend, trap.where)
    timeout = rp.timeout_verdict(trap, trap.backend, 4, trap.where)
    c18 = rp.verdict_c18(hang_verdict, timeout, fixed)
    assert c18.status == claims.claim("C18").status == "partly"


# --------------------------------------------------------------------------- the lessons that do not hang


def test_collectives_lesson_reports_each_mismatch_and_fixes_it(runs_dir):
    result = nvtutorial.run(str(traps.lesson("collectives")), timeout=240, output="none")
    errors = {name: [m[name].get("error") for m in result.ranks] for name in ("shapes", "order")}
    shapes = rp.mismatch_verdict(
        "mismatched shapes",
        errors["shapes"],
        all(len(m["shapes fixed"]["result"]) == 30 for m in result.ranks),
        result.label,
    )
    order = rp.mismatch_verdict(
        "mismatched order",
        errors["order"],
        all(m["order fixed"]["result"][0] == [3.0] for m in result.ranks),
        result.label,
    )
    assert shapes.status == order.status == "pass", (shapes.text, order.text)
    assert "shapes" in rp.mismatch_difference(errors["shapes"][0])
    assert "Op type" in rp.mismatch_difference(errors["order"][0])


def test_randomness_lesson_decides_set_epoch_and_c21(runs_dir):
    result = nvtutorial.run(str(traps.lesson("randomness")), timeout=240, output="none")
    orders = [m["orders"] for m in result.ranks]
    set_epoch = rp.set_epoch_verdict([o["broken"] for o in orders], [o["fixed"] for o in orders], result.label)
    assert set_epoch.status == "pass", set_epoch.text
    c21 = rp.verdict_c21(
        [m["weights"] for m in result.ranks],
        [m["crops"]["broken"] for m in result.ranks],
        [m["crops"]["fixed"] for m in result.ranks],
        result.label,
    )
    assert c21.status == claims.claim("C21").status, c21.text
    assert c21.numbers["same_crops_same_seed"] == c21.numbers["crops"] > c21.numbers["same_crops_seed_plus_rank"]
    assert c21.numbers["weight_sums_before"] == 2 and c21.numbers["weight_sums_after"] == 1


# --------------------------------------------------------------------------- the measurements


def test_the_loader_is_measured_on_every_rank_in_windows(runs_dir):
    result = nvtutorial.run(
        "pitfalls",
        params={
            "parts": ("dataloader", "oom"),
            "workers": (0, 1),
            "loader_batch": 4,
            "loader_image_size": 16,
            "steps": 2,
            "windows": 2,
            "shard_samples": 16,
        },
        timeout=240,
        output="none",
    )
    assert rm.has_repeats(result)
    frame = rm.loader_frame(result)
    assert set(frame["rank"]) == {0, 1}
    typed = result.ranks_as(schema.Rank)  # what each rank wrote, read back through the workload's schema
    assert [list(m) for m in result.ranks] == [["parts", "dataloader", "oom"]] * 2
    for m in typed:
        assert m.parts == ("dataloader", "oom") and m.dataloader is not None and m.oom is not None
        rows = m.dataloader.rows
        assert [r.num_workers for r in rows] == [0, 1]
        assert all(len(r.samples_per_s) == 2 and min(r.samples_per_s) > 0 for r in rows)
        assert [r.warmup_steps for r in rows] == [workload.warmup_steps(0), workload.warmup_steps(1)]
    assert typed[0].dataloader.shards is not None and typed[1].dataloader.shards is None  # rank 0 reads the files
    c17 = rm.verdict_c17(result)
    if not result.env.is_gpu:
        assert c17.status == "unverifiable" and "simulation" in c17.text
        assert rm.oom_skipped(result).startswith("skipped: needs a GPU")
        assert rm.verdict_c19(result).status == rm.verdict_c20(result).status == "unverifiable"
    assert "per sample" in rm.shards_line(result)
    # every progress bar of the run ends full: the last event of each phase has n == total
    events = [
        json.loads(line.split(" ", 1)[1])
        for line in Path(result.log_files[0]).read_text().splitlines()
        if line.startswith("@@nvtutorial ")
    ]
    last = {}
    for e in events:
        if e.get("event") == "progress":
            last[e["desc"]] = e
    assert set(last) == {"dataloader", "oom"} and all(e["n"] == e["total"] for e in last.values()), last


def _notebook_06(monkeypatch, gpus: int, **values) -> dict:
    """Notebook 06's set-up and plan cells, run as the kernel runs them, on a machine with ``gpus`` H200s."""
    from tests.helpers import notebook_cells

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    return notebook_cells.run("06_pitfalls", ["94b48aff", "c1827bed"], **values)


@pytest.mark.parametrize(
    "gpus, profile, launches",
    [
        (0, "auto", [(2, "gloo", ["oom", "dataloader"], 8, 8, [0, 2], 300)]),  # one run, the OOM demo says why
        (1, "auto", [(1, "nccl", ["oom", "dataloader"], 32, 16, [0, 2, 4, 8], 600)]),  # one process does both
        (1, "ci", [(1, "nccl", ["oom", "dataloader"], 8, 8, [0, 2], 300)]),
        (
            2,
            "auto",
            [
                (2, "nccl", ["dataloader"], 32, None, [0, 2, 4, 8, 12, 16], 600),
                (1, "nccl", ["oom"], None, 16, None, 600),
            ],
        ),
    ],
)
def test_each_measurement_runs_where_the_notebooks_plan_puts_it(monkeypatch, capsys, gpus, profile, launches):
    """Reviews N5 and S4, through notebook 06's own cells: on one GPU the out-of-memory demo and the input pipeline run
    on it in one NCCL process, the demo first, with the lesson's model and images (the demo has no collective; the
    rule counts workers per GPU process), in one launch, the loader with fewer worker counts and windows, said under
    the plan (review RR1 N5) and out of the OOM part's 'where' NCCL's version (N8) (0, 2, 4, 8; 2 windows of 5 steps;
    pinned at 4 only). Each launch: ranks, backend, parts, the loader batch and the OOM batch of its sizes (small: 8
    and 8; the lesson's: 32 and 16; None: a parameter its parts do not read, left out: review M13), the worker
    counts and its deadline."""
    ns = _notebook_06(monkeypatch, gpus, profile=profile)
    assert ns["P"] == ns["SIZES"]["full" if gpus == 2 and profile == "auto" else "ci"]
    assert ns["LOADER"].need == ("one GPU" if gpus == 1 else "two GPUs") and ns["LOADER"].gpus == gpus
    subset = "data loading on one GPU: the lesson's model and images; workers [0, 2, 4, 8], pinned memory at [4] only"
    assert (subset + ", 2 windows of 5 steps a count" in capsys.readouterr().out) is (gpus == 1 and profile == "auto")
    assert "NCCL" not in ns["PLAN"]["out of memory"].where and ("NCCL 2.28.9" in ns["LOADER"].where) is (gpus > 0)
    seen = []

    def run(workload, **kw):
        seen.append((workload, kw))
        return types.SimpleNamespace(label="a fake run")

    monkeypatch.setattr(traps.launch, "run", run)
    from tests.helpers import notebook_cells

    with pytest.raises(Exception):  # noqa: B017 - the cell goes on to read the fake run: what it launched is the test
        exec(notebook_cells.cells("06_pitfalls")["487a5d83"].source, ns)  # noqa: S102 - the notebook's own cell
    got = [
        (kw["nproc"], kw["backend"], kw["params"]["parts"])
        + tuple(kw["params"].get(k) for k in ("loader_batch", "oom_batch", "workers"))
        + (kw["timeout"],)
        for _, kw in seen
    ]
    assert got == launches and {w for w, _ in seen} == {"pitfalls"}
    one_gpu = gpus == 1 and profile == "auto"
    assert (seen[0][1]["params"].get("pin_workers"), seen[0][1]["params"]["windows"]) == (
        ([4], 2) if one_gpu else (None, ns["P_LOADER"]["windows"])
    )
    said = capsys.readouterr().out
    assert ("One training process on this GPU: " in said) is (gpus == 1)
    traps.measure(ns["P_OOM"], ns["PLAN"]["out of memory"], parts=["oom"])  # alone: one rank, on the CPU without a GPU
    assert (seen[-1][1]["nproc"], seen[-1][1]["backend"]) == (1, "nccl" if gpus else "gloo")
    assert set(seen[-1][1]["params"]) == {"parts", "oom_model", "oom_batch", "oom_image_size"}  # M13
    assert "needs a GPU" not in said + str(ns["PLAN"]) or gpus == 0


@pytest.mark.parametrize(
    "launch, modelled",
    [
        (None, True),
        ("max_split_size_mb:256", True),
        ("expandable_segments:False,max_split_size_mb:256", True),
        ("expandable_segments:True,max_split_size_mb:256", False),
        ("expandable_segments : True", False),
        ("roundup_power2_divisions:4", False),
        ("max_non_split_rounding_mb:64", False),
    ],
)
def test_the_allocator_check_runs_only_where_its_split_rule_holds(monkeypatch, launch, modelled):
    """Review RR4 S1: with expandable segments on, a freed block in front of a segment's unmapped tail serves what the
    split rule refuses, and the rounding options are not modelled: there the reset is set, not checked (no false
    alarm ends the demo); a probe that cannot get its 800 MiB is not checked either."""
    import torch

    from nvtutorial.chapters.ch06_pitfalls import workload_oom

    assert workload_oom.probe_models(launch) is modelled
    probed = []

    def wrong(dev, block_mib, request_mib):  # always the answer the launch's rule does not expect
        probed.append(dev)
        return not workload_oom.split_expected(launch, block_mib, request_mib)

    monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: "native")
    monkeypatch.setattr(workload_oom, "_set_allocator", lambda config: None)
    monkeypatch.setattr(workload_oom, "_cached_block_split", wrong)
    if modelled:
        with pytest.raises(RuntimeError, match="not set back"):
            workload_oom._restore_allocator(launch, dev="cuda:0")
    else:
        assert workload_oom._restore_allocator(launch, dev="cuda:0") == workload_oom.restoring_conf(launch)
    assert probed == (["cuda:0"] if modelled else [])

    def busy(dev, block_mib, request_mib):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(workload_oom, "_cached_block_split", busy)
    assert workload_oom._restore_allocator(launch, dev="cuda:0") == workload_oom.restoring_conf(launch)


@pytest.mark.parametrize(
    "launch, wanted",
    [
        (None, "expandable_segments:False"),
        ("", "expandable_segments:False"),
        ("garbage_collection_threshold:0.6", "expandable_segments:False,garbage_collection_threshold:0.6"),
        ("expandable_segments:True,max_split_size_mb:128", "expandable_segments:True,max_split_size_mb:128"),
    ],
)
def test_the_allocator_is_set_back_to_the_launchs_settings(monkeypatch, launch, wanted):
    """Review S1: each setting string resets max_split_size_mb (and the rounding and GC options) where it leaves them
    out, but not expandable_segments: the string that restores the launch's allocator turns that off first, unless
    the launch's own string sets it. Review RR1 N3: the reset is checked by its effect. Here the allocator's probe is
    modelled from the settings really in force in this process (CPU torch keeps them too): with the reset it passes,
    with the reset skipped the demo's last case (max_split_size_mb:256) still refuses to split, and the check fails."""
    import torch

    from nvtutorial.chapters.ch06_pitfalls import workload_oom

    def probe(dev, block_mib, request_mib):  # what the native allocator does under the settings now in force
        return workload_oom.split_expected(torch._C._accelerator_getAllocatorSettings(), block_mib, request_mib)

    assert workload_oom.restoring_conf(launch) == wanted
    monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: "native")
    monkeypatch.setattr(workload_oom, "_cached_block_split", probe)
    real_set = workload_oom._set_allocator
    try:
        real_set("expandable_segments:False,max_split_size_mb:256")  # the demo's last case
        assert workload_oom._restore_allocator(launch, dev="cuda:0") == wanted
        real_set("expandable_segments:False,max_split_size_mb:256")
        monkeypatch.setattr(workload_oom, "_set_allocator", lambda config: None)  # the reset skipped
        if workload_oom.split_expected(launch, 600, 200):
            with pytest.raises(RuntimeError, match="not set back to the launch's settings.*did not split"):
                workload_oom._restore_allocator(launch, dev="cuda:0")
        else:  # a launch whose own limit forbids the split too: the probe cannot tell (said in the docstring)
            assert workload_oom._restore_allocator(launch, dev="cuda:0") == wanted
        assert workload_oom._restore_allocator(launch, dev=None) == wanted  # no GPU: nothing to probe
    finally:
        real_set("")  # this test process's own settings: as they were


@pytest.mark.parametrize(
    "launch, block, asked, split",
    [
        (None, 600, 200, True),  # the default: no limit
        ("expandable_segments:True", 600, 200, True),
        ("max_split_size_mb:256", 600, 200, False),  # the demo's last case: an oversize block, a smaller request
        ("max_split_size_mb:600", 600, 200, False),  # the block at the limit
        ("max_split_size_mb:601", 600, 200, True),  # the block under it
        ("garbage_collection_threshold:0.6, max_split_size_mb:200", 219, 200, True),  # request at the limit: rounding
        ("max_split_size_mb:200", 220, 200, False),  # 20 MiB over the request: not taken
        ("max_split_size_mb:199", 600, 200, False),
    ],
)
def test_the_launchs_limit_predicts_the_split(launch, block, asked, split):
    """The rule the reset is checked against (the allocator's get_free_block), read from the launch's own string."""
    from nvtutorial.chapters.ch06_pitfalls import workload_oom

    assert workload_oom.split_expected(launch, block, asked) is split
    limit = workload_oom.launch_max_split_mib(launch)
    assert limit == (None if launch is None or "max_split" not in launch else float(launch.rsplit(":", 1)[1]))


@pytest.mark.parametrize("env", [{}, {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"}])
def test_the_oom_demo_runs_empty_cache_and_training_under_the_launchs_allocator(monkeypatch, env):
    """Review S1, through the demo's own sequence (its CUDA steps replaced, the allocator's settings real): the
    fragmentation case sets max_split_size_mb:256 last, and the empty_cache() table and the training step run under
    the launch's settings again; PYTORCH_ALLOC_CONF is read first (review M11)."""
    import torch

    from nvtutorial.chapters.ch06_pitfalls import workload_oom

    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen = {}

    def fragmentation(ctx, config):
        if config:
            workload_oom._set_allocator(config)
        return schema.Fragmentation(config=config or workload_oom.launch_alloc_conf() or "default", outcome="fits")

    def demo(name, value):
        def run(*args):
            seen[name] = torch._C._accelerator_getAllocatorSettings()
            return value

        return run

    empty = schema.EmptyCache(rows=())
    training = schema.Training(cap_mib=1.0, model="tiny", batch=2, image_size=8, rows=())
    monkeypatch.setattr(workload_oom, "_fragmentation", fragmentation)
    monkeypatch.setattr(workload_oom, "_empty_cache_demo", demo("empty_cache", empty))
    monkeypatch.setattr(workload_oom, "_training_oom", demo("training", training))
    probed = []

    def probe(dev, block_mib, request_mib):  # the allocator modelled from the settings in force (review RR1 N3)
        probed.append(dev)
        return workload_oom.split_expected(torch._C._accelerator_getAllocatorSettings(), block_mib, request_mib)

    monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: "native")
    monkeypatch.setattr(workload_oom, "_cached_block_split", probe)
    ctx = types.SimpleNamespace(is_gpu=True, rank=0, device="cuda:0", progress=lambda *a, **k: None)
    try:
        out = workload_oom.oom(ctx, schema.Params(parts=("oom",)))
    finally:
        workload_oom._set_allocator("")
    launch = env.get("PYTORCH_CUDA_ALLOC_CONF")
    after = workload_oom.restoring_conf(launch)
    assert seen == {"empty_cache": after, "training": after} and out.allocator_after == after
    assert probed == ["cuda:0"]  # the reset checked once, on this rank's GPU
    assert out.launch_alloc_conf == launch and out.fragmentation[0].config == (launch or "default")
    assert [f.config for f in out.fragmentation][1:] == [
        "expandable_segments:True",
        "expandable_segments:False,max_split_size_mb:256",
    ]
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert workload_oom.launch_alloc_conf() == "expandable_segments:True"  # the current name first


def test_pinned_memory_is_measured_where_pin_workers_says():
    """Notebook 06 on one GPU pins at the rule's count only (review S4's time budget); two GPUs pin at every count;
    a CPU run pins nowhere (no device to copy to)."""
    every = schema.Params(workers=(0, 2, 4, 8))
    assert workload.loader_configs(every, gpu=True) == [(w, pin) for w in (0, 2, 4, 8) for pin in (False, True)]
    one = schema.Params(workers=(0, 2, 4, 8), pin_workers=(4,))
    assert workload.loader_configs(one, gpu=True) == [(0, False), (2, False), (4, False), (4, True), (8, False)]
    assert workload.loader_configs(one, gpu=False) == [(w, False) for w in (0, 2, 4, 8)]
    with pytest.raises(nvtutorial.LaunchError, match="pin_workers"):
        nvtutorial.launch.prepare("pitfalls", params={"workers": (0, 2), "pin_workers": (4,)})


def test_bad_input_fails_before_anything_starts():
    with pytest.raises(nvtutorial.LaunchError, match="windows"):
        nvtutorial.launch.prepare("pitfalls", params={"windows": 1})
    with pytest.raises(nvtutorial.LaunchError, match="parts"):
        nvtutorial.launch.prepare("pitfalls", params={"parts": ("rank0_validation",)})
    with pytest.raises(ValueError, match="stacks_after_s"):
        traps.run_trap(traps.VALIDATION, stacks_after_s=0)
    with pytest.raises(FileNotFoundError, match="the pitfall lessons are collectives, input_pipeline"):
        traps.lesson("nope")


@requires_two_gpus
def test_memory_lesson_fits_with_the_fixes(runs_dir):
    result = nvtutorial.run(str(traps.lesson("memory")), timeout=300, output="none")
    for m in result.ranks:
        assert m["outcome"]["whole batch"].startswith("OOM")
        assert m["outcome"]["2 parts, accumulated"] == m["outcome"]["checkpointed"] == "fits"


# --------------------------------------------------------------------------- the exercise


@pytest.fixture(scope="module")
def group():
    from nvtutorial.teach import ranks

    ranks.start(quiet=True)
    yield ranks
    ranks.stop()


def test_the_checker_passes_the_solution(group):
    result = traps.check_validation(ex.SOLUTION)
    assert result.passed, result.reason
    assert "each rank read its own share (4 + 3 samples)" in result.reason


@pytest.mark.parametrize("name", list(ex.WRONG))
def test_the_checker_names_what_is_wrong(group, name):
    candidate, words = ex.WRONG[name]
    result = traps.check_validation(candidate)
    assert not result.passed and words in result.reason, result.reason
    if words == "hung":
        assert "rank 1 waited in the next training step" in result.reason and "rank 0 validated alone" in result.reason


def test_the_checker_says_when_the_code_does_not_define_the_function(group):
    result = traps.check_validation("def something_else():\n    return 1\n")
    assert not result.passed and "defines no function 'validate_accuracy'" in result.reason


# --------------------------------------------------------------------------- pure readers

DUMP = """rank 1: epoch 0 trained
Thread 0x00007f72596 (most recent call first):
  File "/x/nvtutorial/runtime.py", line 204 in watch
  File "/usr/lib/python3.12/threading.py", line 982 in run
  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap

Current thread 0x00007f725ac (most recent call first):
  File "/x/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "/x/torch/_tensor.py", line 631 in backward
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 44 in train_one_epoch
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 126 in main
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 140 in <module>
  File "<frozen runpy>", line 88 in _run_code
"""


def test_main_stack_reads_the_last_faulthandler_dump():
    frames = rp.main_stack(DUMP + DUMP.replace("line 44", "line 45"), -1)
    assert [f["func"] for f in frames][:3] == ["_engine_run_backward", "backward", "train_one_epoch"]
    assert frames[2]["line"] == 45, "which=-1: the last dump"
    assert rp.main_stack(DUMP + DUMP.replace("line 44", "line 45"))[2]["line"] == 44, "the first dump by default"
    assert rp.main_stack("no stacks here") == []
    point = rp.waiting_point(frames, lambda f: "")
    assert point["point"] == "backward" and point["frame"] == "validation.py:45 train_one_epoch"
    item = [
        {"file": "/x/validation.py", "line": 9, "func": "train_one_epoch"},
        {"file": "/x/validation.py", "line": 99, "func": "<module>"},
    ]
    assert rp.waiting_point(item, lambda f: "last = loss.item()")["point"] == "item"
    assert rp.waiting_point(item, lambda f: "optimizer.step()")["point"] == "elsewhere"


def test_hang_verdict_fails_when_the_stacks_contradict_the_lesson():
    validating = [
        {"file": "/x/v.py", "line": 1, "func": "evaluate"},
        {"file": "/x/v.py", "line": 2, "func": "<module>"},
    ]
    training = [
        {"file": "/x/v.py", "line": 3, "func": "train_one_epoch"},
        {"file": "/x/v.py", "line": 4, "func": "<module>"},
    ]
    verdict = rp.hang_verdict({0: validating, 1: training}, "nccl", "test", lambda f: "optimizer.step()")
    assert verdict.status == "fail" and verdict.numbers["rank1"] == "elsewhere"
    assert rp.hang_verdict({}, "gloo", "test").status == "fail"


def test_flight_recorder_dump_is_summarised(tmp_path):
    entries = [
        {"collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]]},
        {"collective_seq_id": 8, "profiling_name": "nccl:all_reduce", "state": "scheduled", "input_sizes": [[4]]},
    ]
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps({"version": "2.4", "entries": entries}))
    fr = rp.flight_recorder(tmp_path)
    assert fr[1]["last_completed_seq"] == 7 and fr[1]["pending"][0]["seq"] == 8
    lines = rp.describe_flight_recorder(types.SimpleNamespace(run_dir=tmp_path), "nccl")
    assert lines == ["rank 1: last completed collective #7; not completed: #8 nccl:all_reduce (scheduled)"]


def test_judge_and_explain_hang_on_recorded_outcomes():
    good = [{"value": 0.5, "read": 4, "reference": 0.5}, {"value": 0.5, "read": 3, "reference": 0.5}]
    assert ex.judge(good)[0]
    assert "returned None" in ex.judge([good[0], {**good[1], "value": None}])[1]
    assert "raised ZeroDivisionError" in ex.judge([{"error": "ZeroDivisionError: x", "read": 0}, good[1]])[1]
    assert "read no validation sample" in ex.judge([{**good[0], "read": 7}, {**good[1], "read": 0}])[1]
    stack0 = (
        f'Stack (most recent call last):\n  File "{ex.__file__}", line 170, in run_candidate\n'
        '    value = candidate(state["model"])\n  File "<your validate_accuracy>", line 9, in validate_accuracy\n'
        f'  File "{ex.__file__}", line 150, in __getitem__\n    time.sleep(SLOW_READ_S)'
    )
    stack1 = (
        f'Traceback (most recent call last):\n  File "{ex.__file__}", line 176, in run_candidate\n'
        "    loss.backward()\nRuntimeError: Timed out waiting 3000ms"
    )
    reason = ex.explain_hang({0: stack0, 1: stack1})
    assert (
        reason.startswith(
            "hung: rank 1 waited in the next training step's gradient all-reduce while rank 0 validated alone"
        )
        and "loss.backward()" in reason
    )


def test_verdicts_on_recorded_lesson_outputs():
    assert (
        rp.mismatch_difference("... Collectives differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST")
        == "Op type: ALLREDUCEvs BROADCAST"
    )
    assert rp.mismatch_verdict("x", ["no report", None], True, "t").status == "fail"
    assert (
        rp.set_epoch_verdict([[[1, 2], [1, 2]], [[3, 4], [3, 4]]], [[[1, 2], [2, 1]], [[3, 4], [4, 3]]], "t").status
        == "pass"
    )
    assert (
        rp.set_epoch_verdict([[[1, 2], [1, 2]], [[1, 4], [1, 4]]], [[[1, 2], [2, 1]], [[3, 4], [4, 3]]], "t").numbers[
            "disjoint"
        ]
        is False
    )
    assert rp.fixed_validation_verdict([1.0, 1.1], 1.0, "t").status == "fail"
    assert rp.fixed_validation_verdict([1.0, None], 1.0, "t").status == "fail"


_rows = made.rows


def test_enough_workers_uses_the_noise_rule():
    rows = _rows({0: [100, 102], 2: [300, 310], 4: [400, 404], 8: [402, 398], 16: [405, 401]})
    e = rm.enough_workers(rows)
    assert e["best"] == 16 and e["knee"] == 4 and not e["still_rising"]
    assert e["against_best"][2].status == "slower"
    rising = rm.enough_workers(_rows({0: [100, 101], 8: [200, 201], 16: [300, 301]}))
    assert rising["knee"] == 16 and rising["still_rising"]
    assert rm.pin_comparison(_rows({8: [400, 404]}, {8: [500, 505]}), 8).status == "faster"
    assert rm.pin_comparison(_rows({8: [400, 404]}), 8) is None


def test_c17_verdict_on_gpu_shaped_rows():
    def result(pinned_rates):
        rows = _rows({0: [100, 102], 4: [400, 404], 8: [402, 398], 16: [405, 401]}, {8: pinned_rates})
        return made.loader_run(rows, step=(410, 412), label="test")

    assert rm.verdict_c17(result([500, 505])).status == "holds"
    no_change = rm.verdict_c17(result([401, 403]))
    assert no_change.status == "partly" and no_change.numbers["rule_enough"] and not no_change.numbers["pin_helps"]


def test_pin_within_noise_and_the_figure():
    rows = _rows({0: [100, 102], 8: [402, 398]}, {0: [101, 103], 8: [400, 401]})
    result = made.loader_run(rows, step=(410, 412), label="test")
    assert rm.pin_within_noise(result)
    faster = made.loader_run(_rows({8: [400, 404]}, {8: [500, 505]}), step=(410, 412), label="t")
    assert not rm.pin_within_noise(faster)
    from nvtutorial.chapters.ch06_pitfalls import plots as pp

    block = made.loader(rows, step=(410, 412))
    fig, ax = pp.loader_sweep([block, block], "test", rule=8, knees=[8, 8], pin_same=True)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pin_memory=False (True: the same within the noise)"]
    assert ax.get_ylim()[1] > 412
