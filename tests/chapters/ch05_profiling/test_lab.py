"""Chapter 5's lab: nsys's command, the workload's parameters from the notebook's sizes, what notebook 05
watches on each machine."""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

import pytest

import nvtutorial
from nvtutorial import course
from nvtutorial.chapters.ch05_profiling import lab as profiling
from nvtutorial.machine import telemetry
from tests.helpers.trace_files import notebook_sizes


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


def test_params_from_picks_only_workload_parameters():
    sizes = {"model": "tiny", "interval": 0.1, "sweep": [2, 4], "timeout": 60}
    assert profiling.params_from(sizes, steps=2) == {"model": "tiny", "sweep": [2, 4], "steps": 2}


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


def test_the_one_gpu_run_is_the_lessons_step_at_its_sizes():
    """Notebook 05 on one GPU: one rank of the lesson's step at the lesson's sizes (the course UNet, 16 images of
    256x256 in bf16), without what one rank cannot have: a trace to pair, the batch sweep, the all-reduce probe."""
    from nvtutorial import params as params_mod
    from nvtutorial.chapters.ch05_profiling import schema

    p = params_mod.build(
        schema.Params, profiling.params_from(notebook_sizes("05_profiling.ipynb")["full"], **profiling.ONE_GPU)
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
