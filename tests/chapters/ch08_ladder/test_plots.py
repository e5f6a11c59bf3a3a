"""Tests of nvtutorial/chapters/ch08_ladder/plots*.py."""

from __future__ import annotations

from typing import cast

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

from nvtutorial.chapters.ch08_ladder import plots as ladder_plots  # noqa: E402
from nvtutorial.chapters.ch08_ladder import report as ladder  # noqa: E402
from nvtutorial.results import RunResult  # noqa: E402
from tests.helpers.figure_runs import problems, said
from tests.helpers.paths import ROOT

matplotlib.use("Agg")


LADDER_CPU = ROOT / "reference/h200x1/runs/ladder-20261201-090801-c915c3/result.json"
"""Notebook 08's ladder on the CPU (gloo, 2 processes, the ci sizes), committed with the 1× H200 reference."""


@pytest.fixture(scope="module")
def ladder_run():
    return RunResult.load(LADDER_CPU)


def test_the_loss_figure_names_the_identical_rungs_and_draws_only_those_that_differ(ladder_run):
    fig, ax = ladder_plots.loss_differences(ladder_run, 1e-4)
    first = ladder.ranks(ladder_run)[0]
    diffs = {g.rung: any(a != b for a, b in zip(g.losses, ladder.reference_losses(first))) for g in first.rungs}
    same = [ladder.LABELS[r] for r, differ in diffs.items() if not differ]
    drawn = [line.get_label() for line in ax.get_lines() if not str(line.get_label()).startswith("_")]
    assert same and drawn == [ladder.LABELS[r] for r, differ in diffs.items() if differ]
    title = ax.get_title().replace("\n", " ")
    assert "identical at every step, bit for bit" in title and all(name in title for name in same)
    assert "tolerance 0.0001" in said(fig) and "tolerance" not in " ".join(ax.get_legend_handles_labels()[1])
    assert not any("$" in t.get_text() for t in ax.get_yticklabels()), "log ticks as powers of ten"
    assert "simulation" in said(fig) and not problems(fig), problems(fig)


def test_the_bytes_figure_draws_bars_from_zero_with_ddps_bytes_marked(ladder_run):
    table = ladder.bytes_table(ladder_run)
    fig, ax = ladder_plots.bytes_bars(table, ladder_run)
    bars = ax.patches
    assert len(bars) == len(table.index.get_level_values("rung").unique())
    starts = [(b.get_x(), b.get_width()) for b in bars if isinstance(b, Rectangle)]
    assert len(starts) == len(bars) and all(x == 0 and w > 0 for x, w in starts), (
        "a bar that does not start at zero hides its row"
    )
    per_rung = table["recorded (ring cost)"].groupby(level="rung", sort=False).max()
    assert isinstance(per_rung, pd.Series)
    ddp = per_rung.iloc[0]
    marks = [np.asarray(line.get_xdata())[0] for line in ax.get_lines()]
    assert any(abs(x - ddp) < 1e-12 for x in marks), "DDP's bytes are not marked"
    assert "1.00× DDP" in said(fig) and not problems(fig), problems(fig)


def test_without_a_gpu_the_largest_model_figure_leaves_out_the_offload_rung_and_says_why():
    setup = ladder.Setup(vocab=256, seq_len=32, dim=64, heads=4, layers=4, mlp_ratio=4, global_batch=8)
    fit = ladder.fit_table(setup, 8e6, 4e9)
    fig, ax = ladder_plots.fit_bars(fit, "a budget of 8 MB per rank", device_memory=False)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert ladder.LABELS["fsdp_offload"] not in labels and len(labels) == len(fit) - 1
    assert "not drawn: ZeRO-3 + ckpt + CPU offload" in ax.get_title().replace("\n", " ")
    assert all(" M" in t.get_text() or " B" in t.get_text() for t in ax.get_xticklabels() if t.get_text())
    assert "not measured" in said(fig) and not problems(fig), problems(fig)
    gpu_fig, gpu_ax = ladder_plots.fit_bars(fit, "119 GB per rank of NVIDIA H200")
    assert ladder.LABELS["fsdp_offload"] in [t.get_text() for t in gpu_ax.get_yticklabels()]
    assert not problems(gpu_fig), problems(gpu_fig)


def test_the_memory_model_figure_keeps_its_legend_off_the_bars():
    setup = ladder.Setup(vocab=256, seq_len=32, dim=64, heads=4, layers=4, mlp_ratio=4, global_batch=8)
    fig, ax = ladder_plots.memory_bars(setup)
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent(cast(FigureCanvasAgg, fig.canvas).get_renderer())
    assert not any(legend.overlaps(p.get_window_extent()) for p in ax.patches), "the legend covers a bar"
    assert "MB on rank 0" in ax.get_xlabel() and not problems(fig), problems(fig)
