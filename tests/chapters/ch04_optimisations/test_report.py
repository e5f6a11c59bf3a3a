"""Notebook 04's verdicts at their rules (``nvtutorial/chapters/ch04_optimisations/report.py``): every A/B through
compare with the run's A/A gap, memory within 1 %, the largest move beyond the noise, C8–C11 and no_sync. Synthetic
runs on both sides of each threshold, built as the launcher collects them (each rank's result as JSON, read typed);
the committed 2× H200 run is read here too (``tests/helpers/training_runs.py``)."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest

from nvtutorial import course
from nvtutorial.chapters.ch04_optimisations import report as o
from nvtutorial.chapters.ch04_optimisations import schema
from nvtutorial.report import claims
from nvtutorial.report.verdict import compare
from nvtutorial.results import EnvInfo, RunResult, typed
from tests.helpers.paths import ROOT
from tests.helpers.training_runs import REF, gloo_run, rows_run


def run(rows, gpu=True, params=None, model_params=1_000_000, committed=False, tf32=None, world=2):
    """A train run as the launcher collects it, rank 0's rows ``rows`` (status ok and per-GPU batch 8 unless told;
    ``committed``: the earlier workload's layout; ``tf32``: what the ranks recorded of TF32 convolutions)."""
    for r in rows:
        r.setdefault("status", "ok")
        r.setdefault("per_gpu_batch", 8)
        r.setdefault("world_size", world)
        r.setdefault("global_batch", world * r["per_gpu_batch"])
    metrics = {
        "device": "cuda:0" if gpu else "cpu",
        "world_size": world,
        "model": "tiny",
        "model_params": model_params,
        "image_size": 16,
        "tf32_convolutions": tf32,
        "rows": rows,
    }
    if not committed:
        metrics["precision"] = "fp32"
    env = EnvInfo(
        host="h",
        backend="nccl" if gpu else "gloo",
        world_size=world,
        device_names=("test GPU",) * world if gpu else ("CPU",) * world,
        torch="2.13",
        cuda=None,
        nccl=None,
        python="3.11",
    )
    return dataclasses.replace(rows_run([]), params=params or {}, env=env, ranks=[json.loads(json.dumps(metrics))])


def r(variant, rounds, **extra):
    return {
        "variant": variant,
        "code": f"{variant}'s code",
        "step_ms_rounds": list(rounds),
        "step_ms": sorted(rounds)[len(rounds) // 2],
        **extra,
    }


def committed(variant, median, low, high, **extra):
    return {
        "variant": variant,
        "per_gpu_batch": 8,
        "status": "ok",
        "amp": "bf16",
        "step_ms": median,
        "step_ms_min": low,
        "step_ms_max": high,
        **extra,
    }


# --------------------------------------------------------------------------- comparisons
def test_a_comparison_uses_the_runs_aa_gap():
    rows = [r("baseline", (10.0, 10.1)), r("fp32", (12.0, 12.1)), r("baseline", (10.5, 10.6), aa_repeat=True)]
    c = o.comparison(run(rows), "fp32")
    assert c == compare([10.0, 10.1], [12.0, 12.1], aa_gap=(10.55 - 10.05) / 10.05)
    assert o.comparison(run(rows), "fp32", "fp32").status == "no change"
    assert o.comparison(run(rows), "nope") is None
    failed = rows + [{"variant": "torch.compile", "code": "compiled", "status": "OOM"}]
    assert o.comparison(run(failed), "torch.compile") is None


def test_describe_names_what_the_repeats_were():
    c = compare([10.0, 10.1], [12.0, 12.1])
    plain = run([r("baseline", (10.0, 10.1))])
    assert o.describe(plain, c, "ms") == c.describe("ms")
    old = run([committed("base", 10.0, 9.0, 11.0)], params={"steps": 8}, committed=True)
    assert o.describe(old, c, "ms").endswith("(noise ±1%, one round each: min/median/max of 8 steps)")
    no_steps = run([committed("base", 10.0, 9.0, 11.0)], committed=True)
    assert "one round each: min/median/max of its steps" in o.describe(no_steps, c, "ms")
    one_rank = o.ranks_of(run([committed("base", 1, 1, 1)], params={"steps": 8}, committed=True))[0]
    assert o.describe(one_rank, c).endswith("of its steps)")  # a rank's result alone: no parameters


def test_loss_differences_and_identical_losses():
    rows = [
        r("baseline", (1, 1), loss_curve=[1.0, 0.8, 0.6]),
        r("a", (1, 1), loss_curve=[1.0, 0.8, 0.6]),
        r("b", (1, 1), loss_curve=[1.0, 0.9, 0.5, 0.1]),
        r("c", (1, 1), loss_curve=[]),
    ]
    assert o.loss_difference(run(rows), "a") == 0.0
    assert o.loss_difference(run(rows), "b") == pytest.approx(0.1)  # the steps both ran
    assert o.loss_difference(run(rows), "c") is None and o.loss_difference(run(rows), "nope") is None
    assert o.identical_losses(run(rows), ["a", "b", "nope"]) == {"a": True, "b": False, "nope": False}
    assert [o._loss_words(x) for x in (None, 0.0, 0.0123)] == ["n/a", "identical", "differs by ≤ 0.012"]


def test_memory_changes_per_rank():
    base, row = (10.0, 10.2, None), (9.5, 10.3, 1.0)
    assert o._memory_change(base, row) == [-0.5, pytest.approx(0.1), None]
    assert o._memory_change((), row) == []
    assert o._gb([1.23456, 2.0]) == "1.235, 2.000" and o._gb(()) == "n/a" and o._gb([1.0, None]) == "n/a"
    assert o._mb(None) == "n/a" and o._mb(12_345_678) == 12.35


def test_the_knob_table():
    rows = [
        r(
            "baseline",
            (10.0, 10.1),
            peak_mem_gb_per_rank=[1.0, 1.0],
            allreduce_bytes_per_step=4_000_000,
            loss_curve=[1.0],
        ),
        r("fp32", (12.0, 12.1), loss_curve=[1.0]),
        {"variant": "torch.compile", "code": "compiled", "status": "OOM"},
        r("baseline", (10.2, 10.3), aa_repeat=True),
    ]
    frame = o.knob_frame(run(rows)).set_index("variant")
    assert list(frame.index) == ["baseline", "fp32", "torch.compile"]
    assert frame.loc["baseline", "step time vs baseline"] == "—" and frame.loc["baseline", "loss vs baseline"] == "—"
    assert (
        frame.loc["baseline", "peak GB, each rank"] == "1.000, 1.000"
        and frame.loc["baseline", "all-reduced MB/step"] == 4.0
    )
    c = o.comparison(run(rows), "fp32")
    assert frame.loc["fp32", "step time vs baseline"] == f"{c.change:+.1%}: slower (noise ±{c.noise:.1%})"
    assert frame.loc["fp32", "loss vs baseline"] == "identical"
    # the column is what the verdict compares, the rounds' median (12.0, 12.1), not the median of every step (RR8-3)
    assert frame.loc["fp32", "step ms (rounds' median)"] == 12.05 == round(c.candidate, 2)
    assert frame.loc["torch.compile", "step time vs baseline"] == "OOM"
    only = o.knob_frame(run(rows), ["fp32", "missing"]).set_index("variant")
    assert only.loc["missing", "step time vs baseline"] == "not measured"
    # a column measured for no variant is left out: no bytes counted, no memory (the CPU, a world of one)
    assert "saved activations MB" not in frame and "GB before optimizer.step, each rank" not in frame
    assert "peak GB, each rank" in frame and "all-reduced MB/step" in frame  # measured for one variant: kept


def test_the_largest_change_beyond_the_noise():
    rows = [
        r("baseline", (10.0, 10.1)),
        r("fp32", (12.0, 12.1)),
        r("channels_last", (7.0, 7.05)),
        r("static_graph=True", (10.02, 10.08)),
    ]
    largest = o.largest_change(run(rows), ["fp32", "channels_last", "static_graph=True"])
    assert largest is not None
    name, c = largest
    assert name == "channels_last" and c.status == "faster"  # |log 0.70| > |log 1.20|
    largest = o.largest_change(run(rows), ["fp32", "static_graph=True", "missing"])
    assert largest is not None
    name, _ = largest
    assert name == "fp32"
    assert o.largest_change(run(rows), ["static_graph=True"]) is None


def test_the_prediction_answer():
    choices = {"a": "fp32", "b": "channels_last", "c": "torch.compile"}
    rows = [r("baseline", (10.0, 10.1)), r("fp32", (12.0, 12.1)), r("channels_last", (7.0, 7.05))]
    letter, text = o.prediction_answer(run(rows), choices, "z")
    assert letter == "b" and text.startswith("channels_last: step time: ")
    quiet = [r("baseline", (10.0, 11.5)), r("fp32", (10.2, 10.3)), r("channels_last", (9.5, 9.6))]
    letter, text = o.prediction_answer(run(quiet), choices, "z")
    assert letter == "z" and "the largest move, channels_last" in text
    assert "torch.compile -38%, activation checkpointing +33%, channels_last +30%, fp32 +24%, fp16 +4%" in text
    letter, text = o.prediction_answer(run([r("baseline", (10.0, 11.5))]), choices, "z")
    assert letter == "z" and "the largest move" not in text


@pytest.mark.parametrize("fp16_ms, named", [(10.1, False), (12.0, True)])
def test_no_choice_beyond_the_noise_says_what_the_table_says(fp16_ms, named):
    """N2: with no choice beyond the noise, the answer names the other variants of the run that did move (the
    table's verdicts) and says so when none did: it never contradicts the table above it."""
    choices = {"a": "fp32", "b": "channels_last"}
    rows = [
        r("baseline", (10.0, 10.1)),
        r("fp32", (10.05, 10.1)),
        r("channels_last", (9.95, 10.0)),
        r("fp16", (fp16_ms, fp16_ms + 0.1)),
        r("baseline", (10.02, 10.05), aa_repeat=True),
    ]
    letter, text = o.prediction_answer(run(rows), choices, "z")
    fp16 = o.comparison(run(rows), "fp16")
    assert letter == "z" and (fp16.status == "slower") is named
    assert text.startswith("none of the choices moved the step time beyond the noise here")
    assert (f"outside the choices, fp16 did ({fp16.change:+.1%}: slower)" in text) is named
    assert ("nor did any other variant of this run" in text) is not named
    frame = o.knob_frame(run(rows)).set_index("variant")
    assert frame.loc["fp16", "step time vs baseline"].split(": ")[1].startswith(fp16.status)


def test_the_prediction_is_graded_against_a_gpu_only():
    rows = [r("baseline", (10.0, 10.1)), r("fp32", (12.0, 12.1)), r("torch.compile", (6.0, 6.1))]
    gpu = run(rows)
    v = o.grade_largest("e", gpu)
    assert v.status == "right" and v.numbers["answer"] == "e" and v.where == gpu.label and "CPU" not in v.text
    assert o.grade_largest("a", gpu).status == "off" and o.grade_largest(None, gpu).status == "no answer"
    cpu = run([r("baseline", (10.0, 10.1)), r("fp32", (5.0, 5.1))], gpu=False)  # fp32 "faster" on the CPU
    v = o.grade_largest("e", cpu, reference=gpu)
    assert v.status == "right" and v.where == f"{gpu.label}: {o.REFERENCE_NOTE}"
    assert "bucket_cap_mb=25 passed explicitly: a 25 MiB first bucket" in o.REFERENCE_NOTE  # not the default (RR1 N4)
    assert "does not grade a prediction about GPUs" in v.text
    assert o.grade_largest("a", cpu).numbers["answer"] == "e"  # no reference given: the committed run, compile
    assert o.reference_run(Path("/nonexistent")) is None
    assert o.CHOICES == {
        "a": "fp32",
        "b": "fp16",
        "c": "channels_last",
        "d": "activation checkpointing",
        "e": "torch.compile",
    }


def test_a_gpu_run_where_no_choice_moved_grades_none_of_these():
    """Every choice inside the noise: the answer is the last choice, (f), and a learner who picked it is right."""
    noisy = run([r("baseline", (10.0, 11.5)), r("fp32", (9.0, 10.0)), r("channels_last", (8.8, 9.9))])
    v = o.grade_largest("f", noisy)
    assert v.status == "right" and v.numbers["answer"] == o.NONE_CHOICE == "f"
    assert o.grade_largest("a", noisy).status == "off"


def test_without_a_gpu_or_a_reference_nothing_is_graded(monkeypatch):
    monkeypatch.setattr(o, "reference_run", lambda folder=None: None)
    cpu = run([r("baseline", (10.0, 10.1)), r("fp32", (5.0, 5.1))], gpu=False)
    v = o.grade_largest("a", cpu)
    assert v.status == "info" and v.numbers == {"prediction": "a"} and v.where == cpu.label


# --------------------------------------------------------------------------- where each part runs
class _Ran(Exception):
    """Raised by the stubbed lab once it has recorded what the notebook asked for."""


def notebook_launches(monkeypatch, gpus, profile="auto"):
    """Notebook 04's own cells (setup, plan, the launch) on a machine of ``gpus`` GPUs: its plan, and the launches
    its lab would make."""
    from nvtutorial.chapters import ch04_optimisations as ch
    from tests.helpers import notebook_cells

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    asked = {}

    def measure(plan, parts):
        asked.update(plan=plan, parts=parts)
        raise _Ran

    monkeypatch.setattr(ch.lab, "measure", measure)
    ns = notebook_cells.run("04_optimisations", ["nb04-01", "nb04-03"], profile=profile)
    with pytest.raises(_Ran):
        notebook_cells.run("04_optimisations", ["nb04-09"], **ns)
    assert ns["shown"] == [ns["PLAN"]]
    return ns["PLAN"], ch.lab.launches(asked["plan"], asked["parts"])


def test_one_gpu_runs_its_ab_on_the_gpu_at_the_lesson_sizes_and_ddps_options_on_the_cpu(monkeypatch):
    plan, (one, ddp) = notebook_launches(monkeypatch, 1)
    assert (one.nproc, one.backend, one.params["model"], one.params["image_size"]) == (1, "nccl", "full", 256)
    assert one.parts == ("A/Bs on one GPU",) and one.params["variants"] == (
        "baseline",
        "fp32",
        "fp16",
        "channels_last",
        "activation checkpointing",
        "torch.compile",
        "gradient_as_bucket_view=True",  # C10's memory: DDP's options run on the CPU here, so the GPU measures it
    )
    assert one.params["count"] is False and one.params["comm_share"] is False
    # each A/B compares rounds under the noise rule: at least 3 of them, of 3 timed steps each, after 2 untimed
    assert (one.params["warmup"], one.params["steps"], one.params["repeats"]) == (2, 3, 3)
    from tests.helpers import notebook_cells

    attention = notebook_cells.parameters("04_optimisations")["SIZES"]["full"]["attention"]
    assert (attention["warmup"], attention["repeats"], attention["seq"]) == (2, 5, 4096)  # C9's repeats compare too
    assert (ddp.nproc, ddp.backend, ddp.params["model"]) == (2, "gloo", "tiny") and ddp.params["count"] is True
    assert ddp.params["variants"][0] == "baseline" and "static_graph=True" in ddp.params["variants"]
    assert plan["C9: attention kernels"].backend == "nccl" and plan["C9: attention kernels"].profile == "full"
    assert "needs a GPU" not in str(plan) and "2 ranks need 2 GPUs for NCCL; this machine has 1" in str(plan)


def test_without_a_gpu_both_parts_are_one_simulation_and_two_gpus_run_each_as_taught(monkeypatch):
    _, (both,) = notebook_launches(monkeypatch, 0)
    assert both.parts == ("A/Bs on one GPU", "DDP's options") and (both.nproc, both.backend) == (2, "gloo")
    assert both.params["model"] == "tiny" and "torch.compile" not in both.params["variants"]
    assert both.params["variants"].count("baseline") == 1 and both.params["count"] is True
    assert both.params["variants"].count("gradient_as_bucket_view=True") == 1  # DDP's option, not C10's extra
    _, (one, ddp) = notebook_launches(monkeypatch, 2)
    assert (one.nproc, one.backend, ddp.nproc, ddp.backend) == (1, "nccl", 2, "nccl")
    assert "gradient_as_bucket_view=True" not in one.params["variants"]  # two GPUs measure C10's memory under DDP
    assert one.params["model"] == ddp.params["model"] == "full"
    _, (one, ddp) = notebook_launches(monkeypatch, 1, "ci")  # small sizes asked for: the GPU still runs its part
    assert (one.backend, one.params["model"], ddp.backend) == ("nccl", "tiny", "gloo")
    assert "torch.compile" not in one.params["variants"]


@pytest.mark.parametrize("gpus, said", [(0, True), (1, False), (2, False)])
def test_a_part_measured_in_anothers_launch_says_so(monkeypatch, capsys, gpus, said):
    """R1-17: without a GPU the plan calls the A/Bs one process's CPU simulation, while they share the two gloo
    ranks of DDP's options: the lab says so before the launch; where each part has its own launch it says nothing."""
    import nvtutorial
    from nvtutorial.chapters.ch04_optimisations import lab

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    plan = course.plan("04", "auto", {"A/Bs on one GPU": "one GPU", "DDP's options": "two GPUs"}, machine)
    sizes = {
        "model": "tiny",
        "image_size": 8,
        "batch": 4,
        "samples": 16,
        "accumulation": 2,
        "warmup": 1,
        "steps": 1,
        "repeats": 2,
        "timeout": 60,
    }
    launched = []
    monkeypatch.setattr(nvtutorial, "run", lambda *a, **kw: launched.append(kw["nproc"]) or kw["nproc"])
    runs = lab.measure(plan, {"A/Bs on one GPU": (sizes, ["fp32"]), "DDP's options": (sizes, ["static_graph=True"])})
    out = capsys.readouterr().out
    assert launched == ([2] if said else [1, 2]) and runs["A/Bs on one GPU"] == (2 if said else 1)
    assert (out == "A/Bs on one GPU: measured by rank 0 of the 2 gloo ranks that run DDP's options\n") is said
    assert out == "" or said


# --------------------------------------------------------------------------- C8
def test_c8_on_this_torch():
    v = o.verdict_c8()
    assert v.status == "wrong" and v.numbers["exists"] is False and v.numbers["error"].startswith("AttributeError")
    assert v.where == "this Python process"


def test_c8_where_the_function_exists(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "set_enabled_lms", lambda flag: None, raising=False)
    v = o.verdict_c8()
    assert v.status == "unverifiable" and v.numbers["exists"] is True and v.numbers["error"] is None


# --------------------------------------------------------------------------- C11
CURVE = [1.0, 0.8, 0.6]


@pytest.mark.parametrize(
    "fp16_rounds, fp16_curve, status",
    [
        ((8.0, 8.05), CURVE, "partly"),  # faster beyond the noise
        ((9.95, 10.0), CURVE, "info"),  # within the noise
        ((12.0, 12.05), CURVE, "info"),  # slower: one run of one model decides nothing against the claim
        ((8.0, 8.05), [1.0, math.nan, 0.5], "wrong"),  # did not train: not finite
        ((8.0, 8.05), [1.0, 0.9, 1.0], "wrong"),  # not lower at the end
        ((8.0, 8.05), [1.0, 0.9, 0.99], "partly"),
    ],
)
def test_c11_at_its_rule(fp16_rounds, fp16_curve, status):
    rows = [
        r("fp32", (10.0, 10.05), loss_curve=CURVE),
        r("fp16", fp16_rounds, loss_curve=fp16_curve),
        r("baseline", (7.0, 7.05), loss_curve=CURVE),
    ]
    v = o.verdict_c11(run(rows))
    c = compare([10.0, 10.05], list(fp16_rounds))
    assert v.status == status and v.numbers["fp16_ratio"] == c.ratio and v.numbers["noise"] == c.noise
    assert v.numbers["fp16_status"] == c.status and v.numbers["bf16_status"] == "faster"
    assert v.numbers["fp16_trains"] is (status != "wrong") and v.numbers["fp32"] == 0.6
    assert v.numbers["bf16_ratio"] == compare([10.0, 10.05], [7.0, 7.05]).ratio
    assert "fp16 + GradScaler step time: 10.03 ms →" in v.text  # in milliseconds, as measured


def test_c11_without_bf16_on_the_cpu_and_without_runs():
    rows = [r("fp32", (10.0, 10.05), loss_curve=CURVE), r("fp16", (8.0, 8.05), loss_curve=CURVE)]
    v = o.verdict_c11(run(rows))
    assert v.status == "partly" and v.numbers["bf16_ratio"] is None and v.numbers["bf16_status"] is None
    assert math.isnan(v.numbers["baseline"])
    cpu = o.verdict_c11(run(rows, gpu=False))
    assert cpu.status == "info" and set(cpu.numbers) == {"fp16_ratio", "bf16_ratio"}
    missing = o.verdict_c11(run(rows[:1]))
    assert (missing.key, missing.status, missing.numbers) == ("C11", "info", {})
    assert missing.text == "not decided: the fp32 or fp16 run is missing"
    no_curve = o.verdict_c11(run([r("fp32", (10.0, 10.05), loss_curve=CURVE), r("fp16", (8.0, 8.05))]))
    assert no_curve.status == "partly" and no_curve.numbers["fp16_trains"] is True


@pytest.mark.parametrize(
    "tf32, gpu, labelled",
    [(True, True, True), (False, True, False), (None, True, False), (None, False, False)],
)
@pytest.mark.parametrize("fp16_rounds", [(8.0, 8.05), (12.0, 12.05)])  # C11 partly, and info
def test_fp32_says_where_its_convolutions_ran_on_tf32(tf32, gpu, labelled, fp16_rounds):
    """R1-6: where the ranks recorded TF32 convolutions (cuDNN's default on Ampere and later), "fp32" is not strict
    fp32: the table, the figure and C11 say so; elsewhere (switched off, an older GPU, the CPU) fp32 is fp32."""
    rows = [
        r("baseline", (7.0, 7.05), loss_curve=CURVE),
        r("fp32", (10.0, 10.05), loss_curve=CURVE),
        r("fp16", fp16_rounds, loss_curve=CURVE),
    ]
    result = run(rows, gpu=gpu, tf32=tf32)
    name = o.TF32_FP32 if labelled else "fp32"
    assert o.tf32_convolutions(result) is labelled and o.label(result, "fp32") == name
    assert o.label(result, "fp16") == "fp16" and o.TF32_FP32 == "fp32 (TF32 convolutions)"
    assert list(o.knob_frame(result)["variant"]) == ["baseline", name, "fp16"]
    from nvtutorial.chapters.ch04_optimisations import plots

    fig, ax = plots.plot_step_changes(result, ["fp32", "fp16"], result, "t")
    assert [t.get_text() for t in ax.get_yticklabels()] == [name, "fp16"]
    import matplotlib.pyplot as plt

    plt.close(fig)
    v = o.verdict_c11(result)
    assert v.text.startswith(f"{'not decided on the CPU (' if not gpu else ''}") and f"against {name}: fp16" in v.text
    assert (o.TF32_NOTE in v.text) is labelled and ("strict fp32" in v.text) is labelled
    if gpu:
        assert v.numbers["tf32_convolutions"] is labelled and v.status == ("partly" if fp16_rounds[0] < 9 else "info")


# --------------------------------------------------------------------------- C10
NAME = "gradient_as_bucket_view=True"


def c10_run(bytes_base=4e6, bytes_view=4e6, saved=(0.004, 0.004), peak=(10.0, 10.0), peak_view=(10.0, 10.0), gpu=True):
    base = r(
        "baseline",
        (10.0, 10.1),
        allreduce_bytes_per_step=bytes_base,
        optimizer_mem_gb_per_rank=[1.0, 1.0],
        peak_mem_gb_per_rank=list(peak),
    )
    view = r(
        NAME,
        (10.0, 10.05),
        allreduce_bytes_per_step=bytes_view,
        optimizer_mem_gb_per_rank=[1.0 - s if s is not None else None for s in saved],
        peak_mem_gb_per_rank=list(peak_view),
    )
    return run([base, view], gpu=gpu)


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "wrong"),  # equal bytes, and one gradient copy saved (4 MB = 1 M fp32 parameters)
        ({"bytes_view": 2e6}, "wrong"),  # the bytes differ, but the memory shows one copy saved
        ({"bytes_view": 2e6, "saved": (0.001, 0.004)}, "info"),  # a quarter of a copy on rank 0: not one copy
        ({"bytes_view": 2e6, "saved": (0.00201, 0.004)}, "wrong"),
        ({"bytes_view": 2e6, "saved": (0.00199, 0.004)}, "info"),
        ({"bytes_view": 2e6, "saved": (0.00599, 0.004)}, "wrong"),
        ({"bytes_view": 2e6, "saved": (0.00601, 0.004)}, "info"),
        ({"bytes_view": 2e6, "saved": (None, 0.004)}, "info"),
        ({"bytes_base": None, "bytes_view": None}, "wrong"),  # not counted: memory decides
    ],
)
def test_c10_at_its_rule(kwargs, status):
    v = o.verdict_c10(c10_run(**kwargs))
    assert v.status == status
    saved = kwargs.get("saved", (0.004, 0.004))
    if None not in saved:
        assert (
            v.numbers["saved_before_step_gb"] == pytest.approx(list(saved)) and v.numbers["gradient_copy_gb"] == 0.004
        )
    if kwargs.get("bytes_base", 4e6) is not None:
        assert v.numbers["allreduce_bytes_baseline"] == 4e6 and v.numbers["allreduce_bytes_bucket_view"] == kwargs.get(
            "bytes_view", 4e6
        )


@pytest.mark.parametrize("peak_view, unchanged", [((10.09, 9.91), True), ((10.11, 10.0), False), ((9.89, 10.0), False)])
def test_c10_peak_within_one_percent(peak_view, unchanged):
    v = o.verdict_c10(c10_run(peak_view=peak_view))
    assert v.numbers["peak_change_gb"] == pytest.approx([peak_view[0] - 10.0, peak_view[1] - 10.0])
    assert ("no change (under 1 %)" in v.text) is unchanged and o.MEMORY_NOISE == 0.01


def one_gpu_c10(saved=0.1, peak_view=10.0, with_view=True, gpu=True):
    """The A/Bs' launch on one GPU (a world of one, the lesson's 25 M-parameter model: one gradient copy 0.1 GB)."""
    rows = [r("baseline", (10.0, 10.1), optimizer_mem_gb_per_rank=[1.0], peak_mem_gb_per_rank=[10.0])]
    if with_view:
        rows.append(r(NAME, (10.0, 10.05), optimizer_mem_gb_per_rank=[1.0 - saved], peak_mem_gb_per_rank=[peak_view]))
    return run(rows, gpu=gpu, model_params=25_000_000, world=1)


@pytest.mark.parametrize(
    "bytes_view, saved, status",
    [
        (4e6, 0.1, "wrong"),  # equal bytes (the CPU run) and one copy (the GPU)
        (2e6, 0.1, "wrong"),  # the bytes alone would not decide: the one GPU's memory does
        (2e6, 0.0501, "wrong"),
        (2e6, 0.0499, "info"),  # under half a copy
        (2e6, 0.1499, "wrong"),
        (2e6, 0.1501, "info"),  # over one and a half copies
        (4e6, 0.0, "wrong"),  # nothing saved, but the bytes are equal: not compression
        (4e6, 0.0499, "wrong"),  # the bytes decide; the memory half not seen (R5-1)
        (4e6, 0.0501, "wrong"),
        (4e6, 0.1499, "wrong"),
        (4e6, 0.1501, "wrong"),
    ],
)
def test_c10_reads_the_memory_on_one_gpu_where_ddps_options_ran_on_the_cpu(bytes_view, saved, status):
    """R1-19: on a machine with one GPU, DDP's options run as the CPU simulation (bytes counted) and the A/Bs' launch
    on the GPU measures the bucket view's memory (DDP in a world of one has its buckets): the verdict reads each
    where it was measured, and says so."""
    cpu, gpu = c10_run(bytes_view=bytes_view, gpu=False), one_gpu_c10(saved)
    v = o.verdict_c10(cpu, gpu)
    assert v.status == status and v.where == f"bytes: {cpu.label}; memory and step time: {gpu.label}"
    n = v.numbers
    one_copy = 0.05 <= saved <= 0.15
    assert ("one gradient-sized buffer and one copy less" in v.text) is one_copy  # R5-1: a fact only where seen
    unseen = f"was not seen in this run: {saved:.3f} of the expected 0.100 GB ({gpu.label}); " + REFERENCE_SAVING
    assert (unseen in v.text) is (status == "wrong" and not one_copy)
    assert n["saved_before_step_gb"] == pytest.approx([saved]) and n["gradient_copy_gb"] == 0.1  # the GPU's model
    assert n["allreduce_bytes_bucket_view"] == bytes_view and n["peak_change_gb"] == [0.0]
    assert f"less (on {gpu.label}, one process: DDP in a world of one has its buckets too) (rank 0;" in v.text
    assert "memory is counted on GPUs only" not in v.text
    assert n["step_status"] == o.comparison(gpu, NAME).status  # R5-3: the step time where the memory was measured
    assert "step time 10.05 ms → 10.03 ms" in v.text and "CPU simulation" not in v.text


REFERENCE_SAVING = (
    "the committed 2× H200 reference (reference/h200x2/runs/train-20261130-021410-f02108) saved 0.130 and 0.130 GB "
    "(ranks 0, 1)"
)
"""R5-1: what C10 quotes where this run did not show the memory half (the committed run, through its reader)."""


def test_c10_on_the_cpu_alone_says_the_memory_half_was_not_measured_and_labels_the_step_time():
    v = o.verdict_c10(c10_run(gpu=False, saved=(None, None)))  # a CPU run records no memory
    assert v.status == "wrong" and "one copy less" not in v.text
    assert (
        "The memory half (one gradient-sized buffer less) was not measured in this run; " + REFERENCE_SAVING in v.text
    )
    assert "step time (CPU simulation) 10.05 ms → 10.03 ms" in v.text
    undecided = o.verdict_c10(c10_run(gpu=False, bytes_view=2e6, saved=(None, None)))
    assert undecided.status == "info" and "not measured" not in undecided.text  # not decided: no sentence


def test_c10_reads_the_one_gpu_only_where_it_measured_the_bucket_view_on_a_gpu():
    cpu = c10_run(gpu=False)
    for other in (None, one_gpu_c10(with_view=False), one_gpu_c10(gpu=False)):
        v = o.verdict_c10(cpu, other)
        assert v.where == cpu.label and "memory is counted on GPUs only" in v.text
    two = c10_run()  # DDP's options on two GPUs: their own memory, whatever the one GPU measured
    v = o.verdict_c10(two, one_gpu_c10(saved=0.05))
    assert v.where == two.label and v.numbers["saved_before_step_gb"] == pytest.approx([0.004, 0.004])
    assert "(ranks 0, 1;" in v.text and "world of one" not in v.text


def test_c10_needs_both_runs_and_says_where_memory_was_counted():
    assert o.verdict_c10(run([r("baseline", (10.0, 10.1))])).status == "info"
    cpu = o.verdict_c10(c10_run(gpu=False))
    assert "memory is counted on GPUs only" in cpu.text
    step = o.verdict_c10(c10_run())
    assert step.numbers["step_status"] == "no change" and step.numbers["step_ratio"] == pytest.approx(10.025 / 10.05)
    bare = o.verdict_c10(run([r("baseline", (1, 1)), r(NAME, (1, 1))], model_params=0))
    assert bare.status == "info" and bare.numbers["step_status"] == "no change"


# --------------------------------------------------------------------------- C9
SWITCHES = {
    "flash_sdp_enabled": True,
    "mem_efficient_sdp_enabled": True,
    "math_sdp_enabled": True,
    "cudnn_sdp_enabled": None,
    "flash_attention_built": True,
}


def attention(calls=0, default_ops=("_flash",), off_ops=("_flash",), unet=None, ms_all=False, settings=None):
    """One rank's ``attention_sdp`` result, typed (as ``RunResult.metrics_as`` reads it)."""
    a = {"setting": "default switches", "ops": list(default_ops) + ["x_backward"], "ms": 1.0}
    b = {"setting": "enable_flash_sdp(False)", "ops": list(off_ops), "ms": 1.2}
    if ms_all:
        a["ms_all"], b["ms_all"] = [1.0, 1.01], [1.5, 1.51]
    u = {
        "model": "tiny",
        "sdpa_calls": calls,
        "attention_block_sdpa_calls": 1,
        "ms_flash_on": 9.0,
        "ms_flash_off": 9.1,
        **(unet or {}),
    }
    return typed(
        schema.Rank,
        {
            "device": "cuda:0",
            "dtype": "bf16",
            "defaults": SWITCHES,
            "shape": {"batch": 1, "heads": 2, "seq": 64, "head_dim": 16},
            "backends": [{"backend": "MATH", "runs": True, "ops": ["math (matmul + softmax)"], "why": ""}],
            "unet": u,
            "attention": [a, b] if settings is None else settings,
            "after": SWITCHES,
        },
    )


def test_the_attention_schema_upgrades_the_committed_layout():
    """The committed run kept only the median of its 10 repeats and timed flash-on once: no repeats, no second time."""
    old = {
        "device": "cuda:0",
        "dtype": "bf16",
        "defaults": SWITCHES,
        "shape": {"batch": 1, "heads": 2, "seq": 64, "head_dim": 16},
        "backends": [{"backend": "CUDNN_ATTENTION", "runs": False, "why": "not built"}],
        "attention": [{"setting": "default switches", "ops": ["_flash"], "ms": 1.0}],
        "unet": {
            "model": "full",
            "sdpa_calls": 0,
            "attention_block_sdpa_calls": 1,
            "ms_flash_on": 9.0,
            "ms_flash_off": 9.1,
        },
        "after": SWITCHES,
    }
    up = schema.Rank.upgrade(json.loads(json.dumps(old)))
    assert up["attention"] == [{"setting": "default switches", "ops": ["_flash"], "ms": 1.0, "ms_all": []}]
    assert up["backends"] == [{"backend": "CUDNN_ATTENTION", "runs": False, "why": "not built", "ops": []}]
    assert up["unet"] == {
        **old["unet"],
        "ms_flash_on_all": [],
        "ms_flash_off_all": [],
        "ms_flash_on_again": None,
        "ms_flash_on_again_all": [],
    }
    rank = typed(schema.Rank, old)
    assert rank.unet.ms_flash_on_again is None and rank.attention[0].ms_all == () and rank.backends[0].ops == ()
    assert rank.setting("default switches") == schema.Setting("default switches", ("_flash",), 1.0)
    assert rank.setting("nope") is None and o.attention_of(rank) is rank
    with pytest.raises(ValueError, match="'FOO' is not one of"):
        typed(schema.Rank, {**old, "backends": [{"backend": "FOO", "runs": False}]})
    without = {k: v for k, v in old.items() if k != "backends"}  # a run that probed no backend
    assert schema.Rank.upgrade(json.loads(json.dumps(without)))["backends"] == []
    assert typed(schema.Rank, without).backends == ()


def test_c9_decided_by_where_sdpa_is_called():
    v = o.verdict_c9(attention())
    assert v.status == "wrong" and v.numbers == {
        "unet_sdpa_calls": 0,
        "flash_default": True,
        "kernel_default": "_flash",
        "kernel_flash_off": "_flash",
    }
    assert "leaves the attention block on _flash" in v.text and "the same kernels either way" in v.text
    moved = o.verdict_c9(attention(off_ops=("math",), ms_all=True))
    assert moved.numbers["kernel_flash_off"] == "math" and "moves the attention block from _flash to math" in moved.text
    assert "slower" in moved.text
    called = o.verdict_c9(attention(calls=3))
    assert called.status == "info" and called.numbers["unet_sdpa_calls"] == 3
    none = o.verdict_c9(attention(settings=[{"setting": "default switches", "ops": ["x_backward"], "ms": 1.0}]))
    assert "kernel_default" not in none.numbers and none.status == "wrong"


@pytest.mark.parametrize(
    "off_ms, off_ops, moved",
    [
        ((1.034, 1.035), ("_flash",), None),  # the same kernel, 3.4 % apart (beyond the 1 % noise): no effect
        ((1.005, 1.006), ("_flash",), None),  # the same kernel within the noise, repeats apart: drift
        ((1.0005, 1.002), ("_flash",), None),  # the same kernel, repeats overlapping: noise
        ((1.034, 1.035), ("math",), "slower"),  # another kernel, beyond the noise: the switch did it
        ((0.96, 0.961), ("math",), "faster"),
        ((1.005, 1.006), ("math",), "no change"),
    ],
)
def test_c9_the_attention_block_is_slower_only_with_another_kernel(off_ms, off_ops, moved):
    """R1-7: where the switch left the attention block on the same kernel, the gap between the two timings is this
    machine's noise (an A/A pair), never "slower" or "faster", whatever its size."""
    settings = [
        {"setting": "default switches", "ops": ["_flash", "x_backward"], "ms": 1.0, "ms_all": [1.0, 1.001]},
        {"setting": "enable_flash_sdp(False)", "ops": list(off_ops), "ms": off_ms[0], "ms_all": list(off_ms)},
    ]
    v = o.verdict_c9(attention(settings=settings))
    block = v.text[v.text.index("switching it off") :].split("; the UNet's step")[0]
    ms = [1.0, 1.001], list(off_ms)
    c = compare(*ms)
    if moved is None:
        assert block.startswith("switching it off leaves the attention block on _flash (the same kernel): ")
        assert v.numbers["attention_aa_gap"] == pytest.approx(abs(c.change))
        assert f"a gap of {abs(c.change):.1%} between two runs of the same kernel, {o.gap_cause(*ms)}" in block
        assert not any(w in block for w in ("slower", "faster", "no change")) and "not an effect" in block
    else:
        assert block.startswith("switching it off moves the attention block from _flash to math: ")
        assert c.status == moved and block.endswith(c.describe("ms")) and "attention_aa_gap" not in v.numbers
    unkept = o.verdict_c9(attention())  # the committed layout: medians only
    assert "leaves the attention block on _flash (the same kernel): 1.00 → 1.20 ms (medians;" in unkept.text


@pytest.mark.parametrize(
    "a, b, text",
    [
        (
            [1.0, 1.1, 1.0, 1.1],
            [1.2, 1.3, 1.2, 1.3],
            "drift between the two runs (the clock, temperature or the host: not recorded per setting; their repeats",
        ),
        ([1.0, 1.1, 1.0, 1.1], [0.8, 0.9, 0.8, 0.9], "drift between the two runs"),  # either way round
        ([1.0, 1.1, 1.0, 1.1], [1.1, 1.3, 1.2, 1.3], "noise at 4+4 repeats (their ranges overlap)"),
        (
            [1.0, 1.1, 1.0],
            [1.2, 1.3, 1.2, 1.3],
            "noise at 3+4 repeats (identical runs' repeats fail to overlap by chance 6%",
        ),
    ],
)
def test_gap_cause_is_drift_only_where_the_repeats_do_not_overlap(a, b, text):
    """RR13-9: the same kernels timed twice; repeats that do not overlap moved together (clock, temperature), where
    noise alone would part them less than 5 % of the time (4+4: 2 / C(8, 4) = 2.9 %; 3+4: 5.7 %)."""
    assert text in o.gap_cause(a, b)


@pytest.mark.parametrize("calls, status", [(0, "wrong"), (2, "info")])
def test_c9_the_unets_step_with_repeats(calls, status):
    unet = {"ms_flash_on_all": [9.6, 9.61], "ms_flash_off_all": [8.93, 8.94], "ms_flash_on_again_all": [9.2, 9.3]}
    v = o.verdict_c9(attention(calls=calls, unet=unet))
    c = compare([9.6, 9.61], [8.93, 8.94], aa_gap=abs(9.605 - 9.25) / 9.25)
    assert v.status == status
    if calls == 0:
        assert v.numbers["unet_aa_gap"] == abs(c.change) and v.numbers["unet_repeats"] == [2, 2]
        assert "unet_status" not in v.numbers
    else:
        assert v.numbers["unet_ratio"] == c.ratio and v.numbers["unet_status"] == c.status


# --------------------------------------------------------------------------- no_sync
def acc_run(bytes_with: int | None = 4_000_000, bytes_without: int | None = 16_000_000, n=4, gpu=True):
    return run(
        [
            r("no_sync accumulation", (10.0, 10.1), allreduce_bytes_per_step=bytes_with, accumulation=n),
            r("accumulation without no_sync", (12.0, 12.1), allreduce_bytes_per_step=bytes_without, accumulation=n),
        ],
        gpu=gpu,
    )


@pytest.mark.parametrize(
    "without, status", [(16_000_000, "pass"), (12_000_000, "fail"), (16_000_001, "fail"), (4_000_000, "fail")]
)
def test_no_sync_sends_once_per_optimizer_step(without, status):
    v = o.accumulation_verdict(acc_run(bytes_without=without))
    assert v.status == status and v.numbers["bytes_ratio"] == without / 4_000_000 and v.numbers["micro_batches"] == 4
    c = compare([10.0, 10.1], [12.0, 12.1])
    assert v.numbers["step_ratio"] == c.ratio and v.numbers["step_status"] == "slower"


def test_no_sync_needs_both_runs_and_their_bytes():
    assert o.accumulation_verdict(run([r("no_sync accumulation", (1, 1))])).status == "info"
    assert o.accumulation_verdict(acc_run(bytes_with=None)).status == "info"
    assert o.accumulation_verdict(acc_run(bytes_without=None)).status == "info"
    assert "[CPU, gloo" in o.accumulation_verdict(acc_run(gpu=False)).text


def test_the_committed_layout_reads_like_todays():
    old = run(
        [committed("base", 10.0, 9.9, 10.1), committed("amp=fp32", 12.0, 11.9, 12.1)],
        params={"steps": 8},
        committed=True,
    )
    assert [row.variant for row in o.rows_of(old)] == ["baseline", "fp32"] and o.rows_of(old)[1].committed
    c = o.comparison(old, "fp32")
    assert c.repeats == (3, 3) and c.baseline == 10.0 and c.status == "slower"


def test_the_kernel_of_a_setting_is_its_forward_one():
    assert o.kernel(["aten::_flash_attention_backward", "aten::_flash_attention"]) == "aten::_flash_attention"
    assert o.kernel(["aten::x_backward"]) == "?" and o.kernel([]) == "?"


# --------------------------------------------------------------------------- torch.compile: what the compilation costs
def compiled_run(compile_rounds=(6.0, 6.05, 6.1), first_s=30.0, base_first_s=0.1, **base):
    rows = [
        r("baseline", (10.0, 10.05, 10.1), first_step_s=base_first_s, **base),
        r("torch.compile", compile_rounds, first_step_s=first_s),
        r("baseline", (10.0, 10.05, 10.1), aa_repeat=True),
    ]
    return run(rows)


def test_payback_steps_at_its_rule():
    assert o.payback_steps(30.0, 0.1, 10.0, 6.0) == pytest.approx(29_900 / 4.0)  # the extra first step ÷ the saving
    assert o.payback_steps(0.1, 0.1, 10.0, 9.99) == 0.0  # a compilation that cost nothing has nothing to pay back
    for step in (10.0, 10.5):  # saves nothing, or costs: never
        with pytest.raises(ValueError, match="never pays for itself"):
            o.payback_steps(30.0, 0.1, 10.0, step)


def test_the_compile_summary_says_when_the_compilation_pays_for_itself():
    text = o.compile_summary(compiled_run())
    assert text.startswith(
        "torch.compile: the first step took 30.0 s (the compilation), then 6.05 ms per step (the rounds' median); "
    )
    assert "each step saves 4.00 ms against the baseline (10.05 → 6.05 ms, the rounds' medians)" in text
    assert "paid for itself after about 7,475 steps (1.3 min of the baseline's training)" in text  # 29.9 s / 4 ms
    assert "on-disk cache" in text
    # within the noise (1 %) of the baseline, or slower: it never pays for itself, and the rule's words say why
    for rounds, words in (((9.95, 10.0, 10.02), "no change"), ((12.0, 12.1, 12.2), "slower")):
        text = o.compile_summary(compiled_run(rounds))
        assert words in text and text.endswith("the compilation never pays for itself at this size")
        assert "steps" not in text
    just_beyond = o.compile_summary(compiled_run((9.85, 9.88, 9.9)))  # 1.7 % faster, beyond the 1 % noise
    assert "saves 0.17 ms against" in just_beyond and "after about 175,882 steps" in just_beyond


def test_the_compile_summary_without_a_compiled_row_or_a_baseline():
    assert o.compile_summary(run([r("baseline", (10.0, 10.1))])).startswith("torch.compile: not measured")
    failed = run([r("baseline", (10.0, 10.1)), {"variant": "torch.compile", "code": "c", "status": "failed: OOM"}])
    assert o.compile_summary(failed) == "torch.compile failed on this machine: failed: OOM"
    alone = o.compile_summary(run([r("torch.compile", (6.0, 6.1), first_step_s=30.0)]))
    assert alone == (
        "torch.compile: the first step took 30.0 s (the compilation), then 6.10 ms per step (the median of every timed "
        "step)"
    )


def test_the_compile_summary_of_the_committed_gpu_run():
    """The committed 2× H200 run (the earlier layout, one round each), read through the chapter's readers."""
    ref = o.reference_run()
    assert ref is not None
    text = o.compile_summary(ref)
    assert "the first step took 51.8 s (the compilation), then 40.85 ms per step (the rounds' median)" in text
    assert "each step saves 24.81 ms against the baseline (65.66 → 40.85 ms, the rounds' medians)" in text
    assert "after about 2,085 steps (2.3 min of the baseline's training)" in text


# --------------------------------------------------------------------------- what a rank prints
def test_dynamos_notice_about_ddps_profiler_range_is_dropped_and_nothing_else():
    """R1-16: torch.compile of the DDP model logs that it ignores DDP.forward's record_function range; the compiled
    variant drops that one line (the workload records no profiler trace), from the logger this torch logs it on."""
    import inspect
    import logging

    import torch._dynamo.variables.ctx_manager as ctx_manager
    from torch.nn.parallel import distributed

    from nvtutorial.chapters.ch04_optimisations import workload_train

    assert "Profiler record function %s will be ignored" in inspect.getsource(ctx_manager)
    assert 'record_function("DistributedDataParallel.forward")' in inspect.getsource(distributed)
    drop = workload_train._DropProfilerNotice()

    def record(msg):
        return logging.LogRecord(ctx_manager.__name__, logging.WARNING, "f", 1, msg, None, None)

    assert not drop.filter(record("Profiler record function %s will be ignored"))
    assert drop.filter(record("Graph break in user code")) and drop.filter(record("Profiler function %s"))


def test_the_compile_summary_names_the_field_an_ok_compiled_row_lacks():
    """A mutation survivor (final sample): the error names the missing field, first_step_s or step_ms."""
    for field in ("first_step_s", "step_ms"):
        rows = [r("baseline", (10.0, 10.1)), r("torch.compile", (6.0, 6.1), first_step_s=30.0)]
        rows[1][field] = None
        with pytest.raises(ValueError, match=f"the row of 'torch.compile' at per-GPU batch 8 has no {field}$"):
            o.compile_summary(run(rows))


def test_the_bucket_view_cell_says_its_bucket_count_is_the_construction_time_one(capsys, tmp_path):
    """RR5-4: DDP's logging data gives the buckets as assigned when wrapping, not those the .grad views live in
    (DDP can rebuild them), so the cell says "at construction" and does not tie the views to that count."""
    import torch
    import torch.distributed as dist

    from tests.helpers import notebook_cells

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        notebook_cells.run("04_optimisations", ["nb04-20"], torch=torch, device=torch.device("cpu"))
    finally:
        if created:
            dist.destroy_process_group()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for view, line in zip((False, True), lines):
        assert line.startswith(f"gradient_as_bucket_view={view}: DDP has ")
        assert " bucket(s) at construction; " in line and "views into DDP's buckets; " in line
        assert "views into them" not in line
    assert " 0 of " in lines[0] and " 0 of " not in lines[1]


H100 = ROOT / "reference" / "h100x1" / "runs"


def test_c11_fp16_with_a_scaler_and_bf16_are_faster_than_fp32():
    v = o.verdict_c11(REF["optimisations"])
    assert v.status == "partly" and v.numbers["fp16_status"] == "faster" and v.numbers["bf16_status"] == "faster"
    assert v.numbers["bf16_ratio"] < v.numbers["fp16_ratio"] < 0.9
    # the registry's figures: a 16 % and 19 % shorter step, that is 1.19x and 1.24x as fast
    assert v.numbers["fp16_ratio"] == pytest.approx(0.8435, abs=5e-4) and 1 / v.numbers["fp16_ratio"] == pytest.approx(
        1.19, abs=5e-3
    )
    assert v.numbers["bf16_ratio"] == pytest.approx(0.8080, abs=5e-4) and 1 / v.numbers["bf16_ratio"] == pytest.approx(
        1.24, abs=5e-3
    )


def test_c11_against_fp32_says_its_convolutions_ran_on_tf32():
    """R1-6: both committed GPU runs recorded TF32 convolutions (cuDNN's default): "fp32" is named so in C11 and the
    table. One H100: fp16 + GradScaler 17 %, bf16 19 % shorter steps than that fp32."""
    for run in (REF["optimisations"], RunResult.load(H100 / "train-20261207-025726-5b6fda" / "result.json")):
        v = o.verdict_c11(run)
        assert v.status == "partly" and v.numbers["tf32_convolutions"] is True and o.TF32_NOTE in v.text
        assert v.text.startswith("against fp32 (TF32 convolutions): fp16 + GradScaler")
        assert o.TF32_FP32 in list(o.knob_frame(run)["variant"])
    assert v.where.startswith("1× NVIDIA H100 80GB HBM3") and "torch 2.11.0" in v.where
    assert v.numbers["fp16_ratio"] == pytest.approx(76.47 / 92.07, abs=5e-4)
    assert v.numbers["bf16_ratio"] == pytest.approx(74.54 / 92.07, abs=5e-4)
    assert "C11" in claims.claim("C11").id and "TF32 convolutions" in claims.claim("C11").finding


def test_c9_the_same_cudnn_kernel_is_never_slower():
    """R1-7, RR13-9: on the H100 the attention block ran cuDNN's kernel with flash on and off; the 3.5 % between the
    two is drift (their repeats do not overlap), not "slower"; the UNet's A/A repeats overlap: noise."""
    v = o.verdict_c9(RunResult.load(H100 / "attention_sdp-20261207-025837-78c229" / "result.json"))
    kernel = "_scaled_dot_product_cudnn_attention"
    assert v.status == "wrong" and v.numbers["kernel_default"] == v.numbers["kernel_flash_off"] == kernel
    assert v.numbers["attention_aa_gap"] == pytest.approx(0.0345, abs=5e-4) and "slower" not in v.text
    assert (
        f"on {kernel} (the same kernel): 6.924 → 7.163 ms, a gap of 3.5% between two runs of the same kernel, drift "
        "between the two runs (the clock, temperature or the host: not recorded per setting; their repeats, "
        "6.746–6.976 and 7.086–7.248 ms, do not overlap)"
    ) in v.text
    assert "the 0.1% gap is this machine's noise at 10+10 repeats (their ranges overlap)" in v.text
    reference = o.verdict_c9(REF["attention"])  # medians only: nothing compared
    assert "(the same kernel): 6.86 → 6.87 ms (medians; their repeats were not kept)" in reference.text
    assert "attention_aa_gap" not in reference.numbers


def test_c11_fp16_not_faster_is_information_and_only_a_failed_training_is_wrong():
    curve = [1.0, 0.8, 0.6]
    rows = [
        {"variant": "fp32", "step_ms_rounds": [10.0, 10.05], "loss_curve": curve},
        {"variant": "fp16", "step_ms_rounds": [10.4, 10.45], "loss_curve": curve},
        {"variant": "baseline", "step_ms_rounds": [8.0, 8.05], "loss_curve": curve},
    ]
    v = o.verdict_c11(rows_run(rows))
    assert v.status == "info" and v.numbers["fp16_status"] == "slower" and v.numbers["fp16_trains"]
    assert v.numbers["fp16_ratio"] == pytest.approx(10.425 / 10.025)
    rows[1]["loss_curve"] = [1.0, float("nan"), float("nan")]
    assert o.verdict_c11(rows_run(rows)).status == "wrong"


def test_the_prediction_is_graded_beyond_the_noise_only():
    choices = o.CHOICES
    letter, text = o.prediction_answer(REF["optimisations"], choices, "f")
    assert letter == "e" and "one round each" in text
    assert set(o.REFERENCE_LARGEST) == set(choices.values())
    for name, change in o.REFERENCE_LARGEST.items():  # the reference quoted to a learner on a noisy run
        assert o.comparison(REF["optimisations"], name).change == pytest.approx(change, abs=0.001)
    v = o.grade_largest("e", REF["optimisations"])  # measured on GPUs: graded against itself
    assert v.status == "right" and v.where == REF["optimisations"].label
    # A run where every move is inside the noise ranks nothing: the answer is "none of these".
    noisy = rows_run(
        [
            {"variant": "baseline", "step_ms_rounds": [10.0, 11.5]},
            {"variant": "fp32", "step_ms_rounds": [9.0, 10.0]},
            {"variant": "channels_last", "step_ms_rounds": [8.8, 9.9]},
        ]
    )
    assert o.largest_change(noisy, ["fp32", "channels_last"]) is None
    letter, text = o.prediction_answer(noisy, choices, "f")
    assert letter == "f" and "channels_last" in text and "torch.compile -38%" in text
    assert "nor did any other variant of this run" in text


def test_the_reference_rows_are_one_round_not_repeats():
    v = o.verdict_c10(REF["optimisations"])
    assert "one round each: min/median/max of 8 steps" in v.text and "3+3 repeats" not in v.text


def test_c10_bucket_view_saves_one_gradient_copy_per_rank_before_the_step_not_at_the_peak():
    v = o.verdict_c10(REF["optimisations"])
    n = v.numbers
    assert v.status == "wrong" and n["step_status"] == "no change"
    assert len(n["saved_before_step_gb"]) == 2
    assert all(0.9 < s / n["gradient_copy_gb"] < 1.2 for s in n["saved_before_step_gb"])  # 0.130 GB against 0.124
    assert all(abs(d) < 0.01 * 13 for d in n["peak_change_gb"])


def test_c9_the_unet_calls_no_attention():
    v = o.verdict_c9(REF["attention"])
    assert v.status == "wrong" and v.numbers["unet_sdpa_calls"] == 0 and v.numbers["flash_default"] is True
    # On the H200 the same cuDNN kernel ran with flash on and off: the switch moved nothing.
    assert v.numbers["kernel_default"] == v.numbers["kernel_flash_off"] == "_scaled_dot_product_cudnn_attention"
    assert "unet_status" not in v.numbers


def _attention(on, off, again, calls=0):
    """One rank's attention_sdp result, typed, with the UNet's repeats ``on``, ``off`` and ``again`` (the attention
    block on the flash kernel either way)."""
    repeats = {
        "ms_flash_on": statistics.median(on),
        "ms_flash_on_all": on,
        "ms_flash_off": statistics.median(off),
        "ms_flash_off_all": off,
        "ms_flash_on_again": statistics.median(again),
        "ms_flash_on_again_all": again,
    }
    flash = ("_scaled_dot_product_flash_attention",)
    return attention(calls, default_ops=flash, off_ops=flash, unet=repeats)


def test_c9_a_unet_without_attention_times_the_noise_not_the_switch():
    # 7 % apart with 2 repeats: with no SDPA call in the model this is an A/A gap, never "faster".
    v = o.verdict_c9(_attention([9.6, 9.61], [8.93, 8.94], [9.2, 9.3]))
    assert v.status == "wrong" and "unet_status" not in v.numbers
    assert v.numbers["unet_aa_gap"] == pytest.approx(0.07, abs=0.005) and v.numbers["unet_repeats"] == [2, 2]
    assert "leaves the attention block on" in v.text
    with_attention = o.verdict_c9(_attention([9.6, 9.61], [8.93, 8.94], [9.6, 9.6], calls=2))
    assert with_attention.status == "info" and with_attention.numbers["unet_status"] == "faster"


@pytest.mark.parametrize(
    "variant, status",
    [
        ("fp32", "slower"),
        ("fp16", "slower"),
        ("gradient_as_bucket_view=True", "no change"),
        ("bucket_cap_mb=1", "no change"),
        ("bucket_cap_mb=5", "no change"),
        ("bucket_cap_mb=100", "no change"),
        ("static_graph=True", "no change"),
        ("no_sync accumulation", "slower"),
        ("accumulation without no_sync", "slower"),
        ("channels_last", "slower"),
        ("activation checkpointing", "slower"),
        ("torch.compile", "faster"),
    ],
)
def test_notebook_04_comparisons_on_the_reference(variant, status):
    c = o.comparison(REF["optimisations"], variant)
    assert c is not None and c.status == status, (variant, c)


def test_notebook_04_ddp_options_train_bit_for_bit_like_the_baseline():
    same = o.identical_losses(
        REF["optimisations"], ["gradient_as_bucket_view=True", "bucket_cap_mb=1", "static_graph=True", "fp32"]
    )
    assert same == {
        "gradient_as_bucket_view=True": True,
        "bucket_cap_mb=1": True,
        "static_graph=True": True,
        "fp32": False,
    }


def test_c8_set_enabled_lms_does_not_exist():
    v = o.verdict_c8()
    assert v.status == "wrong" and v.numbers["exists"] is False and v.numbers["error"].startswith("AttributeError")


def test_notebook_04s_prediction_without_a_gpu_is_graded_against_the_reference():
    cpu = gloo_run([])
    v = o.grade_largest("e", cpu)
    assert v.status == "right" and v.numbers["answer"] == "e" and v.where.endswith(o.REFERENCE_NOTE)
    assert "one round each: min/median/max of 8 steps" in v.text and "CPU simulation" in v.text
    assert o.grade_largest("c", cpu).status == "off"
    assert o.reference_run().label == REF["optimisations"].label
