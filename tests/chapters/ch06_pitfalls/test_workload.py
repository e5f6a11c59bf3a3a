"""Chapter 6's workloads: the loader's measurement windows, pinned memory, and the OOM demo's allocator
settings (workload_oom)."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import cast

import pytest

import nvtutorial
from nvtutorial.chapters.ch06_pitfalls import report_measured as rm
from nvtutorial.chapters.ch06_pitfalls import schema, workload
from nvtutorial.runtime import Context


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
    ctx = cast(Context, types.SimpleNamespace(is_gpu=True, rank=0, device="cuda:0", progress=lambda *a, **k: None))
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
