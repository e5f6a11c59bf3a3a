"""Tests of nvtutorial/chapters/ch03_ddp_training/plots*.py."""

from __future__ import annotations

import dataclasses

import matplotlib
import pytest

from nvtutorial.chapters.ch03_ddp_training import plots as training_plots  # noqa: E402
from nvtutorial.chapters.ch03_ddp_training import report as training_report  # noqa: E402
from nvtutorial.chapters.ch03_ddp_training import schema as training_schema  # noqa: E402
from nvtutorial.results import typed  # noqa: E402
from tests.helpers.figure_runs import problems, said

matplotlib.use("Agg")


def _convention(batch: int, speedup: float, samples_per_s_2: float, ratio: float) -> training_report.Convention:
    """Two CPU ranks against one at per-GPU ``batch`` (512 samples/s alone, 0.1 GB counted), memory ``ratio`` each."""
    return training_report.Convention(
        per_gpu_batch=batch,
        global_batch=2 * batch,
        speedup=speedup,
        efficiency=speedup / 2,
        samples_per_s_1=512.0,
        samples_per_s_2=samples_per_s_2,
        memory_gb_per_rank=[0.1 * ratio] * 2,
        memory_ratio_per_rank=[ratio] * 2,
        comm_share=None,
        nosync_step_ms=None,
        step_ms=None,
    )


SCALING = training_report.ScalingSummary(
    memory="counted_gb",
    one_gpu_batch=8,
    one_gpu_how="rank 0 alone while the other rank waited",
    where="CPU",
    solo_memory_gb=0.1,
    ranks=2,
    cpu_threads=1,
    cpu_cores=2,
    fixed_per_gpu=_convention(8, 1.02, 523.8, 1.0),
    fixed_global=_convention(4, 0.54, 274.5, 0.93),
    solo_step_ms=None,
)


def _path(variant: str, **measured) -> training_report.PathRow:
    row = {"variant": variant, "code": "", "per_gpu_batch": 8, "world_size": 2, "global_batch": 16, "status": "ok"}
    return training_report.PathRow(typed(training_schema.Row, {**row, **measured}))


@pytest.mark.parametrize("gpu", [False, True])
def test_the_scaling_figure_shows_speed_up_against_the_limit_and_memory_against_one_and_half(gpu):
    summary = dataclasses.replace(SCALING, memory="peak_mem_gb" if gpu else "counted_gb")
    fig, (speed, memory) = training_plots.plot_scaling(summary, "GPUs" if gpu else "CPU, gloo: a simulation")
    assert [round(p.get_height(), 2) for p in speed.patches] == [1.02, 0.54]
    assert {round(line.get_ydata()[0], 2) for line in speed.get_lines()} == {1.0, 2.0}
    assert {round(line.get_ydata()[0], 2) for line in memory.get_lines()} == {0.5, 1.0}
    words = said(fig)
    assert ("1 GPU" in words) is gpu and ("1 process" in words) is not gpu
    assert "1.02× (51 % efficiency)" in words and "½: half" in words
    assert not problems(fig), problems(fig)


def test_the_source_table_figure_says_why_a_slot_is_empty():
    rows = {
        "1gpu": _path(training_report.SOLO, samples_per_s=100.0),
        "nvlink": _path("baseline", samples_per_s=98.0, comm_share=0.2),
        "host": None,
        "socket": None,
    }
    fig, axes = training_plots.plot_source_comparison(rows, "CPU, gloo: a simulation")
    assert said(fig).count("not run:") == 4  # host-staged and sockets, in both panels
    assert not problems(fig), problems(fig)
